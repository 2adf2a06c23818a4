//! The core with performance models: online refinement, points from builders, infeasible
//! sizes, load adjustment, what is persisted and what is restored.

use super::*;
use crate::testutil::{dgemm, dgemm_profile, registration};
use gridwise_proto::Heartbeat;
use gridwise_proto::{
    ComputeSource, LoadSample, ModelPoint, PointSource, PointStats, ServerState, Timing,
};

fn dgemm_call(n: i64, kernel_s: f64) -> CallReport {
    CallReport {
        client_in_bytes: None,
        cpu_available: None,
        ticket: None,
        service: "dgemm".into(),
        sizes: vec![("m".into(), n), ("n".into(), n), ("k".into(), n)],
        timing: Timing {
            kernel_s,
            ..Timing::default()
        },
        ok: true,
    }
}

fn point(n: i64, speed: f64) -> ModelPoint {
    ModelPoint {
        service: "dgemm".into(),
        x: vec![n, n, n],
        stats: PointStats {
            sd: 0.0,
            count: 1,
            min: speed,
            mean: speed,
            max: speed,
        },
        source: PointSource::Benchmark,
    }
}

fn two_servers() -> (AgentCore, ServerId, ServerId) {
    let mut c = AgentCore::new(CoreConfig::default());
    let a = c
        .register(registration("a", &[dgemm()]), Duration::ZERO)
        .unwrap()
        .server_id;
    let b = c
        .register(registration("b", &[dgemm()]), Duration::ZERO)
        .unwrap()
        .server_id;
    (c, a, b)
}

#[test]
fn a_real_call_becomes_a_model_point_and_the_next_estimate_uses_it() {
    let (mut c, a, _) = two_servers();
    let before = c
        .explain(
            &dgemm_profile(100, 100, 100),
            &RankOptions::default(),
            Duration::ZERO,
        )
        .unwrap();
    assert!(matches!(
        before[0].etc.compute_source,
        ComputeSource::CalibratedRate { .. }
    ));
    // 2·100³ operations in 1 ms: 2 Gop/s, twice the calibrated 1 Gop/s.
    let taught = c.report(a, &[dgemm_call(100, 1e-3)], Duration::ZERO);
    let after = c
        .explain(
            &dgemm_profile(100, 100, 100),
            &RankOptions::default(),
            Duration::ZERO,
        )
        .unwrap();
    let on_a = after.iter().find(|k| k.name == "a").unwrap();
    assert!(matches!(
        on_a.etc.compute_source,
        ComputeSource::Fpm {
            points: 1,
            load_adjusted: false
        }
    ));
    assert!((on_a.etc.compute_s - 1e-3).abs() < 1e-12);
    assert_eq!(after[0].name, "a", "the model shows a is faster");
    let points: Vec<&PointChange> = taught.points().collect();
    assert_eq!(points.len(), 1);
    assert_eq!(
        (points[0].server.as_str(), points[0].x.clone()),
        ("a", vec![100, 100, 100])
    );
    assert!(
        matches!(&taught.learned[0], Learned::Timings { server, reports, .. } if server == "a" && reports.len() == 1)
    );
}

#[test]
fn outside_the_model_the_rate_stands_in_and_says_so() {
    let (mut c, a, _) = two_servers();
    c.model_points(a, &[point(100, 2e9), point(200, 2e9)]);
    let k = c
        .explain(&dgemm_profile(500, 500, 500), &pinned_a(), Duration::ZERO)
        .unwrap();
    assert!(
        matches!(
            k[0].etc.compute_source,
            ComputeSource::RateOutsideModel { points: 2, .. }
        ),
        "{:?}",
        k[0].etc.compute_source
    );
    let k = c
        .explain(&dgemm_profile(150, 150, 150), &pinned_a(), Duration::ZERO)
        .unwrap();
    assert!(matches!(
        k[0].etc.compute_source,
        ComputeSource::Fpm { points: 2, .. }
    ));
}

fn pinned_a() -> RankOptions {
    RankOptions {
        pin_server: Some("a".into()),
        ..RankOptions::default()
    }
}

/// A 1-D service (`solve(n)`, n³ operations): its model interpolates linearly, so a size
/// between two zero-speed points is exactly zero.
fn solve() -> gridwise_proto::ServiceDesc {
    use gridwise_proto::{ArgDesc, ArgMode};
    gridwise_proto::ServiceDesc {
        memory: None,
        duration: None,
        name: "solve".into(),
        doc: String::new(),
        args: vec![
            ArgDesc::new("n", ArgMode::In, "int"),
            ArgDesc::new("s", ArgMode::Out, "double"),
        ],
        size_params: vec!["n".into()],
        complexity: Some("n^3".into()),
    }
}

