//! Stochastic values: a prediction is a mean and a spread, not a point (seed 000, Ch. 4).
//!
//! A [`Stoch`] is a normal approximation (mean, standard deviation). Terms are combined by the
//! rules of seed 000's Table 4.1, chosen per pair by whether the two are *related* (driven by
//! the same cause, e.g. the queue and the compute time on one loaded server: standard deviations
//! add) or *unrelated* (e.g. a transfer and a compute time: variances add). Division uses the
//! first-order rule sd(1/Y) ≈ sd_Y / m_Y², not the thesis footnote's 1/sd (see the digest).

/// z of a two-sided 90% interval of a normal distribution.
pub const Z90: f64 = 1.644_853_626_951_472_2;

/// The 90% interval of a value with `mean` and standard deviation `sd`, clipped at 0 (times
/// are never negative).
pub fn interval90(mean: f64, sd: f64) -> (f64, f64) {
    ((mean - Z90 * sd).max(0.0), mean + Z90 * sd)
}

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
        interval90(self.mean, self.sd)
    }

    /// The later of two independent values, by Clark's moments of the maximum of two normals
    /// (Clark 1961): a synchronised step waits for its slowest part, and with spreads that
    /// wait is longer than the slowest mean, the more so the closer the parts are.
    pub fn max_with(self, other: Stoch) -> Stoch {
        let a = self.sd.hypot(other.sd);
        if a <= 0.0 || !self.mean.is_finite() || !other.mean.is_finite() {
            return if self.mean >= other.mean { self } else { other };
        }
        let alpha = (self.mean - other.mean) / a;
        let (cdf, cdf_other) = (normal_cdf(alpha), normal_cdf(-alpha));
        let pdf = (-0.5 * alpha * alpha).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let mean = self.mean * cdf + other.mean * cdf_other + a * pdf;
        let second = (self.mean.powi(2) + self.sd.powi(2)) * cdf
            + (other.mean.powi(2) + other.sd.powi(2)) * cdf_other
            + (self.mean + other.mean) * a * pdf;
        Stoch::new(mean, (second - mean * mean).max(0.0).sqrt())
    }
}

/// The latest of independent values ([`Stoch::max_with`] folded in turn); nothing gives 0.
pub fn latest(values: impl IntoIterator<Item = Stoch>) -> Stoch {
    values
        .into_iter()
        .reduce(Stoch::max_with)
        .unwrap_or_default()
}

fn normal_cdf(x: f64) -> f64 {
    0.5 * statrs::function::erf::erfc(-x / std::f64::consts::SQRT_2)
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
    fn the_latest_of_close_spread_values_is_later_than_either_mean() {
        // Two equal normals: E[max] = μ + σ/√π, and the spread shrinks to σ·√(1 − 1/π).
        let x = Stoch::new(0.1, 0.02);
        let m = x.max_with(x);
        assert!(close(m.mean, 0.1 + 0.02 / std::f64::consts::PI.sqrt()));
        assert!(close(
            m.sd,
            0.02 * (1.0 - 1.0 / std::f64::consts::PI).sqrt()
        ));
        // Far apart, the later one stands; known exactly, the larger.
        let far = Stoch::new(1.0, 0.01).max_with(Stoch::new(0.1, 0.01));
        assert!((far.mean - 1.0).abs() < 1e-9 && (far.sd - 0.01).abs() < 1e-9);
        assert_eq!(
            Stoch::point(2.0).max_with(Stoch::point(3.0)),
            Stoch::point(3.0)
        );
        // Four like parts wait about 1.03 σ past their mean (the normal's expected maximum
        // of four), to within Clark's pairwise approximation.
        let four = latest([x; 4]);
        assert!((four.mean - (0.1 + 1.029 * 0.02)).abs() < 0.002, "{four:?}");
        assert_eq!(latest([]), Stoch::default());
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
