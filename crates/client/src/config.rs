//! Client configuration: a TOML file plus `GRIDWISE_CLIENT_*` environment overrides.

use crate::error::GrpcError;
use gridwise_proto::{ErrorCode, Policy};
use gridwise_runtime::wire::{DialConfig, Role, Tls, TlsFiles};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// The prefix of environment variables that override file settings, e.g.
/// `GRIDWISE_CLIENT_AGENT=host:7000`.
pub const ENV_PREFIX: &str = "GRIDWISE_CLIENT";

/// How a client reaches the grid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// The agent's address, `host:port`; several agents sharing one store may be given
    /// comma-separated (`a:7000,b:7000`), or as `agents`.
    pub agent: String,
    /// Several agents sharing one store (README, "More than one agent"): the client starts at
    /// one of them, picked at random so that clients spread over them, and moves to the next
    /// when it stops answering. Overrides `agent`.
    #[serde(default)]
    pub agents: Vec<String>,
    /// The grid's client token, when the daemons require one.
    pub token: Option<String>,
    /// How long opening a connection (TCP + hello) may take, ms.
    pub connect_timeout_ms: u64,
    /// How long an agent request (rank, describe, status, ...) may take, ms.
    pub agent_timeout_ms: u64,
    /// How long one remote call may run before the client gives up on it, seconds. A server
    /// that stops answering is noticed much sooner (`liveness_interval_ms`); this bounds calls
    /// on servers that answer but never finish.
    pub call_timeout_s: u64,
    /// How often a server running one of this client's calls is pinged, ms; after three
    /// intervals without an answer its calls move to another server.
    pub liveness_interval_ms: u64,
    /// How long calls wait for an unreachable agent to come back (a restart) before failing, s.
    pub agent_retry_s: u64,
    /// Largest frame accepted from a peer, bytes.
    pub max_frame_bytes: usize,
    /// A ranking policy other than the agent's default.
    pub policy: Option<Policy>,
    /// How load enters estimates, other than the agent's default (`blind` ignores it).
    #[serde(default)]
    pub load_model: Option<gridwise_proto::LoadModel>,
    /// Mutual TLS with the grid's daemons: the grid CA, this client's certificate (role
    /// client, from `gridwise certs issue --role client`) and its key.
    #[serde(default)]
    pub tls: Option<TlsFiles>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            agent: String::new(),
            agents: Vec::new(),
            token: None,
            connect_timeout_ms: 5000,
            agent_timeout_ms: 30_000,
            call_timeout_s: 24 * 3600,
            liveness_interval_ms: 1000,
            agent_retry_s: 30,
            max_frame_bytes: 1 << 30,
            policy: None,
            load_model: None,
            tls: None,
        }
    }
}

/// The variables the command line takes its `--agent` from (comma-separated agents)…
pub const AGENT_ENV: &str = "GRIDWISE_AGENT";
/// … and its `--token`: every client that is given neither a file nor an address (the Python
/// `Client()`, a C program's `grpc_initialize(NULL)`) reads the same two.
pub const TOKEN_ENV: &str = "GRIDWISE_TOKEN";

impl ClientConfig {
    /// Defaults, with the agent from [`AGENT_ENV`] and the token from [`TOKEN_ENV`], as the
    /// command line takes them; `None` without an agent there.
    pub fn from_env() -> Option<Self> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// The token in [`TOKEN_ENV`], for a client given its agent some other way.
    pub fn token_from_env() -> Option<String> {
        Self::token_from(|k| std::env::var(k).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let agent = var(AGENT_ENV).filter(|a| !a.trim().is_empty())?;
        let mut c = Self::with_agent(agent);
        c.token = Self::token_from(var);
        Some(c)
    }

    fn token_from(var: impl Fn(&str) -> Option<String>) -> Option<String> {
        var(TOKEN_ENV).filter(|t| !t.is_empty())
    }

    /// Defaults, with the agent at `addr` (`host:port`).
    pub fn with_agent(addr: impl Into<String>) -> Self {
        Self {
            agent: addr.into(),
            ..Self::default()
        }
    }

    /// Reads a TOML file, then applies `GRIDWISE_CLIENT_*` environment overrides.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, GrpcError> {
        Self::load(path.as_ref(), None)
    }

