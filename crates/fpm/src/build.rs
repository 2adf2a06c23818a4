//! Running a model build: the benchmark interface, the per-point sampling rule, progress
//! reporting, and dispatch to the construction methods ([`crate::gbbp`], [`crate::multi`],
//! [`crate::baseline`]).
//!
//! # Sampling (PMM `<min_sample_num>`, `<min_sample_time>`)
//! A point counts as measured after at least `min_sample_num` runs **and** at least
//! `min_sample_time_s` seconds of runs in total, and after at most `max_samples` runs whatever
//! the time. Its [`SpeedStats`] go to [`Observer::on_point`] at once (a server streams them to the
//! agent) and a [`Progress`] follows every point. A size is never benchmarked twice in one build:
//! methods that meet a size again (grid nodes shared by several construction lines) reuse it.
//!
//! # Sizes that cannot run
//! [`BenchError::Infeasible`] (the kernel cannot run at x: allocation failure, invalid parameter
//! combination) records speed 0 at x — a vertex like any other, so [`crate::model::Fpm::time`]
//! answers ∞ there and the agent learns the server cannot run that size (the Hydropad lesson,
//! digest §3.3). Such a run costs no benchmark time. [`BenchError::Failed`] aborts the build.

use crate::gbbp::Cut;
use crate::model::{Fpm, Interval};
use crate::spec::{Admission, AxisGrid, BuildSpec, Method};
use crate::stats::SpeedStats;

/// One run of the kernel at a size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Wall-clock seconds of the timed region.
    pub seconds: f64,
    /// Operations per second (complexity ÷ seconds).
    pub speed: f64,
}

/// Why a run produced no measurement.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BenchError {
    /// The kernel cannot run at this size (recorded as speed 0).
    #[error("cannot run at this size: {0}")]
    Infeasible(String),
    /// The run failed for another reason (aborts the build).
    #[error("benchmark run failed: {0}")]
    Failed(String),
}

/// Runs the kernel once at a size (a real kernel, an external benchmark binary, or a
/// [`crate::eval::VirtualBench`]).
pub trait Bench {
    /// Runs once at `x` (sizes in the spec's parameter order).
    fn run(&mut self, x: &[i64]) -> Result<Measurement, BenchError>;
}

/// Where a build stands.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// Vertices measured so far, sizes that cannot run (speed 0) included; the assumed zero is
    /// not one.
    pub points: usize,
    /// Kernel runs so far, runs at sizes that cannot run included.
    pub runs: usize,
    /// Seconds of benchmark runs so far.
    pub bench_time_s: f64,
    /// Construction intervals not yet finalised.
    pub open_intervals: usize,
    /// Set only on the last report, sent once the build has finished.
    pub done: bool,
}

/// Receives points and progress while a build runs.
pub trait Observer {
    /// A point has just been measured (its final stats for this build).
    fn on_point(&mut self, _x: &[i64], _stats: &SpeedStats) {}
    /// Progress after each point, and once more at the end with `done`.
    fn on_progress(&mut self, _p: &Progress) {}
}

/// An observer that ignores everything.
pub struct NoObserver;

impl Observer for NoObserver {}

/// The result of a build.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildReport {
    /// The model, with its construction intervals.
    pub fpm: Fpm,
    /// `fpm.len()`: measured vertices, as in the last [`Progress`].
    pub points: usize,
    pub runs: usize,
    /// Sum of the timed regions of the runs (sizes that cannot run add nothing), not the
    /// build's wall time.
    pub bench_time_s: f64,
}

/// Why a build failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// The spec is inconsistent (the message says what to fix).
    #[error("invalid model build spec: {0}")]
    InvalidSpec(String),
    /// No grid size satisfies the ranges and the constraint.
    #[error("no size on the parameter grid satisfies the constraint")]
    NoAdmissibleSize,
    /// A benchmark run failed.
    #[error("benchmark at {x:?} failed: {reason}")]
    Bench {
        x: Vec<i64>,
        /// What the benchmark said.
        reason: String,
    },
    /// A benchmark run returned a negative, NaN or infinite time or speed.
    #[error("benchmark at {x:?} returned an invalid measurement: {reason}")]
    BadMeasurement { x: Vec<i64>, reason: String },
    /// A builder invariant broke (a bug in this crate, reported instead of panicking).
    #[error("internal model builder error: {0}")]
    Internal(String),
}

