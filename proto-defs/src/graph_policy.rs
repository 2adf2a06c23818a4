//! The policies that map a whole task graph, by name: what a client asks for on the wire and
//! in its files. The algorithms behind them are `gridwise_sched`'s (`graph::policy`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// A policy for mapping a whole task graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GraphPolicy {
    /// HEFT and PEFT replayed, the shorter improved by a local search on its critical chain
    /// (`best_of`); never worse than HEFT.
    BestOf,
    /// Upward rank, earliest finish time with insertion (`heft`).
    Heft,
    /// HEFT with an optimistic-cost-table lookahead (`peft`).
    Peft,
    /// Ready task with the smallest minimum completion time first (`min_min`).
    MinMin,
    /// Each task in submission order to its minimum completion time (`mct`).
    Mct,
    /// Ready task that loses most without its best server first (`sufferage`).
    Sufferage,
    /// LP relaxation of unrelated-machine makespan, rounded; bags only (`lp`).
    Lp,
    /// Servers in turn (`round_robin`).
    RoundRobin,
    /// Work ÷ one rate per server, greedily (`constant_speed`).
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

    #[test]
    fn names_round_trip() {
        for p in GraphPolicy::ALL {
            assert_eq!(p.to_string().parse::<GraphPolicy>(), Ok(p));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.name()));
        }
        assert_eq!("Min_Min".parse(), Ok(GraphPolicy::MinMin));
        let err = "fastest".parse::<GraphPolicy>().unwrap_err();
        assert!(err.to_string().contains("\"fastest\""), "{err}");
    }
}
