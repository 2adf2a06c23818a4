//! Users' own routines on real servers: LAPACK and BLAS from the system libraries in worker
//! processes (a solve, and a tiled Cholesky graph run by `gridwise graph run`), a Python
//! kernel, command kernels, routines that crash, abort, exit, hog memory or never return, and
//! a server embedded in a program with a Rust kernel of its own.

use gridwise_e2e::{FAST_HEARTBEATS, Grid, bin, cargo_build, python_venv};
use gridwise_kernels::{Kernel, KernelCtx, KernelError};
use gridwise_proto::{ArgDesc, ArgMode, ErrorCode, ServiceDesc, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The element (i, j) of the matrix `examples/services/tiles.py` makes tiles of.
fn spd(i: usize, j: usize, n: usize) -> f64 {
    if i == j {
        2.0 * n as f64
    } else {
        0.5 + (((i + j) * (i.abs_diff(j) + 1)) % 97) as f64 / 97.0
    }
}

#[test]
fn lapack_and_python_routines_solve_and_factorise() {
    let python = python_venv(&["numpy"]);
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    // The server the README starts (examples/services/server.toml), its files beside it, its
    // Python the one with numpy.
    let examples = root().join("examples/services");
    for f in ["lapack.toml", "tiles.toml", "tiles.py"] {
        std::fs::copy(examples.join(f), g.config_dir().join(f)).unwrap();
    }
    let example = std::fs::read_to_string(examples.join("server.toml")).unwrap();
    assert!(example.contains("python = \"python3\""));
    let toml = format!(
        "builtins = [\"add\"]\ncalibrate = false\nslots = 2\n{}",
        example.replace(
            "python = \"python3\"",
            &format!("python = {:?}", python.display().to_string())
        )
    );
    g.server("s1", &toml);
    g.server("s2", &toml);
    g.wait_up(2);
    let c = g.client();
    // It offers every routine its files describe: nothing to warn of.
    let hidden: Vec<_> = c
        .status()
        .unwrap()
        .servers
        .into_iter()
        .flat_map(|s| s.not_offered)
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");

    // dgesv: a 60 x 60 system with 3 right-hand sides, checked by its residual.
    let n = 60usize;
    let a: Vec<f64> = (0..n * n)
        .map(|k| {
            if k / n == k % n {
                n as f64
            } else {
                ((k * 7919) % 101) as f64 / 101.0
            }
        })
        .collect();
    let b: Vec<f64> = (0..n * 3).map(|k| (k % 13) as f64 - 6.0).collect();
    let h = c.function_handle_default("dgesv").unwrap();
    let r = c
        .call(
            &h,
            vec![
                Value::Int(n as i64),
                Value::Int(3),
                Value::matrix_f64(n as u64, n as u64, &a),
                Value::matrix_f64(n as u64, 3, &b),
            ],
        )
        .unwrap();
    let x = r.outputs[0].as_array().unwrap().to_f64().unwrap();
    for i in 0..n {
        for k in 0..3 {
            let ax: f64 = (0..n).map(|j| a[i * n + j] * x[j * 3 + k]).sum();
            assert!(
                (ax - b[i * 3 + k]).abs() < 1e-9,
                "row {i}, rhs {k}: {ax} vs {}",
                b[i * 3 + k]
            );
        }
    }
    // A singular system is the routine's own error, named.
    let e = c
        .call(
            &h,
            vec![
                Value::Int(2),
                Value::Int(1),
                Value::matrix_f64(2, 2, &[1.0, 2.0, 2.0, 4.0]),
                Value::matrix_f64(2, 1, &[1.0, 1.0]),
            ],
        )
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::SessionFailed);
    assert!(
        e.message.contains("dgesv_") && e.message.contains("info = 2"),
        "{e}"
    );

    // A Python kernel with two outputs.
    let h = c.function_handle_default("norm2").unwrap();
    let r = c
        .call(&h, vec![Value::Int(2), Value::vector_f64(&[3.0, 4.0])])
        .unwrap();
    assert_eq!(
        r.outputs,
        vec![Value::Double(5.0), Value::vector_f64(&[0.6, 0.8])]
    );

    // The tiled Cholesky graph, run as a user runs it, its factor checked: L L^T = A.
    let out = tempfile::tempdir().unwrap();
    let cli = cargo_build(&["-p", "gridwise", "--bin", "gridwise"]).unwrap();
    let run = Command::new(cli.join("gridwise"))
        .arg("graph")
        .arg("run")
        .arg(root().join("examples/graphs/cholesky_lapack.json"))
        .arg("--save")
        .arg(out.path())
        .args(["--agent", &g.agent.addr])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let (nt, nb) = (4usize, 64usize);
    let n = nt * nb;
    let mut l = vec![0.0f64; n * n];
    for bi in 0..nt {
        for bj in 0..=bi {
            let name = if bi == bj {
                format!("potrf_{bi}")
            } else {
                format!("trsm_{bi}_{bj}")
            };
            let bytes = std::fs::read(out.path().join(format!("{name}.0.npy"))).unwrap();
            let tile = gridwise_routines::npy::read(&bytes, gridwise_proto::ElemType::F64)
                .unwrap()
                .to_f64()
                .unwrap();
            for i in 0..nb {
                for j in 0..nb {
                    if bi == bj && j > i {
                        continue; // dpotrf leaves the upper triangle as it was
                    }
                    l[(bi * nb + i) * n + bj * nb + j] = tile[i * nb + j];
                }
            }
        }
    }
    let mut worst = 0.0f64;
    for i in 0..n {
        for j in 0..=i {
            let llt: f64 = (0..=j).map(|k| l[i * n + k] * l[j * n + k]).sum();
            worst = worst.max((llt - spd(i, j, n)).abs() / (2.0 * n as f64));
        }
    }
    assert!(worst < 1e-12, "L L^T differs from A by {worst} (relative)");
}

