//! The graph file (format in the [module docs](super)): parsing and checking it on its own
//! ([`GraphFile::parse`]), then against the services' descriptions ([`GraphFile::resolve`]),
//! which yields the [`TaskGraph`] the mapping core works on.
//!
//! Checking happens in two steps because the second needs the agent: the file alone says which
//! task uses which, the descriptions say what each argument is, how big each output is, and how
//! much work each call does.

use crate::args::parse_inputs;
use anyhow::{Context, Result, anyhow, bail};
use gridwise_proto::{ArgDesc, ArgType, Dim, ServiceDesc};
use gridwise_sched::{GraphPolicy, Task, TaskGraph};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// One input argument of a task as the file gives it.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A word as `gridwise call` takes it: JSON numbers in their decimal form, strings as they
    /// are, JSON arrays as their JSON text.
    Word(String),
    /// Output number `output` (counting from 0, over the producer's OUT and INOUT arguments) of
    /// the task at index `task`, which comes earlier in the file.
    From {
        /// Index of the producing task in [`GraphFile::tasks`].
        task: usize,
        /// Which of its outputs.
        output: usize,
    },
}

/// One call of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSpec {
    /// Its name, unique in the file.
    pub name: String,
    /// The service it calls.
    pub service: String,
    /// Its IN and INOUT arguments, in order.
    pub args: Vec<Arg>,
}

impl TaskSpec {
    /// The earlier tasks this one uses outputs of, each once, in argument order.
    pub fn uses(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for a in &self.args {
            if let Arg::From { task, .. } = a
                && !out.contains(task)
            {
                out.push(*task);
            }
        }
        out
    }
}

/// A parsed graph file whose structure holds together: unique names, dependencies on earlier
/// tasks only, known output tasks, a known policy.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphFile {
    /// The policy the file asks for, if any.
    pub policy: Option<GraphPolicy>,
    /// Every call, in file order (a topological order, since tasks use earlier tasks only).
    pub tasks: Vec<TaskSpec>,
    /// Indices of the tasks whose outputs come back to the client, each once, as listed.
    pub outputs: Vec<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    policy: Option<String>,
    tasks: Vec<RawTask>,
    #[serde(default)]
    outputs: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    name: String,
    service: String,
    #[serde(default)]
    args: Vec<serde_json::Value>,
}

/// An argument before task names are resolved.
enum RawArg {
    Word(String),
    From { name: String, output: usize },
}

