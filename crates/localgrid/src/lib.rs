//! Daemons started on this machine (loopback, ephemeral ports) for the demo, benchmarks and
//! end-to-end tests, and waiting for them to be ready. A daemon is killed when its handle drops,
//! and also when the thread that started it dies (Linux parent-death signal), so no run leaves
//! strays behind.

pub mod cpu_group;
pub mod flood;
pub mod ghost;

use anyhow::Context;
use gridwise_client::Client;
use gridwise_proto::{BuildState, ServerState};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The agent's flags for heartbeats every half second and a server down after 3 s without
/// one: failures show within seconds (the demo, the test bed's grids).
pub fn half_second_heartbeats() -> Vec<String> {
    [
        "--heartbeat-interval-ms",
        "500",
        "--heartbeat-timeout-ms",
        "3000",
    ]
    .map(String::from)
    .to_vec()
}

/// How long a daemon may take to print its `listening <addr>` line.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A process's resident memory, bytes, from /proc (0 once it is gone).
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A running daemon process, killed (SIGKILL) when the handle drops.
pub struct Daemon {
    child: Child,
    /// As its `listening <addr>` line gave it: the port it actually bound.
    pub addr: String,
    /// What it was started as (for messages).
    pub label: String,
}

impl Daemon {
    /// Starts `program args…`, sends its log (stderr) to `log`, and waits for its
    /// `listening <addr>` line. The daemon is killed when the *thread* that started it ends
    /// (Linux's parent-death signal is per thread): start daemons from a thread that outlives
    /// them.
    pub fn spawn(
        program: &Path,
        args: &[String],
        log: &Path,
        label: &str,
    ) -> anyhow::Result<Daemon> {
        Self::spawn_on(&Loopback, program, args, log, label)
    }

    /// Like [`spawn`](Self::spawn), on the host `hosts` gives the daemon `label`.
    pub fn spawn_on(
        hosts: &dyn Hosts,
        program: &Path,
        args: &[String],
        log: &Path,
        label: &str,
    ) -> anyhow::Result<Daemon> {
        let log_file = std::fs::File::create(log)
            .with_context(|| format!("cannot create log file {}", log.display()))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file));
        hosts.place(label, &mut cmd)?;
        die_with_parent(&mut cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {} ({label})", program.display()))?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Keep reading to EOF so the daemon never writes into a closed pipe.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening ") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let mut d = Daemon {
            child,
            addr: String::new(),
            label: label.to_string(),
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => {
                d.addr = addr;
                Ok(d)
            }
            Err(_) => {
                let status = d.child.try_wait().ok().flatten();
                let text = std::fs::read_to_string(log).unwrap_or_default();
                // The daemon's own error line first: a backtrace after it would hide it.
                let error = text.lines().find(|l| l.starts_with("Error: "));
                let tail: String = error
                    .into_iter()
                    .chain(
                        text.lines()
                            .rev()
                            .take(15)
                            .collect::<Vec<_>>()
                            .into_iter()
                            .rev(),
                    )
                    .collect::<Vec<_>>()
                    .join("\n");
                anyhow::bail!(
                    "{label} did not start ({}); its log {}:\n{tail}",
                    status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "no address printed in time".into()),
                    log.display()
                )
            }
        }
    }

    /// For what the handle does not do itself: other signals, reading `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the daemon with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches only the child being set up.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

/// Where a grid's daemons run: the address each listens on and advertises, and how its
/// process is put there. [`Loopback`] for one machine; a test bed of network namespaces
/// (`gridwise-testbed`) for many hosts.
pub trait Hosts: Send + Sync {
    /// The IP address daemon `daemon` (`agent`, or a server's name) listens on.
    fn ip(&self, daemon: &str) -> anyhow::Result<String>;
    /// Prepares the command that starts `daemon` to run on its host.
    fn place(&self, daemon: &str, cmd: &mut Command) -> anyhow::Result<()>;
}

/// Every daemon on 127.0.0.1, each in a session of its own, as a service manager starts
/// daemons: the kernel's scheduler then shares the CPU between the sessions' groups
/// (autogroups) before their processes, not evenly among every runnable process.
pub struct OwnSessions;

impl Hosts for OwnSessions {
    fn ip(&self, _daemon: &str) -> anyhow::Result<String> {
        Ok("127.0.0.1".into())
    }

    fn place(&self, _daemon: &str, cmd: &mut Command) -> anyhow::Result<()> {
        own_session(cmd);
        Ok(())
    }
}

