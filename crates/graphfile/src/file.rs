//! The graph file (format in the [crate docs](crate)): parsing it and checking its structure
//! ([`GraphFile::parse`]) — unique names, dependencies on earlier tasks only, no cycles, known
//! outputs and policy. What each argument must be is checked against the services'
//! descriptions when the file's calls are recorded in a client graph ([`crate::record`]), by
//! the one graph check every client uses ([`gridwise_proto::check_graph`]).

use crate::words::{Rand, parse_inputs_with};
use anyhow::{Context, Result, anyhow, bail};
use gridwise_proto::{ArgType, ServiceDesc};
use gridwise_sched::GraphPolicy;
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
        output: usize,
    },
}

/// One call of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSpec {
    /// Its name, unique in the file.
    pub name: String,
    /// Its description decides how the words in `args` parse.
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
}

/// Parses a task's words for `desc`'s inputs as `gridwise call` would, `rand` standing for
/// `rand`. Arguments taken from other tasks become placeholders (empty `bytes`, parsed against
/// a copy of the description), for the caller to replace.
pub fn parse_words(
    desc: &ServiceDesc,
    args: &[Arg],
    rand: Rand,
) -> Result<Vec<gridwise_proto::Value>> {
    let mut shadow = desc.clone();
    let mut words = Vec::with_capacity(args.len());
    for (a, arg) in shadow
        .args
        .iter_mut()
        .filter(|a| a.mode.is_input())
        .zip(args)
    {
        match arg {
            Arg::Word(w) => words.push(w.clone()),
            // An int from another task is refused by the graph check; until then it must
            // still parse, and not as a size that fails the arrays it shapes.
            Arg::From { .. } if a.ty == ArgType::Int => words.push("0".into()),
            Arg::From { .. } => {
                a.ty = ArgType::Bytes;
                words.push(String::new());
            }
        }
    }
    parse_inputs_with(&shadow, &words, rand)
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

    /// The file's graph as the agent would get it: parsed, its words read by the services'
    /// descriptions, and checked by the one graph check clients use.
    fn check(text: &str) -> Result<gridwise_proto::CheckedGraph> {
        use crate::Input;
        use gridwise_proto::{CallInput, RecordedCall, check_graph};
        let file = GraphFile::parse(text)?;
        let inputs = crate::parse_tasks(&file, describe, Rand::SizeOnly)?;
        let descs: Vec<ServiceDesc> = file
            .tasks
            .iter()
            .map(|t| describe(&t.service))
            .collect::<Result<_>>()?;
        let calls: Vec<RecordedCall> = file
            .tasks
            .iter()
            .zip(&descs)
            .zip(&inputs)
            .map(|((t, desc), ins)| RecordedCall {
                name: &t.name,
                desc,
                inputs: ins
                    .iter()
                    .map(|i| match i {
                        Input::Value(v) => CallInput::Value(v),
                        Input::From { task, output } => CallInput::Output {
                            call: *task,
                            output: *output,
                        },
                    })
                    .collect(),
            })
            .collect();
        check_graph(&calls, None, false).map_err(|e| anyhow!(e))
    }

    fn err(text: &str) -> String {
        format!("{:#}", check(text).unwrap_err())
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
    fn graph_has_sizes_and_edge_bytes_from_the_descriptions() {
        let g = check(GOOD).unwrap();
        let calls = &g.request.calls;
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d", "e", "f"]);
        assert_eq!(calls[0].profile.service, "dgemm");
        assert_eq!(
            calls[0].profile.sizes,
            [("m".into(), 500), ("n".into(), 500), ("k".into(), 500)]
        );
        let m500 = 500 * 500 * 8;
        // `rand` is sized, not filled, yet counts as bytes the client sends.
        assert_eq!(calls[0].profile.in_bytes, 3 * 8 + 2 * m500);
        assert_eq!(calls[1].profile.in_bytes, 3 * 8 + m500);
        assert_eq!(calls[4].profile.sizes, [("n".into(), 3)]);
        let mut edges: Vec<_> = g
            .request
            .edges
            .iter()
            .map(|e| (e.from, e.to, e.bytes))
            .collect();
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
        assert_eq!(g.producers[3], [1, 2]);
    }

    #[test]
    fn example_file_is_a_fork_join_chain() {
        let text = include_str!("../../../examples/graphs/chain.json");
        let g = check(text).unwrap();
        assert_eq!(g.request.calls.len(), 6);
        assert_eq!(g.request.edges.len(), 6);
        assert_eq!(GraphFile::parse(text).unwrap().outputs, [5]);
    }

    #[test]
    fn two_outputs_of_one_producer_are_two_edges_with_their_sizes() {
        let g = check(
            r#"{"tasks":[
                {"name":"a","service":"dgemm","args":[4,4,4,"rand","rand"]},
                {"name":"b","service":"dgemm","args":[4,4,4,{"from":"a","output":0},{"from":"a","output":0}]}]}"#,
        )
        .unwrap();
        let bytes: Vec<u64> = g.request.edges.iter().map(|e| e.bytes).collect();
        assert_eq!(bytes, [4 * 4 * 8, 4 * 4 * 8]);
        assert_eq!(g.producers[1], [0]);
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
                "`A` is shaped by `m`, which must come first and be a non-negative int",
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
                "call `b`: argument `A` must be matrix<f64>[4,4], but output 0 (`y`) of `e` is vector<f64>[3]",
            ),
            (
                task(r#"4, 4, 2, {"from":"a","output":0}, "rand""#),
                "argument `A` must be matrix<f64>[4,2], but output 0 (`C`) of `a` is matrix<f64>[4,4]",
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
