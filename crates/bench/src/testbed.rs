//! `gridwise bench testbed`: the link-dependent features over real, shaped links: a grid on a
//! test bed of network namespaces (`gridwise-testbed`), the two-site topology of
//! `examples/testbeds/two-sites.toml` (1 Gbit/s inside a site, 100 Mbit/s between sites,
//! 20 Mbit/s to the client's host), the client on its own host.
//!
//! Experiments, each a module: links the servers learn against the shaped truth (`links`),
//! bulk transfers across shaped links (`bulk`), a graph with MB edges mapped with links against
//! data through the client and a bound (`graph`), slab jobs swapping boundary rows server to
//! server, with host selection against an oracle (`slab`), partitions during calls and a graph
//! (`partitions`). Every row gives the measured figure, the
//! figure it is judged against and whether the goal held.

mod bulk;
pub mod graph;
mod graph_oracle;
mod links;
mod partitions;
mod slab;

use gridwise_client::Client;
use gridwise_localgrid::{LocalGrid, wait_for_servers};
use gridwise_testbed::{Testbed, Topology};
use serde_json::json;
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// The topology every experiment runs on.
pub const TOPOLOGY: &str = include_str!("../../../examples/testbeds/two-sites.toml");
/// Where the client runs: behind the slowest link.
pub const CLIENT_HOST: &str = "laptop";

#[derive(Clone, Debug, Default)]
pub struct TestbedBench {
    /// Experiments to run (all when empty): `links`, `bulk`, `graph`, `slab`, `partitions`.
    pub only: Vec<String>,
}

/// What an experiment gets: the bed, the grid's daemons (names → hosts are the same) and a
/// client on the client's host.
pub struct Ctx<'a> {
    pub bed: Arc<Testbed>,
    pub grid: &'a LocalGrid,
    /// Shared with helper threads (started from the client's thread, so on its host too).
    pub client: Arc<Client>,
    pub emit: &'a mpsc::Sender<serde_json::Value>,
}

