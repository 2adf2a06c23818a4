//! The GridRPC C API: the programs in `examples/c`, compiled with the system C compiler against
//! `libgridwise.a`, run against a real agent and servers on 127.0.0.1.

use gridwise_e2e::{FAST_HEARTBEATS, Grid, c_examples, capi_lib_dir};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const TOKEN: &str = "c-client-secret";

/// Runs an example with `args`, killed after 60 s; panics with its output unless it exits 0.
fn run(dir: &Path, program: &str, args: &[&str]) -> String {
    let mut child = Command::new(dir.join(program))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("waitable").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out: Output = child.wait_with_output().expect("its output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n{text}",
        out.status
    );
    text
}

#[test]
fn grpc_programs_in_c_run_unchanged_against_a_real_grid() {
    let tmp = tempfile::tempdir().unwrap();
    let bin_dir = tmp.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let bin = c_examples(&bin_dir);
    let mut flags: Vec<&str> = FAST_HEARTBEATS.to_vec();
    flags.extend(["--client-token", TOKEN, "--server-token", "c-server-secret"]);
    let mut g = Grid::agent(&flags);
    g.server("s1", "slots = 2\ncalibrate = false\n");
    g.server("s2", "slots = 2\ncalibrate = false\n");
    g.wait_up(2);

    let write = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let config = write(
        "client.toml",
        &format!("agent = \"{}\"\ntoken = \"{TOKEN}\"\n", g.agent.addr),
    );
    let out = run(&bin, "add", &[&config]);
    assert!(out.contains("add(41) = 42"), "{out}");
    // Several agents, comma-separated (as GRIDWISE_AGENT takes them too): the client starts
    // at a random one and moves on from those that do not answer (three of the four here).
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let several = write(
        "several.toml",
        &format!(
            "agent = \"{gone},{gone},{gone},{}\"\ntoken = \"{TOKEN}\"\nconnect_timeout_ms = 500\n",
            g.agent.addr
        ),
    );
    let out = run(&bin, "add", &[&several]);
    assert!(out.contains("add(41) = 42"), "{out}");

    // Bound to a server by the host:port it serves on, as GridRPC programs name servers.
    let s2 = g.servers[g.names.iter().position(|n| n == "s2").unwrap()]
        .addr
        .clone();
    for args in [vec![config.as_str()], vec![config.as_str(), s2.as_str()]] {
        let out = run(&bin, "dgemm", &args);
        assert!(out.contains("largest relative error"), "{out}");
    }
    assert!(run(&bin, "async", &[&config]).contains("20 asynchronous calls, all right"));
    let out = run(&bin, "cancel", &[&config]);
    assert!(
        out.contains("loop cancelled") && out.contains("add(1) = 2"),
        "{out}"
    );
    assert!(run(&bin, "argstack", &[&config]).contains("argstack dgemm: [19 22; 43 50]"));

    let wrong = write(
        "wrong.toml",
        &format!("agent = \"{}\"\ntoken = \"not-the-token\"\n", g.agent.addr),
    );
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = write(
        "dead.toml",
        &format!(
            "agent = \"127.0.0.1:{dead_port}\"\nconnect_timeout_ms = 500\nagent_retry_s = 0\n"
        ),
    );
    let broken = write("broken.toml", "agent = [this is not toml\n");
    let out = run(&bin, "errors", &[&config, &wrong, &dead, &broken]);
    for code in [
        "GRPC_NO_ERROR",
        "GRPC_NOT_INITIALIZED",
        "GRPC_CONFIGFILE_NOT_FOUND",
        "GRPC_CONFIGFILE_ERROR",
        "GRPC_SERVER_NOT_FOUND",
        "GRPC_FUNCTION_NOT_FOUND",
        "GRPC_INVALID_FUNCTION_HANDLE",
        "GRPC_INVALID_SESSION_ID",
        "GRPC_RPC_REFUSED",
        "GRPC_COMMUNICATION_FAILED",
        "GRPC_SESSION_FAILED",
        "GRPC_NOT_COMPLETED",
        "GRPC_NONE_COMPLETED",
        "GRPC_OTHER_ERROR_CODE",
        "GRPC_UNKNOWN_ERROR_CODE",
        "GRPC_ALREADY_INITIALIZED",
    ] {
        let checked = out.lines().any(|l| l.starts_with(&format!("{code} ")));
        assert!(checked, "{code} never checked:\n{out}");
    }
    assert!(out.contains("every error code as GFD.52 says"), "{out}");

    // Installed as a user installs it, a program built with pkg-config links the shared
    // library (so it exports the variadic calls too) and runs.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let prefix = tmp.path().join("prefix");
    let st = Command::new(root.join("crates/capi/install.sh"))
        .env("PREFIX", &prefix)
        .env("LIB_DIR", capi_lib_dir())
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let pc = Command::new("pkg-config")
        .args(["--cflags", "--libs", "gridwise"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .unwrap();
    assert!(
        pc.status.success(),
        "{}",
        String::from_utf8_lossy(&pc.stderr)
    );
    let flags = String::from_utf8(pc.stdout).unwrap();
    let exe = tmp.path().join("add-shared");
    let cc = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(root.join("examples/c"))
        .arg(root.join("examples/c/add.c"))
        .args(flags.split_whitespace())
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe)
        .arg(&config)
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("add(41) = 42"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
