use super::*;
use crate::graph::dag::Task;
use crate::graph::generate::SplitMix64;

fn bag(n: usize) -> TaskGraph {
    let mut g = TaskGraph::new();
    for i in 0..n {
        g.add_task(Task::new(format!("t{i}"), "x", 1.0));
    }
    g
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

#[test]
fn two_unrelated_machines_reach_the_known_optimum() {
    // a is fast on s0, b on s1, c and d cost 2 anywhere: the LP optimum is 3 (s0: a + c,
    // s1: b + d) and integral, so rounding must find it exactly.
    #[rustfmt::skip]
    let etc = EtcMatrix::new(4, 2, vec![
        1.0, 4.0,
        4.0, 1.0,
        2.0, 2.0,
        2.0, 2.0,
    ]).unwrap();
    let g = bag(4);
    let out = solve(&g, &etc, &CommModel::free(2)).unwrap();
    assert!(close(out.lower_bound_s, 3.0), "{}", out.lower_bound_s);
    assert!(close(out.makespan_s, 3.0), "{}", out.makespan_s);
    assert_eq!(out.mapping.server_of[..2], [0, 1]);
    assert_eq!(out.classes, 3);
}

#[test]
fn rounding_stays_within_max_etc_of_a_fractional_optimum() {
    // Without d the LP splits c in half: T* = 2; any integral mapping needs 3.
    #[rustfmt::skip]
    let etc = EtcMatrix::new(3, 2, vec![
        1.0, 4.0,
        4.0, 1.0,
        2.0, 2.0,
    ]).unwrap();
    let out = solve(&bag(3), &etc, &CommModel::free(2)).unwrap();
    assert!(close(out.lower_bound_s, 2.0), "{}", out.lower_bound_s);
    assert!(close(out.makespan_s, 3.0), "{}", out.makespan_s);
    assert!(close(lp_lower_bound(&etc).unwrap(), 2.0));
}

#[test]
fn identical_tasks_use_the_single_task_cut_and_slots() {
    // Three 2 s tasks on two servers: the load LP alone gives 3, the integral optimum is 4.
    let etc = EtcMatrix::new(3, 2, vec![2.0; 6]).unwrap();
    let out = solve(&bag(3), &etc, &CommModel::free(2)).unwrap();
    assert!(close(out.lower_bound_s, 3.0));
    assert!(close(out.makespan_s, 4.0));
    assert_eq!(out.classes, 1);
    // One huge task: the bound is at least its best time, not its time ÷ servers.
    let etc = EtcMatrix::new(1, 4, vec![8.0; 4]).unwrap();
    assert!(close(lp_lower_bound(&etc).unwrap(), 8.0));
    // Two slots on one server halve its load term.
    let etc = EtcMatrix::new(4, 1, vec![1.0; 4])
        .unwrap()
        .with_slots(vec![2])
        .unwrap();
    let out = solve(&bag(4), &etc, &CommModel::free(1)).unwrap();
    assert!(close(out.lower_bound_s, 2.0) && close(out.makespan_s, 2.0));
}

#[test]
fn never_places_on_an_infeasible_server() {
    let inf = f64::INFINITY;
    #[rustfmt::skip]
    let etc = EtcMatrix::new(4, 2, vec![
        1.0, inf,
        1.0, inf,
        1.0, inf,
        9.0, 1.0,
    ]).unwrap();
    let out = solve(&bag(4), &etc, &CommModel::free(2)).unwrap();
    assert_eq!(out.mapping.server_of, [0, 0, 0, 1]);
    let etc = EtcMatrix::new(1, 2, vec![inf, inf]).unwrap();
    assert_eq!(
        map(&bag(1), &etc, &CommModel::free(2)),
        Err(MapError::Infeasible { task: "t0".into() })
    );
}

#[test]
fn dags_are_refused_and_empty_bags_are_trivial() {
    let mut g = bag(2);
    g.add_edge(0, 1, 1).unwrap();
    let etc = EtcMatrix::new(2, 1, vec![1.0; 2]).unwrap();
    let err = map(&g, &etc, &CommModel::free(1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy lp maps only independent calls, but this graph has 1 dependencies; use heft"
    );
    let empty = EtcMatrix::new(0, 3, vec![]).unwrap();
    let out = solve(&TaskGraph::new(), &empty, &CommModel::free(3)).unwrap();
    assert_eq!((out.lower_bound_s, out.makespan_s), (0.0, 0.0));
    assert_eq!(out.mapping.order, vec![Vec::<usize>::new(); 3]);
}

/// Servers whose speed functions cross: even servers are fast on small tasks, odd ones on large.
fn crossing(tasks: usize, servers: usize, sizes: Option<usize>, seed: u64) -> EtcMatrix {
    let mut rng = SplitMix64::new(seed);
    let size: Vec<f64> = (0..tasks)
        .map(|_| match sizes {
            Some(k) => (1 + rng.below(k)) as f64 * 100.0 / k as f64,
            None => rng.uniform(1.0, 100.0),
        })
        .collect();
    EtcMatrix::from_fn(tasks, servers, |t, s| {
        let x = size[t];
        let per_unit = if s % 2 == 0 {
            0.02 + x / 2500.0
        } else {
            0.06 - x / 5000.0
        };
        x * per_unit * (1.0 + 0.1 * (s / 2) as f64)
    })
    .unwrap()
}

#[test]
fn crossing_bag_lands_within_a_few_percent_of_the_bound() {
    for sizes in [Some(10), None] {
        let etc = crossing(400, 8, sizes, 3);
        let out = solve(&bag(400), &etc, &CommModel::free(8)).unwrap();
        assert_eq!(out.bucket_width, 0.0);
        assert!(out.lower_bound_s <= out.makespan_s);
        let gap = out.makespan_s / out.lower_bound_s - 1.0;
        assert!(gap < 0.03, "{sizes:?}: {gap}");
        if sizes.is_some() {
            assert!(out.classes <= 10);
        }
    }
}

#[test]
fn oversize_lps_merge_rows_into_buckets_and_keep_a_valid_bound() {
    // 3,000 distinct rows x 8 servers = 24,000 variables > MAX_LP_VARS.
    let etc = crossing(3000, 8, None, 5);
    let out = solve(&bag(3000), &etc, &CommModel::free(8)).unwrap();
    assert!(out.bucket_width > 0.0);
    assert!(out.classes * 8 <= MAX_LP_VARS);
    assert!(out.lower_bound_s <= out.makespan_s);
    // Bucketing loosens the bound by at most (1 + width); rounding adds little on top.
    let gap = out.makespan_s / out.lower_bound_s - 1.0;
    assert!(
        gap < out.bucket_width + 0.03,
        "{gap} width {}",
        out.bucket_width
    );
}
