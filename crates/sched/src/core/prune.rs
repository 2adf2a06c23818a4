//! Exact pruning of MCT ranking over a service's providers.
//!
//! A server whose compute model promises a compute term of at least `work / r` for calls at
//! the call's sizes ([`ComputeModel::rate_bound_at`](gridwise_predict::ComputeModel::rate_bound_at):
//! for the FPM model, its speed at those sizes, or the calibrated rate outside the model or
//! before it has a point) and whose queue wait is `q` has an ETC total no lower than
//! [`lower_bound_behind_s`]`(q, r, work)`, plus the client's transfers where the estimate
//! charges the configured ones. Visiting servers in order of that bound, the scan
//! stops once the next bound is above the k-th best total found so far (or equal to it with a
//! later name): no server after it can enter the top k, nor tie into it. The totals themselves
//! always come from the one estimate ([`AgentCore::estimate`]).
//!
//! The rates are cached per service and size vector (a "size class"), one per provider. They
//! can change only when a server registers or is forgotten (the class tables are dropped) or
//! when a server learns something (a report: its model, misfits, client link; a model point;
//! a lent regression): that server's entry is marked and recomputed at the next decision of
//! each class, with what the model rules out at those sizes
//! ([`feasible_at`](gridwise_predict::ComputeModel::feasible_at)). Queue waits are read afresh
//! at every decision; liveness, what a server can hold and what its current state rules out
//! ([`feasible_now`](gridwise_predict::ComputeModel::feasible_now)) are checked for the
//! servers evaluated.
//! Servers with no promise are evaluated exactly every time.

use super::{AgentCore, Call, Source};
use crate::catalog::ServiceIdx;
use crate::policy::Keyed;
use gridwise_predict::{
    charges_default_transfers, default_client_transfers_s, lower_bound_behind_s,
};
use gridwise_proto::{CallProfile, Candidate, Etc};
use std::cmp::Ordering;
use std::collections::HashMap;

/// Size classes kept per service before the cache is emptied (each holds two numbers per
/// provider).
const MAX_CLASSES: usize = 4096;

/// One service's cached rate bounds.
#[derive(Clone, Debug, Default)]
pub(super) struct Bounds {
    /// Whether `slots` and the class tables match the current providers.
    built: bool,
    /// Counts changes to what any provider's bound depends on.
    version: u64,
    /// Per registry slot: the `version` at which that server's knowledge last changed.
    changed_at: Vec<u64>,
    /// Per provider position: its slot count (for the queue wait).
    slots: Vec<u32>,
    /// Per size vector.
    classes: HashMap<Vec<i64>, Class>,
}

/// The rate bounds of one size class, per provider position.
#[derive(Clone, Debug)]
struct Class {
    /// The service's `version` when the class was last brought up to date.
    version: u64,
    /// The rate bound; NaN where the model promises none.
    rate: Vec<f64>,
    /// Whether the estimate charges the server the configured client transfers.
    default_transfers: Vec<bool>,
    /// What the model's [`feasible_at`](gridwise_predict::ComputeModel::feasible_at) says.
    feasible_at: Vec<bool>,
    /// The service's `version` when each rate was computed.
    seen: Vec<u64>,
}

fn size_key(profile: &CallProfile) -> Vec<i64> {
    profile.sizes.iter().map(|(_, v)| *v).collect()
}

