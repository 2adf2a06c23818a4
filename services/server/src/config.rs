//! The server's settings: `gridwise-server --config server.toml`, `GRIDWISE_SERVER_*`, flags.

use crate::model_manager::ModelConfig;
use gridwise_kernels::{EmulatedSpec, LoadSpec};
use gridwise_routines::{CommandSpec, LibraryEntry, PythonEntry};
use gridwise_runtime::settings::{PathKey, TLS_PATHS};
use gridwise_runtime::wire::{
    self, CertRole, ConnLimits, Credentials, DialConfig, Role, Tls, TlsFiles,
};
use serde::Deserialize;
use std::path::PathBuf;

/// The settings that name files, taken from the config file's folder when relative there.
pub const PATHS: [PathKey; 10] = [
    TLS_PATHS[0],
    TLS_PATHS[1],
    TLS_PATHS[2],
    PathKey::path("services"),
    PathKey::path_or_name("worker_program"),
    PathKey::path("model_dir"),
    PathKey::path_or_name("library.*.path"),
    PathKey::path("python.*.path"),
    PathKey::path_or_name("python.*.python"),
    PathKey::path_or_name("command.*.program"),
];

/// Everything a server can be told.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Unique name in the grid (default: `server-<port>`).
    pub name: Option<String>,
    /// Address to listen on (`host:port`; port 0 picks a free one).
    pub listen: String,
    /// Address clients should use, when it differs from the bound one (NAT, 0.0.0.0).
    pub advertise: Option<String>,
    /// The agent's `host:port` (default 127.0.0.1:7000): the server registers there.
    pub agent: String,
    /// Several agents sharing one store (README, "More than one agent"): the server registers
    /// with each and tells each its load, calls and model points. Overrides `agent`.
    pub agents: Vec<String>,
    /// The secret clients must present (none: any client may call). Needs `server_token`.
    pub client_token: Option<String>,
    /// The secret this server presents to the agent and to its peers, and requires from them.
    pub server_token: Option<String>,
    /// Mutual TLS on every connection: the grid CA, this server's certificate (role server,
    /// from `gridwise certs issue --role server --name NAME --host HOST`) and its key. The
    /// certificate's name is the server's name.
    pub tls: Option<TlsFiles>,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (off when unset).
    pub metrics: Option<String>,
    /// Calls run at once; the rest queue (default: number of cores).
    pub slots: Option<u32>,
    /// Threads each library or Python routine's BLAS or OpenMP may start (default: the
    /// cores over the slots, at least 1, so that full slots do not oversubscribe the host).
    /// The CPU share the server reports is what each thread of such a kernel would get.
    pub threads: Option<u32>,
    /// Built-in services to offer: any of add, sleep, loop, fail, dgemm.
    pub builtins: Vec<String>,
    /// Emulated-speed services (DESIGN.md §4).
    pub emulated: Vec<EmulatedSpec>,
    /// Service description files (TOML) of this server's own routines; `[[library]]`,
    /// `[[python]]` and `[[command]]` entries say where each described service comes from.
    pub services: Vec<PathBuf>,
    /// Services provided by a routine in a shared object, run in worker processes.
    pub library: Vec<LibraryEntry>,
    /// Services provided by a Python function, run in worker processes.
    pub python: Vec<PythonEntry>,
    /// Services provided by running an executable.
    pub command: Vec<CommandSpec>,
    /// The executable started as a library worker (default: this program).
    pub worker_program: Option<PathBuf>,
    /// Background load the emulated services run under, from the server's start: a written
    /// trace `[[from_s, fraction], …]` or a generated one (`{ kind = "random" | "steady", … }`).
    /// The emulated kernels stretch by it as on a time-shared CPU, and the server's sensors
    /// report it. None: the emulated services run as on an idle host.
    pub load: Option<LoadSpec>,
    /// Measure each service's rate at start-up (a short calibration run).
    pub calibrate: bool,
    /// Largest request frame accepted, bytes.
    pub max_frame_bytes: usize,
    /// Most call reports sent to the agent in one message.
    pub report_batch_max: usize,
    /// Where finished performance models are kept (a restarted server loads them instead of
    /// measuring again); none: models live only at the agent.
    pub model_dir: Option<PathBuf>,
    /// Performance models to build with benchmarks (`[[models]]`).
    pub models: Vec<ModelConfig>,
    /// Most payload bytes of kept outputs (remote data) held at once (default: a quarter of
    /// the host's memory, at least 1 GiB).
    pub data_max_bytes: Option<u64>,
    /// How often to measure the links to the other servers, s (0: never).
    pub link_probe_s: f64,
    /// A kept output nobody has read for this long is freed, s (0: never). It bounds what a
    /// client that died mid-graph leaves behind.
    pub data_idle_ttl_s: f64,
    /// Bytes calls may take at once: each call's inputs and outputs, twice (working copies and
    /// the reply being serialised). A call needing more is refused before it runs; calls that
    /// fit wait for each other. Default: half of the memory the process may use (physical
    /// memory, or its address-space limit if lower).
    pub memory_budget_bytes: Option<u64>,
    /// Connections open at once, in all.
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
}

