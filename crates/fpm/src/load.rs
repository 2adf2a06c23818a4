//! Load history → load-average matrix → load functions (Higgins 2010, §2.1.1; digest 003 §1.2).
//!
//! A server samples its 1-minute load average every Δ seconds into a [`LoadHistory`]. From the
//! `h` most recent samples we build the w×w [`LoadAverageMatrix`]
//! `l_{i,j} = (Σ_{k=j}^{i+j−1} l_k) / i` (row i = averages over a period of i·Δ seconds, column j
//! = the window's offset into the past), and from its rows the piecewise-linear
//! [`LoadFunctions`] `l_min(t)`, `l_max(t)` over periods t = Δ … wΔ.
//!
//! Everything here is pure arithmetic: the caller owns the clock and the sampling.
//!
//! # Decisions where the thesis is silent or inconsistent (\[gap\])
//! - **Order.** The history is stored *newest first*, as in the thesis: `l_1` is the most recent
//!   sample. [`LoadHistory::push`] makes the new sample `l_1`; the oldest sample falls off when the
//!   capacity is reached.
//! - **History length.** The thesis writes both `2w − 1 ≤ h` and `2w < h`; the formula only needs
//!   `2w − 1 ≤ h`, so that is the requirement used.
//! - **Short history.** With fewer than `2w − 1` samples, [`LoadAverageMatrix::from_history`]
//!   shrinks the window to the largest one that fits, `⌊(h+1)/2⌋`, and records the requested
//!   window beside it ([`LoadAverageMatrix::is_truncated`]) instead of failing: a scheduler with a
//!   freshly started history still gets a (narrower-horizon) band. Only an empty history, or a
//!   window of 0, is an error.
//! - **Outside the window.** The load functions are clamped: for `t < Δ` they return the value at
//!   `Δ`, for `t > wΔ` the value at `wΔ` (digest's suggestion). The band code relies on this.
//! - **Units.** Δ and every period are `f64` seconds chosen by the caller (digest §5.2 item 3:
//!   sampling faster than once a minute is allowed and helps short tasks).
//! - **Bad samples.** Negative, NaN or infinite load samples are rejected by `push`: a load
//!   average is a non-negative run-queue length, so such a value is a caller bug, not data.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Errors from building load histories, load-average matrices and load functions.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadError {
    /// The sampling interval Δ must be a positive, finite number of seconds.
    #[error("sampling interval must be positive and finite, got {0} s")]
    InvalidDelta(f64),
    /// A history must be able to hold at least one sample.
    #[error("history capacity must be at least 1")]
    ZeroCapacity,
    /// A load sample must be finite and non-negative.
    #[error("load sample must be finite and non-negative, got {0}")]
    InvalidSample(f64),
    /// The load-average window must be at least one period.
    #[error("load-average window must be at least 1")]
    ZeroWindow,
    /// The history has no samples, so no load average can be formed.
    #[error("load history is empty")]
    EmptyHistory,
    /// `l_min` and `l_max` must have the same, non-zero length.
    #[error("load functions need equal, non-zero lengths (l_min {min_len}, l_max {max_len})")]
    BadLength {
        /// Length of `l_min`.
        min_len: usize,
        /// Length of `l_max`.
        max_len: usize,
    },
    /// A load-function value is negative, NaN or infinite, or `l_min > l_max` at some period.
    #[error("invalid load-function value at period {period} (1-based)")]
    BadValue {
        /// The offending period, in units of Δ (1-based).
        period: usize,
    },
}

/// Bounded history of 1-minute load-average samples taken every `delta_s` seconds, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadHistory {
    delta_s: f64,
    capacity: usize,
    /// `newest_first[0]` is the thesis's `l_1` (most recent sample).
    newest_first: VecDeque<f64>,
}

