//! `gridwise bench faults`: a mixed batch of calls (`add`, `sleep`, `dgemm`) on three servers
//! while one server is killed and restarted, one is stopped for 20 s, and the agent is killed
//! and restarted. Every call must complete, with the right result; the figures say how the
//! grid got there: retries, work done twice, how fast a frozen server was noticed and how
//! fast the agent was back.

use gridwise_client::{CallResult, Client, ClientConfig, FunctionHandle, SessionId};
use gridwise_localgrid::LocalGrid;
use gridwise_localgrid::wait_for_servers;
use gridwise_proto::Value;
use serde_json::json;
use statrs::statistics::{Data, OrderStatistics};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod adversarial;

/// What to run.
#[derive(Clone, Debug)]
pub struct FaultsBench {
    /// Calls in the batch.
    pub calls: usize,
    /// Calls in flight at once.
    pub window: usize,
    /// How long the frozen server stays stopped.
    pub freeze: Duration,
    /// Calls in the adversarial phase (0: no such phase).
    pub adversarial_calls: usize,
}

impl Default for FaultsBench {
    fn default() -> Self {
        Self {
            calls: 10_000,
            window: 32,
            freeze: Duration::from_secs(20),
            adversarial_calls: 5_000,
        }
    }
}

/// The agent's heartbeat interval in the benchmark, and the client's liveness interval.
const BEAT: Duration = Duration::from_secs(1);
const SERVER: &str = "builtins = [\"add\", \"sleep\", \"dgemm\"]\ncalibrate = false\nslots = 2\n";
const DGEMM_N: u64 = 64;
/// With nothing completing for this long, the calls still out are counted as lost.
const STALL: Duration = Duration::from_secs(120);

/// The kinds of calls, their inputs and their right answers.
pub(crate) struct Mix {
    handles: [FunctionHandle; 3],
    ones: Value,
}

impl Mix {
    /// Handles of the mix's services on `client`'s grid.
    pub(crate) fn on(client: &Client) -> anyhow::Result<Mix> {
        Ok(Mix {
            handles: ["add", "sleep", "dgemm"]
                .map(|s| client.function_handle_default(s))
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?
                .try_into()
                .map_err(|_| anyhow::anyhow!("three handles"))?,
            ones: Value::matrix_f64(DGEMM_N, DGEMM_N, &vec![1.0; (DGEMM_N * DGEMM_N) as usize]),
        })
    }

    /// Call `i`: 60 % `add`, 20 % `sleep 0`, 2 % `sleep 1`, 18 % a 64³ `dgemm`.
    fn kind(i: usize) -> usize {
        match i % 50 {
            0..30 => 0,
            30..41 => 1,
            _ => 2,
        }
    }

    fn inputs(&self, i: usize) -> Vec<Value> {
        match Self::kind(i) {
            0 => vec![Value::Int(i as i64)],
            1 => vec![Value::Int((i % 50 == 40) as i64)],
            _ => vec![
                Value::Int(DGEMM_N as i64),
                Value::Int(DGEMM_N as i64),
                Value::Int(DGEMM_N as i64),
                self.ones.clone(),
                self.ones.clone(),
            ],
        }
    }

    fn right(&self, i: usize, r: &CallResult) -> bool {
        match Self::kind(i) {
            0 => r.outputs == vec![Value::Int(i as i64 + 1)],
            1 => r.outputs[0].as_double().is_some_and(|s| s >= 0.0),
            _ => r.outputs[0]
                .as_array()
                .and_then(|a| a.to_f64())
                .is_some_and(|c| c.iter().all(|x| *x == DGEMM_N as f64)),
        }
    }
}

/// The faults, by how many calls have completed when they strike.
struct Schedule {
    kill_server: usize,
    restart_server: usize,
    freeze_server: usize,
    kill_agent: usize,
}

impl Schedule {
    fn for_calls(n: usize) -> Self {
        Self {
            kill_server: n * 15 / 100,
            restart_server: n * 30 / 100,
            freeze_server: n * 45 / 100,
            kill_agent: n * 75 / 100,
        }
    }
}

