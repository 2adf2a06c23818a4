//! gridwise-predict: everything that turns what is known about a server into an estimate.
//!
//! - [`knowledge`]: what estimates read — per service ([`ServiceFacts`]: complexity, declared
//!   duration, grid-wide history), per server and service ([`OfferKnowledge`]: calibrated
//!   rate, kernel-time histories, functional performance model), per server
//!   ([`HostKnowledge`]: default rate, load history).
//! - [`learn`]: the one way anything enters that knowledge — a finished call, a benchmark
//!   point, a load sample — each returning what it changed.
//! - [`compute`]: model families behind one trait ([`ComputeModel`]): declared duration,
//!   calibrated rate, histories ([`RateModel`]), functional performance models with the load
//!   band ([`FpmModel`]). A [`Compute`] says where its number came from and, when the model
//!   knows it, the range the time may fall in.
//! - [`etc`]: the estimated time to compute of a call on a server — queue wait, transfers over
//!   the measured [`Links`], compute — and the lower bound ranking prunes with.
//!
//! Pure: no sockets, no threads, no clock. Times that matter come in as arguments.

pub mod compute;
pub mod etc;
pub mod forecast;
pub mod history;
pub mod knowledge;
pub mod learn;
pub mod links;
pub mod load;
pub mod misfit;
pub mod sensed;
pub mod stoch;

pub use compute::{
    ASSUMED_UNKNOWN_S, Compute, ComputeModel, FpmModel, LoadModel, RateModel, constant_speed_s,
};
pub use etc::{Transfers, estimate, lower_bound_s};
pub use forecast::{Forecast, Series};
pub use history::KernelHistory;
pub use knowledge::{HostKnowledge, OfferKnowledge, ServerView, ServiceFacts};
pub use learn::{LoadRecord, LoadSampling, quiet_time};
pub use links::Links;
pub use load::LoadTrack;
pub use misfit::Misfit;
pub use sensed::Sensed;
pub use stoch::Stoch;
