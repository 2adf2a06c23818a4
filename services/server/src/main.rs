//! `gridwise-server`: the compute server daemon.

use clap::Parser;
use gridwise_proto::settings::init_logging;
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
    init_logging();
    Cli::parse().args.run_blocking()
}
