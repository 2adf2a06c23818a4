//! `gridwise bench rpc`: the cost of one remote call over the full path — ranking at the
//! agent, execution on the server, the timing report back to the agent — for the no-op `add`,
//! from the Rust client, from C (`examples/c/rpc_bench.c` against `libgridwise.a`) and from
//! Python (`python -m gridwise.bench`), all on the same grid in one run.

use crate::host::HostCpu;
use crate::rpc_floors::Floors;
use gridwise_client::{Client, ClientConfig};
use gridwise_localgrid::LocalGrid;
use gridwise_localgrid::wait_for_servers;
use gridwise_proto::Value;
use serde_json::json;
use statrs::statistics::{Data, OrderStatistics};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Clone, Debug)]
pub struct RpcBench {
    /// Use this agent (which must have a server offering `add`) instead of starting one.
    pub agent: Option<String>,
    /// Shared token for `agent`.
    pub token: Option<String>,
    /// Synchronous calls timed one by one.
    pub sync_calls: usize,
    /// Asynchronous calls for the throughput figure.
    pub async_calls: usize,
    /// Asynchronous sessions kept in flight.
    pub window: usize,
    /// Which clients to measure: `rust`, `c`, `python`.
    pub clients: Vec<String>,
    /// The Python interpreter that has the `gridwise` package installed.
    pub python: String,
    /// Also on a grid where every connection is mutual TLS, started beside the plaintext one
    /// in the same run (Rust client only), with the ratios.
    pub tls: bool,
    /// Also on a grid whose agent serves the dashboard, with no page open and with this
    /// browser (headless) showing it, beside the plain one (Rust client only), with the ratios.
    pub dashboard_browser: Option<String>,
}

/// Turns each grid of a comparison gets (a slice of the calls each).
const TURNS: usize = 10;

/// One grid of a comparison: TLS, a dashboard, a browser on it.
#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    tls: bool,
    dashboard: bool,
    browser: bool,
}

/// The clients `--client` takes.
pub const CLIENTS: [&str; 3] = ["rust", "c", "python"];

/// Runs the benchmark; one JSON object per client.
pub fn run_rpc(opts: &RpcBench) -> anyhow::Result<Vec<serde_json::Value>> {
    if let Some(c) = opts.clients.iter().find(|c| !CLIENTS.contains(&c.as_str())) {
        anyhow::bail!("no client `{c}`: the clients are {}", CLIENTS.join(", "));
    }
    if opts.tls || opts.dashboard_browser.is_some() {
        return compare(opts);
    }
    let mut grid = None;
    let (agent, token) = match &opts.agent {
        Some(a) => (a.clone(), opts.token.clone()),
        None => {
            let g = bench_grid(false, false)?;
            let a = g.agent.addr.clone();
            grid = Some(g);
            (a, None)
        }
    };
    let mut cfg = ClientConfig::with_agent(agent.clone());
    cfg.token = token.clone();
    let mut out = Vec::new();
    let has = |c: &str| opts.clients.iter().any(|x| x == c);
    if has("rust") && has("c") {
        // The goal compares the two: measured in turns, so that drift falls on both alike.
        out.extend(rust_and_c_in_turns(opts, &cfg)?);
    }
    for c in &opts.clients {
        if has("rust") && has("c") && (c == "rust" || c == "c") {
            continue;
        }
        let mut line = match c.as_str() {
            "rust" => rust_client(opts, cfg.clone())?,
            "c" => c_client(opts, &cfg)?,
            _ => python_client(opts, &agent, token.as_deref())?,
        };
        label(&mut line, c, opts);
        out.push(line);
    }
    drop(grid);
    Ok(out)
}

/// What every `rpc` line says of itself: the client and how many calls of each kind.
fn label(line: &mut serde_json::Value, client: &str, opts: &RpcBench) {
    line["bench"] = json!("rpc");
    line["client"] = json!(client);
    line["sync_calls"] = json!(opts.sync_calls);
    line["async_calls"] = json!(opts.async_calls);
    line["calls"] = json!(opts.sync_calls + opts.async_calls);
    line["window"] = json!(opts.window.max(1));
}

