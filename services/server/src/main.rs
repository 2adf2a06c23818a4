//! `gridwise-server`: the compute server daemon.

use clap::Parser;
use gridwise_runtime::settings::init_logging;
use gridwise_server::cli::ServerArgs;

#[derive(Parser)]
#[command(
    name = "gridwise-server",
    version,
    about = "A gridwise compute server: runs kernels for the grid"
)]
struct Cli {
    #[command(flatten)]
    args: ServerArgs,
}

fn main() -> anyhow::Result<()> {
    // Started as a library worker by a server: run the routine and never return.
    gridwise_routines::run_if_worker();
    init_logging();
    Cli::parse().args.run_blocking()
}
