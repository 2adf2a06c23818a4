use super::*;
use gridwise_predict::Stoch;
use proptest::prelude::*;

/// A server computing `speed` units/s, each part costing `fixed` s more.
fn linear(speed: f64, fixed: f64) -> impl Fn(u64) -> Stoch {
    move |x: u64| Stoch::point(fixed + x as f64 / speed)
}

/// A server that computes at `speed` up to `knee` units, then pages at a hundredth of it.
fn paging(speed: f64, knee: u64) -> impl Fn(u64) -> Stoch {
    move |x: u64| {
        let s = if x <= knee { speed } else { speed / 100.0 };
        Stoch::point(x as f64 / s)
    }
}

fn worker<'a>(id: usize, time: &'a dyn Fn(u64) -> Stoch, rate: f64) -> Worker<'a> {
    Worker {
        id,
        time,
        cap: u64::MAX,
        rate,
        comm_s: 0.0,
        comm_sd_s: 0.0,
    }
}

fn units_of(p: &DividePlan, id: usize) -> u64 {
    p.parts.iter().find(|x| x.id == id).map_or(0, |x| x.units)
}

const POLICIES: [DividePolicy; 4] = [
    DividePolicy::Fpm,
    DividePolicy::Lp,
    DividePolicy::ConstantSpeed,
    DividePolicy::Even,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn parts_always_sum_to_the_job_and_respect_caps(
        n in 1u64..50_000,
        servers in prop::collection::vec((1.0f64..1000.0, 0.0f64..2.0, 1u64..40_000), 1..6),
        policy in 0usize..4,
        select in 0usize..3,
    ) {
        let times: Vec<_> = servers.iter().map(|&(s, f, _)| linear(s, f)).collect();
        let workers: Vec<Worker<'_>> = servers
            .iter()
            .enumerate()
            .map(|(j, &(s, _, cap))| Worker { cap, ..worker(j, &times[j], s) })
            .collect();
        let capacity: u64 = servers.iter().map(|s| s.2).sum();
        let selection = [Selection::Best, Selection::All, Selection::Count(2)][select];
        let policy = POLICIES[policy];
        match plan(n, &workers, policy, selection) {
            Ok(p) => {
                prop_assert_eq!(p.parts.iter().map(|x| x.units).sum::<u64>(), n);
                if matches!(policy, DividePolicy::Fpm | DividePolicy::Lp) {
                    for part in &p.parts {
                        prop_assert!(part.units <= servers[part.id].2, "{:?}", p);
                    }
                }
            }
            Err(DivideError::TooLarge { .. }) => {
                // Only when the servers tried cannot hold it.
                prop_assert!(capacity < n || !matches!(selection, Selection::All));
            }
            Err(e) => prop_assert!(false, "{e}"),
        }
    }
}

#[test]
fn a_paging_server_gets_less_under_fpm_and_lp_than_under_constant_speed() {
    let (fast, pager) = (linear(100.0, 0.0), paging(200.0, 300));
    let w = [worker(0, &fast, 100.0), worker(1, &pager, 200.0)];
    let n = 1200;
    let cs = plan(n, &w, DividePolicy::ConstantSpeed, Selection::All).unwrap();
    // Constant speeds give the pager 800 units: deep in its paging, 300 s and more.
    assert_eq!(units_of(&cs, 1), 800);
    for policy in [DividePolicy::Fpm, DividePolicy::Lp] {
        let p = plan(n, &w, policy, Selection::All).unwrap();
        assert!(units_of(&p, 1) <= 300, "{policy:?}: {p:?}");
        assert!(
            p.makespan.0 < cs.makespan.0 / 5.0,
            "{policy:?}: {p:?} vs {cs:?}"
        );
    }
}

#[test]
fn memory_caps_hold_and_an_infeasible_balance_relaxes() {
    // A fast server that may take only 10 units cannot finish when the others do: a 5%
    // balance is infeasible, the slack grows instead of the plan failing.
    let (a, b) = (linear(1000.0, 0.0), linear(10.0, 0.0));
    let w = [
        Worker {
            cap: 10,
            ..worker(0, &a, 1000.0)
        },
        worker(1, &b, 10.0),
    ];
    let p = plan(200, &w, DividePolicy::Lp, Selection::All).unwrap();
    assert_eq!(units_of(&p, 0), 10);
    assert_eq!(units_of(&p, 1), 190);
    assert!(p.slack.unwrap() > 0.05, "{p:?}");
    // Too large for both together: said so.
    let e = plan(
        10_000,
        &[Worker {
            cap: 10,
            ..worker(0, &a, 1.0)
        }],
        DividePolicy::Lp,
        Selection::All,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            DivideError::TooLarge {
                units: 10_000,
                capacity: 10
            }
        ),
        "{e}"
    );
}

