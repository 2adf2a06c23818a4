//! Stochastic values: a prediction is a mean and a spread, not a point (seed 000, Ch. 4).
//!
//! A [`Stoch`] is a normal approximation (mean, standard deviation). Terms are combined by the
//! rules of seed 000's Table 4.1, chosen per pair by whether the two are *related* (driven by
//! the same cause, e.g. the queue and the compute time on one loaded server: standard deviations
//! add) or *unrelated* (e.g. a transfer and a compute time: variances add). Division uses the
//! first-order rule sd(1/Y) ≈ sd_Y / m_Y², not the thesis footnote's 1/sd (see the digest).

pub use gridwise_proto::Z90;

/// A mean and a standard deviation, both ≥ 0 for the times and fractions gridwise predicts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stoch {
    /// The expected value.
    pub mean: f64,
    /// Its standard deviation (0: known exactly, or nothing known of the spread).
    pub sd: f64,
}

impl Stoch {
    /// A value known exactly.
    pub fn point(mean: f64) -> Self {
        Stoch { mean, sd: 0.0 }
    }

    /// A mean with a spread; a negative or NaN spread counts as none.
    pub fn new(mean: f64, sd: f64) -> Self {
        Stoch {
            mean,
            sd: if sd > 0.0 && sd.is_finite() { sd } else { 0.0 },
        }
    }

    /// Sum of two values driven by the same cause (ρ = 1): spreads add.
    pub fn plus_related(self, other: Stoch) -> Self {
        Stoch::new(self.mean + other.mean, self.sd + other.sd)
    }

    /// Sum of two independent values: variances add.
    pub fn plus_unrelated(self, other: Stoch) -> Self {
        Stoch::new(self.mean + other.mean, self.sd.hypot(other.sd))
    }

    /// A value scaled by a known factor.
    pub fn scale(self, k: f64) -> Self {
        Stoch::new(self.mean * k, self.sd * k.abs())
    }

    /// `self / divisor` for independent values, to first order: relative errors add in
    /// quadrature. A divisor whose mean is not positive gives an infinite mean.
    pub fn divided_by(self, divisor: Stoch) -> Self {
        // Written positively so a NaN mean fails too.
        if divisor.mean.is_nan() || divisor.mean <= 0.0 {
            return Stoch::point(f64::INFINITY);
        }
        let mean = self.mean / divisor.mean;
        let rel = self.relative_sd().hypot(divisor.relative_sd());
        Stoch::new(mean, mean.abs() * rel)
    }

    /// sd ÷ |mean| (0 for a zero mean).
    pub fn relative_sd(self) -> f64 {
        if self.mean == 0.0 {
            0.0
        } else {
            self.sd / self.mean.abs()
        }
    }

    /// `mean + k·sd`: what a scheduler with tuning factor `k` plans with (seed 000 §4).
    pub fn quantile_like(self, k: f64) -> f64 {
        self.mean + k * self.sd
    }

    /// The 90% interval, clamped at 0 below (times and fractions are never negative).
    pub fn interval90(self) -> (f64, f64) {
        gridwise_proto::interval90(self.mean, self.sd)
    }
}

/// Mean and sample standard deviation of `values` (sd 0 for fewer than two).
pub fn of_samples(values: &[f64]) -> Stoch {
    let n = values.len();
    if n == 0 {
        return Stoch::default();
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return Stoch::point(mean);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    Stoch::new(mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn the_thesis_rules() {
        let (a, b) = (Stoch::new(12.0, 0.3), Stoch::new(12.0, 1.8));
        let related = a.plus_related(b);
        assert!(close(related.mean, 24.0) && close(related.sd, 2.1));
        let unrelated = a.plus_unrelated(b);
        assert!(close(unrelated.sd, (0.09f64 + 3.24).sqrt()));
        assert!(close(a.scale(17.0).sd, 5.1));
        // Table 1.3's 95% conservative per-unit costs: m + 2sd.
        assert!(close(a.quantile_like(2.0), 12.6) && close(b.quantile_like(2.0), 15.6));
    }

    #[test]
    fn division_adds_relative_errors_in_quadrature() {
        // A 1 s quiet-host time with 3% spread at an availability of 0.5 ± 0.05.
        let t = Stoch::new(1.0, 0.03).divided_by(Stoch::new(0.5, 0.05));
        assert!(close(t.mean, 2.0));
        assert!(close(t.sd, 2.0 * (0.03f64.powi(2) + 0.1f64.powi(2)).sqrt()));
        assert_eq!(
            Stoch::point(1.0).divided_by(Stoch::point(0.0)).mean,
            f64::INFINITY
        );
    }

    #[test]
    fn intervals_are_clamped_at_zero_and_samples_give_the_sample_sd() {
        let (lo, hi) = Stoch::new(1.0, 1.0).interval90();
        assert_eq!(lo, 0.0);
        assert!(close(hi, 1.0 + Z90));
        let s = of_samples(&[1.0, 2.0, 3.0, 4.0]);
        assert!(close(s.mean, 2.5) && close(s.sd, (5.0f64 / 3.0).sqrt()));
        assert_eq!(of_samples(&[]), Stoch::default());
        assert_eq!(Stoch::new(1.0, f64::NAN).sd, 0.0);
    }
}