/// A grid of one server offering `add` and `echo`, every connection TLS if `tls`, the agent
/// serving its dashboard if `dashboard`, up.
fn bench_grid(tls: bool, dashboard: bool) -> anyhow::Result<LocalGrid> {
    let exe = std::env::current_exe()?;
    let args: Vec<String> = if dashboard {
        vec!["--dashboard".into(), "127.0.0.1:0".into()]
    } else {
        Vec::new()
    };
    let mut g = LocalGrid::start_gridwise_with(&exe, &args, tls)?;
    g.add_server(
        "bench-server",
        "builtins = [\"add\", \"echo\"]\ncalibrate = false\n",
    )?;
    wait_for_servers(
        &Client::connect(g.client_config())?,
        1,
        Duration::from_secs(30),
    )?;
    Ok(g)
}

/// A headless browser showing `url`, killed with the handle.
struct Browser {
    child: std::process::Child,
    /// Its profile, removed after it.
    _profile: tempfile::TempDir,
}

impl Browser {
    fn open(program: &str, url: &str) -> anyhow::Result<Browser> {
        let profile = tempfile::tempdir()?;
        let child = Command::new(program)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
            ])
            // Keeps it running after the page loaded.
            .arg("--remote-debugging-port=0")
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            // Its own process group: it and its helpers are stopped and killed together.
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start the browser `{program}`: {e}"))?;
        Ok(Browser {
            child,
            _profile: profile,
        })
    }
}

