//! A large array across a shaped link: from the client behind its 20 Mbit/s link to a
//! server, and from a server in one site to a server in the other (a graph's edge, pulled
//! by the consumer's server), against the link's rate.

use super::{CLIENT_HOST, Ctx, judged};
use gridwise_proto::Value;
use serde_json::json;

/// Seconds of transfer each measurement aims at, so that the connection's start is a small
/// part of it.
const SECONDS: f64 = 4.0;

pub fn run(ctx: &Ctx) -> anyhow::Result<()> {
    let topo = ctx.bed.topology();
    let c = &ctx.client;
    // Client → server: the client's link is the narrowest on the way.
    let to = "lab1";
    let rate = topo.path_rate(CLIENT_HOST, to)?.bytes_per_s();
    let n = (rate * SECONDS / 8.0) as i64;
    eprintln!(
        "bench testbed: bulk: {:.1} MB from {CLIENT_HOST} to {to} …",
        n as f64 * 8.0 / 1e6
    );
    let sink = c.function_handle_init("sink", to)?;
    let x = Value::vector_f64(&(0..n).map(|i| i as f64).collect::<Vec<_>>());
    let r = c.call(&sink, vec![Value::Int(n), x])?;
    anyhow::ensure!(
        r.outputs == vec![Value::Int(n * 8)],
        "sink received {:?}, not {} bytes",
        r.outputs,
        n * 8
    );
    row(
        ctx,
        CLIENT_HOST,
        to,
        n as f64 * 8.0,
        r.timing.input_transfer_s,
        rate,
    );

    // Server → server across the sites: a kept output pulled by the other site's server.
    let (from, to) = ("node1", "lab1");
    let rate = topo.path_rate(from, to)?.bytes_per_s();
    let n = (rate * SECONDS / 8.0) as i64;
    eprintln!(
        "bench testbed: bulk: {:.1} MB from {from} to {to} …",
        n as f64 * 8.0 / 1e6
    );
    let source = c.function_handle_init("source", from)?;
    let kept = c.call_keep(&source, vec![Value::Int(n)], &[0])?;
    let Some(Value::Ref(reference)) = kept.outputs.first().cloned() else {
        anyhow::bail!("source did not keep its output: {:?}", kept.outputs);
    };
    let got = c.call(&sink, vec![Value::Int(n), Value::Ref(reference.clone())]);
    c.free(&[reference])?;
    let got = got?;
    anyhow::ensure!(
        got.outputs == vec![Value::Int(n * 8)],
        "sink got other data"
    );
    row(
        ctx,
        from,
        to,
        n as f64 * 8.0,
        got.timing.input_transfer_s,
        rate,
    );
    Ok(())
}

fn row(ctx: &Ctx, from: &str, to: &str, bytes: f64, secs: f64, shaped: f64) {
    let got = bytes / secs;
    let v = judged(got, shaped, 0.9, f64::INFINITY);
    let mbit = |b: f64| (b * 8.0 / 1e6 * 10.0).round() / 10.0;
    let _ = ctx.emit.send(json!({
        "bench": "testbed",
        "experiment": "bulk",
        "from": from,
        "to": to,
        "bytes": bytes,
        "seconds": (secs * 1000.0).round() / 1000.0,
        "shaped_mbit_s": mbit(shaped),
        "measured_mbit_s": mbit(got),
        "goal": "at least 0.9x the shaped rate",
        "ratio": v["ratio"],
        "ok": v["ok"],
    }));
}
