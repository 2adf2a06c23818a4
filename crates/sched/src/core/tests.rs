use super::*;
use crate::testutil::{dgemm, dgemm_profile, echo, registration};
use gridwise_predict::ASSUMED_UNKNOWN_S;
use gridwise_proto::{ComputeSource, LoadSample, Registration, ServerState, Timing};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn core() -> AgentCore {
    AgentCore::new(CoreConfig::default())
}

/// A core with one-slot servers at the given names and rates, all offering dgemm and echo,
/// each having sent its first heartbeat.
fn grid(servers: &[(&str, f64)]) -> (AgentCore, Vec<ServerId>) {
    let mut c = core();
    let ids = servers
        .iter()
        .map(|(name, rate)| {
            let mut reg = registration(name, &[dgemm(), echo()]);
            reg.default_rate = *rate;
            let id = c.register(reg, Duration::ZERO).unwrap().server_id;
            assert_eq!(c.heartbeat(&hb(id), Duration::ZERO), Ack::Ok);
            id
        })
        .collect();
    (c, ids)
}

fn mct() -> RankOptions {
    RankOptions::default()
}

fn with_policy(p: Policy) -> RankOptions {
    RankOptions {
        policy: Some(p),
        ..RankOptions::default()
    }
}

fn pinned(name: &str) -> RankOptions {
    RankOptions {
        pin_server: Some(name.into()),
        ..RankOptions::default()
    }
}

fn names(c: &[Candidate]) -> Vec<&str> {
    c.iter().map(|c| c.name.as_str()).collect()
}

fn report(ticket: Option<Ticket>, service: &str, kernel_s: f64, ok: bool) -> CallReport {
    CallReport {
        client_in_bytes: None,
        cpu_available: None,
        ticket,
        service: service.into(),
        sizes: vec![],
        timing: Timing {
            kernel_s,
            ..Timing::default()
        },
        ok,
    }
}

fn hb(id: ServerId) -> Heartbeat {
    Heartbeat {
        server_id: id,
        load: LoadSample::default(),
        models: Vec::new(),
        in_flight: Vec::new(),
    }
}

// --- registration -------------------------------------------------------------------------

#[test]
fn register_assigns_ids_and_replaces_by_name() {
    let mut c = core();
    let r1 = c
        .register(registration("a", &[dgemm()]), Duration::ZERO)
        .unwrap();
    assert_eq!(r1.heartbeat_interval_ms, 1000);
    let r2 = c
        .register(registration("b", &[dgemm()]), Duration::ZERO)
        .unwrap();
    assert_ne!(r1.server_id, r2.server_id);

    let mut again = registration("a", &[dgemm(), echo()]);
    again.addr = "elsewhere:9".into();
    again.slots = 4;
    // Only the holder of the name (its secret) may replace it while it is up.
    let e = c.register(again.clone(), secs(1.0)).unwrap_err();
    assert!(
        e.message
            .contains("held by a live server at a.example:7000"),
        "{e}"
    );
    again.secret = Some(r1.secret.clone());
    let r3 = c.register(again.clone(), secs(1.0)).unwrap();
    // Every registration issues a new secret; the old one is spent.
    assert_ne!(r3.secret, r1.secret);
    let mut stale = again;
    stale.addr = "third:9".into();
    assert!(c.register(stale, secs(1.0)).is_err());
    assert_eq!(r3.server_id, r1.server_id);
    let a = c.server_by_name("a").unwrap();
    assert_eq!(a.addr(), "elsewhere:9");
    assert_eq!(a.slots(), 4);
    assert_eq!(a.services(), ["dgemm", "echo"]);
    assert_eq!(c.registry().len(), 2);
}

#[test]
fn down_server_reregisters_under_its_id_and_gets_calls_again() {
    let (mut c, ids) = grid(&[("a", 1e9)]);
    assert_eq!(c.sweep(secs(11.0)), vec![Learned::Down(ids[0])]);
    assert_eq!(c.server(ids[0]).unwrap().state(), ServerState::Down);
    assert_eq!(c.heartbeat(&hb(ids[0]), secs(12.0)), Ack::Reregister);
    let e = c
        .rank(&dgemm_profile(10, 10, 10), &mct(), secs(12.0))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::ServerNotFound);

    let r = c
        .register(registration("a", &[dgemm(), echo()]), secs(13.0))
        .unwrap();
    assert_eq!(r.server_id, ids[0]);
    assert_eq!(c.heartbeat(&hb(ids[0]), secs(14.0)), Ack::Ok);
    let ranking = c
        .rank(&dgemm_profile(10, 10, 10), &mct(), secs(14.0))
        .unwrap();
    assert_eq!(ranking.candidates[0].server_id, ids[0]);
}

