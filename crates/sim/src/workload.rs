//! The workload: a task graph whose tasks carry their size as well as their work, built from a
//! [`WorkloadSpec`]. Generated shapes reuse `gridwise_sched::graph::generate` for structure, so
//! a seed gives the same graph here as in the scheduler's own tests and benchmarks.

use crate::scenario::{Scenario, ScenarioError, Sizes, TaskSpec, WorkloadSpec};
use gridwise_proto::Complexity;
use gridwise_sched::graph::generate::{self, SplitMix64};
use gridwise_sched::{Task, TaskGraph, TaskIdx};
use std::collections::HashMap;

/// Largest size accepted (complexities evaluate sizes as `i64`).
const MAX_SIZE: u64 = i64::MAX as u64;
/// Largest Cholesky tile side / Hydropad size: the generators compute bytes from it in `usize`.
const MAX_GENERATED_SIZE: u64 = 1_000_000;

/// A task graph (work = the service's complexity at the task's size) and every task's size.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The tasks and their data dependencies (edge = bytes the consumer receives).
    pub graph: TaskGraph,
    /// Size of each task, by task index (what speed functions are evaluated at).
    pub sizes: Vec<f64>,
}

impl Workload {
    /// A workload from a graph and one size per task.
    pub fn new(graph: TaskGraph, sizes: Vec<f64>) -> Result<Workload, ScenarioError> {
        if sizes.len() != graph.len() {
            return Err(ScenarioError::invalid(
                "workload",
                format!("{} sizes for {} tasks", sizes.len(), graph.len()),
            ));
        }
        Ok(Workload { graph, sizes })
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.graph.len()
    }

    pub fn is_empty(&self) -> bool {
        self.graph.is_empty()
    }
}

/// What the generated workloads (bag, layered) share: a task count, services to draw from, sizes.
fn check_generated(tasks: usize, services: &[String], sizes: &Sizes) -> Result<(), ScenarioError> {
    let bad = |field: &str, reason: &str| {
        Err(ScenarioError::invalid(
            format!("workload.{field}"),
            reason.to_string(),
        ))
    };
    if tasks == 0 {
        return bad("tasks", "tasks is 0; nothing to simulate");
    }
    if services.is_empty() {
        return bad("services", "no services; list at least one");
    }
    check_sizes(sizes)
}

/// Checks a workload spec's numbers (services are checked by the scenario).
pub(crate) fn check(w: &WorkloadSpec) -> Result<(), ScenarioError> {
    let bad = |field: &str, reason: String| {
        Err(ScenarioError::invalid(format!("workload.{field}"), reason))
    };
    match w {
        WorkloadSpec::Bag {
            tasks,
            services,
            sizes,
            ..
        } => check_generated(*tasks, services, sizes),
        WorkloadSpec::Layered {
            tasks,
            width,
            edge_prob,
            services,
            sizes,
            ..
        } => {
            if *tasks == 0 {
                return bad("tasks", "tasks is 0; nothing to simulate".into());
            }
            if *width == 0 {
                return bad("width", "width is 0; a layer has at least one task".into());
            }
            if !(*edge_prob >= 0.0 && *edge_prob <= 1.0) {
                return bad(
                    "edge_prob",
                    format!("{edge_prob} is not a probability in [0, 1]"),
                );
            }
            check_generated(*tasks, services, sizes)
        }
        WorkloadSpec::Cholesky { tiles, tile } => {
            if *tiles == 0 {
                return bad("tiles", "tiles is 0; nothing to factor".into());
            }
            if *tile == 0 || *tile > MAX_GENERATED_SIZE {
                return bad(
                    "tile",
                    format!("tile {tile} must be in 1..={MAX_GENERATED_SIZE}"),
                );
            }
            Ok(())
        }
        WorkloadSpec::Hydropad { size, .. } => {
            if *size == 0 || *size > MAX_GENERATED_SIZE {
                return bad(
                    "size",
                    format!("size {size} must be in 1..={MAX_GENERATED_SIZE}"),
                );
            }
            Ok(())
        }
        WorkloadSpec::Tasks { tasks } => {
            if tasks.is_empty() {
                return bad("tasks", "no tasks; list at least one".into());
            }
            let mut names = HashMap::new();
            for (i, t) in tasks.iter().enumerate() {
                if names.insert(t.name.as_str(), i).is_some() {
                    return bad(
                        &format!("tasks[{i}].name"),
                        format!("task {:?} is listed twice; names must be unique", t.name),
                    );
                }
                if t.size > MAX_SIZE {
                    return bad(
                        &format!("tasks[{i}].size"),
                        format!("size {} is too large", t.size),
                    );
                }
            }
            explicit_shape(tasks).map(|_| ())
        }
        WorkloadSpec::Online {
            calls,
            services,
            sizes,
            mean_gap_s,
            ..
        } => {
            if !(mean_gap_s.is_finite() && *mean_gap_s >= 0.0) {
                return bad(
                    "mean_gap_s",
                    format!("{mean_gap_s} must be a finite number of seconds >= 0"),
                );
            }
            check_generated(*calls, services, sizes)
        }
    }
}

