//! The compute term: how long the kernel itself will take on a server. Model families sit
//! behind [`ComputeModel`]; the agent uses [`FpmModel`], which falls back to [`RateModel`].

use crate::knowledge::{ServerView, ServiceFacts};
use crate::stoch::{Stoch, Z90};
use gridwise_fpm::band;
use gridwise_fpm::model::Fpm;
pub use gridwise_proto::LoadModel;
use gridwise_proto::{CallProfile, ComputeSource, ModelFamily};

/// A compute-time estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct Compute {
    /// The time to plan with (the mean), s.
    pub seconds: f64,
    /// Its standard deviation, s: 0 when nothing is known of the spread, not that there is
    /// none.
    pub sd_s: f64,
    /// Where it came from (shown to users with every estimate).
    pub source: ComputeSource,
    /// The fraction of a core the estimate expects the kernel to get, when it adjusted for
    /// the server's load.
    pub cpu_available: Option<f64>,
}

impl Compute {
    /// An estimate with no known spread, for a quiet host.
    pub fn point(seconds: f64, source: ComputeSource) -> Self {
        Compute {
            seconds,
            sd_s: 0.0,
            source,
            cpu_available: None,
        }
    }

    /// The estimate as a stochastic value.
    pub fn time(&self) -> Stoch {
        Stoch::new(self.seconds, self.sd_s)
    }

    fn with_time(self, t: Stoch) -> Self {
        Compute {
            seconds: t.mean,
            sd_s: t.sd,
            ..self
        }
    }
}

/// A family of compute-time models.
pub trait ComputeModel: Send + Sync {
    /// The kernel time of a call of `service` with `profile` (`work` operations, when the
    /// complexity gives them) on `server`.
    fn compute(
        &self,
        server: ServerView<'_>,
        service: &ServiceFacts,
        work: Option<f64>,
        profile: &CallProfile,
    ) -> Compute;

    /// Whether the server can run the call at all (a model may know a size does not fit):
    /// [`feasible_at`](Self::feasible_at) and [`feasible_now`](Self::feasible_now) both.
    fn feasible(
        &self,
        server: ServerView<'_>,
        service: &ServiceFacts,
        profile: &CallProfile,
    ) -> bool {
        self.feasible_now(server, service, profile) && self.feasible_at(server, service, profile)
    }

    /// The part of [`feasible`](Self::feasible) that may depend on nothing but the sizes, the
    /// server's registration and what its offer of the service has learnt (the agent caches
    /// it per size with [`rate_bound_at`](Self::rate_bound_at)).
    fn feasible_at(
        &self,
        _server: ServerView<'_>,
        _service: &ServiceFacts,
        _profile: &CallProfile,
    ) -> bool {
        true
    }

    /// The rest of [`feasible`](Self::feasible): what the server's current state (what it
    /// senses) rules out; asked afresh at every decision.
    fn feasible_now(
        &self,
        _server: ServerView<'_>,
        _service: &ServiceFacts,
        _profile: &CallProfile,
    ) -> bool {
        true
    }

    /// A rate `r` such that this model's compute term on `server` is never below `work / r`
    /// for any call with known work, whatever its size or the server's load: what lets
    /// ranking bound a server's estimate before computing it. `None` (the default) when the
    /// model promises no such thing. The agent asks again only after a registration or when
    /// the server's model of the service gets its first point, so the answer may depend on
    /// nothing else (load only ever lengthens a quiet host's time, so it may be ignored).
    fn rate_bound(&self, _server: ServerView<'_>, _service: &ServiceFacts) -> Option<f64> {
        None
    }

    /// [`rate_bound`](Self::rate_bound) for calls at `profile`'s sizes only: a rate `r` such
    /// that this model's compute term for any call of `service` at these sizes on `server` is
    /// never below `work / r`, whatever the server's load. It may depend on nothing but the
    /// sizes, the server's registration and what the server's offer of the service has learnt
    /// (the agent caches it per size and asks again after a registration or whenever that
    /// offer learns something). `None` when the model promises nothing.
    fn rate_bound_at(
        &self,
        server: ServerView<'_>,
        service: &ServiceFacts,
        _profile: &CallProfile,
    ) -> Option<f64> {
        self.rate_bound(server, service)
    }
}

/// Classic GridSolve's estimate: `work` operations at one benchmark rate, blind to the size
/// (and so to memory) — the baseline the constant-speed policy maps by.
pub fn constant_speed_s(work: f64, rate: f64) -> f64 {
    work.max(0.0) / rate
}

