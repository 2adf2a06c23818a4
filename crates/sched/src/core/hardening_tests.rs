//! Who may join and give back what, and estimates for every call: names that cannot be taken,
//! registrations limited per source and forgotten when they never beat, tickets only their
//! holders release, calls sent only where they fit, and a queue term for services no
//! complexity formula describes.

use super::*;
use crate::testutil::{dgemm, dgemm_profile, echo, registration};
use gridwise_predict::ASSUMED_UNKNOWN_S;
use gridwise_proto::{ArgDesc, ArgMode, ComputeSource, LoadSample, Registration, Timing};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn beat(c: &mut AgentCore, id: ServerId, at: f64) -> Ack {
    c.heartbeat(
        &Heartbeat {
            server_id: id,
            load: LoadSample::default(),
            models: Vec::new(),
            in_flight: Vec::new(),
        },
        secs(at),
    )
    .reply
}

fn from(source: &str) -> Registering {
    Registering {
        source: source.into(),
        verified: true,
        holder_gone: false,
    }
}

fn reg(name: &str) -> Registration {
    registration(name, &[dgemm(), echo(), sleep()])
}

/// `sleep(seconds) -> slept`: its time is its argument, on any server.
fn sleep() -> ServiceDesc {
    ServiceDesc {
        memory: None,
        name: "sleep".into(),
        doc: String::new(),
        args: vec![
            ArgDesc::new("seconds", ArgMode::In, "int"),
            ArgDesc::new("slept", ArgMode::Out, "double"),
        ],
        size_params: vec!["seconds".into()],
        complexity: None,
        duration: Some("seconds".into()),
    }
}

fn profile(service: &str, sizes: &[(&str, i64)]) -> CallProfile {
    CallProfile {
        service: service.into(),
        sizes: sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        in_bytes: 0,
        out_bytes: 0,
        remote_in: Vec::new(),
        inline_bytes: 0,
    }
}

fn ok_report(service: &str, sizes: &[(&str, i64)], kernel_s: f64) -> CallReport {
    CallReport {
        client_in_bytes: None,
        cpu_available: None,
        ticket: None,
        service: service.into(),
        sizes: sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        timing: Timing {
            kernel_s,
            ..Timing::default()
        },
        ok: true,
    }
}

