use super::*;
use crate::graph::GraphPolicy;
use crate::testutil::{dgemm, dgemm_profile, echo, registration};
use gridwise_proto::{CallReport, GraphCall, GraphEdge, GraphRequest, LinkSample, Timing};

fn grid(servers: &[(&str, f64)]) -> AgentCore {
    let mut c = AgentCore::new(CoreConfig::default());
    for (name, rate) in servers {
        let mut reg = registration(name, &[dgemm(), echo()]);
        reg.default_rate = *rate;
        c.register(reg, Duration::ZERO).unwrap();
    }
    c
}

fn call(name: &str, n: i64) -> GraphCall {
    GraphCall {
        name: name.into(),
        profile: dgemm_profile(n, n, n),
        fetched: false,
    }
}

/// a -> b, a -> c, (b, c) -> d, each a 1000³ dgemm (2 Gop).
fn diamond(policy: Option<GraphPolicy>, reserve: bool) -> GraphRequest {
    let e = |from, to| GraphEdge {
        from,
        to,
        bytes: 8_000_000,
    };
    GraphRequest {
        conservative_tf: None,
        load_model: None,
        link_blind: false,
        calls: vec![
            call("a", 1000),
            call("b", 1000),
            call("c", 1000),
            call("d", 1000),
        ],
        edges: vec![e(0, 1), e(0, 2), e(1, 3), e(2, 3)],
        policy,
        reserve,
    }
}

#[test]
fn one_server_runs_everything_in_its_total_work_and_two_dispatches() {
    let mut c = grid(&[("solo", 1e9)]);
    let plan = c.map_graph(&diamond(None, false), Duration::ZERO).unwrap();
    assert_eq!(plan.policy, GraphPolicy::BestOf);
    assert!(!plan.policy_requested);
    assert_eq!(plan.server_of, [0, 0, 0, 0]);
    // No client link measured yet: each edge costs two crossings at the default latency.
    let d = plan.dispatch_s;
    assert_eq!(d, 2.0 * CoreConfig::default().default_latency_s);
    // Four 2-second calls, no transfers on one server but the dispatch of a -> b and of
    // c -> d (a -> c and b -> d overlap with b and c): the bound is their total work.
    assert!(
        (plan.makespan_s - (8.0 + 2.0 * d)).abs() < 1e-9,
        "{}",
        plan.makespan_s
    );
    assert!(
        (plan.lower_bound_s - 8.0).abs() < 1e-9,
        "{}",
        plan.lower_bound_s
    );
    assert_eq!(plan.lower_bound_kind, "total_work");
    assert!(plan.tickets.is_empty());
    assert_eq!(c.pending(), 0);
}

#[test]
fn the_fetched_outputs_trip_to_the_client_counts_in_the_makespan() {
    let mut c = grid(&[("solo", 1e9)]);
    let plain = c.map_graph(&diamond(None, false), Duration::ZERO).unwrap();
    let mut req = diamond(None, false);
    // d's 8 MB come back; no client link measured yet, so at the default link.
    req.calls[3].fetched = true;
    let fetched = c.map_graph(&req, Duration::ZERO).unwrap();
    let cfg = CoreConfig::default();
    let trip = cfg.default_latency_s
        + req.calls[3].profile.out_bytes as f64 / cfg.default_bandwidth_bytes_per_s;
    assert!(trip > 0.0);
    assert!(
        (fetched.makespan_s - plain.makespan_s - trip).abs() < 1e-9,
        "{} vs {} + {trip}",
        fetched.makespan_s,
        plain.makespan_s
    );
    // The ends of the calls themselves do not move: the fetch comes after them.
    assert_eq!(fetched.end_s, plain.end_s);
}

