//! The `gridwise` command line: parsing arguments and printing what the grid says. Each
//! subcommand's work lives in a library crate (`gridwise-graphfile` for the words and graph
//! files users write, `gridwise-charts` for plots and Gantt charts, `gridwise-localgrid` for
//! daemons on loopback, `gridwise-bench` for benchmarks); these modules only wire them to
//! the terminal.

pub mod call;
pub mod certs;
pub mod demo;
pub mod divide;
pub mod graph;
pub mod model;
pub mod sim;
pub mod status;
pub mod testbed;
