//! `gridwise bench rpc`: the cost of one remote call over the full path — ranking at the
//! agent, execution on the server, the timing report back to the agent — for the no-op `add`,
//! from the Rust client, from C (`examples/c/rpc_bench.c` against `libgridwise.a`) and from
//! Python (`python -m gridwise.bench`), all on the same grid in one run.

use gridwise_client::{Client, ClientConfig};
use gridwise_localgrid::LocalGrid;
use gridwise_localgrid::wait_for_servers;
use gridwise_proto::Value;
use serde_json::json;
use statrs::statistics::{Data, OrderStatistics};
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
}

/// The clients `--client` takes.
pub const CLIENTS: [&str; 3] = ["rust", "c", "python"];

/// Runs the benchmark; one JSON object per client.
pub fn run_rpc(opts: &RpcBench) -> anyhow::Result<Vec<serde_json::Value>> {
    if let Some(c) = opts.clients.iter().find(|c| !CLIENTS.contains(&c.as_str())) {
        anyhow::bail!("no client `{c}`: the clients are {}", CLIENTS.join(", "));
    }
    if opts.tls {
        return plain_and_tls(opts);
    }
    let mut grid = None;
    let (agent, token) = match &opts.agent {
        Some(a) => (a.clone(), opts.token.clone()),
        None => {
            let g = bench_grid(false)?;
            let a = g.agent.addr.clone();
            grid = Some(g);
            (a, None)
        }
    };
    let mut cfg = ClientConfig::with_agent(agent.clone());
    cfg.token = token.clone();
    let mut out = Vec::new();
    for c in &opts.clients {
        let mut line = match c.as_str() {
            "rust" => rust_client(opts, cfg.clone())?,
            "c" => c_client(opts, &cfg)?,
            _ => python_client(opts, &agent, token.as_deref())?,
        };
        line["bench"] = json!("rpc");
        line["client"] = json!(c);
        line["sync_calls"] = json!(opts.sync_calls);
        line["async_calls"] = json!(opts.async_calls);
        line["calls"] = json!(opts.sync_calls + opts.async_calls);
        line["window"] = json!(opts.window.max(1));
        out.push(line);
    }
    drop(grid);
    Ok(out)
}