/// The time assumed for a call nothing is known about (no complexity, no duration, no call of
/// its service finished anywhere), s: not zero, so that a burst of such calls queues up in the
/// estimates and spreads over the servers instead of piling onto one; replaced by measured
/// times as soon as one call finishes.
pub const ASSUMED_UNKNOWN_S: f64 = 1.0;

/// GridSolve's stock estimate, extended to services no formula describes: the declared
/// duration, else complexity ÷ the server's calibrated rate, else the mean of past kernel times
/// (at these sizes, else at any size; on this server, else on the others), else
/// [`ASSUMED_UNKNOWN_S`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RateModel;

impl ComputeModel for RateModel {
    fn compute(
        &self,
        server: ServerView<'_>,
        service: &ServiceFacts,
        work: Option<f64>,
        profile: &CallProfile,
    ) -> Compute {
        if let Some(t) = service.declared(profile) {
            return Compute::point(t, ComputeSource::Declared);
        }
        if let (Some(work), Some(rate)) = (work, server.rate()) {
            return Compute::point(work / rate, ComputeSource::CalibratedRate { rate });
        }
        if let Some(o) = server.offer {
            let x: Vec<i64> = profile.sizes.iter().map(|(_, v)| *v).collect();
            if let Some(h) = o.by_size.get(&x).filter(|h| h.calls > 0) {
                return Compute::point(h.mean_s, ComputeSource::HistoryAtSize { calls: h.calls });
            }
            if o.history.calls > 0 {
                let h = o.history;
                return Compute::point(h.mean_s, ComputeSource::History { calls: h.calls });
            }
        }
        let g = service.grid_history;
        if g.calls > 0 {
            return Compute::point(g.mean_s, ComputeSource::GridHistory { calls: g.calls });
        }
        Compute::point(
            ASSUMED_UNKNOWN_S,
            ComputeSource::Assumed {
                seconds: ASSUMED_UNKNOWN_S,
            },
        )
    }

    fn rate_bound(&self, server: ServerView<'_>, service: &ServiceFacts) -> Option<f64> {
        service.duration.is_none().then(|| server.rate()).flatten()
    }
}

/// The agent's compute model. On a quiet host: functional performance models (seed 003),
/// time = C(x) / S(x) with S the (server, service) model's interpolated speed at the call's
/// sizes (outside the sizes a model covers, the speed at its nearest size or the calibrated
/// rate stands in, as `rate_outside_model` says, and the source says so), or regression
/// models (seed 001), as the service's [`ModelFamily`] says, each falling
/// back to the other and then to [`RateModel`]. The spread is the model's recent misfit on this
/// server (its points' own spread until calls have been scored). Load then enters once, as
/// [`LoadModel`] says.
#[derive(Clone, Copy, Debug, Default)]
pub struct FpmModel {
    pub load: LoadModel,
    /// A family for every service, overriding theirs (to compare predictors).
    pub family: Option<ModelFamily>,
}

impl FpmModel {
    pub fn with_load(load: LoadModel) -> Self {
        FpmModel { load, family: None }
    }
}

/// The call's size vector in the model's parameter order (the profile's sizes are in the
/// service's declared order, which the agent has already checked).
pub(crate) fn size_vector(profile: &CallProfile) -> Vec<i64> {
    profile.sizes.iter().map(|(_, v)| *v).collect()
}

/// Whether `family` asks the server's regression model before its FPM (`Auto`: when the
/// regression has been the closer of the two lately).
fn regression_first(server: ServerView<'_>, family: ModelFamily) -> bool {
    match family {
        ModelFamily::Fpm => false,
        ModelFamily::Regression => true,
        ModelFamily::Auto => server.offer.is_some_and(|o| {
            match (o.regression_misfit.mean_abs(), o.misfit.mean_abs()) {
                (Some(r), Some(f)) => r < f,
                (Some(_), None) => true,
                _ => false,
            }
        }),
    }
}

/// Whether a regression model (the server's own, or one lent by another server) might
/// answer for this server: then nothing bounds the quiet time but the regression itself.
fn regression_may_answer(server: ServerView<'_>, service: &ServiceFacts) -> bool {
    service.reference.is_some()
        || server
            .offer
            .is_some_and(|o| o.regression.observations() > 0)
}

/// The quiet-host estimate of `family`, falling back to the other family, then to
/// [`RateModel`].
fn quiet(
    server: ServerView<'_>,
    service: &ServiceFacts,
    work: Option<f64>,
    profile: &CallProfile,
    family: ModelFamily,
) -> Compute {
    if let Some(t) = service.declared(profile) {
        return Compute::point(t, ComputeSource::Declared);
    }
    let x = size_vector(profile);
    let found = if regression_first(server, family) {
        regression(server, service, work, &x).or_else(|| fpm(server, work, &x))
    } else {
        fpm(server, work, &x).or_else(|| regression(server, service, work, &x))
    };
    if let Some(c) = found {
        return c;
    }
    let c = RateModel.compute(server, service, work, profile);
    match c.source {
        ComputeSource::Declared | ComputeSource::Assumed { .. } => c,
        _ => with_spread(c, server),
    }
}

