//! `gridwise bench mapping`: how fast the pure decision core decides, in-process — HEFT on a
//! large task graph, and independent-call ranking over many servers.

use gridwise_kernels::builtin;
use gridwise_proto::{CallProfile, RankOptions, Registration};
use gridwise_sched::graph::generate;
use gridwise_sched::{AgentCore, CommModel, CoreConfig, GraphPolicy};
use serde_json::json;
use std::time::{Duration, Instant};

/// Runs both measurements and returns the JSON object.
pub fn run() -> anyhow::Result<serde_json::Value> {
    eprintln!("bench mapping: HEFT, 10,000 tasks over 100 servers …");
    let heft_ms = heft_10k_100()?;
    eprintln!("bench mapping: MCT ranking over 1,000 servers …");
    let per_s = rank_1000()?;
    Ok(json!({
        "bench": "mapping",
        "heft_10k_tasks_100_servers_ms": (heft_ms * 10.0).round() / 10.0,
        "rank_decisions_per_s_1000_servers": per_s.round(),
    }))
}

/// Median of three HEFT mappings of a layered 10,000-task DAG (about 50,000 edges) onto 100
/// servers with heterogeneous task times and uniform links.
fn heft_10k_100() -> anyhow::Result<f64> {
    let g = generate::layered(10_000, 100, 0.05, 7);
    let etc = generate::random_etc(&g, 100, 8.0, 7);
    let comm = CommModel::uniform(100, 0.05, 5e6)?;
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let m = GraphPolicy::Heft.map(&g, &etc, &comm, None)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(
            m.server_of.len() == g.len(),
            "HEFT placed {} of {} tasks",
            m.server_of.len(),
            g.len()
        );
    }
    times.sort_by(f64::total_cmp);
    Ok(times[1])
}

/// MCT decisions per second with 1,000 servers offering dgemm, each decision over all of
/// them; assignments are released as they are made, as reports would in a steady state.
fn rank_1000() -> anyhow::Result<f64> {
    let dgemm = builtin("dgemm")
        .ok_or_else(|| anyhow::anyhow!("dgemm is not built in"))?
        .desc()
        .clone();
    let mut core = AgentCore::new(CoreConfig {
        max_candidates: 8,
        ..CoreConfig::default()
    });
    for i in 0..1000 {
        core.register(
            Registration {
                secret: None,
                instance: String::new(),
                max_frame_bytes: u64::MAX,
                memory_budget_bytes: u64::MAX,
                name: format!("s{i:04}"),
                addr: format!("10.0.{}.{}:7000", i / 250, i % 250),
                slots: 1,
                services: vec![dgemm.clone()],
                rates: vec![],
                default_rate: 1e9 * (1.0 + (i % 17) as f64),
                memory_bytes: 1 << 34,
                cores: 8,
            },
            Duration::ZERO,
        )?;
    }
    let profile = |n: i64| CallProfile {
        service: "dgemm".into(),
        sizes: vec![("m".into(), n), ("n".into(), n), ("k".into(), n)],
        in_bytes: (16 * n * n) as u64,
        out_bytes: (8 * n * n) as u64,
        remote_in: Vec::new(),
    };
    let opts = RankOptions::default();
    let calls = 20_000;
    let t = Instant::now();
    for i in 0..calls {
        let r = core.rank(&profile(100 + (i % 900) as i64), &opts, Duration::ZERO)?;
        core.release(r.ticket);
    }
    Ok(calls as f64 / t.elapsed().as_secs_f64())
}
