//! Divisible work: one service over N units cut into parts, one part per chosen server. The
//! questions are which servers, how many, and how much each (seeds 003 §1.5 and 004 §3).
//!
//! The core is given, per candidate server, what a part of x units would take there — a
//! [`Stoch`] time from the estimator (queue, transfers, compute under the forecast load,
//! overhead), with what x may not exceed (memory, a part cap) and the fixed cost of talking
//! to its neighbours — and returns a [`DividePlan`]:
//!
//! - [`balance`]: how N units split over a set of servers, by a [`DividePolicy`]: `fpm`
//!   (seed 003's equal-finish bisection on the speed functions, the default), `lp` (seed 004's time
//!   balancing as a linear program with caps and a slack, the slack relaxed when infeasible,
//!   integer rounding that keeps Σx = N), `constant-speed` (the calibrated rates) and `even`;
//! - [`select`]: which set: the servers ordered by how fast they compute, by how cheaply they
//!   talk to the others, and by both; every prefix of every ordering is balanced and the set
//!   with the lowest predicted makespan wins (or a forced count, or all of them). A slab's
//!   step ends with its latest part: its makespan is the expected maximum of the parts, each
//!   with its exchange's spread.

pub mod balance;
pub mod select;
#[cfg(test)]
mod tests;

use gridwise_predict::Stoch;

pub use balance::balance;
pub use select::{Exchange, plan, plan_slab};

/// How N units are split over a set of servers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DividePolicy {
    /// Equal finishing times on the functional performance models (the default: exact on
    /// speed functions that are not straight lines, as real ones are not).
    #[default]
    Fpm,
    /// Time balancing by linear program with memory and part caps and a balance slack (seed
    /// 004), on times linearised around each part.
    Lp,
    /// In proportion to each server's calibrated rate (classic GridSolve; blind to paging).
    ConstantSpeed,
    /// The same number of units each (Legion's default with every host).
    Even,
}

impl DividePolicy {
    pub fn name(self) -> &'static str {
        match self {
            DividePolicy::Fpm => "fpm",
            DividePolicy::Lp => "lp",
            DividePolicy::ConstantSpeed => "constant-speed",
            DividePolicy::Even => "even",
        }
    }
}

impl std::str::FromStr for DividePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "fpm" => DividePolicy::Fpm,
            "lp" => DividePolicy::Lp,
            "constant-speed" => DividePolicy::ConstantSpeed,
            "even" => DividePolicy::Even,
            other => {
                return Err(format!(
                    "no divide policy `{other}`: fpm, lp, constant-speed or even"
                ));
            }
        })
    }
}

/// How many servers to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Selection {
    /// The set with the lowest predicted makespan over every ordering and size.
    #[default]
    Best,
    /// The best `k` servers (over the orderings).
    Count(usize),
    /// Every candidate.
    All,
}

/// A server that may take a part.
#[derive(Clone, Copy)]
pub struct Worker<'a> {
    /// Its index in whatever list the caller keeps.
    pub id: usize,
    /// Seconds for a part of x units (x ≥ 1), with its spread; infinite where it cannot run.
    pub time: &'a dyn Fn(u64) -> Stoch,
    /// Most units it may take (memory, the job's part cap).
    pub cap: u64,
    /// Its calibrated rate, units/s, for `constant-speed`.
    pub rate: f64,
    /// Seconds per iteration of talking to its neighbours, when it has any (a slab job).
    pub comm_s: f64,
    /// That exchange's spread from one step to the next (the links' forecast error).
    pub comm_sd_s: f64,
}

/// One server's part of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedPart {
    /// [`Worker::id`].
    pub id: usize,
    pub units: u64,
    /// Predicted seconds (compute, transfers, communication) and spread.
    pub time: (f64, f64),
    /// Of that, the exchange with its neighbours per step.
    pub comm_s: f64,
}

/// A divisible job's plan.
#[derive(Clone, Debug, PartialEq)]
pub struct DividePlan {
    /// In the order of the units: the first part takes units [0, parts[0].units), …
    pub parts: Vec<PlannedPart>,
    /// When the last part ends, with its spread: the slowest part's time, or for a slab (whose
    /// steps wait for their latest part) the expected latest of the parts.
    pub makespan: (f64, f64),
    pub policy: DividePolicy,
    /// The ordering the chosen set came from (`compute`, `connectivity`, `both`, `all`).
    pub ordering: String,
    /// For `lp`: the balance tolerance it needed (0.05 unless relaxed).
    pub slack: Option<f64>,
}

/// Why no plan.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DivideError {
    #[error("no server offers the service")]
    NoServers,
    #[error(
        "the servers can hold {capacity} units together, {units} asked: use more servers, smaller units, or raise their memory"
    )]
    TooLarge { units: u64, capacity: u64 },
    #[error("no server can run a part of the job")]
    NoServerCanRun,
}

/// A part's time with its neighbours' cost when it has neighbours.
pub(crate) fn part_time(w: &Worker<'_>, x: u64, neighbours: bool) -> Stoch {
    if x == 0 {
        return Stoch::point(0.0);
    }
    let t = (w.time)(x);
    if neighbours {
        Stoch::new(t.mean + w.comm_s, t.sd.hypot(w.comm_sd_s))
    } else {
        t
    }
}
