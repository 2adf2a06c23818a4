//! `gridwise bench agents`: several agents sharing one PostgreSQL store, as deployed (each
//! agent and server a daemon of its own on loopback; PostgreSQL a real server from the
//! system's packages, started by the bench in a temporary directory and removed after).
//!
//! - `bag` rows: `clients` clients, each of one agent (client `i` on agent `i mod N`),
//!   each keeping two calls in flight until it has made `calls`, on six emulated one-slot
//!   servers of speeds 1–4 Gop/s (calls of 8–90 ms); the makespan with N = 1, 2, 3 agents, and
//!   its ratio to one agent's. An agent sees the other agents' calls as of each server's last
//!   heartbeat (1 s) and of each call's arrival (a server's notice), so this measures what
//!   that costs where calls are shorter than a heartbeat. Also the agents' CPU per call ranked
//!   (from `/proc`), with one agent on SQLite beside one on PostgreSQL (the rank path must not
//!   wait on the database) and a second SQLite one as the control (`bag_cpu` and `dag_cpu`
//!   rows: the ratios), and how busy the machine's cores were (`host_cpu_busy`): every
//!   agent hears every report, so N agents cost about N times one's CPU, on the same two cores
//!   as the clients, the servers and PostgreSQL here.
//! - `dag` rows: the same clients and servers, each client running `graphs` task graphs one
//!   after another (a fork of four chains joined by a tree, 12 calls), each graph planned
//!   whole by the client's agent, which reserves its servers for it.
//!
//!   A fifth configuration runs three agents with every client on the first (`clients_on`:
//!   `first`): the other two place nothing and only hear of every call, as every agent does,
//!   on the same two cores as the clients, servers and PostgreSQL; its ratio is what merely
//!   running three agents on this machine costs, the floor under the spread three's.
//!
//!   Three rounds, each on fresh fleets of every configuration in turn; the rows give the
//!   median makespan (and all three): fleets of one configuration mostly agree within 3 %,
//!   with one in ten or so a tenth slower (and differed by up to a third while the estimate
//!   past a model's largest size took a rate calibrated on overhead: see
//!   `gridwise_predict`'s `rate_outside_model`).
//! - `kill` rows: N = 2 and 3 agents, every client listing all of them; mid-batch the agent
//!   serving the first client is SIGKILLed. Calls lost, failed and wrong (the mix of `bench
//!   faults`: `add`, `sleep`, a 64³ `dgemm`, each answer checked), how long the clients on the
//!   dead agent took to move (from the kill to the first completion each saw through a
//!   live agent, an upper bound), and whether the survivors still estimate with what was
//!   learned before the kill.
//! - `cut` rows ([`cut`]): as `kill`, on a test bed of network namespaces (agents, database,
//!   servers and clients on hosts of their own), the agent's host cut off instead of its
//!   process killed: the clients learn of it only by silence. Skipped, saying why, where no
//!   test bed can be built (it needs root and iproute2).
//! - `sim` rows: the simulator's online scenario at 10,000 servers and 20,000 calls
//!   (`examples/sim/online-10k.json`), ranked by the real agent core: one omniscient agent
//!   against N agents that see each other's calls only as the servers tell of them
//!   (`gridwise_sim::simulate_online_agents`); the mean response time and makespan over the
//!   omniscient agent's, for each of three draws of the workload, then over the three
//!   (`sim_mean`).

pub mod cut;

use crate::faults::{Mix, run_batch_with};
use crate::host::HostCpu;
use anyhow::{Context, Result, anyhow};
use gridwise_client::{Client, ClientConfig};
use gridwise_localgrid::{LocalGrid, wait_for_servers};
use gridwise_pgtemp::TempPostgres;
use gridwise_proto::{CallProfile, RankOptions, Value};
use serde_json::{Value as Json, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// What `gridwise bench agents` is told.
#[derive(Clone, Debug)]
pub struct AgentsBench {
    /// Clients running at once.
    pub clients: usize,
    /// Calls per client in the bag.
    pub calls: usize,
    /// Graphs per client in the DAG rows.
    pub graphs: usize,
    /// Calls per client in each kill and cut run.
    pub kill_calls: usize,
    /// Rows to run (all when empty): `bag` (with the DAG rows), `kill`, `cut`, `sim`.
    pub only: Vec<String>,
    /// The servers' heartbeat intervals the `sim` rows are run at, s.
    pub heartbeats: Vec<f64>,
}

impl AgentsBench {
    fn runs(&self, rows: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == rows)
    }
}

