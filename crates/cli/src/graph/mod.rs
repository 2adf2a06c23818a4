//! `gridwise graph`: groups of calls with data dependencies, described in a JSON file.
//!
//! `gridwise graph predict FILE` asks the agent to map the file's calls without reserving
//! anything and prints its plan: predicted makespan, bounds and each server's timeline
//! ([`predict()`]); `--gantt out.svg|png` draws it. `gridwise graph run FILE` records the same
//! calls, runs them through the client's graph API and sets the plan beside what happened
//! ([`run`]). The agent owns the mapping; the file format is `gridwise_graphfile`'s.

pub mod predict;
pub mod run;

pub use predict::{Prediction, predict};