#[test]
fn a_live_servers_name_is_kept_by_its_secret_until_it_is_down_and_gone() {
    let mut c = AgentCore::new(CoreConfig::default());
    let mut first_reg = reg("s1");
    first_reg.instance = "first".into();
    let first = c
        .register_from(first_reg, &from("10.0.0.1"), secs(0.0))
        .unwrap();
    beat(&mut c, first.server_id, 0.0);
    // An impostor elsewhere, while the holder is up (say frozen for two seconds): refused
    // outright, even if the shell found the holder silent at its address.
    let mut impostor = reg("s1");
    impostor.addr = "10.0.0.66:7100".into();
    impostor.instance = "other".into();
    let silent = Registering {
        source: "10.0.0.66".into(),
        verified: true,
        holder_gone: true,
    };
    let refusal = c
        .register_from(impostor.clone(), &silent, secs(2.0))
        .unwrap_err();
    let Refusal::Refused(e) = refusal else {
        panic!("a live holder's name is not contested: {refusal:?}")
    };
    assert!(e.message.contains("held by a live server"), "{e}");
    assert_eq!(c.server_by_name("s1").unwrap().addr(), "s1.example:7000");
    // A wrong secret is no better.
    impostor.secret = Some("0".repeat(32));
    assert!(
        c.register_from(impostor.clone(), &silent, secs(2.0))
            .is_err()
    );
    // The holder itself, coming back with its secret, keeps its id.
    let mut back = reg("s1");
    back.instance = "first".into();
    back.secret = Some(first.secret.clone());
    let again = c.register_from(back, &from("10.0.0.1"), secs(2.5)).unwrap();
    assert_eq!(again.server_id, first.server_id);
    // A restart in place: a new process answering at the holder's own address.
    let mut in_place = reg("s1");
    in_place.instance = "second".into();
    let here = Registering {
        source: "10.0.0.1".into(),
        verified: true,
        holder_gone: false,
    };
    let restarted = c.register_from(in_place, &here, secs(3.0)).unwrap();
    assert_eq!(restarted.server_id, first.server_id);
    assert_eq!(c.replaced(first.server_id, "second"), None);
    beat(&mut c, restarted.server_id, 3.0);
    // Down (silent past the timeout): the shell must still find it gone before the name
    // passes on.
    c.sweep(secs(20.0));
    impostor.secret = None;
    let refusal = c
        .register_from(impostor.clone(), &from("10.0.0.66"), secs(21.0))
        .unwrap_err();
    assert!(
        matches!(&refusal, Refusal::Contested { addr, instance, .. }
            if addr == "s1.example:7000" && instance == "second"),
        "{refusal:?}"
    );
    let gone = Registering {
        holder_gone: true,
        ..silent.clone()
    };
    let taken = c.register_from(impostor, &gone, secs(21.0)).unwrap();
    assert_eq!(taken.server_id, first.server_id);
    // The old process, resuming, is told its entry was taken and by whom; the new holder is
    // not.
    assert_eq!(c.replaced(first.server_id, "second"), Some(Ack::Replaced));
    assert_eq!(c.server(taken.server_id).unwrap().addr(), "10.0.0.66:7100");
    assert_eq!(c.replaced(first.server_id, "other"), None);
    beat(&mut c, taken.server_id, 21.0);
    // Its registration cannot take the name back from the live new holder, secret or not.
    let mut old = reg("s1");
    old.instance = "second".into();
    old.secret = Some(restarted.secret.clone());
    let refusal = c.register_from(old, &silent, secs(22.0)).unwrap_err();
    assert!(matches!(refusal, Refusal::Refused(_)), "{refusal:?}");
}

#[test]
fn registrations_are_rate_limited_and_capped_per_source() {
    let mut c = AgentCore::new(CoreConfig {
        registrations_per_s: 1.0,
        registration_burst: 5.0,
        max_servers_per_source: 3,
        ..CoreConfig::default()
    });
    for i in 0..3 {
        c.register_from(reg(&format!("s{i}")), &from("10.0.0.9"), secs(0.0))
            .unwrap();
    }
    let e = c
        .register_from(reg("s3"), &from("10.0.0.9"), secs(0.0))
        .unwrap_err()
        .into_rpc();
    assert!(e.message.contains("max_servers_per_source"), "{e}");
    // Another source is not held back by the first.
    c.register_from(reg("t0"), &from("10.0.0.10"), secs(0.0))
        .unwrap();
    // Attempts are limited before anything is dialled: the burst of 5 is spent, then refused
    // until it refills, and another source is not held back.
    for _ in 0..5 {
        c.may_register("10.0.0.9", secs(0.0)).unwrap();
    }
    let e = c.may_register("10.0.0.9", secs(0.0)).unwrap_err();
    assert!(
        e.message.contains("too many registrations from 10.0.0.9"),
        "{e}"
    );
    c.may_register("10.0.0.10", secs(0.0)).unwrap();
    c.may_register("10.0.0.9", secs(1.1)).unwrap();
}

#[test]
fn a_registration_that_never_beats_is_forgotten_not_kept() {
    let mut c = AgentCore::new(CoreConfig::default());
    let fake = c.register_from(reg("fake"), &from("x"), secs(0.0)).unwrap();
    let real = c.register_from(reg("real"), &from("y"), secs(0.0)).unwrap();
    beat(&mut c, real.server_id, 0.5);
    c.rank(
        &dgemm_profile(10, 10, 10),
        &RankOptions::default(),
        secs(1.0),
    )
    .unwrap();
    assert_eq!(
        c.sweep(secs(11.0)),
        vec![
            Learned::Down(real.server_id),
            Learned::Forgotten("fake".into())
        ]
    );
    assert!(c.server(fake.server_id).is_none());
    assert!(c.sweep(secs(11.5)).is_empty(), "each is taught once");
    // The one that beat is down and kept (with its id, for when it comes back)...
    assert!(!c.server(real.server_id).unwrap().is_up());
    assert_eq!(c.pending(), 0);
    // ...until it has been gone longer than the retention.
    let retention = CoreConfig::default().server_retention.as_secs_f64();
    assert_eq!(
        c.sweep(secs(retention + 12.0)),
        vec![Learned::Forgotten("real".into())]
    );
    assert!(c.registry().is_empty());
}

