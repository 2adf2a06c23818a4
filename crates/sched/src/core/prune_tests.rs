//! Pruned MCT ranking against the full scan: `explain` still estimates every server, so
//! `rank`'s candidates must be exactly `explain`'s first `max_candidates` at the same moment.

use super::*;
use crate::testutil::{dgemm, echo, registration};
use gridwise_proto::{LinkSample, LoadSample, ModelPoint, PointSource, PointStats, Ticket, Timing};
use proptest::prelude::*;

/// 1e9 and the next double up: most works divide by them to the same time, so bounds tie
/// with totals of servers of another rate.
const NEXT_UP_1E9: f64 = f64::from_bits(1e9f64.to_bits() + 1);
const RATES: [f64; 8] = [1e9, NEXT_UP_1E9, 2e9, 3e9, 5e8, 0.0, f64::NAN, 1e9];
const OWN: [Option<f64>; 4] = [None, None, Some(4e9), Some(0.0)];
const SPEEDS: [f64; 6] = [0.0, 1e8, 1e9, 3e9, 8e9, 2e10];

#[derive(Clone, Debug)]
struct ServerPlan {
    key: u8,
    rate: usize,
    own: usize,
    down: bool,
    load: Option<f64>,
    points: Vec<(i64, i64, i64, usize)>,
    assumed_zero: Option<i64>,
    slots: u32,
}

fn server_plan() -> impl Strategy<Value = ServerPlan> {
    server_plan_with(false)
}

/// Servers of which most have a model (`models`) or most have none.
fn server_plan_with(models: bool) -> impl Strategy<Value = ServerPlan> {
    (
        any::<u8>(),
        0..RATES.len(),
        0..OWN.len(),
        prop::bool::weighted(0.15),
        prop::option::weighted(0.2, 0.0f64..3.0),
        prop::collection::vec((1i64..400, 1i64..400, 1i64..400, 0..SPEEDS.len()), 0..4),
        prop::option::weighted(0.2, 100i64..500),
        prop_oneof![4 => Just(1u32), 1 => 2u32..4],
    )
        .prop_map(
            move |(key, rate, own, down, load, mut points, assumed_zero, slots)| {
                // Most servers have no model (their bound is the rate), or most have one (their
                // bound is the model's speed at the call's sizes).
                if (key % 3 != 0) != models {
                    points.clear();
                }
                ServerPlan {
                    key,
                    rate,
                    own,
                    down,
                    load,
                    points,
                    assumed_zero,
                    slots,
                }
            },
        )
}

#[derive(Clone, Debug)]
enum Step {
    /// Rank a dgemm call (m, n, k, in, out, remote holders by server index, release after).
    Rank(i64, i64, i64, u64, u64, Vec<(usize, u64)>, bool),
    /// A builder point arrives for a server after the rate order was built.
    Point(usize, i64, usize),
    /// A real call reports, becoming an online model point.
    Report(usize, i64, f64),
    /// A server measures a link to another.
    Link(usize, usize, f64, f64),
    /// Rank an echo call (no complexity: no pruning).
    Echo,
    /// Time passes (milliseconds): queued calls finish, waits shrink.
    Wait(u64),
    /// A server registers late, with this rate: the orders are rebuilt over queues already
    /// holding calls.
    Join(usize),
    /// A call ranked earlier and kept is given back (its queue shrinks).
    Finish(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (
            1i64..500,
            1i64..500,
            1i64..500,
            prop_oneof![Just(0u64), 0u64..10_000_000],
            prop_oneof![Just(0u64), 0u64..10_000_000],
            prop::collection::vec((0usize..40, 0u64..50_000_000), 0..3),
            any::<bool>(),
        )
            .prop_map(|(m, n, k, i, o, r, rel)| Step::Rank(m, n, k, i, o, r, rel)),
        1 => (0usize..40, 1i64..400, 0..SPEEDS.len()).prop_map(|(s, n, v)| Step::Point(s, n, v)),
        1 => (0usize..40, 1i64..400, 1e-4f64..1.0).prop_map(|(s, n, t)| Step::Report(s, n, t)),
        1 => (0usize..40, 0usize..40, 0.0f64..1e-2, 1e6f64..1e10)
            .prop_map(|(a, b, l, w)| Step::Link(a, b, l, w)),
        1 => Just(Step::Echo),
        1 => (0u64..3_000).prop_map(Step::Wait),
        1 => (0..RATES.len()).prop_map(Step::Join),
        2 => any::<usize>().prop_map(Step::Finish),
    ]
}

