//! The benchmarks behind `gridwise bench`. Each returns (or emits, line by line) the JSON the
//! issues specify, so a figure in a note can be traced to the command that printed it.
//!
//! `rpc` and `faults` start a real local grid of daemons; `mapping` and `schedule` drive the
//! scheduling core directly or through a grid; `models` builds functional performance models
//! against the built-in kernels; `predict` times calls on loaded servers against every
//! predictor's estimate, then schedules on them; `kernels` sets the kinds of kernels (built-in,
//! library, command, Python) side by side; `divide` cuts divisible jobs over 16 emulated servers
//! and compares the cut with an offline oracle; `transfer` moves large arrays in each direction
//! against a raw loopback copy, with both ends' peak memory; `testbed` measures what depends on
//! links over a test bed of network namespaces with shaped links.

pub mod agents;
pub mod divide;
pub mod faults;
mod host;
pub mod kernels;
pub mod mapping;
pub mod models;
pub mod predict;
pub mod rpc;
mod rpc_floors;
pub mod schedule;
pub mod testbed;
pub mod transfer;
