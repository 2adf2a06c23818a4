//! The scenario file (JSON): services, server classes, links and a workload. Parsing checks
//! everything that can be checked without building the platform or the task graph, so a bad file
//! fails at once with the field it is about and what to write instead.

use crate::platform::{Platform, ServerClass};
use crate::workload::{self, Workload};
use gridwise_kernels::SpeedFunction;
use gridwise_kernels::{LoadSpec, LoadTrace};
use gridwise_proto::Complexity;
use gridwise_sched::CommModel;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a scenario could not be read, parsed or built.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The text is not JSON of the scenario's shape (serde's message names the field and line).
    #[error("scenario is not valid JSON of the expected shape: {0} (see examples/sim/README.md)")]
    Syntax(#[from] serde_json::Error),
    /// A value that parses but makes no sense.
    #[error("scenario: {at}: {reason}")]
    Invalid {
        /// Where in the file, e.g. `servers[1].speeds.dgemm`.
        at: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// Any of the above, in a named file.
    #[error("{}: {inner}", path.display())]
    InFile {
        path: PathBuf,
        inner: Box<ScenarioError>,
    },
}

impl ScenarioError {
    pub(crate) fn invalid(at: impl Into<String>, reason: impl Into<String>) -> Self {
        ScenarioError::Invalid {
            at: at.into(),
            reason: reason.into(),
        }
    }
}

/// A whole simulation input: what the servers can do, how they are linked, and what runs.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name shown in reports; [`Scenario::load`] defaults it to the file name without extension.
    #[serde(default)]
    pub name: Option<String>,
    /// Free text, ignored.
    #[serde(default)]
    pub description: Option<String>,
    /// By the names that `speeds` and the workload refer to.
    pub services: BTreeMap<String, ServiceSpec>,
    /// Server classes; servers are numbered class by class in this order.
    pub servers: Vec<ServerClassSpec>,
    /// Absent: 0.1 ms and 1 GB/s between every two servers.
    #[serde(default)]
    pub links: LinkSpec,
    pub workload: WorkloadSpec,
}

/// A service: how much work a call does and how much output it leaves, at a size.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// Operations as an expression in `param`, e.g. `"2*n^3"`.
    pub complexity: String,
    /// Name of the size variable in the expressions.
    #[serde(default = "default_param")]
    pub param: String,
    /// Bytes a call's output takes, as an expression in `param` (e.g. `"8*n^2"`); what every
    /// dependent call must receive. Unset: the generator's own edge bytes for generated graphs
    /// (see [`WorkloadSpec`]), 0 for `bag` and `tasks`.
    #[serde(default)]
    pub output_bytes: Option<String>,
}

fn default_param() -> String {
    "n".into()
}

/// A class of identical servers.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerClassSpec {
    /// Class name; its servers are `name-0`, `name-1`, … (just `name` when `count` is 1).
    pub name: String,
    /// Servers in the class: 1 unless set, 0 is refused.
    #[serde(default = "one")]
    pub count: usize,
    /// Calls each server runs at once, each at the full speed of its speed function.
    #[serde(default = "one")]
    pub slots: usize,
    /// Per service, the speed function as `[[size, operations_per_s], …]` by increasing size
    /// (linear between points, constant beyond; speed 0 = that size does not fit). A service
    /// missing here cannot run on this class.
    pub speeds: BTreeMap<String, Vec<(f64, f64)>>,
    /// Background load as an availability trace: written out, `[[from_s, fraction], …]` with
    /// fractions in (0, 1] and 1 before the first point, or generated (`{"kind": "random" |
    /// "steady", …}`, see `gridwise_kernels::load`). Every server of the class follows it. The
    /// mappers do not see it.
    #[serde(default)]
    pub load: Option<LoadSpec>,
}

fn one() -> usize {
    1
}

/// Latency and bandwidth between servers.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Latency between any two distinct servers, s.
    #[serde(default = "default_latency")]
    pub latency_s: f64,
    /// Bandwidth between any two distinct servers, bytes/s.
    #[serde(default = "default_bandwidth")]
    pub bandwidth: f64,
    /// Overrides between classes (both directions; `from` = `to` sets links inside a class).
    #[serde(default)]
    pub classes: Vec<ClassLinkSpec>,
}

