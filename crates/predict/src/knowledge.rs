//! What estimates read: facts about a service wherever it runs, what one server has shown
//! about one service, and what is known about a server whatever it runs. The agent keeps one
//! of each per service, per (server, service) and per server; it changes them only through
//! [`crate::learn`].

use crate::client_link::ClientLink;
use crate::history::KernelHistory;
use crate::load::LoadTrack;
use crate::misfit::Misfit;
use crate::overhead::CallOverhead;
use crate::regression::RegressionModel;
use crate::sensed::Sensed;
use gridwise_fpm::model::Fpm;
use gridwise_proto::{CallProfile, Complexity, ModelFamily};
use std::collections::HashMap;

/// Distinct sizes whose kernel times a server keeps per service; calls at other sizes still
/// count in the service's overall history.
pub(crate) const SIZES_REMEMBERED: usize = 4096;

/// A service, wherever it runs.
#[derive(Clone, Debug, Default)]
pub struct ServiceFacts {
    /// The parsed complexity (operations as a function of the sizes), if it has one.
    pub complexity: Option<Complexity>,
    /// The parsed declared duration (seconds on any server), if it declares one.
    pub duration: Option<Complexity>,
    /// The parsed memory formula (bytes a call needs), if it declares one.
    pub memory: Option<Complexity>,
    /// Kernel times of its successful calls on every server: the estimate for a server that
    /// has run none yet.
    pub grid_history: KernelHistory,
    /// The model family that estimates its quiet-host time (the agent's `[families]`).
    pub family: ModelFamily,
    /// A server's regression model that servers with too few runs of their own borrow,
    /// scaled by calibrated rates (seed 001's cross-platform scaling).
    pub reference: Option<RegressionReference>,
}

/// A regression model lent to other servers.
#[derive(Clone, Debug, PartialEq)]
pub struct RegressionReference {
    /// The server it was fitted on.
    pub server: String,
    /// Its rate for the service, operations/s: times scale by the ratio of rates.
    pub rate: f64,
    pub model: RegressionModel,
}

impl ServiceFacts {
    /// The operations a call performs: the complexity at the profile's sizes, or `None` when
    /// there is none or it cannot be evaluated at these sizes (the call is still rankable from
    /// history, and the server judges the arguments).
    pub fn work(&self, profile: &CallProfile) -> Option<f64> {
        self.complexity
            .as_ref()
            .and_then(|c| c.eval(&profile.sizes).ok())
    }

    /// The bytes a call needs on a server: its inputs and outputs as the one rule counts them
    /// ([`CallProfile::footprint_bytes`]), or the service's memory formula when that says more.
    pub fn footprint_bytes(&self, profile: &CallProfile) -> f64 {
        let declared = self
            .memory
            .as_ref()
            .and_then(|m| m.eval(&profile.sizes).ok())
            .filter(|b| b.is_finite())
            .unwrap_or(0.0);
        (profile.footprint_bytes() as f64).max(declared)
    }

    /// The declared duration at the call's sizes, if the service declares one.
    pub fn declared(&self, profile: &CallProfile) -> Option<f64> {
        self.duration
            .as_ref()
            .and_then(|d| d.eval(&profile.sizes).ok())
    }
}

/// A service as one server has shown it.
#[derive(Clone, Debug, PartialEq)]
pub struct OfferKnowledge {
    /// Operations/s the server measured for this service at start-up, if it did.
    pub rate: Option<f64>,
    /// Kernel times of its past calls here.
    pub history: KernelHistory,
    /// Kernel times of its past calls here, per size vector.
    pub by_size: HashMap<Vec<i64>, KernelHistory>,
    /// Its functional performance model here: benchmark points from the server's model
    /// builder and samples from real calls, all as on a quiet host.
    pub model: Fpm,
    /// How far the quiet-host estimates were from the (normalised) calls that followed.
    pub misfit: Misfit,
    /// Regression models of its quiet-host time (seed 001).
    pub regression: RegressionModel,
    /// How far the regression's estimates were from the calls that followed.
    pub regression_misfit: Misfit,
    /// The pooled relative standard deviation of the model's measured points: the spread of
    /// an estimate before any call has scored the model.
    pub point_spread: f64,
    /// Its kernel sleeps for its time (an emulated one): the host's load does not stretch it.
    pub sleeps: bool,
}

impl OfferKnowledge {
    /// Nothing learnt yet for a service sized by `size_params`, calibrated at `rate`.
    pub fn new(size_params: Vec<String>, rate: Option<f64>) -> Self {
        OfferKnowledge {
            rate,
            history: KernelHistory::default(),
            by_size: HashMap::new(),
            model: Fpm::new(size_params),
            misfit: Misfit::default(),
            regression: RegressionModel::default(),
            regression_misfit: Misfit::default(),
            point_spread: 0.0,
            sleeps: false,
        }
    }

    /// Recomputes [`point_spread`](Self::point_spread) from the model's points: Σ M2/mean²
    /// over Σ (runs − 1), so points with more runs weigh more.
    pub(crate) fn refresh_point_spread(&mut self) {
        let (mut m2, mut dof) = (0.0, 0.0);
        for (_, s) in self.model.points() {
            if s.count >= 2 && s.mean > 0.0 && s.mean.is_finite() {
                m2 += s.m2.max(0.0) / (s.mean * s.mean);
                dof += (s.count - 1) as f64;
            }
        }
        self.point_spread = if dof > 0.0 { (m2 / dof).sqrt() } else { 0.0 };
    }
}

/// A server, whatever it runs.
#[derive(Clone, Debug, Default)]
pub struct HostKnowledge {
    /// Operations/s for services without a rate of their own (0 when it did not calibrate).
    pub default_rate: f64,
    /// Its load-average history for the band model, without the periods its own model
    /// benchmarks ran.
    pub load: LoadTrack,
    /// Its sensors' CPU availability and free memory, forecast.
    pub sensed: Sensed,
    /// What its calls cost besides queue and kernel.
    pub overhead: CallOverhead,
    /// What its clients' data costs to send, as its recent calls showed.
    pub client_link: ClientLink,
}

/// What an estimate may read about one server for one service.
#[derive(Clone, Copy, Debug)]
pub struct ServerView<'a> {
    /// What holds for the server whatever it runs: default rate, background load.
    pub host: &'a HostKnowledge,
    /// The service there, if the server offers it.
    pub offer: Option<&'a OfferKnowledge>,
}

/// Whether a rate can divide a complexity into a meaningful time.
pub(crate) fn usable(rate: f64) -> bool {
    rate.is_finite() && rate > 0.0
}

impl ServerView<'_> {
    /// The rate to divide the service's complexity by: the server's calibrated rate for it,
    /// else its default rate; `None` when neither is a positive finite number.
    pub fn rate(&self) -> Option<f64> {
        self.offer
            .and_then(|o| o.rate)
            .filter(|r| usable(*r))
            .or(Some(self.host.default_rate).filter(|r| usable(*r)))
    }

    /// The functional performance model, if it has a point.
    pub fn model(&self) -> Option<&Fpm> {
        self.offer.map(|o| &o.model).filter(|m| !m.is_empty())
    }
}
