//! gridwise-sim: a deterministic discrete-event simulator of a GridRPC platform, driving the
//! mapping policies of `gridwise-sched` unchanged on virtual time.
//!
//! A [`Scenario`] (JSON, see `examples/sim/README.md`) names services (complexity and output
//! size as expressions in a size), classes of servers (a speed function per service, slots, an
//! availability trace), links, and a workload (a bag of calls, a layered DAG, Cholesky,
//! Hydropad, or an explicit list). It becomes a [`Platform`] and a [`Workload`]:
//!
//! 1. [`Platform::true_etc`] gives every task's time on every server at full availability,
//!    C(x) ÷ S(x) — what the mappers see.
//! 2. A [`GraphPolicy`] maps the workload on it; `gridwise_sched::replay` predicts the plan.
//! 3. [`simulate`] executes the mapping on virtual time with the load traces the mapper did not
//!    foresee: with availability 1 everywhere it equals the replay to the bit.
//!
//! [`Simulation`] runs all three for any number of policies and reports makespans against the
//! lower bounds ([`SimReport`]). Nothing here reads a clock except the mapping timer, and every
//! random draw comes from the scenario's seed, so a scenario always simulates the same way.

pub mod engine;
pub mod online;
pub mod platform;
pub mod report;
pub mod scenario;
pub mod workload;

#[cfg(test)]
mod online_tests;
#[cfg(test)]
mod tests;

pub use engine::{EngineError, SimRun, simulate};
pub use gridwise_kernels::{LoadSpec, LoadTrace};
pub use gridwise_sched::GraphPolicy;
pub use online::{
    Decision, OnlineReport, OnlineRun, check_agents, simulate_online, simulate_online_agents,
};
pub use platform::{Platform, ServerClass};
pub use report::{MAX_LP_BOUND_CELLS, MAX_LP_CELLS, Outcome, SimError, SimReport, Simulation, run};
pub use scenario::{Gaps, Knowledge, Scenario, ScenarioError, Sizes, WorkloadSpec};
pub use workload::Workload;