impl Default for ServerConfig {
    fn default() -> Self {
        let limits = ConnLimits::default();
        Self {
            name: None,
            listen: "127.0.0.1:0".into(),
            advertise: None,
            agent: "127.0.0.1:7000".into(),
            agents: Vec::new(),
            client_token: None,
            server_token: None,
            tls: None,
            metrics: None,
            slots: None,
            threads: None,
            builtins: gridwise_kernels::BUILTIN_NAMES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            emulated: Vec::new(),
            services: Vec::new(),
            library: Vec::new(),
            python: Vec::new(),
            command: Vec::new(),
            worker_program: None,
            load: None,
            calibrate: true,
            max_frame_bytes: 1024 * 1024 * 1024,
            report_batch_max: 512,
            model_dir: None,
            models: Vec::new(),
            data_max_bytes: None,
            link_probe_s: 60.0,
            data_idle_ttl_s: 3600.0,
            memory_budget_bytes: None,
            max_connections: limits.max_connections,
            max_connections_per_peer: limits.max_per_peer,
            max_connections_per_network: limits.max_per_network,
            idle_timeout_s: limits.idle_timeout.as_secs_f64(),
            stall_timeout_s: limits.stall_timeout.as_secs_f64(),
            min_frame_rate_bytes_per_s: limits.min_frame_rate,
            frame_grace_s: limits.frame_grace.as_secs_f64(),
        }
    }
}

/// Refuses an address that is not `host:port` (a port from 1 to 65535), naming the setting:
/// a server told to find its agent at `nohostport` would otherwise retry forever.
fn check_host_port(key: &str, addr: &str) -> anyhow::Result<()> {
    let port = addr
        .rsplit_once(':')
        .filter(|(host, _)| !host.trim_matches(['[', ']']).is_empty())
        .and_then(|(_, port)| port.parse::<u16>().ok())
        .filter(|p| *p > 0);
    anyhow::ensure!(
        port.is_some(),
        "{key} = \"{addr}\" is not host:port (e.g. \"127.0.0.1:7000\" or \"agent.example:7000\")"
    );
    Ok(())
}

impl ServerConfig {
    /// The calls run at once: `slots`, or one per core.
    pub fn slot_count(&self) -> u32 {
        self.slots.unwrap_or_else(crate::host::cores).max(1)
    }

    /// The threads each library or Python routine may start (see [`ServerConfig::threads`]).
    pub fn kernel_threads(&self) -> u32 {
        self.threads
            .unwrap_or_else(|| crate::host::cores() / self.slot_count())
            .max(1)
    }

    /// The agents this server registers with: `agents`, else the one `agent`.
    pub fn agent_addrs(&self) -> Vec<String> {
        match self.agents.is_empty() {
            true => vec![self.agent.clone()],
            false => self.agents.clone(),
        }
    }

