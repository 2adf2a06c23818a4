//! gridwise-predict: everything that turns what is known about a server into an estimate, and
//! how sure the estimate is.
//!
//! - [`knowledge`]: what estimates read — per service ([`ServiceFacts`]: complexity, declared
//!   duration, grid-wide history, model family, a regression model others may borrow), per
//!   server and service ([`OfferKnowledge`]: calibrated rate, kernel-time histories,
//!   functional performance model, regression models, their misfits), per server
//!   ([`HostKnowledge`]: default rate, load-average history, sensed availability and memory,
//!   call overhead).
//! - [`learn`]: the one way anything enters that knowledge — a finished call (normalised to a
//!   quiet host), a benchmark point, a load sample — each returning what it changed.
//! - [`compute`]: model families behind one trait ([`ComputeModel`]): declared duration,
//!   calibrated rate, histories ([`RateModel`]); FPMs and regression, with load entering once
//!   as a [`LoadModel`] says ([`FpmModel`]). A [`Compute`] is a mean and a spread and says
//!   where it came from.
//! - [`forecast`]: NWS-style forecasts of measured series ([`Series`]); [`sensed`] keeps them
//!   per server, [`links`] per link.
//! - [`stoch`]: stochastic values and the rules that combine them (seed 000).
//! - [`regression`]: seed 001's regression models; [`misfit`]: how wrong a model has been.
//! - [`etc`]: the estimated time to compute of a call on a server — queue wait, transfers over
//!   the measured [`Links`], compute, server overhead, each with its spread — and the lower
//!   bound ranking prunes with.
//!
//! Pure: no sockets, no threads, no clock. Times that matter come in as arguments.

pub mod client_link;
pub mod compute;
pub mod etc;
pub mod forecast;
pub mod history;
pub mod knowledge;
pub mod learn;
pub mod links;
pub mod load;
pub mod misfit;
pub mod overhead;
pub mod regression;
pub mod sensed;
pub mod stoch;

pub use client_link::ClientLink;
pub use compute::{
    ASSUMED_UNKNOWN_S, Compute, ComputeModel, FpmModel, LoadModel, RateModel, constant_speed_s,
};
pub use etc::{
    EtcSpread, Transfers, charges_default_transfers, default_client_transfers_s, estimate,
    lower_bound_behind_s, lower_bound_s,
};
pub use forecast::{Forecast, Series};
pub use history::KernelHistory;
pub use knowledge::{HostKnowledge, OfferKnowledge, RegressionReference, ServerView, ServiceFacts};
pub use learn::{LoadRecord, LoadSampling, quiet_time};
pub use links::Links;
pub use load::LoadTrack;
pub use misfit::Misfit;
pub use overhead::CallOverhead;
pub use regression::{RegressionFit, RegressionModel};
pub use sensed::Sensed;
pub use stoch::Stoch;