/// Starts `cmd` in a session of its own, as systemd starts a daemon on a real host: with the
/// kernel's autogroups (most distributions' default) the CPU is then shared between the
/// sessions' groups, not among all their threads.
pub fn own_session(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid(2) is async-signal-safe and acts on the child being set up, which is no
    // group leader after the fork, so it cannot fail for that reason.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Every daemon on 127.0.0.1, in this machine's own network.
pub struct Loopback;

impl Hosts for Loopback {
    fn ip(&self, _daemon: &str) -> anyhow::Result<String> {
        Ok("127.0.0.1".into())
    }

    fn place(&self, _daemon: &str, _cmd: &mut Command) -> anyhow::Result<()> {
        Ok(())
    }
}

/// How to start a daemon: a program and the words before its own flags (e.g. `gridwise agent`
/// or `gridwise-agent`).
#[derive(Clone, Debug)]
pub struct Launcher {
    pub program: PathBuf,
    /// Arguments that come first (a subcommand).
    pub prefix: Vec<String>,
}

impl Launcher {
    /// A program run as it is.
    pub fn program(program: PathBuf) -> Self {
        Self {
            program,
            prefix: Vec::new(),
        }
    }

    /// A subcommand of a program, e.g. `gridwise server`.
    pub fn subcommand(program: PathBuf, sub: &str) -> Self {
        Self {
            program,
            prefix: vec![sub.to_string()],
        }
    }
}

/// Set (to anything) to keep a grid's directory, logs included, when it stops.
pub const KEEP_DIR_ENV: &str = "GRIDWISE_KEEP_GRID_DIR";

/// An agent and servers on loopback, each a separate process, with their config files and logs
/// in a temporary folder that goes away with the grid.
pub struct LocalGrid {
    /// [`restart_agent`](Self::restart_agent) replaces it, on the same address.
    pub agent: Daemon,
    /// In start order, aligned with `names`; [`restart_server`](Self::restart_server) replaces
    /// one in place, on a new port.
    pub servers: Vec<Daemon>,
    /// The servers' names, in start order.
    pub names: Vec<String>,
    /// The client token the agent was started with, passed on to servers and clients.
    pub client_token: Option<String>,
    /// The server token the agent was started with, passed on to servers.
    pub server_token: Option<String>,
    /// With mutual TLS: the folder of the grid's CA and certificates.
    pub tls_dir: Option<PathBuf>,
    server: Launcher,
    agent_launcher: Launcher,
    agent_args: Vec<String>,
    hosts: std::sync::Arc<dyn Hosts>,
    dir: tempfile::TempDir,
}

/// The `--tls-*` flags of a holder of `name`'s certificate in `dir`.
fn tls_flags(dir: &Path, name: &str) -> Vec<String> {
    vec![
        "--tls-ca".into(),
        dir.join("ca.pem").display().to_string(),
        "--tls-cert".into(),
        dir.join(format!("{name}.pem")).display().to_string(),
        "--tls-key".into(),
        dir.join(format!("{name}.key")).display().to_string(),
    ]
}

impl LocalGrid {
    /// Starts an agent on an ephemeral loopback port with extra flags (`--client-token C` and
    /// `--server-token S` among them make the grid use those tokens).
    pub fn start(
        agent: &Launcher,
        server: Launcher,
        agent_args: &[String],
    ) -> anyhow::Result<LocalGrid> {
        Self::start_with(agent, server, agent_args, false)
    }

    /// Like [`start`](Self::start), and with `tls` every connection is mutual TLS: a grid CA,
    /// certificates for the agent, each server (under its name) and a client `client`.
    pub fn start_with(
        agent: &Launcher,
        server: Launcher,
        agent_args: &[String],
        tls: bool,
    ) -> anyhow::Result<LocalGrid> {
        Self::start_on(
            std::sync::Arc::new(Loopback),
            agent,
            server,
            agent_args,
            tls,
        )
    }

    /// Like [`start_with`](Self::start_with), each daemon on the host `hosts` gives it.
    pub fn start_on(
        hosts: std::sync::Arc<dyn Hosts>,
        agent: &Launcher,
        server: Launcher,
        agent_args: &[String],
        tls: bool,
    ) -> anyhow::Result<LocalGrid> {
        let mut dir = tempfile::Builder::new()
            .prefix("gridwise-local-")
            .tempdir()?;
        // The daemons' logs and configs are gone with the grid, unless asked for: what a
        // benchmark's daemons did is then still there to read.
        if std::env::var_os(KEEP_DIR_ENV).is_some() {
            dir.disable_cleanup(true);
            eprintln!(
                "{KEEP_DIR_ENV}: the grid's logs stay in {}",
                dir.path().display()
            );
        }
        let mut kept: Vec<String> = agent_args.to_vec();
        let tls_dir = if tls {
            let certs = dir.path().join("certs");
            let here = [hosts.ip("agent")?];
            gridwise_certs::init(&certs, "local", 30)?;
            gridwise_certs::issue(
                &certs,
                gridwise_runtime::wire::CertRole::Agent,
                "agent",
                &here,
                30,
            )?;
            gridwise_certs::issue(
                &certs,
                gridwise_runtime::wire::CertRole::Client,
                "client",
                &[],
                30,
            )?;
            kept.extend(tls_flags(&certs, "agent"));
            Some(certs)
        } else {
            None
        };
        if !kept.iter().any(|a| a == "--data-dir") {
            let data = dir.path().join("agent-data");
            kept.extend(["--data-dir".to_string(), data.display().to_string()]);
        }
        let mut args = agent.prefix.clone();
        args.extend(["--listen".to_string(), format!("{}:0", hosts.ip("agent")?)]);
        args.extend_from_slice(&kept);
        let flag = |name: &str| {
            agent_args
                .iter()
                .position(|a| a == name)
                .and_then(|i| agent_args.get(i + 1))
                .cloned()
        };
        let (client_token, server_token) = (flag("--client-token"), flag("--server-token"));
        let launcher = agent.clone();
        let agent = Daemon::spawn_on(
            hosts.as_ref(),
            &agent.program,
            &args,
            &dir.path().join("agent.log"),
            "agent",
        )?;
        Ok(LocalGrid {
            agent,
            servers: Vec::new(),
            names: Vec::new(),
            client_token,
            server_token,
            tls_dir,
            server,
            agent_launcher: launcher,
            agent_args: kept,
            hosts,
            dir,
        })
    }

    /// Kills the agent (SIGKILL) and starts it again on the same address with the same data
    /// directory: what it had learned must come back from its store.
    pub fn restart_agent(&mut self) -> anyhow::Result<()> {
        self.agent.kill();
        let mut args = self.agent_launcher.prefix.clone();
        args.extend(["--listen".to_string(), self.agent.addr.clone()]);
        args.extend_from_slice(&self.agent_args);
        let log = self.dir.path().join("agent-restarted.log");
        self.agent = Daemon::spawn_on(
            self.hosts.as_ref(),
            &self.agent_launcher.program,
            &args,
            &log,
            "agent",
        )?;
        Ok(())
    }

    /// A grid whose daemons are `program agent …` and `program server …` (the `gridwise` tool).
    pub fn start_gridwise(program: &Path, agent_args: &[String]) -> anyhow::Result<LocalGrid> {
        Self::start_gridwise_with(program, agent_args, false)
    }

    /// The same, with mutual TLS when `tls` (see [`start_with`](Self::start_with)).
    pub fn start_gridwise_with(
        program: &Path,
        agent_args: &[String],
        tls: bool,
    ) -> anyhow::Result<LocalGrid> {
        let agent = Launcher::subcommand(program.to_path_buf(), "agent");
        LocalGrid::start_with(
            &agent,
            Launcher::subcommand(program.to_path_buf(), "server"),
            agent_args,
            tls,
        )
    }

    /// Writes `config_toml` and starts a server named `name` with it, registered with this
    /// agent on an ephemeral loopback port.
    pub fn add_server(&mut self, name: &str, config_toml: &str) -> anyhow::Result<&Daemon> {
        std::fs::write(self.server_config(name), config_toml)?;
        // A second process under a name already started (a test of a contested name) logs
        // to a file of its own, not over the first one's.
        let started = self.names.iter().filter(|n| *n == name).count();
        let log = match started {
            0 => format!("{name}.log"),
            n => format!("{name}-{}.log", n + 1),
        };
        let d = self.spawn_server(name, &log)?;
        self.servers.push(d);
        self.names.push(name.to_string());
        Ok(self.servers.last().expect("just pushed"))
    }

    /// Kills server `i` (SIGKILL) and starts it again under its name and config, on a new
    /// port: what a machine reboot looks like to the grid.
    pub fn restart_server(&mut self, i: usize) -> anyhow::Result<&Daemon> {
        self.servers[i].kill();
        let name = self.names[i].clone();
        self.servers[i] = self.spawn_server(&name, &format!("{name}-restarted.log"))?;
        Ok(&self.servers[i])
    }

    /// The folder server configs are written to: the files a config names by relative paths
    /// are looked for here, as beside any config file.
    pub fn config_dir(&self) -> &Path {
        self.dir.path()
    }

    fn server_config(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.toml"))
    }

    /// Starts the server `name` with its config file, this grid's agent and tokens.
    fn spawn_server(&self, name: &str, log: &str) -> anyhow::Result<Daemon> {
        let mut args = self.server.prefix.clone();
        args.extend([
            "--config".to_string(),
            self.server_config(name).display().to_string(),
            "--name".into(),
            name.into(),
            "--listen".into(),
            format!("{}:0", self.hosts.ip(name)?),
            "--agent".into(),
            self.agent.addr.clone(),
        ]);
        if let Some(t) = &self.client_token {
            args.extend(["--client-token".to_string(), t.clone()]);
        }
        if let Some(t) = &self.server_token {
            args.extend(["--server-token".to_string(), t.clone()]);
        }
        if let Some(certs) = &self.tls_dir {
            if !certs.join(format!("{name}.pem")).exists() {
                let here = [self.hosts.ip(name)?];
                gridwise_certs::issue(
                    certs,
                    gridwise_runtime::wire::CertRole::Server,
                    name,
                    &here,
                    30,
                )?;
            }
            args.extend(tls_flags(certs, name));
        }
        Daemon::spawn_on(
            self.hosts.as_ref(),
            &self.server.program,
            &args,
            &self.dir.path().join(log),
            name,
        )
    }

    /// Writes `toml` to a file in the grid's folder and returns its path (for `--config`).
    pub fn write_file(&self, name: &str, toml: &str) -> anyhow::Result<PathBuf> {
        let p = self.dir.path().join(name);
        std::fs::write(&p, toml)?;
        Ok(p)
    }

    /// Client settings for this grid: its agent and client token, defaults otherwise.
    pub fn client_config(&self) -> gridwise_client::ClientConfig {
        let mut cfg = gridwise_client::ClientConfig::with_agent(self.agent.addr.clone());
        cfg.token = self.client_token.clone();
        cfg.tls = self
            .tls_dir
            .as_ref()
            .map(|d| gridwise_runtime::wire::TlsFiles {
                ca: d.join("ca.pem"),
                cert: d.join("client.pem"),
                key: d.join("client.key"),
            });
        cfg
    }

    /// The grid's temporary folder, deleted with it: logs, config files and (unless
    /// `--data-dir` was given) the agent's data directory.
    pub fn log_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The address a daemon logged for `what` (e.g. `metrics at /metrics`, `dashboard at /`):
    /// the `addr=` field of that line in its log file `log` (`agent.log`, `<server>.log`).
    pub fn logged_addr(&self, log: &str, what: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.dir.path().join(log)).ok()?;
        let line = text.lines().find(|l| l.contains(what))?;
        let at = line.find("addr=")? + "addr=".len();
        Some(line[at..].split_whitespace().next()?.to_string())
    }

    /// Every daemon's log, for error messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        if let Ok(rd) = std::fs::read_dir(self.dir.path()) {
            for e in rd.flatten() {
                if e.path().extension().is_some_and(|x| x == "log") {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    out += &format!("--- {}\n{text}\n", e.path().display());
                }
            }
        }
        out
    }
}

