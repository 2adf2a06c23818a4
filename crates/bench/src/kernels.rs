//! `gridwise bench kernels`: what each kind of kernel costs. Per kind — built-in, library
//! routine in a worker process, command, Python function in a worker — the overhead of a
//! call that does nothing (p50 over sequential calls, and its excess over the built-in), and
//! the speed of a 1000 × 1000 dgemm as the server timed the kernel, set against the same BLAS
//! routine called in this process.

use gridwise_client::{Client, FunctionHandle};
use gridwise_localgrid::{LocalGrid, wait_for_servers};
use gridwise_proto::Value;
use serde_json::{Value as Json, json};
use statrs::statistics::{Data, OrderStatistics};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct KernelsBench {
    /// Side of the dgemm.
    pub n: usize,
    /// No-op calls timed per kind (commands start a process each: a tenth of these).
    pub calls: usize,
    /// The Python interpreter for the Python kernels (numpy needed).
    pub python: String,
    /// The system BLAS (a path or a name the loader finds).
    pub blas: String,
}

impl Default for KernelsBench {
    fn default() -> Self {
        KernelsBench {
            n: 1000,
            calls: 2000,
            python: "python3".into(),
            blas: "libblas.so.3".into(),
        }
    }
}

const NOOP_PY: &str = "import numpy as np\n\n\ndef add(x):\n    return x + 1\n\n\ndef dgemm(m, n, k, a, b):\n    return a @ b\n";

const DESCRIPTIONS: &str = r#"
[[service]]
name = "add_py"
args = [{ name = "x", mode = "in", type = "int" }, { name = "y", mode = "out", type = "int" }]

[[service]]
name = "add_cmd"
args = [{ name = "x", mode = "in", type = "int" }, { name = "y", mode = "out", type = "int" }]

[[service]]
name = "dgemm_py"
args = [
    { name = "m", mode = "in", type = "int" },
    { name = "n", mode = "in", type = "int" },
    { name = "k", mode = "in", type = "int" },
    { name = "A", mode = "in", type = "matrix<f64>[m,k]" },
    { name = "B", mode = "in", type = "matrix<f64>[k,n]" },
    { name = "C", mode = "out", type = "matrix<f64>[m,n]" },
]
size_params = ["m", "n", "k"]
complexity = "2*m*n*k"

[[service]]
name = "dgemm_cmd"
args = [
    { name = "m", mode = "in", type = "int" },
    { name = "n", mode = "in", type = "int" },
    { name = "k", mode = "in", type = "int" },
    { name = "A", mode = "in", type = "matrix<f64>[m,k]" },
    { name = "B", mode = "in", type = "matrix<f64>[k,n]" },
    { name = "C", mode = "out", type = "matrix<f64>[m,n]" },
]
size_params = ["m", "n", "k"]
complexity = "2*m*n*k"
"#;

