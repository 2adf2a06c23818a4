//! What the agent learns outlives it: restoring the core from the store at start-up, and
//! turning the core's changes into store writes (done on the store's own thread).

use gridwise_proto::{PointSource, PointStats};
use gridwise_sched::{AgentCore, DirtyPoint};
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

/// The store write for changed model points.
pub fn points_op(dirty: Vec<DirtyPoint>) -> Option<Op> {
    if dirty.is_empty() {
        return None;
    }
    let rows = dirty
        .into_iter()
        .map(|d| PointRow {
            server: d.server,
            service: d.service,
            x: d.x,
            count: d.stats.count,
            min: d.stats.min,
            mean: d.stats.mean,
            max: d.stats.max,
            source: d.source,
        })
        .collect();
    Some(Op::Points(rows))
}