#[test]
fn selection_drops_a_server_whose_communication_outweighs_its_speed() {
    let times: Vec<_> = (0..4).map(|_| linear(100.0, 0.0)).collect();
    let far = linear(120.0, 0.0);
    let mut w: Vec<Worker<'_>> = times
        .iter()
        .enumerate()
        .map(|(j, t)| Worker {
            comm_s: 0.1,
            comm_sd_s: 0.0,
            ..worker(j, t, 100.0)
        })
        .collect();
    // Faster, but every iteration costs it 30 s of talking to its neighbours.
    w.push(Worker {
        comm_s: 30.0,
        comm_sd_s: 0.0,
        ..worker(4, &far, 120.0)
    });
    let p = plan(4000, &w, DividePolicy::Lp, Selection::Best).unwrap();
    assert_eq!(units_of(&p, 4), 0, "{p:?}");
    assert_eq!(p.parts.len(), 4, "{p:?}");
    // Forced to take all, the plan still gives it little.
    let all = plan(4000, &w, DividePolicy::Lp, Selection::All).unwrap();
    assert!(all.makespan.0 > p.makespan.0, "{all:?} vs {p:?}");
}

#[test]
fn one_server_is_best_when_parts_cost_more_than_they_save() {
    // Talking to neighbours costs 5 s an iteration: a small job is best kept whole.
    let times: Vec<_> = (0..3).map(|_| linear(1000.0, 0.0)).collect();
    let w: Vec<Worker<'_>> = times
        .iter()
        .enumerate()
        .map(|(j, t)| Worker {
            comm_s: 5.0,
            comm_sd_s: 0.0,
            ..worker(j, t, 1000.0)
        })
        .collect();
    let p = plan(100, &w, DividePolicy::Fpm, Selection::Best).unwrap();
    assert_eq!(p.parts.len(), 1);
    let big = plan(100_000, &w, DividePolicy::Fpm, Selection::Best).unwrap();
    assert_eq!(big.parts.len(), 3);
    assert_eq!(
        plan(100, &w, DividePolicy::Even, Selection::Count(2))
            .unwrap()
            .parts
            .len(),
        2
    );
}

/// What a model learned of a sharp cliff from sizes 50 apart: fast at 500, a tenth at 550,
/// a straight line between. Per unit, 505 is only 10% slower on that line, but the real
/// cliff may be a step at 501: the part stops at the last size measured fast.
fn learned_cliff(x: u64) -> f64 {
    let x = x as f64;
    let s = if x <= 500.0 {
        3000.0
    } else if x >= 550.0 {
        300.0
    } else {
        3000.0 - 2700.0 * (x - 500.0) / 50.0
    };
    x / s
}

#[test]
fn a_part_stops_where_a_models_fall_starts_not_part_way_down_it() {
    let model = |x: u64| Stoch::point(0.002 + learned_cliff(x));
    let flat = linear(3000.0, 0.002);
    assert_eq!(balance::knee(&worker(0, &model, 3000.0), 8000), 500);
    assert_eq!(balance::knee(&worker(1, &flat, 3000.0), 8000), 8000);
}

/// A queue to wait in makes every part cost 50 ms more: per unit, 512 units then look cheaper
/// than 256 although 512 is past the fall. Past the model's largest size (4000) the estimate
/// is fast again (the calibrated rate stood in there): the first cliff still counts.
#[test]
fn a_fixed_cost_or_a_fast_estimate_past_the_model_hides_no_cliff() {
    let waiting = |x: u64| Stoch::point(0.05 + learned_cliff(x));
    assert_eq!(balance::knee(&worker(0, &waiting, 3000.0), 8000), 500);
    let fast_again = |x: u64| {
        Stoch::point(
            0.002
                + if x > 4000 {
                    x as f64 / 3000.0
                } else {
                    learned_cliff(x)
                },
        )
    };
    assert_eq!(balance::knee(&worker(0, &fast_again, 3000.0), 8000), 500);
}

