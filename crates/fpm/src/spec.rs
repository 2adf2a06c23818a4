//! What to build: parameters with their ranges and stride grid, the construction method, the
//! per-point sampling rule and the parameter constraint (PMM's `<parameters>`,
//! `<param_constraint>` and `<construction>`, digest 003 §2.3).
//!
//! # Config shape
//! [`BuildSpec`] deserialises from a flat table, so a server's model entry can *flatten* it next
//! to its own keys:
//!
//! ```toml
//! [[models]]
//! service = "solve"            # the server's key
//! priority = 30                # the server's key
//! method = "gbbp"              # BuildSpec from here on; every key but `params` is optional
//! params = [{ name = "n", min = 64, max = 4096, stride = 64 }]
//! min_sample_num = 3           # SamplingRule, flattened into BuildSpec
//! min_sample_time_s = 0.5
//! constraint = { formula = "8*n*n", max = 1e9 }
//! ```
//!
//! with `struct ModelEntry { service: String, priority: i32, #[serde(flatten)] build: BuildSpec }`.
//! Serde cannot combine `flatten` with `deny_unknown_fields`, so a server that wants to reject
//! misspelt keys checks them against [`BuildSpec::KEYS`] plus its own. The nested tables
//! ([`ParamSpec`], [`Constraint`]) do reject unknown keys.

use crate::build::BuildError;
use gridwise_proto::Complexity;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

fn one() -> i64 {
    1
}

/// One integer size parameter: its range and stride grid (PMM `<param>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    /// Name (as in the service's size parameters and the complexity / constraint formulas).
    pub name: String,
    /// Smallest size (GBBP's *a*).
    pub min: i64,
    /// Largest size (GBBP's *b*).
    pub max: i64,
    /// Grid step: builders only use sizes `offset + k·stride` (PMM: ≈ 1/100 of the range).
    #[serde(default = "one")]
    pub stride: i64,
    /// Shifts the grid to `offset + k·stride`, e.g. 1 with stride 2 for odd sizes only; it need
    /// not lie in `[min, max]`.
    #[serde(default)]
    pub offset: i64,
}

impl ParamSpec {
    /// A parameter over `[min, max]` with the given stride and offset 0.
    pub fn new(name: &str, min: i64, max: i64, stride: i64) -> Self {
        Self {
            name: name.to_string(),
            min,
            max,
            stride,
            offset: 0,
        }
    }

    /// The stride grid points inside `[min, max]`; `None` when there are none or the stride is
    /// not positive.
    pub fn grid(&self) -> Option<AxisGrid> {
        if self.stride <= 0 || self.min > self.max {
            return None;
        }
        let (min, max, s, o) = (
            self.min as i128,
            self.max as i128,
            self.stride as i128,
            self.offset as i128,
        );
        let first =
            o + (min - o).div_euclid(s) * s + if (min - o).rem_euclid(s) == 0 { 0 } else { s };
        let last = o + (max - o).div_euclid(s) * s;
        if first > last {
            return None;
        }
        let count = (last - first) / s + 1;
        Some(AxisGrid {
            first: i64::try_from(first).ok()?,
            stride: self.stride,
            count: usize::try_from(count).ok()?,
        })
    }
}

/// The stride grid of one axis: `first + i·stride` for `i < count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AxisGrid {
    /// The parameter's `min`, rounded up onto the grid.
    pub first: i64,
    pub stride: i64,
    /// At least 1: a parameter with no grid size has no `AxisGrid`.
    pub count: usize,
}

impl AxisGrid {
    /// The i-th grid size; `i` is not checked against `count`.
    pub fn value(&self, i: usize) -> i64 {
        self.first + i as i64 * self.stride
    }

    /// The parameter's `max`, rounded down onto the grid.
    pub fn last(&self) -> i64 {
        self.value(self.count - 1)
    }

    /// Index of the grid size nearest to `v` (ties go down), clamped into the grid.
    pub fn nearest(&self, v: f64) -> usize {
        let t = (v - self.first as f64) / self.stride as f64;
        let i = (t - 0.5).ceil();
        if i <= 0.0 {
            0
        } else {
            (i as usize).min(self.count - 1)
        }
    }