#[test]
fn restart_drops_the_old_queue() {
    let (mut c, _) = grid(&[("a", 1e9)]);
    c.rank(&dgemm_profile(1000, 1000, 1000), &mct(), Duration::ZERO)
        .unwrap();
    assert_eq!(c.pending(), 1);
    // A new process under the name, answering at its predecessor's address.
    let gone = Registering {
        source: "10.0.0.1".into(),
        verified: true,
        holder_gone: false,
    };
    c.register_from(registration("a", &[dgemm()]), &gone, secs(0.5))
        .unwrap();
    assert_eq!(c.pending(), 0);
    assert!(c.queue(c.server_by_name("a").unwrap().id()).is_empty());
}

#[test]
fn bad_registrations_say_what_to_fix_and_change_nothing() {
    let mut c = core();
    type Spoil = fn(&mut Registration);
    let cases: [(Spoil, &str); 4] = [
        (|r| r.name = " ".into(), "name is empty"),
        (|r| r.addr = String::new(), "address is empty"),
        (|r| r.slots = 0, "at least 1"),
        (|r| r.services.push(dgemm()), "listed twice"),
    ];
    for (spoil, words) in cases {
        let mut reg = registration("a", &[dgemm()]);
        spoil(&mut reg);
        let e = c.register(reg, Duration::ZERO).unwrap_err();
        assert_eq!(e.code, ErrorCode::RpcRefused);
        assert!(e.message.contains(words), "{e}");
    }
    let mut bad = dgemm();
    bad.size_params.push("nope".into());
    let e = c
        .register(registration("a", &[echo(), bad]), Duration::ZERO)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::RpcRefused);
    assert!(e.message.contains("`nope`"), "{e}");
    assert!(c.registry().is_empty());
    assert!(c.catalog().is_empty());
}

#[test]
fn conflicting_descriptions_are_refused_even_against_down_servers() {
    let (mut c, _) = grid(&[("a", 1e9)]);
    let mut other = dgemm();
    other.complexity = Some("m*n*k".into());
    let e = c
        .register(registration("b", &[other.clone()]), secs(1.0))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::RpcRefused);
    assert!(
        e.message.contains("`dgemm`") && e.message.contains("must match"),
        "{e}"
    );
    assert!(c.server_by_name("b").is_none());

    c.sweep(secs(20.0));
    assert_eq!(
        c.register(registration("b", &[other.clone()]), secs(21.0))
            .unwrap_err()
            .code,
        ErrorCode::RpcRefused
    );

    // The only server offering it may change its own description.
    c.register(registration("a", &[other.clone(), echo()]), secs(22.0))
        .unwrap();
    assert_eq!(c.describe("dgemm").unwrap(), other);
    c.register(registration("b", &[other]), secs(23.0)).unwrap();
}

// --- liveness -------------------------------------------------------------------------------

#[test]
fn heartbeats_keep_servers_up_and_silence_marks_them_down() {
    let (mut c, ids) = grid(&[("a", 1e9), ("b", 1e9)]);
    assert_eq!(c.heartbeat(&hb(ids[0]), secs(8.0)), Ack::Ok);
    assert_eq!(
        c.heartbeat(&hb(ServerId::new_random()), secs(8.0)),
        Ack::Reregister
    );
    assert!(c.sweep(secs(10.0)).is_empty());
    assert_eq!(c.sweep(secs(10.5)), vec![Learned::Down(ids[1])]);
    assert!(c.sweep(secs(10.6)).is_empty());
    // Down servers get no calls, whatever the policy.
    for p in Policy::ALL {
        let r = c
            .explain(&dgemm_profile(10, 10, 10), &with_policy(p), secs(11.0))
            .unwrap();
        assert_eq!(names(&r), ["a"], "{p}");
    }
    let status = c.status(secs(11.0));
    assert_eq!(status.servers[1].state, ServerState::Down);
    assert_eq!(status.servers[1].last_heard_s, 11.0);
    assert_eq!(status.servers[0].last_heard_s, 3.0);
}