fn executed(c: &Client, addr: &str) -> u64 {
    c.ping(addr).map(|p| p.executed).unwrap_or(0)
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill only sends a signal to a daemon this benchmark started.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Runs the benchmark and returns its JSON object.
pub fn run_faults(opts: &FaultsBench) -> anyhow::Result<serde_json::Value> {
    let exe = std::env::current_exe()?;
    let beat = BEAT.as_millis().to_string();
    let timeout = (BEAT * 10).as_millis().to_string();
    let args = [
        "--heartbeat-interval-ms".to_string(),
        beat,
        "--heartbeat-timeout-ms".into(),
        timeout,
    ];
    let mut grid = LocalGrid::start_gridwise(&exe, &args)?;
    for name in ["s1", "s2", "s3"] {
        grid.add_server(name, SERVER)?;
    }
    let mut cfg: ClientConfig = grid.client_config();
    cfg.liveness_interval_ms = BEAT.as_millis() as u64;
    let client = Arc::new(Client::connect(cfg)?);
    wait_for_servers(&client, 3, Duration::from_secs(60))?;
    let grid = Arc::new(Mutex::new(grid));
    let lock = || grid.lock().unwrap_or_else(|p| p.into_inner());

    let mix = Mix::on(&client)?;
    let schedule = Schedule::for_calls(opts.calls);
    // Kernels the killed server had run before it died.
    let mut executed_by_the_dead = 0u64;
    let frozen_detected: Arc<Mutex<Option<f64>>> = Arc::default();
    let agent_recovery: Arc<Mutex<Option<f64>>> = Arc::default();
    let mut helpers = Vec::new();
    let end_of_run = EndOfRun::new();
    let started = Instant::now();
    eprintln!(
        "bench faults: {} calls, {} in flight …",
        opts.calls, opts.window
    );
    let batch = run_batch(&client, &mix, opts.calls, opts.window, "faults", |done| {
        if done == schedule.kill_server {
            eprintln!("bench faults: {done} done; SIGKILL s1");
            let mut g = lock();
            let addr = g.servers[0].addr.clone();
            executed_by_the_dead += executed(&client, &addr);
            g.servers[0].kill();
        }
        if done == schedule.restart_server {
            eprintln!("bench faults: {done} done; restarting s1");
            lock().restart_server(0)?;
        }
        if done == schedule.freeze_server {
            eprintln!(
                "bench faults: {done} done; SIGSTOP s2 for {:?}",
                opts.freeze
            );
            let (pid, addr) = {
                let g = lock();
                (g.servers[1].pid(), g.servers[1].addr.clone())
            };
            helpers.push(freeze(&client, pid, addr, opts.freeze, &frozen_detected));
        }
        if done == schedule.kill_agent {
            eprintln!("bench faults: {done} done; SIGKILL the agent and start it again");
            let (g, c, recovered) = (grid.clone(), client.clone(), agent_recovery.clone());
            let probe = mix.handles[0].desc.profile(&[Value::Int(1)])?;
            let hold = end_of_run.waiter();
            helpers.push(std::thread::spawn(move || {
                let killed = Instant::now();
                let restarted = g.lock().unwrap_or_else(|p| p.into_inner()).restart_agent();
                if let Err(e) = restarted {
                    eprintln!("bench faults: the agent did not restart: {e:#}");
                    return;
                }
                // Serving again: it ranks a call.
                while killed.elapsed() < Duration::from_secs(60) {
                    if c.explain(probe.clone(), Default::default()).is_ok() {
                        *recovered.lock().unwrap() = Some(killed.elapsed().as_secs_f64());
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                hold.wait();
            }));
        }
        Ok(())
    })?;
    // Counted while every daemon still runs; then the helpers may end.
    let executed_total: u64 = {
        let g = lock();
        let addrs: Vec<String> = g.servers.iter().map(|s| s.addr.clone()).collect();
        drop(g);
        executed_by_the_dead + addrs.iter().map(|a| executed(&client, a)).sum::<u64>()
    };
    drop(end_of_run);
    for h in helpers {
        let _ = h.join();
    }
    let completed = (opts.calls - batch.failed) as u64;
    let mut out = json!({
        "bench": "faults",
        "calls": opts.calls,
        "lost": batch.lost,
        "wrong": batch.wrong,
        "failed": batch.failed,
        "retried": batch.retried,
        "duplicate_executions": executed_total.saturating_sub(completed),
        "frozen_detected_s": *frozen_detected.lock().unwrap(),
        "agent_recovery_s": *agent_recovery.lock().unwrap(),
        "rank_p99_us": batch.rank_p99_us(),
        "heartbeat_interval_s": BEAT.as_secs_f64(),
        "wall_s": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    });
    drop(client);
    drop(grid);
    if opts.adversarial_calls > 0 {
        out["adversarial"] = adversarial::run(opts)?;
    }
    Ok(out)
}

/// The end of a run, for helper threads that must outlive what they started until then: a
/// daemon dies with the thread that started it (the parent-death signal is per thread), and
/// ghosts with the runtime that heartbeats for them. Dropping it ends the wait.
pub(crate) struct EndOfRun {
    _tx: std::sync::mpsc::Sender<()>,
    rx: Arc<Mutex<std::sync::mpsc::Receiver<()>>>,
}

/// A helper's hold on the run: [`RunWaiter::wait`] returns once the run ends.
#[derive(Clone)]
pub(crate) struct RunWaiter(Arc<Mutex<std::sync::mpsc::Receiver<()>>>);

impl EndOfRun {
    pub(crate) fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        Self {
            _tx: tx,
            rx: Arc::new(Mutex::new(rx)),
        }
    }

    pub(crate) fn waiter(&self) -> RunWaiter {
        RunWaiter(self.rx.clone())
    }
}

impl RunWaiter {
    pub(crate) fn wait(&self) {
        let _ = self.0.lock().unwrap_or_else(|p| p.into_inner()).recv();
    }
}

/// How a batch of calls ended.
pub(crate) struct Batch {
    /// Calls that never completed (or were never sent because the run stopped early).
    pub(crate) lost: usize,
    pub(crate) wrong: usize,
    pub(crate) failed: usize,
    /// Calls that took more than one try.
    pub(crate) retried: usize,
    /// Tries over all calls that completed.
    pub(crate) tries: u64,
    /// Answers for a session that had already been answered or was never sent: a failed-over
    /// call's first server answering after all, taken as a second result (counted in `wrong`
    /// too).
    pub(crate) duplicates: usize,
    rank_us: Vec<f64>,
}

/// One completion of a batch, as `run_batch_with`'s callback sees it.
pub(crate) struct Done<'a> {
    /// Completions so far, this one included.
    pub(crate) count: usize,
    /// The server that answered (none for a failed call).
    pub(crate) server: Option<&'a str>,
    /// When the server that answered was sent it (its last attempt: a call taken back from
    /// one server and sent to another reached the second later than it was submitted).
    pub(crate) reached: Option<Instant>,
}

impl Batch {
    /// Adds another batch's counts to this one's.
    pub(crate) fn add(&mut self, other: Batch) {
        self.lost += other.lost;
        self.wrong += other.wrong;
        self.failed += other.failed;
        self.retried += other.retried;
        self.tries += other.tries;
        self.duplicates += other.duplicates;
        self.rank_us.extend(other.rank_us);
    }
}

impl Batch {
    /// The 99th percentile of the agent's ranking time, µs (one decimal).
    pub(crate) fn rank_p99_us(&self) -> f64 {
        if self.rank_us.is_empty() {
            return 0.0;
        }
        let p = Data::new(self.rank_us.clone()).percentile(99);
        (p * 10.0).round() / 10.0
    }
}

/// Runs `calls` calls of the mix, `window` in flight, and checks each answer; `on_done(n)`
/// runs after the n-th completion (where the faults strike).
pub(crate) fn run_batch(
    client: &Client,
    mix: &Mix,
    calls: usize,
    window: usize,
    label: &str,
    mut on_done: impl FnMut(usize) -> anyhow::Result<()>,
) -> anyhow::Result<Batch> {
    run_batch_with(client, mix, calls, window, label, |d| on_done(d.count))
}

/// [`run_batch`], its callback told which server answered each call and when it was sent.
pub(crate) fn run_batch_with(
    client: &Client,
    mix: &Mix,
    calls: usize,
    window: usize,
    label: &str,
    mut on_done: impl FnMut(&Done<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<Batch> {
    let started = Instant::now();
    let mut sessions: HashMap<SessionId, usize> = HashMap::new();
    let (mut sent, mut done) = (0usize, 0usize);
    let mut b = Batch {
        lost: 0,
        wrong: 0,
        failed: 0,
        retried: 0,
        tries: 0,
        duplicates: 0,
        rank_us: Vec::with_capacity(calls),
    };
    let mut failures: Vec<String> = Vec::new();
    let submit = |i: usize, sessions: &mut HashMap<SessionId, usize>| -> anyhow::Result<()> {
        let id = client.call_async(&mix.handles[Mix::kind(i)], mix.inputs(i))?;
        sessions.insert(id, i);
        Ok(())
    };
    while sent < window.min(calls) {
        submit(sent, &mut sessions)?;
        sent += 1;
    }
    let mut last_completion = Instant::now();
    while done < calls {
        // Polled rather than waited for, so that a call that never completes ends the run
        // (counted as lost) instead of hanging it.
        let outstanding: Vec<SessionId> = sessions.keys().copied().collect();
        let id = match client.probe_or(&outstanding) {
            Ok(id) => id,
            Err(_) if last_completion.elapsed() < STALL => {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            Err(_) => {
                eprintln!(
                    "bench {label}: nothing completed for {STALL:?}; {} call(s) lost",
                    sessions.len()
                );
                break;
            }
        };
        last_completion = Instant::now();
        let i = sessions.remove(&id).unwrap_or(usize::MAX);
        let r = client.wait(id);
        done += 1;
        let server = r.as_ref().ok().map(|r| r.server.clone());
        let reached = r
            .as_ref()
            .ok()
            .and_then(|r| last_completion.checked_sub(Duration::from_secs_f64(r.round_trip_s)));
        match r {
            Ok(r) => {
                if i == usize::MAX || !mix.right(i, &r) {
                    b.wrong += 1;
                }
                b.duplicates += (i == usize::MAX) as usize;
                b.retried += (r.attempts > 1) as usize;
                b.tries += u64::from(r.attempts);
                b.rank_us.push(r.rank_s * 1e6);
            }
            Err(e) => {
                b.failed += 1;
                if failures.len() < 10 {
                    eprintln!("bench {label}: call {i} failed: {e}");
                    failures.push(e.to_string());
                }
            }
        }
        on_done(&Done {
            count: done,
            server: server.as_deref(),
            reached,
        })?;
        if done % 1000 == 0 {
            eprintln!(
                "bench {label}: {done}/{calls} done, {} failed, {:.1} s",
                b.failed,
                started.elapsed().as_secs_f64()
            );
        }
        if sent < calls {
            submit(sent, &mut sessions)?;
            sent += 1;
        }
    }
    // Calls never submitted because the run stopped early count as lost too.
    b.lost = sessions.len() + (calls - sent);
    for f in &failures {
        eprintln!("bench {label}: failed: {f}");
    }
    Ok(b)
}

/// Stops the server `pid` (at `addr`) for `freeze`, noting in `detected` how long the client
/// took to call it unresponsive; the returned thread resumes it.
pub(crate) fn freeze(
    client: &Arc<Client>,
    pid: u32,
    addr: String,
    freeze: Duration,
    detected: &Arc<Mutex<Option<f64>>>,
) -> std::thread::JoinHandle<()> {
    let stopped = Instant::now();
    signal(pid, libc::SIGSTOP);
    let (c, detected) = (client.clone(), detected.clone());
    std::thread::spawn(move || {
        while stopped.elapsed() < freeze {
            if detected.lock().unwrap().is_none() && c.unresponsive_servers().contains(&addr) {
                *detected.lock().unwrap() = Some(stopped.elapsed().as_secs_f64());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(pid, libc::SIGCONT);
    })
}
