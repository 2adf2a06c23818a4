//! Links as the agent learns them (servers probe each other and the agent: best of three
//! pings, 1 MiB sent) against the rate the test bed shapes on the path.

use super::{Ctx, judged};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Probe rounds to wait for: the first round may find peers not yet registered.
const ROUNDS: u32 = 2;

pub fn run(ctx: &Ctx) -> anyhow::Result<()> {
    let topo = ctx.bed.topology();
    let servers = ctx.grid.names.len();
    // Every server probes every other and the agent.
    let pairs = servers * servers;
    eprintln!("bench testbed: links: waiting for {ROUNDS} probe rounds …");
    let started = Instant::now();
    let mut seen: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut last_age: BTreeMap<(String, String), f64> = BTreeMap::new();
    while started.elapsed() < Duration::from_secs(90) {
        for l in ctx.client.link_matrix()? {
            let (Some(from), Some(to)) =
                (ctx.host_of_addr(&l.from), ctx.host_of_addr(&l.sample.to))
            else {
                continue;
            };
            let key = (from, to);
            // A new sample shows as a smaller age than the last one read.
            let fresh = last_age.get(&key).is_none_or(|a| l.age_s < *a);
            last_age.insert(key.clone(), l.age_s);
            if fresh {
                seen.entry(key)
                    .or_default()
                    .push(l.sample.bandwidth_bytes_per_s);
            }
        }
        if seen.len() >= pairs && seen.values().all(|v| v.len() as u32 >= ROUNDS) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    anyhow::ensure!(
        !seen.is_empty(),
        "no link was measured in 90 s: are the servers probing (link_probe_s)?"
    );
    for ((from, to), samples) in seen {
        let shaped = topo.path_rate(&from, &to)?.bytes_per_s();
        let last = *samples.last().expect("a sample");
        let best = samples.iter().cloned().fold(0.0, f64::max);
        let mbit = |b: f64| (b * 8.0 / 1e6 * 10.0).round() / 10.0;
        let mut row = json!({
            "bench": "testbed",
            "experiment": "link",
            "from": from,
            "to": to,
            "shaped_mbit_s": mbit(shaped),
            "learned_mbit_s": mbit(last),
            "best_probe_mbit_s": mbit(best),
            "probes": samples.len(),
            "goal": "learned within 10% of shaped",
        });
        let v = judged(last, shaped, 0.9, 1.1);
        row["ratio"] = v["ratio"].clone();
        row["ok"] = v["ok"].clone();
        let _ = ctx.emit.send(row);
    }
    Ok(())
}