impl LoadHistory {
    /// Empty history sampled every `delta_s` seconds, holding at most `capacity` samples.
    pub fn new(delta_s: f64, capacity: usize) -> Result<Self, LoadError> {
        check_delta(delta_s)?;
        if capacity == 0 {
            return Err(LoadError::ZeroCapacity);
        }
        Ok(Self {
            delta_s,
            capacity,
            newest_first: VecDeque::with_capacity(capacity.min(4096)),
        })
    }

    /// History built from samples given *oldest first* (the order a sampler produces them).
    pub fn from_oldest_first(
        delta_s: f64,
        capacity: usize,
        samples: &[f64],
    ) -> Result<Self, LoadError> {
        let mut h = Self::new(delta_s, capacity)?;
        for &l in samples {
            h.push(l)?;
        }
        Ok(h)
    }

    /// Record a new sample; it becomes `l_1` and the oldest sample is dropped when full.
    pub fn push(&mut self, l: f64) -> Result<(), LoadError> {
        if !l.is_finite() || l < 0.0 {
            return Err(LoadError::InvalidSample(l));
        }
        if self.newest_first.len() >= self.capacity {
            self.newest_first.pop_back();
        }
        self.newest_first.push_front(l);
        Ok(())
    }

    /// Sampling interval Δ in seconds.
    pub fn delta_s(&self) -> f64 {
        self.delta_s
    }

    /// Maximum number of samples kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of samples held (the thesis's `h`).
    pub fn len(&self) -> usize {
        self.newest_first.len()
    }

    /// True when no sample has been recorded.
    pub fn is_empty(&self) -> bool {
        self.newest_first.is_empty()
    }

    /// The thesis's `l_n` (1-based, `l_1` = most recent); `None` outside `1..=len`.
    pub fn get(&self, n: usize) -> Option<f64> {
        n.checked_sub(1)
            .and_then(|i| self.newest_first.get(i).copied())
    }

    /// Samples from newest (`l_1`) to oldest (`l_h`).
    pub fn iter_newest_first(&self) -> impl Iterator<Item = f64> + '_ {
        self.newest_first.iter().copied()
    }

    /// Largest window w the current history supports (`2w − 1 ≤ h`).
    pub fn max_window(&self) -> usize {
        self.len().div_ceil(2)
    }
}

/// The w×w matrix of load averages `l_{i,j}` (row i: period i·Δ; column j: offset into the past).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadAverageMatrix {
    delta_s: f64,
    window: usize,
    requested_window: usize,
    /// Row-major `window × window`; entry `(i−1)·window + (j−1)` is `l_{i,j}`.
    values: Vec<f64>,
}

impl LoadAverageMatrix {
    /// Build LA from a history with window `w`, shrinking w to `⌊(h+1)/2⌋` if the history is short.
    ///
    /// Takes O(w²) time and memory (w = 60 → 3 600 entries).
    pub fn from_history(history: &LoadHistory, w: usize) -> Result<Self, LoadError> {
        if w == 0 {
            return Err(LoadError::ZeroWindow);
        }
        if history.is_empty() {
            return Err(LoadError::EmptyHistory);
        }
        let window = w.min(history.max_window());
        // prefix[k] = l_1 + … + l_k (newest first), so a window sum is one subtraction: O(w²).
        let mut prefix = Vec::with_capacity(2 * window);
        prefix.push(0.0);
        let mut acc = 0.0;
        for l in history.iter_newest_first().take(2 * window - 1) {
            acc += l;
            prefix.push(acc);
        }
        let mut values = Vec::with_capacity(window * window);
        for i in 1..=window {
            for j in 1..=window {
                // l_{i,j} = (Σ_{k=j}^{i+j−1} l_k) / i; i+j−1 ≤ 2w−1 samples exist by construction.
                let sum = prefix[i + j - 1] - prefix[j - 1];
                values.push(sum / i as f64);
            }
        }
        Ok(Self {
            delta_s: history.delta_s(),
            window,
            requested_window: w,
            values,
        })
    }