/// The no-op and the dgemm of each kind: (kind, no-op service, dgemm service). The library
/// comes last: OpenBLAS's threads spin for a while after a call, and would slow what follows.
fn kinds() -> [(&'static str, &'static str, &'static str); 4] {
    [
        ("builtin", "add", "dgemm"),
        ("command", "add_cmd", "dgemm_cmd"),
        ("python", "add_py", "dgemm_py"),
        ("library", "dcopy", "blas_dgemm"),
    ]
}

fn noop_inputs(service: &str) -> Vec<Value> {
    match service {
        "dcopy" => vec![Value::Int(1), Value::vector_f64(&[1.0])],
        _ => vec![Value::Int(1)],
    }
}

fn matrix(n: usize, seed: usize) -> Vec<f64> {
    (0..n * n)
        .map(|i| ((i * 7 + seed) % 101) as f64 / 101.0 - 0.5)
        .collect()
}

/// One in-process call of the BLAS `dgemm_` on row-major `a` and `b` (as the library service
/// calls it), GFLOP/s.
fn in_process_gflops(blas: &str, n: usize, a: &[f64], b: &[f64]) -> anyhow::Result<f64> {
    // One run: callers take the best of their own.
    type Dgemm = unsafe extern "C" fn(
        *const u8,
        *const u8,
        *const i32,
        *const i32,
        *const i32,
        *const f64,
        *const f64,
        *const i32,
        *const f64,
        *const i32,
        *const f64,
        *mut f64,
        *const i32,
        usize,
        usize,
    );
    // SAFETY: loading the system BLAS, as the library worker does.
    let lib = unsafe { libloading::Library::new(blas) }.map_err(|e| {
        anyhow::anyhow!("cannot load {blas}: {e} (install libopenblas0 or libblas3)")
    })?;
    // SAFETY: dgemm_ has the Fortran BLAS signature above (with gfortran's hidden lengths).
    let f: libloading::Symbol<'_, Dgemm> = unsafe { lib.get(b"dgemm_") }?;
    let mut c = vec![0.0f64; n * n];
    let ni = n as i32;
    let (one, zero) = (1.0f64, 0.0f64);
    let t = Instant::now();
    {
        // SAFETY: n x n arrays, leading dimensions n; C^T = B^T A^T in column-major terms.
        unsafe {
            f(
                b"N".as_ptr(),
                b"N".as_ptr(),
                &ni,
                &ni,
                &ni,
                &one,
                b.as_ptr(),
                &ni,
                a.as_ptr(),
                &ni,
                &zero,
                c.as_mut_ptr(),
                &ni,
                1,
                1,
            )
        };
    }
    Ok(2.0 * (n as f64).powi(3) / t.elapsed().as_secs_f64() / 1e9)
}

/// The p50 latencies (µs) of sequential calls of `a` and `b`, alternated so that both meet the
/// same machine.
fn p50s_us(
    client: &Client,
    a: (&FunctionHandle, &[Value]),
    b: (&FunctionHandle, &[Value]),
    calls: usize,
) -> anyhow::Result<(f64, f64)> {
    for _ in 0..calls.min(50) {
        client.call(a.0, a.1.to_vec())?;
        client.call(b.0, b.1.to_vec())?;
    }
    let (mut la, mut lb) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for _ in 0..calls {
        for ((h, inputs), lat) in [(a, &mut la), (b, &mut lb)] {
            let t = Instant::now();
            client.call(h, inputs.to_vec())?;
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok((Data::new(la).percentile(50), Data::new(lb).percentile(50)))
}

/// Why `python` cannot run the Python kernels (numpy is not importable there), or `None`.
fn numpy_missing(python: &str) -> Option<String> {
    let out = std::process::Command::new(python)
        .args(["-c", "import numpy"])
        .output();
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "numpy is not importable by {python} ({}): install it (`apt-get install python3-numpy` or `pip install numpy`) or name an interpreter that has it with --python",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("no message")
                .trim()
        )),
        Err(e) => Some(format!(
            "cannot run {python} ({e}): install Python 3 with numpy or name an interpreter with --python"
        )),
    }
}

