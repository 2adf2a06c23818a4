//! Forecasts, Network Weather Service style (seed 004 §2): a family of simple predictors runs
//! side by side on every measured series (CPU availability, free memory, link latency and
//! bandwidth); each new measurement scores every member's last forecast, and the forecast is
//! the one of the member with the lowest recent error, which it carries as its spread.
//!
//! Members: the last value; the running mean; sliding means and medians over several windows;
//! exponential smoothing at several gains; an AR(1) model fitted over a sliding window. Cheap
//! enough for a heartbeat a second from a thousand servers: a push costs a few microseconds.

use crate::stoch::Stoch;
use std::collections::VecDeque;

/// Recent errors a member is judged on.
const ERROR_WINDOW: usize = 32;
/// Errors the chosen member's spread is measured over: longer than the judging window, since
/// the member that looks best over a short window is partly the luckiest one, and its short
/// window error would understate the spread.
const SPREAD_WINDOW: usize = 64;
/// Samples the series keeps (the largest window any member needs).
const KEPT: usize = 64;

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Last,
    RunningMean { sum: f64, n: u64 },
    SlidingMean(usize),
    SlidingMedian(usize),
    Smoothing { gain: f64, level: Option<f64> },
    Ar1(usize),
}

#[derive(Clone, Debug, PartialEq)]
struct Member {
    kind: Kind,
    forecast: Option<f64>,
    // Squared errors of its recent forecasts, newest last (up to SPREAD_WINDOW).
    errors: VecDeque<f64>,
    // Sums of the last ERROR_WINDOW and of all kept squared errors.
    recent_sum: f64,
    all_sum: f64,
}

impl Member {
    fn new(kind: Kind) -> Self {
        Member {
            kind,
            forecast: None,
            errors: VecDeque::with_capacity(SPREAD_WINDOW),
            recent_sum: 0.0,
            all_sum: 0.0,
        }
    }

    /// Mean squared error of the last [`ERROR_WINDOW`] forecasts.
    fn mse(&self) -> Option<f64> {
        let n = self.errors.len().min(ERROR_WINDOW);
        (n > 0).then(|| self.recent_sum / n as f64)
    }

    /// Mean squared error over the last [`SPREAD_WINDOW`] forecasts.
    fn long_mse(&self) -> f64 {
        if self.errors.is_empty() {
            0.0
        } else {
            self.all_sum / self.errors.len() as f64
        }
    }

    fn score(&mut self, actual: f64) {
        let Some(f) = self.forecast else { return };
        let e = (actual - f).powi(2);
        if self.errors.len() == SPREAD_WINDOW
            && let Some(old) = self.errors.pop_front()
        {
            self.all_sum -= old;
        }
        self.errors.push_back(e);
        self.all_sum += e;
        // The error leaving the judging window, if it is full.
        if self.errors.len() > ERROR_WINDOW {
            self.recent_sum -= self.errors[self.errors.len() - 1 - ERROR_WINDOW];
        }
        self.recent_sum += e;
        // Rounding drift in the running sums must not go negative.
        self.recent_sum = self.recent_sum.max(0.0);
        self.all_sum = self.all_sum.max(0.0);
    }

