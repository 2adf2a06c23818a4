//! Exact pruning of MCT ranking over a service's providers.
//!
//! A server whose compute model promises a compute term of at least `work / r` for calls at
//! the call's sizes ([`ComputeModel::rate_bound_at`](gridwise_predict::ComputeModel::rate_bound_at):
//! for the FPM model, its speed at those sizes, or the calibrated rate outside the model or
//! before it has a point) and whose queue wait is `q` has an ETC total no lower than
//! [`lower_bound_behind_s`]`(q, r, work)`, plus the client's transfers where the estimate
//! charges the configured ones. Visiting servers in order of that bound, the search stops once
//! the next bound is above the k-th best total found so far (or equal to it with a later
//! name): no server after it can enter the top k, nor tie into it. The totals themselves
//! always come from the one estimate ([`AgentCore::estimate`]).
//!
//! The servers are not scanned one by one to find that order: [`tiers`] keeps each service's
//! providers by speed tier, each tier in the order its servers free a slot. The tier's best
//! rate at the call's sizes, its servers' common client charge and its next server's wait
//! bound every server of the tier not yet visited, so servers come off the tiers in order of
//! that bound, their own bounds wait in a heap, and the search ends once both the next tier
//! bound and the next server bound are above the k-th best total. Over 1,000 servers with
//! models and queues a decision visits about 16 servers and estimates 8.
//!
//! The rates are cached per service and size vector (a "size class"), one per provider. They
//! can change only when a server registers or is forgotten (the class tables and the tiers are
//! rebuilt) or when a server learns something (a report: its model, misfits, client link; a
//! model point; a lent regression): that server's entry is marked and recomputed at the next
//! decision of each class, with what the model rules out at those sizes
//! ([`feasible_at`](gridwise_predict::ComputeModel::feasible_at)). When a server frees a slot
//! is brought up to date before every decision for the queues that changed since the last
//! ([`Reservations::take_touched`](crate::reservations::Reservations::take_touched));
//! liveness, what a server can hold and what its current state rules out
//! ([`feasible_now`](gridwise_predict::ComputeModel::feasible_now)) are checked for the
//! servers evaluated. Servers with no promise are evaluated exactly every time.

mod tiers;

use super::{AgentCore, Call, Source};
use crate::catalog::ServiceIdx;
use crate::queue::wait_until;
use gridwise_predict::{
    charges_default_transfers, default_client_transfers_s, lower_bound_behind_s,
};
use gridwise_proto::{CallProfile, Candidate, Etc};
use std::cmp::{Ordering, Reverse};
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, HashMap};
use tiers::Tiers;

/// Size classes kept per service before the cache is emptied (each holds two numbers per
/// provider).
const MAX_CLASSES: usize = 4096;

/// Every service's cached rate bounds, and what is kept between decisions to bring their
/// queue orders up to date.
#[derive(Clone, Debug, Default)]
pub(super) struct RateOrders {
    services: Vec<Bounds>,
    touched: Vec<usize>,
}

/// One service's cached rate bounds.
#[derive(Clone, Debug, Default)]
struct Bounds {
    /// Whether `slots` and the class tables match the current providers.
    built: bool,
    /// Counts changes to what any provider's bound depends on.
    version: u64,
    /// Per registry slot: the `version` at which that server's knowledge last changed.
    changed_at: Vec<u64>,
    /// Per provider position: its slot count (for the queue wait).
    slots: Vec<u32>,
    /// The providers by tier, in the order they free a slot.
    tiers: Tiers,
    /// Per size vector.
    classes: HashMap<Vec<i64>, Class>,
}

/// The rate bounds of one size class, per provider position.
#[derive(Clone, Debug)]
struct Class {
    /// The service's `version` when the class was last brought up to date.
    version: u64,
    /// Per provider position, together: a decision touches a few servers of a class that is
    /// seldom in cache, and one line per server is the cost of looking.
    at: Vec<AtSizes>,
    /// The service's `version` when each rate was computed.
    seen: Vec<u64>,
    /// Per tier: the greatest rate of its servers that have one (NaN when none has).
    tier_rate: Vec<f64>,
    /// Per tier: whether every server in it with a rate is charged the default transfers.
    tier_charged: Vec<bool>,
    /// The positions with no rate, evaluated at every decision.
    unpromised: Vec<usize>,
}

/// What a server promises at a class's sizes.
#[derive(Clone, Copy, Debug)]
struct AtSizes {
    /// The rate bound; NaN where the model promises none.
    rate: f64,
    /// Whether the estimate charges the server the configured client transfers.
    default_transfers: bool,
    /// What the model's [`feasible_at`](gridwise_predict::ComputeModel::feasible_at) says.
    feasible_at: bool,
}

