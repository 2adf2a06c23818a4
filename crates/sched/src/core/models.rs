//! Performance models held by the core: points streamed from the servers' model builders,
//! listings and exports, what changed since the last save, and restoring what was saved.

use super::AgentCore;
use super::learned::{Learned, Outcome, PointChange};
use crate::catalog::ServiceIdx;
use gridwise_proto::{
    Ack, ErrorCode, ModelExport, ModelPoint, ModelSummary, PointSource, PointStats, Registration,
    RpcError, ServerId,
};
use std::time::Duration;

impl AgentCore {
    /// Points measured by a server's model builder; what changed comes back as
    /// [`Learned::Point`]s.
    pub fn model_points(&mut self, server: ServerId, points: &[ModelPoint]) -> Outcome<Ack> {
        // A down or unknown server is told to register again and will resend these points, so
        // nothing is taken now (or they would count twice).
        let Some(slot) = self.registry.slot_of(server) else {
            return Outcome::nothing(Ack::Reregister);
        };
        if !self.registry.entry(slot).is_up() {
            return Outcome::nothing(Ack::Reregister);
        }
        let mut changed = Vec::new();
        for p in points {
            let Some(svc) = self.catalog.get(&p.service) else {
                continue;
            };
            let idx = svc.idx;
            if p.x.len() != svc.desc.size_params.len() {
                continue;
            }
            let e = self.registry.entry_mut(slot);
            let Some(o) = e.offer_mut(idx) else {
                continue;
            };
            o.known.learn_point(&p.x, p.stats, p.source);
            self.invalidate_bound(idx, slot);
            changed.push((idx, p.x.clone()));
        }
        Outcome {
            reply: Ack::Ok,
            learned: self.point_changes(slot, changed),
        }
    }

    /// Every (server, service) model with at least one point or a build under way.
    pub fn models(&self) -> Vec<ModelSummary> {
        let mut out = Vec::new();
        for e in self.registry.iter() {
            for o in e.all_offers() {
                let service = self.catalog.entry(o.service).name().to_string();
                let progress = e.progress().iter().find(|p| p.service == service).cloned();
                if o.known.model.is_empty() && progress.is_none() {
                    continue;
                }
                out.push(ModelSummary {
                    server: e.name().to_string(),
                    service,
                    points: o.known.model.len() as u32,
                    progress,
                });
            }
        }
        out.sort_by(|a, b| (&a.server, &a.service).cmp(&(&b.server, &b.service)));
        out
    }

    /// One model in full.
    pub fn model(&self, server: &str, service: &str) -> Result<ModelExport, RpcError> {
        let e = self.registry.by_name(server).ok_or_else(|| {
            RpcError::new(
                ErrorCode::ServerNotFound,
                format!("no server is called `{server}`; `gridwise model status` lists models"),
            )
        })?;
        let svc = self.catalog.get(service).ok_or_else(|| {
            RpcError::new(
                ErrorCode::FunctionNotFound,
                format!("no server offers `{service}`"),
            )
        })?;
        let o = e.offer(svc.idx).ok_or_else(|| {
            RpcError::new(
                ErrorCode::FunctionNotFound,
                format!("server {server} does not offer `{service}`"),
            )
        })?;
        Ok(ModelExport {
            server: e.name().to_string(),
            service: service.to_string(),
            params: svc.desc.size_params.clone(),
            complexity: svc.desc.complexity.clone(),
            points: o
                .known
                .model
                .points()
                .into_iter()
                .map(|(x, s)| (x, PointStats::from(s)))
                .collect(),
            assumed_zero: o.known.model.assumed_zero().map(|x| x.to_vec()),
            progress: e.progress().iter().find(|p| p.service == service).cloned(),
        })
    }

    /// The points `changed` on the server in `slot` as they stand now, each once.
    pub(super) fn point_changes(
        &self,
        slot: usize,
        mut changed: Vec<(ServiceIdx, Vec<i64>)>,
    ) -> Vec<Learned> {
        changed.sort();
        changed.dedup();
        let e = self.registry.entry(slot);
        let mut out = Vec::with_capacity(changed.len());
        for (idx, x) in changed {
            let Some(o) = e.offer(idx) else { continue };
            let service = self.catalog.entry(idx).name().to_string();
            let (stats, source) = if o.known.model.assumed_zero() == Some(x.as_slice()) {
                (PointStats::default(), PointSource::AssumedZero)
            } else if let Some((_, s)) = o.known.model.points().into_iter().find(|(p, _)| *p == x) {
                (PointStats::from(s), PointSource::Benchmark)
            } else {
                continue;
            };
            out.push(Learned::Point(PointChange {
                server: e.name().to_string(),
                service,
                x,
                stats,
                source,
            }));
        }
        out
    }

    /// Restores a server saved by an earlier agent, with its id. It starts down: it gets calls
    /// again once it registers (its heartbeat is answered with "register again").
    pub fn restore_server(
        &mut self,
        id: ServerId,
        reg: Registration,
        now: Duration,
    ) -> Result<(), RpcError> {
        let name = reg.name.clone();
        self.register(reg, now)?;
        self.keep_id(&name, id);
        if let Some(slot) = self.registry.slot_by_name(&name) {
            let e = self.registry.entry_mut(slot);
            // It beat before it was saved; until it registers again, calls may wait for it.
            e.mark_restored();
        }
        Ok(())
    }

    /// Restores one saved model point; false if its server or service is not known (restore
    /// servers first).
    pub fn restore_point(
        &mut self,
        server: &str,
        service: &str,
        x: &[i64],
        stats: PointStats,
        source: PointSource,
    ) -> bool {
        let (Some(slot), Some(svc)) = (
            self.registry.slot_by_name(server),
            self.catalog.get(service),
        ) else {
            return false;
        };
        let idx = svc.idx;
        let Some(o) = self.registry.entry_mut(slot).offer_mut(idx) else {
            return false;
        };
        o.known.learn_point(x, stats, source);
        self.invalidate_bound(idx, slot);
        true
    }

    /// Replays a load sample a store kept for `server` (oldest first); false for a server
    /// the core does not know.
    pub fn restore_load(&mut self, server: &str, record: &gridwise_predict::LoadRecord) -> bool {
        let Some(slot) = self.registry.slot_by_name(server) else {
            return false;
        };
        let sampling = self.config.load_sampling();
        self.registry
            .entry_mut(slot)
            .host_mut()
            .restore_load(record, &sampling);
        true
    }
}
