//! The simulator's agent is the real agent's decision core: on the same servers, knowing the
//! same models, a real agent with real emulated servers makes the decisions the simulated
//! agent made, call for call.

use gridwise_e2e::{FAST_HEARTBEATS, Grid, eventually};
use gridwise_fpm::model::Fpm;
use gridwise_fpm::spec::BuildSpec;
use gridwise_proto::{PointSource, Policy, Value};
use gridwise_sim::{Scenario, online};
use std::time::Duration;

/// Three servers whose speed functions cross: `x` is 4x the fastest at n = 100, `y` 4.5x at
/// n = 300, `z` is second everywhere. Calls take 10–90 ms of emulated compute.
const SCENARIO: &str = r#"{
  "services": { "s": { "complexity": "n^2" } },
  "servers": [
    { "name": "x", "speeds": { "s": [[100, 1e6], [300, 1e6]] } },
    { "name": "y", "speeds": { "s": [[100, 2.5e5], [300, 4.5e6]] } },
    { "name": "z", "speeds": { "s": [[100, 5e5], [300, 1.5e6]] } }
  ],
  "workload": { "kind": "online", "calls": 10, "services": ["s"],
                "sizes": {"one_of": [100, 200, 300]}, "mean_gap_s": 10, "gaps": "fixed",
                "agent_knows": "models", "seed": 5 }
}"#;

/// The model build settings the servers are configured with (and their saved models carry).
const MODEL_SETTINGS: &str = r#"method = "gbbp"
params = [{ name = "n", min = 100, max = 300, stride = 100 }]"#;

/// A server of the scenario's platform: an emulated `s` with the class's true speeds, and a
/// saved model in `model_dir` holding exactly the points the simulated agent is given.
fn server_config(platform: &gridwise_sim::Platform, s: usize, dir: &std::path::Path) -> String {
    let speeds: Vec<String> = platform
        .speed(s, "s")
        .unwrap()
        .points()
        .iter()
        .map(|(x, v)| format!("[{x}, {v:e}]"))
        .collect();
    let spec: BuildSpec = toml::from_str(MODEL_SETTINGS).unwrap();
    let mut fpm = Fpm::new(vec!["n".into()]);
    let points = online::model_points(platform, s);
    for p in &points {
        assert_eq!(p.source, PointSource::Benchmark);
        fpm.insert(&p.x, p.stats.into());
    }
    let saved = serde_json::json!({
        "service": "s", "spec": spec, "fpm": fpm,
        "points": points.len(), "runs": points.len(), "bench_time_s": 0.0,
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("s.model.json"), saved.to_string()).unwrap();
    format!(
        r#"builtins = []
slots = 1
calibrate = false
model_dir = "{dir}"

[[emulated]]
name = "s"
complexity = "n^2"
speed = [{speeds}]

[[models]]
service = "s"
{MODEL_SETTINGS}
"#,
        dir = dir.display(),
        speeds = speeds.join(", ")
    )
}

#[test]
fn a_real_agent_decides_as_the_simulated_one_given_the_same_models() {
    let scenario = Scenario::parse(SCENARIO).unwrap();
    let platform = scenario.platform().unwrap();
    let simulated = online::simulate_online(&scenario, Policy::Mct).unwrap();
    let sizes: Vec<u64> = simulated.decisions.iter().map(|d| d.size).collect();
    let servers: Vec<&str> = simulated
        .decisions
        .iter()
        .map(|d| d.server.as_str())
        .collect();
    assert!(
        servers.contains(&"x") && servers.contains(&"y"),
        "the scenario exercises both sides of the crossing: {sizes:?} -> {servers:?}"
    );

    let dirs = tempfile::tempdir().unwrap();
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    for (s, name) in platform.names().iter().enumerate() {
        g.server(name, &server_config(&platform, s, &dirs.path().join(name)));
    }
    g.wait_up(platform.servers());
    let c = g.client();
    let loaded = || {
        c.models().is_ok_and(|ms| {
            platform
                .names()
                .iter()
                .all(|n| ms.iter().any(|m| &m.server == n && m.points >= 2))
        })
    };
    assert!(
        eventually(Duration::from_secs(30), loaded),
        "the servers did not send their saved models:\n{}",
        g.logs()
    );

    // The simulated calls were far apart: nothing queued. Here each call waits for the last
    // one's report to clear it from the agent's queues, so the agent sees the same state.
    let h = c.function_handle_default("s").unwrap();
    let idle = || {
        c.status()
            .is_ok_and(|s| s.servers.iter().all(|e| e.pending == 0))
    };
    let mut real = Vec::new();
    for &n in &sizes {
        assert!(
            eventually(Duration::from_secs(10), idle),
            "a reservation never cleared"
        );
        let r = c
            .call(&h, vec![Value::Int(n as i64)])
            .unwrap_or_else(|e| panic!("call s({n}): {e}\n{}", g.logs()));
        real.push(r.server);
    }
    assert_eq!(
        real, servers,
        "sizes {sizes:?}: the real agent (left) and the simulated one (right) chose differently"
    );
}
