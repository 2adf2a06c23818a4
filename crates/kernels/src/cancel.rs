//! A cancellation flag that kernels can both poll and sleep on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A shared, one-way "stop now" signal; clones observe the same flag.
#[derive(Clone, Debug, Default)]
pub struct CancelFlag {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    // Lets `is_cancelled` stay lock-free for kernels that poll in hot loops.
    fast: AtomicBool,
    // The condvar needs its own guarded state so a wake-up cannot slip between check and wait.
    cancelled: Mutex<bool>,
    wake: Condvar,
}

impl CancelFlag {
    /// A flag that is not cancelled yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raises the flag and wakes every waiter; raising it again does nothing.
    pub fn cancel(&self) {
        let mut c = self
            .inner
            .cancelled
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *c = true;
        self.inner.fast.store(true, Ordering::Release);
        self.inner.wake.notify_all();
    }

    /// Whether the flag has been raised.
    pub fn is_cancelled(&self) -> bool {
        self.inner.fast.load(Ordering::Acquire)
    }

    /// Sleeps up to `d`, returning early (with `true`) as soon as the flag is raised.
    pub fn wait_timeout(&self, d: Duration) -> bool {
        // A duration too long to add to "now" is as good as forever.
        let deadline = Instant::now().checked_add(d);
        let mut c = self
            .inner
            .cancelled
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Loop because condvars wake spuriously and a sleep must last its full length.
        while !*c {
            match deadline {
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    c = self
                        .inner
                        .wake
                        .wait_timeout(c, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                None => {
                    c = self
                        .inner
                        .wake
                        .wait(c)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
        true
    }

    /// Blocks until the flag is raised, without spinning.
    pub fn wait(&self) {
        self.wait_timeout(Duration::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn starts_clear_and_clones_share_the_flag() {
        let a = CancelFlag::new();
        let b = a.clone();
        assert!(!a.is_cancelled());
        b.cancel();
        assert!(a.is_cancelled());
        b.cancel();
        assert!(a.is_cancelled());
    }

    #[test]
    fn timeout_without_cancel_sleeps_the_full_time() {
        let f = CancelFlag::new();
        let t0 = Instant::now();
        assert!(!f.wait_timeout(Duration::from_millis(20)));
        assert!(t0.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn cancel_from_another_thread_wakes_a_long_wait() {
        let f = CancelFlag::new();
        let g = f.clone();
        let t0 = Instant::now();
        let h = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            g.cancel();
        });
        assert!(f.wait_timeout(Duration::from_secs(30)));
        assert!(t0.elapsed() < Duration::from_secs(25));
        h.join().unwrap();
    }

    #[test]
    fn already_cancelled_returns_at_once() {
        let f = CancelFlag::new();
        f.cancel();
        assert!(f.wait_timeout(Duration::MAX));
        f.wait();
    }
}