impl Default for LinkSpec {
    fn default() -> Self {
        LinkSpec {
            latency_s: default_latency(),
            bandwidth: default_bandwidth(),
            classes: Vec::new(),
        }
    }
}

fn default_latency() -> f64 {
    1e-4
}

fn default_bandwidth() -> f64 {
    1e9
}

/// Links between the servers of two classes.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClassLinkSpec {
    /// Name of a server class. The link is set both ways, so which class is `from` does not
    /// matter.
    pub from: String,
    /// Name of the other class; the same as `from` for the links inside one class.
    pub to: String,
    /// Latency, s.
    pub latency_s: f64,
    /// Bandwidth, bytes/s.
    pub bandwidth: f64,
}

/// Task sizes: a number, `[lo, hi]` (uniform integers, inclusive) or `{"one_of": [a, b, …]}`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(
    untagged,
    expecting = "sizes as a number, [lo, hi] (uniform integers from lo to hi) or {\"one_of\": [a, b, ...]}"
)]
pub enum Sizes {
    /// Every task this size.
    Fixed(u64),
    /// Uniform integers from `lo` to `hi` inclusive.
    Range([u64; 2]),
    /// Uniform choice from a list.
    OneOf(OneOf),
}

/// The `{"one_of": [...]}` form of [`Sizes`].
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OneOf {
    /// Each equally likely; an empty list is refused.
    pub one_of: Vec<u64>,
}

/// What runs, tagged by `kind`. Generated graphs reuse `gridwise_sched::graph::generate` for
/// their structure; each task's work is its service's complexity at its size.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkloadSpec {
    /// Independent calls; task i calls `services[i % len]` at a size drawn from `sizes`.
    Bag {
        /// How many calls.
        tasks: usize,
        /// Services, taken round robin.
        services: Vec<String>,
        sizes: Sizes,
        /// Seed of the size draws.
        #[serde(default)]
        seed: u64,
    },
    /// A random layered DAG: layers of `width`, each task depending on each task of the layer
    /// before with probability `edge_prob` (and on at least one). Services round robin, sizes
    /// drawn; edges carry the producer's `output_bytes`, else 100 kB–10 MB drawn from the seed.
    Layered {
        /// How many tasks.
        tasks: usize,
        /// Tasks per layer.
        width: usize,
        /// Probability of each edge between consecutive layers.
        edge_prob: f64,
        /// Services, taken round robin.
        services: Vec<String>,
        sizes: Sizes,
        /// Seed of the structure and the size draws.
        #[serde(default)]
        seed: u64,
    },
    /// Tiled Cholesky of `tiles` × `tiles` tiles: services `potrf`, `trsm`, `syrk`, `gemm`, every
    /// task at size `tile`; edges carry the producer's `output_bytes`, else one tile of doubles.
    Cholesky {
        /// Tiles per side.
        tiles: usize,
        /// Tile side (the size of every task).
        tile: u64,
    },
    /// Hydropad: `init`, then per iteration `gravity` → (`darkmatter` ∥ `barmatter`), every task
    /// at `size`; edges carry the producer's `output_bytes`, else the generator's grid and
    /// particle bytes for `size` cells and particles per side.
    Hydropad {
        /// Time steps.
        iterations: usize,
        /// Size of every task.
        size: u64,
    },
    /// An explicit list of calls.
    Tasks {
        /// The calls; `after` may also name a task listed later (the graph must stay acyclic).
        tasks: Vec<TaskSpec>,
    },
    /// Single calls arriving one at a time, each ranked by the agent's decision core when it
    /// arrives (its queues, MCT with pruning) and learnt from when it finishes, as a live
    /// agent would (see [`crate::online`]). Service `i % len` for call `i`, sizes drawn.
    Online {
        /// How many calls.
        calls: usize,
        /// Services, taken round robin.
        services: Vec<String>,
        sizes: Sizes,
        /// Mean time between arrivals, s; 0 sends every call at time 0.
        mean_gap_s: f64,
        /// Poisson unless set.
        #[serde(default)]
        gaps: Gaps,
        /// What the agent knows before the first call.
        #[serde(default)]
        agent_knows: Knowledge,
        /// Seed of the size and gap draws.
        #[serde(default)]
        seed: u64,
    },
}

