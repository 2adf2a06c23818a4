//! How far a model's predictions have been from the calls that followed: the spread of the
//! compute term. A model's own sample spread says how much runs vary at the points it measured;
//! only scoring it against real calls says how wrong it is between them, and under load.

use std::collections::VecDeque;

/// Relative errors kept: enough for a steady RMS, few enough to follow a change of regime.
const KEPT: usize = 32;

/// Scored calls before the misfit is trusted over the model's own sample spread.
pub const MIN_SCORED: usize = 3;

/// The recent relative errors (actual ÷ predicted − 1) of one model on one server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Misfit {
    recent: VecDeque<f64>,
}

impl Misfit {
    /// Scores a prediction of `predicted_s` against the `actual_s` that followed; nonsense
    /// (non-positive or non-finite times) is ignored.
    pub fn record(&mut self, predicted_s: f64, actual_s: f64) {
        let ok = |t: f64| t.is_finite() && t > 0.0;
        if !(ok(predicted_s) && ok(actual_s)) {
            return;
        }
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(actual_s / predicted_s - 1.0);
    }

    /// The root mean square of the recent relative errors, once [`MIN_SCORED`] calls were
    /// scored.
    pub fn relative_rms(&self) -> Option<f64> {
        (self.recent.len() >= MIN_SCORED).then(|| {
            (self.recent.iter().map(|e| e * e).sum::<f64>() / self.recent.len() as f64).sqrt()
        })
    }

    /// The mean absolute relative error of the recent calls (what `auto` compares models by).
    pub fn mean_abs(&self) -> Option<f64> {
        (self.recent.len() >= MIN_SCORED)
            .then(|| self.recent.iter().map(|e| e.abs()).sum::<f64>() / self.recent.len() as f64)
    }

    pub fn scored(&self) -> usize {
        self.recent.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_of_recent_relative_errors() {
        let mut m = Misfit::default();
        m.record(1.0, 1.1);
        m.record(2.0, 1.8);
        assert_eq!(m.relative_rms(), None);
        m.record(1.0, f64::NAN);
        m.record(0.0, 1.0);
        assert_eq!(m.scored(), 2);
        m.record(4.0, 4.4);
        assert!((m.relative_rms().unwrap() - 0.1).abs() < 1e-12);
        assert!((m.mean_abs().unwrap() - 0.1).abs() < 1e-12);
        // Old errors leave the window.
        for _ in 0..KEPT {
            m.record(1.0, 1.0);
        }
        assert_eq!(m.relative_rms(), Some(0.0));
    }
}