fn solve_point(n: i64, speed: f64) -> ModelPoint {
    ModelPoint {
        service: "solve".into(),
        x: vec![n],
        ..point(n, speed)
    }
}

fn solve_profile(n: i64) -> CallProfile {
    CallProfile {
        service: "solve".into(),
        sizes: vec![("n".into(), n)],
        in_bytes: 8,
        out_bytes: 8,
        remote_in: Vec::new(),
        inline_bytes: 0,
    }
}

#[test]
fn past_the_top_a_fall_caps_the_rate_and_a_lone_slow_point_does_not() {
    let mut c = AgentCore::new(CoreConfig::default());
    let a = c
        .register(registration("a", &[solve()]), Duration::ZERO)
        .unwrap()
        .server_id;
    let past_top = |c: &AgentCore| {
        let k = c
            .explain(&solve_profile(500), &pinned_a(), Duration::ZERO)
            .unwrap();
        k[0].etc.compute_s
    };
    let calibrated = past_top(&c);
    // Calls at a tiny size are all overhead, far below the calibrated rate. No fall was seen,
    // so the calibrated rate still prices 500³ operations.
    c.model_points(a, &[solve_point(2, 1e3)]);
    assert_eq!(past_top(&c), calibrated);
    // Fast in the middle, slow at the top (paging): past it, the top's speed stands.
    c.model_points(a, &[solve_point(100, 5e12), solve_point(200, 1e5)]);
    assert!(
        (past_top(&c) - 500f64.powi(3) / 1e5).abs() < 1e-6,
        "{}",
        past_top(&c)
    );
}

#[test]
fn below_the_bottom_the_bottoms_speed_stands_not_a_rate_calibrated_elsewhere() {
    let mut c = AgentCore::new(CoreConfig::default());
    // Calibrated at a size that is all overhead: 3.5e6 op/s, where calls run at 1e9.
    let mut reg = registration("a", &[solve()]);
    reg.default_rate = 3.5e6;
    let a = c.register(reg, Duration::ZERO).unwrap().server_id;
    c.model_points(a, &[solve_point(320, 1e9), solve_point(440, 1.2e9)]);
    let k = c
        .explain(&solve_profile(300), &pinned_a(), Duration::ZERO)
        .unwrap();
    assert!(
        matches!(
            k[0].etc.compute_source,
            ComputeSource::RateOutsideModel { rate, points: 2 } if rate == 1e9
        ),
        "{:?}",
        k[0].etc.compute_source
    );
    assert!(
        (k[0].etc.compute_s - 0.027).abs() < 1e-9,
        "{}",
        k[0].etc.compute_s
    );
}

#[test]
fn past_the_top_the_tops_speed_stands_not_a_slower_rate_calibrated_elsewhere() {
    // Calibrated at a size that is all overhead: 3.5e6 op/s, where calls run at ~1e9.
    let past_top = |points: &[ModelPoint]| {
        let mut c = AgentCore::new(CoreConfig::default());
        let mut reg = registration("a", &[solve()]);
        reg.default_rate = 3.5e6;
        let a = c.register(reg, Duration::ZERO).unwrap().server_id;
        c.model_points(a, points);
        let k = c
            .explain(&solve_profile(450), &pinned_a(), Duration::ZERO)
            .unwrap();
        k[0].etc.clone()
    };
    // Rising to the top (fixed overhead over more work), and falling a little at it (noise):
    // either way 450³ operations are priced at the top's speed, ~0.08 s, not at 26 s.
    for top in [1.2e9, 0.9e9] {
        let etc = past_top(&[solve_point(320, 1e9), solve_point(440, top)]);
        assert!(
            matches!(
                etc.compute_source,
                ComputeSource::RateOutsideModel { rate, points: 2 } if rate == top
            ),
            "{:?}",
            etc.compute_source
        );
        assert!(
            (etc.compute_s - 450f64.powi(3) / top).abs() < 1e-9,
            "{}",
            etc.compute_s
        );
    }
}

