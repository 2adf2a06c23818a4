//! The order a server's calls take its slots, on values: a call takes its place on arrival,
//! holds a slot (at most `total` at once) while its remote inputs are pulled, and starts once
//! its work is handed in; slots go to waiting calls in arrival order, as a fair semaphore's
//! permits would. On a one-slot server calls therefore run in the order they arrived,
//! whatever order their inputs come in: a task graph's plan assumes each server runs its
//! calls in the order they were sent.
//!
//! The daemon's `slots.rs` keeps this under a lock and runs the work on one thread per slot;
//! every answer that wakes a thread says how many calls became ready.

use std::collections::VecDeque;

/// Every slot is free, held by a call that has not started, or running one:
/// `free + holding + running` is the number of slots. `J` is the work a call hands in.
#[derive(Debug)]
pub struct SlotQueue<J> {
    free: usize,
    /// Calls waiting for a slot, by place (increasing), first come first; `None` until the
    /// call's work is handed in.
    queue: VecDeque<(u64, Option<J>)>,
    /// Calls holding a slot that have not started: waiting for their inputs (`None`) or for a
    /// slot thread to take their work.
    holding: Vec<(u64, Option<J>)>,
    /// Calls running, on a slot's thread or inline.
    running: usize,
    next_place: u64,
}

/// A call's place in the queue, in arrival order.
pub type Place = u64;

impl<J> SlotQueue<J> {
    /// `total` slots, at least one.
    pub fn new(total: usize) -> Self {
        let total = total.max(1);
        SlotQueue {
            free: total,
            queue: VecDeque::new(),
            holding: Vec::with_capacity(total),
            running: 0,
            next_place: 0,
        }
    }

    /// A place for a call that just arrived (a slot at once if one is free, and none waits).
    pub fn enter(&mut self) -> Place {
        let id = self.next_place;
        self.next_place += 1;
        self.queue.push_back((id, None));
        self.grant();
        id
    }

    /// Hands in the work of the call at `place`; whether it can start now (it holds a slot).
    /// Work for a place that left, or already started, is given back.
    pub fn submit(&mut self, place: Place, job: J) -> Result<bool, J> {
        if let Some(i) = self.holding_at(place) {
            self.holding[i].1 = Some(job);
            Ok(true)
        } else if let Some(i) = self.queued_at(place) {
            self.queue[i].1 = Some(job);
            Ok(false)
        } else {
            Err(job)
        }
    }

    /// Starts the call at `place` on the caller's own thread, if it holds a slot now (its
    /// work, if handed in, is the caller's to drop): for work too short to be worth a
    /// hand-over. The slot comes back with [`finish`](Self::finish).
    pub fn start_inline(&mut self, place: Place) -> bool {
        let Some(i) = self.holding_at(place) else {
            return false;
        };
        self.holding.remove(i);
        self.running += 1;
        true
    }

    /// The call at `place` leaves before it started: its place or its slot is given up.
    /// Returns its work (to be dropped unrun) and how many calls are ready to start with the
    /// slot it gave back; `None` when it had started (its slot comes back when it ends).
    pub fn leave(&mut self, place: Place) -> Option<(Option<J>, usize)> {
        if let Some(i) = self.holding_at(place) {
            let (_, job) = self.holding.remove(i);
            self.free += 1;
            Some((job, self.grant()))
        } else {
            self.queued_at(place)
                .map(|i| (self.queue.remove(i).and_then(|(_, job)| job), 0))
        }
    }

    /// The work of the earliest call that holds a slot and is ready, now running.
    pub fn take_ready(&mut self) -> Option<J> {
        let i = self.holding.iter().position(|(_, job)| job.is_some())?;
        let (_, job) = self.holding.remove(i);
        self.running += 1;
        job
    }

    /// A running call ended and gave its slot back; how many calls are ready to start now.
    pub fn finish(&mut self) -> usize {
        self.running = self.running.saturating_sub(1);
        self.free += 1;
        self.grant()
    }

    /// Calls running, and calls waiting (for a slot, or holding one for their inputs).
    pub fn occupancy(&self) -> (usize, usize) {
        (self.running, self.queue.len() + self.holding.len())
    }

