//! `gridwise bench mapping`: how fast the pure decision core decides, in-process — HEFT on a
//! large task graph, independent-call ranking over many servers, and how long a single call's
//! ranking waits while the agent maps a very large graph.

use gridwise_kernels::builtin;
use gridwise_proto::{
    CallProfile, CallReport, GraphCall, GraphEdge, GraphRequest, RankOptions, Registration,
    ServiceDesc, Timing,
};
use gridwise_sched::MapByPolicy;
use gridwise_sched::graph::generate;
use gridwise_sched::{AgentCore, CommModel, CoreConfig, GraphPolicy, map_graph_shared};
use serde_json::json;
use statrs::statistics::{Data, OrderStatistics};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Runs the measurements and returns the JSON object.
pub fn run() -> anyhow::Result<serde_json::Value> {
    eprintln!("bench mapping: HEFT, 10,000 tasks over 100 servers …");
    let heft_ms = map_10k_100(GraphPolicy::Heft)?;
    let dag_default = GraphPolicy::default_for(&generate::layered(10, 5, 0.5, 1));
    eprintln!("bench mapping: {dag_default} (the DAG default), 10,000 tasks over 100 servers …");
    let default_ms = map_10k_100(dag_default)?;
    eprintln!("bench mapping: MCT ranking over 1,000 servers with models and queues …");
    let per_s = rank_1000(true)?;
    eprintln!("bench mapping: MCT ranking over 1,000 idle servers without models …");
    let idle_per_s = rank_1000(false)?;
    eprintln!("bench mapping: ranking while a 100,000-task graph is mapped on 100 servers …");
    let during = rank_during_map()?;
    Ok(json!({
        "bench": "mapping",
        "heft_10k_tasks_100_servers_ms": (heft_ms * 10.0).round() / 10.0,
        "dag_default_policy": dag_default.name(),
        "dag_default_10k_tasks_100_servers_ms": (default_ms * 10.0).round() / 10.0,
        "rank_decisions_per_s_1000_servers": per_s.round(),
        "rank_decisions_per_s_1000_idle_servers_without_models": idle_per_s.round(),
        "rank_p99_us_during_map": during.p99_us.round(),
        "rank_max_us_during_map": during.max_us.round(),
        "ranks_during_map": during.ranks,
        "map_100k_tasks_100_servers_ms": during.map_ms.round(),
    }))
}

struct DuringMap {
    p99_us: f64,
    max_us: f64,
    ranks: usize,
    map_ms: f64,
}

/// Single-call ranking latency (lock wait included) on a core that is mapping and reserving
/// a 100,000-task layered graph of dgemm calls over 100 servers, as the agent does it: one
/// thread maps, the other ranks a call every 100 µs.
fn rank_during_map() -> anyhow::Result<DuringMap> {
    let dgemm = dgemm_desc()?;
    let core = Mutex::new(grid(&dgemm, 100));
    let g = generate::layered(100_000, 100, 0.05, 11);
    let request = GraphRequest {
        conservative_tf: None,
        load_model: None,
        link_blind: false,
        calls: (0..g.len())
            .map(|i| GraphCall {
                name: format!("t{i}"),
                profile: profile(100 + (i % 400) as i64),
                fetched: false,
            })
            .collect(),
        edges: g
            .edges()
            .map(|(from, to, bytes)| GraphEdge {
                from: from as u32,
                to: to as u32,
                bytes,
            })
            .collect(),
        policy: Some(GraphPolicy::Heft),
        reserve: true,
    };
    let epoch = Instant::now();
    let opts = RankOptions::default();
    let (map_ms, latencies) = std::thread::scope(|s| -> anyhow::Result<(f64, Vec<f64>)> {
        let mapper = s.spawn(|| {
            let t = Instant::now();
            let plan = map_graph_shared(&core, Some("bench"), &request, || epoch.elapsed());
            (t.elapsed().as_secs_f64() * 1e3, plan)
        });
        let mut latencies = Vec::new();
        let mut i = 0i64;
        while !mapper.is_finished() {
            let t = Instant::now();
            {
                let mut c = core.lock().unwrap_or_else(|p| p.into_inner());
                let r = c.rank(&profile(100 + i % 400), &opts, epoch.elapsed())?;
                c.release(r.ticket);
            }
            latencies.push(t.elapsed().as_secs_f64() * 1e6);
            i += 1;
            std::thread::sleep(Duration::from_micros(100));
        }
        let (ms, plan) = mapper
            .join()
            .map_err(|_| anyhow::anyhow!("the mapping thread panicked"))?;
        let plan = plan.map_err(|e| anyhow::anyhow!("mapping the graph: {e}"))?;
        anyhow::ensure!(
            plan.tickets.len() == 100_000,
            "{} of 100,000 calls reserved",
            plan.tickets.len()
        );
        Ok((ms, latencies))
    })?;
    anyhow::ensure!(
        !latencies.is_empty(),
        "no call was ranked while the graph was mapped"
    );
    let max_us = latencies.iter().copied().fold(0.0, f64::max);
    let ranks = latencies.len();
    let p99_us = Data::new(latencies).quantile(0.99);
    Ok(DuringMap {
        p99_us,
        max_us,
        ranks,
        map_ms,
    })
}

fn dgemm_desc() -> anyhow::Result<ServiceDesc> {
    Ok(builtin("dgemm")
        .ok_or_else(|| anyhow::anyhow!("dgemm is not built in"))?
        .desc()
        .clone())
}