const SPEEDS: [f64; 6] = [1e9, 1.5e9, 2e9, 2.5e9, 3e9, 4e9];
/// Calls each bag client keeps in flight.
const WINDOW: usize = 2;

/// Where the agents keep what they learn.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Store {
    Sqlite,
    Postgres,
}

/// N agents and six servers registered with all of them; `grids[0]` also holds the servers.
struct Fleet {
    grids: Vec<LocalGrid>,
    /// Clients spread over the agents (else all on the first).
    spread: bool,
}

impl Fleet {
    fn start(
        agents: usize,
        store: Store,
        pg: &TempPostgres,
        db: &str,
        servers: &str,
    ) -> Result<Fleet> {
        let exe = std::env::current_exe()?;
        let mut args: Vec<String> = Vec::new();
        if store == Store::Postgres {
            let url = pg.create_database(db).map_err(|e| anyhow!(e))?;
            args.extend(["--store".into(), url]);
        }
        let grids = (0..agents)
            .map(|_| LocalGrid::start_gridwise(&exe, &args))
            .collect::<Result<Vec<_>>>()?;
        let mut fleet = Fleet {
            grids,
            spread: true,
        };
        let list = fleet
            .addrs()
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let kinds = servers_of(servers);
        for (i, toml) in kinds.iter().enumerate() {
            fleet.grids[0].add_server(&format!("s{i}"), &format!("agents = [{list}]\n{toml}"))?;
        }
        for addr in fleet.addrs() {
            let c = Client::connect(fleet.config(std::slice::from_ref(&addr)))?;
            wait_for_servers(&c, kinds.len(), Duration::from_secs(90))
                .with_context(|| format!("servers registering with the agent at {addr}"))?;
        }
        Ok(fleet)
    }

    fn addrs(&self) -> Vec<String> {
        self.grids.iter().map(|g| g.agent.addr.clone()).collect()
    }

    fn config(&self, agents: &[String]) -> ClientConfig {
        let mut cfg = self.grids[0].client_config();
        cfg.agents = agents.to_vec();
        cfg
    }

    /// CPU seconds the agents have used so far, all of them: the whole processes, and their
    /// store writer threads (which alone talk to the database).
    fn agent_cpu_s(&self) -> (f64, f64) {
        self.grids.iter().fold((0.0, 0.0), |(all, store), g| {
            let pid = g.agent.pid();
            (all + cpu_s(pid), store + thread_cpu_s(pid, STORE_THREAD))
        })
    }
}

/// The server configs: emulated one-slot servers for the bag, built-in ones for the kills.
fn servers_of(kind: &str) -> Vec<String> {
    match kind {
        "bag" => SPEEDS
            .iter()
            .map(|s| {
                let emulated = |name: &str, complexity: &str, inputs: u32| {
                    format!(
                        "[[emulated]]\nname = \"{name}\"\nparam = \"n\"\ncomplexity = \"{complexity}\"\nspeed = [[1, {s:e}], [4000, {s:e}]]\ninputs = {inputs}\noutput = {}\n",
                        name != "solve"
                    )
                };
                format!(
                    "builtins = []\nslots = 1\n{}{}{}{}",
                    emulated("solve", "n^3", 0),
                    emulated("make", "n^3", 0),
                    emulated("step", "2*n^3", 1),
                    emulated("join", "n^3", 2),
                )
            })
            .collect(),
        _ => (0..3)
            .map(|_| "builtins = [\"add\", \"sleep\", \"dgemm\"]\ncalibrate = false\nslots = 2\n".to_string())
            .collect(),
    }
}

/// The agent's thread that writes to its store (`gridwise_store::Writer`).
const STORE_THREAD: &str = "gridwise-store";

/// A process's user + system CPU time from `/proc/PID/stat`, s (0 where unreadable).
fn cpu_s(pid: u32) -> f64 {
    stat_cpu_s(&format!("/proc/{pid}/stat"))
}