#[test]
fn routines_that_crash_or_hang_fail_their_call_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("libbad.so");
    let cc = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so)
        .arg(root().join("tests/c/bad_routines.c"))
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let mut desc = String::new();
    for name in ["maybe_segv", "abort_now", "exit_now", "hog", "spin"] {
        desc.push_str(&format!(
            "[[service]]\nname = \"{name}\"\nargs = [{{ name = \"n\", mode = \"in\", type = \"int\" }}, {{ name = \"y\", mode = \"out\", type = \"double\" }}]\nlibrary = {{ symbol = \"{name}_\", call = [\"n\", \"y\"] }}\n\n"
        ));
    }
    let desc_path = dir.path().join("bad.toml");
    std::fs::write(&desc_path, desc).unwrap();
    let mut toml = format!(
        "builtins = [\"add\"]\ncalibrate = false\nslots = 2\nservices = [{:?}]\n",
        desc_path.display().to_string()
    );
    for name in ["maybe_segv", "abort_now", "exit_now", "hog", "spin"] {
        toml.push_str(&format!(
            "[[library]]\nservice = \"{name}\"\npath = {:?}\nmemory_limit_bytes = 536870912\ntime_limit_s = 2\n",
            so.display().to_string()
        ));
    }
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    g.server("s1", &toml);
    g.wait_up(1);
    let c = g.client();
    let call = |service: &str, n: i64| {
        let h = c.function_handle_default(service).unwrap();
        c.call(&h, vec![Value::Int(n)])
    };
    assert_eq!(
        call("maybe_segv", 41).unwrap().outputs,
        vec![Value::Double(42.0)]
    );
    for (service, n, says) in [
        ("maybe_segv", -1, "signal 11 (SIGSEGV"),
        ("abort_now", 0, "signal 6 (SIGABRT"),
        ("exit_now", 3, "exited with status 3"),
        ("hog", 0, "memory limit is 536870912 bytes"),
        ("spin", 0, "time limit of 2 s"),
    ] {
        let t = Instant::now();
        let e = call(service, n).unwrap_err();
        assert_eq!(e.code, ErrorCode::SessionFailed, "{service}: {e}");
        assert!(e.message.contains(says), "{service}: {e}");
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{service} took {:?}",
            t.elapsed()
        );
        // The server goes on, and so does the service: its next call gets a new worker.
        assert_eq!(
            call("maybe_segv", 1).unwrap().outputs,
            vec![Value::Double(2.0)],
            "after {service}"
        );
        let add = c.function_handle_default("add").unwrap();
        assert_eq!(
            c.call(&add, vec![Value::Int(1)]).unwrap().outputs,
            vec![Value::Int(2)]
        );
    }
}

#[test]
fn command_kernels_run_files_and_cancel_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let desc = dir.path().join("cmd.toml");
    std::fs::write(
        &desc,
        r#"
[[service]]
name = "double_all"
args = [
    { name = "n", mode = "in", type = "int" },
    { name = "x", mode = "in", type = "vector<f64>[n]" },
    { name = "y", mode = "out", type = "vector<f64>[n]" },
]
size_params = ["n"]

[[service]]
name = "nap"
args = [{ name = "s", mode = "in", type = "string" }, { name = "y", mode = "out", type = "int" }]
"#,
    )
    .unwrap();
    let marker = format!("30.{}", std::process::id());
    let toml = format!(
        r#"builtins = ["add"]
calibrate = false
services = [{:?}]
[[command]]
service = "double_all"
program = "sh"
args = ["-c", "awk '{{for(i=1;i<=NF;i++) printf \"%s \", 2*$i}}' {{x}} > {{y}}"]
format = "text"
[[command]]
service = "nap"
program = "sh"
args = ["-c", "sh -c 'sleep {{s}}' & wait"]
"#,
        desc.display().to_string()
    );
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    g.server("s1", &toml);
    g.wait_up(1);
    let c = g.client();
    let h = c.function_handle_default("double_all").unwrap();
    let r = c
        .call(
            &h,
            vec![Value::Int(3), Value::vector_f64(&[1.0, -2.5, 4.0])],
        )
        .unwrap();
    assert_eq!(r.outputs, vec![Value::vector_f64(&[2.0, -5.0, 8.0])]);

    let h = c.function_handle_default("nap").unwrap();
    let id = c.call_async(&h, vec![Value::Str(marker.clone())]).unwrap();
    let running = |pattern: &str| {
        let out = Command::new("pgrep")
            .args(["-f", pattern])
            .output()
            .unwrap();
        !out.stdout.is_empty()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !running(&format!("sleep {marker}")) {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    c.cancel(id).unwrap();
    assert!(c.wait(id).unwrap_err().message.contains("cancel"));
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !running(&format!("sleep {marker}")),
        "the cancelled command's process is still there"
    );
    // Its scratch directory went with it (no other test of this binary runs commands).
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("gridwise-call-"))
        .collect();
    assert!(left.is_empty(), "scratch left: {left:?}");
}