/// A core with `servers` servers offering `desc`, their rates 1–17 Gop/s.
fn grid(desc: &ServiceDesc, servers: usize) -> AgentCore {
    let mut core = AgentCore::new(CoreConfig {
        max_candidates: 8,
        ..CoreConfig::default()
    });
    for i in 0..servers {
        core.register(
            Registration {
                secret: None,
                instance: String::new(),
                max_frame_bytes: u64::MAX,
                sleeping: Vec::new(),
                not_offered: Vec::new(),
                memory_budget_bytes: u64::MAX,
                name: format!("s{i:04}"),
                addr: format!("10.0.{}.{}:7000", i / 250, i % 250),
                slots: 1,
                services: vec![desc.clone()],
                rates: vec![],
                default_rate: 1e9 * (1.0 + (i % 17) as f64),
                memory_bytes: 1 << 34,
                cores: 8,
            },
            Duration::ZERO,
        )
        .expect("a fresh core admits every bench server");
    }
    core
}

/// An n×n×n dgemm call.
fn profile(n: i64) -> CallProfile {
    CallProfile {
        service: "dgemm".into(),
        sizes: vec![("m".into(), n), ("n".into(), n), ("k".into(), n)],
        in_bytes: (16 * n * n) as u64,
        out_bytes: (8 * n * n) as u64,
        remote_in: Vec::new(),
        inline_bytes: 0,
    }
}

/// Median of three mappings by `policy` of a layered 10,000-task DAG (about 50,000 edges) onto
/// 100 servers with heterogeneous task times and uniform links.
fn map_10k_100(policy: GraphPolicy) -> anyhow::Result<f64> {
    let g = generate::layered(10_000, 100, 0.05, 7);
    let etc = generate::random_etc(&g, 100, 8.0, 7);
    let comm = CommModel::uniform(100, 0.05, 5e6)?;
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let m = policy.map(&g, &etc, &comm, None)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(
            m.server_of.len() == g.len(),
            "{policy} placed {} of {} tasks",
            m.server_of.len(),
            g.len()
        );
    }
    times.sort_by(f64::total_cmp);
    Ok(times[1])
}

/// Sizes each server's model has points at (the realistic grid).
const MODEL_SIZES: [i64; 8] = [100, 200, 300, 400, 500, 600, 700, 800];
/// Assignments kept pending across the grid (the realistic grid: about 3 per server).
const PENDING: usize = 3000;

/// Teaches every server of `core` a performance model: two reported dgemm calls at each of
/// [`MODEL_SIZES`], at its own speed (servers differ in rate and in how speed grows with n).
fn teach_models(core: &mut AgentCore) -> anyhow::Result<()> {
    let servers: Vec<_> = core.status(Duration::ZERO).servers;
    for (i, s) in servers.iter().enumerate() {
        let reports: Vec<CallReport> = MODEL_SIZES
            .iter()
            .flat_map(|&n| {
                let speed = s.default_rate
                    * (0.6 + 0.4 * (n as f64 / 800.0).powf(0.3 + (i % 5) as f64 * 0.1));
                let kernel_s = 2.0 * (n as f64).powi(3) / speed;
                [0.97, 1.03].map(|f| CallReport {
                    ticket: None,
                    service: "dgemm".into(),
                    sizes: vec![("m".into(), n), ("n".into(), n), ("k".into(), n)],
                    timing: Timing {
                        kernel_s: kernel_s * f,
                        server_s: kernel_s * f,
                        ..Timing::default()
                    },
                    ok: true,
                    cpu_available: Some(1.0),
                    client_in_bytes: None,
                })
            })
            .collect();
        core.report(s.id, &reports, Duration::ZERO);
    }
    let points: u32 = core.models().iter().map(|m| m.points).sum();
    anyhow::ensure!(
        points as usize >= servers.len() * MODEL_SIZES.len(),
        "the servers learnt only {points} model points"
    );
    Ok(())
}

/// MCT decisions per second with 1,000 servers offering dgemm, each decision over all of
/// them. Realistic (`models`): every server has a performance model and the grid keeps
/// [`PENDING`] assignments queued, the oldest reported as each new one is made. Otherwise:
/// servers with a calibrated rate only and empty queues (what this figure measured before; the
/// pruned search then stops after the fastest tier).
fn rank_1000(models: bool) -> anyhow::Result<f64> {
    let mut core = grid(&dgemm_desc()?, 1000);
    if models {
        teach_models(&mut core)?;
    }
    let opts = RankOptions::default();
    let keep = if models { PENDING } else { 0 };
    let mut pending = std::collections::VecDeque::with_capacity(keep + 1);
    for i in 0..keep {
        pending.push_back(
            core.rank(&profile(100 + (i % 700) as i64), &opts, Duration::ZERO)?
                .ticket,
        );
    }
    // About a second of decisions: shorter runs on a shared 2-core VM spread by ±15%.
    let calls = 100_000;
    let t = Instant::now();
    for i in 0..calls {
        let r = core.rank(&profile(100 + (i % 700) as i64), &opts, Duration::ZERO)?;
        pending.push_back(r.ticket);
        if pending.len() > keep {
            if let Some(old) = pending.pop_front() {
                core.release(old);
            }
        }
    }
    Ok(calls as f64 / t.elapsed().as_secs_f64())
}
