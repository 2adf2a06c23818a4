//! `gridwise demo`: the main job on one machine. An agent, four emulated servers with crossing
//! speed functions and one server with the real dgemm start on loopback; a mixed batch of
//! calls runs; every call is shown with where it went, what the agent predicted and what it
//! took; everything is shut down.

use crate::status;
use gridwise_client::{Client, SessionId};
use gridwise_localgrid::{LocalGrid, wait_for_models, wait_for_servers};
use gridwise_proto::{RankOptions, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The emulated servers: `solve` costs n³ operations; the true speeds (operations/s) cross, so
/// the best server depends on the size. The agent is never told these functions.
const EMULATED: [(&str, &str); 4] = [
    // Fast while the problem fits in memory, then pages.
    (
        "big-cache",
        "[[100, 8e9], [600, 8e9], [700, 1e9], [1000, 0.8e9]]",
    ),
    // Unremarkable and steady.
    ("steady", "[[100, 3e9], [1000, 3.5e9]]"),
    // An accelerator: slow to warm up, fastest on large problems.
    ("accel", "[[100, 0.5e9], [500, 6e9], [1000, 10e9]]"),
    // Falls in steps, like a naive multiply leaving each cache level.
    (
        "stepwise",
        "[[100, 5e9], [400, 5e9], [450, 2.5e9], [800, 2.5e9], [850, 1.5e9], [1000, 1.5e9]]",
    ),
];

const SOLVE_SIZES: [i64; 24] = [
    200, 900, 400, 1000, 300, 700, 500, 800, 250, 950, 600, 350, 850, 450, 650, 150, 1000, 550,
    750, 300, 900, 500, 200, 800,
];

fn emulated_toml(speed: &str) -> String {
    format!(
        "builtins = []\nslots = 1\n\n[[emulated]]\nname = \"solve\"\ndoc = \"an emulated dense solver\"\nparam = \"n\"\ncomplexity = \"n^3\"\nspeed = {speed}\n\n\
         [[models]]\nservice = \"solve\"\nmethod = \"gbbp\"\nfuzzy_max = true\nparams = [{{ name = \"n\", min = 100, max = 1000, stride = 25 }}]\n"
    )
}

/// Runs the demo; returns when everything is shut down.
pub fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let exe = std::env::current_exe()?;
    println!("gridwise demo: an agent and 5 servers on 127.0.0.1 (each a separate process)");
    let mut grid = LocalGrid::start_gridwise(&exe, &gridwise_localgrid::half_second_heartbeats())?;
    println!("  agent      {}", grid.agent.addr);
    for (name, speed) in EMULATED {
        let addr = grid.add_server(name, &emulated_toml(speed))?.addr.clone();
        println!("  {name:<10} {addr}  emulated `solve`, true speed (n, op/s) {speed}");
    }
    // LAPACK's dgesv from the system library, described as any owner would describe it.
    let lapack = grid.write_file("lapack.toml", LAPACK)?;
    let addr = grid
        .add_server(
            "dgemm-host",
            &format!(
                "builtins = [\"dgemm\", \"add\"]\nslots = 1\nservices = [{:?}]\n\
                 [[library]]\nservice = \"dgesv\"\npath = \"liblapack.so.3\"\n",
                lapack.display().to_string()
            ),
        )?
        .addr
        .clone();
    println!(
        "  dgemm-host {addr}  the real dgemm (matrixmultiply) on this CPU, and LAPACK's dgesv"
    );

    let client = Client::connect(grid.client_config())?;
    wait_for_servers(&client, 5, Duration::from_secs(30))?;
    println!();
    status::print_status(&client, false)?;

    println!(
        "\nEach emulated server first builds a functional performance model of `solve` with GBBP"
    );
    println!(
        "(geometric bisection: cheap small sizes first, large sizes only where the shape needs them):"
    );
    let t_models = Instant::now();
    wait_for_models(&client, EMULATED.len(), Duration::from_secs(120))?;
    println!("  built in {:.1} s", t_models.elapsed().as_secs_f64());
    crate::model::print_status(&client, false)?;

    println!(
        "\nA batch of {} `solve` calls and 4 `dgemm` calls, submitted at once (asynchronous sessions);",
        SOLVE_SIZES.len()
    );
    println!("the agent ranks each by minimum completion time (queue + transfer + compute):\n");
    let solve = client.function_handle_default("solve")?;
    let dgemm = client.function_handle_default("dgemm")?;
    let t0 = Instant::now();
    let mut what: BTreeMap<SessionId, (String, String)> = BTreeMap::new();
    for n in SOLVE_SIZES {
        let id = client.call_async(&solve, vec![Value::Int(n)])?;
        what.insert(id, ("solve".into(), format!("n={n}")));
    }
    let n = 256u64;
    let a: Vec<f64> = (0..n * n).map(|i| ((i % 7) as f64) - 3.0).collect();
    let b: Vec<f64> = (0..n * n).map(|i| ((i % 5) as f64) * 0.5).collect();
    let mut dgemm_ids = Vec::new();
    for _ in 0..4 {
        let args = vec![
            Value::Int(n as i64),
            Value::Int(n as i64),
            Value::Int(n as i64),
            Value::matrix_f64(n, n, &a),
            Value::matrix_f64(n, n, &b),
        ];
        let id = client.call_async(&dgemm, args)?;
        dgemm_ids.push(id);
        what.insert(id, ("dgemm".into(), format!("m=n=k={n}")));
    }
    let results: BTreeMap<SessionId, _> = client.wait_all()?.into_iter().collect();
    let wall = t0.elapsed().as_secs_f64();

    println!(
        "{:>4}  {:<6} {:<11} {:<11} {:>12} {:>11} {:>9}",
        "call", "service", "size", "server", "predicted s", "measured s", "error"
    );
    let mut per_server: BTreeMap<String, usize> = BTreeMap::new();
    let mut rel_errors = Vec::new();
    for (id, (svc, size)) in &what {
        let Some(r) = results.get(id) else { continue };
        let predicted = r
            .predicted
            .as_ref()
            .map(|e| e.compute_s)
            .unwrap_or(f64::NAN);
        let measured = r.timing.kernel_s;
        let err = (predicted - measured) / measured;
        if err.is_finite() {
            rel_errors.push(err.abs());
        }
        *per_server.entry(r.server.clone()).or_default() += 1;
        println!(
            "{:>4}  {:<6} {:<11} {:<11} {:>12.4} {:>11.4} {:>+8.0}%",
            id.0,
            svc,
            size,
            r.server,
            predicted,
            measured,
            err * 100.0
        );
    }
    // The product is checked against a local one: the remote result must be the real thing.
    let local = local_product(&a, &b, n as usize);
    let remote = results
        .get(&dgemm_ids[0])
        .and_then(|r| r.outputs.first())
        .and_then(|v| v.as_array())
        .and_then(|arr| arr.to_f64())
        .unwrap_or_default();
    let max_diff = remote
        .iter()
        .zip(&local)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f64, f64::max);
    anyhow::ensure!(
        remote.len() == local.len(),
        "dgemm returned {} values, expected {}",
        remote.len(),
        local.len()
    );

    let mean_err = rel_errors.iter().sum::<f64>() / rel_errors.len().max(1) as f64;
    println!(
        "\n{} calls in {wall:.2} s; calls per server: {per_server:?}",
        what.len()
    );
    println!("dgemm result checked against a local product: max |difference| = {max_diff:.3e}");
    println!(
        "mean |predicted - measured| / measured of the kernel time: {:.0}%",
        mean_err * 100.0
    );
    println!(
        "(`solve` predictions come from each server's performance model; dgemm-host has none,"
    );
    println!(
        " so its predictions are complexity ÷ the rate it measured at start-up, until real calls"
    );
    println!(" give it points of its own.)");

    lapack_call(&client);

    println!("\nWhy a call of n=1000 would go where it goes (ETC breakdown per candidate):");
    status::print_explain(
        &client,
        "solve",
        &[("n".into(), 1000)],
        RankOptions::default(),
        false,
    )?;

    let exports: Vec<_> = EMULATED
        .iter()
        .map(|(name, _)| client.model(name, "solve"))
        .collect::<Result<_, _>>()?;
    let out = std::path::PathBuf::from("gridwise-demo-models.svg");
    gridwise_charts::models::plot_models(
        &exports,
        &gridwise_charts::models::PlotOptions {
            output: out.clone(),
            slice: Vec::new(),
            width: 1000,
            height: 600,
            title: Some("solve: speed of each emulated server, as gridwise learned it".into()),
        },
    )?;
    println!(
        "\nThe four models, with bands, samples and construction intervals: {}",
        out.display()
    );

    drop(client);
    let logs = grid.log_dir().display().to_string();
    drop(grid);
    println!(
        "\nall daemons stopped (their logs were in {logs}); demo took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The LAPACK services of `examples/services/lapack.toml`, shipped inside the binary.
const LAPACK: &str = include_str!("../../../examples/services/lapack.toml");

/// One call of LAPACK's dgesv, run in a worker process of dgemm-host: a 3 x 3 system solved
/// and checked. Without a system LAPACK it says so and the demo goes on.
fn lapack_call(client: &Client) {
    let a = [4.0, -2.0, 1.0, -2.0, 4.0, -2.0, 1.0, -2.0, 4.0];
    let b = [11.0, -16.0, 17.0];
    let solved = client.function_handle_default("dgesv").and_then(|h| {
        client.call(
            &h,
            vec![
                Value::Int(3),
                Value::Int(1),
                Value::matrix_f64(3, 3, &a),
                Value::matrix_f64(3, 1, &b),
            ],
        )
    });
    match solved {
        Ok(r) => {
            let x = r.outputs[0]
                .as_array()
                .and_then(|x| x.to_f64())
                .unwrap_or_default();
            let residual = (0..3)
                .map(|i| ((0..3).map(|j| a[i * 3 + j] * x[j]).sum::<f64>() - b[i]).abs())
                .fold(0.0, f64::max);
            println!(
                "\nLAPACK's dgesv (the system library, in a worker process of {}) solved A x = b: x = {x:.3?}, residual {residual:.1e}",
                r.server
            );
        }
        Err(e) => println!(
            "\nLAPACK's dgesv could not run here ({}): install the system LAPACK (Debian: liblapack3) to see it",
            e.message
        ),
    }
}

fn local_product(a: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let mut c = vec![0.0; n * n];
    for i in 0..n {
        for k in 0..n {
            let aik = a[i * n + k];
            for j in 0..n {
                c[i * n + j] += aik * b[k * n + j];
            }
        }
    }
    c
}
