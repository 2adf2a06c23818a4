//! Command-line flags of `gridwise-server` (also `gridwise server`).

use crate::{ServerConfig, run};
use clap::Args;
use std::path::PathBuf;

/// Flags; each overrides the config file and the environment.
#[derive(Args, Debug, Clone, Default)]
pub struct ServerArgs {
    /// TOML config file (keys as in the README's config reference).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Unique server name (default: `server-<port>`).
    #[arg(long)]
    pub name: Option<String>,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long)]
    pub listen: Option<String>,
    /// Address clients should use, if not the bound one.
    #[arg(long)]
    pub advertise: Option<String>,
    /// The agent's address, host:port.
    #[arg(long)]
    pub agent: Option<String>,
    /// The secret clients must present (needs --server-token).
    #[arg(long)]
    pub client_token: Option<String>,
    /// The secret this server presents to the agent and its peers.
    #[arg(long)]
    pub server_token: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9101.
    #[arg(long)]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub tls: gridwise_runtime::settings::TlsFlags,
    /// Calls run at once; the rest queue (default: number of cores).
    #[arg(long)]
    pub slots: Option<u32>,
    /// Skip the start-up calibration runs.
    #[arg(long)]
    pub no_calibrate: bool,
    /// Build every configured model now (in the foreground, into `model_dir`) and exit.
    #[arg(long)]
    pub build_models_and_exit: bool,
}

impl ServerArgs {
    /// The merged settings: defaults < file < GRIDWISE_SERVER_* < flags.
    pub fn load(&self) -> anyhow::Result<ServerConfig> {
        let mut flags = vec![
            ("name", self.name.clone()),
            ("listen", self.listen.clone()),
            ("advertise", self.advertise.clone()),
            ("agent", self.agent.clone()),
            ("client_token", self.client_token.clone()),
            ("server_token", self.server_token.clone()),
            ("metrics", self.metrics.clone()),
            ("slots", self.slots.map(|v| v.to_string())),
            ("calibrate", self.no_calibrate.then(|| "false".to_string())),
        ];
        flags.extend(self.tls.overrides());
        let o = gridwise_runtime::settings::flag_overrides(&flags);
        Ok(gridwise_runtime::settings::load(
            self.config.as_deref(),
            &crate::config::PATHS,
            "GRIDWISE_SERVER",
            &o,
        )?)
    }

    /// Loads the settings and runs the server: network I/O on one thread (no hops per RPC),
    /// kernels on one thread per slot (`slots.rs`; instant ones on the I/O thread).
    pub fn run_blocking(&self) -> anyhow::Result<()> {
        let cfg = self.load()?;
        if self.build_models_and_exit {
            return crate::build_models_and_exit(cfg);
        }
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(run(cfg))
    }
}