impl Class {
    /// What every server of a tier shares, from the rates as they are now.
    fn summarise(&mut self, tiers: &Tiers) {
        let n = tiers.count();
        self.tier_rate.clear();
        self.tier_rate.resize(n, f64::NAN);
        self.tier_charged.clear();
        self.tier_charged.resize(n, true);
        self.unpromised.clear();
        for (pos, a) in self.at.iter().enumerate() {
            let rate = a.rate;
            if rate.is_nan() {
                self.unpromised.push(pos);
                continue;
            }
            let t = tiers.tier_of(pos);
            // A negative rate bounds the compute term by 0, as only an infinite one does.
            let rate = if rate.is_sign_negative() {
                f64::INFINITY
            } else {
                rate
            };
            // `max` keeps the other operand over NaN.
            self.tier_rate[t] = self.tier_rate[t].max(rate);
            self.tier_charged[t] &= a.default_transfers;
        }
    }
}

/// An item of a walk: a bound, and the provider position or tier it bounds; ordered by bound,
/// then by position, lowest first in a [`BinaryHeap`] of `Reverse`.
#[derive(Clone, Copy, Debug)]
struct Next(f64, usize);

impl PartialEq for Next {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Next {}

impl PartialOrd for Next {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Next {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
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

/// Asks the CPU to bring `x`'s cache line in. The walk reads a server's entry in a class only
/// when its tier comes up, and that entry is seldom cached (see `Class::at`): asked for when
/// the tier is queued, it arrives while the walk does other work.
#[inline(always)]
fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint to the cache; it reads nothing and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (x as *const T).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
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
        for b in &mut self.rate_orders.services {
            b.built = false;
        }
    }

    /// Drops `service`'s bounds for every server (what all of them share changed: a lent
    /// regression).
    pub(super) fn invalidate_rate_order(&mut self, service: ServiceIdx) {
        if let Some(b) = self.rate_orders.services.get_mut(service.0) {
            b.built = false;
        }
    }

    /// The server in `slot` learnt something about `service`: its bounds are recomputed at
    /// the next decision of each size class.
    pub(super) fn invalidate_bound(&mut self, service: ServiceIdx, slot: usize) {
        if let Some(b) = self.rate_orders.services.get_mut(service.0) {
            b.version += 1;
            if b.changed_at.len() <= slot {
                b.changed_at.resize(slot + 1, 0);
            }
            b.changed_at[slot] = b.version;
        }
    }