    /// Index of `v` when it is a grid size.
    pub fn index_of(&self, v: i64) -> Option<usize> {
        let d = v.checked_sub(self.first)?;
        if d < 0 || d % self.stride != 0 {
            return None;
        }
        let i = usize::try_from(d / self.stride).ok()?;
        (i < self.count).then_some(i)
    }
}

/// Construction method (PMM `<method>`, plus the thesis's 20-point comparison).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Method {
    /// GBBP; for several parameters the diagonal method (§4.2.4). `"gbbp"`.
    #[default]
    Gbbp,
    /// GBBP; for several parameters the boundary method (§4.2.3). `"gbbp-boundary"`, alias
    /// `"gbbp_naive"` (PMM's name).
    GbbpBoundary,
    /// Every stride point from min to max, in order. `"naive"`.
    Naive,
    /// The same points in bisection order. `"naive-bisect"`.
    NaiveBisect,
    /// The same points in a seeded random order. `"random"` (alias `"rand"`).
    Random,
    /// n equally spaced points from min to max inclusive, snapped to the grid. `"uniform-N"`.
    Uniform(usize),
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::Gbbp => f.write_str("gbbp"),
            Method::GbbpBoundary => f.write_str("gbbp-boundary"),
            Method::Naive => f.write_str("naive"),
            Method::NaiveBisect => f.write_str("naive-bisect"),
            Method::Random => f.write_str("random"),
            Method::Uniform(n) => write!(f, "uniform-{n}"),
        }
    }
}

impl FromStr for Method {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let norm = s.trim().to_ascii_lowercase().replace('_', "-");
        Ok(match norm.as_str() {
            "gbbp" | "gbbp-diagonal" => Method::Gbbp,
            "gbbp-boundary" | "gbbp-naive" => Method::GbbpBoundary,
            "naive" => Method::Naive,
            "naive-bisect" => Method::NaiveBisect,
            "random" | "rand" => Method::Random,
            "uniform" => Method::Uniform(20),
            other => match other.strip_prefix("uniform-").map(str::parse::<usize>) {
                Some(Ok(n)) if n >= 1 => Method::Uniform(n),
                _ => {
                    return Err(format!(
                        "unknown construction method `{s}` (expected gbbp, gbbp-boundary, \
                         naive, naive-bisect, random or uniform-N)"
                    ));
                }
            },
        })
    }
}

impl TryFrom<String> for Method {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Method> for String {
    fn from(m: Method) -> String {
        m.to_string()
    }
}

fn default_min_sample_num() -> u32 {
    1
}

fn default_max_samples() -> u32 {
    50
}

/// When a point counts as measured (PMM `<min_sample_num>`, `<min_sample_time>`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingRule {
    /// At least this many runs (default 1).
    #[serde(default = "default_min_sample_num")]
    pub min_sample_num: u32,
    /// And at least this many seconds of runs in total (default 0).
    #[serde(default)]
    pub min_sample_time_s: f64,
    /// But never more than this many runs (default 50): a near-zero-time kernel would otherwise
    /// loop for a long time to fill `min_sample_time_s`.
    #[serde(default = "default_max_samples")]
    pub max_samples: u32,
}

impl Default for SamplingRule {
    fn default() -> Self {
        Self {
            min_sample_num: default_min_sample_num(),
            min_sample_time_s: 0.0,
            max_samples: default_max_samples(),
        }
    }
}

/// A limit on a formula of the parameters, e.g. the memory footprint `3*8*n*n` within
/// `[32768, 1.6e9]` (PMM `<param_constraint>`). Sizes outside it are not built.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constraint {
    /// Expression over the parameter names (same syntax as complexity expressions).
    pub formula: String,
    /// Smallest allowed value, inclusive.
    #[serde(default)]
    pub min: Option<f64>,
    /// Largest allowed value, inclusive.
    #[serde(default)]
    pub max: Option<f64>,
}

/// Default relative widening of a point's measured speeds into its GBBP cut (see
/// [`crate::gbbp`]): ±5 %.
pub const DEFAULT_REL_TOL: f64 = 0.05;

fn default_rel_tol() -> f64 {
    DEFAULT_REL_TOL
}