    /// Gives the free slots to the calls at the head of the queue; how many of those are
    /// ready to start.
    fn grant(&mut self) -> usize {
        let mut ready = 0;
        while self.free > 0 {
            let Some(call) = self.queue.pop_front() else {
                break;
            };
            self.free -= 1;
            ready += usize::from(call.1.is_some());
            self.holding.push(call);
        }
        ready
    }

    fn queued_at(&self, place: Place) -> Option<usize> {
        self.queue.binary_search_by_key(&place, |(t, _)| *t).ok()
    }

    fn holding_at(&self, place: Place) -> Option<usize> {
        self.holding.iter().position(|(t, _)| *t == place)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_starts_only_when_it_holds_a_slot_and_its_work_is_in() {
        let mut q = SlotQueue::new(1);
        let a = q.enter();
        let b = q.enter();
        // b is ready but a came first and holds the only slot: nothing starts.
        assert_eq!(q.submit(b, "b"), Ok(false));
        assert_eq!(q.take_ready(), None);
        assert_eq!(q.occupancy(), (0, 2));
        assert_eq!(q.submit(a, "a"), Ok(true));
        assert_eq!(q.take_ready(), Some("a"));
        assert_eq!(q.take_ready(), None);
        // a ends: b, ready, takes the slot.
        assert_eq!(q.finish(), 1);
        assert_eq!(q.take_ready(), Some("b"));
        assert_eq!(q.occupancy(), (1, 0));
    }

    #[test]
    fn no_more_calls_hold_slots_than_there_are() {
        let mut q = SlotQueue::new(2);
        let places: Vec<Place> = (0..3).map(|_| q.enter()).collect();
        let ready: Vec<bool> = places.iter().map(|&p| q.submit(p, p).unwrap()).collect();
        assert_eq!(ready, [true, true, false]);
        assert_eq!(
            (q.take_ready(), q.take_ready(), q.take_ready()),
            (Some(0), Some(1), None)
        );
        assert_eq!(q.occupancy(), (2, 1));
        assert_eq!(q.finish(), 1);
        assert_eq!(q.take_ready(), Some(2));
    }

    #[test]
    fn a_call_waiting_for_its_inputs_holds_one_slot_and_the_next_uses_another() {
        let mut q = SlotQueue::new(2);
        let pulling = q.enter();
        let ready = q.enter();
        assert_eq!(q.submit(ready, "ready"), Ok(true));
        assert_eq!(q.take_ready(), Some("ready"));
        assert_eq!(q.leave(pulling), Some((None, 0)));
        assert_eq!(q.occupancy(), (1, 0));
    }

    #[test]
    fn leaving_gives_the_place_or_the_slot_up_and_returns_the_work_unrun() {
        let mut q = SlotQueue::new(1);
        let first = q.enter();
        let gone = q.enter();
        let next = q.enter();
        assert_eq!(q.submit(gone, "gone"), Ok(false));
        assert_eq!(q.submit(next, "next"), Ok(false));
        // A queued call leaves: its work comes back, nothing is freed.
        assert_eq!(q.leave(gone), Some((Some("gone"), 0)));
        // The slot's holder leaves: the next, ready, takes the slot.
        assert_eq!(q.leave(first), Some((None, 1)));
        assert_eq!(q.take_ready(), Some("next"));
        // Started calls do not leave; their slot comes back with `finish`.
        assert_eq!(q.leave(next), None);
        assert_eq!(q.submit(gone, "late"), Err("late"));
    }

    #[test]
    fn only_a_call_holding_a_slot_may_run_inline() {
        let mut q: SlotQueue<()> = SlotQueue::new(1);
        let a = q.enter();
        let b = q.enter();
        assert!(!q.start_inline(b));
        assert!(q.start_inline(a));
        assert_eq!(q.occupancy(), (1, 1));
        assert!(!q.start_inline(b), "the slot is taken");
        assert_eq!(q.finish(), 0);
        assert!(q.start_inline(b));
    }

    #[test]
    fn at_least_one_slot() {
        let mut q = SlotQueue::new(0);
        let a = q.enter();
        assert_eq!(q.submit(a, ()), Ok(true));
    }
}
