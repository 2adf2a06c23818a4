//! gridwise-sched: the agent's decision core.
//!
//! [`AgentCore`] holds what the agent knows — the service [`Catalog`], the server [`Registry`],
//! every server's pending assignments — and turns events (registrations, heartbeats, reports,
//! rank requests) into decisions. It is pure: no sockets, no tokio, no clock. Every event carries
//! `now`, the monotonic time since the agent started, so the daemon, the tests and a simulator
//! drive the same code.
//!
//! A decision asks `gridwise-predict` for the ETC of the call on every live server offering the
//! service (queue wait + transfer in + compute + transfer out, the compute term from a
//! [`ComputeModel`], [`FpmModel`] by default), orders the servers by a [`Policy`] ([`policy`])
//! and records a reservation on the first one ([`reservations`]) so the next decision sees its
//! queue. The core computes no estimate itself.
//!
//! [`graph`] maps a whole group of calls with data dependencies at once (a [`TaskGraph`] onto
//! servers by a [`GraphPolicy`]) and predicts the result by deterministic [`replay()`].
//!
//! [`Policy`]: gridwise_proto::Policy

pub mod catalog;
pub mod config;
pub mod core;
pub mod divide;
pub mod graph;
pub mod policy;
pub mod queue;
pub mod registry;
pub mod reservations;

#[cfg(test)]
mod testutil;

pub use crate::catalog::{Catalog, CatalogEntry, ServiceIdx};
pub use crate::config::{ConfigError, CoreConfig};
pub use crate::core::{
    AgentCore, GraphOutline, GraphSnapshot, Learned, MappedGraph, Outcome, PointChange, Refusal,
    Registering, Suspicion, map_graph_shared,
};
pub use crate::graph::{
    BoundKind, Bounds, CommModel, EtcMatrix, GraphError, GraphPolicy, LowerBound, MapByPolicy,
    MapError, Mapping, PlatformError, Replay, ReplayError, Task, TaskGraph, TaskIdx,
    best_lower_bound, replay,
};
pub use crate::queue::{Assignment, ServerQueue, TicketIndex, queue_wait};
pub use crate::registry::{Offer, Registry, ServerEntry};
pub use crate::reservations::Reservations;
pub use gridwise_predict::{ComputeModel, FpmModel, LoadModel, LoadRecord, RateModel};
