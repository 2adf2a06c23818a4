//! `gridwise bench predict`: how well gridwise predicts on shared machines, and what scheduling
//! with those predictions gains.
//!
//! A real agent and real servers on loopback. Emulated servers carry background load traces
//! (`dedicated`: none; `random`: bursts of 1–3 competing processes; `steady`: AR(1) drift) and
//! learn their models by benchmarking under that load; the real dgemm server (`real`) shares
//! this host with 0–3 busy processes the benchmark itself starts and stops. Every call is
//! predicted by each predictor just before it runs (the agent's `explain`, pinned to the server
//! that runs it), then timed by the client.
//!
//! Then scheduling: a bag and a DAG on the loaded emulated servers, each repeated with
//! different traces under `mct` on load-blind estimates, `mct` on forecasts and `conservative`.
//! Every (run, policy) restarts the servers, so the three policies of a run meet the same
//! trace from its start.

use gridwise_client::{Client, ClientConfig, FunctionHandle, GraphArg};
use gridwise_localgrid::LocalGrid;
use gridwise_predict::EtcSpread;
use gridwise_proto::{BuildState, ServerState};
use gridwise_proto::{CallProfile, Etc, LoadModel, ModelFamily, Policy, RankOptions, Value};
use serde_json::{Value as Json, json};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct PredictBench {
    /// Calls predicted and timed per load.
    pub calls: usize,
    /// Repetitions of each scheduling workload, each with other traces.
    pub runs: usize,
    /// Where to write every timed call with each predictor's estimate, if anywhere.
    pub csv: Option<std::path::PathBuf>,
    /// The parts to run (all when empty): `dedicated`, `random`, `steady`, `real`, `schedule`.
    pub only: Vec<String>,
}

/// The parts of the benchmark, in the order they run: `real` has the dgemm server in the
/// bench's session (where the kernel's scheduler shares the CPU evenly among processes, the
/// busy ones included); `real-daemon` has it and a system-BLAS server each in a session of
/// its own, as deployed; `real-cgroup` puts them in a control group of their own and the busy
/// processes in another, as systemd, Slurm or Kubernetes would (where this process may make
/// cgroups: it needs root).
pub const PARTS: [&str; 7] = [
    "dedicated",
    "random",
    "steady",
    "real",
    "real-daemon",
    "real-cgroup",
    "schedule",
];

impl Default for PredictBench {
    fn default() -> Self {
        Self {
            calls: 60,
            runs: 8,
            csv: None,
            only: Vec::new(),
        }
    }
}

/// The header of `--csv`: one row per (call, predictor).
/// The columns after the interval set measured times beside the terms that predicted them:
/// the kernel's time and the compute term (its spread, the queue's, the CPU share expected);
/// the inputs' measured transfer and the predicted one; the server's time; the predicted
/// transfer out and server overhead; for the real server, the busy processes and the share of
/// a core its kernel's thread obtained.
pub const CSV_HEADER: &str = "load,predictor,call,actual_s,predicted_s,low90_s,high90_s,\
kernel_s,compute_s,compute_sd_s,queue_wait_sd_s,cpu_expected,input_transfer_s,transfer_in_s,\
server_s,transfer_out_s,overhead_s,busy,cpu_obtained";

/// Calls shorter than this are reported apart: timer and scheduling noise dominate them.
const SHORT_S: f64 = 0.05;

/// The predictors compared: (name, load model, model family).
const PREDICTORS: [(&str, LoadModel, ModelFamily); 4] = [
    ("band", LoadModel::Band, ModelFamily::Fpm),
    ("forecast", LoadModel::Forecast, ModelFamily::Fpm),
    ("regression", LoadModel::Forecast, ModelFamily::Regression),
    ("auto", LoadModel::Forecast, ModelFamily::Auto),
];

/// What gridwise uses when nobody configures anything.
const DEFAULT_PREDICTOR: &str = "forecast";

/// The emulated servers' true speeds of `solve` (n³ operations), op/s by size: different
/// machines, so that placement matters.
const SPEEDS: [&str; 3] = [
    "[[100, 2.0e9], [500, 2.4e9], [1000, 2.2e9]]",
    "[[100, 1.2e9], [500, 1.6e9], [1000, 1.5e9]]",
    "[[100, 0.9e9], [500, 1.0e9], [1000, 1.1e9]]",
];

fn load_toml(load: &str, seed: u64) -> String {
    match load {
        "random" => format!(
            "load = {{ kind = \"random\", seed = {seed}, mean_idle_s = 20.0, mean_busy_s = 20.0, max_processes = 3 }}\n"
        ),
        "steady" => format!(
            "load = {{ kind = \"steady\", seed = {seed}, mean = 0.6, sd = 0.1, phi = 0.95, step_s = 2.0 }}\n"
        ),
        _ => String::new(),
    }
}

