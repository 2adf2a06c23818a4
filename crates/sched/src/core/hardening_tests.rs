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
        },
        secs(at),
    )
    .reply
}

fn from(source: &str) -> Registering {
    Registering {
        source: source.into(),
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
fn a_live_servers_name_is_taken_only_with_its_secret_or_once_it_is_gone() {
    let mut c = AgentCore::new(CoreConfig::default());
    let first = c
        .register_from(reg("s1"), &from("10.0.0.1"), secs(0.0))
        .unwrap();
    beat(&mut c, first.server_id, 0.0);
    // An impostor under the same name: contested, and the shell is told where the holder is.
    let mut impostor = reg("s1");
    impostor.addr = "10.0.0.66:7100".into();
    impostor.instance = "other".into();
    let refusal = c
        .register_from(impostor.clone(), &from("10.0.0.66"), secs(1.0))
        .unwrap_err();
    assert_eq!(
        refusal,
        Refusal::Contested {
            name: "s1".into(),
            addr: "s1.example:7000".into(),
            instance: String::new(),
        }
    );
    assert_eq!(c.server_by_name("s1").unwrap().addr(), "s1.example:7000");
    // A wrong secret is no better.
    impostor.secret = Some("0".repeat(32));
    assert!(
        c.register_from(impostor.clone(), &from("10.0.0.66"), secs(1.0))
            .is_err()
    );
    // The holder itself, coming back with its secret, keeps its id.
    let mut back = reg("s1");
    back.secret = Some(first.secret.clone());
    let again = c.register_from(back, &from("10.0.0.1"), secs(2.0)).unwrap();
    assert_eq!(again.server_id, first.server_id);
    // Once the shell found the holder's process gone, a new process may take the name.
    let gone = Registering {
        source: "10.0.0.1".into(),
        holder_gone: true,
    };
    let restarted = c.register_from(reg("s1"), &gone, secs(3.0)).unwrap();
    assert_eq!(restarted.server_id, first.server_id);
    // A down server's name is free to take.
    beat(&mut c, restarted.server_id, 3.0);
    c.sweep(secs(20.0));
    assert!(
        c.register_from(impostor, &from("10.0.0.66"), secs(21.0))
            .is_ok()
    );
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
    // The burst is spent (4 tries from 10.0.0.9, one more allowed), then refused until refilled.
    let _ = c.register_from(reg("s4"), &from("10.0.0.9"), secs(0.0));
    let e = c
        .register_from(reg("s5"), &from("10.0.0.9"), secs(0.0))
        .unwrap_err()
        .into_rpc();
    assert!(
        e.message.contains("too many registrations from 10.0.0.9"),
        "{e}"
    );
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
    assert_eq!(e.code, ErrorCode::ServerNotFound);
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
            calls: vec![gridwise_proto::GraphCall {
                name: "huge".into(),
                profile: p,
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