/// The CPU time of `pid`'s threads named `name`, s.
fn thread_cpu_s(pid: u32, name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .map(|t| stat_cpu_s(&t.path().join("stat").to_string_lossy()))
        .sum()
}

/// User + system CPU time from a `/proc` stat file, s (0 where unreadable).
fn stat_cpu_s(path: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the command (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

/// Call `k` of client `c` in the bag: n in [200, 450], so 8–90 ms on 1–4 Gop/s.
fn bag_size(c: usize, k: usize) -> i64 {
    let mut x = (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (k as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 31;
    200 + (x % 251) as i64
}

/// What one run of a workload measured.
struct Run {
    makespan_s: f64,
    /// Calls made, all clients.
    calls: usize,
    /// The agents' CPU over the run, s: all of it, and their store writers'.
    agent_cpu_s: f64,
    store_cpu_s: f64,
    /// How busy the machine's cores were during the run, and how much of their time the
    /// hypervisor gave to other guests, 0–1.
    host_busy: f64,
    host_stolen: f64,
}

/// Runs `work(client index, client)` on `opts.clients` clients at once, client `i` on agent
/// `i mod N` (all on the first with `spread` false); `work` returns the calls it made and how
/// many failed.
fn measure(
    fleet: &Fleet,
    opts: &AgentsBench,
    work: &(dyn Fn(usize, &Client) -> (usize, usize) + Sync),
) -> Result<Run> {
    let addrs = fleet.addrs();
    let on = |i: usize| if fleet.spread { i % addrs.len() } else { 0 };
    let clients: Vec<Client> = (0..opts.clients)
        .map(|i| Client::connect(fleet.config(&[addrs[on(i)].clone()])))
        .collect::<Result<_, _>>()?;
    let cpu_before = fleet.agent_cpu_s();
    let host_before = HostCpu::now();
    let start = Arc::new(Barrier::new(opts.clients + 1));
    let (calls, failed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let t0 = std::thread::scope(|s| {
        for (ci, c) in clients.iter().enumerate() {
            let (start, calls, failed) = (start.clone(), &calls, &failed);
            s.spawn(move || {
                start.wait();
                let (n, f) = work(ci, c);
                calls.fetch_add(n, Ordering::Relaxed);
                failed.fetch_add(f, Ordering::Relaxed);
            });
        }
        start.wait();
        Instant::now()
    });
    let makespan_s = t0.elapsed().as_secs_f64();
    let cpu_after = fleet.agent_cpu_s();
    let host_after = HostCpu::now();
    let n = failed.load(Ordering::Relaxed);
    anyhow::ensure!(n == 0, "{n} calls failed");
    Ok(Run {
        makespan_s,
        calls: calls.load(Ordering::Relaxed),
        agent_cpu_s: cpu_after.0 - cpu_before.0,
        store_cpu_s: cpu_after.1 - cpu_before.1,
        host_busy: host_after.busy_since(&host_before),
        host_stolen: host_after.stolen_since(&host_before),
    })
}

/// The bag: every client keeps [`WINDOW`] calls of `solve` in flight until it has made `calls`.
fn bag(fleet: &Fleet, opts: &AgentsBench, calls: usize) -> Result<Run> {
    measure(fleet, opts, &|ci, c| {
        let Ok(h) = c.function_handle_default("solve") else {
            return (0, 1);
        };
        let mut failed = 0;
        let mut out = std::collections::VecDeque::new();
        for k in 0..calls {
            if out.len() == WINDOW {
                let id = out.pop_front().unwrap();
                failed += usize::from(c.wait(id).is_err());
            }
            match c.call_async(&h, vec![Value::Int(bag_size(ci, k))]) {
                Ok(id) => out.push_back(id),
                Err(_) => failed += 1,
            }
        }
        for id in out {
            failed += usize::from(c.wait(id).is_err());
        }
        (calls, failed)
    })
}

/// Calls in one of the DAG rows' graphs: `make`, four chains of two `step`s from it, and a
/// tree of three `join`s over the chains' ends.
const DAG_CALLS: usize = 12;

/// The DAG: every client runs `graphs` graphs one after another, each planned by its agent,
/// all calls of graph `g` at the size `bag_size(client, g)`.
fn dag(fleet: &Fleet, opts: &AgentsBench, graphs: usize) -> Result<Run> {
    measure(fleet, opts, &|ci, c| {
        let mut failed = 0;
        for g in 0..graphs {
            let n = bag_size(ci, g);
            let mut graph = c.graph();
            let root = graph.call("make", vec![n.into()]);
            let ends: Vec<_> = (0..4)
                .map(|_| {
                    let s = graph.call("step", vec![n.into(), root.output(0)]);
                    graph.call("step", vec![n.into(), s.output(0)])
                })
                .collect();
            let j1 = graph.call("join", vec![n.into(), ends[0].output(0), ends[1].output(0)]);
            let j2 = graph.call("join", vec![n.into(), ends[2].output(0), ends[3].output(0)]);
            graph.call("join", vec![n.into(), j1.output(0), j2.output(0)]);
            match graph.run() {
                Ok(r) if r.calls.len() == DAG_CALLS => {}
                _ => failed += 1,
            }
        }
        (graphs * DAG_CALLS, failed)
    })
}

/// Runs of one workload on one fleet, summarised by their median makespan: on two cores
/// shared with every daemon, one fleet in ten or so runs a tenth slower than the others of its
/// configuration, more than the differences this measures.
struct Runs(Vec<Run>);

impl Runs {
    fn median_makespan_s(&self) -> f64 {
        let mut m: Vec<f64> = self.0.iter().map(|r| r.makespan_s).collect();
        m.sort_by(f64::total_cmp);
        m[m.len() / 2]
    }

    fn makespans(&self) -> Vec<f64> {
        self.0.iter().map(|r| round3(r.makespan_s)).collect()
    }

    /// The agents' CPU per call over all runs, µs: all of it, and all but their store
    /// writers' (what deciding costs; the writers run beside the rank path, never in it).
    fn agent_cpu_us_per_call(&self) -> (f64, f64) {
        let all: f64 = self.0.iter().map(|r| r.agent_cpu_s).sum();
        let store: f64 = self.0.iter().map(|r| r.store_cpu_s).sum();
        let calls = self.0.iter().map(|r| r.calls).sum::<usize>().max(1) as f64;
        let us = |s: f64| (s / calls * 1e7).round() / 10.0;
        (us(all), us(all - store))
    }

    fn host_busy(&self) -> f64 {
        round3(self.0.iter().map(|r| r.host_busy).sum::<f64>() / self.0.len() as f64)
    }

    fn host_stolen(&self) -> f64 {
        round3(self.0.iter().map(|r| r.host_stolen).sum::<f64>() / self.0.len() as f64)
    }
}

/// How many fleets of each configuration run the bag and the DAG.
const REPEATS: usize = 3;

/// The configurations of the bag and DAG rows: a name, agents, where they keep what they
/// learn, and whether the clients spread over the agents. `three_first` has three agents but
/// every client on the first: the others place nothing, and only hear of every call (as every
/// agent does) on the same two cores as everything else; what that costs is this machine's
/// floor for the spread three. `sqlite_again` is `sqlite` once more, the control for the CPU
/// per call: one agent's CPU per call moves by more than a tenth between fleets that differ
/// in nothing, and PostgreSQL's ratio means something only beyond that.
const FLEETS: [(&str, usize, Store, bool); 6] = [
    ("sqlite", 1, Store::Sqlite, true),
    ("postgres", 1, Store::Postgres, true),
    ("sqlite_again", 1, Store::Sqlite, true),
    ("two", 2, Store::Postgres, true),
    ("three", 3, Store::Postgres, true),
    ("three_first", 3, Store::Postgres, false),
];

/// Where `name` is in [`FLEETS`].
fn fleet(name: &str) -> usize {
    FLEETS
        .iter()
        .position(|f| f.0 == name)
        .expect("a fleet of FLEETS")
}

/// The bag and DAG rows. Each round starts a fresh fleet of every configuration in turn and
/// runs a bag and a DAG on it: what a fleet's agents learn first can set its makespan (fleets
/// of one configuration were up to a third apart while a server priced too slow past its
/// model was never taught otherwise), so each row's median is over fleets, not over runs of
/// one.
fn bags_and_dags(opts: &AgentsBench, pg: &TempPostgres, emit: &mut dyn FnMut(Json)) -> Result<()> {
    let mut bags: Vec<Vec<Run>> = FLEETS.iter().map(|_| Vec::new()).collect();
    let mut dags: Vec<Vec<Run>> = FLEETS.iter().map(|_| Vec::new()).collect();
    for round in 0..REPEATS {
        for (i, &(_, agents, store, spread)) in FLEETS.iter().enumerate() {
            eprintln!(
                "bench agents: round {} of {REPEATS}, {agents} agent(s) on {store:?}{} …",
                round + 1,
                if spread {
                    ""
                } else {
                    ", every client on the first"
                }
            );
            let db = format!("bag{i}r{round}");
            let mut fleet = Fleet::start(agents, store, pg, &db, "bag")?;
            fleet.spread = spread;
            // The agents learn the servers' speeds first (as a grid that has run a while has).
            bag(&fleet, opts, 10)?;
            dag(&fleet, opts, 2)?;
            bags[i].push(bag(&fleet, opts, opts.calls)?);
            dags[i].push(dag(&fleet, opts, opts.graphs)?);
        }
    }
    let (bags, dags): (Vec<Runs>, Vec<Runs>) = (
        bags.into_iter().map(Runs).collect(),
        dags.into_iter().map(Runs).collect(),
    );
    // One agent on PostgreSQL: what the others are over.
    let one = fleet("postgres");
    for (row, runs) in [("bag", &bags), ("dag", &dags)] {
        let base = runs[one].median_makespan_s();
        for (&(name, agents, store, spread), r) in FLEETS.iter().zip(runs) {
            let median = r.median_makespan_s();
            emit(json!({
                "bench": "agents",
                "row": row,
                "fleet": name,
                "agents": agents,
                "store": format!("{store:?}").to_lowercase(),
                "clients": opts.clients,
                "clients_on": if spread { "all" } else { "first" },
                "calls": r.0[0].calls,
                "makespan_s": round3(median),
                "makespans_s": r.makespans(),
                "over_one_agent": (store == Store::Postgres).then(|| round3(median / base)),
                "agent_cpu_us_per_call": r.agent_cpu_us_per_call().0,
                "agent_cpu_us_per_call_outside_store": r.agent_cpu_us_per_call().1,
                "host_cpu_busy": r.host_busy(),
                "host_cpu_stolen": r.host_stolen(),
            }));
        }
        // One agent's CPU per call on PostgreSQL over SQLite, beside SQLite over itself.
        let cpu = |name: &str| runs[fleet(name)].agent_cpu_us_per_call();
        let over = |a: f64, b: f64| round3(a / b);
        let (sqlite, postgres, again) = (cpu("sqlite"), cpu("postgres"), cpu("sqlite_again"));
        emit(json!({
            "bench": "agents",
            "row": format!("{row}_cpu"),
            "postgres_over_sqlite": over(postgres.0, sqlite.0),
            "postgres_over_sqlite_outside_store": over(postgres.1, sqlite.1),
            "sqlite_again_over_sqlite": over(again.0, sqlite.0),
            "sqlite_again_over_sqlite_outside_store": over(again.1, sqlite.1),
        }));
    }
    Ok(())
}

/// Runs the benchmark, emitting one JSON line per row.
pub fn run(opts: &AgentsBench, emit: &mut dyn FnMut(Json)) -> Result<()> {
    if let Some(o) = opts
        .only
        .iter()
        .find(|o| !["bag", "kill", "cut", "sim"].contains(&o.as_str()))
    {
        anyhow::bail!("no rows {o:?}: --only takes bag, kill, cut, sim");
    }
    for &h in &opts.heartbeats {
        gridwise_sim::check_agents(1, h).map_err(|e| anyhow!("--heartbeats {h}: {e}"))?;
    }
    let pg = TempPostgres::start().map_err(|e| anyhow!("{e}"))?;
    eprintln!("bench agents: PostgreSQL on 127.0.0.1:{}", pg.port());
    // The single agent on PostgreSQL's median makespans (bag, DAG): what the others are over.
    if opts.runs("bag") {
        bags_and_dags(opts, &pg, emit)?;
    }
    for agents in [2, 3].into_iter().filter(|_| opts.runs("kill")) {
        eprintln!("bench agents: kill, {agents} agents …");
        emit(kill(opts, agents, &pg)?);
    }
    let program = std::env::current_exe()?;
    for agents in [2, 3].into_iter().filter(|_| opts.runs("cut")) {
        eprintln!("bench agents: cut, {agents} agents on a test bed …");
        emit(cut::run(&program, opts.clients, opts.kill_calls, agents)?);
    }
    drop(pg);
    if opts.runs("sim") {
        for &heartbeat_s in &opts.heartbeats {
            simulated(heartbeat_s, emit)?;
        }
    }
    Ok(())
}

/// The scenario the simulated rows run.
const SIM_SCENARIO: &str = include_str!("../../../examples/sim/online-10k.json");

/// The draws of sizes and arrivals the simulated rows are run with. One draw is not enough: a
/// different draw, or one decision taken otherwise early on, moves one agent's mean response
/// by up to a tenth (0.347–0.389 s over draws and variants of the same build), more than the
/// 5 % the rows are judged by.
const SIM_SEEDS: [u64; 3] = [1, 2, 3];

/// One omniscient agent, then N agents, at one heartbeat interval on the simulated platform,
/// for each of [`SIM_SEEDS`]: a row per draw, then one per number of agents over all draws
/// (mean response and makespan over the draws, against one agent's at the same interval: a
/// lone agent sees its own calls at once, and its heartbeats only predict them again).
fn simulated(heartbeat_s: f64, emit: &mut dyn FnMut(Json)) -> Result<()> {
    const AGENTS: [usize; 3] = [1, 3, 10];
    // Per number of agents: the sums of mean response and makespan over the draws.
    let mut sums = [(0.0, 0.0); AGENTS.len()];
    for seed in SIM_SEEDS {
        let mut scenario = gridwise_sim::Scenario::parse(SIM_SCENARIO)?;
        if let gridwise_sim::WorkloadSpec::Online { seed: s, .. } = &mut scenario.workload {
            *s = seed;
        }
        let mut one = None;
        for (k, agents) in AGENTS.into_iter().enumerate() {
            eprintln!(
                "bench agents: sim, seed {seed}, {agents} agent(s), heartbeat {heartbeat_s} s …"
            );
            let t0 = Instant::now();
            let run = gridwise_sim::simulate_online_agents(
                &scenario,
                gridwise_proto::Policy::Mct,
                agents,
                heartbeat_s,
            )?;
            let r = run.report;
            let base = *one.get_or_insert((r.mean_response_s, r.makespan_s));
            sums[k].0 += r.mean_response_s;
            sums[k].1 += r.makespan_s;
            emit(json!({
                "bench": "agents",
                "row": "sim",
                "seed": seed,
                "agents": agents,
                "heartbeat_s": heartbeat_s,
                "servers": r.servers,
                "calls": r.calls,
                "mean_response_s": r.mean_response_s,
                "makespan_s": r.makespan_s,
                "response_over_one_agent": round3(r.mean_response_s / base.0),
                "makespan_over_one_agent": round3(r.makespan_s / base.1),
                "wall_s": round3(t0.elapsed().as_secs_f64()),
            }));
        }
    }
    let draws = SIM_SEEDS.len() as f64;
    for (k, agents) in AGENTS.into_iter().enumerate() {
        emit(json!({
            "bench": "agents",
            "row": "sim_mean",
            "seeds": SIM_SEEDS,
            "agents": agents,
            "heartbeat_s": heartbeat_s,
            "mean_response_s": sums[k].0 / draws,
            "makespan_s": sums[k].1 / draws,
            "response_over_one_agent": round3(sums[k].0 / sums[0].0),
            "makespan_over_one_agent": round3(sums[k].1 / sums[0].1),
        }));
    }
    Ok(())
}

/// Calls lost, failed and wrong over the clients' batches.
fn outcome(batches: &[crate::faults::Batch]) -> (usize, usize, usize) {
    batches.iter().fold((0, 0, 0), |(l, f, w), b| {
        (l + b.lost, f + b.failed, w + b.wrong)
    })
}

/// Notes, once, that client `ci` completed a call through a live agent, `at` being when its
/// agent was lost.
fn first_move(moved: &Mutex<Vec<Option<f64>>>, ci: usize, at: Instant) {
    let mut m = moved.lock().unwrap();
    if m[ci].is_none() {
        m[ci] = Some(at.elapsed().as_secs_f64());
    }
}

/// The 64³ dgemm of the faults mix, to ask a surviving agent what it estimates it with.
fn dgemm_probe() -> CallProfile {
    CallProfile {
        service: "dgemm".into(),
        sizes: vec![("m".into(), 64), ("n".into(), 64), ("k".into(), 64)],
        in_bytes: 0,
        out_bytes: 0,
        remote_in: Vec::new(),
        inline_bytes: 0,
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// N agents, every client listing all; the first client's agent is killed a third of the way.
fn kill(opts: &AgentsBench, agents: usize, pg: &TempPostgres) -> Result<Json> {
    let mut fleet = Fleet::start(
        agents,
        Store::Postgres,
        pg,
        &format!("kill{agents}"),
        "faults",
    )?;
    let addrs = fleet.addrs();
    let clients: Vec<Client> = (0..opts.clients)
        .map(|_| Client::connect(fleet.config(&addrs)))
        .collect::<Result<_, _>>()?;
    let victim = addrs
        .iter()
        .position(|a| *a == clients[0].agent_addr())
        .unwrap_or(0);
    let dead = addrs[victim].clone();
    let on_dead: Vec<bool> = clients.iter().map(|c| c.agent_addr() == dead).collect();
    let total = opts.clients * opts.kill_calls;
    let done = AtomicUsize::new(0);
    let killed: Mutex<Option<Instant>> = Mutex::new(None);
    let moved: Mutex<Vec<Option<f64>>> = Mutex::new(vec![None; opts.clients]);
    let victim_grid = Mutex::new(&mut fleet.grids[victim]);
    let batches = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(ci, c)| {
                let (done, killed, moved, victim_grid, dead) =
                    (&done, &killed, &moved, &victim_grid, &dead);
                s.spawn(move || -> Result<_> {
                    let mix = Mix::on(c)?;
                    run_batch_with(c, &mix, opts.kill_calls, 8, "agents", |_| {
                        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if n == total / 3 {
                            eprintln!("bench agents: {n} done; SIGKILL the agent at {dead}");
                            victim_grid.lock().unwrap().agent.kill();
                            *killed.lock().unwrap() = Some(Instant::now());
                        }
                        if let Some(at) = *killed.lock().unwrap()
                            && c.agent_addr() != *dead
                        {
                            first_move(moved, ci, at);
                        }
                        Ok(())
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect::<Result<Vec<_>>>()
    })?;
    let (lost, failed, wrong) = outcome(&batches);
    let moved = moved.into_inner().unwrap();
    let moved_within = on_dead
        .iter()
        .zip(&moved)
        .filter(|(on, _)| **on)
        .map(|(_, m)| m.unwrap_or(f64::INFINITY))
        .fold(0.0, f64::max);
    // What a survivor estimates with: the model of the dgemm the batch ran.
    let survivor = clients
        .iter()
        .find(|c| c.agent_addr() != dead)
        .unwrap_or(&clients[0]);
    let source = survivor
        .explain(dgemm_probe(), RankOptions::default())
        .ok()
        .and_then(|c| c.first().map(|c| format!("{:?}", c.etc.compute_source)));
    Ok(json!({
        "bench": "agents",
        "row": "kill",
        "agents": agents,
        "clients": opts.clients,
        "calls": total,
        "lost": lost,
        "failed": failed,
        "wrong": wrong,
        "clients_on_the_killed_agent": on_dead.iter().filter(|b| **b).count(),
        "moved_within_s": if moved_within.is_finite() { Json::from(round3(moved_within)) } else { Json::Null },
        "survivor_estimates_with": source,
    }))
}
