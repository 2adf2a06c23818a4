//! The Python package (`python/`): built by maturin into a virtual environment under `target/`
//! (with this build's profile, so it reuses what `cargo test` compiled), then its pytest suite
//! runs against real daemons on 127.0.0.1.

use gridwise_e2e::{cargo_build, python_venv, target_dir};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd` to completion within `limit`, killing its whole process group (pytest and the
/// daemons it started) if it overruns; returns (success, output).
fn run(cmd: &mut Command, limit: Duration) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            // SAFETY: signals the process group this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = format!(
        "{}{}",
        std::fs::read_to_string(&out).unwrap_or_default(),
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    match status {
        Some(s) => (s.success(), text),
        None => (false, format!("timed out after {limit:?}:\n{text}")),
    }
}

fn must(cmd: &mut Command, what: &str, limit: Duration) -> String {
    let (ok, text) = run(cmd, limit);
    assert!(ok, "{what} failed:\n{text}");
    text
}

#[test]
fn the_python_package_installs_and_its_tests_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (target, profile) = target_dir().unwrap();
    let bin =
        cargo_build(&["-p", "gridwise", "--bin", "gridwise"]).unwrap_or_else(|e| panic!("{e}"));
    let python = python_venv(&["maturin>=1.8,<2", "numpy", "pytest"]);
    let venv = target.join("python-venv");
    must(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--force-reinstall", "--no-deps"])
            .arg(root.join("python"))
            .env("MATURIN_PEP517_ARGS", format!("--profile {profile}")),
        "pip install ./python",
        Duration::from_secs(900),
    );
    // From the workspace root: the source folder `python/gridwise` must not shadow the
    // installed package.
    let text = must(
        Command::new(venv.join("bin/pytest"))
            .args(["-q", "-p", "no:cacheprovider"])
            .arg(root.join("python/tests"))
            .current_dir(&target)
            .env("GRIDWISE_BIN", bin.join("gridwise")),
        "the Python tests",
        Duration::from_secs(600),
    );
    assert!(text.contains("passed"), "{text}");
}
