//! `cut` rows of `gridwise bench agents`: N agents on hosts of their own on a test bed of
//! network namespaces, PostgreSQL on another, three servers and the clients on theirs; mid-
//! batch the host of the first client's agent is cut off from everything (packets dropped
//! without a word, as a pulled cable does), which a client can only tell by silence. Counted
//! as the `kill` rows count: calls lost, failed and wrong, how long the clients on the cut
//! agent took to move (`moved_within_s`: from the cut to the client's switch, polled every
//! ms; `first_completion_after_move_s`: to its first call completed after it, the `kill`
//! rows' upper bound), and whether the survivors estimate with what was learned before.

use crate::faults::{Mix, run_batch_with};
use anyhow::{Context, Result, anyhow};
use gridwise_client::{Client, ClientConfig};
use gridwise_localgrid::{Hosts, Launcher, LocalGrid, half_second_heartbeats, wait_for_servers};
use gridwise_pgtemp::TempPostgres;
use gridwise_testbed::{Cut, Testbed, Topology};
use serde_json::{Value as Json, json};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Two sites; the agents' hosts spread over both, the database and the clients in the first.
const TOPOLOGY: &str = r#"
name = "agentcut"
[[site]]
name = "a"
uplink = "1gbit"
[[site]]
name = "b"
uplink = "1gbit"
[[host]]
name = "db"
site = "a"
link = "1gbit"
[[host]]
name = "agent1"
site = "a"
link = "1gbit"
[[host]]
name = "agent2"
site = "b"
link = "1gbit"
[[host]]
name = "agent3"
site = "b"
link = "1gbit"
[[host]]
name = "s1"
site = "a"
link = "1gbit"
role = "server"
[[host]]
name = "s2"
site = "b"
link = "1gbit"
role = "server"
[[host]]
name = "s3"
site = "a"
link = "1gbit"
role = "server"
[[host]]
name = "clients"
site = "a"
link = "1gbit"
role = "client"
"#;

const SERVERS: [&str; 3] = ["s1", "s2", "s3"];
const SERVER_TOML: &str =
    "builtins = [\"add\", \"sleep\", \"dgemm\"]\ncalibrate = false\nslots = 2\n";
/// Where the clients run.
const CLIENTS: &str = "clients";

/// A grid's daemons on the bed, its agent on `agent_host` (the bed knows one agent host; a
/// fleet of agents needs one each), every server on the host of its name, each daemon in a
/// session of its own.
struct AgentOn {
    bed: Arc<Testbed>,
    agent_host: String,
}

impl AgentOn {
    fn host<'a>(&'a self, daemon: &'a str) -> &'a str {
        if daemon == "agent" {
            &self.agent_host
        } else {
            daemon
        }
    }
}

impl Hosts for AgentOn {
    fn ip(&self, daemon: &str) -> Result<String> {
        self.bed.addr(self.host(daemon))
    }

    fn place(&self, daemon: &str, cmd: &mut Command) -> Result<()> {
        self.bed.place(self.host(daemon), cmd)?;
        gridwise_localgrid::own_session(cmd);
        Ok(())
    }
}

/// Runs `f` on a thread in the clients' host's namespace (and every thread it starts, such as
/// a client's runtime, with it).
fn on_clients_host<T: Send>(bed: &Testbed, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            bed.enter(CLIENTS)?;
            f()
        })
        .join()
        .map_err(|_| anyhow!("a client thread panicked"))?
    })
}