/// The FPM's quiet-host time where it covers the size, else the calibrated rate when the
/// model has points; `None` without a model or a work.
fn fpm(server: ServerView<'_>, work: Option<f64>, x: &[i64]) -> Option<Compute> {
    let (work, m) = (work?, server.model()?);
    let points = m.len() as u32;
    if m.covers(x) {
        let t = m.time(x, work)?;
        let source = ComputeSource::Fpm {
            points,
            load_adjusted: false,
        };
        return Some(with_spread(Compute::point(t, source), server));
    }
    let rate = rate_outside_model(server, m, x)?;
    let c = Compute::point(
        work / rate,
        ComputeSource::RateOutsideModel { rate, points },
    );
    Some(with_spread(c, server))
}

/// The rate for a size outside the model. Below the bottom of a one-parameter model, the
/// bottom's speed: the nearest this server was measured running this service. Past its top,
/// the top's speed where the speed fell there, else the faster of the top's speed and the
/// calibrated rate. Elsewhere (several parameters), the calibrated rate.
///
/// The calibrated rate may come from another size altogether: emulated servers calibrated at
/// n = 1 (all overhead, ~3.5·10⁶ op/s where they ran at 10⁹–4·10⁹) had every call outside
/// their measured sizes priced ~300–1000× too slow, so they were sent none, never measured one
/// and never widened their models: below the bottom they sat nearly idle in half the fleets of
/// `bench agents`; past the top (a `solve` of n = 450 priced at 23–34 s on every server whose
/// largest call so far was 449) the largest calls all went to the one server that had run one,
/// the slowest in one fleet of six, and the bag took 1.2–1.3× as long. A price too slow is a
/// trap; one too fast costs one call and ends with its report.
///
/// What the top's speed is not trusted for: a server whose model saw its speed fall (paging at
/// its largest measured size) is not taken to run faster again just past it (a divisible job's
/// plan once sent a 514-unit part to a server whose model ended, slow, at 4000, because 8000
/// units were estimated at the calibrated rate of 10); and a top that is all overhead does not
/// price far larger calls (a model of calls at n = 1 only, a "speed" of a few hundred thousand
/// op/s where the kernel runs at millions, once put n = 250,000 at 2–3.8 s where it took
/// 0.31–0.63 s): the calibrated rate, faster there, stands.
fn rate_outside_model(server: ServerView<'_>, m: &Fpm, x: &[i64]) -> Option<f64> {
    if let Some(s) = m.bottom_speed_below(x).filter(|s| *s > 0.0) {
        return Some(s);
    }
    let rate = server.rate()?;
    let Some(top) = m
        .past_top(x)
        .then(|| m.speed(x))
        .flatten()
        .filter(|s| *s > 0.0)
    else {
        return Some(rate);
    };
    // Read only past the top: the points are copied out of the model.
    let fell = m.points().iter().any(|(_, p)| p.mean > top);
    Some(if fell { top } else { top.max(rate) })
}

/// The server's own regression model, else the service's reference model scaled by the
/// ratio of calibrated rates (seed 001 §3.3); the spread is the regression's recent misfit,
/// else its standard error of prediction.
fn regression(
    server: ServerView<'_>,
    service: &ServiceFacts,
    work: Option<f64>,
    x: &[i64],
) -> Option<Compute> {
    let o = server.offer?;
    let (t, fit, scaled_from) = match o.regression.predict(work, x) {
        Some(t) => (t, o.regression.best()?, None),
        None => {
            let r = service.reference.as_ref()?;
            let ratio = r.rate / server.rate()?;
            let t = r.model.predict(work, x)?.scale(ratio);
            (t, r.model.best()?, Some(r.server.clone()))
        }
    };
    let rel = match &scaled_from {
        None => o.regression_misfit.relative_sd(),
        Some(_) => None,
    };
    let sd = rel.map_or(t.sd, |r| r * t.mean);
    Some(Compute {
        seconds: t.mean,
        sd_s: sd,
        source: ComputeSource::Regression {
            function: fit.name.to_string(),
            runs: fit.observations as u32,
            scaled_from,
        },
        cpu_available: None,
    })
}

