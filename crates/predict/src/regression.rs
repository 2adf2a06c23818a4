//! Regression models of quiet-host kernel time (seed 001, Sanjay & Vadhiyar): a handful of
//! candidate functions of the call's work (or, for a service without a complexity formula, of
//! its first size parameter) are fitted by least squares to every real run, ranked by standard
//! error after every run, and the best one predicts. No single function family is right for
//! every kernel, and which one fits best changes as runs accumulate; re-ranking lets the model
//! follow that without anyone choosing a formula.
//!
//! Times come in already divided by CPU availability (seed 001 takes f_cpu as the identity), so
//! the fits describe the host when quiet and the load enters at prediction time.
//!
//! The agent refits on every completed call, on the thread that ranks calls, so a refit must
//! not cost a least-squares pass over every kept run (tens of microseconds per candidate, once
//! most of the agent's time per call). The runs are kept in blocks of 64, each holding the
//! triangular factor of its own QR, updated by a Givens rotation per arriving run; a refit is a
//! Householder QR of the blocks' stacked factors (at most nine blocks of at most four rows):
//! the same solution and residual as a QR of the runs themselves, in a few hundred flops.

use crate::stoch::Stoch;
use std::collections::VecDeque;

/// Runs kept, the newest (`KEPT` to `KEPT + BLOCK - 1` of them: the oldest block goes
/// whole): the fit follows the host as it is now.
const KEPT: usize = 512;
/// Runs per block of the incremental fit.
const BLOCK: usize = 64;
/// Fewest runs a prediction is made from.
const MIN_RUNS: usize = 3;
/// Candidates rank by SE·(1 + k·p/(N−p)). Seed 001 ranks by the plain SE (k = 0), which admits
/// an extra coefficient whenever it explains more than one noise variance (F > 1): a useless
/// term wins about one time in four. k = 1.5 asks for F > 4, roughly a 5% test.
const PARSIMONY: f64 = 1.5;
/// A candidate whose SE exceeds the best's this many times, `DROP_AFTER` refits in a row, is
/// dropped. Seed 001 drops the lowest rank decile after 5; with 3–4 candidates that decile is
/// always the last one, and a rank rule would whittle every set down to one whatever the fits.
const DROP_FACTOR: f64 = 3.0;
const DROP_AFTER: u32 = 10;
/// Runs before candidates are judged: on a few points any SE ratio looks dramatic.
const MIN_JUDGED: usize = 8;
/// Dropped candidates return every this many runs (seed 001 revisits its full set every 50
/// predictions): a family dropped under old conditions may win under new ones.
const REVISIT_EVERY: u64 = 50;
/// Own runs after which a scaled model stops borrowing.
const OWN_ENOUGH: usize = 8;
/// SEs under this fraction of the mean time are rounding noise: their ratios mean nothing.
const NEGLIGIBLE: f64 = 1e-6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Basis {
    Work,
    Size,
}

/// Basis functions at x, and how many there are.
type Terms = fn(f64) -> ([f64; 4], usize);

/// The candidates: formula, the variable it is of, basis functions.
const FAMILIES: [(&str, Basis, Terms); 7] = [
    ("c1·w", Basis::Work, |x| ([x, 0.0, 0.0, 0.0], 1)),
    ("c0 + c1·w", Basis::Work, |x| ([1.0, x, 0.0, 0.0], 2)),
    // w^(2/3): the n² memory traffic of an n³ kernel.
    ("c0 + c1·w + c2·w^(2/3)", Basis::Work, |x| {
        ([1.0, x, x.cbrt().powi(2), 0.0], 3)
    }),
    ("c0 + c1·n", Basis::Size, |x| ([1.0, x, 0.0, 0.0], 2)),
    ("c0 + c1·n + c2·n²", Basis::Size, |x| {
        ([1.0, x, x * x, 0.0], 3)
    }),
    ("c0 + c1·n + c2·n² + c3·n³", Basis::Size, |x| {
        ([1.0, x, x * x, x * x * x], 4)
    }),
    ("c0 + c1·n·log2(n)", Basis::Size, |x| {
        ([1.0, x * x.log2(), 0.0, 0.0], 2)
    }),
];

fn families(basis: Basis) -> impl Iterator<Item = usize> {
    (0..FAMILIES.len()).filter(move |&f| FAMILIES[f].1 == basis)
}