/// One run: `agents` agents, `clients` clients of `calls` calls each listing every agent; the
/// first client's agent's host cut off a third of the way through, healed at the end.
/// `program` is the `gridwise` tool.
pub fn run(program: &Path, clients: usize, calls: usize, agents: usize) -> Result<Json> {
    anyhow::ensure!(
        (1..=3).contains(&agents),
        "the cut runs 1 to 3 agents, not {agents}"
    );
    let bed = match Testbed::up(Topology::parse(TOPOLOGY)?) {
        Ok(bed) => Arc::new(bed),
        Err(e) => {
            return Ok(json!({
                "bench": "agents",
                "row": "cut",
                "agents": agents,
                "skipped": format!("cannot build the test bed (it needs root and iproute2): {e:#}"),
            }));
        }
    };
    let db_ip = bed.addr("db")?;
    let pg = {
        let bed = bed.clone();
        TempPostgres::start_on(
            &db_ip,
            Some(Box::new(move |cmd: &mut Command| {
                bed.place("db", cmd).map_err(|e| format!("{e:#}"))
            })),
        )
        .map_err(|e| anyhow!("PostgreSQL on the bed's host db: {e}"))?
    };
    let url = pg
        .create_database(&format!("cut{agents}"))
        .map_err(|e| anyhow!(e))?;
    let mut args = half_second_heartbeats();
    args.extend(["--store".to_string(), url]);
    let mut grids = (1..=agents)
        .map(|i| {
            LocalGrid::start_on(
                Arc::new(AgentOn {
                    bed: bed.clone(),
                    agent_host: format!("agent{i}"),
                }),
                &Launcher::subcommand(program.to_path_buf(), "agent"),
                Launcher::subcommand(program.to_path_buf(), "server"),
                &args,
                false,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let addrs: Vec<String> = grids.iter().map(|g| g.agent.addr.clone()).collect();
    let list = addrs
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    for s in SERVERS {
        grids[0].add_server(s, &format!("agents = [{list}]\n{SERVER_TOML}"))?;
    }
    let config = |agents: &[String]| -> ClientConfig {
        let mut cfg = grids[0].client_config();
        cfg.agents = agents.to_vec();
        cfg
    };
    let configs: Vec<ClientConfig> = addrs
        .iter()
        .map(|a| config(std::slice::from_ref(a)))
        .collect();
    let all = config(&addrs);
    on_clients_host(&bed, || {
        for (cfg, addr) in configs.iter().zip(&addrs) {
            let c = Client::connect(cfg.clone())?;
            wait_for_servers(&c, SERVERS.len(), Duration::from_secs(90))
                .with_context(|| format!("servers registering with the agent at {addr}"))?;
        }
        Ok(())
    })?;

    let total = clients * calls;
    let done = AtomicUsize::new(0);
    let cut_at: Mutex<Option<(Instant, String)>> = Mutex::new(None);
    let moved: Mutex<Vec<Option<f64>>> = Mutex::new(vec![None; clients]);
    let on_cut: Mutex<Vec<bool>> = Mutex::new(vec![false; clients]);
    let survivor_source: Mutex<Option<String>> = Mutex::new(None);
    let switched: Mutex<Vec<Option<f64>>> = Mutex::new(Vec::new());
    let batches = on_clients_host(&bed, || {
        let cs: Vec<Client> = (0..clients)
            .map(|_| Client::connect(all.clone()))
            .collect::<Result<_, _>>()?;
        let victim = cs[0].agent_addr();
        let victim_host = format!(
            "agent{}",
            addrs.iter().position(|a| *a == victim).unwrap_or(0) + 1
        );
        for (i, c) in cs.iter().enumerate() {
            on_cut.lock().unwrap()[i] = c.agent_addr() == victim;
        }
        let batches = std::thread::scope(|s| {
            // When each client on the cut agent had moved to another, polled every ms.
            let watcher = s.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(600);
                let mut seen: Vec<Option<f64>> = vec![None; cs.len()];
                while Instant::now() < deadline {
                    if let Some((at, dead)) = &*cut_at.lock().unwrap() {
                        for (i, c) in cs.iter().enumerate() {
                            if seen[i].is_none() && c.agent_addr() != *dead {
                                seen[i] = Some(at.elapsed().as_secs_f64());
                            }
                        }
                        if seen.iter().all(Option::is_some) {
                            break;
                        }
                    }
                    if done.load(Ordering::Relaxed) >= total {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                seen
            });
            let handles: Vec<_> = cs
                .iter()
                .enumerate()
                .map(|(ci, c)| {
                    let (done, cut_at, moved, bed, victim, victim_host) =
                        (&done, &cut_at, &moved, &bed, &victim, &victim_host);
                    s.spawn(move || -> Result<_> {
                        let mix = Mix::on(c)?;
                        run_batch_with(c, &mix, calls, 8, "agents cut", |_| {
                            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                            if n == total / 3 {
                                eprintln!(
                                    "bench agents: {n} done; cutting off {victim_host} (the agent at {victim})"
                                );
                                bed.partition(&Cut::Host(victim_host.clone()))?;
                                *cut_at.lock().unwrap() = Some((Instant::now(), victim.clone()));
                            }
                            if let Some((at, dead)) = &*cut_at.lock().unwrap()
                                && c.agent_addr() != *dead
                            {
                                super::first_move(moved, ci, *at);
                            }
                            Ok(())
                        })
                    })
                })
                .collect();
            let batches = handles
                .into_iter()
                .map(|h| h.join().expect("client thread"))
                .collect::<Result<Vec<_>>>();
            *switched.lock().unwrap() = watcher.join().expect("watcher thread");
            batches
        })?;
        // What a survivor estimates with: the model of the dgemm the batch ran.
        let survivor = cs
            .iter()
            .find(|c| c.agent_addr() != victim)
            .unwrap_or(&cs[0]);
        *survivor_source.lock().unwrap() = survivor
            .explain(super::dgemm_probe(), gridwise_proto::RankOptions::default())
            .ok()
            .and_then(|c| c.first().map(|c| format!("{:?}", c.etc.compute_source)));
        if let Some((_, _)) = &*cut_at.lock().unwrap() {
            bed.heal(&Cut::Host(victim_host))?;
        }
        Ok(batches)
    })?;
    let (lost, failed, wrong) = super::outcome(&batches);
    let on_cut = on_cut.into_inner().unwrap();
    let moved = moved.into_inner().unwrap();
    let worst = |per_client: &[Option<f64>]| {
        let w = on_cut
            .iter()
            .zip(per_client)
            .filter(|(on, _)| **on)
            .map(|(_, m)| m.unwrap_or(f64::INFINITY))
            .fold(0.0, f64::max);
        if w.is_finite() {
            Json::from(super::round3(w))
        } else {
            Json::Null
        }
    };
    let switched = switched.into_inner().unwrap();
    for g in &mut grids {
        g.agent.kill();
    }
    drop(grids);
    drop(pg);
    drop(bed);
    Ok(json!({
        "bench": "agents",
        "row": "cut",
        "agents": agents,
        "clients": clients,
        "calls": total,
        "lost": lost,
        "failed": failed,
        "wrong": wrong,
        "clients_on_the_cut_agent": on_cut.iter().filter(|b| **b).count(),
        "moved_within_s": worst(&switched),
        "first_completion_after_move_s": worst(&moved),
        "survivor_estimates_with": survivor_source.into_inner().unwrap(),
    }))
}
