//! A server's slots: one thread per slot runs the calls admitted here, one at a time each.
//!
//! A call takes its place in the queue on arrival ([`Slots::enter`]), while its remote inputs
//! are still being pulled, and hands in its work once they are in ([`Ticket::submit`]). Slots
//! go to waiting calls in arrival order, as a fair semaphore's permits would: a call holds its
//! slot while it waits for its inputs, and a call behind it takes another slot if there is
//! one. A slot thread that finishes a call starts the next ready one itself: on a busy server
//! consecutive calls start back to back. With a semaphore and the runtime's blocking pool,
//! every call waited for the async runtime to wake up, pass the permit on and hand the kernel
//! to a blocking thread that had gone to sleep: 0.16 ms between consecutive calls on the
//! 2-core VM, 12 ms along the critical chain of `bench schedule`'s tiled Cholesky.
//!
//! On a one-slot server calls therefore run in the order they arrived, whatever order their
//! inputs come in: a task graph's plan assumes each server runs its calls in the order they
//! were sent.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Work handed to a slot: it runs on the slot's thread (a panic is caught there and frees the
/// slot, but the caller should catch its own: kernels are run under `catch_unwind`).
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// The slots of one server and the calls waiting for them.
pub struct Slots {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// Every slot is free, held by a call that has not started, or running one:
/// `free + holding.len() + running` is the number of slots.
struct State {
    free: usize,
    /// Calls waiting for a slot, by ticket (increasing), first come first; `None` until the
    /// call's work is handed in.
    queue: VecDeque<(u64, Option<Job>)>,
    /// Calls holding a slot that have not started: waiting for their inputs (`None`) or for a
    /// slot thread to take their work.
    holding: Vec<(u64, Option<Job>)>,
    /// Calls running, on a slot's thread or inline.
    running: usize,
    next_ticket: u64,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes idle slot threads for `ready` calls that can start. Threads are woken only
    /// then: an instant call giving its slot back must not wake every idle thread (tens of
    /// thousands of calls a second).
    fn wake(&self, ready: usize) {
        match ready {
            0 => {}
            1 => self.changed.notify_one(),
            _ => self.changed.notify_all(),
        }
    }
}

impl State {
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

    /// The work of the earliest call that holds a slot and is ready, now running.
    fn take_ready(&mut self) -> Option<Job> {
        let i = self.holding.iter().position(|(_, job)| job.is_some())?;
        let (_, job) = self.holding.remove(i);
        self.running += 1;
        job
    }

    /// Gives back a running call's slot; how many calls are ready to start with it.
    fn finish(&mut self) -> usize {
        self.running -= 1;
        self.free += 1;
        self.grant()
    }

    fn queued_at(&self, id: u64) -> Option<usize> {
        self.queue.binary_search_by_key(&id, |(t, _)| *t).ok()
    }

    fn holding_at(&self, id: u64) -> Option<usize> {
        self.holding.iter().position(|(t, _)| *t == id)
    }
}

impl Slots {
    /// `total` slots (at least one), each with its own thread.
    pub fn new(total: usize, server: &str) -> std::io::Result<Self> {
        let total = total.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                free: total,
                queue: VecDeque::new(),
                holding: Vec::with_capacity(total),
                running: 0,
                next_ticket: 0,
                closed: false,
            }),
            changed: Condvar::new(),
        });
        let slots = Self { shared };
        for i in 0..total {
            let s = slots.shared.clone();
            // On failure `slots` drops here, which stops the threads already started.
            std::thread::Builder::new()
                .name(format!("{server}-slot-{i}"))
                .spawn(move || run_slot(&s))?;
        }
        Ok(slots)
    }

    /// A place in the queue for a call that just arrived (a slot at once if one is free).
    /// Dropping the ticket before its work started gives its place or its slot up; its
    /// work, if handed in, is dropped unrun.
    pub fn enter(&self) -> Ticket {
        let mut st = self.shared.lock();
        let id = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push_back((id, None));
        st.grant();
        Ticket {
            shared: self.shared.clone(),
            id,
        }
    }

    /// Calls running and calls waiting (for a slot, or holding one for their inputs), now.
    pub fn occupancy(&self) -> (usize, usize) {
        let st = self.shared.lock();
        (st.running, st.queue.len() + st.holding.len())
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_all();
    }
}