/// One candidate function family, t(x) = Σ c_i · f_i(x) over basis functions of the call's work
/// w or, when the service has no complexity, of its first size parameter n, as last fitted.
#[derive(Clone, Debug, PartialEq)]
pub struct RegressionFit {
    /// The formula, e.g. `c0 + c1·w`.
    pub name: &'static str,
    /// c0, c1, … in the formula's units (seconds per operation, …); empty when the runs do not
    /// determine them (too few, or too few distinct sizes).
    pub coefficients: Vec<f64>,
    /// sqrt(RSS / (N − p)), seconds; infinite when not fitted.
    pub standard_error: f64,
    /// N, the runs fitted.
    pub observations: usize,
    family: usize, // index in FAMILIES
    // Column scales and the p×p triangular factor (row-major) of the scaled design, kept for
    // the leverage of a prediction point.
    scales: Vec<f64>,
    r: Vec<f64>,
    strikes: u32,
    // The factors of the kept runs, oldest block first.
    blocks: VecDeque<Block>,
}

/// The least-squares state of consecutive runs in one family's basis: the upper-triangular R
/// (row-major, p×p within 4×4) and Qᵀy of their QR, the residual sum of squares that QR
/// leaves, each column's largest magnitude (for the scaling of the combined fit), the runs.
#[derive(Clone, Debug, PartialEq)]
struct Block {
    r: [f64; 16],
    qty: [f64; 4],
    rss: f64,
    max: [f64; 4],
    rows: usize,
}

impl Block {
    fn new() -> Self {
        Block {
            r: [0.0; 16],
            qty: [0.0; 4],
            rss: 0.0,
            max: [0.0; 4],
            rows: 0,
        }
    }

    /// Rotates the row (f, y) into the factor: R and Qᵀy absorb it, and what the rotations
    /// leave of y is its residual.
    fn add(&mut self, (mut f, p): ([f64; 4], usize), mut y: f64) {
        self.rows += 1;
        for (m, v) in self.max.iter_mut().zip(&f).take(p) {
            *m = m.max(v.abs());
        }
        for k in 0..p {
            if f[k] == 0.0 {
                continue;
            }
            let rkk = self.r[k * 4 + k];
            let rho = rkk.hypot(f[k]);
            let (c, s) = (rkk / rho, f[k] / rho);
            let row = &mut self.r[k * 4 + k..k * 4 + p];
            for (a, b) in row.iter_mut().zip(&mut f[k..p]) {
                (*a, *b) = (c * *a + s * *b, c * *b - s * *a);
            }
            let q = self.qty[k];
            self.qty[k] = c * q + s * y;
            y = c * y - s * q;
        }
        self.rss += y * y;
    }
}

impl RegressionFit {
    fn new(family: usize) -> Self {
        RegressionFit {
            name: FAMILIES[family].0,
            coefficients: Vec::new(),
            standard_error: f64::INFINITY,
            observations: 0,
            family,
            scales: Vec::new(),
            r: Vec::new(),
            strikes: 0,
            blocks: VecDeque::new(),
        }
    }

    /// A candidate fitted to `runs`, cut into blocks as `rows` says (the model's partition, so
    /// that every candidate drops the same runs).
    fn over(family: usize, runs: &VecDeque<(f64, f64)>, rows: &VecDeque<usize>) -> Self {
        let mut fit = RegressionFit::new(family);
        let mut at = runs.iter();
        for &n in rows {
            let mut b = Block::new();
            for &(x, y) in at.by_ref().take(n) {
                b.add(fit.terms(x), y);
            }
            fit.blocks.push_back(b);
        }
        fit.solve();
        fit
    }

    /// Adds a run, opening a new block first if `new_block`.
    fn add(&mut self, (x, y): (f64, f64), new_block: bool) {
        if new_block || self.blocks.is_empty() {
            self.blocks.push_back(Block::new());
        }
        let terms = self.terms(x);
        if let Some(b) = self.blocks.back_mut() {
            b.add(terms, y);
        }
    }

    fn terms(&self, x: f64) -> ([f64; 4], usize) {
        FAMILIES[self.family].2(x)
    }

    fn ready(&self) -> bool {
        self.standard_error.is_finite() && self.observations >= MIN_RUNS
    }