fn check_sizes(sizes: &Sizes) -> Result<(), ScenarioError> {
    let bad = |reason: String| Err(ScenarioError::invalid("workload.sizes", reason));
    match sizes {
        Sizes::Fixed(x) if *x > MAX_SIZE => bad(format!("size {x} is too large")),
        Sizes::Range([lo, hi]) if lo > hi => bad(format!(
            "[{lo}, {hi}]: the low end is above the high end; write [lo, hi]"
        )),
        Sizes::Range([_, hi]) if *hi > MAX_SIZE => bad(format!("size {hi} is too large")),
        Sizes::OneOf(o) if o.one_of.is_empty() => {
            bad("one_of is empty; list at least one size".into())
        }
        Sizes::OneOf(o) if o.one_of.iter().any(|x| *x > MAX_SIZE) => {
            bad("a size is too large".into())
        }
        _ => Ok(()),
    }
}

/// A size drawn from `sizes`.
pub(crate) fn draw(sizes: &Sizes, rng: &mut SplitMix64) -> u64 {
    match sizes {
        Sizes::Fixed(x) => *x,
        // hi - lo + 1 cannot overflow: sizes are at most i64::MAX.
        Sizes::Range([lo, hi]) => lo + rng.next_u64() % (hi - lo + 1),
        Sizes::OneOf(o) => o.one_of[rng.below(o.one_of.len())],
    }
}

/// Work and output bytes of each (service, size), evaluated once: large workloads repeat sizes.
struct Costs {
    compiled: HashMap<String, (Complexity, Option<Complexity>, String)>,
    cache: HashMap<(String, u64), (f64, Option<u64>)>,
}

impl Costs {
    fn new(s: &Scenario) -> Result<Costs, ScenarioError> {
        let mut compiled = HashMap::new();
        for (name, spec) in &s.services {
            let (work, out) = s.compiled(name)?;
            compiled.insert(name.clone(), (work, out, spec.param.clone()));
        }
        Ok(Costs {
            compiled,
            cache: HashMap::new(),
        })
    }

    /// `(operations, output bytes if the service declares them)` of a call at `size`.
    fn of(&mut self, service: &str, size: u64) -> Result<(f64, Option<u64>), ScenarioError> {
        if let Some(&v) = self.cache.get(&(service.to_string(), size)) {
            return Ok(v);
        }
        let Some((work, out, param)) = self.compiled.get(service) else {
            return Err(ScenarioError::invalid(
                "workload",
                format!("service {service:?} is not declared in `services`"),
            ));
        };
        let at = |field: &str| format!("services.{service}.{field} at size {size}");
        // Sizes are checked to fit i64.
        let sizes = [(param.clone(), size as i64)];
        let w = work
            .eval(&sizes)
            .map_err(|e| ScenarioError::invalid(at("complexity"), e.to_string()))?;
        let o = match out {
            // `as` saturates: an absurd output size becomes u64::MAX bytes, not a wrap-around.
            Some(c) => Some(
                c.eval(&sizes)
                    .map_err(|e| ScenarioError::invalid(at("output_bytes"), e.to_string()))?
                    .round() as u64,
            ),
            None => None,
        };
        self.cache.insert((service.to_string(), size), (w, o));
        Ok((w, o))
    }
}

