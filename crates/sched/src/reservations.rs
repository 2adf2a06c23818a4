//! Reservations: every call the agent placed and has not heard back about, single calls and
//! graph calls alike. One ticket per call, pending on one server's queue until the call is
//! reported, its holder gives it back, its server goes away, or it expires.
//!
//! The queues are what the next decision's queue wait is computed from, so everything that
//! adds or removes a reservation goes through here and the queue and the ticket index never
//! disagree.

use crate::queue::{Assignment, ServerQueue, TicketIndex};
use gridwise_proto::Ticket;
use std::time::Duration;

/// Pending assignments by ticket and by server (registry slot).
#[derive(Clone, Debug, Default)]
pub struct Reservations {
    index: TicketIndex,
    queues: Vec<ServerQueue>,
    /// Slots whose queue changed since [`take_touched`](Self::take_touched) last ran, each
    /// once (`is_touched`): what ranking's index by queue must bring up to date.
    touched: Vec<usize>,
    is_touched: Vec<bool>,
}

static EMPTY: ServerQueue = ServerQueue::new();

impl Reservations {
    /// Records `a` on server `slot`'s queue; only `holder` (a keyed identity) may give it back
    /// by [`release_by`](Self::release_by), anyone when `None`.
    pub fn add(&mut self, slot: usize, a: Assignment, holder: Option<u64>) {
        if self.queues.len() <= slot {
            self.queues.resize_with(slot + 1, ServerQueue::default);
        }
        self.queues[slot].push(a);
        self.touch(slot);
        self.index.insert(a.ticket, slot, a.assigned_at, holder);
    }

    fn touch(&mut self, slot: usize) {
        if self.is_touched.len() <= slot {
            self.is_touched.resize(slot + 1, false);
        }
        if !self.is_touched[slot] {
            self.is_touched[slot] = true;
            self.touched.push(slot);
        }
    }

    /// Puts in `out` (emptied first) the slots whose queue changed since the last call, each
    /// once; `out`'s buffer is kept for the next changes.
    pub fn take_touched(&mut self, out: &mut Vec<usize>) {
        for &s in &self.touched {
            self.is_touched[s] = false;
        }
        out.clear();
        std::mem::swap(out, &mut self.touched);
    }

    /// Makes room for `more` reservations at once (a graph's).
    pub fn reserve(&mut self, more: usize) {
        self.index.reserve(more);
    }

    /// Removes `ticket` wherever it is pending; false if it was not.
    pub fn release(&mut self, ticket: Ticket) -> bool {
        self.take(ticket).is_some()
    }

    /// Removes `ticket` wherever it is pending, returning what was assumed of it.
    pub fn take(&mut self, ticket: Ticket) -> Option<Assignment> {
        self.take_from(ticket).map(|(_, a)| a)
    }

    /// [`take`](Self::take), with the server slot it was pending on.
    pub fn take_from(&mut self, ticket: Ticket) -> Option<(usize, Assignment)> {
        let slot = self.index.remove(ticket)?;
        self.touch(slot);
        self.queues[slot].remove(ticket).map(|a| (slot, a))
    }

    /// The call of `ticket` went to server `to` instead of where it was assigned: its
    /// assignment moves to `to`'s queue, as it was predicted (a queue entry roughly right
    /// beats one on a server that will never run the call). False if it was not pending.
    pub fn move_to(&mut self, ticket: Ticket, to: usize) -> bool {
        let Some(from) = self.index.move_to(ticket, to) else {
            return false;
        };
        if from == to {
            return true;
        }
        let Some(a) = self.queues.get_mut(from).and_then(|q| q.remove(ticket)) else {
            return true;
        };
        if self.queues.len() <= to {
            self.queues.resize_with(to + 1, ServerQueue::default);
        }
        self.queues[to].push(a);
        self.touch(from);
        self.touch(to);
        true
    }

    /// Whether `ticket` is pending and held by `who` (or by nobody).
    pub fn is_held_by(&self, ticket: Ticket, who: u64) -> bool {
        self.index.held_by(ticket, who)
    }

    /// [`release`](Self::release) if `who` holds `ticket` (or nobody does).
    pub fn release_by(&mut self, ticket: Ticket, who: u64) -> bool {
        self.index.held_by(ticket, who) && self.release(ticket)
    }

    /// Whether `ticket` is pending.
    pub fn contains(&self, ticket: Ticket) -> bool {
        self.index.contains(ticket)
    }

    /// Drops everything pending on server `slot` (it restarted, went down or is forgotten:
    /// its queue died with it). Returns how many.
    pub fn drop_server(&mut self, slot: usize) -> usize {
        let Some(q) = self.queues.get_mut(slot) else {
            return 0;
        };
        let dropped = q.clear();
        for a in &dropped {
            self.index.remove(a.ticket);
        }
        self.touch(slot);
        dropped.len()
    }

