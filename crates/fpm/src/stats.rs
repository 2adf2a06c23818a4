//! Summary statistics of the speeds measured at one problem size (one model vertex).
//!
//! A vertex keeps count, min, mean and max rather than the raw samples: that is all the model
//! needs (the mean for the FPM, min and max for GBBP's cuts and for the band view), it merges
//! exactly when points measured elsewhere (a server's builder, real calls) arrive, and it keeps a
//! long-lived model's size independent of how many calls refined it.

use serde::{Deserialize, Serialize};

/// Speeds (operations/s) measured at one size: number of runs, slowest, mean and fastest.
///
/// `count == 0` marks a value that was not measured (e.g. an interpolated vertex in a
/// [`crate::model::Fpm::slice`]); merging such stats into others changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpeedStats {
    /// Runs merged into these stats.
    pub count: u64,
    /// Slowest run, operations/s.
    pub min: f64,
    /// Mean over the runs, operations/s.
    pub mean: f64,
    /// Fastest run, operations/s.
    pub max: f64,
    /// Sum of squared deviations from the mean (Welford's M2), so the spread merges exactly
    /// with the mean; 0 for stats saved before spreads were kept.
    #[serde(default)]
    pub m2: f64,
}

impl SpeedStats {
    /// Stats of one run at `speed` operations/s.
    pub fn new(speed: f64) -> Self {
        Self {
            count: 1,
            min: speed,
            mean: speed,
            max: speed,
            m2: 0.0,
        }
    }

    /// The sample standard deviation of the runs (0 for one run).
    pub fn sd(&self) -> f64 {
        if self.count < 2 {
            0.0
        } else {
            (self.m2.max(0.0) / (self.count - 1) as f64).sqrt()
        }
    }

    /// Stats of several runs; `None` when `speeds` is empty.
    pub fn from_samples(speeds: &[f64]) -> Option<Self> {
        let (first, rest) = speeds.split_first()?;
        let mut s = Self::new(*first);
        for v in rest {
            s.add(*v);
        }
        Some(s)
    }

    /// Adds one run at `speed` operations/s.
    pub fn add(&mut self, speed: f64) {
        self.merge(&Self::new(speed));
    }

    /// Merges the runs summarised by `other` (count-weighted mean).
    pub fn merge(&mut self, other: &SpeedStats) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = *other;
            return;
        }
        let n = self.count + other.count;
        // Weighted in f64: counts stay far below 2^53, and this form cannot overflow.
        let w = other.count as f64 / n as f64;
        let delta = other.mean - self.mean;
        // Chan et al.'s parallel merge of M2.
        self.m2 += other.m2 + delta * delta * self.count as f64 * w;
        self.mean += delta * w;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.count = n;
    }

    /// Whether every value is finite and non-negative and `min <= max` (what speeds must be).
    /// The mean is not checked against min/max: rounding may move it by an ulp.
    pub fn is_valid(&self) -> bool {
        [self.min, self.mean, self.max]
            .iter()
            .all(|v| v.is_finite() && *v >= 0.0)
            && self.min <= self.max
    }
}

impl From<SpeedStats> for gridwise_proto::PointStats {
    fn from(s: SpeedStats) -> Self {
        Self {
            count: s.count,
            min: s.min,
            mean: s.mean,
            max: s.max,
            sd: s.sd(),
        }
    }
}

impl From<gridwise_proto::PointStats> for SpeedStats {
    fn from(s: gridwise_proto::PointStats) -> Self {
        let sd = if s.sd.is_finite() { s.sd.max(0.0) } else { 0.0 };
        Self {
            count: s.count,
            min: s.min,
            mean: s.mean,
            max: s.max,
            m2: sd * sd * s.count.saturating_sub(1) as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn add_tracks_min_mean_max() {
        let mut s = SpeedStats::new(2.0);
        s.add(4.0);
        s.add(6.0);
        assert_eq!(s.count, 3);
        assert_eq!(s.min, 2.0);
        assert_eq!(s.max, 6.0);
        assert!((s.mean - 4.0).abs() < 1e-12);
    }

    #[test]
    fn merging_unmeasured_stats_changes_nothing() {
        let mut s = SpeedStats::new(3.0);
        let empty = SpeedStats {
            m2: 0.0,
            count: 0,
            min: 9.0,
            mean: 9.0,
            max: 9.0,
        };
        s.merge(&empty);
        assert_eq!(s, SpeedStats::new(3.0));
        let mut e = empty;
        e.merge(&SpeedStats::new(3.0));
        assert_eq!(e, SpeedStats::new(3.0));
    }

    proptest! {
        #[test]
        fn merge_equals_adding_one_by_one(
            a in proptest::collection::vec(0.0f64..1e12, 1..20),
            b in proptest::collection::vec(0.0f64..1e12, 1..20),
        ) {
            let mut merged = SpeedStats::from_samples(&a).unwrap();
            merged.merge(&SpeedStats::from_samples(&b).unwrap());
            let all: Vec<f64> = a.iter().chain(b.iter()).copied().collect();
            let direct = SpeedStats::from_samples(&all).unwrap();
            prop_assert_eq!(merged.count, direct.count);
            prop_assert_eq!(merged.min, direct.min);
            prop_assert_eq!(merged.max, direct.max);
            prop_assert!((merged.mean - direct.mean).abs() <= 1e-9 * direct.mean.max(1.0));
            prop_assert!(merged.is_valid());
        }
    }
}
