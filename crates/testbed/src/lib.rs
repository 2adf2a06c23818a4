//! Many hosts on one machine, for tests and benchmarks of what crosses a network: each host a
//! Linux network namespace with its own address, hosts grouped in sites behind router
//! namespaces joined by a backbone, every link shaped with tc's `tbf` (and delayed with
//! `netem` where the kernel has it), and faults on the network: partitions (a host, a site,
//! the link between two sites) and rate changes, on demand or on a schedule.
//!
//! The topology and the commands are data ([`topology`], [`plan`]); [`bed::Testbed`] runs
//! them and removes everything on every way out.

pub mod bed;
pub mod plan;
pub mod schedule;
pub mod topology;

pub use bed::Testbed;
pub use topology::{Cut, Fault, FaultKind, LinkRef, Rate, Role, Topology};