fn emulated_toml(speed: &str, load: &str, seed: u64, model_dir: &std::path::Path) -> String {
    format!(
        "builtins = []\nslots = 1\nmodel_dir = {dir:?}\n{load}\n[[emulated]]\nname = \"solve\"\nparam = \"n\"\n\
         complexity = \"n^3\"\nspeed = {speed}\ninputs = 1\noutput = true\n\n[[models]]\nservice = \"solve\"\n\
         method = \"gbbp\"\nparams = [{{ name = \"n\", min = 100, max = 1000, stride = 20 }}]\n",
        dir = model_dir.display().to_string(),
        load = load_toml(load, seed),
    )
}

/// One timed call and what each predictor said of it.
struct Observed {
    actual_s: f64,
    timing: gridwise_proto::Timing,
    predicted: Vec<Etc>,
    /// For the real server: the busy processes running when the call was sent, and the share
    /// of a core each of the kernel's threads obtained (their CPU time over the kernel's time
    /// and threads: measured by the bench, apart from what the server reports; `kernel_cpu`).
    real: Option<(usize, Option<f64>)>,
}

/// Runs everything; one JSON object per line of result, printed as each is ready.
pub fn run(opts: &PredictBench, emit: &mut dyn FnMut(Json)) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    // The band needs a load history: one sample per 5 s instead of per minute, or a
    // benchmark this short would never see it act. Everything else is the default.
    let models = tempfile::tempdir()?;
    let config = models.path().join("agent.toml");
    std::fs::write(&config, "load_sample_s = 5.0\n")?;
    let agent_args = ["--config".to_string(), config.display().to_string()];
    let mut grid = LocalGrid::start_gridwise(&exe, &agent_args)?;
    let client = Client::connect(grid.client_config())?;
    let mut csv = match &opts.csv {
        Some(path) => {
            let mut f = std::fs::File::create(path)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            writeln!(f, "{CSV_HEADER}")?;
            Some(f)
        }
        None => None,
    };
    let mut record = |load: &str, observed: &[Observed]| -> anyhow::Result<()> {
        if let Some(f) = csv.as_mut() {
            for (i, o) in observed.iter().enumerate() {
                for (p, (name, _, _)) in PREDICTORS.iter().enumerate() {
                    let e = &o.predicted[p];
                    let (lo, hi) = e.interval90_s();
                    let opt = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.4}"));
                    writeln!(
                        f,
                        "{load},{name},{i},{:.6},{:.6},{lo:.6},{hi:.6},{:.6},{:.6},{:.6},{:.6},{},\
                         {:.6},{:.6},{:.6},{:.6},{:.6},{},{}",
                        o.actual_s,
                        e.total_s(),
                        o.timing.kernel_s,
                        e.compute_s,
                        e.compute_sd_s,
                        e.queue_wait_sd_s,
                        opt(e.cpu_available),
                        o.timing.input_transfer_s,
                        e.transfer_in_s,
                        o.timing.server_s,
                        e.transfer_out_s,
                        e.overhead_s,
                        o.real.map_or(String::new(), |r| r.0.to_string()),
                        opt(o.real.and_then(|r| r.1)),
                    )?;
                }
            }
        }
        Ok(())
    };

    let wanted = |part: &str| opts.only.is_empty() || opts.only.iter().any(|p| p == part);
    if let Some(p) = opts.only.iter().find(|p| !PARTS.contains(&p.as_str())) {
        anyhow::bail!(
            "no part `{p}` in bench predict: the parts are {}",
            PARTS.join(", ")
        );
    }
    for load in ["dedicated", "random", "steady"] {
        if !wanted(load) {
            continue;
        }
        let names: Vec<String> = (0..3).map(|i| format!("{load}-{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            let dir = models.path().join(name);
            grid.add_server(name, &emulated_toml(SPEEDS[i], load, 11 + i as u64, &dir))?;
        }
        eprintln!("bench predict: {load}: servers learn their models under the load …");
        wait_ready(&client, &grid, &names, true)?;
        let observed = predict_emulated(&client, &names, opts.calls)?;
        report(load, "same-session", &observed, emit);
        record(load, &observed)?;
        for _ in 0..3 {
            let i = grid.servers.len() - 1;
            grid.servers[i].kill();
            grid.servers.pop();
            grid.names.pop();
        }
    }
    if wanted("real") {
        let (observed, idle, _) = predict_real(
            &mut grid,
            &client,
            opts.calls,
            RealKernel::Builtin,
            None,
            models.path(),
            None,
        )?;
        report_real("same-session", RealKernel::Builtin, &observed, idle, emit);
        record("real", &observed)?;
    }
    let launchers = (
        gridwise_localgrid::Launcher::subcommand(exe.clone(), "agent"),
        gridwise_localgrid::Launcher::subcommand(exe.clone(), "server"),
    );
    let mut deployed_part =
        |hosts: std::sync::Arc<dyn gridwise_localgrid::Hosts>,
         placement: &str,
         part: &str,
         load_group: Option<std::sync::Arc<gridwise_localgrid::cpu_group::CpuGroup>>,
         emit: &mut dyn FnMut(Json)|
         -> anyhow::Result<()> {
            let mut daemons =
                LocalGrid::start_on(hosts, &launchers.0, launchers.1.clone(), &agent_args, false)?;
            let own = Client::connect(daemons.client_config())?;
            let emu = add_emulated(&mut daemons, &own, models.path(), part)?;
            let mut emulated = Vec::new();
            for kernel in [RealKernel::Builtin, RealKernel::Blas] {
                let (observed, idle, beside) = predict_real(
                    &mut daemons,
                    &own,
                    opts.calls,
                    kernel,
                    load_group.clone(),
                    models.path(),
                    Some(&emu),
                )?;
                report_real(placement, kernel, &observed, idle, emit);
                record(&format!("{}-{part}", kernel.server()), &observed)?;
                emulated.extend(beside);
            }
            report("emulated", placement, &emulated, emit);
            report_phases(placement, "emulated", "solve", 1, &emulated, None, emit);
            record(&format!("emulated-{part}"), &emulated)
        };
    if wanted("real-daemon") {
        // A grid of its own, every daemon in its own session; the busy processes stay in the
        // bench's.
        let hosts = std::sync::Arc::new(gridwise_localgrid::OwnSessions);
        deployed_part(hosts, "own-session", "daemon", None, emit)?;
    }
    if wanted("real-cgroup") {
        use gridwise_localgrid::cpu_group::{CpuGroup, InCpuGroup};
        let run = format!("gridwise-bench-{}", std::process::id());
        let groups = CpuGroup::make(&format!("{run}/daemons"))
            .and_then(|d| Ok((d, CpuGroup::make(&format!("{run}/load"))?)));
        match groups {
            Err(why) => {
                eprintln!("bench predict: real-cgroup skipped: {why}");
                emit(
                    json!({"bench": "predict", "load": "real", "placement": "own-cgroup", "skipped": why}),
                );
            }
            Ok((daemons_group, load_group)) => {
                eprintln!(
                    "bench predict: real-cgroup: daemons in {}, busy processes in {}",
                    daemons_group.path().display(),
                    load_group.path().display()
                );
                let hosts = std::sync::Arc::new(InCpuGroup(std::sync::Arc::new(daemons_group)));
                // The daemons are stopped (their grid dropped) before the groups are removed.
                deployed_part(
                    hosts,
                    "own-cgroup",
                    "cgroup",
                    Some(std::sync::Arc::new(load_group)),
                    emit,
                )?;
            }
        }
    }
    drop(client);
    if !wanted("schedule") {
        return Ok(());
    }
    for load in ["random", "steady"] {
        for workload in ["bag", "dag"] {
            schedule(&mut grid, models.path(), load, workload, opts.runs, emit)?;
        }
    }
    Ok(())
}

