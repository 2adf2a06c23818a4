//! `gridwise-agent`: the agent daemon.

use clap::Parser;
use gridwise_agent::cli::AgentArgs;
use gridwise_runtime::settings::init_logging;

#[derive(Parser)]
#[command(
    name = "gridwise-agent",
    version,
    about = "The gridwise agent: knows every server, ranks every call"
)]
struct Cli {
    #[command(flatten)]
    args: AgentArgs,
}

fn main() -> anyhow::Result<()> {
    init_logging();
    Cli::parse().args.run_blocking()
}