#[test]
fn forgetting_a_server_keeps_the_others_tickets_and_models_in_place() {
    let mut c = AgentCore::new(CoreConfig::default());
    let a = c.register(reg("a"), secs(0.0)).unwrap().server_id;
    let b = c.register(reg("b"), secs(0.0)).unwrap().server_id;
    beat(&mut c, b, 0.0);
    // `b` is in the last slot; forgetting `a` moves it.
    let on_b = RankOptions {
        pin_server: Some("b".into()),
        ..RankOptions::default()
    };
    let t = c
        .rank(&dgemm_profile(10, 10, 10), &on_b, secs(0.5))
        .unwrap()
        .ticket;
    beat(&mut c, b, 10.0);
    c.sweep(secs(10.6));
    assert!(c.server(a).is_none());
    assert_eq!(c.server(b).unwrap().name(), "b");
    assert_eq!(c.server_by_name("b").unwrap().id(), b);
    // Whatever the ticket's server, the report still finds it.
    assert_eq!(c.pending(), 1);
    c.report(b, &[ok_report("echo", &[], 0.1)], secs(10.7));
    c.release(t);
    assert_eq!(c.pending(), 0);
    let r = c
        .rank(
            &dgemm_profile(10, 10, 10),
            &RankOptions::default(),
            secs(10.8),
        )
        .unwrap();
    assert_eq!(r.candidates.len(), 1);
    assert_eq!(r.candidates[0].name, "b");
}

#[test]
fn only_the_client_that_holds_a_ticket_may_release_it() {
    let mut c = AgentCore::new(CoreConfig::default());
    c.register(reg("a"), secs(0.0)).unwrap();
    let p = dgemm_profile(100, 100, 100);
    let t = c
        .rank_for(Some("alice"), &p, &RankOptions::default(), secs(0.0))
        .unwrap()
        .ticket;
    assert!(!c.release_by(t, "mallory"));
    assert_eq!(c.pending(), 1);
    assert!(c.release_by(t, "alice"));
    assert_eq!(c.pending(), 0);
}

#[test]
fn tickets_cannot_be_guessed_from_one_another() {
    let mut c = AgentCore::new(CoreConfig::default());
    c.register(reg("a"), secs(0.0)).unwrap();
    let p = dgemm_profile(1, 1, 1);
    let t: Vec<u64> = (0..100)
        .map(|_| {
            c.rank(&p, &RankOptions::default(), secs(0.0))
                .unwrap()
                .ticket
                .0
        })
        .collect();
    // Sequential numbers would let any client release anyone's tickets.
    assert!(t.windows(2).all(|w| w[1].abs_diff(w[0]) > 1));
    let mut sorted = t.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 100);
}