    /// Like [`ClientConfig::from_file`], with the environment given as a map (for tests).
    pub(crate) fn load(
        path: &Path,
        env: Option<HashMap<String, String>>,
    ) -> Result<Self, GrpcError> {
        let shown = path.display();
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => {
                return Err(GrpcError::new(
                    ErrorCode::ConfigfileError,
                    format!("configuration file {shown} is not a regular file"),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(GrpcError::new(
                    ErrorCode::ConfigfileNotFound,
                    format!("configuration file {shown} does not exist"),
                ));
            }
            Err(e) => {
                return Err(GrpcError::new(
                    ErrorCode::ConfigfileError,
                    format!("cannot read configuration file {shown}: {e}"),
                ));
            }
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            GrpcError::new(
                ErrorCode::ConfigfileError,
                format!("cannot read configuration file {shown}: {e}"),
            )
        })?;
        let bad = |e: config::ConfigError| {
            GrpcError::new(
                ErrorCode::ConfigfileError,
                format!("configuration file {shown}: {e}"),
            )
        };
        // The [tls] files from the file's folder, wherever the program runs.
        let text = gridwise_runtime::settings::anchor_file_paths(
            &text,
            path,
            &gridwise_runtime::settings::TLS_PATHS,
        )
        .map_err(|e| {
            GrpcError::new(
                ErrorCode::ConfigfileError,
                format!("configuration file {shown}: {e}"),
            )
        })?;
        let env_source = config::Environment::with_prefix(ENV_PREFIX).source(env);
        let cfg: ClientConfig = config::Config::builder()
            .add_source(config::File::from_str(&text, config::FileFormat::Toml))
            .add_source(env_source)
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(bad)?;
        if cfg.agent_addrs().is_empty() {
            return Err(GrpcError::new(
                ErrorCode::ConfigfileError,
                format!(
                    "configuration file {shown} names no agent: set agent = \"host:port\" (or {ENV_PREFIX}_AGENT)"
                ),
            ));
        }
        cfg.check().map_err(|e| {
            GrpcError::new(
                ErrorCode::ConfigfileError,
                format!("configuration file {shown}: {e}"),
            )
        })?;
        Ok(cfg)
    }

    /// The agents to use, in order: `agents`, else the comma-separated `agent`.
    pub fn agent_addrs(&self) -> Vec<String> {
        let listed = match self.agents.is_empty() {
            true => self.agent.split(',').map(str::to_string).collect(),
            false => self.agents.clone(),
        };
        listed
            .into_iter()
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect()
    }

