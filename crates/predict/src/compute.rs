//! The compute term: how long the kernel itself will take on a server. Model families sit
//! behind [`ComputeModel`]; the agent uses [`FpmModel`], which falls back to [`RateModel`].

use crate::knowledge::{ServerView, ServiceFacts};
use gridwise_fpm::band;
use gridwise_proto::{CallProfile, ComputeSource};

/// A compute-time estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct Compute {
    /// The time to plan with, s.
    pub seconds: f64,
    /// Where it came from (shown to users with every estimate).
    pub source: ComputeSource,
    /// The range the time may fall in, s, when the model knows one (the load band of a
    /// server with a load history); `None` says nothing about the spread, not that there is
    /// none.
    pub range_s: Option<(f64, f64)>,
}

impl Compute {
    /// An estimate with no known spread.
    pub fn point(seconds: f64, source: ComputeSource) -> Self {
        Compute {
            seconds,
            source,
            range_s: None,
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

    /// Whether the server can run the call at all (a model may know a size does not fit).
    fn feasible(
        &self,
        _server: ServerView<'_>,
        _service: &ServiceFacts,
        _profile: &CallProfile,
    ) -> bool {
        true
    }

    /// The rate `r` when this model's compute term on `server` is exactly `work / r` for every
    /// call with known work, whatever its size: what lets ranking bound a server's estimate
    /// before computing it. `None` (the default) when the model promises no such thing. The
    /// agent asks again only after a registration or when the server's model of the service
    /// gets its first point, so the answer may depend on nothing else.
    fn exact_rate(&self, _server: ServerView<'_>, _service: &ServiceFacts) -> Option<f64> {
        None
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

    fn exact_rate(&self, server: ServerView<'_>, service: &ServiceFacts) -> Option<f64> {
        service.duration.is_none().then(|| server.rate()).flatten()
    }
}

/// Functional performance models (seed 003): time = C(x) / S(x) with S the (server, service)
/// model's interpolated speed at the call's sizes, in the middle of the server's load band
/// when it has a load history. Outside the sizes a model covers, the calibrated rate stands
/// in, and the source says so; without a model, [`RateModel`].
#[derive(Clone, Copy, Debug, Default)]
pub struct FpmModel;

/// The call's size vector in the model's parameter order (the profile's sizes are in the
/// service's declared order, which the agent has already checked).
fn size_vector(profile: &CallProfile) -> Vec<i64> {
    profile.sizes.iter().map(|(_, v)| *v).collect()
}

impl ComputeModel for FpmModel {
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
        if let (Some(work), Some(m)) = (work, server.model()) {
            let x = size_vector(profile);
            let points = m.len() as u32;
            if m.covers(&x) {
                if let Some(t) = m.time(&x, work) {
                    // The model's speeds are those of a quiet host; a server with a load
                    // history gets the middle of its band (seed 003 §2.1.2): the fixed points
                    // of t = t_ideal·(1 + l(t)) under l_min and l_max. The detailed band's mean
                    // is O(w²) per estimate, too dear on the ranking path.
                    return match server.host.load.functions() {
                        Some(lf) if t.is_finite() => {
                            let (lo, hi) = band::time_band(t, lf);
                            Compute {
                                seconds: (lo + hi) / 2.0,
                                source: ComputeSource::Fpm {
                                    points,
                                    load_adjusted: true,
                                },
                                range_s: Some((lo, hi)),
                            }
                        }
                        _ => Compute::point(
                            t,
                            ComputeSource::Fpm {
                                points,
                                load_adjusted: false,
                            },
                        ),
                    };
                }
            } else if let Some(rate) = server.rate() {
                return Compute::point(
                    work / rate,
                    ComputeSource::RateOutsideModel { rate, points },
                );
            }
        }
        RateModel.compute(server, service, work, profile)
    }

    fn feasible(
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

    fn exact_rate(&self, server: ServerView<'_>, service: &ServiceFacts) -> Option<f64> {
        // With no model point, FPM is the rate model.
        match server.model() {
            None => RateModel.exact_rate(server, service),
            Some(_) => None,
        }
    }
}