#[test]
fn calls_go_only_where_they_fit_in_memory() {
    let mut c = AgentCore::new(CoreConfig::default());
    let mut small = reg("small");
    small.memory_budget_bytes = 1 << 30;
    small.max_frame_bytes = 1 << 30;
    let mut big = reg("big");
    big.memory_budget_bytes = 64 << 30;
    big.max_frame_bytes = 1 << 30;
    c.register(small, secs(0.0)).unwrap();
    c.register(big, secs(0.0)).unwrap();
    // A 16000² product: 2 GB of result, 4 GB of footprint.
    let mut p = dgemm_profile(16_000, 16_000, 1);
    p.out_bytes = 16_000 * 16_000 * 8;
    let r = c.rank(&p, &RankOptions::default(), secs(0.0)).unwrap();
    assert_eq!(r.candidates.len(), 1);
    assert_eq!(r.candidates[0].name, "big");
    // Beyond every budget: refused at the agent, saying what it needs and what exists.
    p.out_bytes = 40 << 30;
    let e = c.rank(&p, &RankOptions::default(), secs(0.0)).unwrap_err();
    // A resource limit: servers exist, and the call is refused as theirs would refuse it.
    assert_eq!(e.code, ErrorCode::RpcRefused);
    assert!(
        e.message.contains("memory budget") && e.message.contains("(big)"),
        "{e}"
    );
    // Inputs larger than any frame still go where the memory is: they travel on bulk
    // connections.
    let mut q = dgemm_profile(10, 10, 10);
    q.in_bytes = 2 << 30;
    let r = c.rank(&q, &RankOptions::default(), secs(0.0)).unwrap();
    assert_eq!(r.candidates[0].name, "big");
    // The graph mapper sees the same limits.
    let g = c.map_graph(
        &gridwise_proto::GraphRequest {
            conservative_tf: None,
            load_model: None,
            link_blind: false,
            calls: vec![gridwise_proto::GraphCall {
                name: "huge".into(),
                profile: p,
                fetched: false,
            }],
            edges: vec![],
            policy: None,
            reserve: false,
        },
        secs(0.0),
    );
    assert!(g.is_err());
}

#[test]
fn declared_durations_fill_the_queue_estimate() {
    // The finding: 484 pending `sleep 1` showed no queue, and other calls piled in behind.
    let mut c = AgentCore::new(CoreConfig::default());
    c.register(reg("a"), secs(0.0)).unwrap();
    c.register(reg("b"), secs(0.0)).unwrap();
    let one_s = profile("sleep", &[("seconds", 1)]);
    let pin_a = RankOptions {
        pin_server: Some("a".into()),
        ..RankOptions::default()
    };
    for _ in 0..20 {
        let r = c.rank(&one_s, &pin_a, secs(0.0)).unwrap();
        assert_eq!(r.candidates[0].etc.compute_source, ComputeSource::Declared);
        assert_eq!(r.candidates[0].etc.compute_s, 1.0);
    }
    let e = c
        .explain(&profile("echo", &[]), &RankOptions::default(), secs(0.0))
        .unwrap();
    let a = e.iter().find(|c| c.name == "a").unwrap();
    assert!(a.etc.queue_wait_s >= 19.0, "{:?}", a.etc);
    // An unpinned call goes to the idle server; unpinned sleeps spread over both.
    let r = c
        .rank(&profile("echo", &[]), &RankOptions::default(), secs(0.0))
        .unwrap();
    assert_eq!(r.candidates[0].name, "b");
    let mut on_b = 0;
    for _ in 0..20 {
        let r = c.rank(&one_s, &RankOptions::default(), secs(0.0)).unwrap();
        on_b += (r.candidates[0].name == "b") as usize;
    }
    assert!(on_b >= 15, "{on_b} of 20 went to the idle server");
}

#[test]
fn services_without_formulas_learn_per_size_and_from_the_grid() {
    let mut c = AgentCore::new(CoreConfig::default());
    let a = c.register(reg("a"), secs(0.0)).unwrap().server_id;
    c.register(reg("b"), secs(0.0)).unwrap();
    let echo_p = profile("echo", &[]);
    // Nothing known anywhere: a nominal time, so a burst spreads instead of piling up.
    let first = c.rank(&echo_p, &RankOptions::default(), secs(0.0)).unwrap();
    assert_eq!(
        first.candidates[0].etc.compute_source,
        ComputeSource::Assumed {
            seconds: ASSUMED_UNKNOWN_S
        }
    );
    let second = c.rank(&echo_p, &RankOptions::default(), secs(0.0)).unwrap();
    assert_ne!(first.candidates[0].name, second.candidates[0].name);
    // Once `a` has run some, `b` (which has run none) borrows the grid's history.
    c.report(
        a,
        &[ok_report("echo", &[], 0.25), ok_report("echo", &[], 0.75)],
        secs(1.0),
    );
    let e = c
        .explain(&echo_p, &RankOptions::default(), secs(1.0))
        .unwrap();
    let b = e.iter().find(|x| x.name == "b").unwrap();
    assert_eq!(
        b.etc.compute_source,
        ComputeSource::GridHistory { calls: 2 }
    );
    assert_eq!(b.etc.compute_s, 0.5);
}

