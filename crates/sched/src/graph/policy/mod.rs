//! Graph mapping policies, one file each; [`GraphPolicy`] names them for configs and commands.
//!
//! Every policy returns a [`Mapping`] that never places a task on a server with infinite ETC and
//! whose server orders respect the dependencies (so [`replay`](crate::graph::replay()) never
//! deadlocks on it); a task no server can run is [`MapError::Infeasible`].

mod batch;
pub mod best_of;
pub mod constant_speed;
mod critical;
pub mod heft;
mod local_search;
pub mod lp;
pub mod mct;
pub mod min_min;
pub mod peft;
pub mod round_robin;
mod schedule;
pub mod sufferage;
mod timelines;

use crate::graph::dag::TaskGraph;
use crate::graph::platform::{CommModel, EtcMatrix};
use crate::graph::{MapError, Mapping};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// A policy for mapping a whole task graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GraphPolicy {
    /// HEFT and PEFT replayed, the shorter improved by a local search on its critical chain
    /// ([`best_of`]); never worse than HEFT.
    BestOf,
    /// Upward rank, earliest finish time with insertion ([`heft`]).
    Heft,
    /// HEFT with an optimistic-cost-table lookahead ([`peft`]).
    Peft,
    /// Ready task with the smallest minimum completion time first ([`min_min`]).
    MinMin,
    /// Each task in submission order to its minimum completion time ([`mct`]).
    Mct,
    /// Ready task that loses most without its best server first ([`sufferage`]).
    Sufferage,
    /// LP relaxation of unrelated-machine makespan, rounded; bags only ([`lp`]).
    Lp,
    /// Servers in turn ([`round_robin`]).
    RoundRobin,
    /// Work ÷ one rate per server, greedily ([`constant_speed`]).
    ConstantSpeed,
}

impl GraphPolicy {
    /// Every policy, in the order commands list them.
    pub const ALL: [GraphPolicy; 9] = [
        GraphPolicy::BestOf,
        GraphPolicy::Heft,
        GraphPolicy::Peft,
        GraphPolicy::MinMin,
        GraphPolicy::Mct,
        GraphPolicy::Sufferage,
        GraphPolicy::Lp,
        GraphPolicy::RoundRobin,
        GraphPolicy::ConstantSpeed,
    ];

    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            GraphPolicy::BestOf => "best-of",
            GraphPolicy::Heft => "heft",
            GraphPolicy::Peft => "peft",
            GraphPolicy::MinMin => "min-min",
            GraphPolicy::Mct => "mct",
            GraphPolicy::Sufferage => "sufferage",
            GraphPolicy::Lp => "lp",
            GraphPolicy::RoundRobin => "round-robin",
            GraphPolicy::ConstantSpeed => "constant-speed",
        }
    }

    /// The best policy for the graph's shape: `lp` for a bag of independent calls (list
    /// heuristics land well above its bound on crossing speed functions), `best-of` otherwise
    /// (never worse than HEFT by construction, shorter on the Cholesky and layered DAGs
    /// measured in the README, and within HEFT's time budget on 10,000 tasks × 100 servers).
    pub fn default_for(graph: &TaskGraph) -> GraphPolicy {
        if graph.is_bag() {
            GraphPolicy::Lp
        } else {
            GraphPolicy::BestOf
        }
    }

    /// Maps `graph` by this policy. `rates` (operations/s per server) is needed by
    /// constant-speed only and ignored by the others.
    pub fn map(
        self,
        graph: &TaskGraph,
        etc: &EtcMatrix,
        comm: &CommModel,
        rates: Option<&[f64]>,
    ) -> Result<Mapping, MapError> {
        match self {
            GraphPolicy::BestOf => best_of::map(graph, etc, comm),
            GraphPolicy::Heft => heft::map(graph, etc, comm),
            GraphPolicy::Peft => peft::map(graph, etc, comm),
            GraphPolicy::MinMin => min_min::map(graph, etc, comm),
            GraphPolicy::Mct => mct::map(graph, etc, comm),
            GraphPolicy::Sufferage => sufferage::map(graph, etc, comm),
            GraphPolicy::Lp => lp::map(graph, etc, comm),
            GraphPolicy::RoundRobin => round_robin::map(graph, etc, comm),
            GraphPolicy::ConstantSpeed => match rates {
                Some(rates) => constant_speed::map(graph, etc, comm, rates),
                None => Err(MapError::ConstantSpeed {
                    reason: "needs one benchmark rate (operations/s) per server".into(),
                }),
            },
        }
    }
}

impl fmt::Display for GraphPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A policy name that is not one of [`GraphPolicy::ALL`].
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error(
    "unknown graph policy {given:?}; expected one of best-of, heft, peft, min-min, mct, sufferage, lp, round-robin, constant-speed"
)]
pub struct ParsePolicyError {
    /// Exactly as given; matching ignores case, surrounding spaces and `_` for `-`.
    pub given: String,
}

impl FromStr for GraphPolicy {
    type Err = ParsePolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.trim().to_ascii_lowercase().replace('_', "-");
        GraphPolicy::ALL
            .into_iter()
            .find(|p| p.name() == key)
            .ok_or_else(|| ParsePolicyError { given: s.into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;

    #[test]
    fn names_round_trip() {
        for p in GraphPolicy::ALL {
            assert_eq!(p.to_string().parse::<GraphPolicy>(), Ok(p));
        }
        assert_eq!("Min_Min".parse(), Ok(GraphPolicy::MinMin));
        let err = "fastest".parse::<GraphPolicy>().unwrap_err();
        assert!(err.to_string().contains("\"fastest\""), "{err}");
    }

    #[test]
    fn default_is_lp_for_bags_and_best_of_for_dags() {
        let mut g = TaskGraph::new();
        let a = g.add_task(Task::new("a", "x", 1.0));
        let b = g.add_task(Task::new("b", "x", 1.0));
        assert_eq!(GraphPolicy::default_for(&g), GraphPolicy::Lp);
        g.add_edge(a, b, 8).unwrap();
        assert_eq!(GraphPolicy::default_for(&g), GraphPolicy::BestOf);
    }

    #[test]
    fn constant_speed_without_rates_says_so() {
        let mut g = TaskGraph::new();
        g.add_task(Task::new("a", "x", 1.0));
        let etc = EtcMatrix::new(1, 1, vec![1.0]).unwrap();
        let err = GraphPolicy::ConstantSpeed
            .map(&g, &etc, &CommModel::free(1), None)
            .unwrap_err();
        assert!(err.to_string().contains("rate"), "{err}");
    }
}
