//! Daemons started on this machine (loopback, ephemeral ports) for the demo, benchmarks and
//! end-to-end tests. A daemon is killed when its handle drops, and also when this process dies
//! (Linux parent-death signal), so no run leaves strays behind.

use anyhow::Context;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a daemon may take to print its `listening <addr>` line.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running daemon process.
pub struct Daemon {
    child: Child,
    /// The address it listens on.
    pub addr: String,
    /// What it was started as (for messages).
    pub label: String,
}

impl Daemon {
    /// Starts `program args…`, sends its log (stderr) to `log`, and waits for its
    /// `listening <addr>` line.
    pub fn spawn(
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
                let tail = std::fs::read_to_string(log).unwrap_or_default();
                let tail: String = tail
                    .lines()
                    .rev()
                    .take(15)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
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

    /// The process id.
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

/// An agent and servers on loopback, each a separate process, with logs in a temporary folder.
pub struct LocalGrid {
    /// The agent.
    pub agent: Daemon,
    /// The servers, in start order.
    pub servers: Vec<Daemon>,
    dir: tempfile::TempDir,
    program: PathBuf,
}

impl LocalGrid {
    /// Starts an agent with `agent_args` (after `agent --listen 127.0.0.1:0`) using
    /// `program agent …` / `program server …` (the `gridwise` binary).
    pub fn start_agent(program: &Path, agent_args: &[String]) -> anyhow::Result<LocalGrid> {
        let dir = tempfile::Builder::new()
            .prefix("gridwise-local-")
            .tempdir()?;
        let mut args = vec!["agent".to_string(), "--listen".into(), "127.0.0.1:0".into()];
        args.extend_from_slice(agent_args);
        let agent = Daemon::spawn(program, &args, &dir.path().join("agent.log"), "agent")?;
        Ok(LocalGrid {
            agent,
            servers: Vec::new(),
            dir,
            program: program.to_path_buf(),
        })
    }

    /// Writes `config_toml` and starts a server with it, registered with this agent.
    pub fn add_server(&mut self, name: &str, config_toml: &str) -> anyhow::Result<&Daemon> {
        let cfg = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&cfg, config_toml)?;
        let args = vec![
            "server".to_string(),
            "--config".into(),
            cfg.display().to_string(),
            "--name".into(),
            name.into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--agent".into(),
            self.agent.addr.clone(),
        ];
        let log = self.dir.path().join(format!("{name}.log"));
        let d = Daemon::spawn(&self.program, &args, &log, name)?;
        self.servers.push(d);
        Ok(self.servers.last().expect("just pushed"))
    }

    /// Where the logs are.
    pub fn log_dir(&self) -> &Path {
        self.dir.path()
    }
}
