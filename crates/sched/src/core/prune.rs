//! Exact pruning of MCT ranking over a service's providers.
//!
//! A server on which the compute model promises a compute term of at least `work / r`
//! ([`ComputeModel::rate_bound`](gridwise_predict::ComputeModel::rate_bound): for the FPM
//! model, a server with no model point for the service and a usable rate `r`) has an ETC total
//! no lower than [`lower_bound_s`]`(r)`, which does not decrease as `r` does. Visiting such
//! servers fastest-rate first, the scan stops once the next bound is above the k-th best total
//! found so far (or equal to it with a later name): no server after it can enter the top k,
//! nor tie into it.
//!
//! Everything the bound does not cover is evaluated exactly every time: the servers on which
//! the model promised no exact rate when the order was built. The promise can change only when
//! a server registers (rates, offers, descriptions) or when its model of the service gets its
//! first point, so the order is dropped then and rebuilt at the next decision; liveness and
//! what a server can hold are checked on every decision.

use super::{AgentCore, Call, Source};
use crate::catalog::ServiceIdx;
use crate::registry::Registry;
use gridwise_predict::{ComputeModel, ServiceFacts, lower_bound_s};
use gridwise_proto::{Candidate, Etc};
use std::cmp::Ordering;

/// One service's providers ordered for pruning.
#[derive(Clone, Debug, Default)]
pub(super) struct RateOrder {
    built: bool,
    /// Providers with a usable rate, fastest first (ties by position).
    by_rate: Vec<Rated>,
    /// Positions of providers without a usable rate: always evaluated.
    unrated: Vec<usize>,
}

#[derive(Clone, Copy, Debug)]
struct Rated {
    rate: f64,
    pos: usize,
    slot: usize,
}

impl RateOrder {
    fn build(
        registry: &Registry,
        service: ServiceIdx,
        facts: &ServiceFacts,
        model: &dyn ComputeModel,
    ) -> Self {
        let mut by_rate = Vec::new();
        let mut unrated = Vec::new();
        for (pos, &slot) in registry.providers(service).iter().enumerate() {
            let e = registry.entry(slot);
            let exact = model.rate_bound(e.view(service), facts);
            match (e.offers(service), exact) {
                (true, Some(rate)) if e.rate(service) == Some(rate) => {
                    by_rate.push(Rated { rate, pos, slot })
                }
                _ => unrated.push(pos),
            }
        }
        by_rate.sort_by(|a, b| b.rate.total_cmp(&a.rate).then(a.pos.cmp(&b.pos)));
        Self {
            built: true,
            by_rate,
            unrated,
        }
    }
}

/// The best `limit` candidates so far, sorted by (total, position).
struct TopK {
    limit: usize,
    items: Vec<(f64, usize, Etc)>,
}

impl TopK {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            items: Vec::with_capacity(limit + 1),
        }
    }

    fn worse(a: (f64, usize), b: (f64, usize)) -> bool {
        a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)) == Ordering::Greater
    }

    /// The k-th best (total, position), once k are held.
    fn kth(&self) -> Option<(f64, usize)> {
        (self.items.len() == self.limit).then(|| {
            let (t, p, _) = &self.items[self.limit - 1];
            (*t, *p)
        })
    }

    fn offer(&mut self, pos: usize, etc: Etc) {
        let total = etc.total_s();
        if let Some(kth) = self.kth()
            && Self::worse((total, pos), kth)
        {
            return;
        }
        let at = self
            .items
            .partition_point(|(t, p, _)| !Self::worse((*t, *p), (total, pos)));
        self.items.insert(at, (total, pos, etc));
        self.items.truncate(self.limit);
    }
}

impl AgentCore {
    /// Drops every rate order (registrations change providers, offers and rates).
    pub(super) fn invalidate_rate_orders(&mut self) {
        for o in &mut self.rate_orders {
            o.built = false;
        }
    }

    /// Drops `service`'s rate order: a server's model of it got its first point, which can
    /// end the model's promise of an exact rate there.
    pub(super) fn invalidate_rate_order(&mut self, service: ServiceIdx) {
        if let Some(o) = self.rate_orders.get_mut(service.0) {
            o.built = false;
        }
    }

    /// Makes sure `service`'s rate order is current.
    pub(super) fn ensure_rate_order(&mut self, service: ServiceIdx) {
        if self.rate_orders.len() <= service.0 {
            self.rate_orders
                .resize_with(service.0 + 1, RateOrder::default);
        }
        if !self.rate_orders[service.0].built {
            let facts = &self.catalog.entry(service).facts;
            self.rate_orders[service.0] =
                RateOrder::build(&self.registry, service, facts, self.model.as_ref());
        }
    }

    /// MCT's best `limit` candidates, in order, found without estimating every server; `None`
    /// when pruning does not apply (the caller then scans everything) or nothing could be
    /// ranked (the full scan then produces the error).
    pub(super) fn pruned_mct(
        &self,
        call: &Call<'_>,
        source: &Source<'_>,
        limit: usize,
    ) -> Option<(Vec<Candidate>, usize)> {
        let Source::Providers(slots) = source else {
            return None;
        };
        let work = call.work.filter(|w| w.is_finite() && *w > 0.0)?;
        let service = call.svc.idx;
        let order = self.rate_orders.get(service.0).filter(|o| o.built)?;
        let bound = |rate: f64| lower_bound_s(rate, work);

        let mut top = TopK::new(limit.max(1));
        let exact = |top: &mut TopK, pos: usize| {
            let e = self.registry.entry(slots[pos]);
            if self.eligible(e, call) {
                top.offer(pos, self.estimate(slots[pos], call));
            }
        };
        for &pos in &order.unrated {
            exact(&mut top, pos);
        }
        for r in &order.by_rate {
            let e = self.registry.entry(r.slot);
            if !e.is_up() || !call.fits(e) {
                continue;
            }
            if let Some((kth_total, kth_pos)) = top.kth() {
                match bound(r.rate).total_cmp(&kth_total) {
                    // Every server after this one is bounded as high or higher.
                    Ordering::Greater => break,
                    Ordering::Equal if r.pos > kth_pos => continue,
                    _ => {}
                }
            }
            if self
                .model
                .feasible(e.view(service), &call.svc.facts, call.profile)
            {
                top.offer(r.pos, self.estimate(r.slot, call));
            }
        }
        let first = slots[top.items.first()?.1];
        let candidates = top
            .items
            .into_iter()
            .map(|(_, pos, etc)| {
                let e = self.registry.entry(slots[pos]);
                Candidate {
                    server_id: e.id(),
                    name: e.name().to_string(),
                    addr: e.addr().to_string(),
                    etc,
                }
            })
            .collect();
        Some((candidates, first))
    }
}
