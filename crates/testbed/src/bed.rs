//! The shell that makes a topology real: namespaces, veth pairs, bridges, routes and tc
//! shaping, then partitions and rate changes on demand, and the removal of all of it on
//! every way out (drop, error, panic, SIGINT/SIGTERM, and `testbed down` for what a killed
//! process left).

use crate::plan::{self, Cmd};
use crate::topology::{Cut, LinkRef, Rate, Role, Topology};
use anyhow::{Context, bail};
use std::collections::{HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// A built test bed; dropping it removes every namespace it made (and kills what runs in
/// them).
pub struct Testbed {
    topo: Topology,
    netem: bool,
    state: Mutex<State>,
    /// What could not be emulated, for the user to read (e.g. no netem).
    pub notes: Vec<String>,
}

#[derive(Default)]
struct State {
    rates: HashMap<LinkRef, Rate>,
    cuts: HashSet<Cut>,
}

/// Namespaces of live beds in this process, removed by the signal handler on SIGINT/SIGTERM.
fn live() -> &'static Mutex<Vec<String>> {
    static LIVE: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(Vec::new()))
}

/// Who waits in [`until_signal`], told of a signal instead of the process exiting.
fn waiter() -> &'static Mutex<Option<std::sync::mpsc::Sender<i32>>> {
    static WAITER: OnceLock<Mutex<Option<std::sync::mpsc::Sender<i32>>>> = OnceLock::new();
    WAITER.get_or_init(|| Mutex::new(None))
}

/// Waits for SIGINT, SIGTERM or SIGHUP (or `limit`), so that a program holding a bed can end
/// the ordinary way and drop what it holds; returns the signal, if one came.
pub fn until_signal(limit: Option<std::time::Duration>) -> anyhow::Result<Option<i32>> {
    clean_up_on_signals()?;
    let (tx, rx) = std::sync::mpsc::channel();
    *waiter().lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    let got = match limit {
        Some(d) => rx.recv_timeout(d).ok(),
        None => rx.recv().ok(),
    };
    *waiter().lock().unwrap_or_else(|e| e.into_inner()) = None;
    Ok(got)
}

/// Once per process: on SIGINT, SIGTERM or SIGHUP, tell the program if it waits in
/// [`until_signal`]; otherwise remove every live bed's namespaces and exit as the signal
/// would have.
fn clean_up_on_signals() -> anyhow::Result<()> {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot install the test bed's signal handler")?;
    let _ = INSTALLED.set(());
    std::thread::Builder::new()
        .name("testbed-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if let Some(tx) = waiter().lock().unwrap_or_else(|e| e.into_inner()).take() {
                    let _ = tx.send(sig);
                    continue;
                }
                let names = std::mem::take(&mut *live().lock().unwrap_or_else(|e| e.into_inner()));
                eprintln!("testbed: signal {sig}: removing {} namespaces", names.len());
                for n in names.iter().rev() {
                    remove_namespace(n);
                }
                std::process::exit(128 + sig);
            }
        })?;
    Ok(())
}