/// Calls with 50-byte inputs say nothing of what 8 MB cost over the client's link (on the test
/// bed they once made a 2 MB fetch cost 45 s); the client's fetches do: 8 MB in 0.64 s (100
/// Mbit/s), and the graph's fetched output is planned at that.
#[test]
fn the_clients_fetches_teach_the_trip_of_a_fetched_output() {
    let mut c = grid(&[("solo", 1e9)]);
    let id = c.server_by_name("solo").unwrap().id();
    let reports: Vec<CallReport> = (0..8)
        .map(|i| {
            let timing = Timing {
                input_transfer_s: 0.002 + f64::from(i) * 1e-4,
                ..Timing::default()
            };
            echo_report(timing, Some(50))
        })
        .collect();
    c.report(id, &reports, Duration::ZERO);
    let mut req = diamond(None, false);
    req.calls[3].fetched = true;
    req.calls[3].profile.out_bytes = 8_000_000;
    // Until a fetch, the output's trip is at the default link (as in the test above).
    let cfg = CoreConfig::default();
    let default_trip = cfg.default_latency_s + 8e6 / cfg.default_bandwidth_bytes_per_s;
    let before = c.map_graph(&req, Duration::ZERO).unwrap();
    let plain = c.map_graph(&diamond(None, false), Duration::ZERO).unwrap();
    let trip = before.makespan_s - plain.makespan_s;
    assert!(
        (trip - default_trip).abs() < 1e-9,
        "{trip} vs {default_trip}"
    );
    assert!(!c.client_fetched("nobody:1", 8_000_000, 0.64));
    for (bytes, s) in [(8_000_000, 0.642), (4_000_000, 0.322), (8_000_000, 0.641)] {
        assert!(c.client_fetched("solo.example:7000", bytes, s));
    }
    let fetched = c.map_graph(&req, Duration::ZERO).unwrap();
    let plain = c.map_graph(&diamond(None, false), Duration::ZERO).unwrap();
    let trip = fetched.makespan_s - plain.makespan_s;
    assert!((trip - 0.64).abs() < 0.02, "{trip}");
}

/// A finished `echo` with no ticket.
fn echo_report(timing: Timing, client_in_bytes: Option<u64>) -> CallReport {
    CallReport {
        client_in_bytes,
        cpu_available: None,
        ticket: None,
        service: "echo".into(),
        sizes: vec![],
        timing,
        ok: true,
    }
}

#[test]
fn a_call_holds_its_server_for_the_servers_overhead_too() {
    let mut c = grid(&[("solo", 1e9)]);
    let id = c.server_by_name("solo").unwrap().id();
    // Calls that spent 0.2 s in the server besides queue and kernel.
    let timing = Timing {
        queue_wait_s: 0.1,
        kernel_s: 0.3,
        server_s: 0.6,
        ..Timing::default()
    };
    let reports: Vec<CallReport> = (0..4).map(|_| echo_report(timing, None)).collect();
    c.report(id, &reports, Duration::ZERO);
    let plan = c
        .map_graph(&diamond(Some(GraphPolicy::Heft), false), Duration::ZERO)
        .unwrap();
    assert!(
        plan.etc.iter().all(|e| (e - 2.2).abs() < 1e-9),
        "{:?}",
        plan.etc
    );
    let d = plan.dispatch_s;
    assert!(
        (plan.makespan_s - (8.8 + 2.0 * d)).abs() < 1e-9,
        "{}",
        plan.makespan_s
    );
}

#[test]
fn every_data_edge_costs_a_round_trip_of_the_client_links_once_measured() {
    let mut c = grid(&[("solo", 1e9)]);
    let id = c.server_by_name("solo").unwrap().id();
    // Calls whose inputs took 50 ms plus 1 µs per byte to arrive: a 50 ms latency.
    let reports: Vec<CallReport> = (0..8u64)
        .map(|i| {
            let timing = Timing {
                input_transfer_s: 0.05 + i as f64 * 1e-3,
                ..Timing::default()
            };
            echo_report(timing, Some(i * 1000))
        })
        .collect();
    c.report(id, &reports, Duration::ZERO);
    let plan = c
        .map_graph(&diamond(Some(GraphPolicy::Heft), false), Duration::ZERO)
        .unwrap();
    assert!((plan.dispatch_s - 0.1).abs() < 1e-6, "{}", plan.dispatch_s);
    // One server: a, then b and c each 0.1 s after their input, d 0.1 s after the later.
    assert!((plan.makespan_s - 8.2).abs() < 1e-6, "{}", plan.makespan_s);
    // No mapping beats the work; the bound does not count the dispatch.
    assert!((plan.lower_bound_s - 8.0).abs() < 1e-9);
}

