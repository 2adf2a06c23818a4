//! Task-graph messages: a client asks the agent to map a whole group of calls at once
//! (SmartGridSolve's `grpc_map`), and gets back where each call runs, in which order, and the
//! predicted timeline.

use crate::ids::{ServerId, Ticket};
use crate::messages::CallProfile;
use serde::{Deserialize, Serialize};

/// One call of a graph, as the agent needs it for mapping: no data, only sizes and bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphCall {
    /// A name for messages and charts (unique in the graph).
    pub name: String,
    /// Service and sizes; `in_bytes` counts only what the client sends, `remote_in` is empty
    /// (data from other calls of the graph is on the edges).
    pub profile: CallProfile,
}

/// A data dependency: call `to` needs `bytes` of call `from`'s outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphEdge {
    /// Producer (index into [`GraphRequest::calls`]).
    pub from: u32,
    /// Consumer.
    pub to: u32,
    /// Bytes moved from producer to consumer.
    pub bytes: u64,
}

/// A graph to map.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphRequest {
    /// The calls, in submission order.
    pub calls: Vec<GraphCall>,
    /// Their dependencies.
    pub edges: Vec<GraphEdge>,
    /// Mapping policy by name (`heft`, `min-min`, `mct`, `sufferage`, `lp`, `round-robin`,
    /// `constant-speed`); `None` for the agent's default for the graph's shape.
    pub policy: Option<String>,
    /// Whether to record the calls as assignments on their servers' queues (true for a run,
    /// with one ticket per call; false for a prediction).
    pub reserve: bool,
}

/// A live server as the plan numbers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedServer {
    /// Its id.
    pub server_id: ServerId,
    /// Its name.
    pub name: String,
    /// Where clients and peers reach it.
    pub addr: String,
    /// Calls it runs at once.
    pub slots: u32,
    /// Its calibrated default rate, operations/s (0 when it did not calibrate).
    pub default_rate: f64,
}

/// A measured link the mapping used.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedLink {
    /// Sending server (index into [`GraphPlan::servers`]).
    pub from: u32,
    /// Receiving server.
    pub to: u32,
    /// One-way latency, s.
    pub latency_s: f64,
    /// Bandwidth, bytes/s.
    pub bandwidth: f64,
}

/// The agent's mapping of a graph, with everything needed to check or redraw its prediction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphPlan {
    /// The policy that mapped it.
    pub policy: String,
    /// Whether the request named it (false: the default for the graph's shape).
    pub policy_requested: bool,
    /// The live servers the graph was mapped on (indices below refer to this list).
    pub servers: Vec<PlannedServer>,
    /// Server of each call.
    pub server_of: Vec<u32>,
    /// Each server's calls, in the order it runs them.
    pub order: Vec<Vec<u32>>,
    /// One assignment per call when the request reserved, else empty; pass each to the server
    /// with its call.
    pub tickets: Vec<Ticket>,
    /// Estimated compute time of every call on every server (row-major calls × servers, s;
    /// infinite where it cannot run).
    pub etc: Vec<f64>,
    /// `(call, server)` pairs with no estimate at all (counted as 0 s: optimistic).
    pub unknown: Vec<(u32, u32)>,
    /// Latency assumed where no link was measured, s.
    pub default_latency_s: f64,
    /// Bandwidth assumed where no link was measured, bytes/s.
    pub default_bandwidth: f64,
    /// Links measured between the plan's servers.
    pub links: Vec<PlannedLink>,
    /// Predicted start of each call, s from the start of the graph.
    pub start_s: Vec<f64>,
    /// Predicted end of each call.
    pub end_s: Vec<f64>,
    /// Lane (of its server's slots) each call runs in.
    pub lane: Vec<u32>,
    /// Predicted makespan, s.
    pub makespan_s: f64,
    /// No mapping can finish sooner (max of critical path and work ÷ servers).
    pub lower_bound_s: f64,
    /// Longest chain with every call at its best time, free transfers.
    pub critical_path_s: f64,
    /// Best-case total work ÷ critical path.
    pub average_parallelism: f64,
    /// Sum of every call's best time, s.
    pub total_work_s: f64,
}
