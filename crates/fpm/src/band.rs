//! Band performance model: load → availability → loaded time → speed band, detailed band (pdf)
//! and the adjusted FPM vertex value (Higgins 2010, §2.1.2–2.1.3, §2.2.4, §2.3.2; digest 003
//! §1.3, §1.4, §1.5 d, §1.7).
//!
//! One FPM vertex at a time: the caller gives the ideal (unloaded) speed `S_i` and the work
//! `C(x)` of the vertex, so `T_i = C/S_i`. A task that adds one runnable process to a CPU with
//! load `l` gets availability `a(l) = 1/(1+l)` and takes `T'(l) = T_i·(1+l)`. Because the load a
//! task sees depends on how long it runs, the loaded time is the fixed point
//! `t* = T_i·(1 + l(t*))`, found against `l_min` and `l_max` for the simple band, and against
//! every load average of the relevant rows of LA for the detailed band.
//!
//! # Decisions where the thesis is silent or inconsistent (\[gap\])
//! - **Root selection.** The loaded time is the smallest `t ≥ T_i` where
//!   `f(t) = t − T_i(1+l(t))` reaches ≥ 0 (`f(T_i) ≤ 0` always). For the piecewise-linear
//!   [`LoadFunctions`] it is found exactly, segment by segment (the thesis's geometric
//!   intersection); for an arbitrary closure ([`loaded_time`]) by a scan of 64 steps per doubling
//!   of t followed by bisection, so two crossings closer than ~1.5 % of t can be missed.
//! - **Unbounded load.** If no root exists below `2^64·T_i` (load ≥ ~1.8e19 or infinite), the
//!   loaded time is `+∞` and the speed 0.
//! - **Outside [Δ, wΔ].** Load functions are flat there (see [`crate::load`]); consistently, the
//!   detailed band treats the column `[0, Δ)` as horizontal segments at the row-1 averages and
//!   the column `[wΔ, ∞)` as horizontal segments at the row-w averages, and uses row 1 when the
//!   thesis's `⌊T_min/Δ⌋` is 0.
//! - **`l_max(δ) = l_min(δ)`** (zero band width, the thesis's division by zero): every average of
//!   that row is equal, and its projection B is put at the *middle* of the band at δ+1.
//! - **Double counting.** Each column is half-open `[δΔ, (δ+1)Δ)`, so a crossing exactly at a
//!   period boundary is counted once.
//! - **No crossing at all** (possible only through rounding or the zero-width rule): the detailed
//!   band falls back to the two simple-band ends `{S_min, S_max}`.
//! - **Clamping.** Crossings are clamped into `[T_min, T_max]`; in exact arithmetic they already
//!   lie there, so this only guards rounding and keeps the pdf inside the simple band.
//! - **Histogram.** Bins span the simple band `[S_min, S_max]` in equal widths; `bins = 0` means
//!   Sturges' rule `⌈log2 n⌉ + 1`. A zero-width band is one zero-width bin of probability 1.
//! - **Adjusted FPM (Ch.2 vs Ch.4).** Ch.2 defines the adjusted vertex as the *mean of the
//!   detailed-band predictions* (the raw predictions, not the histogram), Ch.4's PMM uses the
//!   *midpoint* of `S_min` and `S_max`; both are offered through [`AdjustMode`], default
//!   [`AdjustMode::DetailedMean`].
//! - **Simulated (future) time.** The thesis intersects `T'` with the *amalgamated average*
//!   future load and claims this equals Dinda's integral `∫₀ᵗ a(l(τ))dτ = T_i`. It does not:
//!   `1/(1+avg l) ≠ avg 1/(1+l)`. Because `a` is convex, Jensen gives
//!   `avg a(l) ≥ a(avg l)`: under a fluctuating load the integral form is usually faster, and it is never
//!   slower when its run ends on a sample boundary (property-tested); at constant load they agree.
//!   Both are offered: [`loaded_time_integral`] (principled; the trace is sample-and-hold and its
//!   last value persists) and [`loaded_time_amalgamated`] (the thesis's form).
//! - **Bad load values.** A negative or NaN load is read as 0 (availability ≤ 1); a non-positive
//!   or NaN ideal time gives loaded time 0; a non-positive or NaN ideal speed gives speed 0.
//! - **Multi-core** (digest §5.2 item 2): `a = 1/(1+l)` assumes one core. [`effective_load`]
//!   maps a c-core load to the single-core load with the same availability `min(1, c/(1+l))`;
//!   apply it to the samples before building the history.

use serde::{Deserialize, Serialize};

use crate::load::{LoadAverageMatrix, LoadFunctions};

/// Fair-share CPU availability for one extra single-threaded task on a CPU with load `l`.
pub fn availability(l: f64) -> f64 {
    1.0 / (1.0 + sanitize_load(l))
}