    fn score(&self) -> f64 {
        if !self.standard_error.is_finite() {
            return f64::INFINITY;
        }
        let (n, p) = (self.observations as f64, self.terms(1.0).1 as f64);
        self.standard_error * (1.0 + PARSIMONY * p / (n - p))
    }

    /// Least squares over the kept runs by Householder QR of the blocks' stacked factors.
    /// Columns are scaled to a largest value of 1 first, so a 1e12-operation work sits next to
    /// the constant column without wrecking the conditioning (scaling a column of the runs
    /// scales the same column of every factor).
    fn solve(&mut self) {
        let p = self.terms(1.0).1;
        let blocks = std::mem::take(&mut self.blocks);
        let n: usize = blocks.iter().map(|b| b.rows).sum();
        *self = RegressionFit {
            observations: n,
            strikes: self.strikes,
            ..RegressionFit::new(self.family)
        };
        self.fit_factors(&blocks, n, p);
        self.blocks = blocks;
    }

    fn fit_factors(&mut self, blocks: &VecDeque<Block>, n: usize, p: usize) {
        if n <= p {
            return;
        }
        let mut scales = vec![0.0f64; p];
        for b in blocks {
            for (s, m) in scales.iter_mut().zip(&b.max) {
                *s = s.max(*m);
            }
        }
        if scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return;
        }
        // The stacked factors: one row per (block, row of its R), column-major.
        let m = blocks.len() * p;
        let mut a = vec![0.0; m * p];
        let mut y = Vec::with_capacity(m);
        for (bi, b) in blocks.iter().enumerate() {
            for i in 0..p {
                for j in 0..p {
                    a[j * m + bi * p + i] = b.r[i * 4 + j] / scales[j];
                }
                y.push(b.qty[i]);
            }
        }
        let mut r = vec![0.0; p * p];
        let mut v = Vec::with_capacity(m);
        for k in 0..p {
            let col = &mut a[k * m..(k + 1) * m];
            // Reflections keep the whole column's norm: this is the scaled column's own.
            let norm = col.iter().map(|c| c * c).sum::<f64>().sqrt();
            let rest = col[k..].iter().map(|c| c * c).sum::<f64>().sqrt();
            // What is left of the column once the earlier ones are projected out: (next to)
            // nothing means the runs cannot tell this term from the others.
            if rest <= 1e-9 * norm {
                return;
            }
            let alpha = if col[k] > 0.0 { -rest } else { rest };
            v.clear();
            v.extend_from_slice(&col[k..]);
            v[0] -= alpha;
            let vv: f64 = v.iter().map(|e| e * e).sum();
            let reflect = |c: &mut [f64]| {
                let s = 2.0 * v.iter().zip(&*c).map(|(a, b)| a * b).sum::<f64>() / vv;
                c.iter_mut().zip(&v).for_each(|(c, e)| *c -= s * e);
            };
            for j in k + 1..p {
                reflect(&mut a[j * m + k..(j + 1) * m]);
                r[k * p + j] = a[j * m + k];
            }
            reflect(&mut y[k..]);
            r[k * p + k] = alpha;
        }
        let mut c = vec![0.0; p];
        for i in (0..p).rev() {
            let s: f64 = (i + 1..p).map(|j| r[i * p + j] * c[j]).sum();
            c[i] = (y[i] - s) / r[i * p + i];
        }
        let rss: f64 =
            blocks.iter().map(|b| b.rss).sum::<f64>() + y[p..].iter().map(|e| e * e).sum::<f64>();
        self.coefficients = c.iter().zip(&scales).map(|(c, s)| c / s).collect();
        self.standard_error = (rss / (n - p) as f64).sqrt();
        self.scales = scales;
        self.r = r;
    }

    fn value(&self, x: f64) -> f64 {
        let (f, _) = self.terms(x);
        self.coefficients.iter().zip(f).map(|(c, f)| c * f).sum()
    }

    /// x0ᵀ(XᵀX)⁻¹x0 in the scaled columns, = |R⁻ᵀx0|²: small inside the fitted range, growing
    /// as the point leaves it.
    fn leverage(&self, x: f64) -> f64 {
        let (f, p) = self.terms(x);
        let mut z = [0.0; 4];
        for i in 0..p {
            let s: f64 = (0..i).map(|k| self.r[k * p + i] * z[k]).sum();
            z[i] = (f[i] / self.scales[i] - s) / self.r[i * p + i];
        }
        z.iter().map(|e| e * e).sum()
    }
}

