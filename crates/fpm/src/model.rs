//! The functional performance model: speed S(x) of one server running one routine as a function
//! of the integer size vector x (seed 003 §1.1), stored as measured vertices and looked up by
//! interpolation; time(x) = C(x) / S(x).
//!
//! # Vertices
//! A vertex is a size with [`SpeedStats`] (runs merged from builders and from real calls). GBBP's
//! top endpoint *b* may instead carry an **assumed zero** ([`Fpm::set_assumed_zero`]): speed 0,
//! never measured (thesis §3.4 Step 1). A measurement beats the assumption: in 1-D the assumed
//! zero is ignored once any measured vertex lies at or beyond it, in several dimensions once a
//! vertex is measured at exactly that size.
//!
//! # Lookups, 1-D
//! Piecewise linear between neighbouring vertices (the thesis's model). Below the first vertex the
//! first vertex's value; beyond the last the last vertex's value — which is 0 when the last
//! vertex is the assumed zero. The min, mean and max curves are interpolated separately, so
//! [`Fpm::band`] is the trapezoid joining the cuts (§3.3's `C'(x)`).
//!
//! # Lookups, several parameters (the thesis leaves this open, digest §1.9 \[gap\])
//! 1. The query is clamped into the bounding box of the vertices (the multi-D analogue of "first
//!    / last vertex's value outside the range"), and a vertex is returned exactly.
//! 2. **Grid cell.** On each axis the candidate coordinates are those shared by at least two
//!    vertices (the corners of any box share coordinates, so nothing is lost; sizes from real
//!    calls rarely share one and are skipped). The smallest box around the query whose 2^d
//!    corners are all vertices is searched for (boxes ranked by how many candidate coordinates
//!    they skip, bounded effort). The builders ([`crate::multi`], [`crate::baseline`]) measure
//!    exactly such grids, so a cell is normally found at once.
//! 3. **Edge-blended (Coons-type) interpolation** inside the box:
//!    `G(x) = Σ_k E_k(x) − (m − 1)·B(x)` where B is the multilinear interpolant of the corners,
//!    E_k blends (multilinearly in the other axes) the 1-D piecewise-linear curves through the
//!    vertices on the box's edges parallel to axis k, and m is the number of axes on which the
//!    box is not degenerate. For 2-D this is exactly the bilinearly blended Coons patch. Why:
//!    GBBP refines the *edges* of its construction grid (thesis §4.2.3–4.2.4), and this
//!    interpolant reproduces every edge curve exactly (so every vertex on an edge), reduces to
//!    multilinear interpolation when the edges are straight, and is continuous across cells that
//!    share an edge.
//! 4. **Vertices strictly inside the box** (real calls' sizes) correct it by Shepard weighting of
//!    their residuals `r_v = S_v − G(v)`, with a weight for the box boundary that makes the
//!    correction vanish there: `Σ r_v d_v⁻² / (Σ d_v⁻² + δ⁻²)`, distances in the box's unit
//!    coordinates, δ the distance to the box boundary. So the model passes through them and
//!    stays continuous. (For d ≥ 3, vertices on a box face but off its edges are only reproduced
//!    at their exact size.)
//! 5. **No complete box** (e.g. a model made only of real calls at scattered sizes): inverse
//!    distance weighting (power 2) over all vertices in coordinates normalised by the bounding
//!    box — exact at vertices, bounded by the vertex values.
//!
//! Interpolated speeds are clamped at 0: the edge blend has negative weights and may undershoot
//! near a steep fall.

use crate::stats::SpeedStats;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// A GBBP construction interval between two sizes (for plots, `pmm_view -i`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// One end (the smaller size along the construction line).
    pub lo: Vec<i64>,
    /// The end at the larger size.
    pub hi: Vec<i64>,
    /// Whether the builder is done with it.
    pub finalised: bool,
}

impl From<Interval> for gridwise_proto::BuildInterval {
    fn from(i: Interval) -> Self {
        Self {
            lo: i.lo,
            hi: i.hi,
            finalised: i.finalised,
        }
    }
}

impl From<gridwise_proto::BuildInterval> for Interval {
    fn from(i: gridwise_proto::BuildInterval) -> Self {
        Self {
            lo: i.lo,
            hi: i.hi,
            finalised: i.finalised,
        }
    }
}

/// A functional performance model: speed vertices over named integer size parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "FpmRepr", into = "FpmRepr")]
pub struct Fpm {
    params: Vec<String>,
    points: BTreeMap<Vec<i64>, SpeedStats>,
    /// Per axis, the least and greatest coordinate of `points` (empty while there are none):
    /// every prediction clamps into it, and scanning the vertices once per axis per prediction
    /// was a tenth of a ranking decision.
    extent: Vec<(i64, i64)>,
    assumed_zero: Option<Vec<i64>>,
    intervals: Vec<Interval>,
}

