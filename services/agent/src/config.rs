//! The agent's settings: `gridwise-agent --config agent.toml`, `GRIDWISE_AGENT_*`, flags.

use gridwise_proto::Policy;
use gridwise_runtime::settings::{PathKey, TLS_PATHS};
use gridwise_runtime::wire::{
    self, AcceptConfig, ConnLimits, Credentials, DialConfig, Role, Tls, TlsFiles,
};
use gridwise_sched::CoreConfig;
use serde::Deserialize;
use std::path::PathBuf;

/// The settings that name files, taken from the config file's folder when relative there.
pub const PATHS: [PathKey; 4] = [
    TLS_PATHS[0],
    TLS_PATHS[1],
    TLS_PATHS[2],
    PathKey::path("data_dir"),
];
use std::time::Duration;

/// Everything the agent can be told.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Address to listen on (`host:port`; port 0 picks a free one).
    pub listen: String,
    /// Name in logs and hellos.
    pub name: String,
    /// The secret clients present (none: any client may connect). Needs `server_token` too.
    pub client_token: Option<String>,
    /// The secret servers present to register (none: anyone may register a server). It must
    /// differ from `client_token`, or every client could register as a server.
    pub server_token: Option<String>,
    /// Mutual TLS on every connection: the grid CA, the agent's certificate (role agent, from
    /// `gridwise certs issue --role agent`) and its key. Clients and servers then need
    /// certificates from the same CA.
    pub tls: Option<TlsFiles>,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (off when unset).
    pub metrics: Option<String>,
    /// Serve the live web dashboard at `http://ADDR/` (off when unset). It has no login of its
    /// own: bind it to loopback, or put it behind a proxy that authenticates.
    pub dashboard: Option<String>,
    /// Default ranking policy: `mct`, `conservative`, `round-robin` or `constant-speed`.
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
    /// A PostgreSQL database to keep it in instead (`postgres://user:password@host:port/db`):
    /// the store several agents share (README, "More than one agent"). Unset: SQLite in
    /// `data_dir`, for one agent.
    pub store: Option<String>,
    /// Period of each server's load history for the band model, s (the thesis's Δ = 60 s).
    pub load_sample_s: f64,
    /// Band-model window in samples (the history keeps 2w − 1).
    pub load_window: usize,
    /// Period of the CPU-availability and free-memory series forecasts are made from, s.
    pub sensor_sample_s: f64,
    /// How load enters estimates: `forecast` (forecast CPU availability, the default),
    /// `band` (the load-average band of seed 003) or `blind` (ignored).
    pub load_model: String,
    /// The `conservative` policy ranks by mean + this many standard deviations.
    pub conservative_tf: f64,
    /// The model family per service (`fpm`, `regression` or `auto`), e.g. `[families]`
    /// `sim_step = "regression"`; services not listed use `fpm`.
    pub families: std::collections::BTreeMap<String, String>,
    /// Bytes that frames still arriving may hold at once, over all connections.
    pub memory_budget_bytes: u64,
    /// Connections open at once, in all (kept below the open-file limit).
    pub max_connections: usize,
    /// Connections open at once from one address.
    pub max_connections_per_peer: usize,
    /// Connections open at once from one network (a /24 for IPv4, a /64 for IPv6): a peer
    /// with many addresses usually has them in one network. At a cap, the longest-idle
    /// connection in its way is closed, else the one whose frame arrives slowest (so trickles
    /// cannot hold every place); one serving a request never is.
    pub max_connections_per_network: usize,
    /// A connection with nothing in flight and nothing arriving for this long is closed, s.
    pub idle_timeout_s: f64,
    /// A frame that stops arriving half-way for this long closes its connection, s.
    pub stall_timeout_s: f64,
    /// The slowest average pace a frame may keep once `frame_grace_s` is spent, bytes/s: a
    /// frame trickled in byte by byte never falls silent, so the stall timeout alone would
    /// keep it open for ever.
    pub min_frame_rate_bytes_per_s: u64,
    /// The slack each frame has over that pace, s (all a frame gets before its length is in).
    pub frame_grace_s: f64,
    /// Dial every registering server to check it is at the address it gives (and dial the
    /// holder of a name someone else registers, to see whether it is gone).
    pub verify_servers: bool,
    /// Registrations one source address may make per second, on average…
    pub registrations_per_s: f64,
    /// … and in a burst.
    pub registration_burst: f64,
    /// Up servers one source address may have registered.
    pub max_servers_per_source: usize,
    /// A server down for this long is forgotten with its models, s.
    pub server_retention_s: f64,
    /// After a restart, calls that find no live server wait this long for the servers the
    /// agent knew to register again, s.
    pub restore_grace_s: f64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        let core = CoreConfig::default();
        let limits = ConnLimits::default();
        Self {
            listen: "127.0.0.1:7000".into(),
            name: "agent".into(),
            client_token: None,
            server_token: None,
            tls: None,
            metrics: None,
            dashboard: None,
            policy: core.policy.to_string(),
            heartbeat_interval_ms: core.heartbeat_interval.as_millis() as u64,
            heartbeat_timeout_ms: core.heartbeat_timeout.as_millis() as u64,
            default_bandwidth_bytes_per_s: core.default_bandwidth_bytes_per_s,
            default_latency_s: core.default_latency_s,
            ticket_ttl_s: core.ticket_ttl.as_secs(),
            max_candidates: core.max_candidates,
            max_frame_bytes: 16 * 1024 * 1024,
            data_dir: PathBuf::from("gridwise-data"),
            store: None,
            load_sample_s: core.load_sample.as_secs_f64(),
            load_window: core.load_window,
            sensor_sample_s: core.sensor_sample.as_secs_f64(),
            load_model: core.load_model.as_str().into(),
            conservative_tf: core.conservative_tf,
            families: Default::default(),
            memory_budget_bytes: 256 << 20,
            max_connections: limits.max_connections,
            max_connections_per_peer: limits.max_per_peer,
            max_connections_per_network: limits.max_per_network,
            idle_timeout_s: limits.idle_timeout.as_secs_f64(),
            stall_timeout_s: limits.stall_timeout.as_secs_f64(),
            min_frame_rate_bytes_per_s: limits.min_frame_rate,
            frame_grace_s: limits.frame_grace.as_secs_f64(),
            verify_servers: true,
            registrations_per_s: core.registrations_per_s,
            registration_burst: core.registration_burst,
            max_servers_per_source: core.max_servers_per_source,
            server_retention_s: core.server_retention.as_secs_f64(),
            restore_grace_s: core.restore_grace.as_secs_f64(),
        }
    }
}

