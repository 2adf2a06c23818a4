//! Cross-policy properties: replay invariants, valid mappings from every policy, the LP bound;
//! and (ignored by default) release-mode timings of the mapping goals.

use super::generate::{self, SplitMix64};
use super::*;
use proptest::prelude::*;
use std::time::Instant;

/// A random ETC matrix where each entry is infeasible with probability `p_inf`, but every task
/// keeps at least one feasible server.
fn etc_with_holes(graph: &TaskGraph, servers: usize, p_inf: f64, seed: u64) -> EtcMatrix {
    let base = generate::random_etc(graph, servers, 4.0, seed);
    let mut rng = SplitMix64::new(seed.wrapping_mul(31));
    let keep: Vec<usize> = (0..graph.len()).map(|_| rng.below(servers)).collect();
    EtcMatrix::from_fn(graph.len(), servers, |t, s| {
        if s != keep[t] && rng.unit() < p_inf {
            f64::INFINITY
        } else {
            base.get(t, s)
        }
    })
    .unwrap()
}

/// Link costs of the same order as the generated tasks (1–10 s at 1 Gflop/s).
fn comm(servers: usize) -> CommModel {
    CommModel::uniform(servers, 0.05, 5e6).unwrap()
}

fn all_policies(
    graph: &TaskGraph,
    etc: &EtcMatrix,
    comm: &CommModel,
) -> Vec<(GraphPolicy, Result<Mapping, MapError>)> {
    let rates = vec![1e9; etc.servers()];
    GraphPolicy::ALL
        .into_iter()
        .filter(|&p| p != GraphPolicy::Lp || graph.is_bag())
        .map(|p| (p, p.map(graph, etc, comm, Some(&rates))))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn one_server_makespan_is_total_work(n in 1usize..40, width in 1usize..6, seed: u64) {
        let g = generate::layered(n, width, 0.4, seed);
        let etc = generate::random_etc(&g, 1, 1.0, seed);
        let topo = g.topo_order().unwrap();
        let map = Mapping { server_of: vec![0; n], order: vec![topo] };
        let r = replay(&g, &etc, &comm(1), &map).unwrap();
        let total: f64 = (0..n).map(|t| etc.get(t, 0)).sum();
        prop_assert!((r.makespan_s - total).abs() <= 1e-9 * total);
        // And every policy agrees on one server.
        for (p, m) in all_policies(&g, &etc, &comm(1)) {
            let r = replay(&g, &etc, &comm(1), &m.unwrap()).unwrap();
            prop_assert!((r.makespan_s - total).abs() <= 1e-9 * total, "{p}");
        }
    }

    #[test]
    fn unlimited_identical_servers_and_free_comm_give_the_critical_path(
        n in 1usize..40, width in 1usize..6, seed: u64,
    ) {
        let g = generate::layered(n, width, 0.4, seed);
        let one = generate::random_etc(&g, 1, 1.0, seed);
        let etc = EtcMatrix::from_fn(n, n, |t, _| one.get(t, 0)).unwrap();
        let times: Vec<f64> = (0..n).map(|t| one.get(t, 0)).collect();
        let cp = critical_path_s(&g, &times).unwrap();
        let own = Mapping { server_of: (0..n).collect(), order: (0..n).map(|t| vec![t]).collect() };
        let free = CommModel::free(n);
        let r = replay(&g, &etc, &free, &own).unwrap();
        prop_assert!((r.makespan_s - cp).abs() <= 1e-9 * cp);
        // HEFT finds that schedule by itself.
        let h = replay(&g, &etc, &free, &GraphPolicy::Heft.map(&g, &etc, &free, None).unwrap()).unwrap();
        prop_assert!((h.makespan_s - cp).abs() <= 1e-9 * cp);
    }

    #[test]
    fn every_policy_maps_validly_and_respects_the_bounds(
        n in 1usize..60, width in 1usize..8, m in 1usize..6, p_edge in 0.0f64..0.6,
        p_inf in 0.0f64..0.7, slots in 1usize..3, seed: u64,
    ) {
        let g = generate::layered(n, width, p_edge, seed);
        let etc = etc_with_holes(&g, m, p_inf, seed).with_slots(vec![slots; m]).unwrap();
        let c = comm(m);
        let bounds = Bounds::of(&g, &etc).unwrap();
        for (p, mapping) in all_policies(&g, &etc, &c) {
            let mapping = mapping.unwrap();
            // replay checks each task is listed once on its server, never on an infinite ETC,
            // and that the server orders do not deadlock.
            let r = replay(&g, &etc, &c, &mapping);
            prop_assert!(r.is_ok(), "{p}: {:?}", r.err());
            let r = r.unwrap();
            prop_assert!(r.makespan_s >= bounds.lower_bound_s * (1.0 - 1e-9), "{p}");
        }
    }

    #[test]
    fn best_of_is_never_worse_than_heft_and_maps_validly(
        n in 1usize..60, width in 1usize..8, m in 1usize..6, p_edge in 0.0f64..0.6,
        p_inf in 0.0f64..0.5, slots in 1usize..3, seed: u64,
    ) {
        let g = generate::layered(n, width, p_edge, seed);
        let etc = etc_with_holes(&g, m, p_inf, seed).with_slots(vec![slots; m]).unwrap();
        let c = comm(m);
        let heft = replay(&g, &etc, &c, &GraphPolicy::Heft.map(&g, &etc, &c, None).unwrap())
            .unwrap()
            .makespan_s;
        let out = policy::best_of::solve(&g, &etc, &c).unwrap();
        // The full replay checks the mapping: every task once, feasible, no deadlock.
        let r = replay(&g, &etc, &c, &out.mapping).unwrap();
        prop_assert!((r.makespan_s - out.makespan_s).abs() <= 1e-9 * heft.max(1.0));
        prop_assert!(r.makespan_s <= heft * (1.0 + 1e-12), "{} > heft {heft}", r.makespan_s);
    }

    #[test]
    fn best_lower_bound_is_below_every_policy_with_multi_slot_servers(
        n in 1usize..40, width in 1usize..8, m in 1usize..5, p_edge in 0.0f64..0.6,
        p_inf in 0.0f64..0.5, max_slots in 1usize..4, seed: u64,
    ) {
        let g = generate::layered(n, width, p_edge, seed);
        let mut rng = SplitMix64::new(seed ^ 0xb0);
        let slots: Vec<usize> = (0..m).map(|_| 1 + rng.below(max_slots)).collect();
        let etc = etc_with_holes(&g, m, p_inf, seed).with_slots(slots).unwrap();
        let c = comm(m);
        let lower = best_lower_bound(&g, &etc, None).unwrap();
        prop_assert!(lower.lp_s.is_some());
        prop_assert!(lower.seconds >= Bounds::of(&g, &etc).unwrap().lower_bound_s);
        for (p, mapping) in all_policies(&g, &etc, &c) {
            let r = replay(&g, &etc, &c, &mapping.unwrap()).unwrap();
            prop_assert!(
                r.makespan_s >= lower.seconds * (1.0 - 1e-7),
                "{p}: {} < {} ({})", r.makespan_s, lower.seconds, lower.kind
            );
        }
    }

    #[test]
    fn lp_bound_is_below_every_policy_on_bags(
        n in 1usize..60, m in 1usize..6, p_inf in 0.0f64..0.5, seed: u64,
    ) {
        let g = generate::bag(n, seed);
        let etc = etc_with_holes(&g, m, p_inf, seed);
        let c = comm(m);
        let out = policy::lp::solve(&g, &etc, &c).unwrap();
        let bound = out.lower_bound_s;
        prop_assert!(bound >= Bounds::of(&g, &etc).unwrap().lower_bound_s * (1.0 - 1e-9));
        // LST rounding: at most one task beyond T* per server, so within the largest ETC used.
        let worst = (0..n).map(|t| etc.get(t, out.mapping.server_of[t])).fold(0.0, f64::max);
        prop_assert!(out.makespan_s <= bound + worst + 1e-9 * bound);
        for (p, mapping) in all_policies(&g, &etc, &c) {
            let r = replay(&g, &etc, &c, &mapping.unwrap()).unwrap();
            prop_assert!(r.makespan_s >= bound * (1.0 - 1e-7), "{p}: {} < {bound}", r.makespan_s);
        }
    }
}

