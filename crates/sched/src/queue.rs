//! Pending assignments: the agent's view of every server's queue.
//!
//! Each ranked call is an assignment to the first candidate until the call is reported, released
//! or expires. The queue wait of a new call follows from the predicted finish times of a server's
//! pending assignments and its slot count.

use gridwise_predict::Stoch;
use gridwise_proto::Ticket;
use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// One ranked call, not yet reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Assignment {
    /// As the core issues them: never 0 and unique among pending assignments, so reports and
    /// releases find the assignment by it.
    pub ticket: Ticket,
    /// When it was ranked (time since the agent started).
    pub assigned_at: Duration,
    /// Predicted kernel time, seconds.
    pub compute_s: f64,
    /// Predicted completion, seconds since the agent started.
    pub finish_s: f64,
    /// The standard deviation of the predicted completion.
    pub finish_sd_s: f64,
}

/// The wait for a slot on a server with `slots` slots, given the remaining times of the calls
/// already assigned to it: with `k` positive remaining times, 0 if `k < slots`, else the
/// `(k - slots + 1)`-th smallest (the earliest moment a slot frees up).
///
/// This is the reference definition; [`ServerQueue::wait_s`] computes the same without
/// allocating.
pub fn queue_wait(remaining: &[f64], slots: u32) -> f64 {
    let slots = slots.max(1) as usize;
    let mut positive: Vec<f64> = remaining.iter().copied().filter(|r| *r > 0.0).collect();
    if positive.len() < slots {
        return 0.0;
    }
    positive.sort_by(f64::total_cmp);
    positive[positive.len() - slots]
}

/// The wait at `now` for a slot that frees at `frees_at_s` ([`ServerQueue::frees_at_s`]):
/// never negative, and no smaller for a later `frees_at_s`.
pub fn wait_until(frees_at_s: f64, now: Duration) -> f64 {
    let now_s = now.as_secs_f64();
    if frees_at_s > now_s {
        frees_at_s - now_s
    } else {
        0.0
    }
}

/// One server's pending assignments, kept sorted by predicted finish so the queue wait is a
/// binary search rather than a sort per decision.
#[derive(Clone, Debug, Default)]
pub struct ServerQueue {
    by_finish: Vec<Assignment>,
}

impl ServerQueue {
    /// `const` so that one empty queue can be a `static`, lent for servers that have none.
    pub const fn new() -> Self {
        ServerQueue {
            by_finish: Vec::new(),
        }
    }

    /// Inserts after every assignment finishing no later, so equal finishes keep arrival order.
    pub fn push(&mut self, a: Assignment) {
        let at = self
            .by_finish
            .partition_point(|b| b.finish_s.total_cmp(&a.finish_s) != Ordering::Greater);
        self.by_finish.insert(at, a);
    }

    /// Removes the assignment with `ticket`, if pending here.
    pub fn remove(&mut self, ticket: Ticket) -> Option<Assignment> {
        let at = self.by_finish.iter().position(|a| a.ticket == ticket)?;
        Some(self.by_finish.remove(at))
    }

    /// Removes every assignment (the server went down or restarted), returning them.
    pub fn clear(&mut self) -> Vec<Assignment> {
        std::mem::take(&mut self.by_finish)
    }

    /// How many assignments are pending.
    pub fn len(&self) -> usize {
        self.by_finish.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_finish.is_empty()
    }

    /// The pending assignments, earliest predicted finish first.
    pub fn iter(&self) -> impl Iterator<Item = &Assignment> {
        self.by_finish.iter()
    }

    /// The wait for a slot for a call ranked at `now`, as [`queue_wait`] defines it.
    pub fn wait_s(&self, now: Duration, slots: u32) -> f64 {
        wait_until(self.frees_at_s(slots), now)
    }

    /// When a slot frees, seconds since the agent started: the `slots`-th latest predicted
    /// finish, or −∞ with fewer pending than slots. It does not depend on the time of the
    /// decision, so servers can be kept in its order between decisions; the wait at `now` is
    /// [`wait_until`] it.
    pub fn frees_at_s(&self, slots: u32) -> f64 {
        let slots = slots.max(1) as usize;
        // The positive remaining times are a suffix, already sorted: there are `slots` or more
        // exactly when the `slots`-th latest finish is still ahead.
        self.by_finish
            .len()
            .checked_sub(slots)
            .map_or(f64::NEG_INFINITY, |i| self.by_finish[i].finish_s)
    }

    /// [`wait_s`](Self::wait_s) with the spread of the finish that frees the slot.
    pub fn wait(&self, now: Duration, slots: u32) -> Stoch {
        let mean = self.wait_s(now, slots);
        if mean <= 0.0 {
            return Stoch::point(0.0);
        }
        let n = self.by_finish.len();
        Stoch::new(mean, self.by_finish[n - slots.max(1) as usize].finish_sd_s)
    }
}

