//! `gridwise bench rpc`: the cost of one remote call over the full path — ranking at the
//! agent, execution on the server, the timing report back to the agent — for the no-op `add`.

use gridwise_client::{Client, ClientConfig};
use gridwise_localgrid::LocalGrid;
use gridwise_localgrid::wait_for_servers;
use gridwise_proto::Value;
use serde_json::json;
use statrs::statistics::{Data, OrderStatistics};
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Clone, Debug)]
pub struct RpcBench {
    /// Use this agent (which must have a server offering `add`) instead of starting one.
    pub agent: Option<String>,
    /// Shared token for `agent`.
    pub token: Option<String>,
    /// Synchronous calls timed one by one.
    pub sync_calls: usize,
    /// Asynchronous calls for the throughput figure.
    pub async_calls: usize,
    /// Asynchronous sessions kept in flight.
    pub window: usize,
}

/// Runs the benchmark and returns its JSON object.
pub fn run_rpc(opts: &RpcBench) -> anyhow::Result<serde_json::Value> {
    let mut grid = None;
    let (agent, token) = match &opts.agent {
        Some(a) => (a.clone(), opts.token.clone()),
        None => {
            let exe = std::env::current_exe()?;
            let mut g = LocalGrid::start_gridwise(&exe, &[])?;
            g.add_server("bench-server", "builtins = [\"add\"]\ncalibrate = false\n")?;
            let a = g.agent.addr.clone();
            grid = Some(g);
            (a, None)
        }
    };
    let mut cfg = ClientConfig::with_agent(agent);
    cfg.token = token;
    let client = Client::connect(cfg)?;
    if grid.is_some() {
        wait_for_servers(&client, 1, Duration::from_secs(30))?;
    }
    let add = client.function_handle_default("add")?;

    eprintln!("bench rpc: warming up …");
    for i in 0..1000 {
        client.call(&add, vec![Value::Int(i)])?;
    }
    eprintln!("bench rpc: {} synchronous calls …", opts.sync_calls);
    let mut lat_us = Vec::with_capacity(opts.sync_calls);
    for i in 0..opts.sync_calls {
        let t = Instant::now();
        let r = client.call(&add, vec![Value::Int(i as i64)])?;
        lat_us.push(t.elapsed().as_secs_f64() * 1e6);
        anyhow::ensure!(
            r.outputs == vec![Value::Int(i as i64 + 1)],
            "add({i}) returned {:?}",
            r.outputs
        );
    }
    let mut data = Data::new(lat_us);
    let (p50, p99) = (data.percentile(50), data.percentile(99));

    eprintln!(
        "bench rpc: {} asynchronous calls, {} in flight …",
        opts.async_calls, opts.window
    );
    let window = opts.window.max(1);
    let t = Instant::now();
    let mut submitted = 0usize;
    let mut done = 0usize;
    while submitted < opts.async_calls.min(window) {
        client.call_async(&add, vec![Value::Int(submitted as i64)])?;
        submitted += 1;
    }
    while done < opts.async_calls {
        client.wait_any()?;
        done += 1;
        if submitted < opts.async_calls {
            client.call_async(&add, vec![Value::Int(submitted as i64)])?;
            submitted += 1;
        }
    }
    let per_s = opts.async_calls as f64 / t.elapsed().as_secs_f64();
    drop(client);
    drop(grid);
    Ok(json!({
        "bench": "rpc",
        "sync_p50_us": (p50 * 10.0).round() / 10.0,
        "sync_p99_us": (p99 * 10.0).round() / 10.0,
        "async_calls_per_s": per_s.round(),
        "calls": opts.sync_calls + opts.async_calls,
        "sync_calls": opts.sync_calls,
        "async_calls": opts.async_calls,
        "window": window,
    }))
}