/// Single-core-equivalent load of load `l` on `cores` cores: `max(0, (1+l)/c − 1)`.
///
/// Its availability `1/(1+l_eff)` equals `min(1, c/(1+l))`. The map is convex, so averaging
/// transformed samples (what LA does if you transform before pushing) differs from
/// transforming averages; transforming samples is the intended use.
pub fn effective_load(l: f64, cores: u32) -> f64 {
    let c = f64::from(cores.max(1));
    ((1.0 + sanitize_load(l)) / c - 1.0).max(0.0)
}

/// `x > 0`, false for NaN (the guard every entry point uses for times and speeds).
fn is_positive(x: f64) -> bool {
    x > 0.0
}

/// Negative or NaN loads read as zero load (keeps availability in (0, 1]).
fn sanitize_load(l: f64) -> f64 {
    if l.is_nan() { 0.0 } else { l.max(0.0) }
}

/// Steps per doubling of t in the generic scan of [`loaded_time`].
const SCAN_STEPS: u32 = 64;
/// Doublings of t before [`loaded_time`] gives up and reports `+∞`.
const MAX_DOUBLINGS: u32 = 64;

/// Loaded time for an arbitrary load function: smallest `t ≥ t_ideal` with `t ≥ t_ideal(1+l(t))`.
///
/// `load_fn(t)` is the expected load over a run of `t` seconds. See the module docs for the
/// scan-and-bisect method, its resolution and the `+∞` result for unbounded load.
pub fn loaded_time(t_ideal: f64, load_fn: impl Fn(f64) -> f64) -> f64 {
    if !is_positive(t_ideal) {
        return 0.0;
    }
    if !t_ideal.is_finite() {
        return f64::INFINITY;
    }
    let f = |t: f64| t - t_ideal * (1.0 + sanitize_load(load_fn(t)));
    if f(t_ideal) >= 0.0 {
        return t_ideal;
    }
    // Scan forward so the *first* crossing is found even when f is not monotone; then bisect.
    let mut prev = t_ideal;
    let mut seg_lo = t_ideal;
    for _ in 0..MAX_DOUBLINGS {
        let seg_hi = seg_lo * 2.0;
        let step = (seg_hi - seg_lo) / f64::from(SCAN_STEPS);
        for k in 1..=SCAN_STEPS {
            let t = if k == SCAN_STEPS {
                seg_hi
            } else {
                seg_lo + step * f64::from(k)
            };
            if f(t) >= 0.0 {
                return bisect_first_nonneg(&f, prev, t);
            }
            prev = t;
        }
        seg_lo = seg_hi;
    }
    f64::INFINITY
}

