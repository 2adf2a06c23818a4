//! What the core's events teach it, returned as values: the shell persists exactly these
//! (and nothing it decides on its own), and tests assert them without a database.

use gridwise_proto::{CallReport, PointSource, PointStats, ServerId};

/// A model point as it stands after a change.
#[derive(Clone, Debug, PartialEq)]
pub struct PointChange {
    /// The server's name.
    pub server: String,
    /// The service's name.
    pub service: String,
    /// The size vector, in the service's size-parameter order.
    pub x: Vec<i64>,
    /// The point's statistics now (zero for an assumed point).
    pub stats: PointStats,
    /// Whether it is the builder's assumed zero-speed endpoint rather than a measurement.
    pub source: PointSource,
}

/// One thing an event taught the core or changed in it.
#[derive(Clone, Debug, PartialEq)]
pub enum Learned {
    /// A registered server sent its first heartbeat: it has proved alive and is worth saving.
    Joined(ServerId),
    /// A sample entered a server's load histories.
    Load {
        /// The server's name.
        server: String,
        /// What was kept.
        record: gridwise_predict::LoadRecord,
    },
    /// A server reported finished calls.
    Timings {
        /// The server's name.
        server: String,
        /// The reports, as sent.
        reports: Vec<CallReport>,
        /// The kernel time each call was ranked with, where the agent still held its
        /// assignment (in the order of `reports`).
        predicted_kernel_s: Vec<Option<f64>>,
        /// Whether each call was another agent's (told of by its server): that agent
        /// stores it, so a store shared by N agents gets each row once, not N times.
        theirs: Vec<bool>,
    },
    /// A performance-model point changed.
    Point(PointChange),
    /// A server fell silent past the heartbeat timeout and is down.
    Down(ServerId),
    /// A server is forgotten (it never proved alive, or was down longer than the retention).
    Forgotten(String),
}

/// A reply and what producing it taught the core.
#[derive(Clone, Debug)]
pub struct Outcome<T> {
    /// What the caller is answered.
    pub reply: T,
    /// What to persist, in order.
    pub learned: Vec<Learned>,
}

impl<T> Outcome<T> {
    /// A reply that taught nothing.
    pub fn nothing(reply: T) -> Self {
        Outcome {
            reply,
            learned: Vec::new(),
        }
    }

    /// The model points among what was learned.
    pub fn points(&self) -> impl Iterator<Item = &PointChange> {
        self.learned.iter().filter_map(|l| match l {
            Learned::Point(p) => Some(p),
            _ => None,
        })
    }
}

impl PartialEq<gridwise_proto::Ack> for Outcome<gridwise_proto::Ack> {
    fn eq(&self, other: &gridwise_proto::Ack) -> bool {
        self.reply == *other
    }
}