/// Sizes from a few classes, so that the cached bounds of a class are reused across reports,
/// points and queued assignments.
const CLASS_SIZES: [i64; 5] = [100, 150, 200, 300, 450];

fn step_in_classes() -> impl Strategy<Value = Step> {
    let size = || 0..CLASS_SIZES.len();
    prop_oneof![
        6 => (
            size(),
            size(),
            prop_oneof![Just(0u64), 0u64..10_000_000],
            prop::collection::vec((0usize..40, 0u64..50_000_000), 0..2),
            prop::bool::weighted(0.3),
        )
            .prop_map(|(a, b, i, r, rel)| {
                let (x, y) = (CLASS_SIZES[a], CLASS_SIZES[b]);
                Step::Rank(x, y, x, i, i / 2, r, rel)
            }),
        2 => (0usize..40, size(), 0..SPEEDS.len())
            .prop_map(|(s, n, v)| Step::Point(s, CLASS_SIZES[n], v)),
        2 => (0usize..40, size(), 1e-4f64..1.0)
            .prop_map(|(s, n, t)| Step::Report(s, CLASS_SIZES[n], t)),
        1 => (0usize..40, 0usize..40, 0.0f64..1e-2, 1e6f64..1e10)
            .prop_map(|(a, b, l, w)| Step::Link(a, b, l, w)),
        1 => (0u64..300).prop_map(Step::Wait),
        1 => (0..RATES.len()).prop_map(Step::Join),
        2 => any::<usize>().prop_map(Step::Finish),
    ]
}

fn stats(speed: f64) -> PointStats {
    PointStats {
        sd: 0.0,
        count: 1,
        min: speed * 0.9,
        mean: speed,
        max: speed * 1.1,
    }
}

