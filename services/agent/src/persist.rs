//! What the agent learns outlives it: restoring the core from the store at start-up, and
//! turning the core's changes into store writes (done on the store's own thread).

use gridwise_proto::{PointSource, PointStats};
use gridwise_proto::{Registration, ServerId};
use gridwise_sched::{AgentCore, Learned};
use gridwise_store::{Op, PointRow, Store};
use std::time::Duration;

/// Loads servers (down until they register again) and model points into a fresh core.
/// Servers last seen longer than `retention` ago are not restored: their names are returned,
/// for deleting from the store.
pub fn restore(
    core: &mut AgentCore,
    store: &Store,
    retention: Duration,
) -> anyhow::Result<Vec<String>> {
    let snap = store
        .snapshot()
        .map_err(|e| anyhow::anyhow!("cannot read the agent's data: {e}"))?;
    let now = gridwise_proto::clock::unix_s();
    let mut servers = 0;
    let mut stale = Vec::new();
    for (id, reg, last_seen) in snap.servers {
        let name = reg.name.clone();
        if now - last_seen > retention.as_secs_f64() {
            stale.push(name);
            continue;
        }
        match core.restore_server(id, reg, Duration::ZERO) {
            Ok(()) => servers += 1,
            Err(e) => tracing::warn!(server = %name, "not restored: {e}"),
        }
    }
    let mut points = 0;
    for p in &snap.points {
        let (stats, source) = from_row(p);
        if core.restore_point(&p.server, &p.service, &p.x, stats, source) {
            points += 1;
        }
    }
    if servers > 0 || points > 0 {
        tracing::info!(servers, points, "restored what earlier runs learned");
    }
    if !stale.is_empty() {
        tracing::info!(
            servers = stale.len(),
            "forgetting servers gone longer than server_retention_s"
        );
    }
    Ok(stale)
}

fn from_row(p: &PointRow) -> (PointStats, PointSource) {
    let stats = PointStats {
        count: p.count,
        min: p.min,
        mean: p.mean,
        max: p.max,
    };
    (stats, p.source)
}

/// The store writes for what the core learned, in order; changed model points in one write.
/// A server that joined is saved with the registration it was admitted with (`joined`: its id
/// and registration, which the core does not keep).
pub fn ops_for(
    learned: Vec<Learned>,
    joined: impl Fn(ServerId) -> Option<(ServerId, Registration)>,
    now_unix_s: f64,
) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut rows = Vec::new();
    for l in learned {
        match l {
            Learned::Joined(id) => {
                if let Some((id, reg)) = joined(id) {
                    ops.push(Op::Server(id, reg, now_unix_s));
                }
            }
            Learned::Load { server, loadavg_1m } => {
                ops.push(Op::Load(server, now_unix_s, loadavg_1m))
            }
            Learned::Timings { server, reports } => {
                ops.push(Op::Timings(server, now_unix_s, reports))
            }
            Learned::Point(p) => rows.push(PointRow {
                server: p.server,
                service: p.service,
                x: p.x,
                count: p.stats.count,
                min: p.stats.min,
                mean: p.stats.mean,
                max: p.stats.max,
                source: p.source,
            }),
            Learned::Forgotten(name) => ops.push(Op::Forget(name)),
            // Down is not stored: a restarted agent restores every server down anyway.
            Learned::Down(_) => {}
        }
    }
    if !rows.is_empty() {
        ops.push(Op::Points(rows));
    }
    ops
}
