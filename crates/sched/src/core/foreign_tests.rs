use super::*;
use crate::testutil::{dgemm, dgemm_profile, echo, registration};
use gridwise_proto::{InFlight, LoadSample, Timing};

fn beat(id: ServerId, in_flight: Vec<InFlight>) -> Heartbeat {
    Heartbeat {
        server_id: id,
        load: LoadSample::default(),
        models: Vec::new(),
        in_flight,
    }
}

/// Two agents over the same one-slot servers `a` and `b` (equal rates), as several agents
/// sharing a store see them.
fn two_agents() -> [(AgentCore, [ServerId; 2]); 2] {
    std::array::from_fn(|_| {
        let mut c = AgentCore::new(CoreConfig::default());
        let ids = ["a", "b"].map(|name| {
            let mut reg = registration(name, &[dgemm(), echo()]);
            reg.default_rate = 1e9;
            let id = c.register(reg, Duration::ZERO).unwrap().server_id;
            assert_eq!(c.heartbeat(&beat(id, vec![]), Duration::ZERO), Ack::Ok);
            id
        });
        (c, ids)
    })
}

fn wait_on(c: &AgentCore, server: &str, now: Duration) -> f64 {
    let p = dgemm_profile(1000, 1000, 1000);
    c.explain(&p, &RankOptions::default(), now)
        .unwrap()
        .into_iter()
        .find(|x| x.name == server)
        .unwrap()
        .etc
        .queue_wait_s
}

#[test]
fn a_call_another_agent_placed_fills_the_queue_from_the_servers_next_heartbeat() {
    let [(mut one, one_ids), (mut two, two_ids)] = two_agents();
    let p = dgemm_profile(1000, 1000, 1000);
    // Agent one places a 2 s call (2e9 operations at 1e9/s) on a server; agent two does not
    // know yet, and would send the next call to the same, busy server half the time.
    let ranked = one
        .rank(&p, &RankOptions::default(), Duration::ZERO)
        .unwrap();
    let server = ranked.candidates[0].name.clone();
    let i = usize::from(server == "b");
    assert!(wait_on(&one, &server, Duration::ZERO) > 1.9);
    assert_eq!(wait_on(&two, &server, Duration::ZERO), 0.0);
    // The server's heartbeat to agent two lists the call, whose kernel has run 0.5 s.
    let running = InFlight {
        ticket: ranked.ticket,
        service: "dgemm".into(),
        sizes: p.sizes.clone(),
        ran_s: Some(0.5),
    };
    let now = Duration::from_millis(500);
    two.heartbeat(&beat(two_ids[i], vec![running.clone()]), now);
    let w = wait_on(&two, &server, now);
    assert!((w - 1.5).abs() < 0.05, "{w}");
    // The next ranking by agent two goes to the other server.
    let next = two.rank(&p, &RankOptions::default(), now).unwrap();
    assert_ne!(next.candidates[0].name, server);
    // Agent one's own call is not counted twice when the heartbeat lists it to agent one.
    one.heartbeat(&beat(one_ids[i], vec![running]), now);
    let w = wait_on(&one, &server, now);
    assert!((w - 1.5).abs() < 0.05, "{w}");
    // Ended (the next heartbeat no longer lists it): the queue is free again.
    let later = Duration::from_secs(1);
    two.heartbeat(&beat(two_ids[i], vec![]), later);
    assert_eq!(wait_on(&two, &server, later), 0.0);
}

