//! A task graph whose edges are 2 MB arrays, on the two-site grid with the client behind
//! its 20 Mbit/s link: mapped by the agent's default policy with the links it learned (data
//! moves server to server), against classic GridSolve (every output back through the
//! client, every input sent from it), and against a bound.
//!
//! The graph: `make` → four branches of three `step`s → a tree of three `join`s, every call
//! linear in n = 250,000 (2 MB of f64), every server's speed known from its config.
//!
//! Judged against the best schedule found offline with the true speeds and the shaped links
//! (`graph_oracle`: it counts transfers), and shown beside the bound that counts none (each
//! call at its fastest server, on the longest chain or over the total work ÷ the summed
//! speeds, plus the fetched output's trip over the client's link), which no mapping reaches
//! when data must cross the 100 Mbit/s uplinks. A link-blind mapping (the agent's default
//! policy as if data moved for free) shows what the learned links are worth.

use super::{CLIENT_HOST, Ctx, graph_oracle, judged};
use gridwise_client::{Client, GraphArg};
use gridwise_proto::Value;
use serde_json::json;
use std::time::Instant;

pub const N: i64 = 250_000;
pub const BRANCHES: usize = 4;
pub const STEPS: usize = 3;
/// Measured runs of each way after one to warm up.
const RUNS: usize = 3;

/// Each server's speed for the graph's services, op/s (the call's n operations): the cluster
/// is twice as fast as the lab, across the 100 Mbit/s uplinks.
pub const SPEEDS: [(&str, f64); 4] = [("lab1", 4e5), ("lab2", 4e5), ("node1", 8e5), ("node2", 8e5)];

/// The emulated services of a server of speed `speed`.
pub fn services_toml(speed: f64) -> String {
    let mut t = String::new();
    for (name, inputs) in [("make", 0), ("step", 1), ("join", 2)] {
        t.push_str(&format!(
            "\n[[emulated]]\nname = \"{name}\"\ncomplexity = \"n\"\ninputs = {inputs}\n\
             output = true\nspeed = [[1, {speed}], [1000000, {speed}]]\n\
             calibration_size = 20000\n"
        ));
    }
    t
}

fn calls_total() -> usize {
    1 + BRANCHES * STEPS + (BRANCHES - 1)
}

fn bound_s(client_rate_bytes: f64) -> f64 {
    let fastest = SPEEDS.iter().map(|s| s.1).fold(0.0, f64::max);
    let total: f64 = SPEEDS.iter().map(|s| s.1).sum();
    let chain = (1 + STEPS + 2) as f64 * N as f64 / fastest;
    let work = calls_total() as f64 * N as f64 / total;
    chain.max(work) + (N * 8) as f64 / client_rate_bytes
}

/// How the agent maps the graph.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mapping<'a> {
    /// A policy by name instead of the default.
    pub policy: Option<&'a str>,
    /// Map as if data moved between servers for free.
    pub link_blind: bool,
}

/// A run of the graph through the agent's mapping.
pub struct Ran {
    pub makespan_s: f64,
    pub predicted_s: f64,
    /// Per call, where and when it was planned and where and when it ran (s from the run's
    /// start): what tells a missed prediction's cause.
    pub timeline: Vec<serde_json::Value>,
}

/// The graph through the agent's mapping.
pub fn mapped(c: &Client, how: Mapping<'_>) -> anyhow::Result<Ran> {
    let mut g = c.graph();
    let make = g.call_named("make", "make", vec![N.into()]);
    let mut tips: Vec<GraphArg> = Vec::new();
    for b in 0..BRANCHES {
        let mut last = make.output(0);
        for s in 0..STEPS {
            last = g
                .call_named(&format!("b{b}s{s}"), "step", vec![N.into(), last])
                .output(0);
        }
        tips.push(last);
    }
    let mut fetch = None;
    while tips.len() > 1 {
        let mut next = Vec::new();
        for pair in tips.chunks(2) {
            let j = g.call("join", vec![N.into(), pair[0].clone(), pair[1].clone()]);
            next.push(j.output(0));
            fetch = Some(j);
        }
        tips = next;
    }
    let last = fetch.expect("a join");
    g.fetch(last);
    if let Some(p) = how.policy {
        g.policy(p);
    }
    if how.link_blind {
        g.link_blind();
    }
    let run = g.run()?;
    let out = run.outputs(last).expect("the fetched output");
    anyhow::ensure!(
        out[0]
            .as_array()
            .is_some_and(|a| a.data.len() == (N * 8) as usize),
        "the last join returned other data"
    );
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let timeline = run
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let planned = run
                .plan
                .server_of
                .get(i)
                .and_then(|&s| run.plan.servers.get(s as usize));
            json!({
                "call": c.name,
                "planned_on": planned.map(|s| s.name.as_str()),
                "planned_s": [r3(run.plan.start_s[i]), r3(run.plan.end_s[i])],
                "ran_on": c.server,
                "ran_s": [r3(c.start_s), r3(c.end_s)],
            })
        })
        .collect();
    Ok(Ran {
        makespan_s: run.makespan_s,
        predicted_s: run.plan.makespan_s,
        timeline,
    })
}