    /// Refuses settings no server could honour, saying which and what is allowed.
    pub fn check(&self) -> anyhow::Result<()> {
        check_host_port("agent", &self.agent)?;
        for (i, a) in self.agents.iter().enumerate() {
            check_host_port("agents", a)?;
            anyhow::ensure!(
                !self.agents[..i].contains(a),
                "agents lists {a} twice: a server registers once with each agent"
            );
        }
        if let Some(load) = &self.load {
            load.trace().map_err(|e| anyhow::anyhow!("load: {e}"))?;
            anyhow::ensure!(
                !self.emulated.is_empty(),
                "load applies to emulated services, and this server has none: add \
                 `[[emulated]]` services or remove `load`"
            );
        }
        for (key, v) in [
            ("data_idle_ttl_s", self.data_idle_ttl_s),
            ("link_probe_s", self.link_probe_s),
        ] {
            anyhow::ensure!(
                v.is_finite() && v >= 0.0,
                "{key} = {v} must be a number of seconds ≥ 0 (0: never)"
            );
        }
        for (key, v) in [
            ("idle_timeout_s", self.idle_timeout_s),
            ("stall_timeout_s", self.stall_timeout_s),
            ("frame_grace_s", self.frame_grace_s),
        ] {
            anyhow::ensure!(
                v.is_finite() && v > 0.0,
                "{key} = {v} must be a positive number of seconds"
            );
        }
        wire::check_max_frame(self.max_frame_bytes).map_err(anyhow::Error::msg)?;
        self.credentials().check().map_err(anyhow::Error::msg)?;
        anyhow::ensure!(
            self.report_batch_max > 0,
            "report_batch_max must be at least 1"
        );
        anyhow::ensure!(
            self.slots != Some(0),
            "slots = 0 would run nothing: give at least 1 (or leave it out for one per core)"
        );
        anyhow::ensure!(
            self.threads != Some(0),
            "threads = 0 would run nothing: give at least 1 (or leave it out for the cores over the slots)"
        );
        if let Some(b) = self.memory_budget_bytes {
            anyhow::ensure!(
                b >= MIN_BUDGET,
                "memory_budget_bytes = {b} is below the {MIN_BUDGET} bytes (16 MiB) a server needs to take any call"
            );
        }
        self.limits()?;
        Ok(())
    }

    /// The credentials clients and peers must present.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            client_token: self.client_token.clone(),
            server_token: self.server_token.clone(),
        }
    }

    /// Connection caps and timeouts, checked.
    pub fn limits(&self) -> anyhow::Result<ConnLimits> {
        let seconds = |key: &str, v: f64| {
            std::time::Duration::try_from_secs_f64(v)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| anyhow::anyhow!("{key} = {v} must be a positive number of seconds"))
        };
        let l = ConnLimits {
            max_connections: self.max_connections,
            max_per_peer: self.max_connections_per_peer,
            max_per_network: self.max_connections_per_network,
            idle_timeout: seconds("idle_timeout_s", self.idle_timeout_s)?,
            stall_timeout: seconds("stall_timeout_s", self.stall_timeout_s)?,
            min_frame_rate: self.min_frame_rate_bytes_per_s,
            frame_grace: seconds("frame_grace_s", self.frame_grace_s)?,
        };
        l.check().map_err(anyhow::Error::msg)?;
        Ok(l)
    }

    /// The memory budget of calls: the configured one, else half of what the process may use.
    pub fn memory_budget(&self) -> u64 {
        self.memory_budget_bytes
            .unwrap_or_else(|| (crate::host::usable_memory_bytes() / 2).max(MIN_BUDGET))
    }

    /// The TLS settings `[tls]` names, read and checked (`None` without `[tls]`).
    pub fn tls(&self) -> anyhow::Result<Option<std::sync::Arc<Tls>>> {
        let Some(files) = &self.tls else {
            return Ok(None);
        };
        Tls::load_as(files, CertRole::Server)
            .map(Some)
            .map_err(anyhow::Error::msg)
    }

    /// How this server dials the agent and its peers (without TLS: see [`ServerConfig::tls`]).
    pub fn dial(&self) -> DialConfig {
        DialConfig {
            max_frame_bytes: self.max_frame_bytes,
            ..DialConfig::new(Role::Server, self.server_token.clone())
        }
    }
}