/// The serialised form: vertices as a list, because JSON map keys must be strings.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FpmRepr {
    params: Vec<String>,
    points: Vec<(Vec<i64>, SpeedStats)>,
    #[serde(default)]
    assumed_zero: Option<Vec<i64>>,
    #[serde(default)]
    intervals: Vec<Interval>,
}

impl From<Fpm> for FpmRepr {
    fn from(m: Fpm) -> Self {
        Self {
            params: m.params,
            points: m.points.into_iter().collect(),
            assumed_zero: m.assumed_zero,
            intervals: m.intervals,
        }
    }
}

impl TryFrom<FpmRepr> for Fpm {
    type Error = String;

    fn try_from(r: FpmRepr) -> Result<Self, String> {
        let d = r.params.len();
        let mut m = Fpm::new(r.params);
        for (x, s) in r.points {
            if x.len() != d {
                return Err(format!(
                    "model point {x:?} has {} sizes but the model has {d} parameters",
                    x.len()
                ));
            }
            if !s.is_valid() {
                return Err(format!("model point {x:?} has invalid speeds {s:?}"));
            }
            // Not through `insert`: a slice's interpolated vertices have count 0.
            m.put(x, s);
        }
        if let Some(z) = r.assumed_zero {
            if z.len() != d {
                return Err(format!("assumed-zero point {z:?} does not have {d} sizes"));
            }
            m.assumed_zero = Some(z);
        }
        m.intervals = r.intervals;
        Ok(m)
    }
}

/// Lookups with more checked boxes than this give up on the grid and use inverse distance
/// weighting; it bounds the cost of one lookup (a box check is 2^d map look-ups).
const BOX_SEARCH_BUDGET: usize = 20_000;

impl Fpm {
    /// An empty model over the named size parameters.
    pub fn new(params: Vec<String>) -> Self {
        Self {
            params,
            points: BTreeMap::new(),
            extent: Vec::new(),
            assumed_zero: None,
            intervals: Vec::new(),
        }
    }

    /// The size parameter names, in order.
    pub fn params(&self) -> &[String] {
        &self.params
    }

    /// Adds one real call's measured speed at `x` (online refinement). Ignored when `x` has the
    /// wrong number of sizes or the speed is negative or not finite.
    pub fn add_sample(&mut self, x: &[i64], speed: f64) {
        self.insert(x, SpeedStats::new(speed));
    }

    /// Merges `stats` into the vertex at `x` (creating it). Ignored when `x` has the wrong
    /// number of sizes or the stats are invalid (see [`SpeedStats::is_valid`]).
    pub fn insert(&mut self, x: &[i64], stats: SpeedStats) {
        if x.len() != self.params.len() || stats.count == 0 || !stats.is_valid() {
            return;
        }
        self.put(x.to_vec(), stats);
    }

    /// Merges `stats` into the vertex at `x` unchecked: the one way a vertex is added, so the
    /// extent stays that of the vertices.
    fn put(&mut self, x: Vec<i64>, stats: SpeedStats) {
        if self.extent.is_empty() {
            self.extent = x.iter().map(|&c| (c, c)).collect();
        } else {
            for ((lo, hi), &c) in self.extent.iter_mut().zip(&x) {
                *lo = (*lo).min(c);
                *hi = (*hi).max(c);
            }
        }
        self.points
            .entry(x)
            .and_modify(|s| s.merge(&stats))
            .or_insert(stats);
    }

    /// Declares speed 0 at `x` without measuring it (GBBP's top endpoint *b*). Ignored when `x`
    /// has the wrong number of sizes.
    pub fn set_assumed_zero(&mut self, x: &[i64]) {
        if x.len() == self.params.len() {
            self.assumed_zero = Some(x.to_vec());
        }
    }

    /// The assumed-zero size, if one was set (whether or not a measurement has since overridden
    /// it).
    pub fn assumed_zero(&self) -> Option<&[i64]> {
        self.assumed_zero.as_deref()
    }