#[test]
fn going_down_drops_pending_assignments() {
    let (mut c, ids) = grid(&[("a", 1e9), ("b", 1e9)]);
    let t = c
        .rank(&dgemm_profile(10, 10, 10), &mct(), Duration::ZERO)
        .unwrap()
        .ticket;
    c.heartbeat(&hb(ids[1]), secs(9.0));
    assert_eq!(c.sweep(secs(10.5)), vec![Learned::Down(ids[0])]);
    assert_eq!(c.pending(), 0);
    assert!(!c.release(t));
}

// --- ranking --------------------------------------------------------------------------------

#[test]
fn mct_spreads_identical_calls_over_equal_servers() {
    let (mut c, _) = grid(&[("b", 1e9), ("a", 1e9)]);
    let p = dgemm_profile(1000, 1000, 1000);
    let r1 = c.rank(&p, &mct(), Duration::ZERO).unwrap();
    assert_eq!(r1.policy, Policy::Mct);
    assert_eq!(names(&r1.candidates), ["a", "b"]);
    assert_eq!(r1.candidates[0].etc.queue_wait_s, 0.0);
    assert_eq!(r1.candidates[0].etc.compute_s, 2.0);
    assert_eq!(
        r1.candidates[0].etc.compute_source,
        ComputeSource::CalibratedRate { rate: 1e9 }
    );

    let r2 = c.rank(&p, &mct(), Duration::ZERO).unwrap();
    assert_eq!(names(&r2.candidates), ["b", "a"]);
    let a = &r2.candidates[1].etc;
    assert!((a.queue_wait_s - r1.candidates[0].etc.total_s()).abs() < 1e-12);
    assert_ne!(r1.ticket, r2.ticket);

    // Half-way through, both queues have shrunk by the same amount.
    let e = c.explain(&p, &mct(), secs(1.0)).unwrap();
    assert!((e[0].etc.queue_wait_s - (r1.candidates[0].etc.total_s() - 1.0)).abs() < 1e-9);
    assert_eq!(c.ranked(), 2);
    assert_eq!(c.pending(), 2);
}

#[test]
fn mct_prefers_the_faster_server_until_its_queue_outweighs_it() {
    let (mut c, _) = grid(&[("fast", 4e9), ("slow", 1e9)]);
    let p = dgemm_profile(1000, 1000, 1000); // 2e9 ops: 0.5 s fast, 2 s slow
    let picks: Vec<String> = (0..5)
        .map(|_| {
            c.rank(&p, &mct(), Duration::ZERO).unwrap().candidates[0]
                .name
                .clone()
        })
        .collect();
    // fast's queue ends at 0.5, 1.0, 1.5 (plus transfers); a fourth call there would end just
    // after slow's 2.0, and a fifth on slow would wait for the fourth.
    assert_eq!(picks, ["fast", "fast", "fast", "slow", "fast"]);
}

#[test]
fn slots_let_a_server_take_calls_without_waiting() {
    let mut c = core();
    let mut reg = registration("big", &[dgemm()]);
    reg.slots = 2;
    c.register(reg, Duration::ZERO).unwrap();
    let p = dgemm_profile(1000, 1000, 1000);
    let w: Vec<f64> = (0..3)
        .map(|_| {
            c.rank(&p, &mct(), Duration::ZERO).unwrap().candidates[0]
                .etc
                .queue_wait_s
        })
        .collect();
    assert_eq!(w[0], 0.0);
    assert_eq!(w[1], 0.0);
    assert!(w[2] > 2.0);
}

#[test]
fn per_service_rate_beats_the_default_rate() {
    let mut c = core();
    let mut reg = registration("a", &[dgemm()]);
    reg.rates = vec![("dgemm".into(), 2e9)];
    c.register(reg, Duration::ZERO).unwrap();
    let r = c
        .explain(&dgemm_profile(1000, 1000, 1000), &mct(), Duration::ZERO)
        .unwrap();
    assert_eq!(r[0].etc.compute_s, 1.0);
    assert_eq!(
        r[0].etc.compute_source,
        ComputeSource::CalibratedRate { rate: 2e9 }
    );
}