/// How the gaps between online arrivals are drawn.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Gaps {
    /// Exponential with the mean gap: a Poisson stream of independent users.
    #[default]
    Poisson,
    /// Exactly the mean gap apart.
    Fixed,
}

/// What the simulated agent knows about the servers' speeds before the first call.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Knowledge {
    /// Nothing: no calibrated rate, no model. Estimates come from the calls it sees finish.
    #[default]
    Nothing,
    /// One calibrated rate per server, as classic GridSolve measured it (see
    /// [`Platform::rates`]): what constant-speed ranks by.
    Rates,
    /// Every server's performance model of every service it offers, with one point at each
    /// point of its speed function: what a finished model build measures.
    Models,
}

/// One explicit call of a `tasks` workload.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Unique in the list (checked): `after` names tasks by it.
    pub name: String,
    /// Must be declared in `services` and offered by some server class (both checked).
    pub service: String,
    /// The value of its service's size parameter (`param`).
    pub size: u64,
    /// Names of the tasks whose output it needs.
    #[serde(default)]
    pub after: Vec<String>,
}

/// Services of the `cholesky` workload.
pub const CHOLESKY_SERVICES: [&str; 4] = ["potrf", "trsm", "syrk", "gemm"];
/// Services of the `hydropad` workload.
pub const HYDROPAD_SERVICES: [&str; 4] = ["init", "gravity", "darkmatter", "barmatter"];

impl WorkloadSpec {
    /// The services its tasks call, with where each is named (for error messages).
    fn services_used(&self) -> Vec<(String, String)> {
        let listed = |v: &[String]| {
            v.iter()
                .enumerate()
                .map(|(i, s)| (s.clone(), format!("workload.services[{i}]")))
                .collect()
        };
        let fixed = |kind: &str, v: &[&str]| {
            v.iter()
                .map(|s| (s.to_string(), format!("workload (kind {kind})")))
                .collect()
        };
        match self {
            WorkloadSpec::Bag { services, .. } | WorkloadSpec::Layered { services, .. } => {
                listed(services)
            }
            WorkloadSpec::Cholesky { .. } => fixed("cholesky", &CHOLESKY_SERVICES),
            WorkloadSpec::Hydropad { .. } => fixed("hydropad", &HYDROPAD_SERVICES),
            WorkloadSpec::Tasks { tasks } => tasks
                .iter()
                .map(|t| (t.service.clone(), format!("workload.tasks[{:?}]", t.name)))
                .collect(),
            WorkloadSpec::Online { services, .. } => listed(services),
        }
    }
}