/// `count` sizes of `solve` drawn from [lo, hi] (300 takes 10 ms on a quiet emulated
/// server, 1000 about 0.5 to 0.9 s).
fn sizes(count: usize, seed: u64, lo: i64, hi: i64) -> Vec<i64> {
    let mut x = seed;
    (0..count)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + ((x >> 33) % (hi - lo + 1) as u64) as i64
        })
        .collect()
}

fn solve_inputs(n: i64) -> Vec<Value> {
    vec![Value::Int(n), Value::vector_f64(&vec![0.0f64; n as usize])]
}

/// Each predictor's estimate for `profile` on `server` now.
fn predictions(client: &Client, profile: &CallProfile, server: &str) -> anyhow::Result<Vec<Etc>> {
    PREDICTORS
        .iter()
        .map(|(name, load, family)| {
            let opts = RankOptions {
                pin_server: Some(server.to_string()),
                load_model: Some(*load),
                model_family: Some(*family),
                ..RankOptions::default()
            };
            let c = client.explain(profile.clone(), opts)?;
            let first = c
                .into_iter()
                .next()
                .ok_or_else(|| anyhow::anyhow!("no estimate from {name} on {server}"))?;
            Ok(first.etc)
        })
        .collect()
}

/// Round-robin over the emulated servers, each call pinned, after a short warm-up that lets
/// the models score themselves.
fn predict_emulated(
    client: &Client,
    names: &[String],
    calls: usize,
) -> anyhow::Result<Vec<Observed>> {
    let handles: Vec<FunctionHandle> = names
        .iter()
        .map(|n| client.function_handle_init("solve", n))
        .collect::<Result<_, _>>()?;
    let desc = handles[0].desc.clone();
    let warm = 3 * names.len();
    let mut out = Vec::new();
    for (i, n) in sizes(warm + calls, 7, 300, 800).into_iter().enumerate() {
        let s = i % names.len();
        let inputs = solve_inputs(n);
        let profile = desc.profile(&inputs)?;
        let predicted = predictions(client, &profile, &names[s])?;
        let r = client.call(&handles[s], inputs)?;
        if i >= warm {
            out.push(Observed {
                actual_s: r.round_trip_s,
                timing: r.timing,
                predicted,
                real: None,
            });
        }
        if (i + 1) % 20 == 0 {
            eprintln!("bench predict: {} of {} calls", i + 1, warm + calls);
        }
    }
    Ok(out)
}