    /// Refuses values no client could work with, naming the setting.
    pub fn check(&self) -> Result<(), String> {
        gridwise_runtime::wire::check_max_frame(self.max_frame_bytes)?;
        for (key, v) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("agent_timeout_ms", self.agent_timeout_ms),
            ("call_timeout_s", self.call_timeout_s),
            ("liveness_interval_ms", self.liveness_interval_ms),
        ] {
            if v == 0 {
                return Err(format!("{key} = 0 must be positive"));
            }
        }
        if self.token.as_deref() == Some("") {
            return Err("token may not be empty: remove it or give it a value".into());
        }
        Ok(())
    }

    /// The settings as TOML, e.g. to write a sample file.
    pub fn to_toml(&self) -> Result<String, GrpcError> {
        toml::to_string(self).map_err(|e| GrpcError::new(ErrorCode::OtherErrorCode, e.to_string()))
    }

    /// The connection settings for the wire layer, presenting `principal` as the owner of
    /// this client's tickets and kept values.
    /// With `[tls]`, its files are read here: an unreadable or mismatched file fails now.
    pub fn wire(&self, principal: &str) -> Result<DialConfig, GrpcError> {
        let connect = Duration::from_millis(self.connect_timeout_ms.max(1));
        let tls = match &self.tls {
            None => None,
            Some(files) => {
                Some(Tls::load(files).map_err(|e| GrpcError::new(ErrorCode::ConfigfileError, e))?)
            }
        };
        Ok(DialConfig {
            role: Role::Client,
            credential: self.token.clone(),
            principal: principal.to_string(),
            max_frame_bytes: self.max_frame_bytes,
            connect_timeout: connect,
            hello_timeout: connect,
            tls,
            unacked_limit: None,
        })
    }

    /// `liveness_interval_ms`, at least 1 ms.
    pub fn liveness_interval(&self) -> Duration {
        Duration::from_millis(self.liveness_interval_ms.max(1))
    }

    /// `agent_retry_s`; 0 means calls do not wait for an unreachable agent.
    pub fn agent_retry(&self) -> Duration {
        Duration::from_secs(self.agent_retry_s)
    }

    /// `agent_timeout_ms`, at least 1 ms: the deadline of each agent request.
    pub fn agent_timeout(&self) -> Duration {
        Duration::from_millis(self.agent_timeout_ms.max(1))
    }

    /// `call_timeout_s`, at least 1 s: the deadline of one remote call.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs(self.call_timeout_s.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn a_good_file_reads_with_defaults() {
        let f = file("agent = \"127.0.0.1:7000\"\npolicy = \"round-robin\"\n");
        let c = ClientConfig::load(f.path(), Some(HashMap::new())).unwrap();
        assert_eq!(c.agent, "127.0.0.1:7000");
        assert_eq!(c.policy, Some(Policy::RoundRobin));
        assert_eq!(c.connect_timeout_ms, 5000);
        assert_eq!(c.call_timeout_s, 24 * 3600);
        assert_eq!(c.max_frame_bytes, 1 << 30);
    }

    #[test]
    fn environment_overrides_the_file() {
        let f = file("agent = \"127.0.0.1:7000\"\nagent_timeout_ms = 10\n");
        let env = HashMap::from([
            ("GRIDWISE_CLIENT_AGENT".to_string(), "h:9".to_string()),
            ("GRIDWISE_CLIENT_AGENT_TIMEOUT_MS".to_string(), "77".into()),
            ("GRIDWISE_CLIENT_TOKEN".to_string(), "s3cret".into()),
        ]);
        let c = ClientConfig::load(f.path(), Some(env)).unwrap();
        assert_eq!(c.agent, "h:9");
        assert_eq!(c.agent_timeout_ms, 77);
        assert_eq!(c.token.as_deref(), Some("s3cret"));
    }

    #[test]
    fn several_agents_are_a_list_or_comma_separated() {
        let f = file("agent = \"a:1, b:2,\"\n");
        let c = ClientConfig::load(f.path(), Some(HashMap::new())).unwrap();
        assert_eq!(c.agent_addrs(), ["a:1", "b:2"]);
        let f = file("agent = \"a:1\"\nagents = [\"c:3\", \"d:4\"]\n");
        let c = ClientConfig::load(f.path(), Some(HashMap::new())).unwrap();
        assert_eq!(c.agent_addrs(), ["c:3", "d:4"]);
        let f = file("agent = \" , \"\n");
        let e = ClientConfig::load(f.path(), Some(HashMap::new())).unwrap_err();
        assert!(e.message.contains("names no agent"), "{e}");
    }

    #[test]
    fn a_missing_file_is_not_found_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nope.toml");
        let e = ClientConfig::from_file(&p).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigfileNotFound);
        assert!(e.message.contains("nope.toml"), "{e}");
    }

    #[test]
    fn bad_toml_is_a_configfile_error() {
        let f = file("agent = \"127.0.0.1:7000\nthis is not toml = = =\n");
        let e = ClientConfig::load(f.path(), Some(HashMap::new())).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigfileError);
        let f = file("agent = \"a:1\"\nconnect_timeout_ms = \"soon\"\n");
        let e = ClientConfig::load(f.path(), Some(HashMap::new())).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigfileError);
        assert!(e.message.contains("connect_timeout_ms"), "{e}");
    }

    #[test]
    fn a_file_without_agent_says_what_to_set() {
        let f = file("token = \"x\"\n");
        let e = ClientConfig::load(f.path(), Some(HashMap::new())).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigfileError);
        assert!(e.message.contains("agent = \"host:port\""), "{e}");
    }

    #[test]
    fn defaults_round_trip_through_toml() {
        let c = ClientConfig::with_agent("h:1");
        let text = c.to_toml().unwrap();
        let f = file(&text);
        assert_eq!(
            ClientConfig::load(f.path(), Some(HashMap::new())).unwrap(),
            c
        );
    }

    #[test]
    fn unknown_keys_and_nonsense_are_refused() {
        let f = file("agent = \"a:1\"\ntokn = \"x\"\n");
        let e = ClientConfig::load(f.path(), Some(HashMap::new())).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigfileError);
        assert!(e.message.contains("tokn"), "{e}");
        for (text, key) in [
            ("max_frame_bytes = 0", "max_frame_bytes = 0"),
            ("liveness_interval_ms = 0", "liveness_interval_ms"),
            ("token = \"\"", "token may not be empty"),
        ] {
            let f = file(&format!("agent = \"a:1\"\n{text}\n"));
            let e = ClientConfig::load(f.path(), Some(HashMap::new())).unwrap_err();
            assert!(e.message.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn the_deploy_example_reads() {
        let f = file(include_str!("../../../deploy/client.toml"));
        let c = ClientConfig::load(f.path(), Some(HashMap::new())).unwrap();
        assert_eq!(c.call_timeout_s, 86_400);
    }

    #[test]
    fn from_the_environment_as_the_command_line_takes_it() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let c = ClientConfig::from_vars(vars(&[
            ("GRIDWISE_AGENT", "a:1,b:2"),
            ("GRIDWISE_TOKEN", "t"),
        ]))
        .unwrap();
        assert_eq!(c.agent_addrs(), ["a:1", "b:2"]);
        assert_eq!(c.token.as_deref(), Some("t"));
        let c = ClientConfig::from_vars(vars(&[("GRIDWISE_AGENT", "a:1")])).unwrap();
        assert_eq!(c.token, None);
        assert!(ClientConfig::from_vars(vars(&[("GRIDWISE_TOKEN", "t")])).is_none());
        assert!(ClientConfig::from_vars(vars(&[("GRIDWISE_AGENT", " ")])).is_none());
    }
}
