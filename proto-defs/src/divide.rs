//! Divisible jobs on the wire: a client asks the agent how to cut N units of one service into
//! parts, one per server (`AgentApi::divide`), then runs the parts as calls bound to those
//! servers.

use crate::messages::CallProfile;
use serde::{Deserialize, Serialize};

/// What a part takes from its neighbours per iteration in a 1-D slab decomposition (seed 004
/// §3.1): `bytes` in all and `messages` of them, half from each neighbour (its two boundary
/// rows), pulled from where the neighbour made them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighbourComm {
    pub bytes: u64,
    pub messages: u32,
}

/// A divisible job: `units` of `service`, a part of x units being a call whose size
/// parameter `unit_param` is x and whose other size parameters are `sizes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DivideRequest {
    pub service: String,
    pub units: u64,
    pub unit_param: String,
    #[serde(default)]
    pub sizes: Vec<(String, i64)>,
    /// Bytes a part sends: fixed + per unit · x.
    #[serde(default)]
    pub in_bytes: (u64, u64),
    /// Bytes a part returns: fixed + per unit · x.
    #[serde(default)]
    pub out_bytes: (u64, u64),
    #[serde(default)]
    pub comm: Option<NeighbourComm>,
    /// `fpm` (default), `lp`, `constant-speed` or `even`.
    #[serde(default)]
    pub policy: Option<String>,
    /// Exactly this many servers (the best ones); `None`: as many as predict fastest.
    #[serde(default)]
    pub servers: Option<u32>,
    /// Every live server offering the service.
    #[serde(default)]
    pub all: bool,
    /// Most units in one part.
    #[serde(default)]
    pub max_part: Option<u64>,
}

impl DivideRequest {
    /// The call a part of `x` units is (its size parameters in the request's order: the
    /// agent matches them by name).
    pub fn profile(&self, x: u64) -> CallProfile {
        let mut sizes = self.sizes.clone();
        sizes.push((self.unit_param.clone(), x as i64));
        CallProfile {
            service: self.service.clone(),
            sizes,
            in_bytes: self
                .in_bytes
                .0
                .saturating_add(self.in_bytes.1.saturating_mul(x)),
            out_bytes: self
                .out_bytes
                .0
                .saturating_add(self.out_bytes.1.saturating_mul(x)),
            remote_in: Vec::new(),
            inline_bytes: 0,
        }
    }
}

/// One part of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DividePart {
    pub server: String,
    pub addr: String,
    /// Its units are [first, first + units).
    pub first: u64,
    pub units: u64,
    pub predicted_s: f64,
    pub sd_s: f64,
    /// Of `predicted_s`, its exchange with its neighbours per step (a slab job).
    #[serde(default)]
    pub comm_s: f64,
}

/// How a divisible job is cut.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DivideReply {
    pub parts: Vec<DividePart>,
    /// The slowest part's predicted time and spread.
    pub makespan_s: f64,
    pub makespan_sd_s: f64,
    pub policy: String,
    /// Which desirability ordering the chosen servers came from.
    pub ordering: String,
    /// For `lp`: the balance tolerance it needed.
    pub slack: Option<f64>,
}