/// Bisection on `[lo, hi]` with `f(lo) < 0 ≤ f(hi)`; returns a point where `f ≥ 0`.
fn bisect_first_nonneg(f: &impl Fn(f64) -> f64, mut lo: f64, mut hi: f64) -> f64 {
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if f(mid) >= 0.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// Exact loaded time against a piecewise-linear load function given by its vertices
/// `values[k]` at period `(k+1)·delta_s`, flat outside (the thesis's geometric intersection).
pub fn loaded_time_piecewise(t_ideal: f64, delta_s: f64, values: &[f64]) -> f64 {
    if !is_positive(t_ideal) {
        return 0.0;
    }
    if !t_ideal.is_finite() {
        return f64::INFINITY;
    }
    let n = values.len();
    if n == 0 {
        return t_ideal;
    }
    let l = |k: usize| sanitize_load(values[k]);
    if !(delta_s.is_finite() && delta_s > 0.0) {
        // No time axis: the first vertex stands for every period.
        return t_ideal * (1.0 + l(0));
    }
    let f = |t: f64, load: f64| t - t_ideal * (1.0 + load);
    // Region 0: (−∞, Δ], flat at values[0].
    let root0 = t_ideal * (1.0 + l(0));
    if t_ideal <= delta_s && root0 <= delta_s {
        return root0;
    }
    // Regions k = 1..n−1: [kΔ, (k+1)Δ], linear from values[k−1] to values[k]; f is linear too.
    for k in 1..n {
        let a = k as f64 * delta_s;
        let b = (k + 1) as f64 * delta_s;
        if b < t_ideal {
            continue;
        }
        let (la, lb) = (l(k - 1), l(k));
        let left = a.max(t_ideal);
        let l_left = la + (lb - la) * (left - a) / delta_s;
        let f_left = f(left, l_left);
        if f_left >= 0.0 {
            return left;
        }
        let f_right = f(b, lb);
        if f_right >= 0.0 {
            let t = left + (b - left) * (-f_left) / (f_right - f_left);
            return t.clamp(left, b);
        }
    }
    // Last region: [nΔ, ∞), flat at values[n−1]; f(nΔ) < 0 here, so the root lies beyond.
    (t_ideal * (1.0 + l(n - 1))).max(n as f64 * delta_s)
}

/// Simple time band `(T_min, T_max)`: loaded times against `l_min` and `l_max`.
pub fn time_band(t_ideal: f64, lf: &LoadFunctions) -> (f64, f64) {
    let t_min = loaded_time_piecewise(t_ideal, lf.delta_s, &lf.l_min);
    let t_max = loaded_time_piecewise(t_ideal, lf.delta_s, &lf.l_max);
    // With l_min ≤ l_max pointwise t_min ≤ t_max; order them anyway for hand-built functions.
    (t_min.min(t_max), t_min.max(t_max))
}

/// Simple speed band `(S_min, S_max)` of a vertex with ideal speed `speed_ideal` and work `work`.
///
/// Speeds come from the loads at the crossing points, `S_i/(1+l)`, which equals `work/T` and
/// also covers the zero-work limit (`S_i/(1+l(Δ))`).
pub fn speed_band(speed_ideal: f64, work: f64, lf: &LoadFunctions) -> (f64, f64) {
    if !is_positive(speed_ideal) {
        return (0.0, 0.0);
    }
    let t_ideal = ideal_time(speed_ideal, work);
    let (t_min, t_max) = time_band(t_ideal, lf);
    let s_max = speed_ideal * availability(lf.l_min(t_min));
    let s_min = speed_ideal * availability(lf.l_max(t_max));
    (s_min.min(s_max), s_min.max(s_max))
}

/// `work / speed`, with non-positive or NaN work read as 0 (the zero-work limit).
fn ideal_time(speed_ideal: f64, work: f64) -> f64 {
    if work > 0.0 { work / speed_ideal } else { 0.0 }
}

/// Dinda's form: smallest t with `∫₀ᵗ a(l(τ)) dτ = t_ideal` over a sample-and-hold load trace.
///
/// `load_trace[k]` is the load during `[kΔ, (k+1)Δ)` from the start of the run (oldest first,
/// i.e. *future* order, unlike [`crate::load::LoadHistory`]); after the trace the last value
/// persists, and an empty trace means no load. A broken `delta_s` makes the trace zero-length.
pub fn loaded_time_integral(t_ideal: f64, load_trace: &[f64], delta_s: f64) -> f64 {
    if !is_positive(t_ideal) {
        return 0.0;
    }
    if !t_ideal.is_finite() {
        return f64::INFINITY;
    }
    let last_a = load_trace.last().map_or(1.0, |&l| availability(l));
    if !(delta_s.is_finite() && delta_s > 0.0) {
        return t_ideal / last_a;
    }
    let mut remaining = t_ideal; // ideal seconds of work still to do
    for (k, &l) in load_trace.iter().enumerate() {
        let a = availability(l);
        let done = a * delta_s;
        if done >= remaining {
            return k as f64 * delta_s + remaining / a;
        }
        remaining -= done;
    }
    load_trace.len() as f64 * delta_s + remaining / last_a
}

/// The thesis's form (§2.3.2): intersect `T'` with the running-average future load function.
///
/// Vertex k of the function is the mean of `load_trace[0..=k]` at period `(k+1)Δ` (same trace
/// convention as [`loaded_time_integral`]); it is flat beyond the trace, and an empty trace
/// means no load.
pub fn loaded_time_amalgamated(t_ideal: f64, load_trace: &[f64], delta_s: f64) -> f64 {
    let mut sum = 0.0;
    let averages: Vec<f64> = load_trace
        .iter()
        .enumerate()
        .map(|(k, &l)| {
            sum += sanitize_load(l);
            sum / (k + 1) as f64
        })
        .collect();
    loaded_time_piecewise(t_ideal, delta_s, &averages)
}

/// Piecewise-constant probability density over speed: `(lo, hi, probability)` per bin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedPdf {
    /// Bins in increasing speed order; probabilities sum to 1 (for a non-empty pdf).
    pub bins: Vec<(f64, f64, f64)>,
}