#[test]
fn heft_spreads_the_parallel_pair_and_transfers_cost_link_time() {
    let mut c = grid(&[("x", 1e9), ("y", 1e9)]);
    // A slow measured link between x and y: 8 MB at 8 MB/s = 1 s per edge.
    let id = c.server_by_name("x").unwrap().id();
    let sample = LinkSample {
        to: "y.example:7000".into(),
        latency_s: 0.0,
        bandwidth_bytes_per_s: 8e6,
        inbound: false,
    };
    c.record_links(id, &[sample], Duration::ZERO);
    let plan = c
        .map_graph(&diamond(Some(GraphPolicy::Heft), false), Duration::ZERO)
        .unwrap();
    assert!(plan.policy_requested);
    assert_eq!(plan.links.len(), 2, "both directions use the measured link");
    // Splitting b and c runs them side by side, but d is sent only once both are done and
    // then pulls the one made elsewhere: a 1-s transfer into c and one into d, 2 + 1 + 2 + 1
    // + 2 = 8 s, as long as keeping them together (HEFT, planning with inputs that move as
    // each is made, splits them for 7 s). Either way two edges' dispatch is on the path.
    let split = plan.server_of[1] != plan.server_of[2];
    let expected = 8.0 + 2.0 * plan.dispatch_s;
    assert!(
        (plan.makespan_s - expected).abs() < 1e-6,
        "split {split}: {}",
        plan.makespan_s
    );
    assert!(plan.lower_bound_s <= plan.makespan_s + 1e-9);
    assert!((plan.critical_path_s - 6.0).abs() < 1e-9);
}

/// Over a link so slow that an edge costs 10 s, the mapper that knows it keeps the diamond on
/// one server; a link-blind one splits the parallel pair to save 2 s, and its prediction
/// counts the link it ignored.
#[test]
fn a_link_blind_mapping_ignores_the_links_and_its_prediction_pays_them() {
    let mut c = grid(&[("x", 1e9), ("y", 1e9)]);
    let id = c.server_by_name("x").unwrap().id();
    let sample = LinkSample {
        to: "y.example:7000".into(),
        latency_s: 0.0,
        bandwidth_bytes_per_s: 8e5,
        inbound: false,
    };
    c.record_links(id, &[sample], Duration::ZERO);
    let aware = c
        .map_graph(&diamond(Some(GraphPolicy::Heft), false), Duration::ZERO)
        .unwrap();
    assert_eq!(aware.server_of[1], aware.server_of[2], "{aware:?}");
    let blind = c
        .map_graph(
            &GraphRequest {
                link_blind: true,
                ..diamond(Some(GraphPolicy::Heft), false)
            },
            Duration::ZERO,
        )
        .unwrap();
    assert_ne!(blind.server_of[1], blind.server_of[2], "{blind:?}");
    assert!(
        blind.makespan_s > aware.makespan_s + 5.0,
        "{} vs {}",
        blind.makespan_s,
        aware.makespan_s
    );
}

#[test]
fn reserve_records_one_ticket_per_call_and_reports_clear_them() {
    let mut c = grid(&[("x", 1e9), ("y", 2e9)]);
    let plan = c.map_graph(&diamond(None, true), Duration::ZERO).unwrap();
    assert_eq!(plan.tickets.len(), 4);
    assert_eq!(c.pending(), 4);
    // The graph's calls now weigh on the queues other calls see.
    let cands = c
        .explain(
            &dgemm_profile(10, 10, 10),
            &RankOptions::default(),
            Duration::ZERO,
        )
        .unwrap();
    assert!(cands.iter().any(|c| c.etc.queue_wait_s > 0.0));
    let server = plan.servers[plan.server_of[0] as usize].server_id;
    let report = CallReport {
        client_in_bytes: None,
        cpu_available: None,
        ticket: Some(plan.tickets[0]),
        service: "dgemm".into(),
        sizes: vec![],
        timing: Timing::default(),
        ok: true,
    };
    c.report(server, &[report], Duration::ZERO);
    assert_eq!(c.pending(), 3);
    for t in &plan.tickets[1..] {
        assert!(c.release(*t));
    }
    assert_eq!(c.pending(), 0);
}

#[test]
fn faster_server_takes_more_of_a_bag_by_default_lp() {
    let mut c = grid(&[("fast", 4e9), ("slow", 1e9)]);
    let req = GraphRequest {
        conservative_tf: None,
        load_model: None,
        link_blind: false,
        calls: (0..10).map(|i| call(&format!("t{i}"), 1000)).collect(),
        edges: vec![],
        policy: None,
        reserve: false,
    };
    let plan = c.map_graph(&req, Duration::ZERO).unwrap();
    assert_eq!(plan.policy, GraphPolicy::Lp);
    let on_fast = plan.server_of.iter().filter(|&&s| s == 0).count();
    assert!(on_fast >= 7, "{:?}", plan.server_of);
    // 10 calls of 2 Gop over 5 Gop/s: no better than 4 s; LP rounding lands close.
    assert!(plan.makespan_s >= plan.lower_bound_s - 1e-9);
    assert!(plan.makespan_s <= 5.0, "{}", plan.makespan_s);
}