/// A grid of one server offering `add` and `echo`, every connection TLS if `tls`, up.
fn bench_grid(tls: bool) -> anyhow::Result<LocalGrid> {
    let exe = std::env::current_exe()?;
    let mut g = LocalGrid::start_gridwise_with(&exe, &[], tls)?;
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

/// The Rust client on a plaintext grid, then on a TLS grid, in one run; then the ratios.
fn plain_and_tls(opts: &RpcBench) -> anyhow::Result<Vec<serde_json::Value>> {
    anyhow::ensure!(
        opts.agent.is_none(),
        "--tls starts its own grids (plaintext and TLS): leave out --agent"
    );
    let mut out = Vec::new();
    for tls in [false, true] {
        eprintln!(
            "bench rpc: a {} grid …",
            if tls { "TLS" } else { "plaintext" }
        );
        let g = bench_grid(tls)?;
        let mut line = rust_client(opts, g.client_config())?;
        line["bench"] = json!("rpc");
        line["client"] = json!("rust");
        line["tls"] = json!(tls);
        line["sync_calls"] = json!(opts.sync_calls);
        line["async_calls"] = json!(opts.async_calls);
        line["window"] = json!(opts.window.max(1));
        out.push(line);
    }
    let ratio = |key: &str| {
        let (p, t) = (out[0][key].as_f64(), out[1][key].as_f64());
        p.zip(t)
            .map(|(p, t)| json!((t / p * 1000.0).round() / 1000.0))
            .unwrap_or(serde_json::Value::Null)
    };
    out.push(json!({
        "bench": "rpc_tls",
        "sync_p50_tls_over_plain": ratio("sync_p50_us"),
        "async_calls_per_s_tls_over_plain": ratio("async_calls_per_s"),
        "array_mb_per_s_tls_over_plain": ratio("array_round_trip_mb_per_s"),
    }));
    Ok(out)
}

fn rust_client(opts: &RpcBench, cfg: ClientConfig) -> anyhow::Result<serde_json::Value> {
    let client = Client::connect(cfg)?;
    let add = client.function_handle_default("add")?;

    eprintln!("bench rpc: warming up …");
    for i in 0..1000 {
        client.call(&add, vec![Value::Int(i)])?;
    }
    eprintln!("bench rpc: {} synchronous calls …", opts.sync_calls);
    let mut lat_us = Vec::with_capacity(opts.sync_calls);
    for i in 0..opts.sync_calls {
        let t = Instant::now();
        let r = client.call(&add, vec![Value::Int(i as i64)])?;
        lat_us.push(t.elapsed().as_secs_f64() * 1e6);
        anyhow::ensure!(
            r.outputs == vec![Value::Int(i as i64 + 1)],
            "add({i}) returned {:?}",
            r.outputs
        );
    }
    let mut data = Data::new(lat_us);
    let (p50, p99) = (data.percentile(50), data.percentile(99));

    eprintln!(
        "bench rpc: {} asynchronous calls, {} in flight …",
        opts.async_calls, opts.window
    );
    let window = opts.window.max(1);
    let t = Instant::now();
    let mut submitted = 0usize;
    let mut done = 0usize;
    while submitted < opts.async_calls.min(window) {
        client.call_async(&add, vec![Value::Int(submitted as i64)])?;
        submitted += 1;
    }
    while done < opts.async_calls {
        client.wait_any()?;
        done += 1;
        if submitted < opts.async_calls {
            client.call_async(&add, vec![Value::Int(submitted as i64)])?;
            submitted += 1;
        }
    }
    let per_s = opts.async_calls as f64 / t.elapsed().as_secs_f64();
    let echo = client.function_handle_default("echo")?;
    let n = ARRAY_MIB * 1024 * 1024 / 8;
    let x = Value::vector_f64(&(0..n).map(|i| i as f64).collect::<Vec<_>>());
    let inputs = vec![Value::Int(n as i64), x.clone()];
    client.call(&echo, inputs.clone())?;
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        let r = client.call(&echo, inputs.clone())?;
        best = best.min(t.elapsed().as_secs_f64());
        anyhow::ensure!(r.outputs == vec![x.clone()], "echo returned other data");
    }
    Ok(json!({
        "sync_p50_us": (p50 * 10.0).round() / 10.0,
        "sync_p99_us": (p99 * 10.0).round() / 10.0,
        "async_calls_per_s": per_s.round(),
        "array_mib": ARRAY_MIB,
        "array_round_trip_mb_per_s": (2.0 * (n * 8) as f64 / best / 1e6 * 10.0).round() / 10.0,
    }))
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

fn c_client(opts: &RpcBench, cfg: &ClientConfig) -> anyhow::Result<serde_json::Value> {
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
    let config = dir.path().join("client.toml");
    let mut toml = format!("agent = {:?}\n", cfg.agent);
    if let Some(t) = &cfg.token {
        toml.push_str(&format!("token = {t:?}\n"));
    }
    std::fs::write(&config, toml)?;
    eprintln!("bench rpc: the C client …");
    let text = output_of(
        Command::new(dir.path().join("rpc_bench"))
            .arg(&config)
            .arg(opts.sync_calls.to_string())
            .arg(opts.async_calls.to_string())
            .arg(opts.window.max(1).to_string()),
        "the C benchmark",
    )?;
    last_json(&text, "the C benchmark")
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
        let mut buf = vec![0u8; n];
        for _ in 0..3 {
            s.read_exact(&mut buf)?;
            s.write_all(&buf)?;
        }
        Ok(())
    });
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let data: Vec<u8> = (0..n).map(|i| i as u8).collect();
    let mut back = vec![0u8; n];
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
    anyhow::ensure!(back == data, "the loopback copy came back different");
    Ok(2.0 * n as f64 / best / 1e6)
}