    /// Makes sure `service`'s bounds for `profile`'s size class are current, and every
    /// service's queue order.
    pub(super) fn ensure_rate_order(&mut self, service: ServiceIdx, profile: &CallProfile) {
        let orders = &mut self.rate_orders;
        self.reservations.take_touched(&mut orders.touched);
        for b in orders.services.iter_mut().filter(|b| b.built) {
            for &slot in &orders.touched {
                if let Some(pos) = b.tiers.position(slot) {
                    let frees_at = self.reservations.queue(slot).frees_at_s(b.slots[pos]);
                    b.tiers.update(pos, frees_at);
                }
            }
        }
        if orders.services.len() <= service.0 {
            orders.services.resize_with(service.0 + 1, Bounds::default);
        }
        let providers = self.registry.providers(service);
        let b = &mut orders.services[service.0];
        if !b.built {
            b.slots = providers
                .iter()
                .map(|&s| self.registry.entry(s).slots())
                .collect();
            b.tiers = Tiers::build(providers.iter().zip(&b.slots).map(|(&slot, &slots)| {
                (
                    slot,
                    self.registry.entry(slot).default_rate(),
                    self.reservations.queue(slot).frees_at_s(slots),
                )
            }));
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
            at: vec![
                AtSizes {
                    rate: f64::NAN,
                    default_transfers: false,
                    feasible_at: true,
                };
                n
            ],
            seen: vec![0; n],
            tier_rate: Vec::new(),
            tier_charged: Vec::new(),
            unpromised: Vec::new(),
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
            class.at[pos] = AtSizes {
                rate: if e.offers(service) {
                    self.model
                        .rate_bound_at(e.view(service), facts, profile)
                        .unwrap_or(f64::NAN)
                } else {
                    f64::NAN
                },
                default_transfers: charges_default_transfers(e.view(service)),
                feasible_at: self.model.feasible_at(e.view(service), facts, profile),
            };
            class.seen[pos] = b.version;
        }
        class.summarise(&b.tiers);
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
    ) -> Option<(Vec<Candidate>, usize)> {
        let Source::Providers(slots) = source else {
            return None;
        };
        let work = call.work.filter(|w| w.is_finite() && *w > 0.0)?;
        let service = call.svc.idx;
        let b = self
            .rate_orders
            .services
            .get(service.0)
            .filter(|b| b.built)?;
        let class = with_size_key(call.profile, |k| b.classes.get(k))
            .filter(|c| c.version == b.version && c.at.len() == slots.len())?;

        // Whether the server may get the call at all: up, able to hold it, and not ruled out by
        // its model (what `collect` checks; the model's size-only part read from the class).
        // Suspected servers are left to the full scan, which takes them only when nothing
        // else can run the call.
        let eligible = |pos: usize| {
            let e = self.registry.entry(slots[pos]);
            e.is_up()
                && !e.is_suspected(call.now)
                && call.fits(e)
                && class.at[pos].feasible_at
                && self
                    .model
                    .feasible_now(e.view(service), &call.svc.facts, call.profile)
        };
        let defaults = default_client_transfers_s(&self.config.transfers(), call.profile);
        let mut top = TopK::new(limit.max(1));
        for &pos in &class.unpromised {
            if eligible(pos) {
                top.offer(pos, self.estimate(slots[pos], call));
            }
        }
        // The bound of what is left of a tier, its servers from the one freeing at `frees_at`.
        let tier_bound = |tier: usize, frees_at: f64| {
            let client = class.tier_charged[tier].then_some(defaults);
            lower_bound_behind_s(
                wait_until(frees_at, call.now),
                client,
                class.tier_rate[tier],
                work,
            )
        };
        // How far each tier has been walked.
        let mut walked = vec![0usize; b.tiers.count()];
        // The tiers by the bound of their next server; servers by their own bound.
        let mut tiers: BinaryHeap<Reverse<Next>> = (0..b.tiers.count())
            .filter(|&t| !class.tier_rate[t].is_nan())
            .filter_map(|t| {
                let (f, pos) = b.tiers.nth_in_free_order(t, 0)?;
                prefetch(&class.at[pos]);
                Some(Reverse(Next(tier_bound(t, f), t)))
            })
            .collect();
        let mut servers: BinaryHeap<Reverse<Next>> = BinaryHeap::new();
        // Whether nothing bounded by `bound` (and after `pos` on a tie) can enter the top k.
        let beyond = |top: &TopK, bound: f64, pos: usize| {
            top.kth().is_some_and(|(t, p)| match bound.total_cmp(&t) {
                Ordering::Greater => true,
                Ordering::Equal => pos > p,
                Ordering::Less => false,
            })
        };
        loop {
            let tier_next = tiers.peek().map(|r| r.0);
            match servers.peek().map(|r| r.0) {
                // A server bounded no higher than every unvisited one: visit it.
                Some(s) if tier_next.is_none_or(|t| s.0 <= t.0) => {
                    servers.pop();
                    if beyond(&top, s.0, s.1) {
                        // Everything else is bounded at least as high.
                        if s.0 > top.kth().map_or(f64::INFINITY, |k| k.0) {
                            break;
                        }
                        continue;
                    }
                    if eligible(s.1) {
                        top.offer(s.1, self.estimate(slots[s.1], call));
                    }
                }
                _ => {
                    // The tier stays at the head of the heap while its next server is taken
                    // and its bound raised in place: one sift, where a pop and a push take two.
                    let Some(mut head) = tiers.peek_mut() else {
                        break;
                    };
                    let Reverse(Next(bound, t)) = *head;
                    if top.kth().is_some_and(|k| bound > k.0) {
                        break;
                    }
                    let Some((frees_at, pos)) = b.tiers.nth_in_free_order(t, walked[t]) else {
                        PeekMut::pop(head);
                        continue;
                    };
                    walked[t] += 1;
                    let at = class.at[pos];
                    let client = at.default_transfers.then_some(defaults);
                    // The queue's own wait: the order is brought up to date before deciding.
                    let wait = wait_until(frees_at, call.now);
                    debug_assert_eq!(
                        wait.to_bits(),
                        self.reservations
                            .queue(slots[pos])
                            .wait_s(call.now, b.slots[pos])
                            .to_bits(),
                        "the queue order is stale"
                    );
                    let rate = at.rate;
                    if !rate.is_nan() {
                        let own = lower_bound_behind_s(wait, client, rate, work);
                        servers.push(Reverse(Next(own, pos)));
                    }
                    if let Some((f, next)) = b.tiers.nth_in_free_order(t, walked[t]) {
                        prefetch(&class.at[next]);
                        *head = Reverse(Next(tier_bound(t, f), t));
                    } else {
                        PeekMut::pop(head);
                    }
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