impl Ctx<'_> {
    /// Where the server named `name` (its host's name) listens.
    pub fn addr_of(&self, name: &str) -> anyhow::Result<String> {
        let i = self
            .grid
            .names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| anyhow::anyhow!("no server {name}"))?;
        Ok(self.grid.servers[i].addr.clone())
    }

    /// Waits until the agent has measured the links between every two servers.
    pub fn wait_for_links(&self) -> anyhow::Result<()> {
        let servers = self.grid.servers.len();
        let started = std::time::Instant::now();
        loop {
            let pairs = self
                .client
                .link_matrix()?
                .iter()
                .filter(|l| {
                    self.grid.servers.iter().any(|s| s.addr == l.from)
                        && self.grid.servers.iter().any(|s| s.addr == l.sample.to)
                })
                .count();
            if pairs >= servers * (servers - 1) {
                return Ok(());
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(90),
                "the servers measured {pairs} of their {} links in 90 s",
                servers * (servers - 1)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// A call's own cost from the client's host, less its compute: the least of three
    /// one-unit calls of `service` on every server (`compute_s` each), its outputs kept on
    /// the server and freed (the first call to each opens its connection).
    pub fn call_overhead_s(
        &self,
        service: &str,
        args: &dyn Fn() -> Vec<gridwise_proto::Value>,
        keep: &[usize],
        compute_s: f64,
    ) -> anyhow::Result<f64> {
        let c = &self.client;
        let mut overhead_s = f64::INFINITY;
        for _ in 0..3 {
            for s in &self.grid.names {
                let on = c.function_handle_init(service, s)?;
                let one = c.call_keep(&on, args(), keep)?;
                overhead_s = overhead_s.min((one.round_trip_s - compute_s).max(0.0));
                let kept: Vec<_> = one
                    .outputs
                    .iter()
                    .filter_map(|v| match v {
                        gridwise_proto::Value::Ref(r) => Some(r.clone()),
                        _ => None,
                    })
                    .collect();
                c.free(&kept)?;
            }
        }
        Ok(overhead_s)
    }

    /// The host a daemon address belongs to.
    pub fn host_of_addr(&self, addr: &str) -> Option<String> {
        let ip = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        self.bed
            .topology()
            .hosts
            .iter()
            .find(|h| self.bed.addr(&h.name).is_ok_and(|a| a == ip))
            .map(|h| h.name.clone())
    }
}

/// A row's verdict: `measured / against` inside `[lo, hi]`.
pub fn judged(measured: f64, against: f64, lo: f64, hi: f64) -> serde_json::Value {
    let r = measured / against;
    json!({ "ratio": (r * 1000.0).round() / 1000.0, "ok": (lo..=hi).contains(&r) })
}

/// The server config every server of the bench runs: the data movers, dgemm, a fast link
/// probe. Calibrated: a slab's plan needs each server's rate before its first part ran.
const SERVER_TOML: &str = "builtins = [\"sink\", \"source\", \"dgemm\", \"add\", \"sleep\"]\ncalibrate = true\n\
                           slots = 1\nlink_probe_s = 15\n";

pub fn run(opts: &TestbedBench, emit: &mut dyn FnMut(serde_json::Value)) -> anyhow::Result<()> {
    let mut topo = Topology::parse(TOPOLOGY)?.renamed("bench_testbed")?;
    topo.faults.clear();
    eprintln!(
        "bench testbed: building {} hosts in {} sites …",
        topo.hosts.len(),
        topo.sites.len()
    );
    let bed = Arc::new(Testbed::up(topo.clone())?);
    let notes: Vec<String> = bed.notes.clone();
    for n in &notes {
        eprintln!("bench testbed: {n}");
    }
    if topo.wants_latency() && !bed.has_latency() {
        emit(
            json!({"bench": "testbed", "experiment": "emulation", "latency": "not emulated (no netem)"}),
        );
    }
    let exe = std::env::current_exe()?;
    let mut grid = gridwise_testbed::bed::start_grid(&bed, &exe)?;
    let servers: Vec<String> = topo
        .with_role(gridwise_testbed::Role::Server)
        .map(|h| h.name.clone())
        .collect();
    for s in &servers {
        let speed = graph::SPEEDS
            .iter()
            .find(|(n, _)| n == s)
            .map_or(4e5, |(_, v)| *v);
        grid.add_server(
            s,
            &format!(
                "{SERVER_TOML}{}{}",
                graph::services_toml(speed),
                slab::services_toml()
            ),
        )?;
    }
    let (tx, rx) = mpsc::channel();
    let want = |e: &str| opts.only.is_empty() || opts.only.iter().any(|o| o == e);
    let (do_links, do_bulk, do_graph, do_slab, do_partitions) = (
        want("links"),
        want("bulk"),
        want("graph"),
        want("slab"),
        want("partitions"),
    );
    let body = {
        let bed = bed.clone();
        let grid = &grid;
        let n = servers.len();
        move || -> anyhow::Result<()> {
            bed.enter(CLIENT_HOST)?;
            let client = Arc::new(Client::connect(grid.client_config())?);
            wait_for_servers(&client, n, Duration::from_secs(30))?;
            let ctx = Ctx {
                bed: bed.clone(),
                grid,
                client,
                emit: &tx,
            };
            if do_links {
                links::run(&ctx)?;
            }
            if do_bulk {
                bulk::run(&ctx)?;
            }
            if do_graph {
                graph::run(&ctx)?;
            }
            if do_slab {
                slab::run(&ctx)?;
            }
            if do_partitions {
                partitions::run(&ctx)?;
            }
            Ok(())
        }
    };
    std::thread::scope(|s| -> anyhow::Result<()> {
        let h = s.spawn(body);
        for line in rx {
            emit(line);
        }
        h.join()
            .map_err(|_| anyhow::anyhow!("the bench's client thread panicked"))?
    })?;
    drop(grid);
    drop(bed);
    Ok(())
}
