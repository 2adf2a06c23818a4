//! `gridwise graph predict` against a live grid: a graph file is checked against the agent's
//! services and mapped by the agent without reserving anything — the plan a run would follow.

use gridwise_cli::graph::predict;
use gridwise_e2e::{Grid, eventually};
use gridwise_graphfile::{GraphFile, Rand, record};
use gridwise_proto::GraphPolicy;
use gridwise_proto::Value;
use std::time::Duration;

/// A chain a → b → c with a fork (b ∥ d after a) joined by e, and an unrelated task x.
const GRAPH: &str = r#"{
  "tasks": [
    {"name": "a", "service": "dgemm", "args": [120, 120, 120, "rand", "rand"]},
    {"name": "b", "service": "dgemm", "args": [120, 120, 120, {"from": "a", "output": 0}, "rand"]},
    {"name": "c", "service": "dgemm", "args": [120, 120, 120, {"from": "b", "output": 0}, "rand"]},
    {"name": "d", "service": "dgemm", "args": [120, 120, 120, "rand", {"from": "a", "output": 0}]},
    {"name": "e", "service": "dgemm", "args": [120, 120, 120, {"from": "c", "output": 0}, {"from": "d", "output": 0}]},
    {"name": "x", "service": "dgemm", "args": [80, 80, 80, "rand", "rand"]}
  ],
  "outputs": ["e"]
}"#;

#[test]
fn predict_maps_every_task_and_replays_within_the_bounds() {
    let g = Grid::two_servers();
    let client = g.client();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.json");
    std::fs::write(&path, GRAPH).unwrap();
    let file = GraphFile::load(&path).unwrap();

    // The test servers do not calibrate: before any call the agent knows no speeds, and the
    // prediction says so instead of passing zeros off as estimates.
    let blind = predict(&client, &file, None).unwrap();
    assert_eq!(blind.plan.unknown.len(), 6 * 2);
    assert!(blind.render_text().contains("no estimate for 12 of 12"));
    assert!(
        c_pending_is_zero(&client),
        "a prediction reserves nothing on the servers"
    );

    // One dgemm on each server gives the agent a past-call time to estimate from.
    for s in ["s1", "s2"] {
        let h = client.function_handle_init("dgemm", s).unwrap();
        let m = Value::matrix_f64(64, 64, &[0.5; 64 * 64]);
        let args = vec![Value::Int(64), Value::Int(64), Value::Int(64), m.clone(), m];
        client.call(&h, args).unwrap();
    }
    let mut p = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            let q = predict(&client, &file, None).unwrap();
            let known = q.plan.unknown.is_empty();
            p = Some(q);
            known
        }),
        "the agent never learnt from the calls"
    );
    let p = p.unwrap();
    assert_eq!(
        p.plan.policy,
        GraphPolicy::BestOf,
        "the default for a graph with edges"
    );
    assert_eq!(p.plan.servers.len(), 2);

    // Every task placed exactly once, on the server the plan names.
    let per_server = p.per_server();
    let mut placed = vec![0; file.tasks.len()];
    for (s, slots) in per_server.iter().enumerate() {
        for x in slots {
            placed[x.task] += 1;
            assert_eq!(p.plan.server_of[x.task] as usize, s);
            assert!(x.end_s > x.start_s && x.start_s >= 0.0, "{x:?}");
        }
    }
    assert!(placed.iter().all(|&n| n == 1), "{placed:?}");

    // Makespan ≥ lower bound ≥ critical path > 0.
    let b = &p.plan;
    assert!(b.critical_path_s > 0.0, "{b:?}");
    assert!(b.makespan_s >= b.lower_bound_s - 1e-12, "{b:?}");
    assert!(b.lower_bound_s >= b.critical_path_s);

    // A dependency never starts before its producer ends.
    for (to, spec) in file.tasks.iter().enumerate() {
        for from in spec.uses() {
            assert!(
                b.start_s[to] >= b.end_s[from] - 1e-12,
                "{} starts before {} ends",
                spec.name,
                file.tasks[from].name
            );
        }
    }

    let j = p.to_json();
    for k in [
        "policy",
        "makespan_s",
        "lower_bound_s",
        "critical_path_s",
        "average_parallelism",
        "per_server",
    ] {
        assert!(j.get(k).is_some(), "{k} missing: {j}");
    }
    let per_server = j["per_server"].as_array().unwrap();
    assert_eq!(per_server.len(), 2);
    let listed: usize = per_server
        .iter()
        .map(|s| {
            assert!(s["server"].is_string());
            let tasks = s["tasks"].as_array().unwrap();
            for t in tasks {
                assert!(t["task"].is_string() && t["start_s"].is_f64() && t["end_s"].is_f64());
            }
            tasks.len()
        })
        .sum();
    assert_eq!(listed, file.tasks.len());

    // Another policy from the caller; an unknown service is the agent's FUNCTION_NOT_FOUND.
    let rr = predict(&client, &file, Some("round-robin".parse().unwrap())).unwrap();
    assert_eq!(rr.plan.policy, GraphPolicy::RoundRobin);
    let bad = GraphFile::parse(r#"{"tasks":[{"name":"z","service":"no-such-service","args":[]}]}"#)
        .unwrap();
    let e = format!("{:#}", predict(&client, &bad, None).unwrap_err());
    assert!(
        e.contains("task `z`") && e.contains("FUNCTION_NOT_FOUND"),
        "{e}"
    );
}

fn c_pending_is_zero(c: &gridwise_client::Client) -> bool {
    c.status().unwrap().servers.iter().all(|s| s.pending == 0)
}

/// `graph predict` and `graph run` are one plan: the file is recorded alike (`rand` sized for
/// the prediction, filled for the run) and the agent maps both with the same code, so on an
/// unchanged grid the run follows exactly the plan predicted for it.
#[test]
fn predict_and_run_of_one_file_get_the_same_plan() {
    let g = Grid::two_servers();
    let client = g.client();
    let file = GraphFile::parse(GRAPH).unwrap();
    // Teach the agent some times first, so the plan rests on estimates, not on zeros.
    let (warm, _) = record(&client, &file, None, Rand::Values).unwrap();
    warm.run().unwrap();
    let strip = |mut p: gridwise_proto::GraphPlan| {
        p.tickets.clear();
        p
    };
    // The grid may learn (a heartbeat, a late report) between the two requests; an unchanged
    // grid gives identical plans, and one of a few tries lands on one. Servers hold a report
    // back a few milliseconds for the ones after it: each try waits until the agent has every
    // report of the runs before (its reservations are gone).
    let mut last = None;
    for _ in 0..5 {
        assert!(
            eventually(Duration::from_secs(10), || c_pending_is_zero(&client)),
            "the reports of the runs before never reached the agent"
        );
        let predicted = strip(predict(&client, &file, None).unwrap().plan);
        let (run, _) = record(&client, &file, None, Rand::Values).unwrap();
        let ran = run.run().unwrap();
        assert_eq!(ran.plan.tickets.len(), file.tasks.len(), "a run reserves");
        let ran = strip(ran.plan);
        if predicted == ran {
            return;
        }
        last = Some((predicted, ran));
    }
    let (p, r) = last.unwrap();
    panic!("the run never followed the predicted plan:\npredicted {p:#?}\nran {r:#?}");
}