    /// Sampling interval Δ in seconds (copied from the history).
    pub fn delta_s(&self) -> f64 {
        self.delta_s
    }

    /// Window actually used (number of rows and of columns).
    pub fn window(&self) -> usize {
        self.window
    }

    /// Window the caller asked for.
    pub fn requested_window(&self) -> usize {
        self.requested_window
    }

    /// True when the history was too short and the window was shrunk.
    pub fn is_truncated(&self) -> bool {
        self.window < self.requested_window
    }

    /// `l_{i,j}` with 1-based period `i` and position `j`; `None` outside the matrix.
    pub fn get(&self, i: usize, j: usize) -> Option<f64> {
        self.row(i).and_then(|r| r.get(j.checked_sub(1)?).copied())
    }

    /// Row `i` (1-based): the w load averages over a period of i·Δ seconds.
    pub fn row(&self, i: usize) -> Option<&[f64]> {
        if i == 0 || i > self.window {
            return None;
        }
        let start = (i - 1) * self.window;
        self.values.get(start..start + self.window)
    }

    /// The load functions `l_min(t)`, `l_max(t)`: the minimum and maximum of each row.
    pub fn load_functions(&self) -> LoadFunctions {
        let mut l_min = Vec::with_capacity(self.window);
        let mut l_max = Vec::with_capacity(self.window);
        for i in 1..=self.window {
            let row = self.row(i).unwrap_or(&[]);
            l_min.push(row.iter().copied().fold(f64::INFINITY, f64::min));
            l_max.push(row.iter().copied().fold(f64::NEG_INFINITY, f64::max));
        }
        LoadFunctions {
            delta_s: self.delta_s,
            l_min,
            l_max,
        }
    }
}

/// Piecewise-linear minimum and maximum load over periods `t = kΔ`, k = 1…w (index k−1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadFunctions {
    /// Sampling interval Δ in seconds; vertex k (0-based) sits at period `(k+1)·Δ`.
    pub delta_s: f64,
    /// Minimum load average for each period Δ, 2Δ, …, wΔ.
    pub l_min: Vec<f64>,
    /// Maximum load average for each period Δ, 2Δ, …, wΔ.
    pub l_max: Vec<f64>,
}

impl LoadFunctions {
    /// Validated load functions: equal non-zero lengths, finite, non-negative, `l_min ≤ l_max`.
    pub fn new(delta_s: f64, l_min: Vec<f64>, l_max: Vec<f64>) -> Result<Self, LoadError> {
        check_delta(delta_s)?;
        if l_min.is_empty() || l_min.len() != l_max.len() {
            return Err(LoadError::BadLength {
                min_len: l_min.len(),
                max_len: l_max.len(),
            });
        }
        for (k, (&lo, &hi)) in l_min.iter().zip(&l_max).enumerate() {
            let ok = lo.is_finite() && hi.is_finite() && lo >= 0.0 && lo <= hi;
            if !ok {
                return Err(LoadError::BadValue { period: k + 1 });
            }
        }
        Ok(Self {
            delta_s,
            l_min,
            l_max,
        })
    }

    /// Constant load `l` at every period (a zero-width band); handy for tests and what-ifs.
    pub fn constant(delta_s: f64, window: usize, l: f64) -> Result<Self, LoadError> {
        if window == 0 {
            return Err(LoadError::ZeroWindow);
        }
        Self::new(delta_s, vec![l; window], vec![l; window])
    }

    /// Number of periods w (the shorter of the two vectors, if a caller built them unequal).
    pub fn window(&self) -> usize {
        self.l_min.len().min(self.l_max.len())
    }

    /// Longest period covered, wΔ seconds; beyond it the functions are flat.
    pub fn horizon_s(&self) -> f64 {
        self.window() as f64 * self.delta_s
    }

    /// Minimum expected load over a period of `t_s` seconds (clamped outside [Δ, wΔ]).
    pub fn l_min(&self, t_s: f64) -> f64 {
        interp_periods(&self.l_min, self.delta_s, t_s)
    }