impl GraphFile {
    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<GraphFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the graph file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("graph file {}", path.display()))
    }

    /// Parses a graph file's text and checks its structure.
    pub fn parse(text: &str) -> Result<GraphFile> {
        let raw: RawFile = serde_json::from_str(text).map_err(|e| {
            anyhow!("not a graph file: {e}; see `gridwise graph predict --help` for the format")
        })?;
        if raw.tasks.is_empty() {
            bail!("the file has no tasks");
        }
        let policy = raw
            .policy
            .as_deref()
            .map(str::parse::<GraphPolicy>)
            .transpose()
            .map_err(|e| anyhow!("policy: {e}"))?;

        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, t) in raw.tasks.iter().enumerate() {
            if t.name.trim().is_empty() {
                bail!("task {} has an empty name", i + 1);
            }
            if let Some(first) = index.insert(t.name.as_str(), i) {
                bail!(
                    "two tasks are named `{}` (tasks {} and {}); names must be unique",
                    t.name,
                    first + 1,
                    i + 1
                );
            }
            if t.service.trim().is_empty() {
                bail!("task `{}` has an empty service name", t.name);
            }
        }

        let raw_args: Vec<Vec<RawArg>> = raw
            .tasks
            .iter()
            .map(|t| {
                t.args
                    .iter()
                    .enumerate()
                    .map(|(k, v)| {
                        raw_arg(v)
                            .map_err(|e| anyhow!("task `{}`, argument {}: {e}", t.name, k + 1))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;

        let names: Vec<&str> = raw.tasks.iter().map(|t| t.name.as_str()).collect();
        let mut tasks = Vec::with_capacity(raw.tasks.len());
        for (i, (t, args)) in raw.tasks.iter().zip(&raw_args).enumerate() {
            let mut resolved = Vec::with_capacity(args.len());
            for (k, a) in args.iter().enumerate() {
                resolved.push(match a {
                    RawArg::Word(w) => Arg::Word(w.clone()),
                    RawArg::From { name, output } => {
                        let here = || format!("task `{}`, argument {}", t.name, k + 1);
                        let Some(&p) = index.get(name.as_str()) else {
                            bail!(
                                "{}: uses `{name}`, which is not a task in the file (tasks: {})",
                                here(),
                                names.join(", ")
                            );
                        };
                        if p == i {
                            bail!("{}: task `{name}` cannot use its own output", here());
                        }
                        if p > i {
                            if let Some(cycle) = find_cycle(&raw_args, &index, p, i) {
                                let path: Vec<&str> = cycle.iter().map(|&c| names[c]).collect();
                                bail!(
                                    "the tasks depend on each other in a circle: {} (each uses \
                                     an output of the next), so none of them can ever start",
                                    path.join(" uses ")
                                );
                            }
                            bail!(
                                "{}: uses `{name}`, which comes later in the file; list `{name}` \
                                 before `{}` (a task may use outputs of earlier tasks only)",
                                here(),
                                t.name
                            );
                        }
                        Arg::From {
                            task: p,
                            output: *output,
                        }
                    }
                });
            }
            tasks.push(TaskSpec {
                name: t.name.clone(),
                service: t.service.clone(),
                args: resolved,
            });
        }

        let mut outputs = Vec::new();
        for o in &raw.outputs {
            let Some(&i) = index.get(o.as_str()) else {
                bail!(
                    "outputs: `{o}` is not a task in the file (tasks: {})",
                    names.join(", ")
                );
            };
            if !outputs.contains(&i) {
                outputs.push(i);
            }
        }
        Ok(GraphFile {
            policy,
            tasks,
            outputs,
        })
    }

    /// Checks every task against its service's description (`describe` is asked once per
    /// service, e.g. the agent's `describe`) and builds the task graph: work from each service's
    /// complexity at the task's sizes, edge bytes from the producer's output shapes.
    pub fn resolve(
        &self,
        mut describe: impl FnMut(&str) -> Result<ServiceDesc>,
    ) -> Result<ResolvedGraph> {
        let mut descs: HashMap<&str, ServiceDesc> = HashMap::new();
        let mut resolved: Vec<ResolvedTask> = Vec::with_capacity(self.tasks.len());
        let mut graph = TaskGraph::new();
        for (i, spec) in self.tasks.iter().enumerate() {
            if !descs.contains_key(spec.service.as_str()) {
                let d = describe(&spec.service).map_err(|e| {
                    anyhow!("task `{}`: service `{}`: {e:#}", spec.name, spec.service)
                })?;
                descs.insert(spec.service.as_str(), d);
            }
            let desc = &descs[spec.service.as_str()];
            let task = self
                .resolve_task(spec, desc, &resolved)
                .with_context(|| format!("task `{}`", spec.name))?;
            let idx = graph.add_task(Task::new(&spec.name, &spec.service, task.work));
            debug_assert_eq!(idx, i);
            for a in &spec.args {
                if let Arg::From { task: p, output } = *a {
                    graph.add_edge(p, i, resolved[p].output_bytes[output])?;
                }
            }
            resolved.push(task);
        }
        // Tasks use earlier tasks only, so this cannot fail; checked anyway so that a graph
        // that reaches a mapper is known to be acyclic.
        graph.adjacency()?;
        Ok(ResolvedGraph {
            tasks: resolved,
            graph,
        })
    }

    fn resolve_task(
        &self,
        spec: &TaskSpec,
        desc: &ServiceDesc,
        earlier: &[ResolvedTask],
    ) -> Result<ResolvedTask> {
        desc.validate().map_err(|e| anyhow!("{e}"))?;
        let inputs: Vec<&ArgDesc> = desc.inputs().collect();
        if inputs.len() != spec.args.len() {
            bail!(
                "`{}` takes {} input(s), {} given: {}",
                desc.name,
                inputs.len(),
                spec.args.len(),
                desc.signature()
            );
        }
        for (a, arg) in inputs.iter().zip(&spec.args) {
            if let Arg::From { task, .. } = arg
                && a.ty == ArgType::Int
            {
                bail!(
                    "argument `{}` is an int, which sizes the call and must be written in the \
                     file; it cannot come from `{}`'s output",
                    a.name,
                    self.tasks[*task].name
                );
            }
        }
        // A prediction does not need the arrays: `rand` ones are not materialised either (their
        // shapes are checked below instead).
        let values = parse_words(desc, &spec.args, false)?;

        let ints: Vec<(String, i64)> = desc
            .inputs()
            .zip(&values)
            .filter(|(a, _)| a.ty == ArgType::Int)
            .filter_map(|(a, v)| v.as_int().map(|x| (a.name.clone(), x)))
            .collect();
        let int = |name: &str| ints.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
        for (name, v) in &ints {
            let sizes_something = desc.size_params.contains(name)
                || desc
                    .args
                    .iter()
                    .any(|a| dims(&a.ty).contains(&&Dim::Arg(name.clone())));
            if sizes_something && *v < 0 {
                bail!("argument `{name}` is {v}; sizes must not be negative");
            }
        }
        let sizes: Vec<(String, i64)> = desc
            .size_params
            .iter()
            .map(|p| {
                int(p)
                    .map(|v| (p.clone(), v))
                    .ok_or_else(|| anyhow!("size parameter `{p}` has no integer value"))
            })
            .collect::<Result<_>>()?;

        for (a, arg) in inputs.iter().zip(&spec.args) {
            let Arg::From { task: p, output: k } = *arg else {
                continue;
            };
            let producer = &earlier[p];
            let pname = &self.tasks[p].name;
            let outs: Vec<&ArgDesc> = producer.desc.outputs().collect();
            let Some(out) = outs.get(k) else {
                let listed: Vec<String> = outs
                    .iter()
                    .enumerate()
                    .map(|(j, o)| format!("{j}: {}", o.name))
                    .collect();
                bail!(
                    "argument `{}` uses output {k} of `{pname}`, but `{}` has {} output(s){}",
                    a.name,
                    producer.desc.name,
                    outs.len(),
                    if listed.is_empty() {
                        String::new()
                    } else {
                        format!(", numbered from 0 ({})", listed.join(", "))
                    }
                );
            };
            check_compatible(a, &ints, out, &producer.ints).map_err(|e| {
                anyhow!(
                    "argument `{}` ({}) cannot take output {k} of `{pname}` (`{}`: {}): {e}",
                    a.name,
                    a.ty,
                    out.name,
                    out.ty
                )
            })?;
        }

        let work = match desc.compiled_complexity().map_err(|e| anyhow!("{e}"))? {
            Some(c) => c.eval(&sizes).map_err(|e| anyhow!("complexity: {e}"))?,
            None => 0.0,
        };
        Ok(ResolvedTask {
            desc: desc.clone(),
            output_bytes: desc.output_bytes_for_sizes(&ints),
            sizes,
            ints,
            work,
        })
    }
}

/// Parses a task's words for `desc`'s inputs as `gridwise call` would. Arguments taken from
/// other tasks — and `rand` arrays unless `materialise_rand` — become empty `bytes` placeholders
/// (parsed against a copy of the description), to be replaced or checked by the caller.
pub fn parse_words(
    desc: &ServiceDesc,
    args: &[Arg],
    materialise_rand: bool,
) -> Result<Vec<gridwise_proto::Value>> {
    let mut shadow = desc.clone();
    let mut words = Vec::with_capacity(args.len());
    for (a, arg) in shadow
        .args
        .iter_mut()
        .filter(|a| a.mode.is_input())
        .zip(args)
    {
        let is_array = matches!(a.ty, ArgType::Vector { .. } | ArgType::Matrix { .. });
        match arg {
            Arg::Word(w) if !(is_array && w == "rand" && !materialise_rand) => {
                words.push(w.clone())
            }
            _ => {
                a.ty = ArgType::Bytes;
                words.push(String::new());
            }
        }
    }
    parse_inputs(&shadow, &words)
}

/// One JSON argument as a word or a reference to another task's output.
fn raw_arg(v: &serde_json::Value) -> std::result::Result<RawArg, String> {
    use serde_json::Value as J;
    const FROM: &str = r#"{"from": TASK, "output": K}"#;
    match v {
        J::Number(n) => Ok(RawArg::Word(n.to_string())),
        J::String(s) => Ok(RawArg::Word(s.clone())),
        J::Array(_) => Ok(RawArg::Word(v.to_string())),
        J::Object(o) => {
            let name = o.get("from").and_then(J::as_str);
            let output = o.get("output").and_then(J::as_u64);
            match (name, output, o.len()) {
                (Some(name), Some(output), 2) => Ok(RawArg::From {
                    name: name.to_string(),
                    output: usize::try_from(output).map_err(|_| "output index too large")?,
                }),
                _ => Err(format!(
                    "{v} is not a reference to another task's output; write {FROM} with K a \
                     non-negative integer"
                )),
            }
        }
        J::Bool(_) | J::Null => Err(format!(
            "{v} is not an argument; write a number, a string (as on the `gridwise call` \
             command line), a JSON array, or {FROM}"
        )),
    }
}

/// A path `from` → … → `to` along "uses" edges, if `from` reaches `to`; returned as the cycle
/// `to, from, …, to` (the forward reference `to` uses `from` closes it).
fn find_cycle(
    raw_args: &[Vec<RawArg>],
    index: &HashMap<&str, usize>,
    from: usize,
    to: usize,
) -> Option<Vec<usize>> {
    let uses = |t: usize| -> Vec<usize> {
        raw_args[t]
            .iter()
            .filter_map(|a| match a {
                RawArg::From { name, .. } => index.get(name.as_str()).copied(),
                RawArg::Word(_) => None,
            })
            .collect()
    };
    let mut parent: Vec<Option<usize>> = vec![None; raw_args.len()];
    let mut seen = vec![false; raw_args.len()];
    let mut stack = vec![from];
    seen[from] = true;
    while let Some(t) = stack.pop() {
        if t == to {
            let mut path = vec![to];
            let mut cur = t;
            while let Some(p) = parent[cur] {
                path.push(p);
                cur = p;
            }
            // path is to, …, from reversed: to ← … ← from; put it in "uses" order.
            let mut cycle = vec![to];
            cycle.extend(path.iter().rev().copied().filter(|&x| x != to));
            cycle.push(to);
            return Some(cycle);
        }
        for u in uses(t) {
            if !seen[u] {
                seen[u] = true;
                parent[u] = Some(t);
                stack.push(u);
            }
        }
    }
    None
}

fn dims(ty: &ArgType) -> Vec<&Dim> {
    match ty {
        ArgType::Vector { len, .. } => vec![len],
        ArgType::Matrix { rows, cols, .. } => vec![rows, cols],
        _ => Vec::new(),
    }
}

fn resolve_dim(d: &Dim, ints: &[(String, i64)]) -> Option<i64> {
    match d {
        Dim::Fixed(n) => i64::try_from(*n).ok(),
        Dim::Arg(a) => ints.iter().find(|(k, _)| k == a).map(|(_, v)| *v),
    }
}

/// Whether the producer's output `out` (dimensions from `out_ints`) fits the consumer's input
/// `input` (dimensions from `in_ints`): same kind and element type, same shape.
fn check_compatible(
    input: &ArgDesc,
    in_ints: &[(String, i64)],
    out: &ArgDesc,
    out_ints: &[(String, i64)],
) -> std::result::Result<(), String> {
    let same_kind = match (&input.ty, &out.ty) {
        (ArgType::Vector { elem: a, .. }, ArgType::Vector { elem: b, .. })
        | (ArgType::Matrix { elem: a, .. }, ArgType::Matrix { elem: b, .. }) => a == b,
        (a, b) => a == b,
    };
    if !same_kind {
        return Err("the types differ".into());
    }
    let want: Vec<Option<i64>> = dims(&input.ty)
        .into_iter()
        .map(|d| resolve_dim(d, in_ints))
        .collect();
    let have: Vec<Option<i64>> = dims(&out.ty)
        .into_iter()
        .map(|d| resolve_dim(d, out_ints))
        .collect();
    if want != have {
        let show = |v: &[Option<i64>]| {
            v.iter()
                .map(|x| x.map_or("?".to_string(), |x| x.to_string()))
                .collect::<Vec<_>>()
                .join("x")
        };
        return Err(format!(
            "it needs {}, the output is {}",
            show(&want),
            show(&have)
        ));
    }
    Ok(())
}

/// A task checked against its service description.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedTask {
    /// The service's description.
    pub desc: ServiceDesc,
    /// Size-parameter values, in the description's order (what the agent ranks servers by).
    pub sizes: Vec<(String, i64)>,
    /// Every int input by name: what output shapes resolve from.
    pub ints: Vec<(String, i64)>,
    /// Operations: the service's complexity at `sizes` (0 when it declares none).
    pub work: f64,
    /// Payload bytes of each output (OUT and INOUT arguments, in order).
    pub output_bytes: Vec<u64>,
}

/// A graph file checked against the services: one [`ResolvedTask`] per task, and the task graph
/// (task indices are file order) with each dependency's bytes on its edge.
#[derive(Clone, Debug)]
pub struct ResolvedGraph {
    /// Per task, in file order.
    pub tasks: Vec<ResolvedTask>,
    /// The graph the mapping core maps.
    pub graph: TaskGraph,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dgemm() -> ServiceDesc {
        gridwise_kernels::builtin("dgemm").unwrap().desc().clone()
    }

    /// `scale(in n: int, in s: double, in x: vector<f64>[n], out y: vector<f64>[n],
    /// out norm: double)`, complexity `n`.
    fn scale() -> ServiceDesc {
        serde_json::from_str(
            r#"{"name":"scale","args":[
                {"name":"n","mode":"in","type":"int"},
                {"name":"s","mode":"in","type":"double"},
                {"name":"x","mode":"in","type":"vector<f64>[n]"},
                {"name":"y","mode":"out","type":"vector<f64>[n]"},
                {"name":"norm","mode":"out","type":"double"}],
              "size_params":["n"],"complexity":"n"}"#,
        )
        .unwrap()
    }

    fn describe(name: &str) -> Result<ServiceDesc> {
        match name {
            "dgemm" => Ok(dgemm()),
            "scale" => Ok(scale()),
            _ => Err(anyhow!(
                "GRPC_FUNCTION_NOT_FOUND: no server offers `{name}`; `gridwise status` lists services"
            )),
        }
    }

    fn resolve(text: &str) -> Result<ResolvedGraph> {
        GraphFile::parse(text)?.resolve(describe)
    }

    fn err(text: &str) -> String {
        format!("{:#}", resolve(text).unwrap_err())
    }

    /// A 500³ dgemm chain with a fork–join, as in examples/graphs/chain.json.
    const GOOD: &str = r#"{
        "policy": "min-min",
        "tasks": [
            {"name": "a", "service": "dgemm", "args": [500, 500, 500, "rand", "rand"]},
            {"name": "b", "service": "dgemm", "args": [500, 500, 500, {"from": "a", "output": 0}, "rand"]},
            {"name": "c", "service": "dgemm", "args": [500, 500, 500, "rand", {"from": "a", "output": 0}]},
            {"name": "d", "service": "dgemm", "args": [500, 500, 500, {"from": "b", "output": 0}, {"from": "c", "output": 0}]},
            {"name": "e", "service": "scale", "args": [3, 2.5, [1, 2, 3]]},
            {"name": "f", "service": "scale", "args": [3, "-1", {"from": "e", "output": 0}]}
        ],
        "outputs": ["d", "f", "d"]
    }"#;

    #[test]
    fn good_file_parses() {
        let f = GraphFile::parse(GOOD).unwrap();
        assert_eq!(f.policy, Some(GraphPolicy::MinMin));
        assert_eq!(f.tasks.len(), 6);
        assert_eq!(f.outputs, [3, 5]);
        assert_eq!(
            f.tasks[1].args,
            [
                Arg::Word("500".into()),
                Arg::Word("500".into()),
                Arg::Word("500".into()),
                Arg::From { task: 0, output: 0 },
                Arg::Word("rand".into()),
            ]
        );
        assert_eq!(f.tasks[4].args[1], Arg::Word("2.5".into()));
        assert_eq!(f.tasks[4].args[2], Arg::Word("[1,2,3]".into()));
        assert_eq!(f.tasks[3].uses(), [1, 2]);
        // No policy and no outputs are fine too.
        let f = GraphFile::parse(r#"{"tasks":[{"name":"x","service":"add","args":[1]}]}"#).unwrap();
        assert_eq!((f.policy, f.outputs.len()), (None, 0));
    }

    #[test]
    fn graph_has_work_and_edge_bytes_from_the_descriptions() {
        let r = resolve(GOOD).unwrap();
        let g = &r.graph;
        assert_eq!(g.len(), 6);
        let names: Vec<&str> = g.tasks().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d", "e", "f"]);
        assert_eq!(g.task(0).work, 2.0 * 500f64.powi(3));
        assert_eq!(g.task(0).service, "dgemm");
        assert_eq!(g.task(4).work, 3.0);
        let m500 = 500 * 500 * 8;
        let mut edges: Vec<_> = g.edges().collect();
        edges.sort();
        assert_eq!(
            edges,
            [
                (0, 1, m500),
                (0, 2, m500),
                (1, 3, m500),
                (2, 3, m500),
                (4, 5, 24)
            ]
        );
        assert_eq!(r.tasks[0].output_bytes, [m500]);
        assert_eq!(r.tasks[4].output_bytes, [24, 8]);
        assert_eq!(
            r.tasks[0].sizes,
            [("m".into(), 500), ("n".into(), 500), ("k".into(), 500)]
        );
        assert_eq!(g.topo_order().unwrap(), [0, 1, 2, 3, 4, 5]);
        assert_eq!(GraphPolicy::default_for(g), GraphPolicy::Heft);
    }

    #[test]
    fn example_file_is_a_fork_join_chain() {
        let f = GraphFile::parse(include_str!("../../../../examples/graphs/chain.json")).unwrap();
        let r = f.resolve(describe).unwrap();
        assert_eq!(r.graph.len(), 6);
        assert_eq!(r.graph.edge_count(), 6);
        assert_eq!(f.outputs, [5]);
    }

    #[test]
    fn two_outputs_of_one_producer_are_one_edge_with_both_sizes() {
        let r = resolve(
            r#"{"tasks":[
                {"name":"a","service":"dgemm","args":[4,4,4,"rand","rand"]},
                {"name":"b","service":"dgemm","args":[4,4,4,{"from":"a","output":0},{"from":"a","output":0}]}]}"#,
        )
        .unwrap();
        assert_eq!(r.graph.edges().collect::<Vec<_>>(), [(0, 1, 2 * 4 * 4 * 8)]);
    }

    #[test]
    fn malformed_files_are_explained() {
        let cases: &[(&str, &str)] = &[
            ("{", "not a graph file"),
            (r#"{"tasks": []}"#, "no tasks"),
            (r#"{"task": []}"#, "unknown field `task`"),
            (
                r#"{"tasks":[{"name":"a","service":"add","args":[1]}],"policy":"fastest"}"#,
                "policy: unknown graph policy \"fastest\"",
            ),
            (
                r#"{"tasks":[{"name":"a","service":"add","args":[1]},{"name":"a","service":"add","args":[2]}]}"#,
                "two tasks are named `a` (tasks 1 and 2)",
            ),
            (
                r#"{"tasks":[{"name":"","service":"add","args":[1]}]}"#,
                "task 1 has an empty name",
            ),
            (
                r#"{"tasks":[{"name":"a","service":"add","args":[true]}]}"#,
                "task `a`, argument 1: true is not an argument",
            ),
            (
                r#"{"tasks":[{"name":"a","service":"add","args":[{"from":"b"}]}]}"#,
                "task `a`, argument 1: {\"from\":\"b\"} is not a reference",
            ),
            (
                r#"{"tasks":[{"name":"a","service":"add","args":[{"from":"b","output":-1}]}]}"#,
                "K a non-negative integer",
            ),
            (
                r#"{"tasks":[{"name":"a","service":"add","args":[{"from":"zz","output":0}]}]}"#,
                "task `a`, argument 1: uses `zz`, which is not a task in the file (tasks: a)",
            ),
            (
                r#"{"tasks":[{"name":"a","service":"add","args":[{"from":"a","output":0}]}]}"#,
                "task `a` cannot use its own output",
            ),
            (
                r#"{"tasks":[{"name":"a","service":"add","args":[{"from":"b","output":0}]},
                             {"name":"b","service":"add","args":[1]}]}"#,
                "uses `b`, which comes later in the file; list `b` before `a`",
            ),
            (
                r#"{"tasks":[{"name":"a","service":"add","args":[1]}],"outputs":["a","q"]}"#,
                "outputs: `q` is not a task in the file",
            ),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", GraphFile::parse(text).unwrap_err());
            assert!(e.contains(want), "{text}\n  gave: {e}\n  want: {want}");
        }
    }

    #[test]
    fn cycles_are_named() {
        let e = format!(
            "{:#}",
            GraphFile::parse(
                r#"{"tasks":[
                    {"name":"a","service":"add","args":[{"from":"c","output":0}]},
                    {"name":"b","service":"add","args":[{"from":"a","output":0}]},
                    {"name":"c","service":"add","args":[{"from":"b","output":0}]}]}"#
            )
            .unwrap_err()
        );
        assert!(e.contains("in a circle: a uses c uses b uses a"), "{e}");
    }

    #[test]
    fn files_that_do_not_fit_the_services_are_explained() {
        let task = |args: &str| {
            format!(
                r#"{{"tasks":[
                    {{"name":"a","service":"dgemm","args":[4, 4, 4, "rand", "rand"]}},
                    {{"name":"e","service":"scale","args":[3, 1, "rand"]}},
                    {{"name":"b","service":"dgemm","args":[{args}]}}]}}"#
            )
        };
        let cases: &[(String, &str)] = &[
            (
                r#"{"tasks":[{"name":"a","service":"zgemm","args":[1]}]}"#.into(),
                "task `a`: service `zgemm`: GRPC_FUNCTION_NOT_FOUND: no server offers `zgemm`",
            ),
            (
                task("4, 4, 4, \"rand\""),
                "`dgemm` takes 5 input(s), 4 given",
            ),
            (
                task(r#"4.5, 4, 4, "rand", "rand""#),
                "task `b`: argument `m` (int): `4.5` is not an integer",
            ),
            (
                task(r#""big", 4, 4, "rand", "rand""#),
                "task `b`: argument `m` (int): `big` is not an integer",
            ),
            (
                task(r#"-4, 4, 4, "rand", "rand""#),
                "argument `m` is -4; sizes must not be negative",
            ),
            (
                task(r#"4, 4, 4, {"from":"a","output":1}, "rand""#),
                "argument `A` uses output 1 of `a`, but `dgemm` has 1 output(s), numbered from 0 (0: C)",
            ),
            (
                task(r#"{"from":"a","output":0}, 4, 4, "rand", "rand""#),
                "argument `m` is an int, which sizes the call",
            ),
            (
                task(r#"4, 4, 4, {"from":"e","output":0}, "rand""#),
                "argument `A` (matrix<f64>[m,k]) cannot take output 0 of `e` (`y`: vector<f64>[n]): the types differ",
            ),
            (
                task(r#"4, 4, 2, {"from":"a","output":0}, "rand""#),
                "cannot take output 0 of `a` (`C`: matrix<f64>[m,n]): it needs 4x2, the output is 4x4",
            ),
            (
                task(r#"1, 2, 2, [[1, 2, 3]], "rand""#),
                "task `b`: argument `A` (matrix<f64>[m,k]): 3 value(s) given, the shape needs 1x2",
            ),
        ];
        for (text, want) in cases {
            let e = err(text);
            assert!(e.contains(want), "{text}\n  gave: {e}\n  want: {want}");
        }
    }
}