/// Polls the agent until `n` servers are up.
pub fn wait_for_servers(client: &Client, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let st = client.status()?;
        let up = st
            .servers
            .iter()
            .filter(|s| s.state == ServerState::Up)
            .count();
        if up >= n {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {up} of {n} servers registered within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls the agent until `servers` models are built, with a progress bar.
pub fn wait_for_models(client: &Client, servers: usize, timeout: Duration) -> anyhow::Result<()> {
    let bar = indicatif::ProgressBar::new(servers as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "  {spinner} [{bar:20}] {pos}/{len} models built  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(100));
    let deadline = Instant::now() + timeout;
    loop {
        let models = client.models()?;
        let done = models
            .iter()
            .filter(|m| {
                m.progress
                    .as_ref()
                    .is_some_and(|p| p.state == BuildState::Done)
            })
            .count();
        let points: u32 = models.iter().map(|m| m.points).sum();
        bar.set_position(done as u64);
        bar.set_message(format!("{points} points measured"));
        if let Some(f) = models
            .iter()
            .find_map(|m| match m.progress.as_ref().map(|p| &p.state) {
                Some(BuildState::Failed(e)) => Some(format!("{}: {e}", m.server)),
                _ => None,
            })
        {
            bar.abandon();
            anyhow::bail!("a model build failed on {f}");
        }
        if done >= servers {
            bar.finish_with_message(format!("{points} points measured"));
            return Ok(());
        }
        if Instant::now() > deadline {
            bar.abandon();
            anyhow::bail!("model builds did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