/// Classic GridSolve: every call a separate call, its inputs sent by the client and its
/// output returned to it; the branches run side by side, as a client with threads would.
fn via_client(c: &Client) -> anyhow::Result<f64> {
    let h = |s: &str| c.function_handle_default(s);
    let (make, step, join) = (h("make")?, h("step")?, h("join")?);
    let t = Instant::now();
    let first = c.call(&make, vec![Value::Int(N)])?.outputs.remove(0);
    let tips: Vec<Value> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..BRANCHES)
            .map(|_| {
                let (first, step) = (first.clone(), step.clone());
                s.spawn(move || -> anyhow::Result<Value> {
                    let mut v = first;
                    for _ in 0..STEPS {
                        v = c.call(&step, vec![Value::Int(N), v])?.outputs.remove(0);
                    }
                    Ok(v)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a branch panicked"))?)
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let mut tips = tips;
    while tips.len() > 1 {
        let next: Vec<Value> = std::thread::scope(|s| {
            let hs: Vec<_> = tips
                .chunks(2)
                .map(|p| {
                    let (a, b, join) = (p[0].clone(), p[1].clone(), join.clone());
                    s.spawn(move || -> anyhow::Result<Value> {
                        Ok(c.call(&join, vec![Value::Int(N), a, b])?.outputs.remove(0))
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().map_err(|_| anyhow::anyhow!("a join panicked"))?)
                .collect::<anyhow::Result<Vec<_>>>()
        })?;
        tips = next;
    }
    Ok(t.elapsed().as_secs_f64())
}

pub fn run(ctx: &Ctx) -> anyhow::Result<()> {
    let c = &ctx.client;
    let topo = ctx.bed.topology();
    let rate = topo.host(CLIENT_HOST)?.link.bytes_per_s();
    let bound = bound_s(rate);
    eprintln!("bench testbed: graph: waiting for the links between the servers …");
    ctx.wait_for_links()?;
    let slowest = SPEEDS.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
    let dispatch_s = ctx.call_overhead_s("make", &|| vec![Value::Int(1)], &[0], 1.0 / slowest)?;
    let oracle = graph_oracle::best(topo, CLIENT_HOST, dispatch_s)?;
    eprintln!(
        "bench testbed: graph: a call's own cost {:.1} ms; the best placement found offline: {:.3} s ({})",
        dispatch_s * 1e3,
        oracle.makespan_s,
        oracle.servers.join(" ")
    );
    eprintln!("bench testbed: graph: warming up …");
    mapped(c, Mapping::default())?;
    let runs = |what: &str, how: Mapping<'_>| -> anyhow::Result<Vec<Ran>> {
        (0..RUNS)
            .map(|i| {
                eprintln!("bench testbed: graph: {what}, run {} of {RUNS} …", i + 1);
                mapped(c, how)
            })
            .collect()
    };
    let default_runs = runs("default policy", Mapping::default())?;
    let blind_runs = runs(
        "link-blind",
        Mapping {
            link_blind: true,
            ..Mapping::default()
        },
    )?;
    eprintln!("bench testbed: graph: through the client (classic GridSolve) …");
    let mut client_runs = Vec::new();
    for _ in 0..RUNS {
        client_runs.push(via_client(c)?);
    }
    let worst = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    let actual = |runs: &[Ran]| runs.iter().map(|r| r.makespan_s).collect::<Vec<f64>>();
    let predicted = |runs: &[Ran]| runs.iter().map(|r| r.predicted_s).collect::<Vec<f64>>();
    let predicted_err: Vec<f64> = default_runs
        .iter()
        .map(|r| ((r.predicted_s - r.makespan_s) / r.makespan_s).abs())
        .collect();
    let worst_default = worst(&actual(&default_runs));
    let best_via_client = client_runs.iter().cloned().fold(f64::INFINITY, f64::min);
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let r3s = |v: &[f64]| v.iter().map(|x| r3(*x)).collect::<Vec<_>>();
    let v = judged(worst_default, oracle.makespan_s, 0.0, 1.10);
    let _ = ctx.emit.send(json!({
        "bench": "testbed",
        "experiment": "graph",
        "calls": calls_total(),
        "edge_bytes": N * 8,
        "default_makespans_s": r3s(&actual(&default_runs)),
        "predicted_makespans_s": r3s(&predicted(&default_runs)),
        "default_timelines": default_runs.iter().map(|r| &r.timeline).collect::<Vec<_>>(),
        "link_blind_makespans_s": r3s(&actual(&blind_runs)),
        "link_blind_predicted_s": r3s(&predicted(&blind_runs)),
        "bound_s": r3(oracle.makespan_s),
        "bound": "the best of 65,536 placements (make, each branch whole, each join on any server), list-scheduled with the true speeds, the shaped link rates and the measured cost of a call from the client; transfers never share a link",
        "bound_servers": oracle.servers,
        "bound_without_transfers_s": r3(bound),
        "default_vs_bound_worst": v["ratio"],
        "default_vs_bound_ok": v["ok"],
        "default_vs_bound_without_transfers_worst": r3(worst_default / bound),
        "link_blind_vs_default_worst": r3(worst(&actual(&blind_runs)) / worst_default),
        "via_client_makespans_s": r3s(&client_runs),
        "speedup_over_via_client_worst": r3(best_via_client / worst_default),
        "speedup_ok": best_via_client / worst_default >= 2.0,
        "prediction_error_worst": r3(worst(&predicted_err)),
        "prediction_ok": worst(&predicted_err) <= 0.05,
        "goals": "default <= 1.10x the bound that counts transfers; >= 2x faster than via-client; predicted within 5%",
    }));
    Ok(())
}