    /// The measured vertices, sorted by size vector (lexicographically).
    pub fn points(&self) -> Vec<(Vec<i64>, SpeedStats)> {
        self.points.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// The stats measured at exactly `x`, if any.
    pub fn vertex(&self, x: &[i64]) -> Option<&SpeedStats> {
        self.points.get(x)
    }

    /// Number of measured vertices (the assumed zero is not counted).
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether no vertex has been measured.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The construction intervals recorded by the builder.
    pub fn intervals(&self) -> &[Interval] {
        &self.intervals
    }

    /// Replaces the recorded construction intervals.
    pub fn set_intervals(&mut self, intervals: Vec<Interval>) {
        self.intervals = intervals;
    }

    /// Interpolated mean speed at `x` (operations/s); `None` when the model has no vertex or `x`
    /// has the wrong number of sizes.
    pub fn speed(&self, x: &[i64]) -> Option<f64> {
        self.interp(x, &|s| s.mean)
    }

    /// Interpolated (min, max) speed at `x`: the approximated cut `C'(x)`.
    pub fn band(&self, x: &[i64]) -> Option<(f64, f64)> {
        let a = self.interp(x, &|s| s.min)?;
        let b = self.interp(x, &|s| s.max)?;
        // The multi-D blend is linear with some negative weights; keep the pair ordered.
        Some((a.min(b), a.max(b)))
    }

    /// Predicted seconds for `work` operations at `x`: work / speed, and `f64::INFINITY` where the
    /// speed is 0 (the server cannot run that size). `None` when the model has no vertex.
    pub fn time(&self, x: &[i64], work: f64) -> Option<f64> {
        let s = self.speed(x)?;
        if s > 0.0 {
            Some(work / s)
        } else {
            Some(f64::INFINITY)
        }
    }

    /// Whether `x` lies within the range the vertices (measured, or the assumed zero) span on
    /// every axis.
    pub fn covers(&self, x: &[i64]) -> bool {
        if x.len() != self.params.len() {
            return false;
        }
        let zero = self.active_zero();
        if self.points.is_empty() && zero.is_none() {
            return false;
        }
        (0..x.len()).all(|k| {
            self.span(zero, k)
                .is_some_and(|(lo, hi)| lo <= x[k] && x[k] <= hi)
        })
    }

    /// The mean speed measured at the smallest size of a one-parameter model, if `x` lies
    /// below it (`None` otherwise, and with several parameters).
    pub fn bottom_speed_below(&self, x: &[i64]) -> Option<f64> {
        if self.params.len() != 1 || x.len() != 1 {
            return None;
        }
        let (lo, speed) = self.points.iter().next()?;
        (x[0] < lo[0]).then_some(speed.mean)
    }

    /// Whether `x` lies past the largest size measured on a one-parameter model: there a
    /// speed that fell at the top (paging) is not known to rise again. (With several
    /// parameters the nearest measured size may be another shape altogether.)
    pub fn past_top(&self, x: &[i64]) -> bool {
        self.params.len() == 1
            && x.len() == 1
            && self.extent.first().is_some_and(|&(_, hi)| x[0] > hi)
    }

    /// The least and greatest coordinate on axis `k` over the vertices (the measured points
    /// and `zero`, the active assumed zero); `None` without a vertex.
    fn span(&self, zero: Option<&[i64]>, k: usize) -> Option<(i64, i64)> {
        let measured = self.extent.get(k).copied();
        match (measured, zero.map(|z| z[k])) {
            (Some((lo, hi)), Some(z)) => Some((lo.min(z), hi.max(z))),
            (Some(span), None) => Some(span),
            (None, Some(z)) => Some((z, z)),
            (None, None) => None,
        }
    }

    /// The model with some parameters fixed (`pmm_view -s`): a model over the remaining
    /// parameters whose vertices are the distinct projections of this model's vertices, valued
    /// by this model's interpolation at the fixed sizes (count 0 where interpolated, the
    /// measured stats where the full size is a vertex). Unknown names are ignored.
    pub fn slice(&self, fixed: &[(String, i64)]) -> Fpm {
        let fixed_at: Vec<Option<i64>> = self
            .params
            .iter()
            .map(|p| fixed.iter().find(|(n, _)| n == p).map(|(_, v)| *v))
            .collect();
        let free: Vec<usize> = (0..self.params.len())
            .filter(|&k| fixed_at[k].is_none())
            .collect();
        let mut out = Fpm::new(free.iter().map(|&k| self.params[k].clone()).collect());
        let full = |proj: &[i64]| -> Vec<i64> {
            let mut it = proj.iter();
            fixed_at
                .iter()
                .map(|f| f.unwrap_or_else(|| it.next().copied().unwrap_or(0)))
                .collect()
        };
        let on_plane = |x: &[i64]| {
            fixed_at
                .iter()
                .zip(x)
                .all(|(f, v)| f.is_none_or(|f| f == *v))
        };
        let projections: BTreeSet<Vec<i64>> = self
            .vertex_keys()
            .iter()
            .map(|v| free.iter().map(|&k| v[k]).collect())
            .collect();
        for p in projections {
            let x = full(&p);
            if let Some(s) = self.points.get(&x) {
                out.put(p, *s);
            } else if self.active_zero().is_some_and(|z| z == x.as_slice()) {
                out.assumed_zero = Some(p);
            } else if let (Some(mean), Some((min, max))) = (self.speed(&x), self.band(&x)) {
                out.put(
                    p,
                    SpeedStats {
                        m2: 0.0,
                        count: 0,
                        min,
                        mean: mean.clamp(min, max),
                        max,
                    },
                );
            }
        }
        out.intervals = self
            .intervals
            .iter()
            .filter(|i| on_plane(&i.lo) && on_plane(&i.hi))
            .map(|i| Interval {
                lo: free.iter().map(|&k| i.lo[k]).collect(),
                hi: free.iter().map(|&k| i.hi[k]).collect(),
                finalised: i.finalised,
            })
            .collect();
        out
    }

    // ---- interpolation ----

    /// The assumed zero, unless a measurement has overridden it (see the module doc).
    fn active_zero(&self) -> Option<&[i64]> {
        let z = self.assumed_zero.as_deref()?;
        let overridden = if z.len() == 1 {
            self.points.keys().any(|k| k[0] >= z[0])
        } else {
            self.points.contains_key(z)
        };
        (!overridden).then_some(z)
    }

    fn vertex_keys(&self) -> Vec<&[i64]> {
        let mut v: Vec<&[i64]> = self.points.keys().map(|k| k.as_slice()).collect();
        if let Some(z) = self.active_zero() {
            v.push(z);
        }
        v
    }

    /// The value at a vertex (measured or the active assumed zero).
    fn vertex_value(&self, x: &[i64], f: &dyn Fn(&SpeedStats) -> f64) -> Option<f64> {
        if let Some(s) = self.points.get(x) {
            return Some(f(s));
        }
        match self.active_zero() {
            Some(z) if z == x => Some(0.0),
            _ => None,
        }
    }

    fn interp(&self, x: &[i64], f: &dyn Fn(&SpeedStats) -> f64) -> Option<f64> {
        if x.len() != self.params.len() {
            return None;
        }
        match x.len() {
            0 => self.points.values().next().map(f),
            1 => self.interp_1d(x[0], f),
            _ => self.interp_nd(x, f),
        }
    }

    fn interp_1d(&self, x: i64, f: &dyn Fn(&SpeedStats) -> f64) -> Option<f64> {
        let key = [x];
        let mut below = self
            .points
            .range::<[i64], _>((Bound::Unbounded, Bound::Included(&key[..])))
            .next_back()
            .map(|(k, s)| (k[0], f(s)));
        let mut above = self
            .points
            .range::<[i64], _>((Bound::Included(&key[..]), Bound::Unbounded))
            .next()
            .map(|(k, s)| (k[0], f(s)));
        if let Some(z) = self.active_zero() {
            let z = z[0];
            if z <= x && below.is_none_or(|(b, _)| z > b) {
                below = Some((z, 0.0));
            }
            if z >= x && above.is_none_or(|(a, _)| z < a) {
                above = Some((z, 0.0));
            }
        }
        match (below, above) {
            (Some((b, vb)), Some((a, va))) => {
                if a == b {
                    Some(vb)
                } else {
                    let t = (x - b) as f64 / (a - b) as f64;
                    Some(vb + t * (va - vb))
                }
            }
            (Some((_, v)), None) | (None, Some((_, v))) => Some(v),
            (None, None) => None,
        }
    }

    fn interp_nd(&self, x: &[i64], f: &dyn Fn(&SpeedStats) -> f64) -> Option<f64> {
        let zero = self.active_zero();
        if self.points.is_empty() && zero.is_none() {
            return None;
        }
        // Clamp into the bounding box. On the stack: a ranking decision interpolates about
        // eight times.
        let mut q: SmallVec<[i64; 8]> = SmallVec::from_slice(x);
        let mut bb: SmallVec<[(i64, i64); 8]> = SmallVec::with_capacity(x.len());
        for (k, qk) in q.iter_mut().enumerate() {
            let (lo, hi) = self.span(zero, k).unwrap_or((*qk, *qk));
            *qk = (*qk).clamp(lo, hi);
            bb.push((lo, hi));
        }
        if let Some(v) = self.vertex_value(&q, f) {
            return Some(v);
        }
        // Each vertex's value as `vertex_value` gives it: the measured points, then the active
        // assumed zero.
        let verts = || {
            self.points
                .iter()
                .map(|(k, s)| (k.as_slice(), f(s)))
                .chain(zero.map(|z| (z, self.points.get(z).map_or(0.0, f))))
        };
        if let Some(cell) = self.find_cell(&q, zero) {
            let verts: Vec<(&[i64], f64)> = verts().collect();
            return Some(cell.value(&q, &verts).max(0.0));
        }
        Some(idw(&q, verts(), &bb).max(0.0))
    }

    /// The smallest box around `q` whose corners are all vertices (see the module doc).
    fn find_cell(&self, q: &[i64], zero: Option<&[i64]>) -> Option<Cell> {
        let d = q.len();
        // Filled only once every axis has shared coordinates on both sides of `q`.
        let mut lo_c: Vec<Vec<i64>> = Vec::new();
        let mut hi_c: Vec<Vec<i64>> = Vec::new();
        let mut coords: SmallVec<[i64; 32]> = SmallVec::new();
        for (k, &qk) in q.iter().enumerate() {
            // Coordinates shared by two vertices or more, ascending.
            coords.clear();
            coords.extend(self.points.keys().map(|v| v[k]).chain(zero.map(|z| z[k])));
            coords.sort_unstable();
            let mut cands: SmallVec<[i64; 16]> = coords
                .windows(2)
                .filter(|w| w[0] == w[1])
                .map(|w| w[0])
                .collect();
            cands.dedup();
            let lo: Vec<i64> = cands.iter().rev().copied().filter(|&c| c <= qk).collect();
            let hi: Vec<i64> = cands.iter().copied().filter(|&c| c >= qk).collect();
            if lo.is_empty() || hi.is_empty() {
                return None;
            }
            lo_c.push(lo);
            hi_c.push(hi);
        }
        // Index tuples (i_0, j_0, …, i_{d-1}, j_{d-1}) by increasing sum.
        let limits: Vec<usize> = (0..d)
            .flat_map(|k| [lo_c[k].len(), hi_c[k].len()])
            .collect();
        let max_rank: usize = limits.iter().map(|l| l - 1).sum();
        let mut checks = 0usize;
        let mut idx = vec![0usize; 2 * d];
        for rank in 0..=max_rank {
            let mut found = None;
            let done = compositions(&mut idx, 0, rank, &limits, &mut |idx| {
                checks += 1;
                if checks > BOX_SEARCH_BUDGET {
                    return true;
                }
                let lo: Vec<i64> = (0..d).map(|k| lo_c[k][idx[2 * k]]).collect();
                let hi: Vec<i64> = (0..d).map(|k| hi_c[k][idx[2 * k + 1]]).collect();
                let cell = Cell::new(lo, hi);
                if cell.corners().iter().all(|c| self.is_vertex(c)) {
                    found = Some(cell);
                    return true;
                }
                false
            });
            if found.is_some() {
                return found;
            }
            if done || checks > BOX_SEARCH_BUDGET {
                return None;
            }
        }
        None
    }

    fn is_vertex(&self, x: &[i64]) -> bool {
        self.points.contains_key(x) || self.active_zero().is_some_and(|z| z == x)
    }
}

/// Calls `visit` for every tuple with `idx[i] < limits[i]` summing to `rank` (from position
/// `at` on); stops early and returns true when `visit` does.
fn compositions(
    idx: &mut [usize],
    at: usize,
    rank: usize,
    limits: &[usize],
    visit: &mut dyn FnMut(&[usize]) -> bool,
) -> bool {
    if at + 1 == idx.len() {
        if rank < limits[at] {
            idx[at] = rank;
            return visit(idx);
        }
        return false;
    }
    for v in 0..=rank.min(limits[at] - 1) {
        idx[at] = v;
        if compositions(idx, at + 1, rank - v, limits, visit) {
            return true;
        }
    }
    false
}

/// A grid box: corners lo and hi; `axes` are the axes on which it is not degenerate.
struct Cell {
    lo: Vec<i64>,
    hi: Vec<i64>,
    axes: Vec<usize>,
}

impl Cell {
    fn new(lo: Vec<i64>, hi: Vec<i64>) -> Self {
        let axes = (0..lo.len()).filter(|&k| lo[k] != hi[k]).collect();
        Self { lo, hi, axes }
    }