    /// Maximum expected load over a period of `t_s` seconds (clamped outside [Δ, wΔ]).
    pub fn l_max(&self, t_s: f64) -> f64 {
        interp_periods(&self.l_max, self.delta_s, t_s)
    }
}

/// Piecewise-linear interpolation of `values[k]` placed at `(k+1)·delta_s`, flat outside.
///
/// An empty vector means "no load information" and reads as zero load; a NaN `t_s` or a broken
/// `delta_s` reads as the first vertex rather than panicking.
pub(crate) fn interp_periods(values: &[f64], delta_s: f64, t_s: f64) -> f64 {
    let (Some(&first), Some(&last)) = (values.first(), values.last()) else {
        return 0.0;
    };
    let pos = t_s / delta_s; // period in units of Δ; vertex k sits at pos = k+1
    if pos.is_nan() || pos <= 1.0 {
        return first;
    }
    let n = values.len();
    if pos >= n as f64 {
        return last;
    }
    let k = pos.floor() as usize; // 1 ≤ k ≤ n−1
    let frac = pos - k as f64;
    let a = values[k - 1];
    let b = values[k];
    a + frac * (b - a)
}

fn check_delta(delta_s: f64) -> Result<(), LoadError> {
    if delta_s.is_finite() && delta_s > 0.0 {
        Ok(())
    } else {
        Err(LoadError::InvalidDelta(delta_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approx(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn history_is_newest_first_and_bounded() {
        let h = LoadHistory::from_oldest_first(60.0, 3, &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h.get(1), Some(4.0));
        assert_eq!(h.get(3), Some(2.0));
        assert_eq!(h.get(0), None);
        assert_eq!(h.get(4), None);
        assert_eq!(h.max_window(), 2);
    }

    #[test]
    fn history_rejects_bad_input() {
        assert_eq!(
            LoadHistory::new(0.0, 5).unwrap_err(),
            LoadError::InvalidDelta(0.0)
        );
        assert!(LoadHistory::new(f64::NAN, 5).is_err());
        assert_eq!(
            LoadHistory::new(1.0, 0).unwrap_err(),
            LoadError::ZeroCapacity
        );
        let mut h = LoadHistory::new(1.0, 5).unwrap();
        assert!(h.push(-0.5).is_err());
        assert!(h.push(f64::NAN).is_err());
        assert!(h.push(f64::INFINITY).is_err());
        assert!(h.is_empty());
    }

    /// Hand-computed w = 3 on history (newest first) l = 1, 2, 3, 4, 5.
    #[test]
    fn la_matrix_small_known_history() {
        // Oldest first 5,4,3,2,1 so that l_1 = 1, …, l_5 = 5.
        let h = LoadHistory::from_oldest_first(60.0, 10, &[5.0, 4.0, 3.0, 2.0, 1.0]).unwrap();
        let la = LoadAverageMatrix::from_history(&h, 3).unwrap();
        assert!(!la.is_truncated());
        let expect = [
            [1.0, 2.0, 3.0], // period 1: l_1, l_2, l_3
            [1.5, 2.5, 3.5], // period 2: (1+2)/2, (2+3)/2, (3+4)/2
            [2.0, 3.0, 4.0], // period 3: (1+2+3)/3, (2+3+4)/3, (3+4+5)/3
        ];
        for (i, row) in expect.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                let got = la.get(i + 1, j + 1).unwrap();
                assert!(approx(got, v), "l_{},{} = {got}, want {v}", i + 1, j + 1);
            }
        }
        assert_eq!(la.get(0, 1), None);
        assert_eq!(la.get(4, 1), None);
        assert_eq!(la.get(1, 4), None);
        let lf = la.load_functions();
        assert_eq!(lf.l_min, vec![1.0, 1.5, 2.0]);
        assert_eq!(lf.l_max, vec![3.0, 3.5, 4.0]);
    }

    #[test]
    fn la_matrix_shrinks_window_on_short_history() {
        let h = LoadHistory::from_oldest_first(1.0, 10, &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let la = LoadAverageMatrix::from_history(&h, 60).unwrap();
        assert_eq!(la.window(), 2);
        assert_eq!(la.requested_window(), 60);
        assert!(la.is_truncated());
        let empty = LoadHistory::new(1.0, 10).unwrap();
        assert_eq!(
            LoadAverageMatrix::from_history(&empty, 3).unwrap_err(),
            LoadError::EmptyHistory
        );
        assert_eq!(
            LoadAverageMatrix::from_history(&h, 0).unwrap_err(),
            LoadError::ZeroWindow
        );
    }

    #[test]
    fn l_min_never_exceeds_l_max() {
        // A deterministic, wiggly history.
        let samples: Vec<f64> = (0..119)
            .map(|k| 1.5 + (k as f64 * 0.37).sin() + 0.5 * (k as f64 * 0.05).cos())
            .collect();
        let h = LoadHistory::from_oldest_first(60.0, 200, &samples).unwrap();
        let la = LoadAverageMatrix::from_history(&h, 60).unwrap();
        let lf = la.load_functions();
        assert_eq!(lf.window(), 60);
        for k in 0..60 {
            assert!(lf.l_min[k] <= lf.l_max[k]);
        }
        for t in [0.0, 30.0, 61.0, 1000.5, 3599.0, 10_000.0] {
            assert!(lf.l_min(t) <= lf.l_max(t));
        }
        // The averages over the longest period vary less than the raw samples.
        let w0 = lf.l_max[0] - lf.l_min[0];
        let w59 = lf.l_max[59] - lf.l_min[59];
        assert!(w59 < w0);
    }

    #[test]
    fn load_functions_interpolate_and_clamp() {
        let lf = LoadFunctions::new(10.0, vec![1.0, 2.0, 4.0], vec![3.0, 3.0, 5.0]).unwrap();
        assert_eq!(lf.horizon_s(), 30.0);
        // Clamped below Δ and above wΔ.
        assert_eq!(lf.l_min(0.0), 1.0);
        assert_eq!(lf.l_min(5.0), 1.0);
        assert_eq!(lf.l_min(-3.0), 1.0);
        assert_eq!(lf.l_min(f64::NAN), 1.0);
        assert_eq!(lf.l_min(30.0), 4.0);
        assert_eq!(lf.l_min(1e9), 4.0);
        assert_eq!(lf.l_max(f64::INFINITY), 5.0);
        // Vertices and midpoints.
        assert_eq!(lf.l_min(10.0), 1.0);
        assert_eq!(lf.l_min(20.0), 2.0);
        assert!(approx(lf.l_min(15.0), 1.5));
        assert!(approx(lf.l_min(25.0), 3.0));
        assert!(approx(lf.l_max(25.0), 4.0));
    }

    #[test]
    fn load_functions_validate() {
        assert!(matches!(
            LoadFunctions::new(1.0, vec![], vec![]),
            Err(LoadError::BadLength { .. })
        ));
        assert!(matches!(
            LoadFunctions::new(1.0, vec![1.0], vec![1.0, 2.0]),
            Err(LoadError::BadLength { .. })
        ));
        assert_eq!(
            LoadFunctions::new(1.0, vec![1.0, 3.0], vec![2.0, 2.0]).unwrap_err(),
            LoadError::BadValue { period: 2 }
        );
        assert!(LoadFunctions::new(1.0, vec![-1.0], vec![2.0]).is_err());
        assert!(LoadFunctions::constant(1.0, 0, 1.0).is_err());
        // Hand-built (unvalidated) empty functions read as zero load instead of panicking.
        let raw = LoadFunctions {
            delta_s: 1.0,
            l_min: vec![],
            l_max: vec![],
        };
        assert_eq!(raw.l_max(5.0), 0.0);
    }
}