#[test]
fn transfers_use_the_configured_network() {
    let (c, _) = grid(&[("a", 1e9)]);
    let mut p = dgemm_profile(1, 1, 1);
    p.in_bytes = 2_000_000_000;
    p.out_bytes = 1_000_000_000;
    let e = &c.explain(&p, &mct(), Duration::ZERO).unwrap()[0].etc;
    assert!((e.transfer_in_s - 2.0001).abs() < 1e-9);
    assert!((e.transfer_out_s - 1.0001).abs() < 1e-9);
}

#[test]
fn round_robin_rotates_over_servers_by_name() {
    let (mut c, _) = grid(&[("c", 1e9), ("a", 1e9), ("b", 1e9)]);
    let p = dgemm_profile(10, 10, 10);
    let rr = with_policy(Policy::RoundRobin);
    // explain shows the next turn without taking it.
    assert_eq!(
        names(&c.explain(&p, &rr, Duration::ZERO).unwrap()),
        ["a", "b", "c"]
    );
    assert_eq!(
        names(&c.explain(&p, &rr, Duration::ZERO).unwrap()),
        ["a", "b", "c"]
    );
    let firsts: Vec<String> = (0..4)
        .map(|_| {
            let r = c.rank(&p, &rr, Duration::ZERO).unwrap();
            assert_eq!(r.policy, Policy::RoundRobin);
            assert_eq!(r.candidates.len(), 3);
            r.candidates[0].name.clone()
        })
        .collect();
    assert_eq!(firsts, ["a", "b", "c", "a"]);
    assert_eq!(
        names(&c.explain(&p, &rr, Duration::ZERO).unwrap()),
        ["b", "c", "a"]
    );
}

#[test]
fn round_robin_skips_down_servers() {
    let (mut c, ids) = grid(&[("a", 1e9), ("b", 1e9), ("c", 1e9)]);
    c.heartbeat(&hb(ids[0]), secs(5.0));
    c.heartbeat(&hb(ids[2]), secs(5.0));
    c.sweep(secs(11.0));
    let rr = with_policy(Policy::RoundRobin);
    let p = dgemm_profile(10, 10, 10);
    let firsts: Vec<String> = (0..3)
        .map(|_| {
            c.rank(&p, &rr, secs(11.0)).unwrap().candidates[0]
                .name
                .clone()
        })
        .collect();
    assert_eq!(firsts, ["a", "c", "a"]);
}

#[test]
fn constant_speed_ignores_queues_and_sizes() {
    let (mut c, _) = grid(&[("slow", 1e9), ("fast", 3e9), ("mid", 2e9)]);
    let cs = with_policy(Policy::ConstantSpeed);
    for (i, p) in [dgemm_profile(1, 1, 1), dgemm_profile(5000, 5000, 5000)]
        .iter()
        .cycle()
        .take(6)
        .enumerate()
    {
        let r = c.rank(p, &cs, Duration::ZERO).unwrap();
        assert_eq!(names(&r.candidates), ["fast", "mid", "slow"], "call {i}");
    }
    assert_eq!(c.queue(c.server_by_name("fast").unwrap().id()).len(), 6);
}

#[test]
fn agent_default_policy_applies_unless_the_call_asks() {
    let mut c = AgentCore::new(CoreConfig {
        policy: Policy::ConstantSpeed,
        ..CoreConfig::default()
    });
    for (name, rate) in [("a", 1e9), ("b", 2e9)] {
        let mut reg = registration(name, &[dgemm()]);
        reg.default_rate = rate;
        c.register(reg, Duration::ZERO).unwrap();
    }
    let p = dgemm_profile(10, 10, 10);
    let r = c.rank(&p, &mct(), Duration::ZERO).unwrap();
    assert_eq!(r.policy, Policy::ConstantSpeed);
    assert_eq!(r.candidates[0].name, "b");
    let r = c
        .rank(&p, &with_policy(Policy::RoundRobin), Duration::ZERO)
        .unwrap();
    assert_eq!(r.policy, Policy::RoundRobin);
    assert_eq!(c.status(Duration::ZERO).policy, Policy::ConstantSpeed);
}