/// Builds the workload of a checked scenario.
pub(crate) fn build(s: &Scenario) -> Result<Workload, ScenarioError> {
    let mut costs = Costs::new(s)?;
    match &s.workload {
        WorkloadSpec::Bag {
            tasks,
            services,
            sizes,
            seed,
        } => {
            let mut rng = SplitMix64::new(*seed);
            let shape = TaskGraph::new();
            let mut spec = Vec::with_capacity(*tasks);
            for i in 0..*tasks {
                spec.push((
                    format!("t{i}"),
                    services[i % services.len()].clone(),
                    draw(sizes, &mut rng),
                ));
            }
            rebuild(&shape, spec, &mut costs)
        }
        WorkloadSpec::Layered {
            tasks,
            width,
            edge_prob,
            services,
            sizes,
            seed,
        } => {
            let shape = generate::layered(*tasks, *width, *edge_prob, *seed);
            // A stream of its own, so sizes do not shift the generator's structure.
            let mut rng = SplitMix64::new(seed ^ 0x5123_E5A1_D0C5_17E5);
            let spec = (0..*tasks)
                .map(|i| {
                    let name = shape.task(i).name.clone();
                    (
                        name,
                        services[i % services.len()].clone(),
                        draw(sizes, &mut rng),
                    )
                })
                .collect();
            rebuild(&shape, spec, &mut costs)
        }
        WorkloadSpec::Cholesky { tiles, tile } => {
            let shape = generate::cholesky(*tiles, *tile as usize);
            let spec = shape
                .tasks()
                .map(|t| {
                    // The generator names LAPACK routines (dpotrf, …); the scenario the kernels.
                    let svc = t
                        .service
                        .strip_prefix('d')
                        .unwrap_or(&t.service)
                        .to_string();
                    (t.name.clone(), svc, *tile)
                })
                .collect();
            rebuild(&shape, spec, &mut costs)
        }
        WorkloadSpec::Hydropad { iterations, size } => {
            let shape = generate::hydropad(*iterations, *size as usize, *size as usize);
            let spec = shape
                .tasks()
                .map(|t| (t.name.clone(), t.service.clone(), *size))
                .collect();
            rebuild(&shape, spec, &mut costs)
        }
        WorkloadSpec::Tasks { tasks } => {
            let shape = explicit_shape(tasks)?;
            let spec = tasks
                .iter()
                .map(|t| (t.name.clone(), t.service.clone(), t.size))
                .collect();
            rebuild(&shape, spec, &mut costs)
        }
        WorkloadSpec::Online { .. } => Err(ScenarioError::invalid(
            "workload",
            "an online workload is a stream of single calls, not a graph to map: run it with \
             `gridwise sim` and a ranking policy (mct, round-robin or constant-speed)",
        )),
    }
}

/// The dependency graph of an explicit task list, checked acyclic. Its edges carry no bytes:
/// explicit tasks move only what their services declare.
fn explicit_shape(tasks: &[TaskSpec]) -> Result<TaskGraph, ScenarioError> {
    let index: HashMap<&str, TaskIdx> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let mut shape = TaskGraph::new();
    for t in tasks {
        shape.add_task(Task::new(t.name.clone(), t.service.clone(), 0.0));
    }
    for (i, t) in tasks.iter().enumerate() {
        let at = || format!("workload.tasks[{i}].after");
        for a in &t.after {
            let Some(&from) = index.get(a.as_str()) else {
                return Err(ScenarioError::invalid(
                    at(),
                    format!(
                        "task {:?} waits for {a:?}, which is not in the list",
                        t.name
                    ),
                ));
            };
            shape
                .add_edge(from, i, 0)
                .map_err(|e| ScenarioError::invalid(at(), e.to_string()))?;
        }
    }
    shape.adjacency().map_err(|e| {
        ScenarioError::invalid(
            "workload.tasks",
            format!("{e}; a task cannot (indirectly) wait for itself"),
        )
    })?;
    Ok(shape)
}

/// The workload with `shape`'s edges and, per task, `(name, service, size)` from `spec` (tasks
/// beyond `shape`'s have no edges). An edge carries its producer's declared output bytes, else
/// the bytes `shape` gave it.
fn rebuild(
    shape: &TaskGraph,
    spec: Vec<(String, String, u64)>,
    costs: &mut Costs,
) -> Result<Workload, ScenarioError> {
    let mut graph = TaskGraph::new();
    let mut sizes = Vec::with_capacity(spec.len());
    let mut out = Vec::with_capacity(spec.len());
    for (name, service, size) in spec {
        let (work, bytes) = costs.of(&service, size)?;
        graph.add_task(Task::new(name, service, work));
        sizes.push(size as f64);
        out.push(bytes);
    }
    for (a, b, bytes) in shape.edges() {
        let bytes = out[a].unwrap_or(bytes);
        graph
            .add_edge(a, b, bytes)
            .map_err(|e| ScenarioError::invalid("workload", e.to_string()))?;
    }
    Workload::new(graph, sizes)
}