#[test]
fn a_restarted_agent_waits_briefly_for_the_servers_it_knew() {
    let mut c = AgentCore::new(CoreConfig::default());
    c.restore_server(ServerId::new_random(), reg("a"), Duration::ZERO)
        .unwrap();
    assert!(c.awaiting_servers(secs(1.0)));
    assert!(!c.awaiting_servers(secs(6.0)));
    let id = c.register(reg("a"), secs(1.0)).unwrap().server_id;
    assert!(!c.awaiting_servers(secs(1.0)));
    assert_eq!(beat(&mut c, id, 1.5), Ack::Ok);
}

/// Ranks `profile` on the server `name` alone and reports it done there: what confirms it.
fn run_on(c: &mut AgentCore, name: &str, at: f64) {
    let opts = RankOptions {
        pin_server: Some(name.into()),
        ..RankOptions::default()
    };
    let p = dgemm_profile(100, 100, 100);
    let r = c.rank(&p, &opts, secs(at)).unwrap();
    let id = c.server_by_name(name).unwrap().id();
    let mut done = ok_report("dgemm", &[("m", 100), ("n", 100), ("k", 100)], 0.002);
    done.ticket = Some(r.ticket);
    c.report(id, &[done], secs(at));
}

/// Three servers at 1e9 op/s, each confirmed by a call.
fn confirmed_grid() -> AgentCore {
    let mut c = AgentCore::new(CoreConfig::default());
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let id = c
            .register_from(reg(name), &from(&format!("10.0.0.{i}")), secs(0.0))
            .unwrap()
            .server_id;
        beat(&mut c, id, 0.0);
        run_on(&mut c, name, 0.0);
        assert!(c.server_by_name(name).unwrap().is_confirmed());
    }
    c
}

#[test]
fn claimed_rates_above_what_confirmed_servers_show_wait_for_a_call() {
    let mut c = confirmed_grid();
    let mut ghost = reg("ghost");
    ghost.default_rate = 1e15;
    ghost.rates = vec![("dgemm".into(), 1e15)];
    let id = c
        .register_from(ghost, &from("10.0.0.66"), secs(1.0))
        .unwrap()
        .server_id;
    beat(&mut c, id, 1.0);
    let g = c.server_by_name("ghost").unwrap();
    assert!(!g.is_confirmed());
    assert_eq!(
        g.default_rate(),
        1e9,
        "held at the confirmed servers' median"
    );
    let dgemm = c.catalog.get("dgemm").unwrap().idx;
    assert_eq!(c.server_by_name("ghost").unwrap().rate(dgemm), Some(1e9));
    // A claim below the median stands as it is.
    let mut slow = reg("slow");
    slow.default_rate = 1e8;
    c.register_from(slow, &from("10.0.0.67"), secs(1.0))
        .unwrap();
    assert_eq!(c.server_by_name("slow").unwrap().default_rate(), 1e8);
    // A call ranked there and reported done confirms it: its claims stand.
    run_on(&mut c, "ghost", 2.0);
    let g = c.server_by_name("ghost").unwrap();
    assert!(g.is_confirmed());
    assert_eq!(g.default_rate(), 1e15);
    assert_eq!(g.rate(dgemm), Some(1e15));
    // A report of a call the agent did not rank there confirms nothing.
    let mut other = reg("other");
    other.default_rate = 1e15;
    let oid = c
        .register_from(other, &from("10.0.0.68"), secs(3.0))
        .unwrap()
        .server_id;
    beat(&mut c, oid, 3.0);
    c.report(
        oid,
        &[ok_report("dgemm", &[("m", 1), ("n", 1), ("k", 1)], 0.1)],
        secs(3.0),
    );
    assert!(!c.server_by_name("other").unwrap().is_confirmed());
    // With nothing confirmed (a new grid), there is nothing to hold claims against.
    let mut fresh = AgentCore::new(CoreConfig::default());
    let mut first = reg("first");
    first.default_rate = 1e15;
    fresh.register(first, secs(0.0)).unwrap();
    assert_eq!(fresh.server_by_name("first").unwrap().default_rate(), 1e15);
}