#[test]
fn rankings_are_truncated_but_explain_shows_all() {
    let mut c = AgentCore::new(CoreConfig {
        max_candidates: 2,
        ..CoreConfig::default()
    });
    for name in ["a", "b", "c", "d"] {
        c.register(registration(name, &[dgemm()]), Duration::ZERO)
            .unwrap();
    }
    let p = dgemm_profile(10, 10, 10);
    for policy in Policy::ALL {
        assert_eq!(
            c.explain(&p, &with_policy(policy), Duration::ZERO)
                .unwrap()
                .len(),
            4
        );
        assert_eq!(
            c.rank(&p, &with_policy(policy), Duration::ZERO)
                .unwrap()
                .candidates
                .len(),
            2
        );
    }
    assert_eq!(c.pending(), Policy::ALL.len());
}

#[test]
fn pinned_calls_go_to_that_server_only() {
    let (mut c, ids) = grid(&[("a", 4e9), ("b", 1e9)]);
    let r = c
        .rank(&dgemm_profile(100, 100, 100), &pinned("b"), Duration::ZERO)
        .unwrap();
    assert_eq!(names(&r.candidates), ["b"]);
    assert_eq!(r.candidates[0].server_id, ids[1]);
    assert_eq!(c.queue(c.server_by_name("b").unwrap().id()).len(), 1);
}

#[test]
fn a_custom_compute_model_replaces_the_rate_model() {
    struct Fixed;
    impl ComputeModel for Fixed {
        fn compute(
            &self,
            server: gridwise_predict::ServerView<'_>,
            _: &gridwise_predict::ServiceFacts,
            _: Option<f64>,
            _: &CallProfile,
        ) -> gridwise_predict::Compute {
            // Slow where the rate says fast: only the model decides.
            let t = if server.host.default_rate > 1.0 {
                9.0
            } else {
                1.0
            };
            gridwise_predict::Compute::point(t, ComputeSource::Declared)
        }
    }
    let (c, _) = grid(&[("a", 1e12), ("b", 1.0)]);
    let c = c.with_compute_model(std::sync::Arc::new(Fixed));
    let r = c
        .explain(&dgemm_profile(10, 10, 10), &mct(), Duration::ZERO)
        .unwrap();
    assert_eq!(names(&r), ["b", "a"]);
    assert_eq!(r[0].etc.compute_s, 1.0);
}

// --- errors ---------------------------------------------------------------------------------

#[test]
fn unknown_service_is_function_not_found() {
    let (mut c, _) = grid(&[("a", 1e9)]);
    let mut p = dgemm_profile(1, 1, 1);
    p.service = "dgemv".into();
    let e = c.rank(&p, &mct(), Duration::ZERO).unwrap_err();
    assert_eq!(e.code, ErrorCode::FunctionNotFound);
    assert_eq!(
        e.message,
        "no server offers `dgemv`; `gridwise status` lists services"
    );
    assert_eq!(
        c.explain(&p, &mct(), Duration::ZERO).unwrap_err().code,
        ErrorCode::FunctionNotFound
    );
    assert_eq!(
        c.describe("dgemv").unwrap_err().code,
        ErrorCode::FunctionNotFound
    );
    assert_eq!(c.ranked(), 0);
}

#[test]
fn offered_but_no_live_server_is_server_not_found() {
    let (mut c, _) = grid(&[("a", 1e9), ("b", 1e9)]);
    c.sweep(secs(11.0));
    let e = c
        .rank(&dgemm_profile(1, 1, 1), &mct(), secs(11.0))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::ServerNotFound);
    assert!(e.message.contains("a, b"), "{e}");

    // A service whose last server dropped it is still known, just not offered.
    c.register(registration("a", &[echo()]), secs(12.0))
        .unwrap();
    c.register(registration("b", &[echo()]), secs(12.0))
        .unwrap();
    let e = c
        .rank(&dgemm_profile(1, 1, 1), &mct(), secs(12.0))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::ServerNotFound);
}

