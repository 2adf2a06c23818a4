//! Harness for end-to-end tests: builds the real daemons, starts an agent and servers as
//! processes on 127.0.0.1 with ephemeral ports, and kills them all when the grid drops (or when
//! the test process dies).

use gridwise_cli::local::Daemon;
use gridwise_client::{Client, ClientConfig};
use gridwise_proto::ServerState;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The agent settings tests use: fast heartbeats so that failures show within a second.
pub const FAST_HEARTBEATS: [&str; 4] = [
    "--heartbeat-interval-ms",
    "200",
    "--heartbeat-timeout-ms",
    "1000",
];

/// Path of a workspace binary, built (or brought up to date) once per test process so a test
/// never runs a stale daemon.
pub fn bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = BUILT
        .get_or_init(|| {
            // target/<profile>/deps/<test-exe> → target/<profile>
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let dir = exe
                .parent()
                .and_then(|d| d.parent())
                .ok_or("cannot find the target directory")?
                .to_path_buf();
            let profile = dir.file_name().and_then(|p| p.to_str()).unwrap_or("debug");
            let profile = if profile == "debug" { "dev" } else { profile };
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let out = Command::new(cargo)
                .args([
                    "build",
                    "--quiet",
                    "--profile",
                    profile,
                    "-p",
                    "gridwise-agent",
                    "-p",
                    "gridwise-server",
                    "--bins",
                ])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .map_err(|e| format!("cannot run cargo: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "building the daemons failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(dir)
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"));
    dir.join(name)
}

/// An agent and servers running as separate processes.
pub struct Grid {
    /// The agent.
    pub agent: Daemon,
    /// Servers by start order.
    pub servers: Vec<Daemon>,
    /// Server names by start order.
    pub names: Vec<String>,
    token: Option<String>,
    dir: tempfile::TempDir,
}

impl Grid {
    /// Starts an agent with extra flags.
    pub fn agent(extra: &[&str]) -> Grid {
        let dir = tempfile::Builder::new()
            .prefix("gridwise-e2e-")
            .tempdir()
            .expect("temp dir");
        let mut args: Vec<String> = vec!["--listen".into(), "127.0.0.1:0".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        let token = extra
            .iter()
            .position(|a| *a == "--token")
            .and_then(|i| extra.get(i + 1))
            .map(|s| s.to_string());
        let agent = Daemon::spawn(
            &bin("gridwise-agent"),
            &args,
            &dir.path().join("agent.log"),
            "agent",
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
        Grid {
            agent,
            servers: Vec::new(),
            names: Vec::new(),
            token,
            dir,
        }
    }

    /// Starts a server named `name` with this TOML config (the agent address, a loopback
    /// listen address and the grid's token are added).
    pub fn server(&mut self, name: &str, toml: &str) -> &Daemon {
        let cfg = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&cfg, toml).expect("write server config");
        let mut args = vec![
            "--config".to_string(),
            cfg.display().to_string(),
            "--name".into(),
            name.into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--agent".into(),
            self.agent.addr.clone(),
        ];
        if let Some(t) = &self.token {
            args.extend(["--token".to_string(), t.clone()]);
        }
        let d = Daemon::spawn(
            &bin("gridwise-server"),
            &args,
            &self.dir.path().join(format!("{name}.log")),
            name,
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
        self.servers.push(d);
        self.names.push(name.to_string());
        self.servers.last().expect("just pushed")
    }

    /// The usual grid: fast heartbeats and two servers `s1`, `s2` with every built-in service.
    pub fn two_servers() -> Grid {
        let mut g = Grid::agent(&FAST_HEARTBEATS);
        g.server("s1", "slots = 4\ncalibrate = false\n");
        g.server("s2", "slots = 4\ncalibrate = false\n");
        g.wait_up(2);
        g
    }

    /// A client connected to this grid's agent.
    pub fn client(&self) -> Client {
        let mut cfg = ClientConfig::with_agent(self.agent.addr.clone());
        cfg.token = self.token.clone();
        Client::connect(cfg).unwrap_or_else(|e| panic!("client cannot connect: {e}"))
    }

    /// Waits until `n` servers are up at the agent (panics after 30 s with the logs' tails).
    pub fn wait_up(&self, n: usize) {
        let c = self.client();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let up = c
                .status()
                .map(|s| {
                    s.servers
                        .iter()
                        .filter(|s| s.state == ServerState::Up)
                        .count()
                })
                .unwrap_or(0);
            if up >= n {
                return;
            }
            if Instant::now() > deadline {
                panic!("only {up} of {n} servers came up; logs:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every daemon's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        if let Ok(rd) = std::fs::read_dir(self.dir.path()) {
            for e in rd.flatten() {
                if e.path().extension().is_some_and(|x| x == "log") {
                    out += &format!(
                        "--- {}\n{}\n",
                        e.path().display(),
                        std::fs::read_to_string(e.path()).unwrap_or_default()
                    );
                }
            }
        }
        out
    }
}

/// Polls `f` every 20 ms until it is true or `limit` passes; returns whether it became true.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