    /// The registry moved the server in slot `from` to slot `to` (whose reservations were
    /// dropped first): its reservations follow it.
    pub fn move_server(&mut self, from: usize, to: usize) {
        if from == to || from >= self.queues.len() {
            return;
        }
        let q = std::mem::take(&mut self.queues[from]);
        debug_assert!(self.queues.get(to).is_none_or(ServerQueue::is_empty));
        if self.queues.len() <= to {
            self.queues.resize_with(to + 1, ServerQueue::default);
        }
        self.queues[to] = q;
        self.index.renumber(from, to);
        self.touch(from);
        self.touch(to);
    }

    /// Drops the reservations made more than `ttl` before `now` (their calls were never
    /// reported: the client died, or gave up without saying so). Returns how many.
    pub fn expire(&mut self, now: Duration, ttl: Duration) -> usize {
        let old = self.index.expire(now, ttl);
        for &(t, slot) in &old {
            self.queues[slot].remove(t);
            self.touch(slot);
        }
        old.len()
    }

    /// Takes `ticket` off server `slot`'s queue while keeping its ticket (holder, age), so that
    /// it can be predicted again against the rest of the queue and [put back](Self::requeue).
    /// `None` if it is not pending on `slot`.
    pub fn lift(&mut self, slot: usize, ticket: Ticket) -> Option<Assignment> {
        if self.index.slot_of(ticket) != Some(slot) {
            return None;
        }
        let a = self.queues[slot].remove(ticket)?;
        self.touch(slot);
        Some(a)
    }

    /// Puts back on server `slot`'s queue an assignment [lifted](Self::lift) off it.
    pub fn requeue(&mut self, slot: usize, a: Assignment) {
        debug_assert_eq!(self.index.slot_of(a.ticket), Some(slot));
        self.queues[slot].push(a);
        self.touch(slot);
    }

    /// Server `slot`'s pending assignments; an empty queue for a slot that never had one.
    pub fn queue(&self, slot: usize) -> &ServerQueue {
        self.queues.get(slot).unwrap_or(&EMPTY)
    }

    /// How many reservations are pending over all servers.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(ticket: u64, at: u64, finish_s: f64) -> Assignment {
        Assignment {
            ticket: Ticket(ticket),
            assigned_at: Duration::from_secs(at),
            compute_s: 1.0,
            finish_s,
            finish_sd_s: 0.0,
        }
    }

    #[test]
    fn queues_and_tickets_move_together() {
        let mut r = Reservations::default();
        let (alice, bob) = (Some(1), Some(2));
        r.add(0, a(1, 0, 5.0), alice);
        r.add(2, a(2, 0, 3.0), bob);
        r.add(2, a(3, 1, 4.0), None);
        assert_eq!((r.len(), r.queue(2).len(), r.queue(1).len()), (3, 2, 0));
        assert!(
            !r.release_by(Ticket(1), 2),
            "bob may not give back alice's call"
        );
        assert!(r.release_by(Ticket(1), 1));
        assert!(r.queue(0).is_empty() && !r.contains(Ticket(1)));
        assert!(
            r.release_by(Ticket(3), 2),
            "a ticket nobody holds anyone may give back"
        );
        // Server 2 is forgotten and the last server (slot 3) takes its place.
        r.add(3, a(4, 1, 9.0), None);
        assert_eq!(r.drop_server(2), 1);
        assert!(!r.contains(Ticket(2)));
        r.move_server(3, 2);
        assert_eq!(r.queue(2).iter().next().map(|x| x.ticket), Some(Ticket(4)));
        assert!(r.queue(3).is_empty());
        assert!(r.release(Ticket(4)) && r.queue(2).is_empty() && r.is_empty());
    }

    #[test]
    fn a_reservation_follows_its_call_to_the_server_it_went_to() {
        let mut r = Reservations::default();
        let mut touched = Vec::new();
        r.take_touched(&mut touched);
        r.add(0, a(1, 0, 5.0), Some(1));
        r.take_touched(&mut touched);
        assert!(r.move_to(Ticket(1), 3));
        assert!(r.queue(0).is_empty(), "nothing left where it never ran");
        assert_eq!(r.queue(3).iter().next().map(|x| x.ticket), Some(Ticket(1)));
        r.take_touched(&mut touched);
        touched.sort_unstable();
        assert_eq!(
            touched,
            [0, 3],
            "both queues' orders are brought up to date"
        );
        // Still held by its client, and found wherever it is when the call is reported.
        assert!(r.is_held_by(Ticket(1), 1) && !r.is_held_by(Ticket(1), 2));
        assert_eq!(r.take_from(Ticket(1)).map(|(slot, _)| slot), Some(3));
        assert!(!r.move_to(Ticket(1), 0), "a reported call moves nowhere");
        assert!(r.is_empty() && r.queue(0).is_empty());
    }

    #[test]
    fn expiry_empties_the_queues_too() {
        let mut r = Reservations::default();
        r.add(0, a(1, 0, 100.0), None);
        r.add(0, a(2, 50, 100.0), None);
        assert_eq!(
            r.expire(Duration::from_secs(70), Duration::from_secs(60)),
            1
        );
        assert_eq!(r.queue(0).len(), 1);
        assert!(r.contains(Ticket(2)));
        assert_eq!(r.drop_server(7), 0, "an unknown server holds nothing");
    }
}