fn dgemm_point(x: Vec<i64>, speed: f64) -> ModelPoint {
    ModelPoint {
        service: "dgemm".into(),
        x,
        stats: stats(speed),
        source: PointSource::Benchmark,
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Ranks `profile` and checks it against the full scan; the ticket when it is kept.
fn check(c: &mut AgentCore, profile: &CallProfile, now: Duration, release: bool) -> Option<Ticket> {
    let k = c.config().max_candidates.max(1);
    let reference = c.explain(profile, &RankOptions::default(), now);
    let got = c.rank(profile, &RankOptions::default(), now);
    match (reference, got) {
        (Ok(mut all), Ok(r)) => {
            all.truncate(k);
            assert_eq!(r.candidates, all);
            if release {
                c.release(r.ticket);
                return None;
            }
            Some(r.ticket)
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            None
        }
        (a, b) => panic!("full scan {a:?}, pruned {b:?}"),
    }
}

fn run(servers: &[ServerPlan], steps: &[Step], k: usize, lat: f64, bw: f64) {
    run_with(servers, steps, k, lat, bw, None)
}

fn run_with(
    servers: &[ServerPlan],
    steps: &[Step],
    k: usize,
    lat: f64,
    bw: f64,
    family: Option<gridwise_proto::ModelFamily>,
) {
    let mut c = AgentCore::new(CoreConfig {
        max_candidates: k,
        load_sample: secs(1),
        default_latency_s: lat,
        default_bandwidth_bytes_per_s: bw,
        families: family
            .map(|f| [("dgemm".to_string(), f)].into_iter().collect())
            .unwrap_or_default(),
        ..CoreConfig::default()
    });
    let mut ids = Vec::new();
    let mut addrs = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        let mut reg = registration(&format!("n{:03}_{i}", s.key), &[dgemm(), echo()]);
        reg.default_rate = RATES[s.rate];
        reg.slots = s.slots;
        if let Some(r) = OWN[s.own] {
            reg.rates = vec![("dgemm".into(), r)];
        }
        addrs.push(reg.addr.clone());
        let at = if s.down { secs(0) } else { secs(20) };
        let id = c.register(reg, at).unwrap().server_id;
        let pts: Vec<ModelPoint> = s
            .points
            .iter()
            .map(|&(m, n, kk, v)| dgemm_point(vec![m, n, kk], SPEEDS[v]))
            .chain(s.assumed_zero.map(|z| ModelPoint {
                service: "dgemm".into(),
                x: vec![z, z, z],
                stats: PointStats::default(),
                source: PointSource::AssumedZero,
            }))
            .collect();
        c.model_points(id, &pts);
        if let Some(l) = s.load {
            for t in 20..24 {
                let hb = Heartbeat {
                    server_id: id,
                    load: LoadSample {
                        loadavg_1m: l + t as f64 * 0.1,
                        ..LoadSample::default()
                    },
                    models: Vec::new(),
                    in_flight: Vec::new(),
                };
                c.heartbeat(&hb, secs(t));
            }
        }
        ids.push(id);
    }
    let mut now = secs(24);
    c.sweep(now);
    let mut kept = Vec::new();
    let n = servers.len();
    for st in steps {
        match st {
            Step::Rank(m, nn, kk, i, o, remote, rel) => {
                let p = CallProfile {
                    service: "dgemm".into(),
                    sizes: vec![("m".into(), *m), ("n".into(), *nn), ("k".into(), *kk)],
                    in_bytes: *i,
                    inline_bytes: 0,
                    out_bytes: *o,
                    remote_in: remote
                        .iter()
                        .map(|(h, b)| {
                            let holder = addrs.get(*h).cloned().unwrap_or("far:1".into());
                            (holder, *b)
                        })
                        .collect(),
                };
                kept.extend(check(&mut c, &p, now, *rel));
            }
            Step::Point(s, x, v) => {
                c.model_points(ids[s % n], &[dgemm_point(vec![*x, *x, *x], SPEEDS[*v])]);
            }
            Step::Report(s, x, t) => {
                let r = CallReport {
                    client_in_bytes: None,
                    cpu_available: None,
                    ticket: None,
                    service: "dgemm".into(),
                    sizes: vec![("m".into(), *x), ("n".into(), *x), ("k".into(), *x)],
                    timing: Timing {
                        kernel_s: *t,
                        ..Timing::default()
                    },
                    ok: true,
                };
                c.report(ids[s % n], &[r], now);
            }
            Step::Link(a, b, l, w) => {
                let sample = LinkSample {
                    to: addrs[b % n].clone(),
                    latency_s: *l,
                    bandwidth_bytes_per_s: *w,
                    inbound: false,
                };
                c.record_links(ids[a % n], &[sample], now);
            }
            Step::Wait(ms) => now += Duration::from_millis(*ms),
            Step::Finish(i) => {
                if !kept.is_empty() {
                    c.release(kept.remove(i % kept.len()));
                }
            }
            Step::Join(rate) => {
                let mut reg = registration(
                    &format!("late{}", c.status(now).servers.len()),
                    &[dgemm(), echo()],
                );
                reg.default_rate = RATES[*rate];
                c.register(reg, now).unwrap();
            }
            Step::Echo => {
                let p = CallProfile {
                    service: "echo".into(),
                    sizes: vec![],
                    in_bytes: 10,
                    out_bytes: 10,
                    remote_in: Vec::new(),
                    inline_bytes: 0,
                };
                check(&mut c, &p, now, false);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn pruned_rank_equals_the_full_scan(
        servers in prop::collection::vec(server_plan(), 1..40),
        steps in prop::collection::vec(step(), 1..40),
        k in 0usize..10,
        lat in prop_oneof![Just(0.0), Just(1e-4), Just(0.5)],
        bw in prop_oneof![Just(1e6), Just(1e9)],
    ) {
        run(&servers, &steps, k, lat, bw);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// The grid the bound by model speed is for: most servers have models, calls come in a
    /// few size classes, assignments queue up, and reports, points and links arrive between
    /// decisions; under each model family.
    #[test]
    fn pruned_rank_with_models_and_queues_equals_the_full_scan(
        servers in prop::collection::vec(server_plan_with(true), 1..40),
        steps in prop::collection::vec(step_in_classes(), 1..60),
        k in 0usize..10,
        lat in prop_oneof![Just(0.0), Just(1e-4)],
        bw in prop_oneof![Just(1e6), Just(1e9)],
        family in prop_oneof![
            Just(None),
            Just(Some(gridwise_proto::ModelFamily::Fpm)),
            Just(Some(gridwise_proto::ModelFamily::Regression)),
            Just(Some(gridwise_proto::ModelFamily::Auto)),
        ],
    ) {
        run_with(&servers, &steps, k, lat, bw, family);
    }
}

#[test]
fn a_model_arriving_after_the_order_was_built_is_seen() {
    // Many fast servers without models, one slow one: pruning skips the slow one, until its
    // model says it is the fastest of all.
    let mut c = AgentCore::new(CoreConfig {
        max_candidates: 2,
        ..CoreConfig::default()
    });
    for i in 0..50 {
        let mut reg = registration(&format!("f{i:02}"), &[dgemm()]);
        reg.default_rate = 1e10;
        c.register(reg, Duration::ZERO).unwrap();
    }
    let mut reg = registration("slow", &[dgemm()]);
    reg.default_rate = 1e6;
    let slow = c.register(reg, Duration::ZERO).unwrap().server_id;
    let p = crate::testutil::dgemm_profile(150, 150, 150);
    let r = c.rank(&p, &RankOptions::default(), Duration::ZERO).unwrap();
    assert_eq!(r.candidates[0].name, "f00");
    c.release(r.ticket);
    c.model_points(
        slow,
        &[
            dgemm_point(vec![100, 100, 100], 1e12),
            dgemm_point(vec![200, 200, 200], 1e12),
        ],
    );
    check(&mut c, &p, Duration::ZERO, true);
    let r = c.rank(&p, &RankOptions::default(), Duration::ZERO).unwrap();
    assert_eq!(r.candidates[0].name, "slow");
    // Ties among equal fastest servers still break by name, and queued work moves a server
    // down exactly as the full scan does.
    for _ in 0..5 {
        check(&mut c, &p, Duration::ZERO, false);
    }
}

#[test]
fn a_tie_with_a_slower_rate_still_breaks_by_name() {
    // `b` is a hair faster than `a`, so pruning visits it first; their times round to the
    // same total, and the tie must go to `a` (first by name), as in the full scan.
    let mut c = AgentCore::new(CoreConfig {
        max_candidates: 1,
        ..CoreConfig::default()
    });
    for (name, rate) in [("a", 1e9), ("b", NEXT_UP_1E9)] {
        let mut reg = registration(name, &[dgemm()]);
        reg.default_rate = rate;
        c.register(reg, Duration::ZERO).unwrap();
    }
    let p = (1..200)
        .map(|n| crate::testutil::dgemm_profile(n, n, n))
        .find(|p| {
            let all = c
                .explain(p, &RankOptions::default(), Duration::ZERO)
                .unwrap();
            all[0].etc.total_s() == all[1].etc.total_s()
        })
        .expect("some size rounds to a tie");
    let r = c.rank(&p, &RankOptions::default(), Duration::ZERO).unwrap();
    assert_eq!(names_of(&r.candidates), ["a"]);
}

fn names_of(c: &[Candidate]) -> Vec<&str> {
    c.iter().map(|c| c.name.as_str()).collect()
}
