//! Harness for end-to-end tests: builds the real daemons, starts an agent and servers as
//! processes on 127.0.0.1 with ephemeral ports, and kills them all when the grid drops (or when
//! the test process dies).

use gridwise_client::Client;
use gridwise_localgrid::{Daemon, Launcher, LocalGrid, wait_for_servers};
use std::ops::{Deref, DerefMut};
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

/// The repository's root folder (canonical), where the README, `deploy/` and `examples/` are.
pub fn repo_root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository's root folder")
}

/// The target directory of this test build (`target/<profile>`) and cargo's name for its
/// profile.
pub fn target_dir() -> Result<(PathBuf, String), String> {
    // target/<profile>/deps/<test-exe> → target/<profile>
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .ok_or("cannot find the target directory")?
        .to_path_buf();
    let profile = dir.file_name().and_then(|p| p.to_str()).unwrap_or("debug");
    let profile = if profile == "debug" { "dev" } else { profile }.to_string();
    Ok((dir, profile))
}

/// Runs `cargo build` for `what` in this test build's profile; returns the target directory.
pub fn cargo_build(what: &[&str]) -> Result<PathBuf, String> {
    let (dir, profile) = target_dir()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--quiet", "--profile", &profile])
        .args(what)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build {} failed:\n{}",
            what.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(dir)
}

/// Path of a workspace binary, built (or brought up to date) once per test process so a test
/// never runs a stale daemon.
pub fn bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = BUILT
        .get_or_init(|| cargo_build(&["-p", "gridwise-agent", "-p", "gridwise-server", "--bins"]))
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"));
    dir.join(name)
}

/// A loopback port free now (for a daemon whose address a script must know before it starts;
/// another process may take it first, which the daemon then says).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a loopback port")
        .local_addr()
        .expect("its address")
        .port()
}

/// Path of the `gridwise` command-line program, built (or brought up to date) once per test
/// process.
pub fn gridwise_cli() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = BUILT
        .get_or_init(|| cargo_build(&["-p", "gridwise", "--bin", "gridwise"]))
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"));
    dir.join("gridwise")
}

/// The Python of a virtual environment under `target/` with `packages` installed (pip, from
/// PyPI): made once per target directory, topped up as tests ask.
pub fn python_venv(packages: &[&str]) -> PathBuf {
    let (target, _) = target_dir().unwrap_or_else(|e| panic!("{e}"));
    let venv = target.join("python-venv");
    let python = venv.join("bin/python");
    let run = |cmd: &mut Command, what: &str| {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        assert!(
            out.status.success(),
            "{what} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // One test at a time makes or changes the environment.
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if !python.exists() {
        run(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "python3 -m venv (Python 3.9 or newer with venv is needed)",
        );
    }
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(packages),
        &format!("pip install {}", packages.join(" ")),
    );
    python
}

/// Where this build's `libgridwise.a` and `libgridwise.so` are, built first.
pub fn capi_lib_dir() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| cargo_build(&["-p", "gridwise-capi", "--lib"]))
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The C examples (`examples/c`), compiled by their Makefile with the system C compiler
/// against this build's `libgridwise.a` into `out`; returns `out`.
pub fn c_examples(out: &std::path::Path) -> PathBuf {
    let lib = capi_lib_dir();
    let examples = repo_root().join("examples/c");
    let make = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&examples)
        .arg(format!("BUILD={}", out.display()))
        .arg(format!("GRIDWISE_LIB={}", lib.display()))
        .output()
        .unwrap_or_else(|e| panic!("cannot run make (install make and a C compiler): {e}"));
    assert!(
        make.status.success(),
        "building the C examples failed:\n{}{}",
        String::from_utf8_lossy(&make.stdout),
        String::from_utf8_lossy(&make.stderr)
    );
    out.to_path_buf()
}

/// A local grid of the real `gridwise-agent` and `gridwise-server` processes.
pub struct Grid(pub LocalGrid, Option<tempfile::TempDir>);

impl Deref for Grid {
    type Target = LocalGrid;
    fn deref(&self) -> &LocalGrid {
        &self.0
    }
}

impl DerefMut for Grid {
    fn deref_mut(&mut self) -> &mut LocalGrid {
        &mut self.0
    }
}

impl Grid {
    /// Starts an agent with extra flags.
    pub fn agent(extra: &[&str]) -> Grid {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let agent = Launcher::program(bin("gridwise-agent"));
        let server = Launcher::program(bin("gridwise-server"));
        Grid(
            LocalGrid::start(&agent, server, &extra).unwrap_or_else(|e| panic!("{e:#}")),
            None,
        )
    }

    /// Starts an agent with extra flags, it and every server it gets in a session of its own
    /// (`OwnSessions`), as a service manager starts daemons.
    pub fn agent_in_own_sessions(extra: &[&str]) -> Grid {
        Grid::agent_placed(std::sync::Arc::new(gridwise_localgrid::OwnSessions), extra)
    }