/// Everything a build needs besides the benchmark itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuildSpec {
    /// The size parameters, in the service's order.
    pub params: Vec<ParamSpec>,
    /// Construction method (default `gbbp`).
    #[serde(default)]
    pub method: Method,
    /// When a point counts as measured (flattened: its keys sit beside the others).
    #[serde(flatten)]
    pub sampling: SamplingRule,
    /// Optional limit on the parameter space.
    #[serde(default)]
    pub constraint: Option<Constraint>,
    /// Measure the top size instead of assuming speed 0 there (PMM `<fuzzy_max>`).
    #[serde(default)]
    pub fuzzy_max: bool,
    /// Relative widening of measured speeds into GBBP cuts (default [`DEFAULT_REL_TOL`]).
    #[serde(default = "default_rel_tol")]
    pub rel_tol: f64,
    /// Seed of the `random` method's order.
    #[serde(default)]
    pub seed: u64,
}

/// Builds with more grid points than this are refused (naive / random / uniform over several
/// parameters grow as a product).
pub const MAX_GRID_POINTS: u128 = 1_000_000;

impl BuildSpec {
    /// Every key a flattened `BuildSpec` reads (for a server that rejects unknown keys).
    pub const KEYS: &'static [&'static str] = &[
        "params",
        "method",
        "min_sample_num",
        "min_sample_time_s",
        "max_samples",
        "constraint",
        "fuzzy_max",
        "rel_tol",
        "seed",
    ];

    /// A spec with the given parameters and method and every other setting at its default.
    pub fn new(params: Vec<ParamSpec>, method: Method) -> Self {
        Self {
            params,
            method,
            sampling: SamplingRule::default(),
            constraint: None,
            fuzzy_max: false,
            rel_tol: DEFAULT_REL_TOL,
            seed: 0,
        }
    }

    /// The parameter names, in order.
    pub fn names(&self) -> Vec<String> {
        self.params.iter().map(|p| p.name.clone()).collect()
    }

    /// Checks ranges, strides, sampling, tolerance, method and the constraint formula.
    pub fn validate(&self) -> Result<(), BuildError> {
        let bad = |m: String| Err(BuildError::InvalidSpec(m));
        if self.params.is_empty() {
            return bad("no size parameters".into());
        }
        let mut total: u128 = 1;
        for (i, p) in self.params.iter().enumerate() {
            if p.name.trim().is_empty() {
                return bad(format!("parameter {i} has an empty name"));
            }
            if self.params[..i].iter().any(|q| q.name == p.name) {
                return bad(format!("parameter `{}` is listed twice", p.name));
            }
            if p.min > p.max {
                return bad(format!(
                    "parameter `{}`: min {} > max {}",
                    p.name, p.min, p.max
                ));
            }
            if p.stride < 1 {
                return bad(format!(
                    "parameter `{}`: stride {} must be at least 1",
                    p.name, p.stride
                ));
            }
            let Some(g) = p.grid() else {
                return bad(format!(
                    "parameter `{}`: no size offset + k·stride ({} + k·{}) lies in [{}, {}]",
                    p.name, p.offset, p.stride, p.min, p.max
                ));
            };
            total = total.saturating_mul(g.count as u128);
        }
        let s = &self.sampling;
        if s.min_sample_num < 1 {
            return bad("min_sample_num must be at least 1".into());
        }
        if s.max_samples < s.min_sample_num {
            return bad(format!(
                "max_samples {} is below min_sample_num {}",
                s.max_samples, s.min_sample_num
            ));
        }
        if !(s.min_sample_time_s.is_finite() && s.min_sample_time_s >= 0.0) {
            return bad(format!(
                "min_sample_time_s {} must be a finite number ≥ 0",
                s.min_sample_time_s
            ));
        }
        if !(self.rel_tol.is_finite() && (0.0..1.0).contains(&self.rel_tol)) {
            return bad(format!("rel_tol {} must be in [0, 1)", self.rel_tol));
        }
        match self.method {
            Method::Uniform(0) => return bad("uniform-N needs N ≥ 1".into()),
            Method::Naive | Method::NaiveBisect | Method::Random if total > MAX_GRID_POINTS => {
                return bad(format!(
                    "method {} would measure {total} grid points (limit {MAX_GRID_POINTS}); \
                     raise the strides",
                    self.method
                ));
            }
            Method::Uniform(n)
                if (n as u128).saturating_pow(self.params.len() as u32) > MAX_GRID_POINTS =>
            {
                return bad(format!(
                    "method {} over {} parameters would measure too many points",
                    self.method,
                    self.params.len()
                ));
            }
            _ => {}
        }
        if let Some(c) = &self.constraint {
            Complexity::parse(&c.formula, &self.names())
                .map_err(|e| BuildError::InvalidSpec(format!("constraint: {e}")))?;
            for (what, v) in [("min", c.min), ("max", c.max)] {
                if v.is_some_and(|v| v.is_nan()) {
                    return bad(format!("constraint {what} is NaN"));
                }
            }
            if let (Some(lo), Some(hi)) = (c.min, c.max) {
                if lo > hi {
                    return bad(format!("constraint min {lo} > max {hi}"));
                }
            }
        }
        Ok(())
    }

    /// Whether the builder may run size `x`: right number of sizes, within every parameter's
    /// [min, max], and within the constraint (a formula that cannot be evaluated at `x` does not
    /// admit it). Parses the formula on every call; builders compile it once.
    pub fn admits(&self, x: &[i64]) -> bool {
        match Admission::new(self) {
            Ok(a) => a.admits(x),
            Err(_) => false,
        }
    }
}