#[test]
fn edges_against_submission_order_are_mapped_in_dependency_order() {
    // t3 -> t2 -> t1 -> t0: submitted backwards.
    let mut g = TaskGraph::new();
    for i in 0..4 {
        g.add_task(Task::new(format!("t{i}"), "x", 1.0));
    }
    for i in 1..4 {
        g.add_edge(i, i - 1, 1_000).unwrap();
    }
    let etc = EtcMatrix::new(4, 2, vec![1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 1.0]).unwrap();
    let c = comm(2);
    for (p, m) in all_policies(&g, &etc, &c) {
        let r = replay(&g, &etc, &c, &m.unwrap()).unwrap();
        assert!(r.task_finish[0] > r.task_finish[1], "{p}");
        assert!(r.task_finish[1] > r.task_finish[2], "{p}");
    }
}

#[test]
fn default_policy_maps_the_generated_shapes() {
    let chol = generate::cholesky(6, 128);
    let hydro = generate::hydropad(4, 64, 64);
    let bag = generate::bag(30, 1);
    for (g, want) in [
        (&chol, GraphPolicy::BestOf),
        (&hydro, GraphPolicy::BestOf),
        (&bag, GraphPolicy::Lp),
    ] {
        assert_eq!(GraphPolicy::default_for(g), want);
        let etc = generate::random_etc(g, 4, 3.0, 9);
        let m = want.map(g, &etc, &comm(4), None).unwrap();
        let r = replay(g, &etc, &comm(4), &m).unwrap();
        let rr = replay(
            g,
            &etc,
            &comm(4),
            &GraphPolicy::RoundRobin
                .map(g, &etc, &comm(4), None)
                .unwrap(),
        )
        .unwrap();
        assert!(
            r.makespan_s <= rr.makespan_s,
            "{want} worse than round robin"
        );
    }
}

