//! What a call gives back: its outputs and where its time went ([`CallResult`]), and the id an
//! asynchronous one is known by until then ([`SessionId`]). A leaf: errors, sessions and the
//! client all speak of these.

use gridwise_proto::{Etc, Timing, Value};
use std::fmt;

/// The outcome of one successful remote call.
#[derive(Clone, Debug, PartialEq)]
pub struct CallResult {
    /// The OUT and INOUT values, in the order of the service description.
    pub outputs: Vec<Value>,
    /// The server that ran the call.
    pub server: String,
    /// Where the time went, as the server measured it.
    pub timing: Timing,
    /// How long the agent took to rank the servers (round trip), seconds.
    pub rank_s: f64,
    /// The execute round trip seen by the client (the successful attempt), seconds.
    pub round_trip_s: f64,
    /// The agent's estimate for the server that ran the call.
    pub predicted: Option<Etc>,
    /// How many servers were tried (1 when the first candidate ran it).
    pub attempts: u32,
}

/// One asynchronous call (`grpc_sessionid_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
