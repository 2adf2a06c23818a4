//! Online calls ranked by the agent core on a simulated platform.

use crate::*;
use gridwise_proto::Policy;
use serde_json::{Value, json};

/// A fast class (1 server, 2 slots) whose speed collapses on large sizes, and a steady class
/// (3 one-slot servers).
fn scenario(workload: Value) -> Scenario {
    Scenario::parse(
        &json!({
            "services": { "s": { "complexity": "n^2" } },
            "servers": [
                { "name": "fast", "slots": 2, "speeds": { "s": [[10, 4e6], [100, 4e6], [200, 1e5]] } },
                { "name": "steady", "count": 3, "speeds": { "s": [[10, 1e6], [200, 1e6]] } }
            ],
            "workload": workload
        })
        .to_string(),
    )
    .unwrap()
}

fn online(calls: usize, sizes: Value, gap: f64, knows: &str) -> Value {
    json!({ "kind": "online", "calls": calls, "services": ["s"], "sizes": sizes,
            "mean_gap_s": gap, "gaps": "fixed", "agent_knows": knows, "seed": 3 })
}

#[test]
fn with_models_the_agent_sends_each_size_where_it_runs_best() {
    // One call at a time, far apart: no queue ever decides.
    let s = scenario(online(6, json!({"one_of": [50, 190]}), 100.0, "models"));
    let run = simulate_online(&s, Policy::Mct).unwrap();
    for d in &run.decisions {
        let want_fast = d.size == 50;
        assert_eq!(d.server == "fast", want_fast, "{d:?}");
        // The model is the truth at its points and linear between: the estimate is close.
        let actual = d.done_s - d.arrival_s;
        assert!((d.predicted_s - actual).abs() / actual < 0.05, "{d:?}");
        assert_eq!(d.start_s, d.ready_s, "nobody waits");
    }
    assert_eq!(run.report.calls, 6);
    assert_eq!(run.report.mean_wait_s, 0.0);
}

#[test]
fn a_burst_fills_the_fast_slots_then_queues_where_mct_says() {
    // 12 calls of size 50 at once: 50² / 4e6 = 0.625 ms on fast (2 slots), 2.5 ms on steady.
    let s = scenario(online(12, json!(50), 0.0, "models"));
    let run = simulate_online(&s, Policy::Mct).unwrap();
    let on_fast = run.decisions.iter().filter(|d| d.server == "fast").count();
    assert!(
        on_fast > 2,
        "queueing on the fast server beats the steady ones: {on_fast}"
    );
    assert!(run.report.mean_wait_s > 0.0);
    // No slot ever runs two calls at once: per server, starts and ends interleave correctly.
    for server in ["fast", "steady-0", "steady-1", "steady-2"] {
        let slots = if server == "fast" { 2 } else { 1 };
        let mut spans: Vec<(f64, f64)> = run
            .decisions
            .iter()
            .filter(|d| d.server == server)
            .map(|d| (d.start_s, d.end_s))
            .collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (i, span) in spans.iter().enumerate() {
            let running = spans[..i].iter().filter(|o| o.1 > span.0 + 1e-12).count();
            assert!(running < slots, "{server}: {spans:?}");
        }
    }
    // The same scenario simulates the same way.
    let again = simulate_online(&s, Policy::Mct).unwrap();
    assert_eq!(run.decisions, again.decisions);
}

#[test]
fn an_agent_that_knows_nothing_learns_from_finished_calls() {
    let s = scenario(online(40, json!(50), 1.0, "nothing"));
    let run = simulate_online(&s, Policy::Mct).unwrap();
    // Unknown at first, every server gets tried; once the fast one has run a call, the agent
    // knows it is four times faster and keeps sending there.
    let late: Vec<&str> = run.decisions[20..]
        .iter()
        .map(|d| d.server.as_str())
        .collect();
    assert!(late.iter().all(|s| *s == "fast"), "{late:?}");
    // Its first guesses are the assumed second; after a few calls, its estimates are right.
    for d in &run.decisions[20..] {
        let actual = d.done_s - d.arrival_s;
        assert!((d.predicted_s - actual).abs() / actual < 0.05, "{d:?}");
    }
    assert!(run.decisions[0].predicted_s >= 1.0);
}

#[test]
fn policies_and_knowledge_must_fit() {
    let s = scenario(online(4, json!(50), 1.0, "nothing"));
    let e = simulate_online(&s, Policy::ConstantSpeed).unwrap_err();
    assert!(e.to_string().contains("\"agent_knows\": \"rates\""), "{e}");
    let rr = simulate_online(&s, Policy::RoundRobin).unwrap();
    let servers: Vec<&str> = rr.decisions.iter().map(|d| d.server.as_str()).collect();
    assert_eq!(servers, ["fast", "steady-0", "steady-1", "steady-2"]);
    let rated = scenario(online(4, json!(50), 1.0, "rates"));
    let cs = simulate_online(&rated, Policy::ConstantSpeed).unwrap();
    assert!(cs.decisions.iter().all(|d| d.server == "fast"));
    // An online workload has no graph to map; a graph workload is not online.
    assert!(
        s.workload()
            .unwrap_err()
            .to_string()
            .contains("stream of single calls")
    );
    let bad = Scenario::parse(
        &json!({ "services": { "s": { "complexity": "n" } },
                 "servers": [{ "name": "a", "speeds": { "s": [[1, 1]] } }],
                 "workload": { "kind": "online", "calls": 1, "services": ["s"], "sizes": 1,
                               "mean_gap_s": -1 } })
        .to_string(),
    )
    .unwrap_err();
    assert!(bad.to_string().contains("mean_gap_s"), "{bad}");
}

/// Four identical one-slot servers; calls of 10 ms every 2.6 ms (load 0.96).
fn even(calls: usize) -> Scenario {
    Scenario::parse(
        &json!({
            "services": { "s": { "complexity": "n^2" } },
            "servers": [ { "name": "e", "count": 4, "speeds": { "s": [[10, 1e6], [200, 1e6]] } } ],
            "workload": { "kind": "online", "calls": calls, "services": ["s"], "sizes": 100,
                          "mean_gap_s": 0.0026, "gaps": "fixed", "agent_knows": "models", "seed": 5 }
        })
        .to_string(),
    )
    .unwrap()
}

#[test]
fn agents_that_hear_each_others_calls_in_time_place_as_well_as_one() {
    let s = even(400);
    let one = simulate_online_agents(&s, Policy::Mct, 1, 1.0)
        .unwrap()
        .report;
    // Heartbeats far more often than calls end.
    let beats = simulate_online_agents(&s, Policy::Mct, 2, 0.0005)
        .unwrap()
        .report;
    // No heartbeat within the run: each agent hears of the others' calls only from the
    // servers' arrival notices. Without them (the core ignoring them) each agent saw only
    // its own calls and the two piled calls onto the servers the other had just filled:
    // mean response 0.47 s where one agent's is 0.0102 s.
    let notices = simulate_online_agents(&s, Policy::Mct, 2, 1e6)
        .unwrap()
        .report;
    for two in [&beats, &notices] {
        assert!(
            two.mean_response_s <= one.mean_response_s * 1.1,
            "{two:?} against {one:?}"
        );
    }
    // Deterministic, as one agent is.
    let again = simulate_online_agents(&s, Policy::Mct, 2, 0.0005)
        .unwrap()
        .report;
    assert_eq!(again.makespan_s, beats.makespan_s);
    assert!(simulate_online_agents(&s, Policy::Mct, 0, 1.0).is_err());
}