    /// Updates the member's state with the series (newest last) and makes its next forecast.
    fn update(&mut self, history: &VecDeque<f64>) {
        let x = *history.back().expect("updated after a push");
        let recent = |w: usize| history.iter().rev().take(w);
        self.forecast = Some(match &mut self.kind {
            Kind::Last => x,
            Kind::RunningMean { sum, n } => {
                *sum += x;
                *n += 1;
                *sum / *n as f64
            }
            Kind::SlidingMean(w) => {
                let k = (*w).min(history.len());
                recent(*w).sum::<f64>() / k as f64
            }
            Kind::SlidingMedian(w) => {
                let mut v: Vec<f64> = recent(*w).copied().collect();
                v.sort_by(f64::total_cmp);
                let m = v.len() / 2;
                if v.len() % 2 == 1 {
                    v[m]
                } else {
                    (v[m - 1] + v[m]) / 2.0
                }
            }
            Kind::Smoothing { gain, level } => {
                let next = match *level {
                    Some(l) => l + *gain * (x - l),
                    None => x,
                };
                *level = Some(next);
                next
            }
            Kind::Ar1(w) => {
                let v: Vec<f64> = recent(*w).copied().collect();
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                let var: f64 = v.iter().map(|a| (a - mean).powi(2)).sum();
                // v is newest first: pairs (x_t, x_{t-1}).
                let cov: f64 = v.windows(2).map(|p| (p[0] - mean) * (p[1] - mean)).sum();
                let phi = if var > 0.0 {
                    (cov / var).clamp(-1.0, 1.0)
                } else {
                    0.0
                };
                mean + phi * (x - mean)
            }
        });
    }

    fn name(&self) -> String {
        match &self.kind {
            Kind::Last => "last".into(),
            Kind::RunningMean { .. } => "mean".into(),
            Kind::SlidingMean(w) => format!("mean{w}"),
            Kind::SlidingMedian(w) => format!("median{w}"),
            Kind::Smoothing { gain, .. } => format!("smooth{gain}"),
            Kind::Ar1(w) => format!("ar1w{w}"),
        }
    }
}

/// A forecast of a series' next value.
#[derive(Clone, Debug, PartialEq)]
pub struct Forecast {
    /// The value and, as its spread, the root mean squared error of the chosen member's recent
    /// forecasts (0 before any forecast could be scored).
    pub value: Stoch,
    /// The member that made it, e.g. `median11` or `smooth0.1`.
    pub method: String,
}

/// One measured series and its forecasters.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    history: VecDeque<f64>,
    members: Vec<Member>,
}

impl Default for Series {
    fn default() -> Self {
        Self::new()
    }
}

impl Series {
    /// An empty series with the standard family of forecasters.
    pub fn new() -> Self {
        let mut kinds = vec![Kind::Last, Kind::RunningMean { sum: 0.0, n: 0 }];
        kinds.extend([5, 10, 30].map(Kind::SlidingMean));
        kinds.extend([5, 11, 31].map(Kind::SlidingMedian));
        kinds.extend(
            [0.05, 0.1, 0.2, 0.3, 0.5, 0.75].map(|gain| Kind::Smoothing { gain, level: None }),
        );
        kinds.extend([16, 48].map(Kind::Ar1));
        Series {
            history: VecDeque::with_capacity(KEPT),
            members: kinds.into_iter().map(Member::new).collect(),
        }
    }

    /// A new measurement: scores every member's last forecast against it, then lets each
    /// forecast the next one. Non-finite values are ignored (a broken sensor must not poison
    /// the series).
    pub fn push(&mut self, x: f64) {
        self.take(x, true);
    }

    /// A measurement that starts a new level the forecasts are told of as soon as it happens
    /// (a process more or less on a host): every member moves on, but none is scored against
    /// it, since no estimate is made in the moment between the change and its report.
    pub fn push_level_change(&mut self, x: f64) {
        self.take(x, false);
    }

    fn take(&mut self, x: f64, score: bool) {
        if !x.is_finite() {
            return;
        }
        if self.history.len() == KEPT {
            self.history.pop_front();
        }
        self.history.push_back(x);
        for m in &mut self.members {
            if score {
                m.score(x);
            }
            m.update(&self.history);
        }
    }

    /// Measurements taken so far (up to the last 64).
    pub fn len(&self) -> usize {
        self.history.len()
    }

