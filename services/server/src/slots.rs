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
//! The order itself (who holds a slot, who starts next) is `gridwise_server_core::SlotQueue`'s;
//! this file keeps it under a lock and runs the work on the slots' threads.

use gridwise_server_core::{Place, SlotQueue};
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

struct State {
    queue: SlotQueue<Job>,
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

impl Slots {
    /// `total` slots (at least one), each with its own thread.
    pub fn new(total: usize, server: &str) -> std::io::Result<Self> {
        let total = total.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: SlotQueue::new(total),
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
        let place = self.shared.lock().queue.enter();
        Ticket {
            shared: self.shared.clone(),
            place,
        }
    }

    /// Calls running and calls waiting (for a slot, or holding one for their inputs), now.
    pub fn occupancy(&self) -> (usize, usize) {
        self.shared.lock().queue.occupancy()
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
    place: Place,
}

impl Ticket {
    /// Hands in the call's work: a slot thread runs it once the call holds a slot.
    pub fn submit(&self, job: Job) {
        let mut st = self.shared.lock();
        let ready = st.queue.submit(self.place, job);
        drop(st);
        match ready {
            Ok(true) => self.shared.wake(1),
            Ok(false) => {}
            // Work dropped outside the lock: its captures may do anything when dropped.
            Err(job) => drop(job),
        }
    }

    /// Runs the call on the caller's own thread, if it holds a slot now: for work too short
    /// to be worth a hand-over to a slot thread. The slot is given back when the returned
    /// guard drops.
    pub fn try_inline(&self) -> Option<InlineSlot> {
        self.shared
            .lock()
            .queue
            .start_inline(self.place)
            .then(|| InlineSlot {
                shared: self.shared.clone(),
            })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let left = self.shared.lock().queue.leave(self.place);
        // Started (or run inline): its slot comes back when it ends.
        let Some((job, ready)) = left else { return };
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
        let ready = self.shared.lock().queue.finish();
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
        if let Some(job) = st.queue.take_ready() {
            drop(st);
            // A panic must not take the thread and its slot with it.
            let _ = catch_unwind(AssertUnwindSafe(job));
            st = shared.lock();
            // This thread takes one of the calls now ready itself.
            let ready = st.queue.finish();
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