/// A call's place in the queue.
pub struct Ticket {
    shared: Arc<Shared>,
    id: u64,
}

impl Ticket {
    /// Hands in the call's work: a slot thread runs it once the call holds a slot.
    pub fn submit(&self, job: Job) {
        let mut st = self.shared.lock();
        if let Some(i) = st.holding_at(self.id) {
            st.holding[i].1 = Some(job);
            drop(st);
            self.shared.wake(1);
        } else if let Some(i) = st.queued_at(self.id) {
            st.queue[i].1 = Some(job);
        }
    }

    /// Runs the call on the caller's own thread, if it holds a slot now: for work too short
    /// to be worth a hand-over to a slot thread. The slot is given back when the returned
    /// guard drops.
    pub fn try_inline(&self) -> Option<InlineSlot> {
        let mut st = self.shared.lock();
        let i = st.holding_at(self.id)?;
        st.holding.remove(i);
        st.running += 1;
        Some(InlineSlot {
            shared: self.shared.clone(),
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        let (job, ready) = if let Some(i) = st.holding_at(self.id) {
            let (_, job) = st.holding.remove(i);
            st.free += 1;
            (job, st.grant())
        } else if let Some(i) = st.queued_at(self.id) {
            (st.queue.remove(i).and_then(|(_, job)| job), 0)
        } else {
            // Started (or run inline): its slot comes back when it ends.
            return;
        };
        drop(st);
        // Work dropped outside the lock: its captures may do anything when dropped.
        drop(job);
        self.shared.wake(ready);
    }
}

/// A slot held by the calling thread; given back on drop.
pub struct InlineSlot {
    shared: Arc<Shared>,
}

impl Drop for InlineSlot {
    fn drop(&mut self) {
        let ready = self.shared.lock().finish();
        self.shared.wake(ready);
    }
}

/// A slot's thread: runs the ready calls that hold slots.
fn run_slot(shared: &Shared) {
    let mut st = shared.lock();
    loop {
        if st.closed {
            return;
        }
        if let Some(job) = st.take_ready() {
            drop(st);
            // A panic must not take the thread and its slot with it.
            let _ = catch_unwind(AssertUnwindSafe(job));
            st = shared.lock();
            // This thread takes one of the calls now ready itself.
            let ready = st.finish();
            shared.wake(ready.saturating_sub(1));
            continue;
        }
        st = shared.changed.wait(st).unwrap_or_else(|p| p.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    const WAIT: Duration = Duration::from_secs(5);

    /// Work that says it started (its number on `started`), then waits for the gate to
    /// open (a message on the gate's channel, or the channel closed).
    fn gated(
        i: usize,
        started: &mpsc::Sender<usize>,
        gate: &Arc<Mutex<mpsc::Receiver<()>>>,
    ) -> Job {
        let (started, gate) = (started.clone(), gate.clone());
        Box::new(move || {
            started.send(i).unwrap();
            let _ = gate.lock().unwrap().recv();
        })
    }

    #[test]
    fn calls_run_in_arrival_order_even_when_a_later_one_is_ready_first() {
        let slots = Slots::new(1, "t").unwrap();
        let (tx, rx) = mpsc::channel();
        let a = slots.enter();
        let b = slots.enter();
        let tb = tx.clone();
        b.submit(Box::new(move || tb.send("b").unwrap()));
        // b is ready but a is first: nothing runs until a's work is in.
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        assert_eq!(slots.occupancy(), (0, 2));
        a.submit(Box::new(move || tx.send("a").unwrap()));
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), "a");
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), "b");
    }