impl Browser {
    /// Stops (SIGSTOP) or resumes (SIGCONT) the browser's whole process group.
    fn pause(&self, stop: bool) {
        let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: signals to the process group this benchmark started.
        unsafe { libc::kill(-(self.child.id() as i32), sig) };
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.pause(false);
        // SAFETY: as in `pause`.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// The Rust client on a plain grid, then on the variants asked for (TLS; a dashboard with no
/// page open and with a browser on it), one after the other in one run; then the ratios.
fn compare(opts: &RpcBench) -> anyhow::Result<Vec<serde_json::Value>> {
    anyhow::ensure!(
        opts.agent.is_none(),
        "--tls and --dashboard start their own grids: leave out --agent"
    );
    // A second plaintext grid, measured like the others: what two grids that differ in
    // nothing measure apart on this machine, the floor under every ratio of the run.
    let mut variants = vec![
        Variant {
            name: "plain",
            tls: false,
            dashboard: false,
            browser: false,
        },
        Variant {
            name: "plain_again",
            tls: false,
            dashboard: false,
            browser: false,
        },
    ];
    if opts.tls {
        variants.push(Variant {
            name: "tls",
            tls: true,
            dashboard: false,
            browser: false,
        });
    }
    if opts.dashboard_browser.is_some() {
        for (name, browser) in [("dashboard", false), ("dashboard_with_browser", true)] {
            variants.push(Variant {
                name,
                tls: false,
                dashboard: true,
                browser,
            });
        }
    }
    // Every grid up at once and measured in turns (a slice of the calls each, the order
    // rotating), so that the machine's drift over the run falls on all of them alike. A browser
    // runs only during its own grid's turns (stopped with SIGSTOP otherwise).
    let mut grids = Vec::new();
    for v in &variants {
        eprintln!("bench rpc: starting a {} grid …", v.name);
        let g = bench_grid(v.tls, v.dashboard)?;
        let browser = match (&opts.dashboard_browser, v.browser) {
            (Some(program), true) => {
                let at = g
                    .logged_addr("agent.log", "dashboard at /")
                    .ok_or_else(|| anyhow::anyhow!("the agent did not log its dashboard"))?;
                let b = Browser::open(program, &format!("http://{at}/"))?;
                // The page loads and opens its event stream.
                std::thread::sleep(Duration::from_secs(3));
                b.pause(true);
                Some(b)
            }
            _ => None,
        };
        let m = Measure::new(g.client_config())?;
        grids.push((g, browser, m));
    }
    let window = opts.window.max(1);
    let host_before = HostCpu::now();
    let browsing = grids.iter().any(|(_, b, _)| b.is_some());
    for round in 0..TURNS {
        eprintln!("bench rpc: turn {} of {TURNS} …", round + 1);
        if !browsing {
            // Synchronous calls alternate grid by grid, call by call: this VM's latency has
            // modes that last tenths of a second (whether the other vCPU is awake, where the
            // threads landed), and slices a grid at a time fell in different ones — two
            // identical plaintext grids measured 0.69–1.03× apart that way.
            let from: Vec<usize> = grids.iter().map(|(_, _, m)| m.lat_us.len()).collect();
            for i in 0..opts.sync_calls / TURNS {
                for k in 0..grids.len() {
                    grids[(k + round + i) % variants.len()].2.one_sync(i)?;
                }
            }
            for ((_, _, m), from) in grids.iter_mut().zip(from) {
                m.end_slice(from);
            }
        }
        for k in 0..grids.len() {
            let (_, browser, m) = &mut grids[(k + round) % variants.len()];
            if let Some(b) = browser {
                b.pause(false);
            }
            if browsing {
                // A browser runs only during its own grid's turns.
                m.sync(opts.sync_calls / TURNS)?;
            }
            m.asynchronous(opts.async_calls / TURNS, window)?;
            if let Some(b) = browser {
                b.pause(true);
            }
        }
    }
    let stolen = HostCpu::now().stolen_since(&host_before);
    let mut out = Vec::new();
    for (v, (_, browser, m)) in variants.iter().zip(&grids) {
        if let Some(b) = browser {
            b.pause(false);
        }
        let array = m.array()?;
        if let Some(b) = browser {
            b.pause(true);
        }
        let mut line = m.line(array);
        label(&mut line, "rust", opts);
        line["grid"] = json!(v.name);
        line["tls"] = json!(v.tls);
        out.push(line);
    }
    let ratio = |i: usize, key: &str| {
        let (p, t) = (out[0][key].as_f64(), out[i][key].as_f64());
        p.zip(t)
            .map(|(p, t)| json!((t / p * 1000.0).round() / 1000.0))
            .unwrap_or(serde_json::Value::Null)
    };
    let mut summaries = Vec::new();
    for (i, v) in variants.iter().enumerate().skip(1) {
        summaries.push(json!({
            "bench": format!("rpc_{}", v.name),
            "sync_p50_over_plain": ratio(i, "sync_p50_us"),
            "async_calls_per_s_over_plain": ratio(i, "async_calls_per_s"),
            "array_mb_per_s_over_plain": ratio(i, "array_round_trip_mb_per_s"),
            "sync_p50_over_plain_by_turn": grids[0].2.slice_p50_us.iter()
                .zip(&grids[i].2.slice_p50_us)
                .map(|(p, t)| (t / p * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>(),
            // Over the synchronous and asynchronous turns, all grids alike.
            "host_cpu_stolen": (stolen * 1000.0).round() / 1000.0,
        }));
    }
    out.extend(summaries);
    Ok(out)
}

/// A Rust client on one grid, with what was measured so far.
struct Measure {
    client: Client,
    add: gridwise_client::FunctionHandle,
    lat_us: Vec<f64>,
    /// The ranking half of each synchronous call (client → agent → client), µs.
    rank_us: Vec<f64>,
    /// The rest: the server's half (client → server → client), µs.
    execute_us: Vec<f64>,
    /// The median of each `sync` slice, µs: whether a grid's distance from another holds
    /// over a run (something of the grid's own) or comes and goes (the machine).
    slice_p50_us: Vec<f64>,
    async_calls: usize,
    async_s: f64,
}

impl Measure {
    fn new(cfg: ClientConfig) -> anyhow::Result<Measure> {
        let client = Client::connect(cfg)?;
        let add = client.function_handle_default("add")?;
        for i in 0..1000 {
            client.call(&add, vec![Value::Int(i)])?;
        }
        Ok(Measure {
            client,
            add,
            lat_us: Vec::new(),
            rank_us: Vec::new(),
            execute_us: Vec::new(),
            slice_p50_us: Vec::new(),
            async_calls: 0,
            async_s: 0.0,
        })
    }

    /// `n` synchronous calls, each timed.
    fn sync(&mut self, n: usize) -> anyhow::Result<()> {
        let from = self.lat_us.len();
        for i in 0..n {
            self.one_sync(i)?;
        }
        self.end_slice(from);
        Ok(())
    }

    /// One synchronous call, timed.
    fn one_sync(&mut self, i: usize) -> anyhow::Result<()> {
        let t = Instant::now();
        let r = self.client.call(&self.add, vec![Value::Int(i as i64)])?;
        self.lat_us.push(t.elapsed().as_secs_f64() * 1e6);
        self.rank_us.push(r.rank_s * 1e6);
        self.execute_us.push(r.round_trip_s * 1e6);
        anyhow::ensure!(
            r.outputs == vec![Value::Int(i as i64 + 1)],
            "add({i}) returned {:?}",
            r.outputs
        );
        Ok(())
    }

    /// Closes a slice of synchronous calls begun at sample `from`.
    fn end_slice(&mut self, from: usize) {
        if self.lat_us.len() > from {
            self.slice_p50_us
                .push(percentile_us(&self.lat_us[from..], 50));
        }
    }

    /// `n` asynchronous calls with `window` in flight.
    fn asynchronous(&mut self, n: usize, window: usize) -> anyhow::Result<()> {
        let t = Instant::now();
        let (mut submitted, mut done) = (0usize, 0usize);
        while submitted < n.min(window) {
            self.client
                .call_async(&self.add, vec![Value::Int(submitted as i64)])?;
            submitted += 1;
        }
        while done < n {
            self.client.wait_any()?;
            done += 1;
            if submitted < n {
                self.client
                    .call_async(&self.add, vec![Value::Int(submitted as i64)])?;
                submitted += 1;
            }
        }
        self.async_s += t.elapsed().as_secs_f64();
        self.async_calls += n;
        Ok(())
    }

    /// The best of three 64 MiB round trips through `echo`, MB/s both ways.
    fn array(&self) -> anyhow::Result<f64> {
        let echo = self.client.function_handle_default("echo")?;
        let n = ARRAY_MIB * 1024 * 1024 / 8;
        let x = Value::vector_f64(&(0..n).map(|i| i as f64).collect::<Vec<_>>());
        let inputs = vec![Value::Int(n as i64), x.clone()];
        self.client.call(&echo, inputs.clone())?;
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            let r = self.client.call(&echo, inputs.clone())?;
            best = best.min(t.elapsed().as_secs_f64());
            anyhow::ensure!(r.outputs == vec![x.clone()], "echo returned other data");
        }
        Ok(2.0 * (n * 8) as f64 / best / 1e6)
    }

    fn line(&self, array_mb_per_s: f64) -> serde_json::Value {
        json!({
            "sync_p50_us": percentile_us(&self.lat_us, 50),
            "sync_p99_us": percentile_us(&self.lat_us, 99),
            "rank_p50_us": percentile_us(&self.rank_us, 50),
            "execute_p50_us": percentile_us(&self.execute_us, 50),
            "async_calls_per_s": (self.async_calls as f64 / self.async_s).round(),
            "array_mib": ARRAY_MIB,
            "array_round_trip_mb_per_s": (array_mb_per_s * 10.0).round() / 10.0,
        })
    }
}

/// The `p`-th percentile of times in µs, to a tenth.
pub(crate) fn percentile_us(samples: &[f64], p: usize) -> f64 {
    (Data::new(samples.to_vec()).percentile(p) * 10.0).round() / 10.0
}

fn rust_client(opts: &RpcBench, cfg: ClientConfig) -> anyhow::Result<serde_json::Value> {
    eprintln!("bench rpc: warming up …");
    let mut m = Measure::new(cfg)?;
    let mut floors = Floors::default();
    for turn in 0..TURNS {
        eprintln!(
            "bench rpc: turn {} of {TURNS}: {} synchronous calls, then the floors …",
            turn + 1,
            opts.sync_calls / TURNS
        );
        m.sync((opts.sync_calls / TURNS).max(1))?;
        floors.turn()?;
    }
    eprintln!(
        "bench rpc: {} asynchronous calls, {} in flight …",
        opts.async_calls, opts.window
    );
    m.asynchronous(opts.async_calls, opts.window.max(1))?;
    let array = m.array()?;
    let mut line = m.line(array);
    floors.add_to(&mut line);
    Ok(line)
}

/// The workspace this benchmark was built from (the C example and the C library are built
/// from its sources).
fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `cmd`, failing with what it printed; returns its stdout.
fn output_of(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run {what}: {e}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The last line of `text` that parses as a JSON object.
fn last_json(text: &str, what: &str) -> anyhow::Result<serde_json::Value> {
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(serde_json::Value::is_object)
        .ok_or_else(|| anyhow::anyhow!("{what} printed no JSON object:\n{text}"))
}

/// The C benchmark, built against a release `libgridwise.a`, with the client config it reads.
struct CBench {
    dir: tempfile::TempDir,
}

impl CBench {
    fn exe(&self) -> std::path::PathBuf {
        self.dir.path().join("rpc_bench")
    }

    fn config(&self) -> std::path::PathBuf {
        self.dir.path().join("client.toml")
    }

    /// Runs it once: `sync` timed calls, then `asynchronous` ones `window` in flight; its JSON
    /// line.
    fn run(
        &self,
        sync: usize,
        asynchronous: usize,
        window: usize,
    ) -> anyhow::Result<serde_json::Value> {
        let mut cmd = Command::new(self.exe());
        cmd.arg(self.config())
            .arg(sync.max(1).to_string())
            .arg(asynchronous.max(1).to_string())
            .arg(window.max(1).to_string());
        last_json(&output_of(&mut cmd, "the C benchmark")?, "the C benchmark")
    }

    /// Starts it in command mode: connected and warmed up, waiting for turns.
    fn start(&self) -> anyhow::Result<CSession> {
        use std::process::Stdio;
        let mut child = Command::new(self.exe())
            .arg(self.config())
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start the C benchmark: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(std::io::BufReader::new);
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("the C benchmark's pipes could not be opened");
        };
        let mut s = CSession {
            child,
            stdin,
            stdout,
            samples: self.dir.path().join("samples.txt"),
        };
        s.answer()?;
        Ok(s)
    }
}

/// The C benchmark in command mode (stopped, or else killed, with the handle).
struct CSession {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    samples: std::path::PathBuf,
}

impl CSession {
    /// Its next JSON line.
    fn answer(&mut self) -> anyhow::Result<serde_json::Value> {
        use std::io::BufRead;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        serde_json::from_str(&line).map_err(|_| {
            anyhow::anyhow!("the C benchmark answered {line:?} (it says why on stderr)")
        })
    }

    fn command(&mut self, text: &str) -> anyhow::Result<serde_json::Value> {
        use std::io::Write;
        writeln!(self.stdin, "{text}")?;
        self.stdin.flush()?;
        self.answer()
    }

    /// `n` timed synchronous calls, µs each.
    fn sync(&mut self, n: usize) -> anyhow::Result<Vec<f64>> {
        let file = self.samples.display().to_string();
        self.command(&format!("sync {} {file}", n.max(1)))?;
        Ok(std::fs::read_to_string(&self.samples)?
            .lines()
            .map(|l| l.trim().parse::<f64>())
            .collect::<Result<Vec<_>, _>>()?)
    }

    /// `n` asynchronous calls, `window` in flight: calls per second.
    fn asynchronous(&mut self, n: usize, window: usize) -> anyhow::Result<f64> {
        let line = self.command(&format!("async {} {}", n.max(1), window.max(1)))?;
        line["async_calls_per_s"]
            .as_f64()
            .ok_or_else(|| anyhow::anyhow!("the C benchmark answered {line} to async"))
    }
}

impl Drop for CSession {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Rust and the C client on one grid in alternating turns, a slice of the calls each (the
/// C program started once, warmed up like the Rust client, and given its turns on standard
/// input); then one line each, the C line with its sync p50 over Rust's.
fn rust_and_c_in_turns(
    opts: &RpcBench,
    cfg: &ClientConfig,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let c = build_c_bench(cfg)?;
    eprintln!("bench rpc: warming up …");
    let mut m = Measure::new(cfg.clone())?;
    let mut c = c.start()?;
    let window = opts.window.max(1);
    let (sync, asynchronous) = (
        (opts.sync_calls / TURNS).max(1),
        (opts.async_calls / TURNS).max(1),
    );
    let (mut c_lat, mut c_calls, mut c_s) = (Vec::new(), 0usize, 0.0f64);
    let mut floors = Floors::default();
    for round in 0..TURNS {
        floors.turn()?;
        eprintln!("bench rpc: turn {} of {TURNS} (Rust and C) …", round + 1);
        for k in 0..2 {
            if (k + round) % 2 == 0 {
                m.sync(sync)?;
                m.asynchronous(asynchronous, window)?;
            } else {
                c_lat.extend(c.sync(sync)?);
                let per_s = c.asynchronous(asynchronous, window)?;
                c_calls += asynchronous;
                c_s += asynchronous as f64 / per_s;
            }
        }
    }
    let array = m.array()?;
    let mut rust = m.line(array);
    floors.add_to(&mut rust);
    label(&mut rust, "rust", opts);
    let c_p50 = percentile_us(&c_lat, 50);
    let mut cl = json!({
        "sync_p50_us": c_p50,
        "sync_p99_us": percentile_us(&c_lat, 99),
        "async_calls_per_s": (c_calls as f64 / c_s).round(),
        "in_turns_with": "rust",
    });
    if let Some(r) = rust["sync_p50_us"].as_f64() {
        cl["sync_p50_over_rust"] = json!((c_p50 / r * 1000.0).round() / 1000.0);
    }
    label(&mut cl, "c", opts);
    Ok(vec![rust, cl])
}

fn c_client(opts: &RpcBench, cfg: &ClientConfig) -> anyhow::Result<serde_json::Value> {
    let c = build_c_bench(cfg)?;
    eprintln!("bench rpc: the C client …");
    c.run(opts.sync_calls, opts.async_calls, opts.window)
}

fn build_c_bench(cfg: &ClientConfig) -> anyhow::Result<CBench> {
    let root = workspace();
    eprintln!("bench rpc: building libgridwise (release) and the C benchmark …");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    output_of(
        Command::new(cargo)
            .args([
                "build",
                "--release",
                "--quiet",
                "-p",
                "gridwise-capi",
                "--lib",
            ])
            .current_dir(&root),
        "cargo build -p gridwise-capi",
    )?;
    let dir = tempfile::tempdir()?;
    output_of(
        Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(root.join("examples/c"))
            .arg(format!("BUILD={}", dir.path().display()))
            .arg(format!(
                "GRIDWISE_LIB={}",
                root.join("target/release").display()
            ))
            .arg(dir.path().join("rpc_bench")),
        "make (a C compiler and make are needed)",
    )?;
    let mut toml = format!("agent = {:?}\n", cfg.agent);
    if let Some(t) = &cfg.token {
        toml.push_str(&format!("token = {t:?}\n"));
    }
    let c = CBench { dir };
    std::fs::write(c.config(), toml)?;
    Ok(c)
}

fn python_client(
    opts: &RpcBench,
    agent: &str,
    token: Option<&str>,
) -> anyhow::Result<serde_json::Value> {
    eprintln!("bench rpc: the Python client ({}) …", opts.python);
    let mut cmd = Command::new(&opts.python);
    cmd.args(["-m", "gridwise.bench", "--agent", agent])
        .arg("--calls")
        .arg(opts.sync_calls.to_string())
        .arg("--async-calls")
        .arg(opts.async_calls.to_string())
        .arg("--window")
        .arg(opts.window.max(1).to_string())
        .arg("--array-mib")
        .arg(ARRAY_MIB.to_string());
    if let Some(t) = token {
        cmd.args(["--token", t]);
    }
    let text = output_of(
        &mut cmd,
        "the Python benchmark (install the package: pip install ./python)",
    )?;
    let mut line = last_json(&text, "the Python benchmark")?;
    eprintln!("bench rpc: a raw loopback TCP copy of {ARRAY_MIB} MiB …");
    line["raw_tcp_round_trip_mb_per_s"] =
        json!((raw_tcp_mb_per_s(ARRAY_MIB)? * 10.0).round() / 10.0);
    Ok(line)
}

/// The array the Rust and Python clients send to `echo` and back.
const ARRAY_MIB: usize = 64;

/// What loopback TCP itself does: `mib` MiB sent to a thread that sends them back, bytes moved
/// both ways per second, best of three.
fn raw_tcp_mb_per_s(mib: usize) -> anyhow::Result<f64> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let n = mib * 1024 * 1024;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = crate::transfer::raw_buffer(n, 1)?;
        for _ in 0..3 {
            s.read_exact(&mut buf)?;
            s.write_all(&buf)?;
        }
        Ok(())
    });
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let mut data = crate::transfer::raw_buffer(n, 0)?;
    data.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    let data = std::sync::Arc::new(data);
    let mut back = crate::transfer::raw_buffer(n, 1)?;
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        // Writing all before reading would deadlock once both socket buffers fill.
        let mut w = s.try_clone()?;
        let sender = {
            let data = data.clone();
            std::thread::spawn(move || w.write_all(&data))
        };
        s.read_exact(&mut back)?;
        sender
            .join()
            .map_err(|_| anyhow::anyhow!("the sending thread panicked"))??;
        best = best.min(t.elapsed().as_secs_f64());
    }
    echo.join()
        .map_err(|_| anyhow::anyhow!("the echo thread panicked"))??;
    anyhow::ensure!(back == *data, "the loopback copy came back different");
    Ok(2.0 * n as f64 / best / 1e6)
}
