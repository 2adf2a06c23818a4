//! `gridwise graph`: groups of calls with data dependencies, described in a JSON file.
//!
//! `gridwise graph predict FILE` asks the live agent for every task's estimated compute time on
//! every server, maps the graph with the mapping core of `gridwise-sched` (HEFT, min-min, LP, …),
//! replays the mapping deterministically and prints the predicted makespan, its lower bounds and
//! each server's timeline ([`predict()`]); `--gantt out.svg|png` draws the timeline ([`gantt`]).
//! `gridwise graph run FILE` executes the same files through the client's graph API and sets
//! the prediction beside the run ([`run`]).
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
pub mod gantt;
pub mod predict;
pub mod run;

pub use file::{Arg, GraphFile, ResolvedGraph, ResolvedTask, TaskSpec};
pub use predict::{Prediction, predict};