/// Busy processes on this host, started and stopped by the benchmark: in its session, or in
/// a control group (and sessions) of their own.
struct Busy(
    Vec<Child>,
    Option<std::sync::Arc<gridwise_localgrid::cpu_group::CpuGroup>>,
);

impl Busy {
    fn set(&mut self, k: usize) -> anyhow::Result<()> {
        while self.0.len() > k {
            let mut c = self.0.pop().expect("non-empty");
            let _ = c.kill();
            let _ = c.wait();
        }
        while self.0.len() < k {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if let Some(g) = &self.1 {
                g.place(&mut cmd);
            }
            // A benchmark killed midway leaves no spinner behind to load the next one's host.
            // SAFETY: prctl(2) is async-signal-safe; it acts on the child being set up.
            unsafe {
                use std::os::unix::process::CommandExt;
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            self.0.push(cmd.spawn()?);
        }
        Ok(())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.set(0);
    }
}

/// How many busy processes run in each phase of `real`, and for how long (s): every level
/// from 0 to 3 is met, entered from above and from below.
const REAL_PHASES: [(usize, u64); 8] = [
    (0, 10),
    (2, 12),
    (1, 9),
    (3, 14),
    (0, 11),
    (2, 8),
    (3, 13),
    (1, 10),
];

/// The busy-process level once the load's phases are over.
const PHASES_OVER: usize = usize::MAX;

/// A real kernel the `real` parts time under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RealKernel {
    /// The built-in dgemm (matrixmultiply, one thread), run on the server's slot thread.
    Builtin,
    /// The system BLAS's dgemm (`blas_dgemm` of `examples/services/lapack.toml`), run in a
    /// library worker with as many threads as the host has cores.
    Blas,
}

/// The description file of the library routines, as the examples give it.
const LAPACK_SERVICES: &str = include_str!("../../../examples/services/lapack.toml");

impl RealKernel {
    fn server(self) -> &'static str {
        match self {
            RealKernel::Builtin => "real",
            RealKernel::Blas => "real-blas",
        }
    }

    fn service(self) -> &'static str {
        match self {
            RealKernel::Builtin => "dgemm",
            RealKernel::Blas => "blas_dgemm",
        }
    }

    fn threads(self) -> u32 {
        match self {
            RealKernel::Builtin => 1,
            RealKernel::Blas => std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        }
    }

    /// The server's config; `dir` holds the description file it needs.
    fn toml(self, dir: &std::path::Path) -> anyhow::Result<String> {
        Ok(match self {
            RealKernel::Builtin => "builtins = [\"dgemm\"]\nslots = 1\n".to_string(),
            RealKernel::Blas => {
                let services = dir.join("lapack.toml");
                std::fs::write(&services, LAPACK_SERVICES)?;
                format!(
                    "builtins = []\nslots = 1\nthreads = {}\nservices = [{:?}]\n\
                     [[library]]\nservice = \"blas_dgemm\"\npath = \"libblas.so.3\"\n",
                    self.threads(),
                    services.display().to_string()
                )
            }
        })
    }
}

/// The rate (operations per second) of `kernel` on `server`: the one its calibration
/// reported, else measured here from the quickest of three calls of a 600³ product.
fn real_rate(client: &Client, h: &FunctionHandle, server: &str) -> anyhow::Result<f64> {
    // A library routine has no calibration: its server's default rate is not its own.
    let reported = client
        .status()?
        .servers
        .iter()
        .find(|s| s.name == server)
        .map(|s| s.default_rate)
        .filter(|r| r.is_finite() && *r > 0.0 && h.desc.name == "dgemm");
    if let Some(r) = reported {
        return Ok(r);
    }
    let n = 600i64;
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let v =
            gridwise_kernels::inputs_for_sizes(&h.desc, &[n, n, n]).map_err(anyhow::Error::msg)?;
        best = best.min(client.call(h, v)?.timing.kernel_s);
    }
    anyhow::ensure!(best > 0.0, "{server} reported no kernel time");
    Ok(2.0 * (n as f64).powi(3) / best)
}