#[test]
fn a_call_of_another_agent_that_waits_counts_whole_and_one_that_overran_still_holds_its_slot() {
    let [_, (mut two, ids)] = two_agents();
    let p = dgemm_profile(1000, 1000, 1000);
    let call = |ticket: u64, ran_s: Option<f64>| InFlight {
        ticket: Ticket(ticket),
        service: "dgemm".into(),
        sizes: p.sizes.clone(),
        ran_s,
    };
    two.heartbeat(&beat(ids[0], vec![call(7, None)]), Duration::ZERO);
    let w = wait_on(&two, "a", Duration::ZERO);
    assert!((w - 2.0).abs() < 0.05, "{w}");
    // A one-slot server running one call with two waiting: they queue one behind another
    // (listed in any order), so a new call waits for all three.
    two.heartbeat(
        &beat(
            ids[0],
            vec![call(8, None), call(9, Some(1.0)), call(10, None)],
        ),
        Duration::ZERO,
    );
    let w = wait_on(&two, "a", Duration::ZERO);
    assert!((w - 5.0).abs() < 0.05, "{w}");
    two.heartbeat(&beat(ids[0], vec![call(7, None)]), Duration::ZERO);
    two.heartbeat(&beat(ids[0], vec![call(7, Some(5.0))]), Duration::ZERO);
    let w = wait_on(&two, "a", Duration::ZERO);
    assert!(w > 0.0 && w < 0.2, "{w}");
    // Its report (the server tells every agent) clears it at once.
    two.report(
        ids[0],
        &[CallReport {
            client_in_bytes: None,
            cpu_available: None,
            ticket: Some(Ticket(7)),
            service: "dgemm".into(),
            sizes: p.sizes.clone(),
            timing: Default::default(),
            ok: true,
        }],
        Duration::ZERO,
    );
    assert_eq!(wait_on(&two, "a", Duration::ZERO), 0.0);
    // A service the agent does not know is left out, not an error.
    let mut odd = call(8, None);
    odd.service = "unknown".into();
    two.heartbeat(&beat(ids[0], vec![odd]), Duration::ZERO);
    assert_eq!(wait_on(&two, "a", Duration::ZERO), 0.0);
}

#[test]
fn a_servers_arrival_notice_tells_the_other_agents_at_once() {
    let [(mut one, _), (mut two, two_ids)] = two_agents();
    let p = dgemm_profile(1000, 1000, 1000);
    let ranked = one
        .rank(&p, &RankOptions::default(), Duration::ZERO)
        .unwrap();
    let server = ranked.candidates[0].name.clone();
    let i = usize::from(server == "b");
    let call = InFlight {
        ticket: ranked.ticket,
        service: "dgemm".into(),
        sizes: p.sizes.clone(),
        ran_s: None,
    };
    assert_eq!(
        two.arrived(two_ids[i], std::slice::from_ref(&call), Duration::ZERO),
        Ack::Ok
    );
    let w = wait_on(&two, &server, Duration::ZERO);
    assert!((w - 2.0).abs() < 0.05, "{w}");
    // Told twice (a notice, then a heartbeat listing it): counted once.
    two.heartbeat(&beat(two_ids[i], vec![call]), Duration::ZERO);
    let w = wait_on(&two, &server, Duration::ZERO);
    assert!((w - 2.0).abs() < 0.05, "{w}");
    // A server the agent does not know is told to register.
    assert_eq!(
        two.arrived(ServerId::new_random(), &[], Duration::ZERO),
        Ack::Reregister
    );
}