/// Builds a model as `spec` says, running `bench` and reporting to `obs`.
pub fn build(
    spec: &BuildSpec,
    bench: &mut dyn Bench,
    obs: &mut dyn Observer,
) -> Result<BuildReport, BuildError> {
    spec.validate()?;
    let mut ctx = Ctx::new(spec, bench, obs)?;
    match spec.method {
        Method::Gbbp | Method::GbbpBoundary if spec.params.len() == 1 => {
            crate::gbbp::build_1d(&mut ctx)?
        }
        Method::Gbbp => crate::multi::diagonal(&mut ctx)?,
        Method::GbbpBoundary => crate::multi::boundary(&mut ctx)?,
        Method::Naive | Method::NaiveBisect | Method::Random | Method::Uniform(_) => {
            crate::baseline::run(&mut ctx)?
        }
    }
    if ctx.fpm.is_empty() {
        return Err(BuildError::NoAdmissibleSize);
    }
    Ok(ctx.finish())
}

/// The state of one build, shared by the construction methods.
pub(crate) struct Ctx<'a> {
    pub(crate) spec: &'a BuildSpec,
    pub(crate) grids: Vec<AxisGrid>,
    admission: Admission,
    bench: &'a mut dyn Bench,
    obs: &'a mut dyn Observer,
    pub(crate) fpm: Fpm,
    runs: usize,
    bench_time_s: f64,
    intervals: Vec<Interval>,
}

