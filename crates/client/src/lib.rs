//! The gridwise client: call remote services with GridRPC (OGF GFD.52) semantics.
//!
//! A call asks the agent to rank the servers for it (sizes only, no bulk data), then sends the
//! inputs straight to the best server, falling back to the next-ranked ones if a server cannot
//! be reached or refuses the call. Three ways in:
//!
//! - [`GridClient`]: async, for tokio programs;
//! - [`Client`]: the same API, blocking (it runs its own small runtime on a background thread);
//! - [`grpc`]: the GFD.52 global style (`initialize`, `call`, `wait`, ..., `finalize`).
//!
//! ```no_run
//! use gridwise_client::{Client, ClientConfig, Value};
//!
//! # fn main() -> Result<(), gridwise_client::GrpcError> {
//! let client = Client::connect(ClientConfig::with_agent("127.0.0.1:7000"))?;
//! let dgemm = client.function_handle_default("dgemm")?;
//! let a = Value::matrix_f64(2, 2, &[1.0, 2.0, 3.0, 4.0]);
//! let b = Value::matrix_f64(2, 2, &[1.0, 0.0, 0.0, 1.0]);
//! let inputs = vec![Value::Int(2), Value::Int(2), Value::Int(2), a, b];
//!
//! // Blocking call.
//! let r = client.call(&dgemm, inputs.clone())?;
//! println!("ran on {} in {:.3} s", r.server, r.round_trip_s);
//!
//! // Asynchronous calls.
//! let ids = (0..4)
//!     .map(|_| client.call_async(&dgemm, inputs.clone()))
//!     .collect::<Result<Vec<_>, _>>()?;
//! for r in client.wait_and(&ids)? {
//!     println!("{:?}", r.outputs);
//! }
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod agent_link;
pub mod blocking;
mod bulk;
pub mod call;
pub mod client;
pub mod config;
mod conn;
pub mod divide;
pub mod error;
pub mod graph;
pub mod grpc;
pub mod handle;
mod liveness;
mod moving;
pub mod session;
pub mod show;
pub mod slab;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;

pub use blocking::{BlockingGraph, Client};
pub use client::{CallResult, GridClient};
pub use config::{AGENT_ENV, ClientConfig, TOKEN_ENV};
pub use divide::{DivideRun, DivideSpec, PartRun};
pub use error::GrpcError;
pub use graph::{CallRecord, CallRef, Graph, GraphArg, GraphRun};
pub use handle::{Binding, FunctionHandle};
pub use session::SessionId;
pub use slab::{SlabPart, SlabRun, SlabStep};

pub use gridwise_proto::{
    AgentStatus, CallProfile, Candidate, DivideReply, ErrorCode, Etc, GraphPlan, NeighbourComm,
    Policy, RankOptions, ServiceDesc, ServiceSummary, Timing, Value,
};