/// A model whose fast sizes differ by a few percent (noise) has no cliff there; a gentle
/// decline (cache effects) is no cliff either.
#[test]
fn noise_and_a_gentle_decline_are_no_cliff() {
    let noisy = |x: u64| {
        let wobble = 1.0 + 0.03 * ((x as f64) / 37.0).sin();
        Stoch::point(0.002 + x as f64 / (3000.0 * wobble))
    };
    assert_eq!(balance::knee(&worker(0, &noisy, 3000.0), 8000), 8000);
    let declining = |x: u64| Stoch::point(0.002 + x as f64 / (3000.0 - 0.05 * x as f64));
    assert_eq!(balance::knee(&worker(0, &declining, 3000.0), 8000), 8000);
}

/// Two sites of two servers, 1000 units/s each: 10 ms to exchange rows inside a site, 200 ms
/// across. The plan lays each site's servers side by side (one slow crossing); a small job
/// stays in one site, a large one takes all four, and each part's exchange is the dearer of
/// its neighbours'.
#[test]
fn a_slab_leaves_a_site_behind_a_slow_link_out_until_the_job_is_large() {
    let t = linear(1000.0, 0.001);
    // Indices 0 and 2 in one site, 1 and 3 in the other: the chain must regroup them.
    let site = |i: usize| i % 2;
    let ex = |a: usize, b: usize| Stoch::point(if site(a) == site(b) { 0.01 } else { 0.2 });
    let workers: Vec<Worker<'_>> = (0..4)
        .map(|j| Worker {
            comm_s: (0.01 + 2.0 * 0.2) / 3.0,
            comm_sd_s: 0.0,
            ..worker(j, &t, 1000.0)
        })
        .collect();
    let small = plan_slab(200, &workers, Some(&ex), DividePolicy::Fpm, Selection::Best).unwrap();
    assert_eq!(small.parts.len(), 2, "{small:?}");
    let ids: Vec<usize> = small.parts.iter().map(|p| p.id).collect();
    assert_eq!(site(ids[0]), site(ids[1]), "{small:?}");
    assert!(small.parts.iter().all(|p| (p.comm_s - 0.01).abs() < 1e-12));
    let large = plan_slab(
        20_000,
        &workers,
        Some(&ex),
        DividePolicy::Fpm,
        Selection::Best,
    )
    .unwrap();
    assert_eq!(large.parts.len(), 4, "{large:?}");
    let sites: Vec<usize> = large.parts.iter().map(|p| site(p.id)).collect();
    assert!(
        sites[0] == sites[1] && sites[2] == sites[3] && sites[1] != sites[2],
        "{sites:?}"
    );
    let comm: Vec<f64> = large.parts.iter().map(|p| p.comm_s).collect();
    assert_eq!(comm, vec![0.01, 0.2, 0.2, 0.01]);
    // The parts on the slow crossing pay for it with fewer units.
    assert!(large.parts[1].units < large.parts[0].units, "{large:?}");
    // Every host, as `all` asks: the parts beside the crossing would pay more than the job
    // takes, get no rows, and their neighbours meet across it.
    let all = plan_slab(200, &workers, Some(&ex), DividePolicy::Fpm, Selection::All).unwrap();
    assert!(
        all.parts.iter().all(|p| (p.comm_s - 0.2).abs() < 1e-12),
        "{all:?}"
    );
    assert!(
        all.makespan.0 > 1.3 * small.makespan.0,
        "{all:?} vs {small:?}"
    );
}