impl<'a> Ctx<'a> {
    fn new(
        spec: &'a BuildSpec,
        bench: &'a mut dyn Bench,
        obs: &'a mut dyn Observer,
    ) -> Result<Self, BuildError> {
        let grids = spec
            .params
            .iter()
            .map(|p| {
                p.grid().ok_or_else(|| {
                    BuildError::InvalidSpec(format!("parameter `{}` has no grid point", p.name))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            spec,
            grids,
            admission: Admission::new(spec)?,
            bench,
            obs,
            fpm: Fpm::new(spec.names()),
            runs: 0,
            bench_time_s: 0.0,
            intervals: Vec::new(),
        })
    }

    fn finish(mut self) -> BuildReport {
        self.emit_progress(true);
        let mut fpm = self.fpm;
        fpm.set_intervals(self.intervals);
        BuildReport {
            points: fpm.len(),
            fpm,
            runs: self.runs,
            bench_time_s: self.bench_time_s,
        }
    }

    /// Whether the builder may run `x` (bounds and constraint).
    pub(crate) fn admits(&self, x: &[i64]) -> bool {
        self.admission.admits(x)
    }

    /// Whether `x` is already a vertex of this build (measured, or the assumed zero).
    pub(crate) fn known(&self, x: &[i64]) -> bool {
        self.fpm.vertex(x).is_some() || self.fpm.assumed_zero() == Some(x)
    }

    /// Declares the assumed-zero endpoint.
    pub(crate) fn assume_zero(&mut self, x: &[i64]) {
        self.fpm.set_assumed_zero(x);
    }

    /// The cut at a vertex of this build: measured stats widened by `rel_tol`, or [0, 0] at the
    /// assumed zero.
    pub(crate) fn cut(&self, x: &[i64]) -> Result<Cut, BuildError> {
        if let Some(s) = self.fpm.vertex(x) {
            return Ok(Cut::from_stats(s, self.spec.rel_tol));
        }
        if self.fpm.assumed_zero() == Some(x) {
            return Ok(Cut::ZERO);
        }
        Err(BuildError::Internal(format!(
            "no cut at {x:?}: it was neither measured nor assumed"
        )))
    }

    /// Measures `x` (unless already measured in this build) and returns its cut.
    pub(crate) fn measure_cut(&mut self, x: &[i64]) -> Result<Cut, BuildError> {
        self.measure(x)?;
        self.cut(x)
    }

    /// Measures `x` by the sampling rule, unless this build already did.
    pub(crate) fn measure(&mut self, x: &[i64]) -> Result<SpeedStats, BuildError> {
        if let Some(s) = self.fpm.vertex(x) {
            return Ok(*s);
        }
        let rule = self.spec.sampling;
        let mut stats: Option<SpeedStats> = None;
        let mut n = 0u32;
        let mut seconds = 0.0;
        loop {
            match self.bench.run(x) {
                Ok(m) => {
                    if !(m.seconds.is_finite() && m.seconds >= 0.0) {
                        return Err(BuildError::BadMeasurement {
                            x: x.to_vec(),
                            reason: format!("time {} s", m.seconds),
                        });
                    }
                    if !(m.speed.is_finite() && m.speed >= 0.0) {
                        return Err(BuildError::BadMeasurement {
                            x: x.to_vec(),
                            reason: format!("speed {} op/s", m.speed),
                        });
                    }
                    self.runs += 1;
                    self.bench_time_s += m.seconds;
                    seconds += m.seconds;
                    n += 1;
                    match &mut stats {
                        Some(s) => s.add(m.speed),
                        None => stats = Some(SpeedStats::new(m.speed)),
                    }
                }
                Err(BenchError::Infeasible(_)) => {
                    // Cannot run here: speed 0, whatever earlier runs said (a size that only
                    // sometimes fits is not one to schedule).
                    self.runs += 1;
                    stats = Some(SpeedStats::new(0.0));
                    break;
                }
                Err(BenchError::Failed(reason)) => {
                    return Err(BuildError::Bench {
                        x: x.to_vec(),
                        reason,
                    });
                }
            }
            if n >= rule.max_samples
                || (n >= rule.min_sample_num && seconds >= rule.min_sample_time_s)
            {
                break;
            }
        }
        let stats = stats.ok_or_else(|| BuildError::Internal("no sample taken".into()))?;
        self.fpm.insert(x, stats);
        self.obs.on_point(x, &stats);
        self.emit_progress(false);
        Ok(stats)
    }

    fn emit_progress(&mut self, done: bool) {
        let p = Progress {
            points: self.fpm.len(),
            runs: self.runs,
            bench_time_s: self.bench_time_s,
            open_intervals: self.intervals.iter().filter(|i| !i.finalised).count(),
            done,
        };
        self.obs.on_progress(&p);
    }

    // ---- construction intervals ----

    fn find_open(&self, lo: &[i64], hi: &[i64]) -> Option<usize> {
        self.intervals
            .iter()
            .rposition(|i| !i.finalised && i.lo == lo && i.hi == hi)
    }

    /// Records an open construction interval.
    pub(crate) fn open(&mut self, lo: &[i64], hi: &[i64]) {
        if self.find_open(lo, hi).is_none() {
            self.intervals.push(Interval {
                lo: lo.to_vec(),
                hi: hi.to_vec(),
                finalised: false,
            });
        }
    }

    /// Replaces the open interval [lo, hi] by the open intervals [lo, mid] and [mid, hi].
    pub(crate) fn split(&mut self, lo: &[i64], hi: &[i64], mid: &[i64]) {
        let left = Interval {
            lo: lo.to_vec(),
            hi: mid.to_vec(),
            finalised: false,
        };
        let right = Interval {
            lo: mid.to_vec(),
            hi: hi.to_vec(),
            finalised: false,
        };
        match self.find_open(lo, hi) {
            Some(i) => {
                self.intervals[i] = left;
                self.intervals.insert(i + 1, right);
            }
            None => {
                self.intervals.push(left);
                self.intervals.push(right);
            }
        }
    }

    /// Marks [lo, hi] finalised (recording it if it was not open).
    pub(crate) fn finalise(&mut self, lo: &[i64], hi: &[i64]) {
        match self.find_open(lo, hi) {
            Some(i) => self.intervals[i].finalised = true,
            None => self.intervals.push(Interval {
                lo: lo.to_vec(),
                hi: hi.to_vec(),
                finalised: true,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ParamSpec;

    /// A bench whose every run takes `secs` seconds at speed `speed`, or is infeasible above
    /// `limit`; it counts runs per size.
    struct Fixed {
        secs: f64,
        speed: f64,
        limit: i64,
        calls: Vec<Vec<i64>>,
    }

    impl Bench for Fixed {
        fn run(&mut self, x: &[i64]) -> Result<Measurement, BenchError> {
            self.calls.push(x.to_vec());
            if x[0] > self.limit {
                return Err(BenchError::Infeasible("too big".into()));
            }
            Ok(Measurement {
                seconds: self.secs,
                speed: self.speed,
            })
        }
    }

    #[derive(Default)]
    struct Log {
        points: Vec<Vec<i64>>,
        progress: Vec<Progress>,
    }

    impl Observer for Log {
        fn on_point(&mut self, x: &[i64], _s: &SpeedStats) {
            self.points.push(x.to_vec());
        }
        fn on_progress(&mut self, p: &Progress) {
            self.progress.push(p.clone());
        }
    }

    fn spec(min_num: u32, min_time: f64, max: u32) -> BuildSpec {
        let mut s = BuildSpec::new(vec![ParamSpec::new("n", 10, 30, 10)], Method::Naive);
        s.sampling.min_sample_num = min_num;
        s.sampling.min_sample_time_s = min_time;
        s.sampling.max_samples = max;
        s
    }

    fn runs_per_point(s: &BuildSpec, secs: f64) -> usize {
        let mut b = Fixed {
            secs,
            speed: 1.0,
            limit: i64::MAX,
            calls: vec![],
        };
        let r = build(s, &mut b, &mut NoObserver).unwrap();
        assert_eq!(r.points, 3);
        r.runs / 3
    }

    #[test]
    fn sampling_rule_needs_count_and_time_capped_by_max() {
        assert_eq!(runs_per_point(&spec(1, 0.0, 50), 1.0), 1);
        assert_eq!(runs_per_point(&spec(3, 0.0, 50), 1.0), 3);
        // 60 s at 20 s a run: 3 runs (the thesis's example).
        assert_eq!(runs_per_point(&spec(1, 60.0, 50), 20.0), 3);
        assert_eq!(runs_per_point(&spec(5, 60.0, 50), 20.0), 5);
        // A kernel too fast to fill the time stops at max_samples.
        assert_eq!(runs_per_point(&spec(1, 60.0, 7), 0.0), 7);
    }

    #[test]
    fn points_are_streamed_with_progress() {
        let s = spec(2, 0.0, 50);
        let mut b = Fixed {
            secs: 0.5,
            speed: 4.0,
            limit: i64::MAX,
            calls: vec![],
        };
        let mut log = Log::default();
        let r = build(&s, &mut b, &mut log).unwrap();
        assert_eq!(log.points, vec![vec![10], vec![20], vec![30]]);
        assert_eq!(log.progress.len(), 4);
        let last = log.progress.last().unwrap();
        assert!(last.done);
        assert_eq!((last.points, last.runs), (3, 6));
        assert!((last.bench_time_s - 3.0).abs() < 1e-12);
        assert_eq!(r.fpm.vertex(&[20]).unwrap().count, 2);
    }

    #[test]
    fn infeasible_sizes_give_infinite_time() {
        let s = spec(3, 10.0, 50);
        let mut b = Fixed {
            secs: 1.0,
            speed: 4.0,
            limit: 20,
            calls: vec![],
        };
        let r = build(&s, &mut b, &mut NoObserver).unwrap();
        // The infeasible size was tried once, not three times.
        assert_eq!(b.calls.iter().filter(|c| c[0] == 30).count(), 1);
        assert_eq!(r.fpm.vertex(&[30]).unwrap().mean, 0.0);
        assert_eq!(r.fpm.time(&[30], 1e9), Some(f64::INFINITY));
        assert!(r.fpm.time(&[20], 8.0).unwrap() == 2.0);
    }

    #[test]
    fn failures_and_garbage_abort() {
        struct Bad(Result<Measurement, BenchError>);
        impl Bench for Bad {
            fn run(&mut self, _x: &[i64]) -> Result<Measurement, BenchError> {
                self.0.clone()
            }
        }
        let s = spec(1, 0.0, 5);
        let e = build(
            &s,
            &mut Bad(Err(BenchError::Failed("segfault".into()))),
            &mut NoObserver,
        );
        assert!(matches!(e, Err(BuildError::Bench { .. })));
        let e = build(
            &s,
            &mut Bad(Ok(Measurement {
                seconds: 1.0,
                speed: f64::NAN,
            })),
            &mut NoObserver,
        );
        assert!(matches!(e, Err(BuildError::BadMeasurement { .. })));
    }
}