#[test]
fn pin_errors_name_the_server() {
    let (mut c, ids) = grid(&[("a", 1e9), ("b", 1e9)]);
    c.register(registration("e", &[echo()]), Duration::ZERO)
        .unwrap();
    let p = dgemm_profile(1, 1, 1);

    let e = c.rank(&p, &pinned("zz"), Duration::ZERO).unwrap_err();
    assert_eq!(e.code, ErrorCode::ServerNotFound);
    assert!(e.message.contains("`zz`"), "{e}");

    let e = c.rank(&p, &pinned("e"), Duration::ZERO).unwrap_err();
    assert_eq!(e.code, ErrorCode::FunctionNotFound);
    assert!(
        e.message.contains("`e`") && e.message.contains("echo"),
        "{e}"
    );

    c.heartbeat(&hb(ids[0]), secs(9.0));
    c.sweep(secs(11.0));
    let e = c.rank(&p, &pinned("b"), secs(11.0)).unwrap_err();
    assert_eq!(e.code, ErrorCode::ServerNotFound);
    assert!(e.message.contains("`b` is down"), "{e}");
    assert!(c.rank(&p, &pinned("a"), secs(11.0)).is_ok());
}

#[test]
fn sizes_must_match_the_description() {
    let (mut c, _) = grid(&[("a", 1e9)]);
    let mut p = dgemm_profile(1, 2, 3);
    p.sizes.swap(1, 2);
    let e = c.rank(&p, &mct(), Duration::ZERO).unwrap_err();
    assert_eq!(e.code, ErrorCode::OtherErrorCode);
    assert!(
        e.message.contains("(m, k, n)") && e.message.contains("(m, n, k)"),
        "{e}"
    );
    p.sizes.pop();
    assert_eq!(
        c.rank(&p, &mct(), Duration::ZERO).unwrap_err().code,
        ErrorCode::OtherErrorCode
    );
    assert_eq!(c.pending(), 0);
}

#[test]
fn unevaluable_complexity_falls_back_to_history() {
    let (mut c, _) = grid(&[("a", 1e9)]);
    // A negative size makes 2*m*n*k negative: no work estimate, but the call is still ranked.
    let r = c
        .rank(&dgemm_profile(-1, 2, 3), &mct(), Duration::ZERO)
        .unwrap();
    assert!(matches!(
        r.candidates[0].etc.compute_source,
        ComputeSource::Assumed { .. }
    ));
}

// --- reports, release, expiry ---------------------------------------------------------------

#[test]
fn reports_clear_tickets_wherever_they_are_pending() {
    let (mut c, ids) = grid(&[("a", 1e9), ("b", 1e9)]);
    let p = dgemm_profile(100, 100, 100);
    let t = c.rank(&p, &mct(), Duration::ZERO).unwrap().ticket;
    assert_eq!(c.queue(ids[0]).len(), 1);
    // The client fell back to b, which reports the ticket.
    let ack = c.report(ids[1], &[report(Some(t), "dgemm", 0.002, true)], secs(1.0));
    assert_eq!(ack, Ack::Ok);
    assert_eq!(c.pending(), 0);
    assert!(c.queue(ids[0]).is_empty());
    assert_eq!(c.server(ids[1]).unwrap().completed(), 1);
    assert_eq!(c.server(ids[0]).unwrap().completed(), 0);
    // Reporting it again is harmless.
    c.report(ids[1], &[report(Some(t), "dgemm", 0.002, true)], secs(1.0));
    assert_eq!(c.server(ids[1]).unwrap().completed(), 2);
}

#[test]
fn reports_from_unknown_servers_still_clear_tickets() {
    let (mut c, _) = grid(&[("a", 1e9)]);
    let t = c
        .rank(&dgemm_profile(1, 1, 1), &mct(), Duration::ZERO)
        .unwrap()
        .ticket;
    let ack = c.report(
        ServerId::new_random(),
        &[report(Some(t), "dgemm", 0.1, true)],
        secs(1.0),
    );
    assert_eq!(ack, Ack::Reregister);
    assert_eq!(c.pending(), 0);
}

#[test]
fn reports_from_down_servers_are_noted_but_ask_to_reregister() {
    let (mut c, ids) = grid(&[("a", 1e9)]);
    c.sweep(secs(11.0));
    let ack = c.report(ids[0], &[report(None, "echo", 0.1, true)], secs(12.0));
    assert_eq!(ack, Ack::Reregister);
    assert_eq!(c.server(ids[0]).unwrap().completed(), 1);
    assert_eq!(c.server(ids[0]).unwrap().state(), ServerState::Down);
}