#[test]
fn a_size_a_model_rules_out_is_not_offered() {
    let mut c = AgentCore::new(CoreConfig::default());
    let a = c
        .register(registration("a", &[solve()]), Duration::ZERO)
        .unwrap()
        .server_id;
    let b = c
        .register(registration("b", &[solve()]), Duration::ZERO)
        .unwrap()
        .server_id;
    // a cannot run 300 (speed 0 from 250 on, e.g. out of memory); b knows nothing.
    c.model_points(
        a,
        &[
            solve_point(100, 5e9),
            solve_point(250, 0.0),
            solve_point(400, 0.0),
        ],
    );
    let k = c
        .rank(&solve_profile(300), &RankOptions::default(), Duration::ZERO)
        .unwrap();
    assert_eq!(names_of(&k.candidates), vec!["b"]);
    // With b ruled out too, the error says why.
    c.model_points(
        b,
        &[
            solve_point(100, 5e9),
            solve_point(250, 0.0),
            solve_point(400, 0.0),
        ],
    );
    let e = c
        .rank(&solve_profile(300), &RankOptions::default(), Duration::ZERO)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::ServerNotFound);
    assert!(e.message.contains("does not fit"), "{e}");
    // Sizes they can run are offered by both.
    let k = c
        .rank(&solve_profile(100), &RankOptions::default(), Duration::ZERO)
        .unwrap();
    assert_eq!(k.candidates.len(), 2);
}

fn names_of(c: &[Candidate]) -> Vec<&str> {
    c.iter().map(|c| c.name.as_str()).collect()
}

#[test]
fn points_from_a_down_server_are_refused_until_it_registers() {
    let (mut c, a, _) = two_servers();
    let beat = Heartbeat {
        server_id: a,
        load: Default::default(),
        models: Vec::new(),
        in_flight: Vec::new(),
    };
    assert_eq!(c.heartbeat(&beat, Duration::ZERO), Ack::Ok);
    c.sweep(Duration::from_secs(3600));
    assert_eq!(c.model_points(a, &[point(100, 1e9)]), Ack::Reregister);
    assert!(c.model("a", "dgemm").unwrap().points.is_empty());
}

#[test]
fn the_band_model_adjusts_the_estimate_by_the_load_history() {
    let mut c = AgentCore::new(CoreConfig {
        load_sample: Duration::from_secs(1),
        load_model: gridwise_predict::LoadModel::Band,
        ..CoreConfig::default()
    });
    let a = c
        .register(registration("a", &[dgemm()]), Duration::ZERO)
        .unwrap()
        .server_id;
    c.model_points(a, &[point(100, 2e9), point(200, 2e9)]);
    for s in 0..4u64 {
        let hb = Heartbeat {
            server_id: a,
            load: LoadSample {
                loadavg_1m: 1.0,
                ..LoadSample::default()
            },
            models: Vec::new(),
            in_flight: Vec::new(),
        };
        c.heartbeat(&hb, Duration::from_secs(s));
    }
    let k = c
        .explain(
            &dgemm_profile(150, 150, 150),
            &RankOptions::default(),
            Duration::from_secs(4),
        )
        .unwrap();
    assert!(matches!(
        k[0].etc.compute_source,
        ComputeSource::Fpm {
            load_adjusted: true,
            ..
        }
    ));
    // A constant load of 1 halves the speed: t = t_ideal·(1 + 1).
    let ideal = 2.0 * 150f64.powi(3) / 2e9;
    assert!(
        (k[0].etc.compute_s - 2.0 * ideal).abs() / ideal < 1e-6,
        "{} vs {}",
        k[0].etc.compute_s,
        2.0 * ideal
    );
}

/// An emulated kernel sleeps for its time: the host's load, however low the sensed share of a
/// core, does not stretch its estimate (four emulated servers sharing two cores sensed 50–95%
/// each, and a slab of equal servers was split 646 rows to 941 by it).
#[test]
fn a_sleeping_kernel_is_not_stretched_by_the_hosts_load() {
    let mut c = AgentCore::new(CoreConfig {
        sensor_sample: Duration::from_secs(1),
        ..CoreConfig::default()
    });
    let ids: Vec<ServerId> = ["sleeps", "computes"]
        .iter()
        .map(|name| {
            let mut reg = registration(name, &[dgemm()]);
            if *name == "sleeps" {
                reg.sleeping = vec!["dgemm".into()];
            }
            let id = c.register(reg, Duration::ZERO).unwrap().server_id;
            c.model_points(id, &[point(100, 2e9), point(200, 2e9)]);
            id
        })
        .collect();
    for (s, &id) in ids.iter().enumerate() {
        for t in 0..6u64 {
            let hb = Heartbeat {
                server_id: id,
                load: LoadSample {
                    cpu_available: Some(0.5),
                    ..LoadSample::default()
                },
                models: Vec::new(),
                in_flight: Vec::new(),
            };
            c.heartbeat(&hb, Duration::from_secs(t + s as u64));
        }
    }
    let ideal = 2.0 * 150f64.powi(3) / 2e9;
    let etc = |name: &str| {
        c.explain(
            &dgemm_profile(150, 150, 150),
            &RankOptions {
                pin_server: Some(name.into()),
                ..RankOptions::default()
            },
            Duration::from_secs(8),
        )
        .unwrap()
        .remove(0)
        .etc
    };
    let asleep = etc("sleeps");
    assert!(
        (asleep.compute_s - ideal).abs() / ideal < 1e-9,
        "{asleep:?}"
    );
    assert_eq!(asleep.cpu_available, None);
    let busy = etc("computes");
    assert!(busy.compute_s > 1.8 * ideal, "{busy:?}");
}