/// Runs everything; one JSON object per kind, a kind that cannot run here with `skipped`
/// and why.
pub fn run(opts: &KernelsBench, emit: &mut dyn FnMut(Json)) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("gw_bench_kernels.py"), NOOP_PY)?;
    let desc = dir.path().join("bench.toml");
    std::fs::write(&desc, DESCRIPTIONS)?;
    let lapack = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/services/lapack.toml");
    let script = "import numpy as np, sys; np.save(sys.argv[3], np.load(sys.argv[1]) @ np.load(sys.argv[2]))";
    let numpy_missing = numpy_missing(&opts.python);
    if let Some(why) = &numpy_missing {
        eprintln!("bench kernels: {why}; the python row is skipped, and the command row's dgemm");
    }
    let mut toml = format!(
        r#"builtins = ["add", "dgemm"]
calibrate = false
slots = 1
services = [{lapack:?}, {desc:?}]
[[library]]
service = "dcopy"
path = {blas:?}
[[library]]
service = "blas_dgemm"
path = {blas:?}
[[command]]
service = "add_cmd"
program = "sh"
args = ["-c", "echo $(({{x}} + 1)) > {{y}}"]
"#,
        lapack = lapack.display().to_string(),
        desc = desc.display().to_string(),
        blas = opts.blas,
    );
    if numpy_missing.is_none() {
        toml.push_str(&format!(
            r#"[[python]]
service = "add_py"
function = "gw_bench_kernels:add"
python = {python:?}
path = [{dir:?}]
[[python]]
service = "dgemm_py"
function = "gw_bench_kernels:dgemm"
python = {python:?}
path = [{dir:?}]
[[command]]
service = "dgemm_cmd"
program = {python:?}
args = ["-c", {script:?}, "{{A}}", "{{B}}", "{{C}}"]
"#,
            python = opts.python,
            dir = dir.path().display().to_string(),
        ));
    }
    let n = opts.n;
    let (a, b) = (matrix(n, 1), matrix(n, 2));
    // Before any daemon or worker runs: nobody else's threads compete with it.
    eprintln!("bench kernels: {n} x {n} dgemm in this process …");
    let mut reference = 0.0f64;
    for _ in 0..5 {
        reference = reference.max(in_process_gflops(&opts.blas, n, &a, &b)?);
    }
    let exe = std::env::current_exe()?;
    let mut grid = LocalGrid::start_gridwise(&exe, &[])?;
    grid.add_server("kernels", &toml)?;
    let client = Client::connect(grid.client_config())?;
    wait_for_servers(&client, 1, Duration::from_secs(60))?;

    let dgemm_inputs = vec![
        Value::Int(n as i64),
        Value::Int(n as i64),
        Value::Int(n as i64),
        Value::matrix_f64(n as u64, n as u64, &a),
        Value::matrix_f64(n as u64, n as u64, &b),
    ];
    let builtin = client.function_handle_default("add")?;
    let builtin_inputs = noop_inputs("add");
    let mut expected: Option<Value> = None;
    for (kind, noop, dgemm) in kinds() {
        if let (Some(why), "python") = (&numpy_missing, kind) {
            emit(json!({"bench": "kernels", "kind": kind, "skipped": why}));
            continue;
        }
        eprintln!("bench kernels: {kind} …");
        let h = client.function_handle_default(noop)?;
        let calls = if kind == "command" {
            (opts.calls / 10).max(10)
        } else {
            opts.calls
        };
        let (base, p50) = p50s_us(
            &client,
            (&builtin, &builtin_inputs),
            (&h, &noop_inputs(noop)),
            calls,
        )?;
        let mut row = json!({
            "bench": "kernels",
            "kind": kind,
            "noop_service": noop,
            "noop_calls": calls,
            "noop_p50_us": (p50 * 10.0).round() / 10.0,
            "builtin_noop_p50_us": (base * 10.0).round() / 10.0,
            "noop_overhead_vs_builtin_us": ((p50 - base) * 10.0).round() / 10.0,
        });
        if let Some(why) = numpy_missing.as_ref().filter(|_| dgemm == "dgemm_cmd") {
            row["dgemm_skipped"] = json!(why);
            emit(row);
            continue;
        }
        let h = client.function_handle_default(dgemm)?;
        client.call(&h, dgemm_inputs.clone())?;
        let mut kernel_s = f64::INFINITY;
        let mut round_trip_s = f64::INFINITY;
        for _ in 0..3 {
            let r = client.call(&h, dgemm_inputs.clone())?;
            kernel_s = kernel_s.min(r.timing.kernel_s);
            round_trip_s = round_trip_s.min(r.round_trip_s);
            // Every kind computes the same product.
            let c = r.outputs[0]
                .as_array()
                .and_then(|x| x.to_f64())
                .unwrap_or_default();
            match &expected {
                None => expected = Some(r.outputs[0].clone()),
                Some(e) => {
                    let want = e.as_array().and_then(|x| x.to_f64()).unwrap_or_default();
                    let worst = c
                        .iter()
                        .zip(&want)
                        .map(|(x, y)| (x - y).abs())
                        .fold(0.0, f64::max);
                    anyhow::ensure!(
                        c.len() == want.len() && worst < 1e-6,
                        "{kind} dgemm differs from the built-in's by {worst}"
                    );
                }
            }
        }
        let flops = 2.0 * (n as f64).powi(3);
        let gflops = flops / kernel_s / 1e9;
        row["dgemm_service"] = json!(dgemm);
        row["dgemm_n"] = json!(n);
        row["dgemm_kernel_gflops"] = json!((gflops * 100.0).round() / 100.0);
        row["dgemm_round_trip_gflops"] =
            json!((flops / round_trip_s / 1e9 * 100.0).round() / 100.0);
        row["in_process_blas_gflops"] = json!((reference * 100.0).round() / 100.0);
        row["dgemm_vs_in_process_blas"] = json!((gflops / reference * 1000.0).round() / 1000.0);
        emit(row);
    }
    drop(grid);
    Ok(())
}
