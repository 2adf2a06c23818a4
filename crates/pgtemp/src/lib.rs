//! A real PostgreSQL server for tests and benchmarks: `initdb` into a temporary directory,
//! `postgres` on a free port of 127.0.0.1, stopped and removed when dropped (or, for
//! [`TempPostgres::shared`], when the process exits). The binaries are Debian's
//! (`apt-get install postgresql`; `.ci/run` installs them).
//!
//! PostgreSQL refuses to run as root, and CI runs as root: there the cluster belongs to the
//! `postgres` user the Debian package creates (or `nobody`), and the server runs as it.

use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long the server may take to accept connections after it started.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// The superuser of every cluster made here (trust authentication on loopback).
pub const SUPERUSER: &str = "postgres";

/// A running PostgreSQL cluster of our own.
pub struct TempPostgres {
    child: Option<Child>,
    dir: Option<tempfile::TempDir>,
    port: u16,
    owner: Option<(u32, u32)>,
    bin: PathBuf,
    log: PathBuf,
    /// The address it listens on.
    listen: String,
    /// Puts the server's process where it runs (a test bed's host), at every start.
    place: Option<Place>,
}

/// Prepares the server's command to run elsewhere than this machine's network (a host of a
/// test bed of network namespaces).
pub type Place = Box<dyn Fn(&mut Command) -> Result<(), Error> + Send + Sync>;

/// Why a cluster could not be made.
pub type Error = String;

/// The directory holding `initdb` and `postgres`: on `PATH`, else the newest of Debian's
/// `/usr/lib/postgresql/<version>/bin`.
pub fn bin_dir() -> Result<PathBuf, Error> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    for dir in on_path {
        if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
            return Ok(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        "PostgreSQL's server is not installed (no initdb on PATH or under /usr/lib/postgresql): \
         install it with `apt-get install postgresql` (.ci/run does)"
            .to_string()
    })
}

/// The user the cluster runs as when we are root: PostgreSQL will not run as root.
fn unprivileged_owner() -> Result<Option<(u32, u32)>, Error> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    for name in [SUPERUSER, "nobody"] {
        let c = CString::new(name).expect("no NUL in a user name");
        // SAFETY: getpwnam returns a pointer into static storage or null; read at once.
        let pw = unsafe { libc::getpwnam(c.as_ptr()) };
        if !pw.is_null() {
            // SAFETY: checked non-null above.
            let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
            return Ok(Some((uid, gid)));
        }
    }
    Err("running as root and no `postgres` or `nobody` user to run PostgreSQL as".into())
}

fn chown(path: &Path, owner: Option<(u32, u32)>) -> Result<(), Error> {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| format!("cannot give {} to uid {uid}: {e}", path.display()))?;
    }
    Ok(())
}

fn command(bin: &Path, name: &str, owner: Option<(u32, u32)>) -> Command {
    let mut c = Command::new(bin.join(name));
    if let Some((uid, gid)) = owner {
        c.uid(uid).gid(gid);
    }
    c.env_remove("PGDATA").env("LC_ALL", "C");
    c
}

fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

impl TempPostgres {
    /// Makes a cluster and starts its server; returns once it accepts connections.
    pub fn start() -> Result<TempPostgres, Error> {
        Self::start_on("127.0.0.1", None)
    }