#[test]
fn forecast_availability_stretches_the_quiet_estimate_once() {
    let mut c = AgentCore::new(CoreConfig {
        sensor_sample: Duration::from_secs(1),
        ..CoreConfig::default()
    });
    let a = c
        .register(registration("a", &[dgemm()]), Duration::ZERO)
        .unwrap()
        .server_id;
    c.model_points(a, &[point(100, 2e9), point(200, 2e9)]);
    let explain = |c: &AgentCore, at: u64| {
        c.explain(
            &dgemm_profile(150, 150, 150),
            &RankOptions::default(),
            Duration::from_secs(at),
        )
        .unwrap()
        .remove(0)
        .etc
    };
    let ideal = 2.0 * 150f64.powi(3) / 2e9;
    assert!((explain(&c, 0).compute_s - ideal).abs() / ideal < 1e-9);
    // Half a core, then alternating: the forecast is near a half, with a spread.
    for (s, avail) in [0.5, 0.5, 0.5, 0.4, 0.6, 0.5, 0.45, 0.55]
        .into_iter()
        .enumerate()
    {
        let hb = Heartbeat {
            server_id: a,
            load: LoadSample {
                loadavg_1m: 7.0,
                cpu_available: Some(avail),
                ..LoadSample::default()
            },
            models: Vec::new(),
            in_flight: Vec::new(),
        };
        c.heartbeat(&hb, Duration::from_secs(s as u64));
    }
    let e = explain(&c, 9);
    let a_now = e.cpu_available.expect("adjusted for load");
    assert!((a_now - 0.5).abs() < 0.06, "{a_now}");
    assert!((e.compute_s - ideal / a_now).abs() / ideal < 1e-9, "{e:?}");
    assert!(e.compute_sd_s > 0.0, "{e:?}");
    let (lo, hi) = e.interval90_s();
    assert!(lo < e.total_s() && e.total_s() < hi);
    // The load average (7 on this host) is not charged a second time.
    assert!(e.compute_s < 3.0 * ideal);
    // A call reported at that availability teaches the quiet speed, not the loaded one.
    let report = CallReport {
        client_in_bytes: None,
        ticket: None,
        service: "dgemm".into(),
        sizes: vec![("m".into(), 100), ("n".into(), 100), ("k".into(), 100)],
        timing: gridwise_proto::Timing {
            kernel_s: 2.0 * 100f64.powi(3) / 2e9 / 0.5,
            ..Default::default()
        },
        ok: true,
        cpu_available: Some(0.5),
    };
    c.report(a, &[report], Duration::from_secs(9));
    let m = c.model("a", "dgemm").unwrap();
    let p100 = &m.points.iter().find(|p| p.0 == [100, 100, 100]).unwrap().1;
    assert!((p100.mean - 2e9).abs() / 2e9 < 1e-9, "{p100:?}");
}