    /// The corner selected by `mask` (bit i set: `hi` on `axes[i]`).
    fn corner(&self, mask: usize) -> Vec<i64> {
        let mut c = self.lo.clone();
        for (i, &k) in self.axes.iter().enumerate() {
            if mask & (1 << i) != 0 {
                c[k] = self.hi[k];
            }
        }
        c
    }

    fn corners(&self) -> Vec<Vec<i64>> {
        (0..1usize << self.axes.len())
            .map(|m| self.corner(m))
            .collect()
    }

    /// Unit coordinates of `x` on the non-degenerate axes.
    fn unit(&self, x: &[i64]) -> Vec<f64> {
        self.axes
            .iter()
            .map(|&k| (x[k] - self.lo[k]) as f64 / (self.hi[k] - self.lo[k]) as f64)
            .collect()
    }

    /// Interpolated value at `q` (inside the box) from the vertices `verts`.
    fn value(&self, q: &[i64], verts: &[(&[i64], f64)]) -> f64 {
        let m = self.axes.len();
        // Classify the vertices inside the box.
        let mut corner_val = vec![0.0; 1 << m];
        // Edge curves keyed by (axis index i, mask over all axes with bit i clear).
        let mut edges: BTreeMap<(usize, usize), Vec<(i64, f64)>> = BTreeMap::new();
        let mut interior: Vec<(Vec<f64>, f64, &[i64])> = Vec::new();
        for (v, val) in verts {
            let inside_box = (0..q.len()).all(|k| self.lo[k] <= v[k] && v[k] <= self.hi[k]);
            if !inside_box {
                continue;
            }
            let mut mask = 0usize;
            let mut strictly: Vec<usize> = Vec::new();
            for (i, &k) in self.axes.iter().enumerate() {
                if v[k] == self.hi[k] {
                    mask |= 1 << i;
                } else if v[k] != self.lo[k] {
                    strictly.push(i);
                }
            }
            match strictly.len() {
                0 => {
                    corner_val[mask] = *val;
                    for i in 0..m {
                        let coord = v[self.axes[i]];
                        edges
                            .entry((i, mask & !(1 << i)))
                            .or_default()
                            .push((coord, *val));
                    }
                }
                1 => {
                    let i = strictly[0];
                    edges
                        .entry((i, mask))
                        .or_default()
                        .push((v[self.axes[i]], *val));
                }
                n if n == m => interior.push((self.unit(v), *val, v)),
                _ => {}
            }
        }
        for pts in edges.values_mut() {
            pts.sort_by_key(|p| p.0);
        }
        let g = |x: &[i64]| -> f64 {
            let u = self.unit(x);
            let weight = |mask: usize, skip: Option<usize>| -> f64 {
                (0..m)
                    .filter(|&i| Some(i) != skip)
                    .map(|i| {
                        if mask & (1 << i) != 0 {
                            u[i]
                        } else {
                            1.0 - u[i]
                        }
                    })
                    .product()
            };
            let b: f64 = (0..1usize << m)
                .map(|mask| weight(mask, None) * corner_val[mask])
                .sum();
            let mut sum_e = 0.0;
            for i in 0..m {
                let xi = x[self.axes[i]];
                for mask in (0..1usize << m).filter(|mask| mask & (1 << i) == 0) {
                    let curve = edges.get(&(i, mask)).map(|c| c.as_slice()).unwrap_or(&[]);
                    sum_e += weight(mask, Some(i)) * eval_polyline(curve, xi);
                }
            }
            sum_e - (m as f64 - 1.0) * b
        };
        let base = g(q);
        if interior.is_empty() {
            return base;
        }
        let uq = self.unit(q);
        let delta = uq
            .iter()
            .map(|u| u.min(1.0 - u))
            .fold(f64::INFINITY, f64::min);
        if delta <= 0.0 {
            return base;
        }
        let mut num = 0.0;
        let mut den = 1.0 / (delta * delta);
        for (uv, val, v) in &interior {
            let d2: f64 = uv.iter().zip(&uq).map(|(a, b)| (a - b) * (a - b)).sum();
            if d2 <= 0.0 {
                return *val;
            }
            let w = 1.0 / d2;
            num += w * (val - g(v));
            den += w;
        }
        base + num / den
    }
}

/// Piecewise-linear curve through sorted points, clamped at the ends; 0 when empty.
fn eval_polyline(pts: &[(i64, f64)], x: i64) -> f64 {
    let Some(first) = pts.first() else {
        return 0.0;
    };
    if x <= first.0 {
        return first.1;
    }
    for w in pts.windows(2) {
        let (a, b) = (w[0], w[1]);
        if x <= b.0 {
            if b.0 == a.0 {
                return b.1;
            }
            let t = (x - a.0) as f64 / (b.0 - a.0) as f64;
            return a.1 + t * (b.1 - a.1);
        }
    }
    pts.last().map_or(0.0, |p| p.1)
}

/// Inverse distance weighting (power 2) in coordinates normalised by the bounding box.
fn idw<'a>(q: &[i64], verts: impl IntoIterator<Item = (&'a [i64], f64)>, bb: &[(i64, i64)]) -> f64 {
    let mut num = 0.0;
    let mut den = 0.0;
    for (v, val) in verts {
        let d2: f64 = (0..q.len())
            .map(|k| {
                let span = (bb[k].1 - bb[k].0) as f64;
                if span > 0.0 {
                    let t = (q[k] - v[k]) as f64 / span;
                    t * t
                } else {
                    0.0
                }
            })
            .sum();
        if d2 <= 0.0 {
            return val;
        }
        num += val / d2;
        den += 1.0 / d2;
    }
    if den > 0.0 { num / den } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m1(points: &[(i64, f64)]) -> Fpm {
        let mut m = Fpm::new(vec!["n".into()]);
        for (x, s) in points {
            m.add_sample(&[*x], *s);
        }
        m
    }

    #[test]
    fn only_sizes_past_a_one_parameter_models_largest_are_past_its_top() {
        let m = m1(&[(100, 1e9), (500, 1e8)]);
        assert!(m.past_top(&[501]));
        assert!(!m.past_top(&[500]) && !m.past_top(&[50]));
        let mut two = Fpm::new(vec!["m".into(), "n".into()]);
        two.add_sample(&[10, 10], 1e9);
        assert!(!two.past_top(&[20, 20]));
    }

    #[test]
    fn one_d_lookups_between_and_beyond() {
        let m = m1(&[(100, 10.0), (200, 20.0), (400, 0.0)]);
        assert_eq!(m.speed(&[50]), Some(10.0));
        assert_eq!(m.speed(&[150]), Some(15.0));
        assert_eq!(m.speed(&[300]), Some(10.0));
        assert_eq!(m.speed(&[500]), Some(0.0));
        assert_eq!(m.time(&[500], 1.0), Some(f64::INFINITY));
        assert_eq!(m.time(&[150], 30.0), Some(2.0));
        assert!(m.covers(&[100]) && m.covers(&[400]) && !m.covers(&[401]) && !m.covers(&[99]));
    }

    #[test]
    fn assumed_zero_is_the_last_vertex_until_measured_beyond() {
        let mut m = m1(&[(100, 10.0)]);
        m.set_assumed_zero(&[300]);
        assert_eq!(m.len(), 1);
        assert_eq!(m.speed(&[200]), Some(5.0));
        assert_eq!(m.speed(&[400]), Some(0.0));
        assert_eq!(m.time(&[300], 1.0), Some(f64::INFINITY));
        assert!(m.covers(&[300]));
        // A real call beyond b overrides the assumption.
        m.add_sample(&[320], 8.0);
        assert!((m.speed(&[210]).unwrap() - 9.0).abs() < 1e-9);
        assert_eq!(m.speed(&[400]), Some(8.0));
    }

    #[test]
    fn online_samples_update_stats() {
        let mut m = m1(&[(100, 10.0)]);
        m.add_sample(&[100], 20.0);
        m.add_sample(&[100], 30.0);
        let s = m.vertex(&[100]).unwrap();
        assert_eq!((s.count, s.min, s.max), (3, 10.0, 30.0));
        assert!((s.mean - 20.0).abs() < 1e-12);
        assert_eq!(m.band(&[100]), Some((10.0, 30.0)));
        // Garbage is ignored rather than poisoning the model.
        m.add_sample(&[100], f64::NAN);
        m.add_sample(&[100], -1.0);
        m.add_sample(&[100, 3], 1.0);
        assert_eq!(m.vertex(&[100]).unwrap().count, 3);
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn empty_model_has_no_speed() {
        let m = Fpm::new(vec!["n".into()]);
        assert_eq!(m.speed(&[1]), None);
        assert_eq!(m.time(&[1], 1.0), None);
        assert!(!m.covers(&[1]));
        assert!(m.is_empty());
    }

    fn grid2(f: impl Fn(i64, i64) -> f64, xs: &[i64], ys: &[i64]) -> Fpm {
        let mut m = Fpm::new(vec!["m".into(), "n".into()]);
        for &x in xs {
            for &y in ys {
                m.add_sample(&[x, y], f(x, y));
            }
        }
        m
    }

    #[test]
    fn two_d_grid_is_bilinear_and_exact_at_vertices() {
        let f = |x: i64, y: i64| 1.0 + 2.0 * x as f64 + 3.0 * y as f64 + 0.5 * (x * y) as f64;
        let m = grid2(f, &[0, 10, 30], &[0, 20, 40]);
        for (x, y) in [(0, 0), (10, 20), (30, 40), (5, 7), (29, 1), (12, 33)] {
            let got = m.speed(&[x, y]).unwrap();
            assert!(
                (got - f(x, y)).abs() < 1e-9,
                "({x},{y}): {got} vs {}",
                f(x, y)
            );
        }
        // Outside: clamped.
        assert!((m.speed(&[-5, 50]).unwrap() - f(0, 40)).abs() < 1e-9);
    }

    #[test]
    fn two_d_edge_points_are_reproduced_and_blended() {
        // A coarse grid with extra points along one edge (as GBBP's edge refinement gives).
        let mut m = grid2(|_, _| 10.0, &[0, 100], &[0, 100]);
        m.add_sample(&[50, 0], 20.0);
        assert!((m.speed(&[50, 0]).unwrap() - 20.0).abs() < 1e-9);
        assert!((m.speed(&[25, 0]).unwrap() - 15.0).abs() < 1e-9);
        // Coons: the bump fades linearly towards the opposite edge.
        assert!((m.speed(&[50, 50]).unwrap() - 15.0).abs() < 1e-9);
        assert!((m.speed(&[50, 100]).unwrap() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn interior_sample_is_reproduced_and_continuous() {
        let mut m = grid2(|_, _| 10.0, &[0, 100], &[0, 100]);
        m.add_sample(&[37, 61], 30.0);
        assert_eq!(m.speed(&[37, 61]), Some(30.0));
        let near = m.speed(&[37, 60]).unwrap();
        assert!(near > 25.0, "{near}");
        // On the cell boundary the correction vanishes.
        assert!((m.speed(&[37, 0]).unwrap() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn scattered_samples_use_idw() {
        let mut m = Fpm::new(vec!["m".into(), "n".into()]);
        m.add_sample(&[1, 7], 10.0);
        m.add_sample(&[5, 2], 20.0);
        m.add_sample(&[9, 9], 30.0);
        assert_eq!(m.speed(&[5, 2]), Some(20.0));
        let v = m.speed(&[4, 4]).unwrap();
        assert!((10.0..=30.0).contains(&v));
    }

    #[test]
    fn slice_fixes_a_parameter() {
        let f = |x: i64, y: i64| (x + 2 * y) as f64;
        let m = grid2(f, &[0, 10, 20], &[0, 10, 20]);
        let s = m.slice(&[("m".to_string(), 5)]);
        assert_eq!(s.params(), &["n".to_string()]);
        assert_eq!(s.len(), 3);
        for y in [0, 7, 10, 20] {
            assert!((s.speed(&[y]).unwrap() - f(5, y)).abs() < 1e-9);
        }
        let exact = m.slice(&[("m".to_string(), 10)]);
        assert_eq!(exact.vertex(&[10]).unwrap().count, 1);
        // Interpolated vertices (count 0) survive a round trip.
        let back: Fpm = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn serde_round_trip() {
        let mut m = m1(&[(100, 10.0), (200, 20.0)]);
        m.set_assumed_zero(&[400]);
        m.set_intervals(vec![Interval {
            lo: vec![100],
            hi: vec![400],
            finalised: true,
        }]);
        let j = serde_json::to_string(&m).unwrap();
        let back: Fpm = serde_json::from_str(&j).unwrap();
        assert_eq!(back, m);
        let bad = r#"{"params":["n"],"points":[[[1,2],{"count":1,"min":1,"mean":1,"max":1}]]}"#;
        assert!(serde_json::from_str::<Fpm>(bad).is_err());
    }

    proptest! {
        #[test]
        fn one_d_interpolation_hits_vertices_and_stays_between_neighbours(
            pts in proptest::collection::btree_map(-1000i64..1000, 0.0f64..1e10, 1..30),
            queries in proptest::collection::vec(-1200i64..1200, 1..50),
        ) {
            let mut m = Fpm::new(vec!["n".into()]);
            for (x, s) in &pts {
                m.add_sample(&[*x], *s);
            }
            for (x, s) in &pts {
                prop_assert_eq!(m.speed(&[*x]), Some(*s));
            }
            let xs: Vec<(i64, f64)> = pts.iter().map(|(a, b)| (*a, *b)).collect();
            for q in queries {
                let v = m.speed(&[q]).unwrap();
                let lo = xs.iter().rev().find(|(x, _)| *x <= q).unwrap_or(&xs[0]);
                let hi = xs.iter().find(|(x, _)| *x >= q).unwrap_or(&xs[xs.len() - 1]);
                let (a, b) = (lo.1.min(hi.1), lo.1.max(hi.1));
                prop_assert!(v >= a - 1e-6 * b.max(1.0) && v <= b + 1e-6 * b.max(1.0),
                    "speed({}) = {} not within [{}, {}]", q, v, a, b);
            }
        }

        #[test]
        fn multi_d_interpolation_reproduces_vertices(
            pts in proptest::collection::btree_map((0i64..20, 0i64..20), 0.0f64..1e9, 1..40),
        ) {
            let mut m = Fpm::new(vec!["m".into(), "n".into()]);
            for ((x, y), s) in &pts {
                m.add_sample(&[*x, *y], *s);
            }
            for ((x, y), s) in &pts {
                prop_assert_eq!(m.speed(&[*x, *y]), Some(*s));
            }
            let hi = pts.values().cloned().fold(0.0, f64::max);
            for x in 0..20 {
                for y in (0..20).step_by(3) {
                    let v = m.speed(&[x, y]).unwrap();
                    prop_assert!(v.is_finite() && v >= 0.0);
                    // The edge blend may overshoot a little, never wildly.
                    prop_assert!(v <= 3.0 * hi + 1.0, "{} vs max vertex {}", v, hi);
                }
            }
        }
    }
}