#[test]
fn bad_requests_say_what_is_wrong() {
    let mut c = grid(&[("x", 1e9)]);
    let empty = GraphRequest {
        conservative_tf: None,
        load_model: None,
        link_blind: false,
        calls: vec![],
        edges: vec![],
        policy: None,
        reserve: false,
    };
    assert!(
        c.map_graph(&empty, Duration::ZERO)
            .unwrap_err()
            .message
            .contains("no calls")
    );
    let mut req = diamond(None, false);
    req.edges.push(GraphEdge {
        from: 3,
        to: 0,
        bytes: 1,
    });
    let err = c.map_graph(&req, Duration::ZERO).unwrap_err();
    assert!(err.message.contains("cycle"), "{}", err.message);
    req.edges.pop();
    req.calls[2].profile.service = "nope".into();
    let err = c.map_graph(&req, Duration::ZERO).unwrap_err();
    assert!(err.message.contains("call `c`"), "{}", err.message);
    let mut lp_dag = diamond(Some(GraphPolicy::Lp), false);
    lp_dag.reserve = true;
    let err = c.map_graph(&lp_dag, Duration::ZERO).unwrap_err();
    assert!(err.message.contains("independent"), "{}", err.message);
    assert_eq!(c.pending(), 0, "a refused graph reserves nothing");
}

#[test]
fn a_plan_starts_each_slot_when_its_queued_calls_end() {
    let mut c = grid(&[("solo", 1e9)]);
    // A 1000³ dgemm ranked before the graph: 2 s of queued work on the only slot.
    c.rank(
        &dgemm_profile(1000, 1000, 1000),
        &RankOptions::default(),
        Duration::ZERO,
    )
    .unwrap();
    let plan = c.map_graph(&diamond(None, false), Duration::ZERO).unwrap();
    // (Its finish also counts moving its data in and out: a fraction of a millisecond.)
    assert!((plan.start_s[0] - 2.0).abs() < 1e-3, "{:?}", plan.start_s);
    assert!((plan.makespan_s - 10.0).abs() < 1e-3, "{}", plan.makespan_s);
    // Half a second later the queued call has 1.5 s left.
    let later = c
        .map_graph(&diamond(None, false), Duration::from_millis(500))
        .unwrap();
    assert!(
        (later.start_s[0] - plan.start_s[0] + 0.5).abs() < 1e-9,
        "{:?}",
        later.start_s
    );
}

#[test]
fn a_server_lost_while_mapping_refuses_the_reservation_and_records_nothing() {
    let mut c = grid(&[("x", 1e9), ("y", 1e9)]);
    let req = diamond(Some(GraphPolicy::RoundRobin), true);
    let mapped = c
        .snapshot_graph(&GraphOutline::of(&req).unwrap(), Duration::ZERO)
        .unwrap()
        .map(&req)
        .unwrap();
    assert_eq!(
        mapped.plan().tickets.len(),
        0,
        "mapping alone reserves nothing"
    );
    // Both servers fall silent past the heartbeat timeout while the graph is mapped.
    let late = Duration::from_secs(60);
    c.sweep(late);
    assert!(c.registry().iter().all(|e| !e.is_up()));
    let err = c.reserve_graph(None, mapped, late).unwrap_err();
    assert_eq!(err.code, ErrorCode::ServerNotFound);
    assert!(
        err.message.contains("went down while the graph"),
        "{}",
        err.message
    );
    assert_eq!(c.pending(), 0);
}

#[test]
fn the_shared_core_maps_outside_its_lock_and_reserves_under_it() {
    let core = std::sync::Mutex::new(grid(&[("x", 1e9), ("y", 2e9)]));
    let plan = map_graph_shared(&core, Some("alice"), &diamond(None, true), || {
        Duration::ZERO
    })
    .unwrap();
    let mut c = core.into_inner().unwrap();
    assert_eq!(c.pending(), 4);
    assert!(
        !c.release_by(plan.tickets[0], "bob"),
        "only the holder releases"
    );
    assert!(c.release_by(plan.tickets[0], "alice"));
    assert_eq!(c.pending(), 3);
    // The same request mapped in one go on an equal core gives the same plan.
    let mut fresh = grid(&[("x", 1e9), ("y", 2e9)]);
    let mut once = fresh
        .map_graph(&diamond(None, true), Duration::ZERO)
        .unwrap();
    let mut shared = plan;
    once.tickets.clear();
    shared.tickets.clear();
    once.servers
        .iter_mut()
        .zip(&shared.servers)
        .for_each(|(a, b)| a.server_id = b.server_id);
    assert_eq!(once, shared);
}