/// The smallest memory budget a server accepts.
const MIN_BUDGET: u64 = 16 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deploy_examples_parse_and_pass_the_checks() {
        for text in [
            include_str!("../../../deploy/server.toml"),
            include_str!("../../../deploy/emulated-server.toml"),
        ] {
            let c: ServerConfig = toml::from_str(text).unwrap();
            c.check().unwrap();
        }
    }

    #[test]
    fn negative_or_nan_periods_are_refused() {
        assert!(ServerConfig::default().check().is_ok());
        let c: ServerConfig = toml::from_str("data_idle_ttl_s = -1.0").unwrap();
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("data_idle_ttl_s = -1"), "{e}");
        let c = ServerConfig {
            link_probe_s: f64::NAN,
            ..ServerConfig::default()
        };
        assert!(c.check().unwrap_err().to_string().contains("link_probe_s"));
        for (text, key) in [
            ("max_frame_bytes = 0", "max_frame_bytes = 0"),
            ("slots = 0", "slots = 0"),
            ("threads = 0", "threads = 0"),
            ("memory_budget_bytes = 1", "memory_budget_bytes = 1"),
            ("client_token = \"c\"", "server_token"),
            ("idle_timeout_s = 0.0", "idle_timeout_s"),
            ("frame_grace_s = 0.0", "frame_grace_s"),
            (
                "min_frame_rate_bytes_per_s = 0",
                "min_frame_rate_bytes_per_s",
            ),
            (
                "max_connections_per_network = 0",
                "max_connections_per_network",
            ),
            ("report_batch_max = 0", "report_batch_max"),
            (
                "agent = \"nohostport\"",
                "agent = \"nohostport\" is not host:port",
            ),
            ("agent = \"host:0\"", "is not host:port"),
            ("agent = \":7000\"", "is not host:port"),
            (
                "agents = [\"a:1\", \"nohostport\"]",
                "agents = \"nohostport\"",
            ),
            ("agents = [\"a:1\", \"a:1\"]", "lists a:1 twice"),
        ] {
            let c: ServerConfig = toml::from_str(text).unwrap();
            let e = c.check().unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn emulated_services_parse_from_toml() {
        let c: ServerConfig = toml::from_str(
            r#"
            name = "fast-small"
            builtins = ["add"]
            [[emulated]]
            name = "solve"
            complexity = "n^3"
            speed = [[100, 2e9], [2000, 2e9], [3000, 1e8]]
            "#,
        )
        .unwrap();
        assert_eq!(c.emulated.len(), 1);
        assert_eq!(c.builtins, vec!["add".to_string()]);
        assert!(c.calibrate);
    }

    #[test]
    fn models_parse_with_build_settings_flattened() {
        let c: ServerConfig = toml::from_str(
            r#"
            model_dir = "/tmp/m"
            [[models]]
            service = "solve"
            priority = 3
            method = "gbbp"
            min_sample_num = 2
            params = [{ name = "n", min = 64, max = 4096, stride = 64 }]
            constraint = { formula = "8*n*n", max = 1e9 }
            policy = { when = "idle", windows = ["22:00-06:00"] }
            "#,
        )
        .unwrap();
        let m = &c.models[0];
        assert_eq!((m.service.as_str(), m.priority), ("solve", 3));
        assert_eq!(m.spec.sampling.min_sample_num, 2);
        assert_eq!(m.spec.params[0].stride, 64);
        assert_eq!(m.policy.when, crate::build_policy::When::Idle);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = toml::from_str::<ServerConfig>("slotz = 3").unwrap_err();
        assert!(e.to_string().contains("slotz"), "{e}");
    }
}