impl SpeedPdf {
    /// Histogram of `samples` over `[lo, hi]` with `bins` equal bins (0 → Sturges' rule).
    ///
    /// Samples outside `[lo, hi]` are put in the first or last bin; NaN samples are dropped.
    /// A zero-width range gives one zero-width bin; no usable samples give an empty pdf.
    pub fn from_samples(samples: &[f64], lo: f64, hi: f64, bins: usize) -> Self {
        let xs: Vec<f64> = samples.iter().copied().filter(|s| !s.is_nan()).collect();
        if xs.is_empty() || !(lo.is_finite() && hi.is_finite()) || hi < lo {
            return Self { bins: Vec::new() };
        }
        let n = xs.len();
        if hi - lo <= 1e-12 * hi.abs().max(lo.abs()) {
            return Self {
                bins: vec![(lo, hi, 1.0)],
            };
        }
        let k = if bins == 0 { sturges(n) } else { bins };
        let width = (hi - lo) / k as f64;
        let mut counts = vec![0usize; k];
        for s in xs {
            let idx = ((s - lo) / width).floor();
            let idx = if idx < 0.0 {
                0
            } else {
                (idx as usize).min(k - 1)
            };
            counts[idx] += 1;
        }
        let bins = counts
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let b_lo = lo + width * i as f64;
                let b_hi = if i + 1 == k {
                    hi
                } else {
                    lo + width * (i + 1) as f64
                };
                (b_lo, b_hi, c as f64 / n as f64)
            })
            .collect();
        Self { bins }
    }

    /// Sum of the bin probabilities (1 for a non-empty pdf, 0 for an empty one).
    pub fn total_probability(&self) -> f64 {
        self.bins.iter().map(|b| b.2).sum()
    }

    /// Mean speed of the histogram (bin midpoints weighted by probability; NaN if empty).
    pub fn mean(&self) -> f64 {
        let total = self.total_probability();
        if total <= 0.0 {
            return f64::NAN;
        }
        self.bins
            .iter()
            .map(|&(lo, hi, p)| 0.5 * (lo + hi) * p)
            .sum::<f64>()
            / total
    }

    /// P(speed ≤ s), uniform within each bin (a zero-width bin is a step at its speed).
    pub fn cdf(&self, s: f64) -> f64 {
        let mut acc = 0.0;
        for &(lo, hi, p) in &self.bins {
            if s >= hi {
                acc += p;
            } else if s > lo {
                acc += p * (s - lo) / (hi - lo);
            }
        }
        acc
    }

    /// P(u < speed ≤ v): the piecewise-probability metric's `∫_u^v f(s) ds` (0 if `v ≤ u`).
    pub fn prob_between(&self, u: f64, v: f64) -> f64 {
        if v <= u {
            return 0.0;
        }
        (self.cdf(v) - self.cdf(u)).max(0.0)
    }
}

/// Sturges' bin count for n samples.
fn sturges(n: usize) -> usize {
    (n.max(1) as f64).log2().ceil() as usize + 1
}

/// Detailed band of one vertex: simple band, every predicted speed, and their histogram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetailedBand {
    /// Shortest predicted time (against `l_min`), seconds.
    pub t_min: f64,
    /// Longest predicted time (against `l_max`), seconds.
    pub t_max: f64,
    /// Lowest predicted speed (simple band).
    pub s_min: f64,
    /// Highest predicted speed (simple band).
    pub s_max: f64,
    /// One speed per crossing of `T'` with a projected load-average segment.
    pub predictions: Vec<f64>,
    /// Histogram of `predictions` over `[s_min, s_max]`.
    pub pdf: SpeedPdf,
}

impl DetailedBand {
    /// Mean of the raw predictions: the Ch.2 adjusted-FPM value for this vertex.
    pub fn mean_speed(&self) -> f64 {
        if self.predictions.is_empty() {
            return 0.5 * (self.s_min + self.s_max);
        }
        self.predictions.iter().sum::<f64>() / self.predictions.len() as f64
    }
}

/// Detailed (probabilistic) band of one vertex (§2.1.3); `bins = 0` picks Sturges' rule.
///
/// `lf` should be `la.load_functions()`; if a caller passes mismatched ones, the shorter window
/// of the two is used and nothing panics.
pub fn detailed_band(
    speed_ideal: f64,
    work: f64,
    lf: &LoadFunctions,
    la: &LoadAverageMatrix,
    bins: usize,
) -> DetailedBand {
    if !is_positive(speed_ideal) {
        return DetailedBand {
            t_min: f64::INFINITY,
            t_max: f64::INFINITY,
            s_min: 0.0,
            s_max: 0.0,
            predictions: vec![0.0],
            pdf: SpeedPdf {
                bins: vec![(0.0, 0.0, 1.0)],
            },
        };
    }
    let t_ideal = ideal_time(speed_ideal, work);
    let (t_min, t_max) = time_band(t_ideal, lf);
    // Loads at the two crossings bound every detailed crossing (module docs: clamping).
    let l_lo = sanitize_load(lf.l_min(t_min));
    let l_hi = sanitize_load(lf.l_max(t_max)).max(l_lo);
    let s_max = speed_ideal * availability(l_lo);
    let s_min = speed_ideal * availability(l_hi);

    let loads = crossing_loads(t_ideal, t_min, t_max, lf, la);
    let predictions: Vec<f64> = if loads.is_empty() {
        vec![s_min, s_max]
    } else {
        loads
            .iter()
            .map(|&l| speed_ideal * availability(l.clamp(l_lo, l_hi)))
            .collect()
    };
    let pdf = SpeedPdf::from_samples(&predictions, s_min, s_max, bins);
    DetailedBand {
        t_min,
        t_max,
        s_min,
        s_max,
        predictions,
        pdf,
    }
}

