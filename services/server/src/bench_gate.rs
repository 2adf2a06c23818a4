//! Real calls come first: a real call arriving stops the model benchmark running at that moment
//! (the builder runs it again later), and the server can tell whether its own benchmarks were
//! active recently, so that their load is kept out of the load history.

use gridwise_kernels::CancelFlag;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Shared between the call handler and the model builder.
#[derive(Debug, Default)]
pub struct BenchGate {
    current: Mutex<Option<CancelFlag>>,
    last_active: Mutex<Option<Instant>>,
}

impl BenchGate {
    /// A benchmark run starts: its cancel flag, raised if a real call arrives.
    pub fn start(&self) -> CancelFlag {
        let flag = CancelFlag::new();
        *lock(&self.current) = Some(flag.clone());
        flag
    }

    /// The benchmark run ended (finished or stopped).
    pub fn finish(&self) {
        *lock(&self.current) = None;
        *lock(&self.last_active) = Some(Instant::now());
    }

    /// A real call arrived: stop the benchmark running now, if any.
    pub fn yield_to_call(&self) {
        if let Some(f) = lock(&self.current).as_ref() {
            f.cancel();
        }
    }

    /// Whether a benchmark runs now or ran within `within`.
    pub fn recently_active(&self, within: Duration) -> bool {
        lock(&self.current).is_some()
            || lock(&self.last_active).is_some_and(|t| t.elapsed() < within)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_call_stops_the_running_benchmark() {
        let g = BenchGate::default();
        assert!(!g.recently_active(Duration::from_secs(60)));
        let f = g.start();
        assert!(g.recently_active(Duration::ZERO));
        g.yield_to_call();
        assert!(f.is_cancelled());
        g.finish();
        assert!(g.recently_active(Duration::from_secs(60)));
        assert!(!g.recently_active(Duration::ZERO));
        g.yield_to_call(); // nothing running: harmless
    }
}
