//! `gridwise bench rpc --tls [--dashboard chromium]` on real grids, small: every grid measured,
//! every figure present and sane, the ratios computed from them. (Figures themselves are the
//! benchmark's business, not a test's.)

use gridwise_e2e::cargo_build;
use serde_json::Value as Json;
use std::process::Command;

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(str::to_string)
}

/// `gridwise bench rpc --json` with few calls and `extra`: its JSON lines and its stderr.
fn bench_rpc(extra: &[&str]) -> (Vec<Json>, String) {
    let cli = cargo_build(&["-p", "gridwise", "--bin", "gridwise"])
        .unwrap()
        .join("gridwise");
    let out = Command::new(cli)
        .args([
            "bench",
            "rpc",
            "--json",
            "--calls",
            "200",
            "--async-calls",
            "400",
        ])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (lines, stderr)
}

/// Every grid's line has its figures, every comparison its ratios (one a turn).
fn check(lines: &[Json], stderr: &str, grids: &[&str]) {
    let measured: Vec<&str> = lines
        .iter()
        .filter(|l| l["bench"] == "rpc")
        .map(|l| l["grid"].as_str().unwrap())
        .collect();
    assert_eq!(measured, grids);
    for l in lines.iter().filter(|l| l["bench"] == "rpc") {
        for key in [
            "sync_p50_us",
            "rank_p50_us",
            "execute_p50_us",
            "async_calls_per_s",
            "array_round_trip_mb_per_s",
        ] {
            let v = l[key].as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v > 0.0, "{key} = {v} in {l}");
        }
        // A call's two halves fit in the whole.
        let (rank, exec, whole) = (
            l["rank_p50_us"].as_f64().unwrap(),
            l["execute_p50_us"].as_f64().unwrap(),
            l["sync_p99_us"].as_f64().unwrap(),
        );
        assert!(rank < whole && exec < whole, "{l}");
    }
    for grid in &grids[1..] {
        let name = format!("rpc_{grid}");
        let s = lines
            .iter()
            .find(|l| l["bench"] == name.as_str())
            .unwrap_or_else(|| panic!("no {name} line"));
        let r = s["sync_p50_over_plain"].as_f64().unwrap();
        assert!(r.is_finite() && r > 0.0, "{s}");
        let by_turn = s["sync_p50_over_plain_by_turn"].as_array().unwrap();
        assert_eq!(by_turn.len(), 10, "{s}");
        assert!(
            by_turn.iter().all(|r| r.as_f64().is_some_and(|r| r > 0.0)),
            "{s}"
        );
    }
    assert!(stderr.contains("turn 10 of 10"), "{stderr}");
}

#[test]
fn bench_rpc_compares_plain_tls_and_dashboard_grids_in_one_run() {
    let browser = chromium().expect("Chromium (`apt-get install chromium`; .ci/run installs it)");
    let (lines, stderr) = bench_rpc(&["--tls", "--dashboard", &browser]);
    check(
        &lines,
        &stderr,
        &[
            "plain",
            "plain_again",
            "tls",
            "dashboard",
            "dashboard_with_browser",
        ],
    );
}

/// Without a browser, the synchronous calls alternate grid by grid, call by call.
#[test]
fn bench_rpc_tls_measures_a_second_plain_grid_beside_the_tls_one() {
    let (lines, stderr) = bench_rpc(&["--tls"]);
    check(&lines, &stderr, &["plain", "plain_again", "tls"]);
}
