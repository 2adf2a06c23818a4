//! How far a model's predictions have been from the calls that followed: the spread of the
//! compute term. A model's own sample spread says how much runs vary at the points it measured;
//! only scoring it against real calls says how wrong it is between them, and under load.

use std::collections::VecDeque;

/// Relative errors kept: enough for a steady RMS, few enough to follow a change of regime.
const KEPT: usize = 32;

/// Scored calls before the misfit is trusted over the model's own sample spread.
pub const MIN_SCORED: usize = 3;

/// The standard deviation whose normal 90% interval holds 90% of `errors` (relative errors of
/// predictions): their 90th percentile of |error| (nearest rank) over z₉₀; 0 for none.
pub(crate) fn sd_of_errors(errors: impl Iterator<Item = f64>) -> f64 {
    let mut abs: Vec<f64> = errors.map(f64::abs).filter(|e| e.is_finite()).collect();
    if abs.is_empty() {
        return 0.0;
    }
    let k = ((abs.len() as f64 * 0.9).ceil() as usize).clamp(1, abs.len()) - 1;
    // The k-th smallest without sorting the rest: this runs on every scored call.
    *abs.select_nth_unstable_by(k, f64::total_cmp).1 / crate::stoch::Z90
}

/// The recent relative errors (actual ÷ predicted − 1) of one model on one server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Misfit {
    recent: VecDeque<f64>,
    /// [`relative_sd`](Self::relative_sd) of `recent`, kept as it changes (estimates read it
    /// far more often than calls are scored).
    sd: Option<f64>,
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
        self.sd =
            (self.recent.len() >= MIN_SCORED).then(|| sd_of_errors(self.recent.iter().copied()));
    }

    /// The relative standard deviation whose normal 90% interval holds 90% of the recent
    /// errors (their 90th percentile of |error| over z₉₀), once [`MIN_SCORED`] calls were
    /// scored. Errors are not normal: a root mean square would let a few outliers widen every
    /// interval (they covered 96–98% of dedicated calls with it); the percentile keeps the
    /// stated 90% honest whatever the tails.
    pub fn relative_sd(&self) -> Option<f64> {
        self.sd
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
    fn spread_of_recent_relative_errors() {
        let mut m = Misfit::default();
        m.record(1.0, 1.1);
        m.record(2.0, 1.8);
        assert_eq!(m.relative_sd(), None);
        m.record(1.0, f64::NAN);
        m.record(0.0, 1.0);
        assert_eq!(m.scored(), 2);
        m.record(4.0, 4.4);
        // Every error is 10%: the interval reaches exactly that far.
        let sd = m.relative_sd().unwrap();
        assert!((sd * crate::stoch::Z90 - 0.1).abs() < 1e-12, "{sd}");
        assert!((m.mean_abs().unwrap() - 0.1).abs() < 1e-12);
        // Old errors leave the window.
        for _ in 0..KEPT {
            m.record(1.0, 1.0);
        }
        assert_eq!(m.relative_sd(), Some(0.0));
    }

    #[test]
    fn an_outlier_does_not_widen_the_interval_for_the_rest() {
        let mut m = Misfit::default();
        for k in 0..19 {
            m.record(1.0, if k % 2 == 0 { 1.01 } else { 0.99 });
        }
        m.record(1.0, 3.0);
        // 19 of 20 errors are 1%: the 90% interval covers them, not the one at 200%.
        let reach = m.relative_sd().unwrap() * crate::stoch::Z90;
        assert!((reach - 0.01).abs() < 1e-9, "{reach}");
    }
}