#[test]
fn a_server_clients_cannot_reach_is_ranked_behind_at_once() {
    let mut c = confirmed_grid();
    let p = dgemm_profile(200, 200, 200);
    let rank = |c: &mut AgentCore, at: f64| {
        c.rank_for(Some("me"), &p, &RankOptions::default(), secs(at))
            .unwrap()
    };
    let first = rank(&mut c, 1.0);
    let top = first.candidates[0].clone();
    // Only the client the ticket was issued to may say so, and only while it is pending.
    assert!(
        !c.unreachable(first.ticket, top.server_id, "someone else", secs(1.0))
            .taken()
    );
    assert!(
        !c.unreachable(Ticket(7), top.server_id, "me", secs(1.0))
            .taken()
    );
    assert_eq!(
        c.unreachable(first.ticket, top.server_id, "me", secs(1.0)),
        Suspicion::For(secs(10.0))
    );
    let next = rank(&mut c, 1.1);
    let names: Vec<&str> = next.candidates.iter().map(|x| x.name.as_str()).collect();
    assert_ne!(names[0], top.name, "{names:?}");
    // A confirmed server comes back only to fill the confirmed half of the places, last.
    assert!(
        names.iter().position(|n| *n == top.name) == Some(names.len() - 1),
        "{names:?}"
    );
    // Only suspects left: they are still offered rather than nothing.
    for x in &next.candidates {
        assert!(
            c.unreachable(next.ticket, x.server_id, "me", secs(1.1))
                .taken()
        );
    }
    let last = rank(&mut c, 1.2);
    assert_eq!(last.candidates.len(), 3);
    // After a heartbeat timeout the suspicion is over.
    for name in ["a", "b", "c"] {
        let id = c.server_by_name(name).unwrap().id();
        beat(&mut c, id, 11.0);
    }
    assert!(
        !c.server_by_name(&top.name)
            .unwrap()
            .is_suspected(secs(11.5))
    );
}

/// A partition healed: the client that reported the server reaches it again, and says so.
/// After a few reports its suspicion would last many heartbeat timeouts; it ends at once,
/// and only on the word of the client that reported it.
#[test]
fn a_suspicion_ends_when_the_reporting_client_reaches_the_server_again() {
    let mut c = confirmed_grid();
    let p = dgemm_profile(200, 200, 200);
    let first = c
        .rank_for(Some("me"), &p, &RankOptions::default(), secs(1.0))
        .unwrap();
    let top = first.candidates[0].clone();
    assert!(
        c.unreachable(first.ticket, top.server_id, "me", secs(1.0))
            .taken()
    );
    let suspect =
        |c: &AgentCore, at: f64| c.server_by_name(&top.name).unwrap().is_suspected(secs(at));
    assert!(suspect(&c, 2.0));
    assert!(!c.reached_again(top.server_id, "someone else", secs(2.0)));
    assert!(suspect(&c, 2.0));
    assert!(c.reached_again(top.server_id, "me", secs(2.0)));
    assert!(!suspect(&c, 2.0));
    // Said twice, or with no suspicion standing: nothing to lift.
    assert!(!c.reached_again(top.server_id, "me", secs(2.1)));
}

