//! Whether a call's kernel starts or its client takes it back first. A client whose call waits
//! in a queue here, placed here only because a server ranked above this one was not answering,
//! takes the call back once that server answers again and sends it there (a grid healed after
//! a partition would otherwise wait for every queued call to drain before its healed servers
//! get work). The slot's thread starting the kernel and the client's withdrawal race: exactly
//! one wins, so a withdrawn call never runs here and a started one is never sent twice.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

const WAITING: u8 = 0;
const STARTED: u8 = 1;
const WITHDRAWN: u8 = 2;

/// One call's gate: waiting until it is started or withdrawn, and then for good.
#[derive(Debug, Default)]
pub struct StartGate(AtomicU8, OnceLock<Instant>);

impl StartGate {
    pub fn new() -> Self {
        Self::default()
    }

    /// The kernel is about to start: true unless the call was withdrawn first.
    pub fn start(&self) -> bool {
        let started = self.pass(STARTED) || self.0.load(Ordering::Acquire) == STARTED;
        if started {
            self.1.get_or_init(Instant::now);
        }
        started
    }

    /// How long ago the kernel started; `None` while the call waits (or was withdrawn).
    pub fn ran_for(&self) -> Option<Duration> {
        self.1.get().map(Instant::elapsed)
    }

    /// The client takes the call back: true if it had not started (it never will here),
    /// false if it has (it runs to its end and is answered as usual).
    pub fn withdraw(&self) -> bool {
        self.pass(WITHDRAWN) || self.0.load(Ordering::Acquire) == WITHDRAWN
    }

    fn pass(&self, to: u8) -> bool {
        self.0
            .compare_exchange(WAITING, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_call_can_be_withdrawn_and_then_never_starts() {
        let g = StartGate::new();
        assert!(g.withdraw());
        assert!(!g.start());
        // Asked again (a retried message), the answer stands.
        assert!(g.withdraw());
    }

    #[test]
    fn a_started_call_cannot_be_withdrawn() {
        let g = StartGate::new();
        assert_eq!(g.ran_for(), None);
        assert!(g.start());
        assert!(g.ran_for().is_some());
        assert!(!g.withdraw());
        assert!(g.start());
    }

    #[test]
    fn exactly_one_of_a_start_and_a_withdrawal_racing_wins() {
        for _ in 0..200 {
            let g = std::sync::Arc::new(StartGate::new());
            let h = {
                let g = g.clone();
                std::thread::spawn(move || g.start())
            };
            let withdrew = g.withdraw();
            let started = h.join().unwrap();
            assert!(
                started != withdrew,
                "started {started}, withdrawn {withdrew}"
            );
        }
    }
}