impl AgentConfig {
    /// The decision core's settings, checked.
    pub fn core(&self) -> anyhow::Result<CoreConfig> {
        let policy: Policy = self.policy.parse().map_err(anyhow::Error::msg)?;
        let core = CoreConfig {
            families: self
                .families
                .iter()
                .map(|(service, family)| {
                    let f = family
                        .parse()
                        .map_err(|e| anyhow::anyhow!("[families] {service}: {e}"))?;
                    Ok((service.clone(), f))
                })
                .collect::<anyhow::Result<_>>()?,
            policy,
            heartbeat_timeout: Duration::from_millis(self.heartbeat_timeout_ms),
            heartbeat_interval: Duration::from_millis(self.heartbeat_interval_ms),
            default_bandwidth_bytes_per_s: self.default_bandwidth_bytes_per_s,
            default_latency_s: self.default_latency_s,
            ticket_ttl: Duration::from_secs(self.ticket_ttl_s),
            max_candidates: self.max_candidates,
            load_sample: seconds("load_sample_s", self.load_sample_s)?,
            load_window: self.load_window,
            sensor_sample: seconds("sensor_sample_s", self.sensor_sample_s)?,
            load_model: self.load_model.parse().map_err(anyhow::Error::msg)?,
            conservative_tf: self.conservative_tf,
            registrations_per_s: self.registrations_per_s,
            registration_burst: self.registration_burst,
            max_servers_per_source: self.max_servers_per_source,
            server_retention: seconds("server_retention_s", self.server_retention_s)?,
            restore_grace: seconds("restore_grace_s", self.restore_grace_s)?,
            // Each agent process its own, so peers spread over equally good servers.
            tie_salt: None,
        };
        core.validate()?;
        Ok(core)
    }