/// The client sent a call elsewhere than its reserved server (it could not reach it, or held
/// it unresponsive): the reservation moves to where the call went, on that client's word only.
#[test]
fn a_reservation_moves_to_the_server_its_client_sent_the_call_to() {
    let mut c = confirmed_grid();
    let p = dgemm_profile(200, 200, 200);
    let first = c
        .rank_for(Some("me"), &p, &RankOptions::default(), secs(1.0))
        .unwrap();
    let (top, other) = (&first.candidates[0], &first.candidates[1]);
    let pending = |c: &AgentCore, name: &str| {
        c.status(secs(1.0))
            .servers
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.pending)
    };
    assert_eq!(pending(&c, &top.name), Some(1));
    assert!(!c.placed(first.ticket, other.server_id, "someone else"));
    assert!(!c.placed(Ticket(7), other.server_id, "me"));
    assert_eq!(pending(&c, &top.name), Some(1));
    assert!(c.placed(first.ticket, other.server_id, "me"));
    assert_eq!(pending(&c, &top.name), Some(0));
    assert_eq!(pending(&c, &other.name), Some(1));
    // Reported done there, it is gone from every queue.
    let oid = other.server_id;
    c.report(
        oid,
        &[CallReport {
            ticket: Some(first.ticket),
            ..ok_report("dgemm", &[("m", 200), ("n", 200), ("k", 200)], 0.1)
        }],
        secs(1.2),
    );
    assert_eq!(pending(&c, &other.name), Some(0));
}

#[test]
fn confirmed_servers_keep_half_of_a_rankings_places_among_unproven_ones() {
    let mut c = AgentCore::new(CoreConfig {
        max_candidates: 4,
        ..CoreConfig::default()
    });
    let p = dgemm_profile(500, 500, 500);
    // Two real servers, confirmed and busy; five new ones, idle and claiming their speed.
    for name in ["real1", "real2"] {
        let id = c
            .register_from(reg(name), &from("10.0.0.1"), secs(0.0))
            .unwrap()
            .server_id;
        beat(&mut c, id, 0.0);
        run_on(&mut c, name, 0.0);
        for _ in 0..4 {
            let opts = RankOptions {
                pin_server: Some(name.into()),
                ..RankOptions::default()
            };
            c.rank(&p, &opts, secs(0.5)).unwrap();
        }
    }
    for i in 0..5 {
        let id = c
            .register_from(reg(&format!("new{i}")), &from("10.0.0.66"), secs(0.5))
            .unwrap()
            .server_id;
        beat(&mut c, id, 0.5);
    }
    let r = c.rank(&p, &RankOptions::default(), secs(0.6)).unwrap();
    let names: Vec<&str> = r.candidates.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(
        names[0].starts_with("new") && names[1].starts_with("new"),
        "{names:?}"
    );
    let mut real: Vec<&str> = names[2..].to_vec();
    real.sort();
    assert_eq!(real, ["real1", "real2"], "{names:?}");
    // Still ordered by estimate, and the reservation is on the first.
    let totals: Vec<f64> = r.candidates.iter().map(|x| x.etc.total_s()).collect();
    assert!(totals.windows(2).all(|w| w[0] <= w[1]), "{totals:?}");
    let first = c.server_by_name(names[0]).unwrap().id();
    assert_eq!(c.queue(first).len(), 1);
}

#[test]
fn a_pinned_call_beyond_the_servers_frame_is_refused_with_the_sizes() {
    let mut c = AgentCore::new(CoreConfig::default());
    let mut small = reg("small");
    small.max_frame_bytes = 64 * 1024;
    let id = c.register(small, secs(0.0)).unwrap().server_id;
    beat(&mut c, id, 0.0);
    let mut p = dgemm_profile(100, 100, 100);
    p.in_bytes = 900_000;
    p.inline_bytes = 900_000;
    let opts = RankOptions {
        pin_server: Some("small".into()),
        ..RankOptions::default()
    };
    let e = c.rank(&p, &opts, secs(0.1)).unwrap_err();
    assert_eq!(e.code, ErrorCode::RpcRefused);
    assert!(e.message.contains("resource limit"), "{e}");
    assert!(
        e.message.contains("0.90 MB") && e.message.contains("0.07 MB"),
        "{e}"
    );
    // Unpinned, the same: a resource limit, not "no server".
    let e = c.rank(&p, &RankOptions::default(), secs(0.1)).unwrap_err();
    assert_eq!(e.code, ErrorCode::RpcRefused, "{e}");
    // The same bytes on a bulk connection (not inline) are no bar.
    p.inline_bytes = 1000;
    c.rank(&p, &opts, secs(0.1)).unwrap();
}