#[test]
fn description_mistakes_stop_the_server_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let desc = dir.path().join("broken.toml");
    std::fs::write(
        &desc,
        "[[service]]\nname = \"x\"\nargs = [\n  { name = \"n\", mode = \"in\", type = \"int\" },\n  { name = \"v\", mode = \"in\", type = \"vector<f64>[m]\" },\n]\n",
    )
    .unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(
        &cfg,
        format!(
            "builtins = []\nservices = [{:?}]\n[[command]]\nservice = \"x\"\nprogram = \"true\"\n",
            desc.display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(bin("gridwise-server"))
        .arg("--config")
        .arg(&cfg)
        .args(["--listen", "127.0.0.1:0", "--no-calibrate"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("{}:1:", desc.display())) && err.contains("`m`"),
        "{err}"
    );
}

/// A kernel an embedding program brings: y = 3x.
struct Triple(ServiceDesc);

impl Kernel for Triple {
    fn desc(&self) -> &ServiceDesc {
        &self.0
    }

    fn run(&self, inputs: &[Value], _: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        let x = inputs[0]
            .as_int()
            .ok_or(KernelError::Internal("x is no int".into()))?;
        Ok(vec![Value::Int(3 * x)])
    }
}

#[test]
fn an_embedding_program_offers_its_own_rust_kernel() {
    let g = Grid::agent(&FAST_HEARTBEATS);
    let desc = ServiceDesc {
        name: "triple".into(),
        doc: "3x".into(),
        args: vec![
            ArgDesc::new("x", ArgMode::In, "int"),
            ArgDesc::new("y", ArgMode::Out, "int"),
        ],
        size_params: vec![],
        complexity: None,
        duration: None,
        memory: None,
    };
    let cfg = gridwise_server::ServerConfig {
        name: Some("embedded".into()),
        agent: g.agent.addr.clone(),
        builtins: vec![],
        calibrate: false,
        ..Default::default()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.spawn(gridwise_server::run_with(
        cfg,
        vec![std::sync::Arc::new(Triple(desc))],
    ));
    g.wait_up(1);
    let c = g.client();
    let h = c.function_handle_default("triple").unwrap();
    assert_eq!(
        c.call(&h, vec![Value::Int(14)]).unwrap().outputs,
        vec![Value::Int(42)]
    );
    server.abort();
}

/// A routine's numerical library is told how many threads it may start: the server's
/// `threads`, or its cores over its slots (so full slots do not oversubscribe the host).
#[test]
fn routines_are_told_how_many_threads_their_libraries_may_start() {
    let python = python_venv(&["numpy"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("threads.toml"),
        r#"[[service]]
name = "blas_threads"
doc = "How many threads the routine's BLAS may start."
args = [
    { name = "n", mode = "in", type = "int" },
    { name = "threads", mode = "out", type = "int" },
]
size_params = ["n"]
complexity = "n"
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("blasthreads.py"),
        "import os\n\n\ndef blas_threads(n):\n    \
         return int(os.environ['OPENBLAS_NUM_THREADS']) * int(os.environ['OMP_NUM_THREADS'] == os.environ['OPENBLAS_NUM_THREADS'])\n",
    )
    .unwrap();
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    for (name, setting) in [("three", "threads = 3\n"), ("one-slot", "slots = 1\n")] {
        g.server(
            name,
            &format!(
                "builtins = []\ncalibrate = false\n{setting}services = [{:?}]\n\
                 [[python]]\nservice = \"blas_threads\"\nfunction = \"blasthreads:blas_threads\"\n\
                 python = {:?}\npath = [{:?}]\n",
                dir.path().join("threads.toml").display().to_string(),
                python.display().to_string(),
                dir.path().display().to_string()
            ),
        );
    }
    g.wait_up(2);
    let c = g.client();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as i64);
    for (name, want) in [("three", 3), ("one-slot", cores)] {
        let h = c.function_handle_init("blas_threads", name).unwrap();
        let r = c.call(&h, vec![Value::Int(1)]).unwrap();
        assert_eq!(r.outputs[0], Value::Int(want), "{name}");
    }
}
