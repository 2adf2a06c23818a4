//! A policy run end to end: map with the ETC the scheduler believes, predict by replay, execute
//! by simulation, and compare with the bounds.
//!
//! The mapper sees the true ETC at availability 1 — every server unloaded. The load traces are
//! what it did not foresee, so `predicted_makespan_s` (the replay of its own plan) and
//! `makespan_s` (the simulation under load) differ exactly by what the load cost.

use crate::engine::{EngineError, SimRun, simulate};
use crate::platform::Platform;
use crate::scenario::ScenarioError;
use crate::workload::Workload;
use gridwise_sched::MapByPolicy;
use gridwise_sched::graph::policy::lp;
use gridwise_sched::{
    Bounds, EtcMatrix, GraphError, GraphPolicy, LowerBound, MapError, Mapping, Replay, ReplayError,
    best_lower_bound, replay,
};
use serde::Serialize;
use std::cell::Cell;
use std::time::Instant;
use thiserror::Error;

/// Tasks × servers above which the `lp` policy refuses, with an error suggesting heft or mct.
///
/// The LP merges tasks with identical (then similar) ETC rows, so its variables stay bounded,
/// but finding the grouping, rounding and the local search each walk tasks × servers, and the
/// rows are merged into buckets up to a factor 2 wide, loosening both the bound and the
/// rounding. Measured (release, 2 cores) on bags over 2–4 server classes: 2e6 cells ≈ 0.3 s,
/// 1e7 ≈ 1.5 s, 2e7 ≈ 3–4.5 s, 1e8 (100,000 × 1,000) ≈ 11–28 s.
pub const MAX_LP_CELLS: usize = 20_000_000;

/// Tasks × servers above which the LP lower bound is skipped in reports ([`SimReport::lp_bound_s`]
/// is `None`): every policy's report would pay for it, so only where it costs under a second.
/// The same limit as the agent's and the benchmark's: the bound is chosen in one place.
pub use gridwise_sched::graph::lower_bound::MAX_LP_BOUND_CELLS;

/// Why a simulation could not run.
#[derive(Debug, Error)]
pub enum SimError {
    /// The scenario is wrong.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The graph is invalid.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A task that no server can run.
    #[error(
        "no server can run task {task:?} (service {service:?}, size {size}): no class offers the service, or its speed is 0 at that size on every class that does"
    )]
    Infeasible {
        task: String,
        service: String,
        /// The value of the service's size parameter the speed functions were evaluated at.
        size: f64,
    },
    /// The policy failed.
    #[error("mapping with {policy}: {source}")]
    Map {
        policy: GraphPolicy,
        source: MapError,
    },
    /// The LP is too large to solve here.
    #[error(
        "policy lp: {tasks} tasks x {servers} servers = {cells} ETC cells, above the {limit} the LP handles in reasonable time; use heft or mct (min-min and sufferage also fit bags, but slow down with many ready tasks)"
    )]
    LpTooLarge {
        tasks: usize,
        servers: usize,
        cells: usize,
        /// [`MAX_LP_CELLS`].
        limit: usize,
    },
    /// The mapping cannot be replayed (a policy bug if it happens).
    #[error("replaying the mapping: {0}")]
    Replay(#[from] ReplayError),
    /// The mapping cannot be executed.
    #[error("simulating the mapping: {0}")]
    Engine(#[from] EngineError),
}

/// What one policy achieved on one scenario.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    /// Serialized by its config name, e.g. `"min-min"`.
    #[serde(serialize_with = "policy_name")]
    pub policy: GraphPolicy,
    /// Tasks in the workload.
    pub tasks: usize,
    /// Servers in the platform.
    pub servers: usize,
    /// Simulated makespan, under the load traces.
    pub makespan_s: f64,
    /// The makespan the mapper's own plan predicts (replay at availability 1).
    pub predicted_makespan_s: f64,
    /// The best lower bound known ([`best_lower_bound`]: critical path, work ÷ slots, and the
    /// LP and window LP bounds where they were computed). No mapping beats it, loaded or not.
    pub lower_bound_s: f64,
    /// Which bound `lower_bound_s` is: `critical_path`, `total_work`, `lp` or `lp_window`.
    pub lower_bound_kind: &'static str,
    /// The makespan ÷ the lower bound.
    pub makespan_over_bound: f64,
    /// The LP bound; `None` when skipped (more than [`MAX_LP_BOUND_CELLS`]) or the solver failed.
    pub lp_bound_s: Option<f64>,
    /// Critical path with every task at its best time and free transfers.
    pub critical_path_s: f64,
    /// Wall-clock time the policy took (the only non-deterministic field).
    pub mapping_ms: f64,
    /// Mean over servers of busy time ÷ makespan.
    pub utilisation: f64,
    /// Events the simulation processed: two per task.
    pub events: usize,
}