/// The quiet estimate's spread: its relative misfit on this server's recent calls, else the
/// relative spread of its model's measured points.
fn with_spread(c: Compute, server: ServerView<'_>) -> Compute {
    let Some(o) = server.offer else {
        return c;
    };
    let rel = o.misfit.relative_sd().unwrap_or(o.point_spread);
    let t = c.time();
    c.with_time(Stoch::new(t.mean, t.mean * rel))
}

/// Whether load can stretch an estimate from this source: a declared duration is what the
/// service says whatever the host, and an assumed time knows nothing to stretch.
fn stretchable(source: &ComputeSource) -> bool {
    !matches!(
        source,
        ComputeSource::Declared | ComputeSource::Assumed { .. }
    )
}

fn mark_load_adjusted(source: ComputeSource) -> ComputeSource {
    match source {
        ComputeSource::Fpm { points, .. } => ComputeSource::Fpm {
            points,
            load_adjusted: true,
        },
        other => other,
    }
}

impl ComputeModel for FpmModel {
    fn compute(
        &self,
        server: ServerView<'_>,
        service: &ServiceFacts,
        work: Option<f64>,
        profile: &CallProfile,
    ) -> Compute {
        let family = self.family.unwrap_or(service.family);
        let c = quiet(server, service, work, profile, family);
        let sleeps = server.offer.is_some_and(|o| o.sleeps);
        if sleeps || !stretchable(&c.source) || !c.seconds.is_finite() {
            return c;
        }
        match self.load {
            LoadModel::Blind => c,
            LoadModel::Forecast => match server.host.sensed.availability() {
                Some(a) => {
                    let t = c.time().divided_by(a);
                    // Said only where the load changed something.
                    let source = if a.mean < 1.0 || a.sd > 0.0 {
                        mark_load_adjusted(c.source.clone())
                    } else {
                        c.source.clone()
                    };
                    Compute {
                        source,
                        cpu_available: Some(a.mean),
                        ..c.with_time(t)
                    }
                }
                None => c,
            },
            // The band was built for the FPM alone: other sources stay as they are.
            LoadModel::Band => match server.host.load.functions() {
                Some(lf) if matches!(c.source, ComputeSource::Fpm { .. }) => {
                    // The fixed points of t = t_ideal·(1 + l(t)) under l_min and l_max; the
                    // band is taken as the 90% interval. The detailed band's mean is O(w²)
                    // per estimate, too dear on the ranking path.
                    let (lo, hi) = band::time_band(c.seconds, lf);
                    Compute {
                        source: mark_load_adjusted(c.source.clone()),
                        ..c.with_time(Stoch::new((lo + hi) / 2.0, (hi - lo) / (2.0 * Z90)))
                    }
                }
                _ => c,
            },
        }
    }

    fn feasible_now(
        &self,
        server: ServerView<'_>,
        service: &ServiceFacts,
        profile: &CallProfile,
    ) -> bool {
        // Memory the forecast says is free bounds what the call may use there; a server that
        // does not measure it is judged by its budget alone (the agent checks that).
        !(self.load == LoadModel::Forecast
            && server
                .host
                .sensed
                .free_memory()
                .is_some_and(|free| service.footprint_bytes(profile) > free.mean))
    }

    fn feasible_at(
        &self,
        server: ServerView<'_>,
        _service: &ServiceFacts,
        profile: &CallProfile,
    ) -> bool {
        let Some(m) = server.model() else {
            return true;
        };
        let x = size_vector(profile);
        // Only a model that covers the size may rule it out: outside, nothing is known.
        !(m.covers(&x) && m.speed(&x).is_some_and(|s| s <= 0.0))
    }

    fn rate_bound(&self, server: ServerView<'_>, service: &ServiceFacts) -> Option<f64> {
        // With no model point and no regression to ask, FPM is the rate model, and load only
        // lengthens its time.
        match server.model() {
            None if !regression_may_answer(server, service) => {
                RateModel.rate_bound(server, service)
            }
            _ => None,
        }
    }

    fn rate_bound_at(
        &self,
        server: ServerView<'_>,
        service: &ServiceFacts,
        profile: &CallProfile,
    ) -> Option<f64> {
        let Some(m) = server.model() else {
            return self.rate_bound(server, service);
        };
        let family = self.family.unwrap_or(service.family);
        if service.duration.is_some() || regression_first(server, family) {
            return None;
        }
        // What `fpm` answers with (load only lengthens it): work / S(x) where the model covers
        // x (infinite where S is 0), else work / its rate outside the model; without a rate
        // `fpm` has no answer and the regression may, which nothing here bounds.
        let x = size_vector(profile);
        if m.covers(&x) {
            let s = m.speed(&x)?;
            return Some(if s > 0.0 { s } else { 0.0 });
        }
        rate_outside_model(server, m, &x)
    }
}
