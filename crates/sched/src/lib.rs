//! gridwise-sched: the agent's decision core.
//!
//! [`AgentCore`] holds what the agent knows — the service [`Catalog`], the server [`Registry`],
//! every server's pending assignments — and turns events (registrations, heartbeats, reports,
//! rank requests) into decisions. It is pure: no sockets, no tokio, no clock. Every event carries
//! `now`, the monotonic time since the agent started, so the daemon, the tests and a simulator
//! drive the same code.
//!
//! A decision estimates, for every live server offering the service, an ETC = queue wait +
//! transfer in + compute + transfer out ([`etc`]), orders the servers by a [`Policy`] ([`policy`])
//! and records an assignment to the first one ([`queue`]) so the next decision sees its queue.
//! The compute term comes from a [`ComputeModel`]; [`RateModel`] (complexity ÷ calibrated rate,
//! else past kernel times) is the default.
//!
//! [`graph`] maps a whole group of calls with data dependencies at once (a [`TaskGraph`] onto
//! servers by a [`GraphPolicy`]) and predicts the result by deterministic [`replay()`].
//!
//! [`Policy`]: gridwise_proto::Policy

#![warn(missing_docs)]

pub mod catalog;
pub mod config;
pub mod core;
pub mod etc;
pub mod fpm_model;
pub mod graph;
pub mod links;
pub mod policy;
pub mod queue;
pub mod registry;
pub mod reservations;

#[cfg(test)]
mod testutil;

pub use crate::catalog::{Catalog, CatalogEntry, ServiceIdx};
pub use crate::config::{ConfigError, CoreConfig};
pub use crate::core::{
    AgentCore, DirtyPoint, GraphOutline, GraphSnapshot, MappedGraph, Refusal, Registering,
    map_graph_shared,
};
pub use crate::etc::{ComputeModel, RateModel, estimate};
pub use crate::fpm_model::FpmModel;
pub use crate::graph::{
    Bounds, CommModel, EtcMatrix, GraphError, GraphPolicy, MapError, Mapping, PlatformError,
    Replay, ReplayError, Task, TaskGraph, TaskIdx, replay,
};
pub use crate::queue::{Assignment, ServerQueue, TicketIndex, queue_wait};
pub use crate::registry::{KernelHistory, Offer, Registry, ServerEntry};
pub use crate::reservations::Reservations;