/// The same two sites at 450 units, where the four hosts' balanced parts (0.219 s) beat one
/// site's two (0.236 s) on the means. But a step waits for its latest part, and the crossing's
/// 200 ms varies by 50 ms from step to step: the parts beside it finish past 0.24 s on
/// average, so the plan keeps to one site, and says when the four would really end.
#[test]
fn a_slab_step_waits_for_its_latest_part_so_jitter_on_the_crossing_keeps_a_site_out() {
    let t = linear(1000.0, 0.001);
    let site = |i: usize| i % 2;
    let steady = |a: usize, b: usize| Stoch::point(if site(a) == site(b) { 0.01 } else { 0.2 });
    let jittery = |a: usize, b: usize| {
        if site(a) == site(b) {
            Stoch::new(0.01, 0.001)
        } else {
            Stoch::new(0.2, 0.05)
        }
    };
    let workers: Vec<Worker<'_>> = (0..4).map(|j| worker(j, &t, 1000.0)).collect();
    let plan = |ex: Exchange<'_>, selection| {
        plan_slab(450, &workers, Some(ex), DividePolicy::Fpm, selection).unwrap()
    };
    let on_means = plan(&steady, Selection::Best);
    assert_eq!(on_means.parts.len(), 4, "{on_means:?}");
    let waited = plan(&jittery, Selection::Best);
    assert_eq!(waited.parts.len(), 2, "{waited:?}");
    let all = plan(&jittery, Selection::All);
    let slowest = all.parts.iter().map(|p| p.time.0).fold(0.0, f64::max);
    // Parts at about 0.219 s; the two at the crossing each wait for a draw of it, ± 0.05,
    // which the steady parts cut off below: the latest of two such draws and a steady part
    // at the same mean ends 0.68 σ ≈ 34 ms past (more than the two draws alone, σ/√π ≈
    // 28 ms), a little less where the balance leaves the parts apart.
    assert!(
        all.makespan.0 > slowest + 0.028 && all.makespan.0 < slowest + 0.04,
        "{all:?}"
    );
    assert!(all.makespan.0 > waited.makespan.0, "{all:?} vs {waited:?}");
}

/// A model learned from a few short calls on a busy host: one point 30% slow (a part that
/// waited for a core), the speed flat on either side. No cliff: the part is not capped there.
#[test]
fn one_slow_point_of_a_model_is_no_cliff() {
    let bumpy = |x: u64| {
        let s = if (120..=140).contains(&x) {
            1400.0
        } else {
            2000.0
        };
        Stoch::point(0.003 + x as f64 / s)
    };
    assert_eq!(balance::knee(&worker(0, &bumpy, 2000.0), 3200), 3200);
}

/// The slab bench's model of a server on the test bed (2·10⁸ op/s, 10⁵ op a row): 1 row took
/// 1.0 ms, 2 rows 1.2 ms (a call's overhead and timer slack), larger parts as fast as the
/// server is, and every part pays an 84 ms exchange. The small sizes' noise is no cliff: the
/// part was capped at 2 rows, and the other servers took 1,000 rows each where 800 was even.
#[test]
fn the_smallest_sizes_noise_is_no_cliff() {
    let points = [
        (1.0, 9.9e7),
        (2.0, 1.65e8),
        (25.0, 1.97e8),
        (125.0, 1.994e8),
        (325.0, 1.998e8),
    ];
    let speed = |x: f64| {
        let i = points
            .iter()
            .position(|p| p.0 >= x)
            .unwrap_or(points.len() - 1);
        if i == 0 || points[i].0 <= x {
            return points[i].1;
        }
        let (a, b) = (points[i - 1], points[i]);
        a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
    };
    let model = |x: u64| Stoch::point(0.084 + x as f64 * 1e5 / speed(x as f64));
    assert_eq!(balance::knee(&worker(0, &model, 2000.0), 3200), 3200);
    let alone = |x: u64| Stoch::point(x as f64 * 1e5 / speed(x as f64));
    assert_eq!(balance::knee(&worker(0, &alone, 2000.0), 3200), 3200);
}

/// Two hosts in two sites: each part pulls the other's rows across the one crossing, at the
/// same time in opposite directions, each pull a draw of its own: the step ends with the later
/// of two, σ/√π (28 ms) past the parts' balanced time, with the spread of a maximum of two,
/// σ·√(1 − 1/π).
#[test]
fn the_two_parts_at_a_crossing_each_wait_for_their_own_pull() {
    let t = linear(1000.0, 0.0);
    let across = |_: usize, _: usize| Stoch::new(0.2, 0.05);
    let workers: Vec<Worker<'_>> = (0..2).map(|j| worker(j, &t, 1000.0)).collect();
    let plan = plan_slab(
        400,
        &workers,
        Some(&across),
        DividePolicy::Fpm,
        Selection::All,
    )
    .unwrap();
    assert_eq!(plan.parts.len(), 2, "{plan:?}");
    let slowest = plan.parts.iter().map(|p| p.time.0).fold(0.0, f64::max);
    let past = 0.05 / std::f64::consts::PI.sqrt();
    assert!((plan.makespan.0 - slowest - past).abs() < 1e-3, "{plan:?}");
    let sd = 0.05 * (1.0 - 1.0 / std::f64::consts::PI).sqrt();
    assert!((plan.makespan.1 - sd).abs() < 1e-3, "{plan:?}");
}