fn policy_name<S: serde::Serializer>(p: &GraphPolicy, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.name())
}

/// A report with everything behind it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub report: SimReport,
    /// The policy's mapping.
    pub mapping: Mapping,
    /// Its replay at availability 1 (the prediction).
    pub predicted: Replay,
    /// Its simulation under load (what happened).
    pub actual: SimRun,
}

/// A workload on a platform, prepared once for any number of policy runs: the true ETC matrix
/// (tasks × servers, the one large allocation), the bounds, the constant-speed rates.
pub struct Simulation<'a> {
    platform: &'a Platform,
    workload: &'a Workload,
    etc: EtcMatrix,
    bounds: Bounds,
    rates: Vec<f64>,
    /// The LP bound found by the `lp` policy, if it ran first (saves a second solve).
    lp_from_policy: Cell<Option<f64>>,
    /// `None` until computed.
    lower: Cell<Option<LowerBound>>,
}

impl<'a> Simulation<'a> {
    /// Builds the ETC matrix and bounds; fails if some task can run nowhere.
    pub fn new(platform: &'a Platform, workload: &'a Workload) -> Result<Self, SimError> {
        let etc = platform.true_etc(workload);
        if let Some(t) = (0..etc.tasks()).find(|&t| !etc.row(t).iter().any(|v| v.is_finite())) {
            let task = workload.graph.task(t);
            return Err(SimError::Infeasible {
                task: task.name.clone(),
                service: task.service.clone(),
                size: workload.sizes[t],
            });
        }
        let bounds = Bounds::of(&workload.graph, &etc)?;
        Ok(Simulation {
            platform,
            workload,
            etc,
            bounds,
            rates: platform.rates(None),
            lp_from_policy: Cell::new(None),
            lower: Cell::new(None),
        })
    }

    /// The ETC matrix the mappers see (availability 1).
    pub fn etc(&self) -> &EtcMatrix {
        &self.etc
    }