    /// Like [`start`](Self::start), the server listening on `ip` (accepting every client that
    /// reaches it, without a password: for private test networks only) and started through
    /// `place`. This process reaches it through its Unix socket to make databases, so it need
    /// not be on the server's network itself.
    pub fn start_on(ip: &str, place: Option<Place>) -> Result<TempPostgres, Error> {
        let bin = bin_dir()?;
        let owner = unprivileged_owner()?;
        let dir = tempfile::Builder::new()
            .prefix("gridwise-pg-")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
        chown(dir.path(), owner)?;
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        let data = dir.path().join("data");
        let out = command(&bin, "initdb", owner)
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--no-locale",
            ])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", bin.join("initdb").display()))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if ip != "127.0.0.1" {
            let hba = data.join("pg_hba.conf");
            let mut rules = fs::read_to_string(&hba).map_err(|e| e.to_string())?;
            rules.push_str("host all all 0.0.0.0/0 trust\n");
            fs::write(&hba, rules).map_err(|e| e.to_string())?;
        }
        let log = dir.path().join("postgres.log");
        let mut pg = TempPostgres {
            child: None,
            dir: Some(dir),
            port: 0,
            owner,
            bin,
            log,
            listen: ip.to_string(),
            place,
        };
        pg.run_server()?;
        Ok(pg)
    }

    /// Starts the server on the cluster (again, after [`kill`](Self::kill)), on a free port.
    pub fn run_server(&mut self) -> Result<(), Error> {
        let mut last = String::new();
        // A port found free may be taken before the server binds it: try another.
        for _ in 0..3 {
            let port = if self.port == 0 {
                free_port()?
            } else {
                self.port
            };
            match self.spawn_on(port) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    last = e;
                    self.port = 0;
                }
            }
        }
        Err(last)
    }

    fn spawn_on(&mut self, port: u16) -> Result<(), Error> {
        let dir = self
            .dir
            .as_ref()
            .expect("the cluster exists")
            .path()
            .to_path_buf();
        let log = fs::File::create(&self.log).map_err(|e| e.to_string())?;
        chown(&self.log, self.owner)?;
        // A placed server enters its network namespace first, which needs root: it changes to
        // its owner after that (`Command::uid` would change before every `pre_exec`).
        let placed_owner = self.place.as_ref().and(self.owner);
        let mut c = command(
            &self.bin,
            "postgres",
            self.owner.filter(|_| self.place.is_none()),
        );
        c.arg("-D")
            .arg(dir.join("data"))
            .args(["-p", &port.to_string(), "-c"])
            .arg(format!("listen_addresses={}", self.listen))
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.display()))
            .args(["-c", "fsync=off", "-c", "max_connections=300"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        if let Some(place) = &self.place {
            place(&mut c)?;
        }
        if let Some((uid, gid)) = placed_owner {
            // SAFETY: setgroups, setgid and setuid are async-signal-safe; they run in the
            // child before exec.
            unsafe {
                c.pre_exec(move || {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        // SAFETY: prctl is async-signal-safe; it runs in the child before exec.
        unsafe {
            c.pre_exec(|| {
                // The server goes if we do (SIGQUIT: its immediate shutdown).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT);
                Ok(())
            });
        }
        let mut child = c
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.join("postgres").display()))?;
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "PostgreSQL exited at start ({status}): {}",
                    self.log_tail()
                ));
            }
            if self.admin_on(port).is_ok() {
                self.port = port;
                self.child = Some(child);
                return Ok(());
            }
            if started.elapsed() > READY_WITHIN {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "PostgreSQL did not accept connections within {READY_WITHIN:?}: {}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    fn url_on(&self, port: u16, db: &str) -> String {
        format!("postgres://{SUPERUSER}@{}:{port}/{db}", self.listen)
    }

    /// A superuser connection through the server's Unix socket (in the cluster's directory):
    /// it works from any network namespace.
    fn admin_on(&self, port: u16) -> Result<postgres::Client, postgres::Error> {
        let dir = self.dir.as_ref().expect("the cluster exists").path();
        postgres::Config::new()
            .host_path(dir)
            .port(port)
            .user(SUPERUSER)
            .dbname("postgres")
            .connect(postgres::NoTls)
    }

    /// The server's port (on its address: 127.0.0.1 unless started with
    /// [`start_on`](Self::start_on)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        self.url_on(self.port, db)
    }

    /// Makes a new, empty database and returns its URL: one per test keeps tests apart on one
    /// server.
    pub fn create_database(&self, name: &str) -> Result<String, Error> {
        let mut c = self
            .admin_on(self.port)
            .map_err(|e| format!("cannot connect to the test server: {e}"))?;
        c.batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .map_err(|e| format!("cannot create database {name}: {e}"))?;
        Ok(self.url(name))
    }

    /// Stops the server at once, as a crash or a lost host would (SIGKILL: no shutdown, the
    /// next start recovers from the write-ahead log); the cluster stays for
    /// [`run_server`](Self::run_server).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            // Its backends notice the postmaster gone and end; wait for them before a restart.
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops the server cleanly (fast shutdown) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling our own child process.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// One server for the whole process (a test binary): started on first use from a thread
    /// that lives as long as the process (the parent-death signal follows the thread that
    /// started the server), stopped and removed when the process exits.
    pub fn shared() -> Result<&'static Mutex<TempPostgres>, Error> {
        SHARED
            .get_or_init(|| {
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let _ = tx.send(TempPostgres::start());
                    loop {
                        std::thread::park();
                    }
                });
                let pg = rx.recv().map_err(|e| e.to_string())??;
                // SAFETY: registering a plain extern "C" function.
                unsafe { libc::atexit(stop_shared) };
                Ok(Mutex::new(pg))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

static SHARED: OnceLock<Result<Mutex<TempPostgres>, Error>> = OnceLock::new();

extern "C" fn stop_shared() {
    if let Some(Ok(m)) = SHARED.get() {
        if let Ok(mut pg) = m.lock() {
            pg.stop();
            pg.dir.take();
        }
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        self.stop();
    }
}
