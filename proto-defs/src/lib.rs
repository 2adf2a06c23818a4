//! The gridwise wire protocol, shared by agent, servers and clients.
//!
//! The data types (service descriptions, values, call profiles, ETC breakdowns) are plain serde
//! structs and compile without any runtime; the `rpc` feature adds the tarpc service traits
//! ([`AgentApi`], [`ServerApi`]). The connections that carry them (TLS, the hello, limits,
//! frames, bulk transfer) and the processes' settings are `gridwise-runtime`'s.

pub mod clock;
pub mod complexity;
pub mod divide;
pub mod error;
pub mod graph;
pub mod graph_policy;
pub mod ids;
pub mod messages;
pub mod service;
pub mod value;

#[cfg(feature = "rpc")]
pub mod api;

pub use complexity::{Complexity, ComplexityError};
pub use divide::{DividePart, DivideReply, DivideRequest, NeighbourComm};
pub use error::{CallError, CallErrorKind, ErrorCode, RpcError};
pub use graph::{
    CallInput, CheckedGraph, GraphCall, GraphEdge, GraphPlan, GraphRequest, PlannedLink,
    PlannedServer, RecordedCall, check_graph,
};
pub use graph_policy::{GraphPolicy, ParsePolicyError};
pub use ids::{CallId, DataHandle, ServerId, Ticket};
pub use messages::*;
pub use service::{ArgDesc, ArgError, ArgMode, ArgType, Dim, ServiceDesc, ServiceError};
pub use value::{Array, ElemType, RemoteRef, Value};

#[cfg(feature = "rpc")]
pub use api::{AgentApi, AgentApiClient, ServerApi, ServerApiClient};

/// The protocol version every connection's hello carries; peers with another version are refused.
pub const PROTOCOL_VERSION: u32 = 16;
