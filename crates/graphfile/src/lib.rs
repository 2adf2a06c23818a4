//! The text users give gridwise: the words `gridwise call` takes for each argument
//! ([`words`]), and the JSON graph file of `gridwise graph` ([`file`]), recorded into a client
//! task graph ([`record`]).
//!
//! # The graph file
//!
//! ```json
//! {
//!   "policy": "heft",
//!   "tasks": [
//!     {"name": "a", "service": "dgemm", "args": [500, 500, 500, "rand", "rand"]},
//!     {"name": "b", "service": "dgemm", "args": [500, 500, 500, {"from": "a", "output": 0}, "rand"]}
//!   ],
//!   "outputs": ["b"]
//! }
//! ```
//!
//! - `tasks` (required, at least one): the calls. Each has a `name` unique in the file, the
//!   `service` it calls, and `args`: the service's IN and INOUT arguments in order, written as
//!   `gridwise call` takes them on its command line — a JSON number is the word it spells
//!   (`500`, `2.5`), a JSON string is the word itself (`"rand"` for pseudo-random values of the
//!   declared shape, `"@file.json"`, `"[[1,2],[3,4]]"`, a string or bytes argument), and a JSON
//!   array is its JSON text (a literal vector or matrix).
//! - `{"from": TASK, "output": K}` as an argument is the K-th output (counting from 0, over the
//!   producer's OUT and INOUT arguments in order) of the task named TASK. That is a data
//!   dependency: the task runs after TASK, and the data moves from TASK's server to this task's
//!   server (never through the client). TASK must come earlier in the file, so the file order is
//!   always an order the calls can run in and a cycle cannot be written (one is reported as
//!   such). The output must have the argument's kind, element type and shape; int arguments size
//!   the call and the agent ranks servers by them, so they are always written in the file.
//! - `policy` (optional): how to map the graph, one of `heft`, `min-min`, `mct`, `sufferage`,
//!   `lp` (independent calls only), `round-robin`, `constant-speed`. The command line's
//!   `--policy` overrides it; without either, `lp` for a bag of independent calls and `heft`
//!   for anything with a dependency.
//! - `outputs` (optional): names of the tasks whose outputs come back to the client. The other
//!   tasks' outputs stay on the servers that made them, for the tasks that use them.
//!
//! Unknown fields are errors (a misspelt `output` must not be silently ignored), and so are
//! unknown task names, dependencies on later tasks, output indices out of range, size arguments
//! that are not integers, and services no server offers.

pub mod file;
pub mod words;

pub use file::{Arg, GraphFile, TaskSpec};
pub use words::{Rand, parse_inputs, parse_inputs_with, parse_sizes, render};

use anyhow::{Context, Result, anyhow};
use gridwise_client::{BlockingGraph, CallRef, Client, GraphArg};
use gridwise_proto::{ServiceDesc, Value};
use gridwise_sched::GraphPolicy;

/// One input of a file's task, parsed: a value, or the output of an earlier task.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// Parsed from the task's word.
    Value(Value),
    /// Output `output` of task `task`.
    From {
        /// Index into [`GraphFile::tasks`], always of an earlier task.
        task: usize,
        output: usize,
    },
}

/// Each task's inputs parsed by its service's description (`desc_of` gives it by service
/// name), `rand` standing for `rand`.
pub fn parse_tasks(
    file: &GraphFile,
    mut desc_of: impl FnMut(&str) -> Result<ServiceDesc>,
    rand: Rand,
) -> Result<Vec<Vec<Input>>> {
    file.tasks
        .iter()
        .map(|spec| {
            let desc = desc_of(&spec.service)
                .map_err(|e| anyhow!("task `{}`: service `{}`: {e:#}", spec.name, spec.service))?;
            let values = file::parse_words(&desc, &spec.args, rand)
                .with_context(|| format!("task `{}`", spec.name))?;
            Ok(spec
                .args
                .iter()
                .zip(values)
                .map(|(a, v)| match a {
                    Arg::From { task, output } => Input::From {
                        task: *task,
                        output: *output,
                    },
                    Arg::Word(_) => Input::Value(v),
                })
                .collect())
        })
        .collect()
}

/// Records `file`'s calls in a client graph — checked by the client against the services'
/// descriptions when it is planned or run — with the file's outputs to fetch and its policy
/// (`policy` overrides it). Returns the graph and each task's call. A prediction and a run of
/// the same file record the same graph, up to `rand`'s contents, so the agent maps them alike.
pub fn record<'c>(
    client: &'c Client,
    file: &GraphFile,
    policy: Option<GraphPolicy>,
    rand: Rand,
) -> Result<(BlockingGraph<'c>, Vec<CallRef>)> {
    let tasks = parse_tasks(file, |svc| Ok(client.describe(svc)?), rand)?;
    let mut g = client.graph();
    let mut refs: Vec<CallRef> = Vec::with_capacity(file.tasks.len());
    for (spec, inputs) in file.tasks.iter().zip(tasks) {
        let args: Vec<GraphArg> = inputs
            .into_iter()
            .map(|i| match i {
                Input::Value(v) => GraphArg::Value(v),
                Input::From { task, output } => refs[task].output(output),
            })
            .collect();
        refs.push(g.call_named(&spec.name, &spec.service, args));
    }
    for &o in &file.outputs {
        g.fetch(refs[o]);
    }
    if let Some(p) = policy.or(file.policy) {
        g.policy(p.name());
    }
    Ok((g, refs))
}