/// Regression models of one service's quiet-host time on one server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RegressionModel {
    // Fixed by the first run: a service either has a complexity formula or it does not.
    basis: Option<Basis>,
    runs: VecDeque<(f64, f64)>,
    // Runs per block, oldest first: the same partition for every candidate.
    rows: VecDeque<usize>,
    live: Vec<RegressionFit>,
    refits: u64,
    // Another server's model and the ratio of dedicated times, used until this one's own runs
    // are enough (see `scaled_from`).
    borrowed: Option<(Box<RegressionModel>, f64)>,
    // The smallest and largest input among `runs`.
    seen: Option<(f64, f64)>,
}

/// A fit predicts only within this factor of the inputs its runs saw (above the largest,
/// below the smallest): past that no run tested its terms, and which family "fits best" says
/// nothing there. A service timed only at n = 1, where a call is all overhead, had `c1·w`
/// fitted through those runs and predicted 3.3–3.8 s at n = 250,000, where the calibrated
/// rate the compute model falls back to said 0.31–0.63 s, as the calls then took; the graph
/// mapper kept the call off every server that had not run it at size.
pub const REACH: f64 = 10.0;

impl RegressionModel {
    /// Records one real run: the call's work (`None` when the service has no complexity), its
    /// sizes, and its kernel time on a quiet host, seconds. Refits and re-ranks every live
    /// candidate, since one run can change which family fits best. Nonsense (a time that is
    /// not finite and positive, a work that is not finite and ≥ 0, no usable work or size) is
    /// ignored: one broken measurement must not poison the fits.
    pub fn observe(&mut self, work: Option<f64>, size: &[i64], quiet_s: f64) {
        if !(quiet_s.is_finite() && quiet_s > 0.0)
            || work.is_some_and(|w| !(w >= 0.0 && w.is_finite()))
        {
            return;
        }
        let basis = self
            .basis
            .unwrap_or(work.map_or(Basis::Size, |_| Basis::Work));
        let Some(x) = input(basis, work, size) else {
            return;
        };
        if self.basis.is_none() {
            self.basis = Some(basis);
            self.live = families(basis).map(RegressionFit::new).collect();
        }
        let new_block = self.rows.back().is_none_or(|&n| n == BLOCK);
        if new_block {
            self.rows.push_back(0);
        }
        if let Some(n) = self.rows.back_mut() {
            *n += 1;
        }
        self.runs.push_back((x, quiet_s));
        self.seen = Some(self.seen.map_or((x, x), |(lo, hi)| (lo.min(x), hi.max(x))));
        for f in &mut self.live {
            f.add((x, quiet_s), new_block);
        }
        if let Some(&oldest) = self.rows.front()
            && self.runs.len() - oldest >= KEPT
        {
            self.rows.pop_front();
            self.runs.drain(..oldest);
            for f in &mut self.live {
                f.blocks.pop_front();
            }
            self.seen = self.runs.iter().fold(None, |r, &(x, _)| {
                Some(r.map_or((x, x), |(lo, hi): (f64, f64)| (lo.min(x), hi.max(x))))
            });
        }
        self.refits += 1;
        if self.refits % REVISIT_EVERY == 0 {
            for f in families(basis) {
                if !self.live.iter().any(|l| l.family == f) {
                    self.live
                        .push(RegressionFit::over(f, &self.runs, &self.rows));
                }
            }
        }
        self.refit();
        if self.runs.len() >= OWN_ENOUGH && self.best().is_some_and(RegressionFit::ready) {
            self.borrowed = None;
        }
    }

    fn refit(&mut self) {
        for f in &mut self.live {
            f.solve();
        }
        // Stable: on a tie (e.g. nothing fitted yet) the simpler family stays first.
        self.live.sort_by(|a, b| a.score().total_cmp(&b.score()));
        let Some(best) = self.live.first().filter(|b| b.ready()) else {
            return;
        };
        if self.runs.len() < MIN_JUDGED {
            return;
        }
        let mean = self.runs.iter().map(|r| r.1).sum::<f64>() / self.runs.len() as f64;
        let bar = DROP_FACTOR * best.standard_error.max(NEGLIGIBLE * mean);
        for f in &mut self.live[1..] {
            // An unfitted candidate is undetermined, not bad: it keeps its strikes.
            if f.standard_error.is_finite() {
                let bad = f.standard_error > bar;
                f.strikes = if bad { f.strikes + 1 } else { 0 };
            }
        }
        // The best is never struck, so the live set never empties.
        self.live.retain(|f| f.strikes < DROP_AFTER);
    }