    /// Opens the store the settings name: PostgreSQL at `store`, else SQLite in `data_dir`.
    /// Blocking: call it off the async runtime (the PostgreSQL client runs one of its own).
    pub fn open_store(&self) -> anyhow::Result<gridwise_store::Store> {
        match &self.store {
            Some(url) => gridwise_store::Store::connect(url)
                .map_err(|e| anyhow::anyhow!("cannot open the agents' shared store: {e}")),
            None => gridwise_store::Store::open(&self.data_dir)
                .map_err(|e| anyhow::anyhow!("cannot open the agent's data directory: {e}")),
        }
    }

    /// The TLS settings `[tls]` names, read and checked (`None` without `[tls]`).
    pub fn tls(&self) -> anyhow::Result<Option<std::sync::Arc<Tls>>> {
        let Some(files) = &self.tls else {
            return Ok(None);
        };
        Tls::load_as(files, wire::CertRole::Agent)
            .map(Some)
            .map_err(anyhow::Error::msg)
    }

    /// How the agent accepts connections, checked.
    pub fn accept(&self) -> anyhow::Result<AcceptConfig> {
        wire::check_max_frame(self.max_frame_bytes).map_err(anyhow::Error::msg)?;
        let credentials = Credentials {
            client_token: self.client_token.clone(),
            server_token: self.server_token.clone(),
        };
        credentials.check().map_err(anyhow::Error::msg)?;
        anyhow::ensure!(
            self.memory_budget_bytes >= self.max_frame_bytes as u64,
            "memory_budget_bytes ({}) must hold at least one frame of max_frame_bytes ({})",
            self.memory_budget_bytes,
            self.max_frame_bytes
        );
        let limits = ConnLimits {
            max_connections: self.max_connections,
            max_per_peer: self.max_connections_per_peer,
            max_per_network: self.max_connections_per_network,
            idle_timeout: seconds("idle_timeout_s", self.idle_timeout_s)?,
            stall_timeout: seconds("stall_timeout_s", self.stall_timeout_s)?,
            min_frame_rate: self.min_frame_rate_bytes_per_s,
            frame_grace: seconds("frame_grace_s", self.frame_grace_s)?,
        };
        limits.check().map_err(anyhow::Error::msg)?;
        let mut cfg = AcceptConfig::new(self.max_frame_bytes, self.memory_budget_bytes);
        cfg.credentials = credentials;
        cfg.limits = limits;
        Ok(cfg)
    }

    /// How the agent dials servers to check them, if it does.
    pub fn dial(&self) -> Option<DialConfig> {
        self.verify_servers.then(|| {
            let mut d = DialConfig::new(Role::Server, self.server_token.clone());
            d.connect_timeout = Duration::from_secs(2);
            d.hello_timeout = Duration::from_secs(2);
            d.max_frame_bytes = 1 << 20;
            d
        })
    }
}

/// A setting in seconds as a duration: positive and finite, or an error naming it.
fn seconds(key: &str, v: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow::anyhow!("{key} must be a positive number of seconds, not {v}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deploy_example_parses_and_passes_the_checks() {
        let c: AgentConfig = toml::from_str(include_str!("../../../deploy/agent.toml")).unwrap();
        c.core().unwrap();
        c.accept().unwrap();
    }

    #[test]
    fn nonsense_is_refused_with_the_setting_named() {
        let bad = |text: &str| {
            let c: AgentConfig = toml::from_str(text).unwrap();
            match c.core().and_then(|_| c.accept()) {
                Ok(_) => panic!("{text} was accepted"),
                Err(e) => e.to_string(),
            }
        };
        assert!(bad("max_frame_bytes = 0").contains("max_frame_bytes = 0"));
        assert!(bad("client_token = \"x\"").contains("server_token"));
        assert!(bad("client_token = \"x\"\nserver_token = \"x\"").contains("same"));
        assert!(bad("idle_timeout_s = 0.0").contains("idle_timeout_s"));
        assert!(bad("frame_grace_s = -1.0").contains("frame_grace_s"));
        assert!(bad("min_frame_rate_bytes_per_s = 0").contains("min_frame_rate_bytes_per_s"));
        assert!(bad("max_connections_per_network = 0").contains("max_connections_per_network"));
        assert!(bad("load_sample_s = -1.0").contains("load_sample_s"));
        assert!(bad("max_candidates = 0").contains("candidates"));
        assert!(bad("registrations_per_s = 0.0").contains("registrations_per_s"));
        let e = toml::from_str::<AgentConfig>("tokn = \"x\"").unwrap_err();
        assert!(e.to_string().contains("tokn"), "{e}");
    }
}
