//! Mapping a group of remote calls as a whole (SmartGridSolve, seed 003 §3.2): a [`TaskGraph`]
//! of calls with data dependencies, a [`EtcMatrix`] of every call's time on every server, a
//! [`CommModel`] for server-to-server transfers, and policies ([`GraphPolicy`]) that turn them
//! into a [`Mapping`] — which server runs each call, and in what order each server runs its
//! calls. [`replay()`] predicts any mapping's makespan and Gantt chart (seed 002 §1.4); [`Bounds`]
//! says how far from optimal it can be.
//!
//! Pure like the rest of the crate: no I/O, no clock; [`generate`] builds test and benchmark graphs
//! from a seed.

pub mod bounds;
mod comm;
pub mod dag;
pub mod generate;
pub mod lower_bound;
pub mod platform;
pub mod policy;
pub mod replay;
mod shared_rows;
pub mod sites;
pub mod spread;

#[cfg(test)]
mod tests;

pub use bounds::{Bounds, average_parallelism, critical_path_s};
pub use dag::{Adjacency, GraphError, Task, TaskGraph, TaskIdx};
pub use lower_bound::{BoundKind, LowerBound, best_lower_bound};
pub use platform::{CommModel, EtcMatrix, PlatformError, ShapeMismatch, check_shapes};
pub use policy::lp::{LpOutcome, lp_lower_bound};
pub use policy::{GraphPolicy, MapByPolicy, ParsePolicyError};
pub use replay::{Replay, ReplayError, Slot, earliest_lane, replay};
pub use sites::Sites;
pub use spread::{MakespanSpread, makespan_spread};

use thiserror::Error;

/// A placement of every task: the server that runs it, and each server's run order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    /// Server of each task, by task index.
    pub server_of: Vec<usize>,
    /// Tasks of each server, in the order it runs them.
    pub order: Vec<Vec<TaskIdx>>,
}

impl Mapping {
    /// A mapping whose server orders sort each server's tasks by `key` (a planned start time),
    /// ties by `tiebreak` (an order in which every task comes after its predecessors, so tasks
    /// planned for the same instant still run in dependency order). Panics if a server index is
    /// `servers` or more, or `key`/`tiebreak` are shorter than `server_of`.
    pub fn ordered_by(
        server_of: Vec<usize>,
        servers: usize,
        key: &[f64],
        tiebreak: &[usize],
    ) -> Self {
        let mut order: Vec<Vec<TaskIdx>> = vec![Vec::new(); servers];
        for (t, &s) in server_of.iter().enumerate() {
            order[s].push(t);
        }
        for list in &mut order {
            list.sort_unstable_by(|&a, &b| {
                key[a]
                    .total_cmp(&key[b])
                    .then(tiebreak[a].cmp(&tiebreak[b]))
            });
        }
        Mapping { server_of, order }
    }
}

/// Why a policy could not map a graph.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum MapError {
    /// The graph itself is invalid (a cycle).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The inputs disagree on how many tasks or servers there are.
    #[error(transparent)]
    Shape(#[from] ShapeMismatch),
    /// No server can run this task (every ETC is infinite, e.g. its memory fits nowhere).
    #[error(
        "no server can run task {task:?} (infinite ETC everywhere; does its memory fit anywhere?)"
    )]
    Infeasible { task: String },
    /// A policy for independent calls was given a graph with dependencies.
    #[error(
        "policy {policy} maps only independent calls, but this graph has {edges} dependencies; use heft"
    )]
    NotABag {
        policy: GraphPolicy,
        /// How many edges the graph has.
        edges: usize,
    },
    /// Constant-speed mapping needs one positive, finite rate per server and finite work.
    #[error("constant-speed: {reason}")]
    ConstantSpeed { reason: String },
    /// The LP solver failed.
    #[error("LP solver failed: {reason}")]
    Lp {
        /// The solver's message.
        reason: String,
    },
}