    /// Predicted quiet-host time: the best candidate's value, its spread the standard error of
    /// a new run there, SE·sqrt(1 + leverage), so it widens when extrapolating. `None` until
    /// the best candidate has at least 3 runs and more runs than coefficients, when the input
    /// its basis needs is missing, or where it predicts a non-positive time (a candidate that
    /// does that knows nothing useful there), or farther than [`REACH`] from the inputs its
    /// runs saw.
    pub fn predict(&self, work: Option<f64>, size: &[i64]) -> Option<Stoch> {
        if let Some((reference, ratio)) = &self.borrowed
            && let Some(t) = reference.predict(work, size)
        {
            return Some(t.scale(*ratio));
        }
        let x = input(self.basis?, work, size)?;
        let (lo, hi) = self.seen?;
        if x > hi * REACH || x < lo / REACH {
            return None;
        }
        let best = self.live.first().filter(|b| b.ready())?;
        let mean = best.value(x);
        if !(mean.is_finite() && mean > 0.0) {
            return None;
        }
        let h = best.leverage(x);
        let h = if h.is_finite() { h } else { 0.0 };
        Some(Stoch::new(mean, best.standard_error * (1.0 + h).sqrt()))
    }

    /// The candidate that predicts: the first live one, if its own runs fitted it.
    pub fn best(&self) -> Option<&RegressionFit> {
        self.live.first().filter(|b| b.standard_error.is_finite())
    }

    /// The live candidates, best first.
    pub fn fits(&self) -> &[RegressionFit] {
        &self.live
    }

    /// Own runs kept (borrowed ones not counted).
    pub fn observations(&self) -> usize {
        self.runs.len()
    }

    /// A model for a new server from a reference server's (seed 001, Eq. 3): every prediction
    /// of the reference, as it is now, multiplied by `ratio` = new server's dedicated time ÷
    /// reference's on a common benchmark, so the new server is predicted before it has run
    /// anything. Its own runs are fitted from the first one; once there are 8 of them and the
    /// own best candidate can predict, the borrowed model is dropped and the own one predicts.
    /// A ratio that is not finite and positive borrows nothing.
    pub fn scaled_from(reference: &RegressionModel, ratio: f64) -> RegressionModel {
        RegressionModel {
            borrowed: (ratio.is_finite() && ratio > 0.0)
                .then(|| (Box::new(reference.clone()), ratio)),
            ..RegressionModel::default()
        }
    }
}