#[test]
fn the_agent_that_placed_a_call_stores_what_it_taught_and_the_others_only_learn_it() {
    let [(mut one, one_ids), (mut two, two_ids)] = two_agents();
    let p = dgemm_profile(1000, 1000, 1000);
    let ranked = one
        .rank(&p, &RankOptions::default(), Duration::ZERO)
        .unwrap();
    let i = usize::from(ranked.candidates[0].name == "b");
    two.arrived(
        two_ids[i],
        &[InFlight {
            ticket: ranked.ticket,
            service: "dgemm".into(),
            sizes: p.sizes.clone(),
            ran_s: None,
        }],
        Duration::ZERO,
    );
    let report = CallReport {
        client_in_bytes: None,
        cpu_available: None,
        ticket: Some(ranked.ticket),
        service: "dgemm".into(),
        sizes: p.sizes.clone(),
        timing: gridwise_proto::Timing {
            kernel_s: 1.5,
            ..Default::default()
        },
        ok: true,
    };
    // Every agent hears the report and learns from it ...
    let at_one = one.report(one_ids[i], std::slice::from_ref(&report), Duration::ZERO);
    let at_two = two.report(two_ids[i], std::slice::from_ref(&report), Duration::ZERO);
    for c in [&one, &two] {
        let m = c.model(&ranked.candidates[0].name, "dgemm").unwrap();
        assert_eq!(m.points.len(), 1, "{m:?}");
    }
    // ... but only the agent that placed it has the store keep it.
    let theirs = |o: &Outcome<Ack>| match &o.learned[0] {
        Learned::Timings { theirs, .. } => theirs.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(theirs(&at_one), [false]);
    assert_eq!(theirs(&at_two), [true]);
    assert_eq!(at_one.points().count(), 1);
    assert_eq!(at_two.points().count(), 0);
    // A call no agent was told of (a restarted agent's, say) is stored by whoever hears it.
    let unknown = CallReport {
        ticket: Some(Ticket(12345)),
        ..report
    };
    let at_two = two.report(two_ids[i], &[unknown], Duration::from_secs(1));
    assert_eq!(theirs(&at_two), [false]);
}

#[test]
fn an_own_call_that_overran_holds_its_slot_from_the_next_heartbeat_and_keeps_its_prediction() {
    let mut c = AgentCore::new(CoreConfig::default());
    let mut reg = registration("a", &[dgemm()]);
    reg.default_rate = 1e9;
    let id = c.register(reg, Duration::ZERO).unwrap().server_id;
    c.heartbeat(&beat(id, vec![]), Duration::ZERO);
    // Two 2 s calls on a one-slot server: the second waits for the first.
    let p = dgemm_profile(1000, 1000, 1000);
    let first = c.rank(&p, &RankOptions::default(), Duration::ZERO).unwrap();
    let second = c.rank(&p, &RankOptions::default(), Duration::ZERO).unwrap();
    let listed = |ticket, ran_s| InFlight {
        ticket,
        service: "dgemm".into(),
        sizes: p.sizes.clone(),
        ran_s,
    };
    // At 3 s the first has overrun by a second. Told nothing, the agent counts it ended at
    // 2 s and the second as running since: a slot frees at 4 s, a second from now.
    let now = Duration::from_secs(3);
    let w = wait_on(&c, "a", now);
    assert!((w - 1.0).abs() < 0.05, "{w}");
    // The heartbeat lists the first still running and the second still waiting: the first
    // holds the slot a little longer, the second waits for it and then runs its 2 s.
    c.heartbeat(
        &beat(
            id,
            vec![listed(second.ticket, None), listed(first.ticket, Some(3.0))],
        ),
        now,
    );
    let w = wait_on(&c, "a", now);
    assert!((w - 2.1).abs() < 0.05, "{w}");
    assert_eq!(c.pending(), 2);
    // Its report is judged against what was predicted when it was placed, not since.
    let out = c.report(
        id,
        &[CallReport {
            client_in_bytes: None,
            cpu_available: None,
            ticket: Some(first.ticket),
            service: "dgemm".into(),
            sizes: p.sizes.clone(),
            timing: Timing {
                kernel_s: 3.2,
                ..Timing::default()
            },
            ok: true,
        }],
        Duration::from_millis(3200),
    );
    let predicted = out.learned.iter().find_map(|l| match l {
        Learned::Timings {
            predicted_kernel_s, ..
        } => Some(predicted_kernel_s.clone()),
        _ => None,
    });
    let predicted = predicted.unwrap()[0].unwrap();
    assert!((predicted - 2.0).abs() < 0.01, "{predicted}");
    assert_eq!(c.pending(), 1);
}

/// An agent over one-slot dgemm servers `a` (10 % faster) and `b`, and an echo server `x`,
/// that has heard `foreign` of the others' calls reach `x` in the last second, each 1 ms
/// apart, and one of its own reach `x` 0.5 ms after it ranked it; and the time then.
fn agent_hearing(foreign: usize, slots_a: u32) -> (AgentCore, Duration) {
    agent_over(&[("a", 1.1e9, slots_a), ("b", 1e9, 1)], foreign, None)
}

/// [`agent_hearing`] over the dgemm servers `dgemm` (name, rate, slots), its ties among
/// equally good servers salted with `salt`.
fn agent_over(
    dgemm_servers: &[(&str, f64, u32)],
    foreign: usize,
    salt: Option<u64>,
) -> (AgentCore, Duration) {
    let mut c = AgentCore::new(CoreConfig {
        tie_salt: salt,
        ..CoreConfig::default()
    });
    let mut ids = Vec::new();
    let servers = dgemm_servers
        .iter()
        .map(|&(name, rate, slots)| (name, rate, slots, dgemm()))
        .chain([("x", 1e9, 1, echo())]);
    for (name, rate, slots, service) in servers {
        let mut reg = registration(name, &[service]);
        reg.default_rate = rate;
        reg.slots = slots;
        let id = c.register(reg, Duration::ZERO).unwrap().server_id;
        assert_eq!(c.heartbeat(&beat(id, vec![]), Duration::ZERO), Ack::Ok);
        ids.push(id);
    }
    let x = *ids.last().unwrap();
    let echo_call = |ticket: Ticket| InFlight {
        ticket,
        service: "echo".into(),
        sizes: Vec::new(),
        ran_s: None,
    };
    let start = Duration::from_secs(1);
    for i in 0..foreign {
        let at = start + Duration::from_millis(i as u64);
        c.arrived(x, &[echo_call(Ticket(1_000_000 + i as u64))], at);
    }
    let now = start + Duration::from_millis(foreign as u64);
    let pin = RankOptions {
        pin_server: Some("x".into()),
        ..RankOptions::default()
    };
    let mut echo_profile = dgemm_profile(1, 1, 1);
    echo_profile.service = "echo".into();
    echo_profile.sizes = Vec::new();
    let own = c.rank(&echo_profile, &pin, now).unwrap();
    let now = now + Duration::from_micros(500);
    c.arrived(x, &[echo_call(own.ticket)], now);
    (c, now)
}

/// The server `rank` puts first for a 1000³ dgemm, checking that `explain` (what `status
/// --service` shows) puts the same one first.
fn first_choice((mut c, now): (AgentCore, Duration)) -> String {
    let p = dgemm_profile(1000, 1000, 1000);
    let explained = c.explain(&p, &RankOptions::default(), now).unwrap()[0]
        .name
        .clone();
    let ranked = c.rank(&p, &RankOptions::default(), now).unwrap().candidates[0]
        .name
        .clone();
    assert_eq!(explained, ranked, "explain and rank disagree");
    ranked
}

#[test]
fn with_the_others_calls_in_transit_a_server_about_to_fill_gives_way_to_one_with_room() {
    let first = first_choice;
    // Alone (nobody else's calls arrive), the faster server, as always.
    assert_eq!(first(agent_hearing(0, 1)), "a");
    // A thousand of the others' calls a second and 0.5 ms in transit: one of theirs is
    // likely on its way to `a`'s last slot, and waiting behind it (1.8 s) costs more than
    // `b`'s 10 %.
    assert_eq!(first(agent_hearing(1000, 1)), "b");
    // With room for both, `a` keeps its place.
    assert_eq!(first(agent_hearing(1000, 2)), "a");
}

#[test]
fn agents_hearing_each_other_spread_their_calls_over_equally_good_servers() {
    // Six servers as fast as each other, with room, and one a tenth slower.
    let servers = [
        ("e1", 1e9, 2),
        ("e2", 1e9, 2),
        ("e3", 1e9, 2),
        ("e4", 1e9, 2),
        ("e5", 1e9, 2),
        ("e6", 1e9, 2),
        ("slow", 0.9e9, 2),
    ];
    let first = |foreign: usize, salt: u64| first_choice(agent_over(&servers, foreign, Some(salt)));
    // Alone, every agent takes the first of the equals, whatever its salt.
    for salt in 0..8 {
        assert_eq!(first(0, salt), "e1");
    }
    // Hearing the others' calls, each prefers its own among the equals (the others, with the
    // same models and view, would otherwise all send theirs to `e1`), the same one each time,
    // and never the slower server.
    let chosen: std::collections::BTreeSet<String> = (0..8).map(|salt| first(1000, salt)).collect();
    assert!(chosen.len() >= 3, "eight salts chose only {chosen:?}");
    assert!(!chosen.contains("slow"), "{chosen:?}");
    assert_eq!(first(1000, 5), first(1000, 5));
}

#[test]
fn the_status_says_how_many_of_the_others_calls_arrive_and_how_long_they_go_unseen() {
    // Alone: nothing to say.
    let (alone, now) = agent_hearing(0, 1);
    assert_eq!(alone.status(now).others, None);
    // 1,000 of the others' calls a second, and its own told of 0.5 ms after their ranking.
    let (c, now) = agent_hearing(1000, 1);
    let o = c.status(now).others.expect("it hears of others' calls");
    assert!(
        o.arrivals_per_s > 500.0 && o.arrivals_per_s < 1000.0,
        "{o:?}"
    );
    assert_eq!(o.unseen_for_s, Some(0.0005));
    assert!(
        (o.unseen_calls() - o.arrivals_per_s * 0.0005).abs() < 1e-9,
        "{o:?}"
    );
}