/// Loads at which `T'(l) = t_ideal(1+l)` crosses the projected segments of LA's rows
/// `⌊T_min/Δ⌋ … ⌊T_max/Δ⌋` (see the module docs for the boundary columns).
fn crossing_loads(
    t_ideal: f64,
    t_min: f64,
    t_max: f64,
    lf: &LoadFunctions,
    la: &LoadAverageMatrix,
) -> Vec<f64> {
    let w = lf.window().min(la.window());
    let delta = lf.delta_s;
    if w == 0 || !(delta.is_finite() && delta > 0.0) {
        return Vec::new();
    }
    // f64 → usize casts saturate, so an infinite T_max just means "up to the last column".
    let first_col = ((t_min / delta).floor().max(0.0) as usize).min(w);
    let last_col = ((t_max / delta).floor().max(0.0) as usize).min(w);
    // h(t, l) > 0 ⇔ the point lies above the T' line (the task would need longer than t).
    let h = |t: f64, l: f64| t_ideal * (1.0 + l) - t;
    let mut out = Vec::new();
    for col in first_col..=last_col {
        if col == 0 || col == w {
            // Flat columns [0, Δ) with row 1 and [wΔ, ∞) with row w.
            let row_idx = if col == 0 { 1 } else { w };
            let Some(row) = la.row(row_idx) else { continue };
            for &l in row {
                let l = sanitize_load(l);
                let t = t_ideal * (1.0 + l);
                let inside = if col == 0 {
                    t < delta
                } else {
                    t >= w as f64 * delta
                };
                if inside {
                    out.push(l);
                }
            }
            continue;
        }
        // Interior column [δΔ, (δ+1)Δ) with δ = col: segment A=(δΔ, l) → B=((δ+1)Δ, proj(l)).
        let Some(row) = la.row(col) else { continue };
        let (min_a, max_a) = (lf.l_min[col - 1], lf.l_max[col - 1]);
        let (min_b, max_b) = (lf.l_min[col], lf.l_max[col]);
        let ta = col as f64 * delta;
        let tb = (col + 1) as f64 * delta;
        let width_a = max_a - min_a;
        for &l in row {
            let la_ = sanitize_load(l);
            let rel = if width_a > 0.0 {
                (la_ - min_a) / width_a
            } else {
                0.5 // zero-width band at δ: project to the middle of the band at δ+1
            };
            let lb = min_b + rel * (max_b - min_b);
            let (h0, h1) = (h(ta, la_), h(tb, lb));
            let s = if h0 == 0.0 {
                0.0
            } else if (h0 > 0.0 && h1 < 0.0) || (h0 < 0.0 && h1 > 0.0) {
                h0 / (h0 - h1)
            } else {
                continue;
            };
            out.push(la_ + s * (lb - la_));
        }
    }
    out
}

/// How an adjusted-FPM vertex is distilled from the band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum AdjustMode {
    /// Ch.2 §2.2.4: mean of the detailed-band predictions (the thesis's recommendation).
    #[default]
    DetailedMean,
    /// Ch.4 (PMM): midpoint of the simple band, `(S_min + S_max)/2`.
    Midpoint,
}