/// The real `kernel`'s server while 0–3 busy processes (in `load_group`, if given) come and
/// go on their own clock, as other users' jobs do. The calls are spread evenly over the
/// phases, so every level of load is met whatever this machine's speed, and are sized from
/// the server's measured rate to take 0.1 to 0.3 s on a quiet host.
fn predict_real(
    grid: &mut LocalGrid,
    client: &Client,
    calls: usize,
    kernel: RealKernel,
    load_group: Option<std::sync::Arc<gridwise_localgrid::cpu_group::CpuGroup>>,
    dir: &std::path::Path,
    emulated: Option<&str>,
) -> anyhow::Result<(Vec<Observed>, IdleDrift, Vec<Observed>)> {
    let server = kernel.server();
    grid.add_server(server, &kernel.toml(dir)?)?;
    wait_ready(client, grid, &[server.to_string()], false)?;
    let h = client.function_handle_init(kernel.service(), server)?;
    let rate = real_rate(client, &h, server)?;
    // 2n³ operations in t seconds at `rate`.
    let size_for = |t: f64| ((t * rate / 2.0).cbrt() / 10.0).round() as i64 * 10;
    let dgemm_sizes: Vec<i64> = (0..9).map(|k| size_for(0.1 + 0.025 * k as f64)).collect();
    // Made once per size: tens of MB of random matrices take this process a core for a
    // tenth of a second, which the server's sensors would read as load just before each call
    // (a client on another host would not be there).
    let made: std::collections::HashMap<i64, Vec<Value>> = dgemm_sizes
        .iter()
        .map(|&n| {
            gridwise_kernels::inputs_for_sizes(&h.desc, &[n, n, n])
                .map(|v| (n, v))
                .map_err(anyhow::Error::msg)
        })
        .collect::<anyhow::Result<_>>()?;
    let inputs = |n: i64| -> Result<Vec<Value>, String> {
        made.get(&n)
            .cloned()
            .ok_or_else(|| format!("no inputs made for n = {n}"))
    };
    eprintln!(
        "bench predict: {server}: warming up the {} model on a quiet host (n = {} to {}) …",
        kernel.service(),
        dgemm_sizes[0],
        dgemm_sizes[dgemm_sizes.len() - 1]
    );
    for _ in 0..2 {
        for &n in &dgemm_sizes {
            client.call(&h, inputs(n).map_err(anyhow::Error::msg)?)?;
        }
    }
    let pid = grid.servers[grid.names.iter().position(|n| n == server).expect("added")].pid();
    let probe_n = dgemm_sizes[dgemm_sizes.len() / 2];
    let idle_now = || -> anyhow::Result<f64> {
        let profile = h
            .desc
            .profile(&inputs(probe_n).map_err(anyhow::Error::msg)?)?;
        let opts = RankOptions {
            pin_server: Some(server.into()),
            load_model: Some(LoadModel::Blind),
            ..RankOptions::default()
        };
        let c = client.explain(profile, opts)?;
        c.into_iter()
            .next()
            .map(|c| c.etc.compute_s)
            .ok_or_else(|| anyhow::anyhow!("no estimate from {server}"))
    };
    let idle_before = idle_now()?;
    let level = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let total: u64 = REAL_PHASES.iter().map(|(_, s)| s).sum();
    let gap = Duration::from_secs_f64(total as f64 / calls.max(1) as f64);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        let now = level.clone();
        std::thread::spawn(move || -> anyhow::Result<()> {
            let mut busy = Busy(Vec::new(), load_group);
            for (level, secs) in REAL_PHASES {
                busy.set(level)?;
                now.store(level, std::sync::atomic::Ordering::SeqCst);
                let until = Instant::now() + Duration::from_secs(secs);
                while Instant::now() < until && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            now.store(PHASES_OVER, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
    };
    let emulated = match emulated {
        Some(name) => Some((name, client.function_handle_init("solve", name)?)),
        None => None,
    };
    let emulated_sizes = sizes(calls, 17, 500, 800);
    let mut emulated_out = Vec::new();
    let start = Instant::now();
    let mut out = Vec::new();
    let run = (|| -> anyhow::Result<()> {
        for i in 0..calls {
            let due = start + gap.mul_f64(i as f64 + 0.5);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let n = dgemm_sizes[(i * 5 + 3) % dgemm_sizes.len()];
            let v = inputs(n).map_err(anyhow::Error::msg)?;
            let profile = h.desc.profile(&v)?;
            let predicted = predictions(client, &profile, server)?;
            let busy_then = level.load(std::sync::atomic::Ordering::SeqCst);
            // Calls slower than their spacing would run on past the phases, on a quiet host
            // counted as the last phase's load.
            if busy_then == PHASES_OVER {
                eprintln!(
                    "bench predict: {server}: the load's phases ended after {i} of {calls} calls"
                );
                break;
            }
            let cpu_before = kernel_cpu_times(kernel, pid);
            let r = client.call(&h, v)?;
            let obtained = kernel_cpu(kernel, cpu_before, kernel_cpu_times(kernel, pid))
                .filter(|_| r.timing.kernel_s > 0.0)
                .map(|c| (c / (r.timing.kernel_s * f64::from(kernel.threads()))).min(1.0));
            out.push(Observed {
                actual_s: r.round_trip_s,
                timing: r.timing,
                predicted,
                real: Some((busy_then, obtained)),
            });
            // An emulated server beside it, a daemon on the same loaded host: its kernel
            // sleeps, but receiving, decoding and replying take the CPU the load leaves.
            if let Some((name, eh)) = &emulated {
                let v = solve_inputs(emulated_sizes[i]);
                let predicted = predictions(client, &eh.desc.profile(&v)?, name)?;
                let busy_then = level.load(std::sync::atomic::Ordering::SeqCst);
                let r = client.call(eh, v)?;
                emulated_out.push(Observed {
                    actual_s: r.round_trip_s,
                    timing: r.timing,
                    predicted,
                    real: Some((busy_then, None)),
                });
            }
            if (i + 1) % 20 == 0 {
                eprintln!("bench predict: {server}: {} of {calls} calls", i + 1);
            }
        }
        Ok(())
    })();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let busy = busy
        .join()
        .map_err(|_| anyhow::anyhow!("the thread running the busy processes panicked"))?;
    run?;
    busy?;
    // The load gone for a few seconds, as a quiet host's forecast would have it.
    std::thread::sleep(Duration::from_secs(3));
    let idle = IdleDrift {
        size: probe_n,
        before_s: idle_before,
        after_s: idle_now()?,
    };
    let i = grid.names.iter().position(|n| n == server).expect("added");
    grid.servers[i].kill();
    grid.servers.remove(i);
    grid.names.remove(i);
    Ok((out, idle, emulated_out))
}

/// The CPU time of every thread that may run `kernel`'s work, by thread id: the server's
/// threads for the built-in, its library workers' (child processes') for the BLAS.
fn kernel_cpu_times(kernel: RealKernel, server_pid: u32) -> Option<Vec<(u32, Duration)>> {
    match kernel {
        RealKernel::Builtin => gridwise_kernels::thread_cpu_times(server_pid),
        RealKernel::Blas => Some(
            gridwise_kernels::child_pids(server_pid)
                .into_iter()
                .filter_map(gridwise_kernels::thread_cpu_times)
                .flatten()
                .collect(),
        ),
    }
}

/// The CPU time `kernel` used over a call, from [`kernel_cpu_times`] before and after it:
/// the built-in's, the thread that used the most (its slot thread; the whole process's time
/// would add the decoding and encoding of the call's tens of MB of matrices, done on other
/// threads outside the kernel's time); the BLAS's, every worker thread's.
fn kernel_cpu(
    kernel: RealKernel,
    before: Option<Vec<(u32, Duration)>>,
    after: Option<Vec<(u32, Duration)>>,
) -> Option<f64> {
    let before: std::collections::HashMap<u32, Duration> = before?.into_iter().collect();
    let used = after?
        .into_iter()
        .map(|(tid, t)| t.saturating_sub(before.get(&tid).copied().unwrap_or_default()));
    match kernel {
        RealKernel::Builtin => used.max(),
        RealKernel::Blas => Some(used.sum()),
    }
    .map(|d| d.as_secs_f64())
}

/// The real server's quiet-host estimate of one dgemm before and after the loaded calls: what
/// the loaded calls taught the model of an idle host.
struct IdleDrift {
    size: i64,
    before_s: f64,
    after_s: f64,
}

/// The rows of a real server's run: per predictor, then per load phase, then the drift.
fn report_real(
    placement: &str,
    kernel: RealKernel,
    observed: &[Observed],
    idle: IdleDrift,
    emit: &mut dyn FnMut(Json),
) {
    report(kernel.server(), placement, observed, emit);
    report_phases(
        placement,
        kernel.server(),
        kernel.service(),
        kernel.threads(),
        observed,
        Some(idle),
        emit,
    );
}

/// An emulated server (a dedicated one's speeds, its model built by GBBP) beside the real
/// ones of the grid, named for the part.
fn add_emulated(
    grid: &mut LocalGrid,
    client: &Client,
    models: &std::path::Path,
    part: &str,
) -> anyhow::Result<String> {
    let name = format!("emulated-{part}");
    let toml = emulated_toml(SPEEDS[0], "dedicated", 31, &models.join(&name));
    grid.add_server(&name, &toml)?;
    eprintln!("bench predict: {name}: the emulated server builds its model …");
    wait_ready(client, grid, std::slice::from_ref(&name), true)?;
    Ok(name)
}

/// Per number of busy processes, the default predictor on the real server's kernel time: the
/// mean and signed error, the share of a core each kernel thread was expected to get and the
/// one it obtained, the error of ignoring the load (the quiet-host time), how often the 90%
/// interval of the whole call held it and how many intervals had no width; then the drift of
/// the quiet-host estimate over the run.
fn report_phases(
    placement: &str,
    load: &str,
    service: &str,
    threads: u32,
    observed: &[Observed],
    idle: Option<IdleDrift>,
    emit: &mut dyn FnMut(Json),
) {
    let p = PREDICTORS
        .iter()
        .position(|(n, _, _)| *n == DEFAULT_PREDICTOR)
        .expect("the default is a predictor");
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let levels: Vec<Option<usize>> = (0..=3).map(Some).chain([None]).collect();
    for level in levels {
        let calls: Vec<&Observed> = observed
            .iter()
            .filter(|o| o.timing.kernel_s >= SHORT_S)
            .filter(|o| level.is_none() || o.real.map(|r| r.0) == level)
            .collect();
        let err =
            |o: &Observed, predicted: f64| (predicted - o.timing.kernel_s) / o.timing.kernel_s;
        let signed: Vec<f64> = calls
            .iter()
            .map(|o| err(o, o.predicted[p].compute_s))
            .collect();
        let abs: Vec<f64> = signed.iter().map(|e| e.abs()).collect();
        let blind: Vec<f64> = calls
            .iter()
            .map(|o| {
                let e = &o.predicted[p];
                err(o, e.compute_s * e.cpu_available.unwrap_or(1.0)).abs()
            })
            .collect();
        let expected: Vec<f64> = calls
            .iter()
            .filter_map(|o| o.predicted[p].cpu_available)
            .collect();
        // The same estimate had it known the share each call would obtain: what is left is
        // the quiet-host model's own error (and this machine's drift), the floor for a
        // forecast of the share.
        let share_known: Vec<f64> = calls
            .iter()
            .filter_map(|o| {
                let e = &o.predicted[p];
                let (expected, obtained) = (e.cpu_available?, o.real?.1?);
                Some(err(o, e.compute_s * expected / obtained).abs())
            })
            .collect();
        let obtained: Vec<f64> = calls
            .iter()
            .filter_map(|o| o.real.and_then(|r| r.1))
            .collect();
        let intervals: Vec<(f64, f64)> = calls
            .iter()
            .map(|o| o.predicted[p].interval90_s())
            .collect();
        let covered = calls
            .iter()
            .zip(&intervals)
            .filter(|(o, (lo, hi))| *lo <= o.actual_s && o.actual_s <= *hi)
            .count();
        let zero_width = intervals.iter().filter(|(lo, hi)| hi - lo <= 0.0).count();
        emit(json!({
            "bench": "predict_phase",
            "load": load,
            "kernel": service,
            "threads": threads,
            "placement": placement,
            "busy": level.map_or(Json::from("all"), Json::from),
            "calls": calls.len(),
            "interval90_coverage": round((!calls.is_empty()).then(|| covered as f64 / calls.len() as f64), 3),
            "zero_width_intervals": zero_width,
            "kernel_mean_error": round(mean(&abs), 4),
            "kernel_signed_error": round(mean(&signed), 4),
            "share_expected": round(mean(&expected), 3),
            "share_obtained": round(mean(&obtained), 3),
            "load_ignored_error": round(mean(&blind), 4),
            "share_known_error": round(mean(&share_known), 4),
        }));
    }
    let Some(idle) = idle else {
        return;
    };
    emit(json!({
        "bench": "predict_drift",
        "load": load,
        "kernel": service,
        "placement": placement,
        "dgemm_n": idle.size,
        "idle_estimate_before_s": round(Some(idle.before_s), 4),
        "idle_estimate_after_s": round(Some(idle.after_s), 4),
        "idle_drift": round(Some(idle.after_s / idle.before_s - 1.0), 4),
    }));
}

/// Waits until each of `names` is registered from the address its daemon listens on (a
/// restarted server has a new one) and, with `models`, has its model of `solve` built or
/// loaded.
fn wait_ready(
    client: &Client,
    grid: &LocalGrid,
    names: &[String],
    models: bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let status = client.status()?;
        let registered = names.iter().all(|name| {
            let k = grid.names.iter().position(|n| n == name);
            status.servers.iter().any(|s| {
                s.name == *name
                    && s.state == ServerState::Up
                    && k.is_some_and(|k| grid.servers[k].addr == s.addr)
            })
        });
        let built = !models || {
            let m = client.models()?;
            names.iter().all(|name| {
                m.iter().any(|m| {
                    m.server == *name
                        && m.progress
                            .as_ref()
                            .is_some_and(|p| p.state == BuildState::Done)
                })
            })
        };
        if registered && built {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "servers {names:?} not ready within 300 s; logs:\n{}",
            grid.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ppe(e: &Etc, actual: f64) -> f64 {
    (e.total_s() - actual).abs() / actual
}

fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[((q * (sorted.len() - 1) as f64).round()) as usize])
}

fn round(x: Option<f64>, digits: i32) -> Json {
    let k = 10f64.powi(digits);
    x.filter(|v| v.is_finite())
        .map_or(Json::Null, |v| json!((v * k).round() / k))
}

/// One line per predictor: PPE over the calls of at least [`SHORT_S`], and apart over the
/// shorter ones; how often the 90% interval held the actual time.
fn report(load: &str, placement: &str, observed: &[Observed], emit: &mut dyn FnMut(Json)) {
    for (p, (name, _, _)) in PREDICTORS.iter().enumerate() {
        let (long, short): (Vec<&Observed>, Vec<&Observed>) =
            observed.iter().partition(|o| o.actual_s >= SHORT_S);
        let ppes = |set: &[&Observed]| {
            let mut v: Vec<f64> = set
                .iter()
                .map(|o| ppe(&o.predicted[p], o.actual_s))
                .collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let (l, s) = (ppes(&long), ppes(&short));
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let covered = long
            .iter()
            .filter(|o| {
                let (lo, hi) = o.predicted[p].interval90_s();
                lo <= o.actual_s && o.actual_s <= hi
            })
            .count();
        let zero_width = observed
            .iter()
            .filter(|o| {
                let (lo, hi) = o.predicted[p].interval90_s();
                hi - lo <= 0.0
            })
            .count();
        emit(json!({
            "bench": "predict",
            "load": load,
            "placement": placement,
            "predictor": name,
            "zero_width_intervals": zero_width,
            "default": *name == DEFAULT_PREDICTOR,
            "mean_ppe": round(mean(&l), 4),
            "median_ppe": round(percentile(&l, 0.5), 4),
            "p90_ppe": round(percentile(&l, 0.9), 4),
            "interval90_coverage": round((!long.is_empty()).then(|| covered as f64 / long.len() as f64), 3),
            "calls": long.len(),
            "short_calls": short.len(),
            "short_mean_ppe": round(mean(&s), 4),
        }));
    }
}

/// Calls in the bag.
const BAG: usize = 24;

/// The three ways of scheduling compared.
const POLICIES: [&str; 3] = ["mct-blind", "mct", "conservative"];

/// Restarts the emulated servers under `load` with the traces of `seed`, so a run of each
/// policy meets the same trace from its start; models come back from `model_dir`.
fn restart_loaded(
    grid: &mut LocalGrid,
    client: &Client,
    model_dir: &std::path::Path,
    load: &str,
    seed: u64,
) -> anyhow::Result<Vec<String>> {
    let names: Vec<String> = (0..3).map(|i| format!("{load}-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let toml = emulated_toml(SPEEDS[i], load, seed * 10 + i as u64, &model_dir.join(name));
        match grid.names.iter().position(|n| n == name) {
            Some(k) => {
                grid.write_file(&format!("{name}.toml"), &toml)?;
                grid.restart_server(k)?;
            }
            None => {
                grid.add_server(name, &toml)?;
            }
        }
    }
    wait_ready(client, grid, &names, true)?;
    // A few seconds of sensor samples before the first call: what a server that has been up
    // a while would have.
    std::thread::sleep(Duration::from_secs(3));
    Ok(names)
}

fn client_for(grid: &LocalGrid, policy: &str) -> anyhow::Result<Client> {
    let mut cfg: ClientConfig = grid.client_config();
    match policy {
        "mct-blind" => {
            cfg.policy = Some(Policy::Mct);
            cfg.load_model = Some(LoadModel::Blind);
        }
        "mct" => cfg.policy = Some(Policy::Mct),
        _ => cfg.policy = Some(Policy::Conservative),
    }
    Ok(Client::connect(cfg)?)
}

/// A bag of [`BAG`] independent calls submitted at once, or a DAG of 13 (a head fanning out to 6
/// chains of two): the makespan of each policy over `runs` traces.
fn schedule(
    grid: &mut LocalGrid,
    model_dir: &std::path::Path,
    load: &str,
    workload: &str,
    runs: usize,
    emit: &mut dyn FnMut(Json),
) -> anyhow::Result<()> {
    let mut makespans: Vec<Vec<f64>> = vec![Vec::new(); POLICIES.len()];
    for run in 0..runs {
        for (p, policy) in POLICIES.iter().enumerate() {
            let client = client_for(grid, policy)?;
            let seed = 100 + run as u64;
            restart_loaded(grid, &client, model_dir, load, seed)?;
            let t = Instant::now();
            match workload {
                "bag" => {
                    let h = client.function_handle_default("solve")?;
                    for n in sizes(BAG, seed, 600, 1000) {
                        client.call_async(&h, solve_inputs(n))?;
                    }
                    client.wait_all()?;
                }
                _ => {
                    let mut g = client.graph();
                    g.policy("heft");
                    match *policy {
                        "mct-blind" => g.load_model(LoadModel::Blind),
                        "conservative" => g.conservative(1.0),
                        _ => {}
                    }
                    // One size per run: a call's output feeds the next as its data input,
                    // whose length is the size.
                    let n = sizes(1, seed, 600, 1000)[0];
                    let head = g.call(
                        "solve",
                        solve_inputs(n).into_iter().map(GraphArg::Value).collect(),
                    );
                    for _ in 0..6 {
                        let a = g.call(
                            "solve",
                            vec![GraphArg::Value(Value::Int(n)), head.output(0)],
                        );
                        g.call("solve", vec![GraphArg::Value(Value::Int(n)), a.output(0)]);
                    }
                    g.run()?;
                }
            }
            let ms = t.elapsed().as_secs_f64();
            eprintln!("bench predict: {load} {workload} run {run} {policy}: {ms:.2} s");
            makespans[p].push(ms);
        }
    }
    for (p, policy) in POLICIES.iter().enumerate() {
        let v = &makespans[p];
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>()
            / (v.len() as f64 - 1.0).max(1.0))
        .sqrt();
        emit(json!({
            "bench": "predict_schedule",
            "load": load,
            "workload": workload,
            "policy": policy,
            "runs": v.len(),
            "makespan_mean_s": round(Some(mean), 3),
            "makespan_sd_s": round(Some(sd), 3),
            "makespans_s": v.iter().map(|x| (x * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
        }));
    }
    Ok(())
}