impl Scenario {
    /// Reads and checks a scenario file; its name defaults to the file name without extension.
    pub fn load(path: impl AsRef<Path>) -> Result<Scenario, ScenarioError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut s = Scenario::parse(&text).map_err(|e| ScenarioError::InFile {
            path: path.to_path_buf(),
            inner: Box::new(e),
        })?;
        if s.name.is_none() {
            s.name = path.file_stem().map(|n| n.to_string_lossy().into_owned());
        }
        Ok(s)
    }

    /// Parses and checks a scenario from JSON text.
    pub fn parse(json: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = serde_json::from_str(json)?;
        s.validate()?;
        Ok(s)
    }

    /// The name for reports (`"scenario"` if none was given).
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or("scenario")
    }

    /// Checks what parsing cannot: expressions, speed points, traces, names and references.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.services.is_empty() {
            return Err(ScenarioError::invalid(
                "services",
                "no services; declare at least one, e.g. \"dgemm\": {\"complexity\": \"2*n^3\"}",
            ));
        }
        for name in self.services.keys() {
            self.compiled(name)?;
        }
        if self.servers.is_empty() {
            return Err(ScenarioError::invalid(
                "servers",
                "no server classes; add at least one",
            ));
        }
        let mut classes = HashSet::new();
        for (i, c) in self.servers.iter().enumerate() {
            self.check_class(i, c)?;
            if !classes.insert(c.name.as_str()) {
                return Err(ScenarioError::invalid(
                    format!("servers[{i}].name"),
                    format!(
                        "class {:?} is declared twice; give each class its own name",
                        c.name
                    ),
                ));
            }
        }
        self.check_links(&classes)?;
        self.check_workload()
    }

    fn check_class(&self, i: usize, c: &ServerClassSpec) -> Result<(), ScenarioError> {
        let at = |field: &str| format!("servers[{i}].{field}");
        if c.name.trim().is_empty() {
            return Err(ScenarioError::invalid(at("name"), "class name is empty"));
        }
        if c.count == 0 {
            return Err(ScenarioError::invalid(
                at("count"),
                "count is 0; a class has at least one server (remove the class instead)",
            ));
        }
        if c.slots == 0 {
            return Err(ScenarioError::invalid(
                at("slots"),
                "slots is 0; every server runs at least one call at a time",
            ));
        }
        if c.speeds.is_empty() {
            return Err(ScenarioError::invalid(
                at("speeds"),
                format!(
                    "class {:?} offers no service; give it a speed function for at least one",
                    c.name
                ),
            ));
        }
        for svc in c.speeds.keys() {
            speed_function(self, i, c, svc)?;
        }
        load_trace(&c.load).map_err(|reason| ScenarioError::invalid(at("load"), reason))?;
        Ok(())
    }

    fn check_links(&self, classes: &HashSet<&str>) -> Result<(), ScenarioError> {
        let link_ok = |lat: f64, bw: f64| lat.is_finite() && lat >= 0.0 && bw > 0.0;
        if !link_ok(self.links.latency_s, self.links.bandwidth) {
            return Err(ScenarioError::invalid(
                "links",
                format!(
                    "latency {} s and bandwidth {} B/s; latency must be >= 0 and bandwidth > 0",
                    self.links.latency_s, self.links.bandwidth
                ),
            ));
        }
        for (i, l) in self.links.classes.iter().enumerate() {
            for name in [&l.from, &l.to] {
                if !classes.contains(name.as_str()) {
                    return Err(ScenarioError::invalid(
                        format!("links.classes[{i}]"),
                        format!("no server class is named {name:?}"),
                    ));
                }
            }
            if !link_ok(l.latency_s, l.bandwidth) {
                return Err(ScenarioError::invalid(
                    format!("links.classes[{i}]"),
                    format!(
                        "latency {} s and bandwidth {} B/s; latency must be >= 0 and bandwidth > 0",
                        l.latency_s, l.bandwidth
                    ),
                ));
            }
        }
        Ok(())
    }

    fn check_workload(&self) -> Result<(), ScenarioError> {
        for (svc, at) in self.workload.services_used() {
            if !self.services.contains_key(&svc) {
                return Err(ScenarioError::invalid(
                    at,
                    format!(
                        "service {svc:?} is not declared in `services` (declared: {}); declare it with its complexity",
                        self.services.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            if !self.servers.iter().any(|c| c.speeds.contains_key(&svc)) {
                return Err(ScenarioError::invalid(
                    at,
                    format!(
                        "no server class offers service {svc:?}; give some class a speed function for it"
                    ),
                ));
            }
        }
        workload::check(&self.workload)
    }

    /// The compiled complexity and output-size expressions of a declared service.
    pub(crate) fn compiled(
        &self,
        name: &str,
    ) -> Result<(Complexity, Option<Complexity>), ScenarioError> {
        let Some(spec) = self.services.get(name) else {
            return Err(ScenarioError::invalid(
                "services",
                format!("service {name:?} is not declared"),
            ));
        };
        let at = format!("services.{name}");
        if spec.param.trim().is_empty() {
            return Err(ScenarioError::invalid(
                format!("{at}.param"),
                "the size parameter name is empty",
            ));
        }
        let allowed = [spec.param.clone()];
        let work = Complexity::parse(&spec.complexity, &allowed)
            .map_err(|e| ScenarioError::invalid(format!("{at}.complexity"), e.to_string()))?;
        let output = match &spec.output_bytes {
            Some(expr) => Some(Complexity::parse(expr, &allowed).map_err(|e| {
                ScenarioError::invalid(format!("{at}.output_bytes"), e.to_string())
            })?),
            None => None,
        };
        Ok((work, output))
    }

    /// The servers: names, slots, speed functions, load traces and links. Checks the scenario
    /// again first, as its fields are public and may have been edited since parsing.
    pub fn platform(&self) -> Result<Platform, ScenarioError> {
        self.validate()?;
        let mut classes = Vec::with_capacity(self.servers.len());
        for (i, c) in self.servers.iter().enumerate() {
            let mut speeds = BTreeMap::new();
            for svc in c.speeds.keys() {
                speeds.insert(svc.clone(), speed_function(self, i, c, svc)?);
            }
            let load = load_trace(&c.load)
                .map_err(|reason| ScenarioError::invalid(format!("servers[{i}].load"), reason))?;
            classes.push(ServerClass {
                name: c.name.clone(),
                count: c.count,
                slots: c.slots,
                speeds,
                load,
            });
        }
        let link_err =
            |e: gridwise_sched::PlatformError| ScenarioError::invalid("links", e.to_string());
        // Links by class pair, the overrides in order (each sets both directions).
        let k = classes.len();
        let index: HashMap<&str, usize> = classes
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.as_str(), i))
            .collect();
        let mut links = vec![(self.links.latency_s, self.links.bandwidth); k * k];
        for l in &self.links.classes {
            let (a, b) = (index[l.from.as_str()], index[l.to.as_str()]);
            links[a * k + b] = (l.latency_s, l.bandwidth);
            links[b * k + a] = (l.latency_s, l.bandwidth);
        }
        let class_of: Vec<usize> = classes
            .iter()
            .enumerate()
            .flat_map(|(i, c)| std::iter::repeat_n(i, c.count))
            .collect();
        let comm = CommModel::by_class(&class_of, |a, b| links[a * k + b]).map_err(link_err)?;
        Platform::new(classes, comm)
    }

    /// Whether its workload is online calls (simulated by [`crate::online`]) rather than a
    /// graph to map.
    pub fn is_online(&self) -> bool {
        matches!(self.workload, WorkloadSpec::Online { .. })
    }

    /// The task graph with every task's size (checking the scenario again first, as
    /// [`Scenario::platform`] does).
    pub fn workload(&self) -> Result<Workload, ScenarioError> {
        self.validate()?;
        workload::build(self)
    }
}

/// The class's trace (always available without one).
fn load_trace(spec: &Option<LoadSpec>) -> Result<LoadTrace, String> {
    spec.as_ref()
        .map_or(Ok(LoadTrace::always()), LoadSpec::trace)
}

/// The checked speed function of class `c` (index `i`) for `svc`.
fn speed_function(
    s: &Scenario,
    i: usize,
    c: &ServerClassSpec,
    svc: &str,
) -> Result<SpeedFunction, ScenarioError> {
    let at = format!("servers[{i}].speeds.{svc}");
    if !s.services.contains_key(svc) {
        return Err(ScenarioError::invalid(
            at,
            format!(
                "service {svc:?} is not declared in `services`; declare it or remove this speed function"
            ),
        ));
    }
    let points = c.speeds[svc].clone();
    let f = SpeedFunction::new(points).map_err(|e| ScenarioError::invalid(&at, format!("{e}")))?;
    if f.points().iter().all(|p| p.1 == 0.0) {
        return Err(ScenarioError::invalid(
            at,
            "every speed is 0, so no size fits; remove the service from this class instead",
        ));
    }
    Ok(f)
}
