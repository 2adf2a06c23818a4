//! Command-line flags of `gridwise-agent` (also `gridwise agent`).

use crate::{AgentConfig, run};
use clap::Args;
use std::path::PathBuf;

/// Flags; each overrides the config file and the environment.
#[derive(Args, Debug, Clone, Default)]
pub struct AgentArgs {
    /// TOML config file (keys as in the README's config reference).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Address to listen on, e.g. 0.0.0.0:7000 (port 0 picks a free port).
    #[arg(long)]
    pub listen: Option<String>,
    /// The secret clients must present (needs --server-token too).
    #[arg(long)]
    pub client_token: Option<String>,
    /// The secret servers must present to register (different from the client token).
    #[arg(long)]
    pub server_token: Option<String>,
    /// Serve the live web dashboard at http://ADDR/, e.g. 127.0.0.1:8080 (no login: keep it
    /// on loopback or behind an authenticating proxy).
    #[arg(long)]
    pub dashboard: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9100.
    #[arg(long)]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub tls: gridwise_runtime::settings::TlsFlags,
    /// Default ranking policy: mct, conservative, round-robin, constant-speed.
    #[arg(long)]
    pub policy: Option<String>,
    /// How often servers send heartbeats, ms.
    #[arg(long)]
    pub heartbeat_interval_ms: Option<u64>,
    /// Mark a server down after this long without a heartbeat, ms.
    #[arg(long)]
    pub heartbeat_timeout_ms: Option<u64>,
    /// Where the agent keeps what it learns (default ./gridwise-data).
    #[arg(long)]
    pub data_dir: Option<std::path::PathBuf>,
    /// Keep it in this PostgreSQL database, shared with other agents
    /// (postgres://user:password@host:port/db; a password is better in GRIDWISE_AGENT_STORE
    /// or the config file than on a command line others can read).
    #[arg(long)]
    pub store: Option<String>,
}

impl AgentArgs {
    /// The merged settings: defaults < file < GRIDWISE_AGENT_* < flags.
    pub fn load(&self) -> anyhow::Result<AgentConfig> {
        let mut flags = vec![
            ("listen", self.listen.clone()),
            ("client_token", self.client_token.clone()),
            ("server_token", self.server_token.clone()),
            ("metrics", self.metrics.clone()),
            ("dashboard", self.dashboard.clone()),
            ("policy", self.policy.clone()),
            (
                "data_dir",
                self.data_dir.as_ref().map(|p| p.display().to_string()),
            ),
            ("store", self.store.clone()),
            (
                "heartbeat_interval_ms",
                self.heartbeat_interval_ms.map(|v| v.to_string()),
            ),
            (
                "heartbeat_timeout_ms",
                self.heartbeat_timeout_ms.map(|v| v.to_string()),
            ),
        ];
        flags.extend(self.tls.overrides());
        let o = gridwise_runtime::settings::flag_overrides(&flags);
        Ok(gridwise_runtime::settings::load(
            self.config.as_deref(),
            &crate::config::PATHS,
            "GRIDWISE_AGENT",
            &o,
        )?)
    }

    /// Loads the settings and runs the agent on a single-threaded runtime: the agent's work
    /// per message is microseconds, so one thread avoids cross-thread hops on every RPC.
    pub fn run_blocking(&self) -> anyhow::Result<()> {
        let cfg = self.load()?;
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(run(cfg))
    }
}
