//! Identifiers that cross the wire.

use serde::{Deserialize, Serialize};
use std::fmt;
use uuid::Uuid;

/// A server as the agent knows it; assigned by the agent at first registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServerId(pub Uuid);

impl ServerId {
    /// A v4 UUID, as the agent makes at a server's first registration.
    pub fn new_random() -> Self {
        Self(Uuid::new_v4())
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The first block is enough to tell servers apart in logs and tables.
        let s = self.0.simple().to_string();
        f.write_str(&s[..8])
    }
}

/// One remote call, chosen by the client so that it can cancel the call on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CallId(pub Uuid);

impl CallId {
    /// A v4 UUID, so that clients pick ids without asking anyone and still never collide.
    pub fn new_random() -> Self {
        Self(Uuid::new_v4())
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.simple())
    }
}

/// A value kept on a server (an output not sent back), named so that later calls on any server
/// can use it and the client can fetch or free it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DataHandle(pub Uuid);

impl DataHandle {
    /// A v4 UUID, so that handles made by different servers never collide.
    pub fn new_random() -> Self {
        Self(Uuid::new_v4())
    }
}

impl fmt::Display for DataHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "d{}", &self.0.simple().to_string()[..12])
    }
}

/// The agent's record of one assignment (a ranked call): the server reports it back when the
/// call ends, which is how the agent knows every server's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Ticket(pub u64);

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}
