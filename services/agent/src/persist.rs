//! What the agent learns outlives it: restoring the core from the store at start-up, and
//! turning the core's changes into store writes (done on the store's own thread).

use gridwise_proto::{PointSource, PointStats};
use gridwise_proto::{Registration, ServerId};
use gridwise_sched::{AgentCore, Learned, LoadRecord};
use gridwise_store::{LoadRow, Op, PointRow, Store};
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
    let mut load = 0;
    for row in &snap.load {
        let record = LoadRecord {
            loadavg_1m: row.loadavg_1m,
            cpu_available: row.cpu_available,
            free_memory_bytes: row.free_memory_bytes,
        };
        if core.restore_load(&row.server, &record) {
            load += 1;
        }
    }
    if servers > 0 || points > 0 {
        tracing::info!(
            servers,
            points,
            load_samples = load,
            "restored what earlier runs learned"
        );
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
        sd: p.sd,
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
            Learned::Load { server, record } => ops.push(Op::Load(LoadRow {
                server,
                at_unix_s: now_unix_s,
                loadavg_1m: record.loadavg_1m,
                cpu_available: record.cpu_available,
                free_memory_bytes: record.free_memory_bytes,
            })),
            Learned::Timings {
                server,
                reports,
                theirs,
                ..
            } => {
                let ours: Vec<_> = reports
                    .into_iter()
                    .zip(theirs.iter().chain(std::iter::repeat(&false)))
                    .filter(|(_, theirs)| !**theirs)
                    .map(|(r, _)| r)
                    .collect();
                if !ours.is_empty() {
                    ops.push(Op::Timings(server, now_unix_s, ours));
                }
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
                sd: p.stats.sd,
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

#[cfg(test)]
mod tests {
    use super::*;
    use gridwise_proto::{ArgDesc, ArgMode, Heartbeat, LoadSample, ServiceDesc};
    use gridwise_sched::CoreConfig;

    fn registration() -> Registration {
        Registration {
            secret: None,
            instance: String::new(),
            max_frame_bytes: u64::MAX,
            sleeping: Vec::new(),
            not_offered: Vec::new(),
            memory_budget_bytes: u64::MAX,
            name: "busy".into(),
            addr: "127.0.0.1:7001".into(),
            slots: 1,
            services: vec![ServiceDesc {
                memory: None,
                duration: None,
                name: "scale".into(),
                doc: "scale for tests".into(),
                args: vec![
                    ArgDesc::new("n", ArgMode::In, "int"),
                    ArgDesc::new("x", ArgMode::InOut, "vector<f64>[n]"),
                ],
                size_params: vec!["n".into()],
                complexity: Some("n".into()),
            }],
            rates: Vec::new(),
            default_rate: 1e9,
            memory_bytes: 16 << 30,
            cores: 2,
        }
    }

    /// Applies what the core learned the way the store's writer would.
    fn save(store: &Store, learned: Vec<Learned>, reg: &Registration) {
        let joined = |id| Some((id, reg.clone()));
        for op in ops_for(learned, joined, gridwise_proto::clock::unix_s()) {
            match op {
                Op::Server(id, r, at) => store.save_server(id, &r, at).unwrap(),
                Op::Load(row) => store.add_load(&row).unwrap(),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn load_history_survives_an_agent_restart() {
        let config = CoreConfig {
            sensor_sample: Duration::from_secs(1),
            load_sample: Duration::from_secs(1),
            ..CoreConfig::default()
        };
        let store = Store::open_in_memory().unwrap();
        let mut core = AgentCore::new(config.clone());
        let reg = registration();
        let id = core
            .register(reg.clone(), Duration::ZERO)
            .unwrap()
            .server_id;
        for s in 0..20u64 {
            let hb = Heartbeat {
                server_id: id,
                load: LoadSample {
                    loadavg_1m: 1.5,
                    cpu_available: Some(if s % 5 == 4 { 0.4 } else { 0.6 }),
                    free_memory_bytes: Some(3 << 30),
                    ..LoadSample::default()
                },
                models: Vec::new(),
                in_flight: Vec::new(),
            };
            let out = core.heartbeat(&hb, Duration::from_secs(s));
            save(&store, out.learned, &reg);
        }
        let before = core.server_by_name("busy").unwrap().host();
        let (avail, memory) = (before.sensed.availability(), before.sensed.free_memory());
        let band_samples = before.load.samples();
        assert!(avail.is_some_and(|a| a.mean < 0.7) && band_samples > 3);

        let mut restarted = AgentCore::new(config);
        restore(&mut restarted, &store, Duration::from_secs(3600)).unwrap();
        let after = restarted.server_by_name("busy").unwrap().host();
        assert_eq!(after.sensed.availability(), avail);
        assert_eq!(after.sensed.free_memory(), memory);
        assert_eq!(after.sensed.availability_series().len(), 20);
        assert_eq!(after.load.samples(), band_samples);
    }
}