#[test]
fn reports_feed_history_for_services_without_complexity() {
    let (mut c, ids) = grid(&[("a", 1e9)]);
    let p = CallProfile {
        service: "echo".into(),
        sizes: vec![],
        in_bytes: 0,
        out_bytes: 0,
        remote_in: Vec::new(),
        inline_bytes: 0,
    };
    let e = c.explain(&p, &mct(), Duration::ZERO).unwrap();
    assert_eq!(
        e[0].etc.compute_source,
        ComputeSource::Assumed {
            seconds: ASSUMED_UNKNOWN_S
        }
    );
    assert_eq!(e[0].etc.compute_s, ASSUMED_UNKNOWN_S);
    c.report(
        ids[0],
        &[
            report(None, "echo", 1.0, true),
            report(None, "echo", 3.0, true),
            report(None, "echo", 100.0, false),
            report(None, "nope", 100.0, true),
        ],
        secs(1.0),
    );
    let e = c.explain(&p, &mct(), secs(1.0)).unwrap();
    assert_eq!(
        e[0].etc.compute_source,
        ComputeSource::HistoryAtSize { calls: 2 }
    );
    assert_eq!(e[0].etc.compute_s, 2.0);
    assert_eq!(c.server(ids[0]).unwrap().completed(), 4);
    // History survives a restart with the same description.
    c.sweep(secs(20.0));
    c.register(registration("a", &[dgemm(), echo()]), secs(21.0))
        .unwrap();
    let e = c.explain(&p, &mct(), secs(21.0)).unwrap();
    assert_eq!(
        e[0].etc.compute_source,
        ComputeSource::HistoryAtSize { calls: 2 }
    );
}

#[test]
fn release_frees_the_queue() {
    let (mut c, ids) = grid(&[("a", 1e9), ("b", 1e9)]);
    let p = dgemm_profile(1000, 1000, 1000);
    let t = c.rank(&p, &mct(), Duration::ZERO).unwrap().ticket;
    assert!(c.release(t));
    assert!(!c.release(t));
    assert!(!c.release(Ticket(999)));
    assert!(c.queue(ids[0]).is_empty());
    // With a's queue empty again, the next identical call goes to a again.
    let r = c.rank(&p, &mct(), Duration::ZERO).unwrap();
    assert_eq!(r.candidates[0].name, "a");
}

#[test]
fn old_tickets_expire_on_sweep() {
    let mut c = AgentCore::new(CoreConfig {
        ticket_ttl: Duration::from_secs(5),
        ..CoreConfig::default()
    });
    let id = c
        .register(registration("a", &[dgemm()]), Duration::ZERO)
        .unwrap()
        .server_id;
    let p = dgemm_profile(10, 10, 10);
    let old = c.rank(&p, &mct(), secs(0.0)).unwrap().ticket;
    let young = c.rank(&p, &mct(), secs(3.0)).unwrap().ticket;
    c.heartbeat(&hb(id), secs(6.0));
    assert!(c.sweep(secs(5.0)).is_empty());
    assert_eq!(c.pending(), 2);
    assert!(c.sweep(secs(6.0)).is_empty());
    assert_eq!(c.pending(), 1);
    let q: Vec<Ticket> = c.queue(id).iter().map(|a| a.ticket).collect();
    assert_eq!(q, [young]);
    assert!(!c.release(old));
    assert!(c.release(young));
}

// --- views ----------------------------------------------------------------------------------

#[test]
fn status_lists_servers_by_name_with_queues() {
    let (mut c, _) = grid(&[("b", 1e9), ("a", 2e9)]);
    let p = dgemm_profile(1000, 1000, 1000);
    c.rank(&p, &mct(), Duration::ZERO).unwrap();
    c.rank(&p, &mct(), Duration::ZERO).unwrap();
    c.rank(&p, &mct(), Duration::ZERO).unwrap();
    let s = c.status(secs(2.5));
    assert_eq!(s.uptime_s, 2.5);
    assert_eq!(s.ranked, 3);
    let rows: Vec<(&str, u32, f64)> = s
        .servers
        .iter()
        .map(|r| (r.name.as_str(), r.pending, r.default_rate))
        .collect();
    assert_eq!(rows, [("a", 2, 2e9), ("b", 1, 1e9)]);
    assert_eq!(s.servers[0].last_heard_s, 2.5);
    assert_eq!(s.servers[0].services, ["dgemm", "echo"]);
}