/// The bounds and the compiled constraint of a spec.
pub(crate) struct Admission {
    bounds: Vec<(i64, i64)>,
    names: Vec<String>,
    formula: Option<(Complexity, Option<f64>, Option<f64>)>,
}

impl Admission {
    pub(crate) fn new(spec: &BuildSpec) -> Result<Self, BuildError> {
        let names = spec.names();
        let formula = match &spec.constraint {
            Some(c) => Some((
                Complexity::parse(&c.formula, &names)
                    .map_err(|e| BuildError::InvalidSpec(format!("constraint: {e}")))?,
                c.min,
                c.max,
            )),
            None => None,
        };
        Ok(Self {
            bounds: spec.params.iter().map(|p| (p.min, p.max)).collect(),
            names,
            formula,
        })
    }

    pub(crate) fn admits(&self, x: &[i64]) -> bool {
        if x.len() != self.bounds.len() {
            return false;
        }
        if !x
            .iter()
            .zip(&self.bounds)
            .all(|(v, (lo, hi))| lo <= v && v <= hi)
        {
            return false;
        }
        let Some((c, lo, hi)) = &self.formula else {
            return true;
        };
        let sizes: Vec<(String, i64)> = self.names.iter().cloned().zip(x.iter().copied()).collect();
        match c.eval(&sizes) {
            Ok(v) => lo.is_none_or(|lo| v >= lo) && hi.is_none_or(|hi| v <= hi),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_respects_offset_and_range() {
        let p = ParamSpec {
            name: "n".into(),
            min: 10,
            max: 100,
            stride: 32,
            offset: 5,
        };
        let g = p.grid().unwrap();
        assert_eq!((g.first, g.count, g.last()), (37, 2, 69));
        assert_eq!(g.index_of(69), Some(1));
        assert_eq!(g.index_of(70), None);
        assert_eq!(g.nearest(52.0), 0);
        assert_eq!(g.nearest(54.0), 1);
        assert_eq!(g.nearest(1e9), 1);
        let neg = ParamSpec {
            name: "n".into(),
            min: -10,
            max: 10,
            stride: 4,
            offset: 1,
        };
        let g = neg.grid().unwrap();
        assert_eq!((g.first, g.last()), (-7, 9));
        assert!(ParamSpec::new("n", 5, 6, 10).grid().is_none());
    }

    #[test]
    fn method_names_round_trip() {
        for m in [
            Method::Gbbp,
            Method::GbbpBoundary,
            Method::Naive,
            Method::NaiveBisect,
            Method::Random,
            Method::Uniform(20),
        ] {
            assert_eq!(m.to_string().parse::<Method>().unwrap(), m);
        }
        assert_eq!(
            "gbbp_naive".parse::<Method>().unwrap(),
            Method::GbbpBoundary
        );
        assert_eq!(
            "naive_bisect".parse::<Method>().unwrap(),
            Method::NaiveBisect
        );
        assert_eq!("rand".parse::<Method>().unwrap(), Method::Random);
        assert!("uniform-0".parse::<Method>().is_err());
        assert!("fast".parse::<Method>().is_err());
    }

    #[test]
    fn flat_config_deserialises_with_defaults() {
        // What a server's `[[models]]` entry looks like (JSON standing in for TOML), wrapped in
        // a struct that flattens BuildSpec beside its own keys.
        #[derive(Deserialize)]
        struct Entry {
            service: String,
            #[serde(default)]
            priority: i32,
            #[serde(flatten)]
            build: BuildSpec,
        }
        let j = r#"{ "service": "solve", "priority": 30, "method": "gbbp",
                     "params": [{ "name": "n", "min": 64, "max": 4096, "stride": 64 }],
                     "min_sample_num": 3, "min_sample_time_s": 0.5,
                     "constraint": { "formula": "8*n*n", "max": 1e9 } }"#;
        let e: Entry = serde_json::from_str(j).unwrap();
        assert_eq!(e.service, "solve");
        assert_eq!(e.priority, 30);
        let b = e.build;
        assert_eq!(b.method, Method::Gbbp);
        assert_eq!(b.params[0].offset, 0);
        assert_eq!(b.sampling.min_sample_num, 3);
        assert_eq!(b.sampling.min_sample_time_s, 0.5);
        assert_eq!(b.sampling.max_samples, 50);
        assert_eq!(b.rel_tol, DEFAULT_REL_TOL);
        assert!(!b.fuzzy_max);
        b.validate().unwrap();
        assert!(b.admits(&[64]));
        assert!(!b.admits(&[11_000]));
        // 8·n² ≤ 1e9 ⇔ n ≤ 11180; with max 4096 everything in range is admitted.
        assert!(b.admits(&[4096]));
        // Integers are accepted for float keys.
        let j = r#"{ "params": [{ "name": "n", "min": 1, "max": 9 }], "min_sample_time_s": 60 }"#;
        let b: BuildSpec = serde_json::from_str(j).unwrap();
        assert_eq!(b.sampling.min_sample_time_s, 60.0);
        assert_eq!(b.params[0].stride, 1);
    }

    #[test]
    fn serde_round_trip_and_unknown_nested_keys() {
        let mut s = BuildSpec::new(vec![ParamSpec::new("n", 64, 4096, 64)], Method::Uniform(20));
        s.constraint = Some(Constraint {
            formula: "3*8*n*n".into(),
            min: Some(32768.0),
            max: Some(1.6e9),
        });
        s.fuzzy_max = true;
        s.seed = 7;
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains("\"uniform-20\""));
        let back: BuildSpec = serde_json::from_str(&j).unwrap();
        assert_eq!(back, s);
        let typo = r#"{ "params": [{ "name": "n", "min": 1, "max": 9, "strde": 2 }] }"#;
        assert!(serde_json::from_str::<BuildSpec>(typo).is_err());
    }

