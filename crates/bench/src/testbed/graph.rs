//! A task graph whose edges are 2 MB arrays, on the two-site grid with the client behind
//! its 20 Mbit/s link: mapped by the agent's default policy with the links it learned (data
//! moves server to server), against classic GridSolve (every output back through the
//! client, every input sent from it), and against a bound.
//!
//! The graph: `make` → four branches of three `step`s → a tree of three `join`s, every call
//! linear in n = 250,000 (2 MB of f64), every server's speed known from its config.
//!
//! The bound counts what cannot be avoided: each call at its fastest server, on the longest
//! chain (six calls) and over the total work ÷ the summed speeds, plus the fetched output's
//! trip over the client's link. Transfers between servers count nothing in it, so it is
//! below what any mapping reaches when data must cross the 100 Mbit/s uplinks.

use super::{CLIENT_HOST, Ctx, judged};
use gridwise_client::{Client, GraphArg};
use gridwise_proto::Value;
use serde_json::json;
use std::time::Instant;

pub const N: i64 = 250_000;
const BRANCHES: usize = 4;
const STEPS: usize = 3;
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

/// The graph through the agent's mapping; returns (actual, predicted) makespans.
pub fn mapped(c: &Client, policy: Option<&str>) -> anyhow::Result<(f64, f64)> {
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
    // Every host of the bed shares this machine's CPUs, and the emulated kernels sleep: a
    // host's sensed load is the whole machine's and slows nothing here, so the estimates
    // take the quiet-host time (on real hosts the default forecast is the right one).
    g.load_model(gridwise_proto::LoadModel::Blind);
    if let Some(p) = policy {
        g.policy(p);
    }
    let run = g.run()?;
    let out = run.outputs(last).expect("the fetched output");
    anyhow::ensure!(
        out[0]
            .as_array()
            .is_some_and(|a| a.data.len() == (N * 8) as usize),
        "the last join returned other data"
    );
    Ok((run.makespan_s, run.plan.makespan_s))
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
    let rate = ctx.bed.topology().host(CLIENT_HOST)?.link.bytes_per_s();
    let bound = bound_s(rate);
    eprintln!("bench testbed: graph: warming up …");
    mapped(c, None)?;
    let mut default_runs = Vec::new();
    for i in 0..RUNS {
        eprintln!(
            "bench testbed: graph: default policy, run {} of {RUNS} …",
            i + 1
        );
        default_runs.push(mapped(c, None)?);
    }
    eprintln!("bench testbed: graph: through the client (classic GridSolve) …");
    let mut client_runs = Vec::new();
    for _ in 0..RUNS {
        client_runs.push(via_client(c)?);
    }
    let worst = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    let actual: Vec<f64> = default_runs.iter().map(|r| r.0).collect();
    let predicted_err: Vec<f64> = default_runs
        .iter()
        .map(|(a, p)| ((p - a) / a).abs())
        .collect();
    let worst_default = worst(&actual);
    let best_via_client = client_runs.iter().cloned().fold(f64::INFINITY, f64::min);
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let v = judged(worst_default, bound, 0.0, 1.10);
    let _ = ctx.emit.send(json!({
        "bench": "testbed",
        "experiment": "graph",
        "calls": calls_total(),
        "edge_bytes": N * 8,
        "default_makespans_s": actual.iter().map(|x| r3(*x)).collect::<Vec<_>>(),
        "predicted_makespans_s": default_runs.iter().map(|r| r3(r.1)).collect::<Vec<_>>(),
        "bound_s": r3(bound),
        "bound": "each call at its fastest server on the longest chain, or total work over summed speeds; plus the fetched output over the client's link; server-to-server transfers free",
        "default_vs_bound_worst": v["ratio"],
        "default_vs_bound_ok": v["ok"],
        "via_client_makespans_s": client_runs.iter().map(|x| r3(*x)).collect::<Vec<_>>(),
        "speedup_over_via_client_worst": r3(best_via_client / worst_default),
        "speedup_ok": best_via_client / worst_default >= 2.0,
        "prediction_error_worst": r3(worst(&predicted_err)),
        "prediction_ok": worst(&predicted_err) <= 0.05,
        "goals": "default <= 1.10x bound; >= 2x faster than via-client; predicted within 5%",
    }));
    Ok(())
}
