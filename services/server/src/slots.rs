//! A server's slots: one thread per slot runs the calls admitted here, one at a time each, in
//! the order they arrived.
//!
//! A call takes its place in the queue on arrival ([`Slots::enter`]), while its remote inputs
//! are still being pulled, and hands in its work once they are in ([`Ticket::submit`]). A slot
//! thread that finishes a call takes the next one itself: on a busy server consecutive calls
//! start back to back. With a semaphore and the runtime's blocking pool, every call waited for
//! the async runtime to wake up, pass the permit on and hand the kernel to a blocking thread
//! that had gone to sleep: 0.16 ms between consecutive calls on the 2-core VM, 12 ms along the
//! critical chain of `bench schedule`'s tiled Cholesky.
//!
//! The head of the queue is served first even when a call behind it is ready: a task graph's
//! plan assumes each server runs its calls in the order they were sent.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Work handed to a slot: it runs on the slot's thread and must not panic (kernels are run
/// under `catch_unwind` by their caller).
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// The slots of one server and the calls waiting for them.
pub struct Slots {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    total: usize,
}

struct State {
    /// Slots no call holds.
    free: usize,
    /// Calls waiting, first come first; `None` until the call's work is handed in.
    queue: VecDeque<(u64, Option<Job>)>,
    next_ticket: u64,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    /// Whether an idle slot thread could start the head of the queue now. Threads are woken
    /// only then, one per freed slot or newly ready head: an instant call giving its slot back
    /// must not wake every idle thread (tens of thousands of calls a second).
    fn can_start(&self) -> bool {
        self.free > 0 && self.queue.front().is_some_and(|(_, job)| job.is_some())
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
                next_ticket: 0,
                closed: false,
            }),
            changed: Condvar::new(),
            total,
        });
        for i in 0..total {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(format!("{server}-slot-{i}"))
                .spawn(move || run_slot(&s))?;
        }
        Ok(Self { shared })
    }

    /// A place in the queue for a call that just arrived. Dropping the ticket before its work
    /// ran takes the call out of the queue (its work, if handed in, is dropped unrun).
    pub fn enter(&self) -> Ticket {
        let mut st = self.shared.lock();
        let id = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push_back((id, None));
        Ticket {
            shared: self.shared.clone(),
            id,
        }
    }

    /// Calls holding a slot and calls waiting for one, now.
    pub fn occupancy(&self) -> (usize, usize) {
        let st = self.shared.lock();
        (self.shared.total - st.free, st.queue.len())
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
    /// Hands in the call's work: a slot thread runs it once every call before it has started
    /// and a slot is free.
    pub fn submit(&self, job: Job) {
        let mut st = self.shared.lock();
        let Some(pos) = st.queue.iter().position(|(id, _)| *id == self.id) else {
            return;
        };
        st.queue[pos].1 = Some(job);
        if pos == 0 && st.can_start() {
            drop(st);
            self.shared.changed.notify_one();
        }
    }

    /// Takes a free slot for the caller's own thread, if this call is next and one is free:
    /// for work too short to be worth a hand-over to a slot thread. The slot is given back
    /// when the returned guard drops.
    pub fn try_inline(&self) -> Option<InlineSlot> {
        let mut st = self.shared.lock();
        if st.free == 0 || st.queue.front().is_none_or(|(id, _)| *id != self.id) {
            return None;
        }
        st.queue.pop_front();
        st.free -= 1;
        let wake = st.can_start();
        drop(st);
        if wake {
            // Another slot is free and the call behind is ready.
            self.shared.changed.notify_one();
        }
        Some(InlineSlot {
            shared: self.shared.clone(),
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if let Some(pos) = st.queue.iter().position(|(id, _)| *id == self.id) {
            let job = st.queue.remove(pos);
            // The call behind may be ready to go.
            let wake = pos == 0 && st.can_start();
            drop(st);
            // Work dropped outside the lock: its captures may do anything when dropped.
            drop(job);
            if wake {
                self.shared.changed.notify_one();
            }
        }
    }
}

/// A slot held by the calling thread; given back on drop.
pub struct InlineSlot {
    shared: Arc<Shared>,
}

impl Drop for InlineSlot {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.free += 1;
        let wake = st.can_start();
        drop(st);
        if wake {
            self.shared.changed.notify_one();
        }
    }
}

/// A slot's thread: runs the head of the queue whenever its work is in and a slot is free.
fn run_slot(shared: &Shared) {
    let mut st = shared.lock();
    loop {
        if st.closed {
            return;
        }
        if st.can_start() {
            let Some((_, Some(job))) = st.queue.pop_front() else {
                unreachable!("the head was checked to hold its work")
            };
            st.free -= 1;
            let wake = st.can_start();
            drop(st);
            if wake {
                // Another slot is free and the call behind is ready: an idle thread starts it.
                shared.changed.notify_one();
            }
            job();
            st = shared.lock();
            st.free += 1;
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
            let (started, gate) = (started.clone(), gate.clone());
            t.submit(Box::new(move || {
                started.send(i).unwrap();
                gate.lock().unwrap().recv().unwrap();
            }));
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
        // Handed in last first: only the head's arrival may wake a thread, which must then
        // see that the next is ready too.
        for (i, t) in tickets.iter().enumerate().rev() {
            let (started, gate) = (started.clone(), gate.clone());
            t.submit(Box::new(move || {
                started.send(i).unwrap();
                let _ = gate.lock().unwrap().recv();
            }));
        }
        let mut all: Vec<usize> = (0..3).map(|_| seen.recv_timeout(WAIT).unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, [0, 1, 2]);
        drop(release);
    }

    #[test]
    fn only_the_next_call_may_take_a_free_slot_inline() {
        let slots = Slots::new(1, "t").unwrap();
        let a = slots.enter();
        let b = slots.enter();
        assert!(b.try_inline().is_none());
        let held = a.try_inline().expect("a is next and the slot is free");
        assert_eq!(slots.occupancy(), (1, 1));
        // The slot is taken: b waits even at the head.
        assert!(b.try_inline().is_none());
        let (tx, rx) = mpsc::channel();
        b.submit(Box::new(move || tx.send(()).unwrap()));
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        drop(held);
        rx.recv_timeout(WAIT).unwrap();
    }
}