    #[test]
    fn a_call_leaving_the_queue_lets_the_next_one_go() {
        let slots = Slots::new(1, "t").unwrap();
        let (tx, rx) = mpsc::channel();
        let a = slots.enter();
        let b = slots.enter();
        b.submit(Box::new(move || tx.send("b").unwrap()));
        drop(a);
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), "b");
    }

    #[test]
    fn work_dropped_with_its_ticket_never_runs() {
        let slots = Slots::new(1, "t").unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        let first = slots.enter();
        let gone = slots.enter();
        gone.submit(Box::new(move || tx.send(()).unwrap()));
        drop(gone);
        drop(first);
        // The sender was dropped with the work, unsent.
        assert_eq!(
            rx.recv_timeout(WAIT),
            Err(mpsc::RecvTimeoutError::Disconnected)
        );
        assert_eq!(slots.occupancy(), (0, 0));
    }

    #[test]
    fn no_more_calls_run_at_once_than_there_are_slots() {
        let slots = Slots::new(2, "t").unwrap();
        let (started, seen) = mpsc::channel();
        let (release, gate) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let tickets: Vec<Ticket> = (0..3).map(|_| slots.enter()).collect();
        for (i, t) in tickets.iter().enumerate() {
            t.submit(gated(i, &started, &gate));
        }
        let mut first: Vec<usize> = (0..2).map(|_| seen.recv_timeout(WAIT).unwrap()).collect();
        first.sort_unstable();
        assert_eq!(first, [0, 1]);
        assert!(seen.recv_timeout(Duration::from_millis(50)).is_err());
        assert_eq!(slots.occupancy(), (2, 1));
        release.send(()).unwrap();
        assert_eq!(seen.recv_timeout(WAIT).unwrap(), 2);
        release.send(()).unwrap();
        release.send(()).unwrap();
    }

    #[test]
    fn calls_ready_at_once_start_on_every_idle_slot() {
        let slots = Slots::new(3, "t").unwrap();
        // Let every slot's thread go to sleep first.
        std::thread::sleep(Duration::from_millis(50));
        let (started, seen) = mpsc::channel();
        let (release, gate) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let tickets: Vec<Ticket> = (0..3).map(|_| slots.enter()).collect();
        // Each holds a slot from its arrival, and each handing in its work must wake a thread
        // of its own (last first: no later call's arrival may do it for an earlier one).
        for (i, t) in tickets.iter().enumerate().rev() {
            t.submit(gated(i, &started, &gate));
        }
        let mut all: Vec<usize> = (0..3).map(|_| seen.recv_timeout(WAIT).unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, [0, 1, 2]);
        drop(release);
    }

    #[test]
    fn a_call_waiting_for_its_inputs_holds_one_slot_not_all() {
        let slots = Slots::new(2, "t").unwrap();
        let (tx, rx) = mpsc::channel();
        // The first call holds a slot while its inputs are pulled (no work yet) ...
        let pulling = slots.enter();
        let ready = slots.enter();
        ready.submit(Box::new(move || tx.send(()).unwrap()));
        // ... and the next one runs on the other slot meanwhile.
        rx.recv_timeout(WAIT).unwrap();
        drop(pulling);
    }

    #[test]
    fn work_that_panics_gives_its_slot_back() {
        let slots = Slots::new(1, "t").unwrap();
        let boom = slots.enter();
        let next = slots.enter();
        boom.submit(Box::new(|| panic!("the work panicked")));
        let (tx, rx) = mpsc::channel();
        next.submit(Box::new(move || tx.send(()).unwrap()));
        rx.recv_timeout(WAIT).unwrap();
    }

    #[test]
    fn only_a_call_holding_a_slot_may_run_inline() {
        let slots = Slots::new(1, "t").unwrap();
        let a = slots.enter();
        let b = slots.enter();
        assert!(b.try_inline().is_none());
        let held = a.try_inline().expect("a holds the slot");
        assert_eq!(slots.occupancy(), (1, 1));
        // The slot is taken: b still waits for it.
        assert!(b.try_inline().is_none());
        let (tx, rx) = mpsc::channel();
        b.submit(Box::new(move || tx.send(()).unwrap()));
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        drop(held);
        rx.recv_timeout(WAIT).unwrap();
    }
}