#[test]
fn restored_servers_start_down_and_keep_their_ids_and_models() {
    let (mut c, a, _) = two_servers();
    let taught = c.model_points(a, &[point(100, 2e9)]);
    let saved: Vec<&PointChange> = taught.points().collect();
    let reg = registration("a", &[dgemm()]);

    let mut fresh = AgentCore::new(CoreConfig::default());
    fresh
        .restore_server(a, reg.clone(), Duration::ZERO)
        .unwrap();
    for d in saved {
        assert!(fresh.restore_point(&d.server, &d.service, &d.x, d.stats, d.source));
    }
    assert!(!fresh.restore_point(
        "nobody",
        "dgemm",
        &[1, 1, 1],
        PointStats::default(),
        PointSource::Benchmark
    ));
    let e = fresh.server(a).expect("same id");
    assert_eq!(e.state(), ServerState::Down);
    assert_eq!(fresh.model("a", "dgemm").unwrap().points.len(), 1);
    // Registering again (same name, same services) keeps the model and the id.
    let reply = fresh.register(reg, Duration::from_secs(1)).unwrap();
    assert_eq!(reply.server_id, a);
    let k = fresh
        .explain(
            &dgemm_profile(100, 100, 100),
            &RankOptions::default(),
            Duration::from_secs(1),
        )
        .unwrap();
    assert!(matches!(k[0].etc.compute_source, ComputeSource::Fpm { .. }));
}

#[test]
fn a_call_goes_where_its_remote_input_already_is() {
    let (mut c, a, _) = two_servers();
    let mut p = dgemm_profile(100, 100, 100);
    // 100 MB held on b: pulling it to a costs 0.1 s at the default 1 GB/s; on b it is free.
    p.remote_in = vec![("b.example:7000".into(), 100_000_000)];
    let k = c
        .explain(&p, &RankOptions::default(), Duration::ZERO)
        .unwrap();
    assert_eq!(k[0].name, "b");
    let on_a = k.iter().find(|x| x.name == "a").unwrap();
    assert!((on_a.etc.transfer_in_s - k[0].etc.transfer_in_s - 0.1).abs() < 1e-3);
    // A measured fast link from b to a shrinks the pull.
    let fast = gridwise_proto::LinkSample {
        to: "a.example:7000".into(),
        latency_s: 1e-5,
        bandwidth_bytes_per_s: 1e11,
        inbound: false,
    };
    let b = c.server_by_name("b").unwrap().id();
    assert_eq!(c.record_links(b, &[fast], Duration::ZERO), Ack::Ok);
    let k = c
        .explain(&p, &RankOptions::default(), Duration::ZERO)
        .unwrap();
    let on_a = k.iter().find(|x| x.name == "a").unwrap();
    assert!(on_a.etc.transfer_in_s < 0.01, "{}", on_a.etc.transfer_in_s);
    assert_eq!(c.link_matrix(Duration::from_secs(1)).len(), 1);
    let _ = a;
}

#[test]
fn conservative_prefers_a_steady_server_to_a_faster_noisy_one() {
    let mut c = AgentCore::new(CoreConfig {
        sensor_sample: Duration::from_secs(1),
        ..CoreConfig::default()
    });
    let mut ids = Vec::new();
    for (name, speed) in [("noisy", 4e9), ("steady", 2.5e9)] {
        let id = c
            .register(registration(name, &[dgemm()]), Duration::ZERO)
            .unwrap()
            .server_id;
        c.model_points(id, &[point(100, speed), point(200, speed)]);
        ids.push(id);
    }
    // The noisy server's availability jumps about in [0.4, 1]; the steady one is idle.
    let mut x: u64 = 12345;
    for s in 0..60u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let noisy = 0.4 + 0.6 * ((x >> 33) as f64 / (1u64 << 31) as f64);
        for (id, avail) in [(ids[0], noisy), (ids[1], 1.0)] {
            let hb = Heartbeat {
                server_id: id,
                load: LoadSample {
                    cpu_available: Some(avail),
                    ..LoadSample::default()
                },
                models: Vec::new(),
                in_flight: Vec::new(),
            };
            c.heartbeat(&hb, Duration::from_secs(s));
        }
    }
    let now = Duration::from_secs(60);
    let p = dgemm_profile(150, 150, 150);
    let etc_of = |policy: Policy, name: &str| {
        let opts = RankOptions {
            policy: Some(policy),
            ..RankOptions::default()
        };
        c.explain(&p, &opts, now)
            .unwrap()
            .into_iter()
            .find(|k| k.name == name)
            .unwrap()
            .etc
    };
    let (noisy, steady) = (etc_of(Policy::Mct, "noisy"), etc_of(Policy::Mct, "steady"));
    assert!(noisy.total_s() < steady.total_s(), "{noisy:?} {steady:?}");
    assert!(noisy.compute_sd_s > 0.1 * noisy.compute_s, "{noisy:?}");
    assert_eq!(steady.compute_sd_s, 0.0);
    let first = |policy| {
        let opts = RankOptions {
            policy: Some(policy),
            ..RankOptions::default()
        };
        c.explain(&p, &opts, now).unwrap()[0].name.clone()
    };
    assert_eq!(first(Policy::Mct), "noisy");
    assert_eq!(first(Policy::Conservative), "steady");
}

