//! Exact pruning of MCT ranking over a service's providers.
//!
//! A server whose model for the service is empty and which has a usable calibrated rate `r`
//! gets, from [`FpmModel`](crate::fpm_model::FpmModel), exactly the compute term
//! `term(work / r)` (the model is empty, so FPM falls straight through to the rate). Its other
//! terms are bounded below by what every server shares: the queue wait is ≥ 0, the transfer in
//! is the client's inputs plus remote pulls that are each ≥ 0, the transfer out is the same for
//! all. So `LB(r) = Etc { 0, term(lat + in/bw), term(work/r), term(lat + out/bw) }.total_s()`
//! never exceeds its real total (floating-point addition and division are monotone), and it is
//! non-decreasing as `r` decreases. Visiting such servers fastest-rate first, the scan stops
//! once the next bound is above the k-th best total found so far (or equal to it with a later
//! name): no server after it can enter the top k, nor tie into it.
//!
//! Everything the bound does not cover is evaluated exactly every time: servers without a
//! usable rate, and servers whose model for the service is not empty *now* (checked live on
//! every decision, because model points arrive without passing through the registration path).
//! The rate order itself depends only on rates, offers and providers, which only change on
//! registration, where it is dropped.

use super::{AgentCore, Call, Source};
use crate::catalog::ServiceIdx;
use crate::etc::RateModel;
use crate::registry::Registry;
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
    /// Index of the service's offer in the server's `offers`.
    offer: usize,
}

impl RateOrder {
    fn build(registry: &Registry, service: ServiceIdx) -> Self {
        let mut by_rate = Vec::new();
        let mut unrated = Vec::new();
        for (pos, &slot) in registry.providers(service).iter().enumerate() {
            let e = registry.entry(slot);
            let offer = e.all_offers().iter().position(|o| o.service == service);
            match (offer, e.rate(service)) {
                (Some(offer), Some(rate)) => by_rate.push(Rated {
                    rate,
                    pos,
                    slot,
                    offer,
                }),
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

    /// Makes sure `service`'s rate order is current.
    pub(super) fn ensure_rate_order(&mut self, service: ServiceIdx) {
        if self.rate_orders.len() <= service.0 {
            self.rate_orders
                .resize_with(service.0 + 1, RateOrder::default);
        }
        if !self.rate_orders[service.0].built {
            self.rate_orders[service.0] = RateOrder::build(&self.registry, service);
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
        if !self.prunable {
            return None;
        }
        let work = call.work.filter(|w| w.is_finite() && *w > 0.0)?;
        // A declared duration, not the rate, sets the compute term: the bound does not hold.
        if call.svc.duration.is_some() {
            return None;
        }
        let service = call.svc.idx;
        let order = self.rate_orders.get(service.0).filter(|o| o.built)?;

        let bw = self.config.default_bandwidth_bytes_per_s;
        let lat = self.config.default_latency_s;
        let p = call.profile;
        // Remote pulls are ≥ 0 when the defaults are sane (measured links always are).
        let pulls_nonneg = p.remote_in.is_empty() || (lat >= 0.0 && bw > 0.0);
        let bound = |rate: f64| {
            Etc {
                queue_wait_s: 0.0,
                transfer_in_s: if pulls_nonneg {
                    term(lat + p.in_bytes as f64 / bw)
                } else {
                    0.0
                },
                compute_s: term(work / rate),
                transfer_out_s: term(lat + p.out_bytes as f64 / bw),
                compute_source: gridwise_proto::ComputeSource::CalibratedRate { rate },
            }
            .total_s()
        };

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
        let mut stopped = false;
        for r in &order.by_rate {
            let e = self.registry.entry(r.slot);
            if !e.is_up() || !call.fits(e) {
                continue;
            }
            let empty = match e.all_offers().get(r.offer) {
                Some(o) if o.service == service => o.model.is_empty(),
                _ => false,
            };
            if !empty {
                // Its model (or something unexpected) decides: no bound, evaluate it.
                exact(&mut top, r.pos);
                continue;
            }
            if stopped {
                continue;
            }
            if let Some((kth_total, kth_pos)) = top.kth() {
                match bound(r.rate).total_cmp(&kth_total) {
                    Ordering::Greater => {
                        stopped = true;
                        continue;
                    }
                    Ordering::Equal if r.pos > kth_pos => continue,
                    _ => {}
                }
            }
            // Empty model: FpmModel's compute is RateModel's, and the call is feasible.
            top.offer(r.pos, self.estimate_with(&RateModel, r.slot, call));
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

/// As [`etc`]'s terms: never negative or NaN.
fn term(x: f64) -> f64 {
    if x > 0.0 { x } else { 0.0 }
}