impl ServerQueue {
    /// When each of `slots` slots frees from the pending assignments, seconds after `now`:
    /// the `slots` latest predicted finishes still ahead, largest last, the rest 0. The
    /// earliest of them is [`wait_s`](Self::wait_s).
    pub fn free_in_s(&self, now: Duration, slots: u32) -> Vec<f64> {
        let now_s = now.as_secs_f64();
        let slots = slots.max(1) as usize;
        let ahead = &self.by_finish[self.by_finish.partition_point(|a| a.finish_s <= now_s)..];
        let busy = &ahead[ahead.len().saturating_sub(slots)..];
        let mut out = vec![0.0; slots - busy.len()];
        out.extend(busy.iter().map(|a| a.finish_s - now_s));
        out
    }
}

/// Where every pending ticket is, who holds it and when it was issued, so a report finds it on
/// whatever server it was assigned to, only its holder may give it back, and old tickets are
/// expired oldest first.
#[derive(Clone, Debug, Default)]
pub struct TicketIndex {
    pending: HashMap<Ticket, Pending, BuildTicketHasher>,
    // Issue order, for expiry. Tickets that left `pending` stay here until they reach the
    // front (or a compaction), so removal is O(1).
    order: VecDeque<(Duration, Ticket)>,
}

/// Tickets are already unguessable random numbers: hashing them again (SipHash, the default)
/// would only cost time on every call.
#[derive(Clone, Copy, Debug, Default)]
struct BuildTicketHasher;

#[derive(Default)]
struct TicketHasher(u64);

impl std::hash::Hasher for TicketHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ *b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 ^= x;
    }
}

impl std::hash::BuildHasher for BuildTicketHasher {
    type Hasher = TicketHasher;
    fn build_hasher(&self) -> TicketHasher {
        TicketHasher::default()
    }
}

#[derive(Clone, Debug)]
struct Pending {
    server: usize,
    /// A keyed hash of the holder's identity (compared, never shown; no allocation per call).
    holder: Option<u64>,
}

impl TicketIndex {
    /// Records `ticket` as pending on server slot `server`, held by `holder` (a key of the
    /// client that asked for it, if known).
    pub fn insert(
        &mut self,
        ticket: Ticket,
        server: usize,
        assigned_at: Duration,
        holder: Option<u64>,
    ) {
        self.pending.insert(ticket, Pending { server, holder });
        self.order.push_back((assigned_at, ticket));
        if self.order.len() > 2 * self.pending.len() + 1024 {
            let pending = &self.pending;
            self.order.retain(|(_, t)| pending.contains_key(t));
        }
    }

    /// Makes room for `more` tickets at once (a graph's), so the table grows once.
    pub fn reserve(&mut self, more: usize) {
        self.pending.reserve(more);
        self.order.reserve(more);
    }

    /// Forgets `ticket`, returning the server slot it was pending on.
    pub fn remove(&mut self, ticket: Ticket) -> Option<usize> {
        self.pending.remove(&ticket).map(|p| p.server)
    }

    /// Whether `ticket` is pending.
    pub fn contains(&self, ticket: Ticket) -> bool {
        self.pending.contains_key(&ticket)
    }

    /// The server slot `ticket` is pending on.
    pub fn slot_of(&self, ticket: Ticket) -> Option<usize> {
        self.pending.get(&ticket).map(|p| p.server)
    }

    /// Whether `who` may give `ticket` back: its holder, or anyone for a ticket without one.
    pub fn held_by(&self, ticket: Ticket, who: u64) -> bool {
        self.pending
            .get(&ticket)
            .is_some_and(|p| p.holder.is_none_or(|h| h == who))
    }

    /// Records that `ticket` is pending on slot `to` now, returning the slot it was on.
    pub fn move_to(&mut self, ticket: Ticket, to: usize) -> Option<usize> {
        let p = self.pending.get_mut(&ticket)?;
        Some(std::mem::replace(&mut p.server, to))
    }

    /// Moves the tickets pending on slot `from` to slot `to` (the registry moved a server).
    pub fn renumber(&mut self, from: usize, to: usize) {
        for p in self.pending.values_mut() {
            if p.server == from {
                p.server = to;
            }
        }
    }

    /// Removes and returns the tickets issued more than `ttl` before `now`, with their server slots.
    pub fn expire(&mut self, now: Duration, ttl: Duration) -> Vec<(Ticket, usize)> {
        let mut out = Vec::new();
        while let Some(&(at, t)) = self.order.front() {
            if now.saturating_sub(at) <= ttl {
                break;
            }
            self.order.pop_front();
            if let Some(p) = self.pending.remove(&t) {
                out.push((t, p.server));
            }
        }
        out
    }