/// `f` of the size vector, built on the stack when it is short (a look-up needs no owned key).
fn with_size_key<R>(profile: &CallProfile, f: impl FnOnce(&[i64]) -> R) -> R {
    let mut buf = [0i64; 8];
    let n = profile.sizes.len();
    if n > buf.len() {
        return f(&size_key(profile));
    }
    for (b, (_, v)) in buf.iter_mut().zip(&profile.sizes) {
        *b = *v;
    }
    f(&buf[..n])
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
    /// Drops every service's bounds (registrations change providers, offers and rates).
    pub(super) fn invalidate_rate_orders(&mut self) {
        for b in &mut self.rate_orders {
            b.built = false;
        }
    }

    /// Drops `service`'s bounds for every server (what all of them share changed: a lent
    /// regression).
    pub(super) fn invalidate_rate_order(&mut self, service: ServiceIdx) {
        if let Some(b) = self.rate_orders.get_mut(service.0) {
            b.built = false;
        }
    }

    /// The server in `slot` learnt something about `service`: its bounds are recomputed at
    /// the next decision of each size class.
    pub(super) fn invalidate_bound(&mut self, service: ServiceIdx, slot: usize) {
        if let Some(b) = self.rate_orders.get_mut(service.0) {
            b.version += 1;
            if b.changed_at.len() <= slot {
                b.changed_at.resize(slot + 1, 0);
            }
            b.changed_at[slot] = b.version;
        }
    }

    /// Makes sure `service`'s bounds for `profile`'s size class are current.
    pub(super) fn ensure_rate_order(&mut self, service: ServiceIdx, profile: &CallProfile) {
        if self.rate_orders.len() <= service.0 {
            self.rate_orders.resize_with(service.0 + 1, Bounds::default);
        }
        let providers = self.registry.providers(service);
        let b = &mut self.rate_orders[service.0];
        if !b.built {
            b.slots = providers
                .iter()
                .map(|&s| self.registry.entry(s).slots())
                .collect();
            b.classes.clear();
            b.version += 1;
            b.built = true;
        }
        if with_size_key(profile, |k| {
            b.classes.get(k).is_some_and(|c| c.version == b.version)
        }) {
            return;
        }
        let key = size_key(profile);
        if b.classes.len() >= MAX_CLASSES && !b.classes.contains_key(&key) {
            b.classes.clear();
        }
        let n = providers.len();
        let class = b.classes.entry(key).or_insert_with(|| Class {
            version: 0,
            rate: vec![f64::NAN; n],
            default_transfers: vec![false; n],
            feasible_at: vec![true; n],
            seen: vec![0; n],
        });
        if class.version == b.version {
            return;
        }
        let facts = &self.catalog.entry(service).facts;
        for (pos, &slot) in providers.iter().enumerate() {
            let changed = b.changed_at.get(slot).copied().unwrap_or(0);
            if class.seen[pos] != 0 && changed <= class.seen[pos] {
                continue;
            }
            let e = self.registry.entry(slot);
            class.rate[pos] = if e.offers(service) {
                self.model
                    .rate_bound_at(e.view(service), facts, profile)
                    .unwrap_or(f64::NAN)
            } else {
                f64::NAN
            };
            class.default_transfers[pos] = charges_default_transfers(e.view(service));
            class.feasible_at[pos] = self.model.feasible_at(e.view(service), facts, profile);
            class.seen[pos] = b.version;
        }
        class.version = b.version;
    }

    /// MCT's best `limit` candidates, in order, found without estimating every server; `None`
    /// when pruning does not apply (the caller then scans everything) or nothing could be
    /// ranked (the full scan then produces the error).
    pub(super) fn pruned_mct(
        &self,
        call: &Call<'_>,
        source: &Source<'_>,
        limit: usize,
        bounded: &mut Vec<Keyed>,
    ) -> Option<(Vec<Candidate>, usize)> {
        let Source::Providers(slots) = source else {
            return None;
        };
        let work = call.work.filter(|w| w.is_finite() && *w > 0.0)?;
        let service = call.svc.idx;
        let b = self.rate_orders.get(service.0).filter(|b| b.built)?;
        let class = with_size_key(call.profile, |k| b.classes.get(k))
            .filter(|c| c.version == b.version && c.rate.len() == slots.len())?;

        // Whether the server may get the call at all: up, able to hold it, and not ruled out by
        // its model (what `collect` checks; the model's size-only part read from the class).
        let eligible = |pos: usize| {
            let e = self.registry.entry(slots[pos]);
            e.is_up()
                && call.fits(e)
                && class.feasible_at[pos]
                && self
                    .model
                    .feasible_now(e.view(service), &call.svc.facts, call.profile)
        };
        let defaults = default_client_transfers_s(&self.config.transfers(), call.profile);
        let k = limit.max(1);
        let mut top = TopK::new(k);
        // Every bounded server as (bound, position), and the k first of them in that order.
        bounded.clear();
        let mut lowest: Vec<(f64, usize)> = Vec::with_capacity(k + 1);
        let before = |a: &(f64, usize), b: &(f64, usize)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
        for (pos, (&slot, &rate)) in slots.iter().zip(&class.rate).enumerate() {
            if rate.is_nan() {
                if eligible(pos) {
                    top.offer(pos, self.estimate(slot, call));
                }
                continue;
            }
            let client = class.default_transfers[pos].then_some(defaults);
            let wait = self.reservations.queue(slot).wait_s(call.now, b.slots[pos]);
            let item = (lower_bound_behind_s(wait, client, rate, work), pos);
            bounded.push(Keyed {
                key: item.0,
                pos: item.1,
            });
            if lowest.len() < k
                || lowest
                    .last()
                    .is_some_and(|l| before(&item, l) == Ordering::Less)
            {
                let at = lowest.partition_point(|l| before(l, &item) == Ordering::Less);
                lowest.insert(at, item);
                lowest.truncate(k);
            }
        }
        // Visits servers in bound order; false once no later one can enter the top k.
        let visit = |top: &mut TopK, (bound, pos): (f64, usize)| {
            if let Some((kth_total, kth_pos)) = top.kth() {
                match bound.total_cmp(&kth_total) {
                    // Every server after this one is bounded as high or higher.
                    Ordering::Greater => return false,
                    Ordering::Equal if pos > kth_pos => return true,
                    _ => {}
                }
            }
            if eligible(pos) {
                top.offer(pos, self.estimate(slots[pos], call));
            }
            true
        };
        let mut stopped = false;
        for &item in &lowest {
            if !visit(&mut top, item) {
                stopped = true;
                break;
            }
        }
        if !stopped && let Some(last) = lowest.last().copied() {
            // The rest, in order: only those the k-th total found so far does not rule out.
            let cut = top.kth().map_or(f64::INFINITY, |(t, _)| t);
            bounded.retain(|b| before(&(b.key, b.pos), &last) == Ordering::Greater && b.key <= cut);
            bounded.sort_unstable_by(|a, b| before(&(a.key, a.pos), &(b.key, b.pos)));
            for b in bounded.iter() {
                if !visit(&mut top, (b.key, b.pos)) {
                    break;
                }
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