/// The variable a basis is a function of: the work, or the first size parameter.
fn input(basis: Basis, work: Option<f64>, size: &[i64]) -> Option<f64> {
    match basis {
        Basis::Work => work.filter(|w| w.is_finite() && *w >= 0.0),
        Basis::Size => size.first().filter(|n| **n > 0).map(|&n| n as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic draws: (uniform in [0, 1), about standard normal).
    fn rng(seed: u64) -> impl FnMut() -> (f64, f64) {
        let mut x = seed.wrapping_mul(6364136223846793005) | 1;
        let mut u = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        move || (u(), (0..12).map(|_| u()).sum::<f64>() - 6.0)
    }

    fn within(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    /// Runs of t = 0.01 s + 2e-9 s·w, w in [1e6, 5e7), with 5% relative noise.
    fn affine(seed: u64, runs: usize) -> RegressionModel {
        let (mut r, mut m) = (rng(seed), RegressionModel::default());
        for _ in 0..runs {
            let ((u, _), (_, g)) = (r(), r());
            let w = 1e6 + u * 4.9e7;
            m.observe(Some(w), &[], (0.01 + 2e-9 * w) * (1.0 + 0.05 * g));
        }
        m
    }

    #[test]
    fn overhead_plus_work_is_found_and_the_spread_widens_away_from_the_runs() {
        let m = affine(1, 400);
        let best = m.best().unwrap();
        assert_eq!(best.name, "c0 + c1·w", "{:?}", m.fits());
        let c = &best.coefficients;
        assert!(within(c[0], 0.01, 0.1) && within(c[1], 2e-9, 0.1), "{c:?}");
        let (inside, far) = (
            m.predict(Some(3e7), &[]).unwrap(),
            m.predict(Some(4.5e8), &[]).unwrap(),
        );
        assert!(
            within(inside.mean, 0.07, 0.05) && inside.sd > 0.0,
            "{inside:?}"
        );
        assert!(far.sd > 1.5 * inside.sd, "{inside:?} {far:?}");
    }

    #[test]
    fn nothing_is_predicted_far_from_the_runs() {
        // Timed only at n = 1, where a call is all overhead: c1·w through those runs would put
        // n = 250,000 at 25 s.
        let mut m = RegressionModel::default();
        for i in 0..20 {
            m.observe(Some(1.0), &[1], 1e-4 * (1.0 + 0.1 * (i % 5) as f64));
        }
        assert!(m.predict(Some(1.0), &[1]).is_some());
        assert!(m.predict(Some(REACH), &[]).is_some());
        assert_eq!(m.predict(Some(250_000.0), &[250_000]), None);
        // Below the runs too; and once a run at size is in, it reaches there.
        let a = affine(4, 50);
        assert_eq!(a.predict(Some(1e4), &[]), None);
        m.observe(Some(250_000.0), &[250_000], 0.3125);
        assert!(m.predict(Some(250_000.0), &[250_000]).is_some());
        // A borrowed model reaches as far as its reference does.
        let scaled = RegressionModel::scaled_from(&affine(5, 50), 2.0);
        assert!(scaled.predict(Some(3e7), &[]).is_some());
        assert_eq!(scaled.predict(Some(1e10), &[]), None);
    }

    #[test]
    fn pure_work_is_proportional_even_at_a_trillion_operations() {
        let (mut r, mut m) = (rng(2), RegressionModel::default());
        for _ in 0..100 {
            let w = 1e9 + r().0 * 1e12;
            m.observe(Some(w), &[], 3e-10 * w);
        }
        let best = m.best().unwrap();
        assert!(
            best.name == "c1·w" || best.coefficients[0].abs() < 1e-6,
            "{best:?}"
        );
        for w in [5e9, 7.7e11, 3e12] {
            let t = m.predict(Some(w), &[]).unwrap().mean;
            assert!(within(t, 3e-10 * w, 0.01), "{w}: {t}");
        }
    }

    #[test]
    fn without_work_a_quadratic_size_law_is_found() {
        let (mut r, mut m) = (rng(3), RegressionModel::default());
        let law = |n: f64| 1e-6 * n * n + 0.001;
        for n in (20..=1000).step_by(20).filter(|&n| n != 500) {
            m.observe(None, &[n, 7], law(n as f64) * (1.0 + 0.02 * r().1));
        }
        assert!(m.best().unwrap().name.contains("n²"), "{:?}", m.fits());
        let t = m.predict(None, &[510]).unwrap().mean;
        assert!(within(t, law(510.0), 0.05), "{t}");
        // The basis is the size: a work given later is not what it reads.
        assert_eq!(m.predict(Some(1.0), &[510]).unwrap().mean, t);
        assert_eq!(m.predict(Some(1.0), &[]), None);
    }

    #[test]
    fn a_persistently_bad_candidate_is_dropped_and_revisited() {
        let (mut r, mut m) = (rng(4), RegressionModel::default());
        for run in 1..=50 {
            let ((u, _), (_, g)) = (r(), r());
            let w = 1e6 + u * 1e9;
            m.observe(Some(w), &[], (1.0 + 1e-9 * w) * (1.0 + 0.01 * g));
            // Struck on runs 8..=17, gone after the tenth strike, back at the revisit.
            let expected = !(MIN_JUDGED + DROP_AFTER as usize - 1..50).contains(&run);
            let live = m.fits().iter().any(|f| f.name == "c1·w");
            assert_eq!(live, expected, "run {run}: {:?}", m.fits());
        }
        assert_eq!(m.best().unwrap().name, "c0 + c1·w");
    }

    #[test]
    fn a_scaled_model_borrows_until_its_own_runs_suffice() {
        let reference = affine(5, 100);
        let mut m = RegressionModel::scaled_from(&reference, 2.0);
        let at = |m: &RegressionModel| m.predict(Some(2e7), &[]).unwrap();
        assert_eq!(
            at(&m),
            reference.predict(Some(2e7), &[]).unwrap().scale(2.0)
        );
        assert!(within(at(&m).mean, 2.0 * 0.05, 0.05));
        // The new server is really 3× slower: its own runs take over once there are enough.
        for run in 1..=OWN_ENOUGH {
            let w = 1e6 * (run * run) as f64;
            m.observe(Some(w), &[], 3.0 * (0.01 + 2e-9 * w));
            assert_eq!(
                within(at(&m).mean, 0.1, 0.05),
                run < OWN_ENOUGH,
                "run {run}"
            );
        }
        assert!(within(at(&m).mean, 0.15, 1e-6));
        let nothing = RegressionModel::scaled_from(&reference, f64::NAN);
        assert_eq!(nothing, RegressionModel::default());
    }

    #[test]
    fn junk_is_ignored_and_the_store_is_bounded() {
        let mut m = RegressionModel::default();
        for t in [f64::NAN, 0.0, -1.0, f64::INFINITY] {
            m.observe(Some(1e6), &[10], t);
        }
        for w in [f64::NAN, -1.0, f64::INFINITY] {
            m.observe(Some(w), &[10], 1.0);
        }
        for size in [&[][..], &[0], &[-5]] {
            m.observe(None, size, 1.0);
        }
        assert_eq!(m, RegressionModel::default());
        m.observe(Some(1e6), &[], 1.0);
        m.observe(None, &[10], 1.0); // a work model has no use for a run without work
        assert_eq!(m.observations(), 1);
        for i in 0..600 {
            let w = 1e6 * (1 + i % 7) as f64;
            m.observe(Some(w), &[], 1e-12 * w);
        }
        assert!((KEPT..KEPT + BLOCK).contains(&m.observations()));
        assert_eq!(m.predict(Some(f64::NAN), &[]), None);
    }

    #[test]
    fn the_kept_runs_fit_as_if_they_were_the_only_ones() {
        // A window that slid over 1,000 runs, against a model that saw only the runs it kept
        // (cut into other blocks): the same fits, to rounding.
        let (mut r, mut slid, mut fresh) = (
            rng(6),
            RegressionModel::default(),
            RegressionModel::default(),
        );
        let runs: Vec<(f64, f64)> = (0..1000)
            .map(|_| {
                let ((u, _), (_, g)) = (r(), r());
                let w = 1e6 + u * 1e9;
                (
                    w,
                    (0.02 + 3e-9 * w + 1e-6 * w.cbrt().powi(2)) * (1.0 + 0.03 * g),
                )
            })
            .collect();
        for &(w, t) in &runs {
            slid.observe(Some(w), &[], t);
        }
        for &(w, t) in &runs[runs.len() - slid.observations()..] {
            fresh.observe(Some(w), &[], t);
        }
        for f in slid.fits() {
            let g = fresh.fits().iter().find(|g| g.name == f.name).unwrap();
            assert_eq!(f.observations, g.observations);
            assert!(
                within(f.standard_error, g.standard_error, 1e-9),
                "{f:?} {g:?}"
            );
            for (a, b) in f.coefficients.iter().zip(&g.coefficients) {
                assert!(within(*a, *b, 1e-6), "{f:?} {g:?}");
            }
        }
    }

    #[test]
    fn no_prediction_from_too_few_runs() {
        let mut m = RegressionModel::default();
        for (i, w) in [1e6, 2e6, 4e6].into_iter().enumerate() {
            assert_eq!(m.predict(Some(3e6), &[]), None, "after {i} runs");
            m.observe(Some(w), &[], 1e-9 * w);
        }
        assert!(within(m.predict(Some(3e6), &[]).unwrap().mean, 3e-3, 1e-9));
        // Three sizes suffice for the size families with fewer coefficients than runs...
        let (mut sized, mut flat) = (RegressionModel::default(), RegressionModel::default());
        for n in [10, 20, 40] {
            sized.observe(None, &[n], 0.5 + 0.01 * n as f64);
            flat.observe(None, &[100], 0.5 + 0.01 * n as f64);
        }
        assert!(within(sized.predict(None, &[30]).unwrap().mean, 0.8, 1e-6));
        // ...but runs at one size cannot tell an intercept from a trend.
        assert_eq!(flat.predict(None, &[100]), None);
    }
}
