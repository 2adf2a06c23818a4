//! The adversarial phase of `bench faults`: what a hostile peer can try on a grid without TLS,
//! during a batch of calls — a hundred ghost servers that answer the agent's check, claim
//! 10¹⁵ op/s and serve nothing (with the server token), a second process registering under the
//! name of a server that is frozen (the same), and 4,096 connections from four loopback
//! addresses trickling frames into a server a byte at a time (no token needed). Every call
//! must still complete with the right answer, no name may change hands, the frozen server's
//! calls must move within three liveness intervals, and the daemons' memory must stay bounded.

use super::{BEAT, EndOfRun, FaultsBench, Mix, SERVER, freeze, run_batch};
use gridwise_client::{Client, ClientConfig};
use gridwise_localgrid::{LocalGrid, flood, ghost, rss_bytes, wait_for_servers};
use gridwise_runtime::wire::{DialConfig, Role};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "bench-faults-server-token";
const GHOSTS: usize = 100;
const GHOST_RATE: f64 = 1e15;
/// The flood: trickling connections from each of 127.0.0.2–5 into s1, a byte every
/// `TRICKLE_EVERY`, as the hostile test that locked clients out had them.
const FLOOD_PER_SOURCE: usize = 1024;
const TRICKLE_EVERY: Duration = Duration::from_millis(250);
/// How long the server whose name is contested stays stopped: shorter than the heartbeat
/// timeout, so it is never declared down and its name must not pass on.
const FROZEN: Duration = Duration::from_secs(5);