    /// How many tickets are pending.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn queue(finishes: &[f64]) -> ServerQueue {
        let mut q = ServerQueue::default();
        for (i, f) in finishes.iter().enumerate() {
            q.push(Assignment {
                ticket: Ticket(i as u64),
                assigned_at: Duration::ZERO,
                compute_s: 1.0,
                finish_s: *f,
                finish_sd_s: 0.0,
            });
        }
        q
    }

    #[test]
    fn one_slot_waits_for_the_last_pending_call() {
        assert_eq!(queue_wait(&[], 1), 0.0);
        assert_eq!(queue_wait(&[2.0], 1), 2.0);
        assert_eq!(queue_wait(&[3.0, 1.0, 2.0], 1), 3.0);
        // Finished (or overdue) calls hold no slot.
        assert_eq!(queue_wait(&[0.0, -1.0], 1), 0.0);
        assert_eq!(queue_wait(&[0.0, 4.0], 1), 4.0);
    }

    #[test]
    fn two_slots_wait_for_the_earliest_free_slot() {
        assert_eq!(queue_wait(&[5.0], 2), 0.0);
        assert_eq!(queue_wait(&[5.0, 3.0], 2), 3.0);
        // Two running (1, 2), one queued behind them (3): a slot frees at 2.
        assert_eq!(queue_wait(&[1.0, 2.0, 3.0], 2), 2.0);
        assert_eq!(queue_wait(&[4.0, 1.0, 3.0, 2.0], 2), 3.0);
        assert_eq!(queue_wait(&[0.0, 7.0, 0.0], 2), 0.0);
    }

    #[test]
    fn zero_slots_count_as_one() {
        assert_eq!(queue_wait(&[2.0], 0), 2.0);
        assert_eq!(queue(&[2.0]).wait_s(Duration::ZERO, 0), 2.0);
    }

    #[test]
    fn server_queue_matches_reference_and_removes() {
        let mut q = queue(&[3.0, 1.0, 2.0]);
        let now = Duration::from_secs_f64(0.5);
        assert_eq!(q.wait_s(now, 1), 2.5);
        assert_eq!(q.wait_s(now, 2), 1.5);
        assert_eq!(q.wait_s(now, 3), 0.5);
        assert_eq!(q.wait_s(now, 4), 0.0);
        assert_eq!(q.wait_s(Duration::from_secs(5), 1), 0.0);
        assert!(q.remove(Ticket(0)).is_some());
        assert!(q.remove(Ticket(0)).is_none());
        assert_eq!(q.wait_s(now, 1), 1.5);
        assert_eq!(q.len(), 2);
        assert_eq!(q.clear().len(), 2);
        assert!(q.is_empty());
    }

    #[test]
    fn tickets_expire_oldest_first() {
        let mut t = TicketIndex::default();
        let (alice, bob) = (1, 2);
        t.insert(Ticket(10), 0, Duration::from_secs(1), None);
        t.insert(Ticket(2), 1, Duration::from_secs(5), Some(alice));
        t.insert(Ticket(3), 0, Duration::from_secs(9), Some(bob));
        assert!(t.held_by(Ticket(3), bob) && !t.held_by(Ticket(3), alice));
        assert!(t.held_by(Ticket(10), 99));
        assert!(!t.held_by(Ticket(99), bob));
        let ttl = Duration::from_secs(4);
        assert!(t.expire(Duration::from_secs(5), ttl).is_empty());
        assert_eq!(
            t.expire(Duration::from_secs(10), ttl),
            vec![(Ticket(10), 0), (Ticket(2), 1)]
        );
        assert_eq!(t.remove(Ticket(3)), Some(0));
        assert!(t.is_empty());
    }

    proptest! {
        #[test]
        fn wait_is_zero_below_slots_and_never_negative(
            remaining in prop::collection::vec(-10.0f64..10.0, 0..12),
            slots in 1u32..6,
        ) {
            let w = queue_wait(&remaining, slots);
            prop_assert!(w >= 0.0);
            if remaining.len() < slots as usize {
                prop_assert_eq!(w, 0.0);
            }
        }

        #[test]
        fn sorted_queue_agrees_with_reference(
            finishes in prop::collection::vec(0.0f64..20.0, 0..12),
            now in 0.0f64..20.0,
            slots in 1u32..6,
        ) {
            let q = queue(&finishes);
            let now_d = Duration::from_secs_f64(now);
            let now_s = now_d.as_secs_f64();
            let remaining: Vec<f64> = finishes.iter().map(|f| f - now_s).collect();
            let w = q.wait_s(now_d, slots);
            prop_assert!(w >= 0.0);
            prop_assert_eq!(w, queue_wait(&remaining, slots));
            // The slots' free times: one per slot, the earliest is the wait.
            let free = q.free_in_s(now_d, slots);
            prop_assert_eq!(free.len(), slots as usize);
            prop_assert!(free.iter().all(|f| *f >= 0.0));
            prop_assert_eq!(free.iter().copied().fold(f64::INFINITY, f64::min), w);
        }
    }
}