    #[test]
    fn validation_catches_mistakes() {
        let ok = BuildSpec::new(vec![ParamSpec::new("n", 64, 4096, 64)], Method::Gbbp);
        ok.validate().unwrap();
        let mut s = ok.clone();
        s.params[0].stride = 0;
        assert!(s.validate().is_err());
        let mut s = ok.clone();
        s.params[0].min = 5000;
        assert!(s.validate().is_err());
        let mut s = ok.clone();
        s.params.push(ParamSpec::new("n", 1, 2, 1));
        assert!(s.validate().is_err());
        let mut s = ok.clone();
        s.constraint = Some(Constraint {
            formula: "8*m*m".into(),
            min: None,
            max: Some(1.0),
        });
        assert!(s.validate().is_err());
        let mut s = ok.clone();
        s.sampling.max_samples = 0;
        assert!(s.validate().is_err());
        let mut s = ok.clone();
        s.rel_tol = 1.5;
        assert!(s.validate().is_err());
        let mut s = ok;
        s.params = vec![
            ParamSpec::new("m", 1, 10_000, 1),
            ParamSpec::new("n", 1, 10_000, 1),
        ];
        s.method = Method::Naive;
        assert!(s.validate().is_err());
    }

    #[test]
    fn constraint_bounds_admission() {
        let mut s = BuildSpec::new(
            vec![
                ParamSpec::new("m", 1, 100, 1),
                ParamSpec::new("n", 1, 100, 1),
            ],
            Method::Naive,
        );
        s.constraint = Some(Constraint {
            formula: "m*n".into(),
            min: Some(10.0),
            max: Some(100.0),
        });
        assert!(s.admits(&[10, 10]));
        assert!(!s.admits(&[11, 10]));
        assert!(!s.admits(&[3, 3]));
        assert!(!s.admits(&[0, 50]));
        assert!(!s.admits(&[5]));
    }
}
