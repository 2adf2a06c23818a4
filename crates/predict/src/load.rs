//! A server's load history and the load functions of its band model (seed 003 §2.1): how much
//! other work shares the host, from one-minute load averages sampled once per period.

use gridwise_fpm::load::{LoadAverageMatrix, LoadFunctions, LoadHistory};
use std::time::Duration;

/// A server's load history and the load functions of its band model (seed 003 §2.1).
#[derive(Clone, Debug, Default)]
pub struct LoadTrack {
    history: Option<LoadHistory>,
    last_sample: Option<Duration>,
    functions: Option<LoadFunctions>,
}

/// Fewer samples than this give no band: three minutes say little about the next hour.
const MIN_LOAD_SAMPLES: usize = 3;

impl LoadTrack {
    /// Takes a load average seen at `now` if a sample period has passed since the last one;
    /// returns whether it did.
    pub fn observe(&mut self, now: Duration, loadavg: f64, every: Duration, window: usize) -> bool {
        if self
            .last_sample
            .is_some_and(|t| now.saturating_sub(t) < every)
        {
            return false;
        }
        let delta = every.as_secs_f64().max(1e-3);
        let cap = (2 * window.max(1)).saturating_sub(1).max(1);
        let h = match &mut self.history {
            Some(h) => h,
            None => match LoadHistory::new(delta, cap) {
                Ok(h) => self.history.insert(h),
                Err(_) => return false,
            },
        };
        if h.push(loadavg).is_err() {
            return false;
        }
        self.last_sample = Some(now);
        self.functions = (h.len() >= MIN_LOAD_SAMPLES)
            .then(|| LoadAverageMatrix::from_history(h, window.max(1)).ok())
            .flatten()
            .map(|m| m.load_functions());
        true
    }

    /// Takes a load average restored from the store as the next sample of period `every`.
    pub fn restore(&mut self, loadavg: f64, every: Duration, window: usize) {
        let now = self.last_sample.map_or(Duration::ZERO, |t| t + every);
        self.observe(now, loadavg, every, window);
    }

    /// The load functions l_min(t), l_max(t), once enough history exists.
    pub fn functions(&self) -> Option<&LoadFunctions> {
        self.functions.as_ref()
    }

    /// Samples kept: at most 2w − 1 for the window w of the first sample, oldest dropped first.
    pub fn samples(&self) -> usize {
        self.history.as_ref().map_or(0, |h| h.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_once_per_period_and_gives_a_band() {
        let mut t = LoadTrack::default();
        let every = Duration::from_secs(60);
        for s in 0..3u64 {
            // Several heartbeats per period; only the first of each counts.
            assert!(t.observe(Duration::from_secs(s * 60), 0.5, every, 60));
            assert!(!t.observe(Duration::from_secs(s * 60 + 1), 9.0, every, 60));
        }
        assert_eq!(t.samples(), 3);
        let lf = t.functions().expect("three samples make a band");
        assert!((lf.l_min(60.0) - 0.5).abs() < 1e-12 && (lf.l_max(60.0) - 0.5).abs() < 1e-12);
        let mut short = LoadTrack::default();
        short.observe(Duration::ZERO, 1.0, every, 60);
        assert!(short.functions().is_none());
    }
}