    /// Whether nothing was measured yet.
    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
    }

    /// The two newest measurements, older first.
    pub fn last_two(&self) -> Option<(f64, f64)> {
        let n = self.history.len();
        (n >= 2).then(|| (self.history[n - 2], self.history[n - 1]))
    }

    /// The newest measurement.
    pub fn last(&self) -> Option<f64> {
        self.history.back().copied()
    }

    /// The forecast of the next value by the member with the lowest recent mean squared error
    /// (the earliest in the family on a tie), its spread the root mean squared error of that
    /// member over a longer window; `None` before the first measurement.
    pub fn forecast(&self) -> Option<Forecast> {
        let best = self
            .members
            .iter()
            .filter_map(|m| Some((m.mse()?, m)))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, m)| m)
            .or(self.members.first())?;
        Some(Forecast {
            value: Stoch::new(best.forecast?, best.long_mse().sqrt()),
            method: best.name(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(values: impl IntoIterator<Item = f64>) -> Series {
        let mut s = Series::new();
        for v in values {
            s.push(v);
        }
        s
    }

    /// Deterministic pseudo-random numbers in [-1, 1).
    fn noise(seed: u64) -> impl Iterator<Item = f64> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::iter::from_fn(move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Some((x >> 11) as f64 / (1u64 << 52) as f64 - 1.0)
        })
    }

    /// The adaptive pick is (close to) the member that really forecast best lately.
    fn picks_a_best_member(s: &Series) {
        let best = s
            .members
            .iter()
            .map(Member::long_mse)
            .fold(f64::INFINITY, f64::min);
        let f = s.forecast().unwrap();
        let chosen = s.members.iter().find(|m| m.name() == f.method).unwrap();
        assert!(
            chosen.long_mse() <= 1.5 * best + 1e-12,
            "{} has mse {} against the best {best}",
            f.method,
            chosen.long_mse()
        );
    }

    #[test]
    fn a_constant_is_forecast_exactly_with_no_error() {
        let s = run(std::iter::repeat_n(0.7, 20));
        let f = s.forecast().unwrap();
        assert_eq!(f.value.mean, 0.7);
        assert_eq!(f.value.sd, 0.0);
        assert_eq!(Series::new().forecast(), None);
    }

    #[test]
    fn after_a_step_the_forecast_follows_the_new_level() {
        let s = run((0..60).map(|i| if i < 30 { 1.0 } else { 0.4 }));
        let f = s.forecast().unwrap();
        assert!((f.value.mean - 0.4).abs() < 1e-9, "{f:?}");
        // Long windows still remember the old level: an adaptive pick must not use them.
        assert!(
            !f.method.starts_with("mean") || f.method == "mean5",
            "{f:?}"
        );
    }

    #[test]
    fn white_noise_is_forecast_by_its_mean_with_its_spread() {
        // Noise of sd 0.1 around 0.6: averaging members beat the last value.
        let s = run(noise(7).take(400).map(|e| 0.6 + 0.1 * 3f64.sqrt() * e));
        let f = s.forecast().unwrap();
        assert!((f.value.mean - 0.6).abs() < 0.06, "{f:?}");
        assert!(f.method != "last", "{f:?}");
        // Its error is the noise's spread (a sliding mean adds a little).
        assert!(f.value.sd > 0.06 && f.value.sd < 0.16, "{f:?}");
        picks_a_best_member(&s);
    }

    #[test]
    fn a_slow_sine_is_tracked_closer_than_any_long_average() {
        let wave = |i: usize| 0.6 + 0.3 * (i as f64 / 20.0).sin();
        let s = run((0..300).map(wave));
        let f = s.forecast().unwrap();
        let next = wave(300);
        assert!((f.value.mean - next).abs() < 0.02, "{f:?} vs {next}");
        assert!(f.value.sd < 0.03, "{f:?}");
        let mean_member = s.members.iter().find(|m| m.name() == "mean").unwrap();
        assert!(mean_member.mse().unwrap() > f.value.sd.powi(2) * 4.0);
        picks_a_best_member(&s);
    }

    #[test]
    fn non_finite_samples_are_ignored() {
        let mut s = run([0.5, 0.5]);
        s.push(f64::NAN);
        s.push(f64::INFINITY);
        assert_eq!((s.len(), s.last()), (2, Some(0.5)));
    }
}
