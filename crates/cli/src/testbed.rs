//! `gridwise testbed up|down|status FILE`: a grid of many hosts on this machine, from a
//! topology file (see `examples/testbeds/`). The test bed itself is `gridwise-testbed`; this
//! module starts the daemons on it, plays its faults and prints.

use gridwise_localgrid::LocalGrid;
use gridwise_testbed::bed::{clear, namespaces_with_prefix, until_signal};
use gridwise_testbed::plan;
use gridwise_testbed::schedule::{Playing, timeline};
use gridwise_testbed::{Role, Testbed, Topology};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn load(file: &Path, name: Option<&str>) -> anyhow::Result<Topology> {
    let t = Topology::load(file)?;
    match name {
        Some(n) => t.renamed(n),
        None => Ok(t),
    }
}

/// Builds the bed, starts the agent and servers on their hosts, plays the faults, and waits
/// for Ctrl-C (or `for_s`); everything goes on the way out.
pub fn up(file: &Path, name: Option<&str>, for_s: Option<f64>) -> anyhow::Result<()> {
    let topo = load(file, name)?;
    let base = file.parent().unwrap_or(Path::new("."));
    println!(
        "test bed {:?}: {} sites, {} hosts",
        topo.name,
        topo.sites.len(),
        topo.hosts.len()
    );
    let bed = Arc::new(Testbed::up(topo.clone())?);
    for n in &bed.notes {
        println!("  note: {n}");
    }
    for s in &topo.sites {
        println!("  site {:<10} uplink {}", s.name, s.uplink);
    }
    for h in &topo.hosts {
        println!(
            "  host {:<10} {:<14} site {:<8} link {:<12} {:?}",
            h.name,
            bed.addr(&h.name)?,
            h.site,
            h.link.to_string(),
            h.role
        );
    }
    let exe = std::env::current_exe()?;
    let grid = match topo.with_role(Role::Agent).next() {
        None => None,
        Some(_) => {
            let mut grid = gridwise_testbed::bed::start_grid(&bed, &exe)?;
            println!(
                "  agent      {} (on {})",
                grid.agent.addr,
                bed.agent_host()?
            );
            for h in topo.with_role(Role::Server) {
                let config = match &h.config {
                    Some(c) => {
                        let p = base.join(c);
                        std::fs::read_to_string(&p).map_err(|e| {
                            anyhow::anyhow!(
                                "host {}: cannot read its server config {}: {e}",
                                h.name,
                                p.display()
                            )
                        })?
                    }
                    None => String::new(),
                };
                let addr = grid.add_server(&h.name, &config)?.addr.clone();
                println!("  server     {addr} ({})", h.name);
            }
            wait_registered(&bed, &grid)?;
            Some(grid)
        }
    };
    if let Some(g) = &grid {
        let from = topo
            .with_role(Role::Client)
            .next()
            .map(|h| h.name.clone())
            .unwrap_or(bed.agent_host()?.to_string());
        println!(
            "calls from host {from}:\n  ip netns exec {} env GRIDWISE_AGENT={} {} status",
            plan::host_ns(&topo, &from),
            g.agent.addr,
            exe.display()
        );
        println!("daemons' logs: {}", g.log_dir().display());
    }
    let events = timeline(&topo.faults);
    let playing = (!events.is_empty()).then(|| {
        println!("faults: {} events", events.len());
        Playing::start(bed.clone(), events, |a| {
            let (at, e) = (a.began.as_secs_f64(), &a.event);
            match &a.error {
                None => println!("  {at:>7.2} s  {e}"),
                Some(err) => println!("  {at:>7.2} s  {e} FAILED: {err}"),
            }
        })
    });
    match for_s {
        Some(s) => println!("up for {s} s"),
        None => println!("up; Ctrl-C takes everything down"),
    }
    let sig = until_signal(for_s.map(Duration::from_secs_f64))?;
    drop(playing);
    drop(grid);
    let name = topo.name.clone();
    drop(bed);
    let left = namespaces_with_prefix(&plan::prefix(&name));
    match sig {
        Some(s) => println!("signal {s}: test bed {name:?} taken down"),
        None => println!("test bed {name:?} taken down"),
    }
    anyhow::ensure!(left.is_empty(), "namespaces left behind: {left:?}");
    Ok(())
}

/// Waits until every server is up at the agent, asking from the agent's host (this process
/// is not on any host of the bed, and their addresses route nowhere else).
fn wait_registered(bed: &Arc<Testbed>, grid: &LocalGrid) -> anyhow::Result<()> {
    let (bed, cfg, n) = (bed.clone(), grid.client_config(), grid.servers.len());
    std::thread::spawn(move || -> anyhow::Result<()> {
        bed.enter(bed.agent_host()?)?;
        let c = gridwise_client::Client::connect(cfg)?;
        gridwise_localgrid::wait_for_servers(&c, n, Duration::from_secs(30))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the thread waiting for the servers panicked"))?
}

/// Removes what a bed of this topology left (its runner killed with SIGKILL, say).
pub fn down(file: &Path, name: Option<&str>) -> anyhow::Result<()> {
    let topo = load(file, name)?;
    let removed = clear(&topo);
    if removed.is_empty() {
        println!("nothing of test bed {:?} was left", topo.name);
    } else {
        println!(
            "removed {} namespaces: {}",
            removed.len(),
            removed.join(" ")
        );
    }
    Ok(())
}

/// What of the bed exists now: each host's namespace, what runs in it, its link's qdisc.
pub fn status(file: &Path, name: Option<&str>) -> anyhow::Result<()> {
    let topo = load(file, name)?;
    let present = namespaces_with_prefix(&plan::prefix(&topo.name));
    if present.is_empty() {
        println!("test bed {:?} is down", topo.name);
        return Ok(());
    }
    println!("test bed {:?}: {} namespaces", topo.name, present.len());
    for h in &topo.hosts {
        let ns = plan::host_ns(&topo, &h.name);
        if !present.contains(&ns) {
            println!("  host {:<10} missing ({ns})", h.name);
            continue;
        }
        let pids = std::process::Command::new("ip")
            .args(["netns", "pids", &ns])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .count()
            })
            .unwrap_or(0);
        let qdisc = std::process::Command::new("tc")
            .args(["-n", &ns, "qdisc", "show", "dev", "eth0", "root"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let shaping = if qdisc.contains("blackhole") {
            "cut off".to_string()
        } else {
            qdisc
                .split_whitespace()
                .skip_while(|w| *w != "rate")
                .nth(1)
                .map(|r| format!("rate {r}"))
                .unwrap_or(qdisc)
        };
        println!(
            "  host {:<10} {:<14} {pids} processes, {shaping}",
            h.name,
            topo.addr(&h.name)?
        );
    }
    Ok(())
}