    /// Starts an agent with extra flags, it and every server a daemon in a session of its own
    /// inside the control group `group` (a cgroup of the CPU controller).
    pub fn agent_in_cpu_group(
        group: std::sync::Arc<gridwise_localgrid::cpu_group::CpuGroup>,
        extra: &[&str],
    ) -> Grid {
        let hosts = gridwise_localgrid::cpu_group::InCpuGroup(group);
        Grid::agent_placed(std::sync::Arc::new(hosts), extra)
    }

    /// Starts an agent with extra flags, every daemon placed on 127.0.0.1 as `hosts` says.
    fn agent_placed(hosts: std::sync::Arc<dyn gridwise_localgrid::Hosts>, extra: &[&str]) -> Grid {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let agent = Launcher::program(bin("gridwise-agent"));
        let server = Launcher::program(bin("gridwise-server"));
        Grid(
            LocalGrid::start_on(hosts, &agent, server, &extra, false)
                .unwrap_or_else(|e| panic!("{e:#}")),
            None,
        )
    }

    /// Starts an agent with extra flags, every connection of the grid mutual TLS (certificates
    /// in `tls_dir`: the agent's, one per server, and a client's named `client`).
    pub fn agent_tls(extra: &[&str]) -> Grid {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let agent = Launcher::program(bin("gridwise-agent"));
        let server = Launcher::program(bin("gridwise-server"));
        Grid(
            LocalGrid::start_with(&agent, server, &extra, true).unwrap_or_else(|e| panic!("{e:#}")),
            None,
        )
    }

    /// Starts an agent with this TOML config (and extra flags).
    pub fn agent_with_config(toml: &str, extra: &[&str]) -> Grid {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("agent.toml");
        std::fs::write(&path, toml).expect("the agent config is written");
        let mut args: Vec<&str> = extra.to_vec();
        let p = path.display().to_string();
        args.extend(["--config", &p]);
        let mut g = Grid::agent(&args);
        // Kept for restarts, which read it again.
        g.1 = Some(dir);
        g
    }

    /// Starts a server named `name` with this TOML config.
    pub fn server(&mut self, name: &str, toml: &str) -> &Daemon {
        self.0
            .add_server(name, toml)
            .unwrap_or_else(|e| panic!("{e:#}"))
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
        Client::connect(self.client_config())
            .unwrap_or_else(|e| panic!("client cannot connect: {e}"))
    }

    /// Waits until `n` servers are up at the agent (panics after 30 s with the logs).
    pub fn wait_up(&self, n: usize) {
        if let Err(e) = wait_for_servers(&self.client(), n, Duration::from_secs(30)) {
            panic!("{e:#}; logs:\n{}", self.logs());
        }
    }
}

/// Sends `signal` (e.g. `libc::SIGSTOP`) to a daemon.
pub fn signal(pid: u32, signal: i32) {
    // SAFETY: kill only sends a signal to a process this test started.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

pub use gridwise_localgrid::rss_bytes;

/// Open file descriptors of a daemon.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
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

/// Talking to daemons below the client library: raw RPC clients in a role of one's choosing,
/// as a hostile or confused peer would.
pub mod raw {
    use gridwise_proto::{AgentApiClient, ServerApiClient};
    use gridwise_runtime::wire::{self, DialConfig, Role};

    /// A runtime for raw clients.
    pub fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    }

    /// Dial settings for `role` with `token`, owning things as `principal`.
    pub fn dial(role: Role, token: Option<&str>, principal: &str) -> DialConfig {
        DialConfig {
            principal: principal.to_string(),
            ..DialConfig::new(role, token.map(str::to_string))
        }
    }

    /// An agent client over a fresh connection (call inside the runtime).
    pub async fn agent(addr: &str, dial: &DialConfig) -> Result<AgentApiClient, wire::WireError> {
        let (framed, _) = wire::connect(addr, dial, "test").await?;
        Ok(AgentApiClient::new(wire::client_config(), wire::client_transport(framed)).spawn())
    }

    /// A server client over a fresh connection (call inside the runtime).
    pub async fn server(addr: &str, dial: &DialConfig) -> Result<ServerApiClient, wire::WireError> {
        let (framed, _) = wire::connect(addr, dial, "test").await?;
        Ok(ServerApiClient::new(wire::client_config(), wire::client_transport(framed)).spawn())
    }

    /// A deadline for a raw request.
    pub fn ctx() -> tarpc::context::Context {
        wire::context(std::time::Duration::from_secs(10))
    }
}

/// A plain HTTP/1.1 GET of `path` on `addr` (a daemon's metrics or dashboard): status line,
/// headers and body as text.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}