/// Adjusted FPM value for one vertex: the band distilled to one speed by `mode`.
pub fn adjusted_speed(
    speed_ideal: f64,
    work: f64,
    lf: &LoadFunctions,
    la: &LoadAverageMatrix,
    mode: AdjustMode,
) -> f64 {
    match mode {
        AdjustMode::Midpoint => {
            let (s_min, s_max) = speed_band(speed_ideal, work, lf);
            0.5 * (s_min + s_max)
        }
        AdjustMode::DetailedMean => detailed_band(speed_ideal, work, lf, la, 1).mean_speed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::LoadHistory;

    fn rel_close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
    }

    /// A deterministic, fluctuating history of `n` samples (oldest first).
    fn wiggly(n: usize) -> Vec<f64> {
        (0..n)
            .map(|k| {
                let x = k as f64;
                (1.2 + (x * 0.41).sin() + 0.6 * (x * 0.13).cos() + 0.3 * (x * 1.7).sin()).max(0.0)
            })
            .collect()
    }

    fn band_inputs(n: usize, w: usize, delta: f64) -> (LoadFunctions, LoadAverageMatrix) {
        let h = LoadHistory::from_oldest_first(delta, 1000, &wiggly(n)).unwrap();
        let la = LoadAverageMatrix::from_history(&h, w).unwrap();
        (la.load_functions(), la)
    }

    #[test]
    fn availability_basics() {
        assert_eq!(availability(0.0), 1.0);
        assert_eq!(availability(1.0), 0.5);
        assert_eq!(availability(-3.0), 1.0);
        assert_eq!(availability(f64::NAN), 1.0);
        assert_eq!(effective_load(3.0, 4), 0.0);
        assert!(rel_close(effective_load(7.0, 4), 1.0, 1e-15));
        assert_eq!(effective_load(2.0, 0), 2.0);
    }

    #[test]
    fn fixed_point_zero_and_constant_load() {
        for t in [1e-9, 0.5, 30.0, 1e6] {
            assert_eq!(loaded_time(t, |_| 0.0), t);
            for l in [0.25, 1.0, 3.5] {
                assert!(rel_close(loaded_time(t, |_| l), t * (1.0 + l), 1e-12));
                // Piecewise form against a constant band, including t far below Δ and beyond wΔ.
                let lf = LoadFunctions::constant(60.0, 10, l).unwrap();
                let (lo, hi) = time_band(t, &lf);
                assert!(rel_close(lo, t * (1.0 + l), 1e-12), "{t} {l} {lo}");
                assert_eq!(lo, hi, "l_max = l_min gives a zero-width band");
            }
        }
        assert_eq!(loaded_time(0.0, |_| 1.0), 0.0);
        assert_eq!(loaded_time(-1.0, |_| 1.0), 0.0);
        assert_eq!(loaded_time(f64::NAN, |_| 1.0), 0.0);
        assert_eq!(loaded_time(f64::INFINITY, |_| 1.0), f64::INFINITY);
        assert_eq!(loaded_time(1.0, |_| f64::INFINITY), f64::INFINITY);
        assert_eq!(loaded_time(1.0, |_| f64::NAN), 1.0);
    }

    #[test]
    fn fixed_point_picks_smallest_root() {
        // Load 1 until t = 3, 0.1 until t = 4, then 5: with T_i = 1, f(t) = t − T_i(1+l(t))
        // crosses zero at t = 2, jumps positive over [3, 4) and crosses again at t = 6.
        // The smallest crossing, 2, is the answer.
        let l = |t: f64| {
            if t < 3.0 {
                1.0
            } else if t < 4.0 {
                0.1
            } else {
                5.0
            }
        };
        assert!(rel_close(loaded_time(1.0, l), 2.0, 1e-9));
        // A rising ramp: t = 1·(1 + t/4) ⇒ t = 4/3.
        assert!(rel_close(loaded_time(1.0, |t| t / 4.0), 4.0 / 3.0, 1e-9));
        // Non-monotone: load 3 until t = 2.5 then 0 — the first crossing is at t = 2.5
        // (f jumps from < 0 to ≥ 0 there), not at t = 4.
        let l = |t: f64| if t < 2.5 { 3.0 } else { 0.0 };
        assert!(rel_close(loaded_time(1.0, l), 2.5, 1e-9));
    }

    #[test]
    fn piecewise_matches_generic_solver() {
        let (lf, _) = band_inputs(119, 60, 60.0);
        for t in [1.0, 45.0, 100.0, 700.0, 2000.0, 5000.0, 1e5] {
            let exact = loaded_time_piecewise(t, lf.delta_s, &lf.l_max);
            let generic = loaded_time(t, |x| lf.l_max(x));
            assert!(rel_close(exact, generic, 1e-6), "{t}: {exact} vs {generic}");
            let (lo, hi) = time_band(t, &lf);
            assert!(t <= lo && lo <= hi);
        }
    }

    #[test]
    fn band_narrows_for_long_tasks() {
        let (lf, _) = band_inputs(119, 60, 60.0);
        let rel_width = |t: f64| {
            let (lo, hi) = time_band(t, &lf);
            (hi - lo) / t
        };
        // Long runs average load swings away (digest §1.3 "narrowing").
        assert!(rel_width(3000.0) < rel_width(10.0));
        let (s_min, s_max) = speed_band(1e9, 1e9 * 10.0, &lf);
        assert!(0.0 < s_min && s_min <= s_max && s_max <= 1e9);
    }

    #[test]
    fn speed_band_edge_cases() {
        let lf = LoadFunctions::new(60.0, vec![1.0, 0.5], vec![3.0, 2.0]).unwrap();
        // Zero work: the limit S_i/(1+l(Δ)).
        let (lo, hi) = speed_band(100.0, 0.0, &lf);
        assert!(rel_close(lo, 25.0, 1e-12) && rel_close(hi, 50.0, 1e-12));
        assert_eq!(speed_band(0.0, 10.0, &lf), (0.0, 0.0));
        assert_eq!(speed_band(f64::NAN, 10.0, &lf), (0.0, 0.0));
        // Very long task: flat at the last period.
        let (lo, hi) = speed_band(1.0, 1e12, &lf);
        assert!(rel_close(lo, 1.0 / 3.0, 1e-9) && rel_close(hi, 1.0 / 1.5, 1e-9));
        // Speeds agree with work / time.
        let (t_lo, t_hi) = time_band(50.0, &lf);
        let (s_lo, s_hi) = speed_band(2.0, 100.0, &lf);
        assert!(rel_close(s_hi, 100.0 / t_lo, 1e-12));
        assert!(rel_close(s_lo, 100.0 / t_hi, 1e-12));
    }

    #[test]
    fn integral_form_constant_load_and_difference() {
        for l in [0.0, 0.5, 2.0] {
            let trace = vec![l; 5];
            for t in [0.3, 10.0, 1000.0] {
                let got = loaded_time_integral(t, &trace, 60.0);
                assert!(rel_close(got, t * (1.0 + l), 1e-12), "{l} {t} {got}");
                let am = loaded_time_amalgamated(t, &trace, 60.0);
                assert!(rel_close(am, t * (1.0 + l), 1e-12));
            }
        }
        assert_eq!(loaded_time_integral(5.0, &[], 60.0), 5.0);
        assert_eq!(loaded_time_integral(0.0, &[1.0], 60.0), 0.0);
        assert_eq!(loaded_time_integral(5.0, &[1.0], 0.0), 10.0);
        // Alternating 0/3 load, Δ = 1, T_i = 2: integral: 1 s at a=1, then 1 s at a=1/4 gives
        // 0.25, then 1 s at a=1 gives 1.0 more after 0.75 of it → t = 2.75.
        let trace = [0.0, 3.0, 0.0, 3.0, 0.0, 3.0];
        assert!(rel_close(
            loaded_time_integral(2.0, &trace, 1.0),
            2.75,
            1e-12
        ));
        // Amalgamated: averages 0, 1.5, 1, 1.5, … ⇒ crossing t = 2(1 + avg) is later (Jensen).
        let am = loaded_time_amalgamated(2.0, &trace, 1.0);
        assert!(am > 2.75 + 1e-6, "amalgamated {am}");
    }

    #[test]
    fn detailed_band_pdf_sums_to_one_and_mean_in_band() {
        let (lf, la) = band_inputs(119, 60, 60.0);
        for work in [1.0, 30.0, 200.0, 1500.0, 4000.0, 1e5] {
            let speed = 1.0;
            let db = detailed_band(speed, work, &lf, &la, 0);
            let (s_min, s_max) = speed_band(speed, work, &lf);
            assert!(rel_close(db.s_min, s_min, 1e-12) && rel_close(db.s_max, s_max, 1e-12));
            assert!(!db.predictions.is_empty());
            assert!(rel_close(db.pdf.total_probability(), 1.0, 1e-12), "{work}");
            let m = db.mean_speed();
            assert!(
                s_min - 1e-12 <= m && m <= s_max + 1e-12,
                "{work}: {s_min} {m} {s_max}"
            );
            let pm = db.pdf.mean();
            assert!(s_min - 1e-12 <= pm && pm <= s_max + 1e-12);
            for &p in &db.predictions {
                assert!(s_min - 1e-12 <= p && p <= s_max + 1e-12);
            }
            assert!(rel_close(db.pdf.cdf(s_max), 1.0, 1e-12));
            assert_eq!(db.pdf.cdf(s_min - 1.0), 0.0);
            let adj = adjusted_speed(speed, work, &lf, &la, AdjustMode::DetailedMean);
            assert!(rel_close(adj, m, 1e-12));
            let mid = adjusted_speed(speed, work, &lf, &la, AdjustMode::Midpoint);
            assert!(rel_close(mid, 0.5 * (s_min + s_max), 1e-12));
        }
    }

    #[test]
    fn detailed_band_hits_both_extremes_in_interior_columns() {
        let (lf, la) = band_inputs(119, 60, 60.0);
        // A vertex whose run spans several periods: the max and min averages' segments are the
        // load functions themselves, so the extreme speeds are predicted.
        let db = detailed_band(1.0, 600.0, &lf, &la, 10);
        let max_p = db.predictions.iter().copied().fold(f64::MIN, f64::max);
        let min_p = db.predictions.iter().copied().fold(f64::MAX, f64::min);
        assert!(rel_close(max_p, db.s_max, 1e-9), "{max_p} vs {}", db.s_max);
        assert!(rel_close(min_p, db.s_min, 1e-9), "{min_p} vs {}", db.s_min);
        assert_eq!(db.pdf.bins.len(), 10);
    }

    #[test]
    fn detailed_band_degenerate_cases() {
        // Constant load: every prediction is S_i/(1+l).
        let h = LoadHistory::from_oldest_first(60.0, 100, &[1.0; 20]).unwrap();
        let la = LoadAverageMatrix::from_history(&h, 10).unwrap();
        let lf = la.load_functions();
        for work in [0.0, 10.0, 500.0, 1e6] {
            let db = detailed_band(4.0, work, &lf, &la, 0);
            assert_eq!(db.pdf.bins.len(), 1);
            assert!(rel_close(db.mean_speed(), 2.0, 1e-12), "{work}");
            assert!(rel_close(db.pdf.total_probability(), 1.0, 1e-12));
        }
        // Zero work: predictions are S_i/(1+l) over row 1.
        let (lf, la) = band_inputs(19, 10, 60.0);
        let db = detailed_band(1.0, 0.0, &lf, &la, 0);
        let row1 = la.row(1).unwrap();
        assert_eq!(db.predictions.len(), row1.len());
        // Zero speed: no throughput.
        let db = detailed_band(0.0, 10.0, &lf, &la, 0);
        assert_eq!(db.mean_speed(), 0.0);
        assert_eq!(
            adjusted_speed(0.0, 10.0, &lf, &la, AdjustMode::Midpoint),
            0.0
        );
    }

    #[test]
    fn speed_pdf_histogram() {
        let pdf = SpeedPdf::from_samples(&[1.0, 1.1, 1.9, 2.0, f64::NAN], 1.0, 2.0, 2);
        assert_eq!(pdf.bins.len(), 2);
        assert_eq!(pdf.bins[0].2, 0.5);
        assert_eq!(pdf.bins[1].2, 0.5);
        assert!(rel_close(pdf.mean(), 1.5, 1e-12));
        assert!(rel_close(pdf.cdf(1.25), 0.25, 1e-12));
        assert!(rel_close(pdf.prob_between(1.25, 1.75), 0.5, 1e-12));
        assert_eq!(pdf.prob_between(1.75, 1.25), 0.0);
        assert!(SpeedPdf::from_samples(&[], 0.0, 1.0, 3).bins.is_empty());
        assert!(SpeedPdf::from_samples(&[1.0], 0.0, 1.0, 3).mean() > 0.0);
        assert!(SpeedPdf { bins: vec![] }.mean().is_nan());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn band_invariants(
                samples in prop::collection::vec(0.0f64..8.0, 1..150),
                w in 1usize..70,
                delta in 1.0f64..120.0,
                speed in 0.1f64..1e3,
                work in 0.0f64..1e6,
            ) {
                let h = LoadHistory::from_oldest_first(delta, 1000, &samples).unwrap();
                let la = LoadAverageMatrix::from_history(&h, w).unwrap();
                let lf = la.load_functions();
                let t_ideal = work / speed;
                let (t_lo, t_hi) = time_band(t_ideal, &lf);
                prop_assert!(t_ideal <= t_lo * (1.0 + 1e-12) && t_lo <= t_hi);
                // Each end is a fixed point, and the smallest one: f < 0 on [T_i, t*).
                for (vals, root) in [(&lf.l_min, t_lo), (&lf.l_max, t_hi)] {
                    let f = |t: f64| t - t_ideal * (1.0 + crate::load::interp_periods(vals, delta, t));
                    prop_assert!(f(root).abs() <= 1e-9 * (1.0 + root));
                    for k in 0..50 {
                        let t = t_ideal + (root - t_ideal) * f64::from(k) / 50.0;
                        prop_assert!(f(t) <= 1e-9 * (1.0 + root), "earlier root at {}", t);
                    }
                }
                let db = detailed_band(speed, work, &lf, &la, 0);
                prop_assert!((db.pdf.total_probability() - 1.0).abs() < 1e-9);
                let m = db.mean_speed();
                let tol = 1e-9 * speed;
                prop_assert!(db.s_min - tol <= m && m <= db.s_max + tol);
                let mid = adjusted_speed(speed, work, &lf, &la, AdjustMode::Midpoint);
                prop_assert!(db.s_min - tol <= mid && mid <= db.s_max + tol);
            }

            #[test]
            fn integral_never_slower_than_amalgamated_on_the_grid(
                trace in prop::collection::vec(0.0f64..6.0, 1..40),
                k in 1usize..40,
            ) {
                // Pick T_i so the integral run ends exactly on a sample boundary kΔ, where the
                // amalgamated function is the true running average: Jensen applies.
                let k = k.min(trace.len());
                let t_ideal: f64 = trace[..k].iter().map(|&l| availability(l)).sum();
                let integral = loaded_time_integral(t_ideal, &trace, 1.0);
                prop_assert!((integral - k as f64).abs() < 1e-9);
                let am = loaded_time_amalgamated(t_ideal, &trace, 1.0);
                prop_assert!(integral <= am + 1e-9, "{} > {}", integral, am);
            }
        }
    }
}
