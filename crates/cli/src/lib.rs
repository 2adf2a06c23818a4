//! The `gridwise` command-line tool's pieces: argument parsing by service description,
//! status and ETC explanations, one-off calls, the demo, benchmarks, and local grids of
//! daemons started on loopback.

pub mod args;
pub mod bench;
pub mod bench_faults;
pub mod bench_mapping;
pub mod bench_models;
pub mod bench_schedule;
pub mod call;
pub mod demo;
pub mod graph;
pub mod local;
pub mod model;
pub mod plot;
pub mod sim;
pub mod status;
