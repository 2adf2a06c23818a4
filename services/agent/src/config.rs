//! The agent's settings: `gridwise-agent --config agent.toml`, `GRIDWISE_AGENT_*`, flags.

use gridwise_proto::Policy;
use gridwise_sched::CoreConfig;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// Everything the agent can be told.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Address to listen on (`host:port`; port 0 picks a free one).
    pub listen: String,
    /// Name in logs and hellos.
    pub name: String,
    /// Shared secret every client and server must present (none: anyone on the network may connect).
    pub token: Option<String>,
    /// Default ranking policy: `mct`, `round-robin` or `constant-speed`.
    pub policy: String,
    /// How often servers send heartbeats, ms.
    pub heartbeat_interval_ms: u64,
    /// A server silent for this long is marked down, ms.
    pub heartbeat_timeout_ms: u64,
    /// Bandwidth assumed for transfer terms until links are measured, bytes/s.
    pub default_bandwidth_bytes_per_s: f64,
    /// Latency assumed per transfer, s.
    pub default_latency_s: f64,
    /// An assignment never reported back is forgotten after this long, s.
    pub ticket_ttl_s: u64,
    /// Candidates returned per ranking (the client falls back along them).
    pub max_candidates: usize,
    /// Largest frame accepted, bytes (the agent never carries bulk data).
    pub max_frame_bytes: usize,
    /// Where the agent keeps what it learns (SQLite): servers, services, model points, timing
    /// and load history. A restarted agent resumes from it.
    pub data_dir: PathBuf,
    /// Period of each server's load history for the band model, s (the thesis's Δ = 60 s).
    pub load_sample_s: f64,
    /// Band-model window in samples (the history keeps 2w − 1).
    pub load_window: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        let core = CoreConfig::default();
        Self {
            listen: "127.0.0.1:7000".into(),
            name: "agent".into(),
            token: None,
            policy: core.policy.to_string(),
            heartbeat_interval_ms: core.heartbeat_interval.as_millis() as u64,
            heartbeat_timeout_ms: core.heartbeat_timeout.as_millis() as u64,
            default_bandwidth_bytes_per_s: core.default_bandwidth_bytes_per_s,
            default_latency_s: core.default_latency_s,
            ticket_ttl_s: core.ticket_ttl.as_secs(),
            max_candidates: core.max_candidates,
            max_frame_bytes: 16 * 1024 * 1024,
            data_dir: PathBuf::from("gridwise-data"),
            load_sample_s: core.load_sample.as_secs_f64(),
            load_window: core.load_window,
        }
    }
}

impl AgentConfig {
    /// The decision core's settings, checked.
    pub fn core(&self) -> anyhow::Result<CoreConfig> {
        let policy: Policy = self.policy.parse().map_err(anyhow::Error::msg)?;
        let core = CoreConfig {
            policy,
            heartbeat_timeout: Duration::from_millis(self.heartbeat_timeout_ms),
            heartbeat_interval: Duration::from_millis(self.heartbeat_interval_ms),
            default_bandwidth_bytes_per_s: self.default_bandwidth_bytes_per_s,
            default_latency_s: self.default_latency_s,
            ticket_ttl: Duration::from_secs(self.ticket_ttl_s),
            max_candidates: self.max_candidates,
            load_sample: Duration::try_from_secs_f64(self.load_sample_s).map_err(|_| {
                anyhow::anyhow!(
                    "load_sample_s must be a positive number of seconds, not {}",
                    self.load_sample_s
                )
            })?,
            load_window: self.load_window,
        };
        core.validate()?;
        Ok(core)
    }
}