/// The memory-hungry darkmatter goes only where its memory fits, even though the other server is
/// twice as fast.
#[test]
fn hydropad_memory_lesson() {
    let g = generate::hydropad(3, 64, 64);
    // s0 fast but small memory, s1 half as fast with room for everything.
    let mem = [
        g.task(3).mem_bytes, // barmatter fits on s0, darkmatter does not
        u64::MAX,
    ];
    let rates = [2e9, 1e9];
    let mut etc = EtcMatrix::from_fn(g.len(), 2, |t, s| g.task(t).work / rates[s]).unwrap();
    etc.exclude_by_memory(&g, &mem).unwrap();
    let c = comm(2);
    let heft = GraphPolicy::Heft.map(&g, &etc, &c, None).unwrap();
    for t in 0..g.len() {
        if g.task(t).service == "darkmatter" {
            assert_eq!(heft.server_of[t], 1, "{}", g.task(t).name);
        }
    }
    assert!(replay(&g, &etc, &c, &heft).is_ok());
}

/// Release-mode timings for the mapping goals; run with
/// `cargo test --release -p gridwise-sched -- --ignored --nocapture`.
#[test]
#[ignore]
fn timings() {
    let g = generate::layered(10_000, 100, 0.05, 1);
    let etc = generate::random_etc(&g, 100, 8.0, 2);
    let c = comm(100);
    println!(
        "layered DAG: {} tasks, {} edges, 100 servers",
        g.len(),
        g.edge_count()
    );
    for p in [
        GraphPolicy::Heft,
        GraphPolicy::BestOf,
        GraphPolicy::Peft,
        GraphPolicy::Mct,
        GraphPolicy::MinMin,
        GraphPolicy::Sufferage,
        GraphPolicy::RoundRobin,
    ] {
        let t0 = Instant::now();
        let m = p.map(&g, &etc, &c, None).unwrap();
        let map_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let r = replay(&g, &etc, &c, &m).unwrap();
        println!(
            "  {p:>12}: map {map_ms:8.1} ms, replay {:6.1} ms, makespan {:9.1} s",
            t1.elapsed().as_secs_f64() * 1e3,
            r.makespan_s
        );
    }
    let b = Bounds::of(&g, &etc).unwrap();
    println!("  bounds: {b:?}");

    // 2,000 independent calls on 8 servers with crossing speed functions.
    for (label, distinct) in [("10 sizes", Some(10usize)), ("continuous sizes", None)] {
        let mut rng = SplitMix64::new(11);
        let size: Vec<f64> = (0..2000)
            .map(|_| match distinct {
                Some(k) => (1 + rng.below(k)) as f64 * 100.0 / k as f64,
                None => rng.uniform(1.0, 100.0),
            })
            .collect();
        let etc = EtcMatrix::from_fn(2000, 8, |t, s| {
            let x = size[t];
            let per_unit = if s % 2 == 0 {
                0.02 + x / 2500.0
            } else {
                0.06 - x / 5000.0
            };
            x * per_unit * (1.0 + 0.1 * (s / 2) as f64)
        })
        .unwrap();
        let bag = generate::bag(2000, 3);
        let c = CommModel::free(8);
        let t0 = Instant::now();
        let out = policy::lp::solve(&bag, &etc, &c).unwrap();
        println!(
            "bag 2000 x 8, {label}: lp {:.1} ms, {} classes, width {}, T* {:.3}, makespan {:.3} (+{:.2}%)",
            t0.elapsed().as_secs_f64() * 1e3,
            out.classes,
            out.bucket_width,
            out.lower_bound_s,
            out.makespan_s,
            100.0 * (out.makespan_s / out.lower_bound_s - 1.0)
        );
        for p in [
            GraphPolicy::Heft,
            GraphPolicy::MinMin,
            GraphPolicy::Sufferage,
            GraphPolicy::Mct,
            GraphPolicy::RoundRobin,
        ] {
            let t0 = Instant::now();
            let m = p.map(&bag, &etc, &c, None).unwrap();
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let r = replay(&bag, &etc, &c, &m).unwrap();
            println!(
                "  {p:>12}: {ms:7.1} ms, makespan {:.3} (+{:.1}% over T*)",
                r.makespan_s,
                100.0 * (r.makespan_s / out.lower_bound_s - 1.0)
            );
        }
    }
}