    /// Critical path, total work, lower bound.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn cells(&self) -> usize {
        self.etc.tasks().saturating_mul(self.etc.servers())
    }

    /// Whether the `lp` policy is small enough to attempt (see [`MAX_LP_CELLS`]).
    pub fn lp_fits(&self) -> bool {
        self.cells() <= MAX_LP_CELLS
    }

    /// The best lower bound ([`best_lower_bound`]), computed once; the LP part only up to
    /// [`MAX_LP_BOUND_CELLS`], unless the `lp` policy ran first and found it.
    pub fn lower(&self) -> LowerBound {
        if let Some(known) = self.lower.get() {
            return known;
        }
        let lower = best_lower_bound(&self.workload.graph, &self.etc, self.lp_from_policy.get())
            // Simulation::new already walked the graph, so it has no cycle.
            .unwrap_or_else(|_| LowerBound::from_parts(self.bounds, None, None));
        self.lower.set(Some(lower));
        lower
    }

    /// The LP bound (it treats tasks as independent, so it holds for any graph); `None` when
    /// skipped or the solver failed.
    pub fn lp_bound_s(&self) -> Option<f64> {
        self.lower().lp_s
    }

    /// The best lower bound known (see [`SimReport::lower_bound_s`]).
    pub fn lower_bound_s(&self) -> f64 {
        self.lower().seconds
    }

    /// The policy for this graph's shape: [`GraphPolicy::default_for`], except heft for a bag
    /// too large for the LP.
    pub fn default_policy(&self) -> GraphPolicy {
        match GraphPolicy::default_for(&self.workload.graph) {
            GraphPolicy::Lp if !self.lp_fits() => GraphPolicy::Heft,
            p => p,
        }
    }

    /// Whether `policy` can map this workload: lp needs a bag small enough.
    pub fn applies(&self, policy: GraphPolicy) -> bool {
        policy != GraphPolicy::Lp || (self.workload.graph.is_bag() && self.lp_fits())
    }

    /// Maps the workload by `policy`; returns the mapping and the wall-clock milliseconds it
    /// took.
    pub fn map(&self, policy: GraphPolicy) -> Result<(Mapping, f64), SimError> {
        let (tasks, servers) = (self.etc.tasks(), self.etc.servers());
        if policy == GraphPolicy::Lp && !self.lp_fits() {
            return Err(SimError::LpTooLarge {
                tasks,
                servers,
                cells: self.cells(),
                limit: MAX_LP_CELLS,
            });
        }
        let g = &self.workload.graph;
        let comm = self.platform.comm_model();
        let started = Instant::now();
        let mapped = if policy == GraphPolicy::Lp {
            // Straight to the LP so its bound comes with the mapping instead of a second solve.
            lp::solve(g, &self.etc, comm).map(|o| {
                self.lp_from_policy.set(Some(o.lower_bound_s));
                // A bound already reported without the LP (too large to solve for a report)
                // gains it now.
                if let Some(l) = self.lower.get()
                    && l.lp_s.is_none()
                {
                    let with_lp =
                        LowerBound::from_parts(l.bounds, Some(o.lower_bound_s), l.window_s);
                    self.lower.set(Some(with_lp));
                }
                o.mapping
            })
        } else {
            policy.map(g, &self.etc, comm, Some(&self.rates))
        };
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let mapping = mapped.map_err(|source| SimError::Map { policy, source })?;
        Ok((mapping, ms))
    }

    /// Predicts `mapping` by replay and executes it by simulation.
    pub fn evaluate(
        &self,
        policy: GraphPolicy,
        mapping: Mapping,
        mapping_ms: f64,
    ) -> Result<Outcome, SimError> {
        let g = &self.workload.graph;
        let predicted = replay(g, &self.etc, self.platform.comm_model(), &mapping)?;
        let actual = simulate(self.platform, self.workload, &mapping)?;
        let makespan_s = actual.makespan_s;
        let lower = self.lower();
        let utilisation = if makespan_s > 0.0 && !actual.busy_s.is_empty() {
            actual.busy_s.iter().sum::<f64>() / actual.busy_s.len() as f64 / makespan_s
        } else {
            0.0
        };
        let report = SimReport {
            policy,
            tasks: g.len(),
            servers: self.etc.servers(),
            makespan_s,
            predicted_makespan_s: predicted.makespan_s,
            lower_bound_s: lower.seconds,
            lower_bound_kind: lower.kind.name(),
            makespan_over_bound: if lower.seconds > 0.0 {
                makespan_s / lower.seconds
            } else {
                f64::NAN
            },
            lp_bound_s: lower.lp_s,
            critical_path_s: self.bounds.critical_path_s,
            mapping_ms,
            utilisation,
            events: actual.events,
        };
        Ok(Outcome {
            report,
            mapping,
            predicted,
            actual,
        })
    }

    /// Maps by `policy`, predicts and simulates.
    pub fn run_full(&self, policy: GraphPolicy) -> Result<Outcome, SimError> {
        let (mapping, ms) = self.map(policy)?;
        self.evaluate(policy, mapping, ms)
    }

    /// [`Simulation::run_full`], the report only.
    pub fn run(&self, policy: GraphPolicy) -> Result<SimReport, SimError> {
        Ok(self.run_full(policy)?.report)
    }
}

/// Runs one policy on a workload and platform (see [`Simulation`] to run several without
/// rebuilding the ETC matrix).
pub fn run(
    platform: &Platform,
    workload: &Workload,
    policy: GraphPolicy,
) -> Result<SimReport, SimError> {
    Simulation::new(platform, workload)?.run(policy)
}