/// Runs the phase and returns its JSON object.
pub(super) fn run(opts: &FaultsBench) -> anyhow::Result<serde_json::Value> {
    let exe = std::env::current_exe()?;
    let args: Vec<String> = [
        "--heartbeat-interval-ms",
        &BEAT.as_millis().to_string(),
        "--heartbeat-timeout-ms",
        &(BEAT * 10).as_millis().to_string(),
        "--server-token",
        TOKEN,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut grid = LocalGrid::start_gridwise(&exe, &args)?;
    for name in ["s1", "s2", "s3"] {
        grid.add_server(name, SERVER)?;
    }
    let mut cfg: ClientConfig = grid.client_config();
    cfg.liveness_interval_ms = BEAT.as_millis() as u64;
    let client = Arc::new(Client::connect(cfg)?);
    wait_for_servers(&client, 3, Duration::from_secs(60))?;
    let mix = Mix::on(&client)?;
    let agent = grid.agent.addr.clone();
    let holders: HashMap<String, String> = grid
        .servers
        .iter()
        .zip(["s1", "s2", "s3"])
        .map(|(d, n)| (n.to_string(), d.addr.clone()))
        .collect();
    let grid = Arc::new(Mutex::new(grid));
    let lock = || grid.lock().unwrap_or_else(|p| p.into_inner());

    // Watches, until the run ends, who holds the real servers' names and the daemons' memory.
    let running = Arc::new(AtomicBool::new(true));
    let takeovers = Arc::new(AtomicU64::new(0));
    let max_rss = Arc::new(Mutex::new((0u64, 0u64)));
    let watcher = {
        let (running, takeovers, max_rss, client, grid) = (
            running.clone(),
            takeovers.clone(),
            max_rss.clone(),
            client.clone(),
            grid.clone(),
        );
        std::thread::spawn(move || {
            let mut taken: Vec<String> = Vec::new();
            while running.load(Ordering::Acquire) {
                if let Ok(st) = client.status() {
                    for s in &st.servers {
                        if holders.get(&s.name).is_some_and(|a| *a != s.addr)
                            && !taken.contains(&s.name)
                        {
                            eprintln!(
                                "bench faults: `{}` was taken over (now at {})",
                                s.name, s.addr
                            );
                            taken.push(s.name.clone());
                            takeovers.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                }
                let (agent_pid, servers): (u32, Vec<u32>) = {
                    let g = grid.lock().unwrap_or_else(|p| p.into_inner());
                    (g.agent.pid(), g.servers.iter().map(|s| s.pid()).collect())
                };
                let mut m = max_rss.lock().unwrap_or_else(|p| p.into_inner());
                m.0 = m.0.max(rss_bytes(agent_pid));
                m.1 = servers.into_iter().map(rss_bytes).fold(m.1, u64::max);
                drop(m);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    let calls = opts.adversarial_calls;
    let (raise_at, freeze_at) = (calls / 10, calls * 4 / 10);
    let (flood_at, flood_ends) = (calls * 6 / 10, calls * 9 / 10);
    // The flood's 4,096 sockets live in this process.
    gridwise_runtime::wire::raise_fd_limit();
    let flood_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut flooding: Option<flood::Flood> = None;
    let mut flood_counts = (0usize, 0usize);
    let ghosts: Arc<Mutex<Option<(usize, usize)>>> = Arc::default();
    let frozen_detected: Arc<Mutex<Option<f64>>> = Arc::default();
    let mut helpers = Vec::new();
    let end_of_run = EndOfRun::new();
    let started = Instant::now();
    eprintln!(
        "bench faults: adversarial phase, {calls} calls, {} in flight …",
        opts.window
    );
    let batch = run_batch(
        &client,
        &mix,
        calls,
        opts.window,
        "faults (adversarial)",
        |done| {
            if done == raise_at {
                eprintln!(
                    "bench faults: {done} done; {GHOSTS} ghosts claiming {GHOST_RATE:e} op/s"
                );
                let (agent, add, counted, hold) = (
                    agent.clone(),
                    (*mix.handles[0].desc).clone(),
                    ghosts.clone(),
                    end_of_run.waiter(),
                );
                helpers.push(std::thread::spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => return eprintln!("bench faults: no runtime for the ghosts: {e}"),
                    };
                    let dial = DialConfig::new(Role::Server, Some(TOKEN.into()));
                    rt.block_on(async {
                        let g =
                            ghost::raise(&agent, &dial, "ghost", GHOSTS, &[add], GHOST_RATE).await;
                        *counted.lock().unwrap() = Some((g.accepted, g.refusals.len()));
                        // The ghosts heartbeat on this runtime until the run ends.
                        let hold = hold.clone();
                        let _ = tokio::task::spawn_blocking(move || hold.wait()).await;
                        drop(g);
                    });
                }));
            }
            if done == freeze_at {
                eprintln!(
                    "bench faults: {done} done; SIGSTOP s2 for {FROZEN:?} and start another `s2`"
                );
                let (pid, addr) = {
                    let g = lock();
                    (g.servers[1].pid(), g.servers[1].addr.clone())
                };
                helpers.push(freeze(&client, pid, addr, FROZEN, &frozen_detected));
                lock().add_server("s2", SERVER)?;
            }
            if done == flood_at {
                let target: std::net::SocketAddr = lock().servers[0].addr.parse()?;
                eprintln!(
                    "bench faults: {done} done; {} connections trickling into s1 from 127.0.0.2–5",
                    4 * FLOOD_PER_SOURCE
                );
                let sources: Vec<std::net::Ipv4Addr> = (2..6)
                    .map(|i| std::net::Ipv4Addr::new(127, 0, 0, i))
                    .collect();
                flooding = Some(flood::start(
                    flood_rt.handle(),
                    target,
                    &sources,
                    FLOOD_PER_SOURCE,
                    TRICKLE_EVERY,
                ));
            }
            if done == flood_ends
                && let Some(f) = flooding.take()
            {
                f.stop();
                flood_counts = (
                    f.welcomed.load(Ordering::Relaxed),
                    f.cut.load(Ordering::Relaxed),
                );
            }
            Ok(())
        },
    )?;
    if let Some(f) = flooding.take() {
        f.stop();
        flood_counts = (
            f.welcomed.load(Ordering::Relaxed),
            f.cut.load(Ordering::Relaxed),
        );
    }
    flood_rt.shutdown_timeout(Duration::from_secs(2));
    running.store(false, Ordering::Release);
    let _ = watcher.join();
    drop(end_of_run);
    for h in helpers {
        let _ = h.join();
    }
    let completed = (calls - batch.failed - batch.lost.min(calls - batch.failed)) as u64;
    let (ghosts_accepted, ghosts_refused) = ghosts.lock().unwrap().unwrap_or((0, 0));
    let (agent_rss, server_rss) = *max_rss.lock().unwrap();
    let mb = |b: u64| (b as f64 / 1e5).round() / 10.0;
    Ok(json!({
        "calls": calls,
        "lost": batch.lost,
        "wrong": batch.wrong,
        "failed": batch.failed,
        "retried": batch.retried,
        "extra_tries": batch.tries.saturating_sub(completed),
        "ghosts": GHOSTS,
        "ghosts_accepted": ghosts_accepted,
        "ghosts_refused": ghosts_refused,
        "takeovers": takeovers.load(Ordering::Acquire),
        "flood_connections": 4 * FLOOD_PER_SOURCE,
        "flood_welcomed": flood_counts.0,
        "flood_closed_by_server": flood_counts.1,
        "frozen_s": FROZEN.as_secs_f64(),
        "frozen_detected_s": *frozen_detected.lock().unwrap(),
        "liveness_interval_s": BEAT.as_secs_f64(),
        "agent_rss_max_mb": mb(agent_rss),
        "server_rss_max_mb": mb(server_rss),
        "rank_p99_us": batch.rank_p99_us(),
        "wall_s": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    }))
}