#[test]
fn services_are_listed_by_name_with_live_server_counts() {
    let (mut c, ids) = grid(&[("a", 1e9)]);
    c.register(registration("b", &[echo()]), Duration::ZERO)
        .unwrap();
    c.heartbeat(&hb(ids[0]), secs(1.0));
    let l = c.list_services();
    let rows: Vec<(&str, u32)> = l
        .iter()
        .map(|s| (s.desc.name.as_str(), s.servers_up))
        .collect();
    assert_eq!(rows, [("dgemm", 1), ("echo", 2)]);
    c.sweep(secs(10.5));
    let rows: Vec<u32> = c.list_services().iter().map(|s| s.servers_up).collect();
    assert_eq!(rows, [1, 1]);
    assert_eq!(c.describe("dgemm").unwrap(), dgemm());
}

// --- what events teach ------------------------------------------------------------------------

#[test]
fn a_heartbeat_teaches_joining_once_and_background_load_once_per_period() {
    let mut c = core();
    let id = c
        .register(registration("a", &[dgemm()]), Duration::ZERO)
        .unwrap()
        .server_id;
    let beat = |load: f64, benchmarking: bool| Heartbeat {
        server_id: id,
        load: LoadSample {
            loadavg_1m: load,
            benchmarking,
            ..LoadSample::default()
        },
        models: Vec::new(),
        in_flight: Vec::new(),
    };
    let first = c.heartbeat(&beat(0.5, false), secs(1.0));
    assert_eq!(first.reply, Ack::Ok);
    assert_eq!(
        first.learned,
        [
            Learned::Joined(id),
            Learned::Load {
                server: "a".into(),
                record: gridwise_predict::LoadRecord {
                    loadavg_1m: Some(0.5),
                    ..Default::default()
                }
            }
        ]
    );
    // Within the same sampling period: nothing new.
    assert!(c.heartbeat(&beat(0.7, false), secs(2.0)).learned.is_empty());
    // The server's own benchmarks are not background load, whatever the period.
    let period = CoreConfig::default().load_sample.as_secs_f64();
    let busy = c.heartbeat(&beat(3.0, true), secs(1.0 + period));
    assert!(busy.learned.is_empty(), "{:?}", busy.learned);
    let quiet = c.heartbeat(&beat(0.25, false), secs(1.0 + period));
    assert_eq!(
        quiet.learned,
        [Learned::Load {
            server: "a".into(),
            record: gridwise_predict::LoadRecord {
                loadavg_1m: Some(0.25),
                ..Default::default()
            }
        }]
    );
    // An unknown server learns nothing and is told to register.
    let stranger = Heartbeat {
        server_id: ServerId::new_random(),
        ..beat(1.0, false)
    };
    let out = c.heartbeat(&stranger, secs(3.0));
    assert_eq!((out.reply, out.learned.len()), (Ack::Reregister, 0));
}

#[test]
fn a_report_teaches_its_timings_and_the_model_points_it_moved() {
    let (mut c, ids) = grid(&[("a", 1e9)]);
    let call = |n: i64, kernel_s: f64, ok: bool| CallReport {
        client_in_bytes: None,
        cpu_available: None,
        ticket: None,
        service: "dgemm".into(),
        sizes: vec![("m".into(), n), ("n".into(), n), ("k".into(), n)],
        timing: Timing {
            kernel_s,
            ..Timing::default()
        },
        ok,
    };
    let reports = [
        call(100, 1e-3, true),
        call(100, 3e-3, true),
        call(50, 1.0, false),
    ];
    let out = c.report(ids[0], &reports, secs(1.0));
    assert_eq!(out.reply, Ack::Ok);
    assert_eq!(
        out.learned[0],
        Learned::Timings {
            server: "a".into(),
            reports: reports.to_vec(),
            predicted_kernel_s: vec![None; 3],
            theirs: vec![false; 3],
        }
    );
    // Two samples of one point: it is taught once, as it stands after both. The failed call
    // teaches no speed.
    let points: Vec<&PointChange> = out.points().collect();
    assert_eq!(points.len(), 1, "{:?}", out.learned);
    assert_eq!(points[0].x, [100, 100, 100]);
    assert_eq!(points[0].stats.count, 2);
    assert_eq!(c.server(ids[0]).unwrap().completed(), 3);
    let unknown = c.report(ServerId::new_random(), &reports, secs(1.0));
    assert_eq!((unknown.reply, unknown.learned.len()), (Ack::Reregister, 0));
}