#[test]
fn regression_learns_from_calls_and_lends_its_model_scaled_by_rates() {
    let mut c = AgentCore::new(CoreConfig {
        families: [("dgemm".to_string(), gridwise_proto::ModelFamily::Regression)].into(),
        ..CoreConfig::default()
    });
    let mut ids = Vec::new();
    for (name, rate) in [("a", 2e9), ("b", 1e9)] {
        let mut reg = registration(name, &[dgemm()]);
        reg.default_rate = rate;
        ids.push(c.register(reg, Duration::ZERO).unwrap().server_id);
    }
    // a runs dgemm at an overhead of 1 ms plus 2 n³ / 4e9 s: not what its rate says.
    let time = |n: i64| 1e-3 + 2.0 * (n as f64).powi(3) / 4e9;
    let reports: Vec<CallReport> = (0..12)
        .map(|i| {
            let n = 100 + 40 * i;
            CallReport {
                client_in_bytes: None,
                ticket: None,
                service: "dgemm".into(),
                sizes: vec![("m".into(), n), ("n".into(), n), ("k".into(), n)],
                timing: gridwise_proto::Timing {
                    kernel_s: time(n),
                    ..Default::default()
                },
                ok: true,
                cpu_available: None,
            }
        })
        .collect();
    c.report(ids[0], &reports, Duration::from_secs(1));
    let etc = |name: &str| {
        c.explain(
            &dgemm_profile(300, 300, 300),
            &RankOptions {
                pin_server: Some(name.into()),
                ..RankOptions::default()
            },
            Duration::from_secs(2),
        )
        .unwrap()
        .remove(0)
        .etc
    };
    let a = etc("a");
    assert!(
        matches!(
            &a.compute_source,
            ComputeSource::Regression {
                scaled_from: None,
                runs: 12,
                ..
            }
        ),
        "{a:?}"
    );
    assert!((a.compute_s - time(300)).abs() / time(300) < 0.01, "{a:?}");
    // b has run nothing: a's model, times twice as long (half the calibrated rate).
    let b = etc("b");
    assert!(
        matches!(&b.compute_source, ComputeSource::Regression { scaled_from: Some(s), .. } if s == "a"),
        "{b:?}"
    );
    assert!(
        (b.compute_s - 2.0 * a.compute_s).abs() < 1e-9 * a.compute_s,
        "{b:?}"
    );
    // The FPM family estimates the same call from the samples the calls left.
    let fpm = c
        .explain(
            &dgemm_profile(300, 300, 300),
            &RankOptions {
                pin_server: Some("a".into()),
                model_family: Some(gridwise_proto::ModelFamily::Fpm),
                ..RankOptions::default()
            },
            Duration::from_secs(2),
        )
        .unwrap()
        .remove(0)
        .etc;
    assert!(
        matches!(fpm.compute_source, ComputeSource::Fpm { .. }),
        "{fpm:?}"
    );
}

#[test]
fn a_call_bigger_than_forecast_free_memory_is_not_offered_there() {
    let mut c = AgentCore::new(CoreConfig::default());
    let mut desc = dgemm();
    // Work arrays the arguments do not show: a megabyte per row.
    desc.memory = Some("1000000*m".into());
    let mut ids = Vec::new();
    for name in ["small", "large"] {
        ids.push(
            c.register(registration(name, &[desc.clone()]), Duration::ZERO)
                .unwrap()
                .server_id,
        );
    }
    let p = dgemm_profile(150, 150, 150);
    let names = |c: &AgentCore| -> Vec<String> {
        c.explain(&p, &RankOptions::default(), Duration::from_secs(2))
            .unwrap()
            .into_iter()
            .map(|k| k.name)
            .collect()
    };
    // Nothing measured yet: both may take it.
    assert_eq!(names(&c).len(), 2);
    for (id, free) in [(ids[0], 100u64 << 20), (ids[1], 4u64 << 30)] {
        let hb = Heartbeat {
            server_id: id,
            load: LoadSample {
                free_memory_bytes: Some(free),
                ..LoadSample::default()
            },
            models: Vec::new(),
            in_flight: Vec::new(),
        };
        c.heartbeat(&hb, Duration::from_secs(1));
    }
    assert_eq!(names(&c), ["large"]);
}