/// Runs one planned command; its stderr becomes the error.
fn run(cmd: &Cmd) -> anyhow::Result<()> {
    let mut c = match (&cmd.netns, cmd.program) {
        (Some(ns), "ip") => {
            let mut c = Command::new("ip");
            c.args(["-n", ns]);
            c
        }
        (Some(ns), p) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, p]);
            c
        }
        (None, p) => Command::new(p),
    };
    c.args(&cmd.args);
    let out = c
        .output()
        .with_context(|| format!("cannot run `{}`: is iproute2 installed?", cmd.shown()))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            cmd.shown(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The processes inside a namespace, killed before it goes (a daemon left inside would keep
/// its links alive after the name is gone).
fn kill_inside(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Ok(pid) = pid.parse::<i32>() {
                // SAFETY: kill(2) with a pid read from the namespace; no memory is touched.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

fn remove_namespace(ns: &str) {
    kill_inside(ns);
    let _ = Command::new("ip").args(["netns", "del", ns]).output();
}

/// The namespaces now present whose names start with `prefix`.
pub fn namespaces_with_prefix(prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Removes whatever a bed of this topology left behind (a process killed with SIGKILL
/// cannot clean up); returns the namespaces removed.
pub fn clear(topo: &Topology) -> Vec<String> {
    let found = namespaces_with_prefix(&plan::prefix(&topo.name));
    for n in &found {
        remove_namespace(n);
    }
    found
}

/// What the bed needs, checked before anything is created, so that a machine without it
/// gets a reason rather than a half-built bed.
fn preflight() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        bail!(
            "the test bed needs root (CAP_NET_ADMIN) to create network namespaces and shape \
             links; this process runs as uid {euid}. Run it as root (CI does)."
        );
    }
    for (p, arg) in [("ip", "-V"), ("tc", "-V")] {
        Command::new(p).arg(arg).output().with_context(|| {
            format!("the test bed needs `{p}` from iproute2: apt-get install iproute2")
        })?;
    }
    Ok(())
}

/// Whether the kernel has netem (this kind of VM has tbf and htb but not netem): tried on
/// the loopback of a namespace that is about to be shaped anyway.
fn has_netem(ns: &str) -> bool {
    let add = Cmd {
        program: "tc",
        netns: Some(ns.to_string()),
        args: ["qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
            .map(String::from)
            .to_vec(),
    };
    let ok = run(&add).is_ok();
    if ok {
        let mut del = add.clone();
        del.args = ["qdisc", "del", "dev", "lo", "root"]
            .map(String::from)
            .to_vec();
        let _ = run(&del);
    }
    ok
}

impl Testbed {
    /// Builds the topology: leftovers of an earlier bed of the same name are removed first;
    /// on any error, everything made so far is removed before the error returns.
    pub fn up(topo: Topology) -> anyhow::Result<Testbed> {
        Self::up_then(topo, &[])
    }

    /// [`up`](Self::up), then `extra` commands: how the tests make a build fail half-way.
    #[doc(hidden)]
    pub fn up_then(topo: Topology, extra: &[Cmd]) -> anyhow::Result<Testbed> {
        preflight()?;
        clean_up_on_signals()?;
        let stale = clear(&topo);
        let mut notes = Vec::new();
        if !stale.is_empty() {
            notes.push(format!(
                "removed {} namespaces an earlier bed named {:?} left behind",
                stale.len(),
                topo.name
            ));
        }
        let mut rates = HashMap::new();
        for h in &topo.hosts {
            rates.insert(LinkRef::Host(h.name.clone()), h.link);
        }
        for s in &topo.sites {
            rates.insert(LinkRef::Site(s.name.clone()), s.uplink);
        }
        let mut bed = Testbed {
            topo,
            netem: false,
            state: Mutex::new(State {
                rates,
                cuts: HashSet::new(),
            }),
            notes,
        };
        // From here on, a failure drops the bed, and the drop removes what was made.
        for ns in plan::namespaces(&bed.topo) {
            live()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(ns.clone());
            let out = Command::new("ip")
                .args(["netns", "add", &ns])
                .output()
                .context("cannot run `ip netns add`: is iproute2 installed?")?;
            if !out.status.success() {
                bail!(
                    "cannot create the network namespace {ns}: {} (the test bed needs root and \
                     a kernel with network namespaces)",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        if bed.topo.wants_latency() {
            bed.netem = has_netem(&plan::core_ns(&bed.topo));
            if !bed.netem {
                bed.notes.push(
                    "latency not emulated: this kernel has no netem (sch_netem); links run at \
                     their rates with no added delay"
                        .into(),
                );
            }
        }
        for cmd in plan::build(&bed.topo, bed.netem)?.iter().chain(extra) {
            run(cmd)?;
        }
        Ok(bed)
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Whether links get the delay the topology asks for.
    pub fn has_latency(&self) -> bool {
        self.netem
    }

    pub fn namespace(&self, host: &str) -> anyhow::Result<String> {
        self.topo.host(host)?;
        Ok(plan::host_ns(&self.topo, host))
    }

    pub fn addr(&self, host: &str) -> anyhow::Result<String> {
        self.topo.addr(host)
    }

    /// A command that runs `program` inside `host`'s namespace.
    pub fn command(
        &self,
        host: &str,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> anyhow::Result<Command> {
        let mut c = Command::new(program);
        self.place(host, &mut c)?;
        Ok(c)
    }

    /// Makes `cmd` start inside `host`'s namespace.
    pub fn place(&self, host: &str, cmd: &mut Command) -> anyhow::Result<()> {
        use std::os::unix::process::CommandExt;
        let ns = self.namespace(host)?;
        let file = std::fs::File::open(format!("/run/netns/{ns}"))
            .with_context(|| format!("the namespace {ns} is gone: is the test bed still up?"))?;
        // SAFETY: setns(2) on a descriptor the closure owns; async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// Moves the calling thread into `host`'s namespace: every socket it (and every thread
    /// it starts from now on, such as a client's runtime) opens is on that host.
    pub fn enter(&self, host: &str) -> anyhow::Result<()> {
        let ns = self.namespace(host)?;
        let file = std::fs::File::open(format!("/run/netns/{ns}"))
            .with_context(|| format!("the namespace {ns} is gone: is the test bed still up?"))?;
        // SAFETY: setns(2) on a descriptor held open for the call.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!("cannot enter {ns}: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Cuts `what` off: packets across it are dropped without a word, as a pulled cable or a
    /// dead router does. Until [`heal`](Self::heal).
    pub fn partition(&self, what: &Cut) -> anyhow::Result<()> {
        self.cut_or_heal(what, false).map(drop)
    }

    pub fn heal(&self, what: &Cut) -> anyhow::Result<()> {
        self.cut_or_heal(what, true).map(drop)
    }

    /// Cuts or heals `what`, healed links at their current rates; returns when the first rule
    /// was in place (the cut or heal took hold then, on its first link).
    pub fn cut_or_heal(&self, what: &Cut, heal: bool) -> anyhow::Result<Option<Instant>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let rates = st.rates.clone();
        let mut held = None;
        for cmd in plan::cut(&self.topo, what, heal, &|l| rates[l], self.netem)? {
            run(&cmd)?;
            held.get_or_insert_with(Instant::now);
        }
        if heal {
            st.cuts.remove(what);
        } else {
            st.cuts.insert(what.clone());
        }
        Ok(held)
    }

    /// Changes a link's rate from now on (a link that is cut stays cut, and heals at the new
    /// rate).
    pub fn set_rate(&self, link: &LinkRef, rate: Rate) -> anyhow::Result<()> {
        self.topo.check_link(link)?;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.rates.insert(link.clone(), rate);
        let cut = match link {
            LinkRef::Host(h) => Cut::Host(h.clone()),
            LinkRef::Site(s) => Cut::Site(s.clone()),
        };
        if st.cuts.contains(&cut) {
            return Ok(());
        }
        let delay = if self.netem {
            plan::latency_ms(&self.topo, link)?
        } else {
            None
        };
        for (ns, dev) in plan::link_ends(&self.topo, link)? {
            for cmd in plan::shape(&ns, &dev, rate, delay) {
                run(&cmd)?;
            }
        }
        Ok(())
    }

    pub fn rate(&self, link: &LinkRef) -> Option<Rate> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rates
            .get(link)
            .copied()
    }

    /// The host that runs the agent: the one with role `agent`, else one named `agent`.
    pub fn agent_host(&self) -> anyhow::Result<&str> {
        self.topo
            .with_role(Role::Agent)
            .next()
            .map(|h| h.name.as_str())
            .or_else(|| self.topo.host("agent").ok().map(|h| h.name.as_str()))
            .context("the topology has no host with role = \"agent\"")
    }

    fn remove(&self) {
        let names = plan::namespaces(&self.topo);
        for n in names.iter().rev() {
            remove_namespace(n);
        }
        live()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|n| !names.contains(n));
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.remove();
    }
}

/// An agent (`program agent`) on the bed's agent host with half-second heartbeats, ready for
/// servers (`program server`, each on the host of its name): `program` is the `gridwise`
/// tool.
pub fn start_grid(
    bed: &std::sync::Arc<Testbed>,
    program: &std::path::Path,
) -> anyhow::Result<gridwise_localgrid::LocalGrid> {
    use gridwise_localgrid::{Launcher, LocalGrid, half_second_heartbeats};
    LocalGrid::start_on(
        bed.clone(),
        &Launcher::subcommand(program.to_path_buf(), "agent"),
        Launcher::subcommand(program.to_path_buf(), "server"),
        &half_second_heartbeats(),
        false,
    )
}

/// Daemons of a [`gridwise_localgrid::LocalGrid`] run on the bed's hosts: the agent on the
/// agent host, every other daemon on the host of its name.
impl gridwise_localgrid::Hosts for Testbed {
    fn ip(&self, daemon: &str) -> anyhow::Result<String> {
        self.addr(self.host_of(daemon)?)
    }

    /// A daemon also gets a session of its own, as systemd starts one on a real host: with
    /// the kernel's autogroups (this machine's default) the CPU is then shared between the
    /// daemons' sessions and the bench's, not among all their threads.
    fn place(&self, daemon: &str, cmd: &mut Command) -> anyhow::Result<()> {
        Testbed::place(self, self.host_of(daemon)?, cmd)?;
        gridwise_localgrid::own_session(cmd);
        Ok(())
    }
}

impl Testbed {
    fn host_of<'a>(&'a self, daemon: &'a str) -> anyhow::Result<&'a str> {
        if daemon == "agent" {
            return self.agent_host();
        }
        Ok(self.topo.host(daemon)?.name.as_str())
    }
}
