//! Functional performance models end to end: servers build them with benchmarks and stream the
//! points, real calls refine them, the agent ranks with them, and they survive an agent restart.

use gridwise_e2e::{FAST_HEARTBEATS, Grid, bin, eventually};
use gridwise_proto::{BuildState, CallProfile, ComputeSource, RankOptions, Value};
use std::time::Duration;

/// An emulated `solve` (n³ operations) with a true speed function, modelled with GBBP on
/// [64, 1024]. Runs take milliseconds, so builds take well under a second of sleeping.
fn modelled_server(speed: &str) -> String {
    format!(
        r#"builtins = []
slots = 2
calibrate = false

[[emulated]]
name = "solve"
param = "n"
complexity = "n^3"
speed = {speed}

[[models]]
service = "solve"
method = "gbbp"
fuzzy_max = true
params = [{{ name = "n", min = 64, max = 1024, stride = 64 }}]
"#
    )
}

fn profile(n: i64) -> CallProfile {
    CallProfile {
        service: "solve".into(),
        sizes: vec![("n".into(), n)],
        in_bytes: 8,
        out_bytes: 8,
        remote_in: Vec::new(),
        inline_bytes: 0,
    }
}

fn build_done(g: &Grid, server: &str) -> bool {
    g.client()
        .models()
        .map(|ms| {
            ms.iter().any(|m| {
                m.server == server
                    && m.progress
                        .as_ref()
                        .is_some_and(|p| p.state == BuildState::Done)
            })
        })
        .unwrap_or(false)
}

#[test]
fn models_are_built_streamed_and_used_then_survive_an_agent_restart() {
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    g.server(
        "paging",
        &modelled_server("[[64, 2e10], [600, 2e10], [700, 1e9], [1024, 5e8]]"),
    );
    g.wait_up(1);
    assert!(
        eventually(Duration::from_secs(60), || build_done(&g, "paging")),
        "the model build did not finish:\n{}",
        g.logs()
    );
    let c = g.client();
    let m = c.model("paging", "solve").unwrap();
    assert!(m.points.len() >= 3, "{} points", m.points.len());
    let p = m.progress.unwrap();
    assert!(p.runs >= p.points, "{p:?}");

    // The agent ranks with the model: at n = 900 the server pages, and the model knows it.
    let cands = c.explain(profile(900), RankOptions::default()).unwrap();
    let etc = &cands[0].etc;
    assert!(
        matches!(etc.compute_source, ComputeSource::Fpm { .. }),
        "{:?}",
        etc.compute_source
    );
    let true_s = 900f64.powi(3) / (1e9 - (900.0 - 700.0) / (1024.0 - 700.0) * 5e8);
    assert!(
        (etc.compute_s - true_s).abs() / true_s < 0.25,
        "predicted {} s, true {true_s} s",
        etc.compute_s
    );

    // Kill the agent and start it again: the model comes back from its store before the
    // server has said anything, and the first ranking after the server returns uses it.
    std::thread::sleep(Duration::from_millis(300)); // let the store's writer commit (≤ 10 ms batches)
    let before = m.points.len();
    g.restart_agent().unwrap();
    let c = g.client();
    let restored = c.model("paging", "solve").unwrap();
    assert_eq!(
        restored.points.len(),
        before,
        "points lost across the restart"
    );
    g.wait_up(1);
    let cands = c.explain(profile(900), RankOptions::default()).unwrap();
    assert!(
        matches!(cands[0].etc.compute_source, ComputeSource::Fpm { .. }),
        "after the restart: {:?}",
        cands[0].etc.compute_source
    );
}

#[test]
fn real_calls_alone_make_a_model() {
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    g.server(
        "plain",
        "builtins = []\ncalibrate = false\n[[emulated]]\nname = \"solve\"\nparam = \"n\"\ncomplexity = \"n^3\"\nspeed = [[1, 1e10], [2000, 1e10]]\n",
    );
    g.wait_up(1);
    let c = g.client();
    let solve = c.function_handle_default("solve").unwrap();
    for n in [200, 400] {
        c.call(&solve, vec![Value::Int(n)]).unwrap();
    }
    assert!(eventually(Duration::from_secs(10), || c
        .model("plain", "solve")
        .map(|m| m.points.len() == 2)
        .unwrap_or(false)));
    let m = c.model("plain", "solve").unwrap();
    let (x, s) = &m.points[0];
    assert_eq!(x, &vec![200]);
    // The measured speed is the true one, less the kernel's overhead: a 0.8 ms sleep can
    // overshoot by milliseconds on a busy machine, so only the order of magnitude is checked
    // below, and that it never exceeds the true speed.
    assert!(s.mean > 1e8 && s.mean <= 1.01e10, "{s:?}");
    let cands = c.explain(profile(300), RankOptions::default()).unwrap();
    assert!(matches!(
        cands[0].etc.compute_source,
        ComputeSource::Fpm { points: 2, .. }
    ));
}

#[test]
fn a_size_the_model_rules_out_goes_elsewhere() {
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    // `small` cannot run n > 700 at all (speed 0: out of memory); `big` is slower but can.
    g.server(
        "small",
        &modelled_server("[[64, 2e10], [700, 2e10], [701, 0], [1024, 0]]"),
    );
    g.server("big", &modelled_server("[[64, 5e9], [1024, 5e9]]"));
    g.wait_up(2);
    assert!(
        eventually(Duration::from_secs(60), || build_done(&g, "small")
            && build_done(&g, "big")),
        "{}",
        g.logs()
    );
    let c = g.client();
    let solve = c.function_handle_default("solve").unwrap();
    for _ in 0..3 {
        assert_eq!(c.call(&solve, vec![Value::Int(900)]).unwrap().server, "big");
    }
    let cands = c.explain(profile(900), RankOptions::default()).unwrap();
    assert_eq!(cands.len(), 1, "small must not be a candidate: {cands:?}");
}

#[test]
fn build_only_mode_saves_models_a_later_start_serves() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("models");
    let cfg = dir.path().join("server.toml");
    let body = modelled_server("[[64, 1e10], [1024, 2e10]]");
    std::fs::write(
        &cfg,
        format!("model_dir = {:?}\n{body}", model_dir.display().to_string()),
    )
    .unwrap();
    let out = std::process::Command::new(bin("gridwise-server"))
        .args(["--config", cfg.to_str().unwrap(), "--build-models-and-exit"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(model_dir.join("solve.model.json").exists());

    let mut g = Grid::agent(&FAST_HEARTBEATS);
    g.server("prebuilt", &std::fs::read_to_string(&cfg).unwrap());
    g.wait_up(1);
    // Loaded, not measured again: done at once, with the saved points.
    assert!(eventually(Duration::from_secs(10), || build_done(
        &g, "prebuilt"
    )));
    // The points follow the heartbeat that said the build is done by one message.
    let c = g.client();
    assert!(
        eventually(Duration::from_secs(5), || c
            .model("prebuilt", "solve")
            .is_ok_and(|m| m.points.len() >= 3)),
        "{:?}\n{}",
        c.model("prebuilt", "solve"),
        g.logs()
    );
}

/// Calls on a loaded server teach its model what they would have taken on a quiet host, so a
/// loaded spell leaves the quiet-host estimate where it was (issue 30: no drift). The server
/// runs as a daemon in a session of its own; its emulated kernel sleeps under a load trace
/// that gives it 0.4 of a core from 8 s to 16 s after it starts.
#[test]
fn a_loaded_spell_leaves_the_quiet_host_estimate_where_it_was() {
    use gridwise_proto::LoadModel;
    use std::time::Instant;
    let mut g = Grid::agent_in_own_sessions(&FAST_HEARTBEATS);
    // The trace's clock starts as the server does, just after this.
    let started = Instant::now();
    g.server(
        "loaded",
        "builtins = []\ncalibrate = false\nslots = 1\nload = [[0, 1.0], [8, 0.4], [16, 1.0]]\n\
         [[emulated]]\nname = \"solve\"\nparam = \"n\"\ncomplexity = \"n^3\"\n\
         speed = [[1, 1e10], [2000, 1e10]]\n",
    );
    g.wait_up(1);
    let c = g.client();
    let solve = c.function_handle_default("solve").unwrap();
    // Calls of 51 and 100 ms on a quiet host: a sleep's overshoot of a millisecond is 1-2%.
    let sizes = [800i64, 1000];
    let quiet = |c: &gridwise_client::Client, n: i64| {
        let opts = RankOptions {
            load_model: Some(LoadModel::Blind),
            ..RankOptions::default()
        };
        c.explain(profile(n), opts).unwrap()[0].etc.compute_s
    };
    for _ in 0..3 {
        for n in sizes {
            c.call(&solve, vec![Value::Int(n)]).unwrap();
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the quiet calls ran into the loaded spell ({:?}): the machine is too slow for this test",
        started.elapsed()
    );
    assert!(eventually(Duration::from_secs(5), || c
        .model("loaded", "solve")
        .map(|m| m.points.len() == 2)
        .unwrap_or(false)));
    let before: Vec<f64> = sizes.iter().map(|&n| quiet(&c, n)).collect();
    // Inside the spell whatever the server's start took (under 2 s): from 10 s to 14 s.
    std::thread::sleep(Duration::from_secs(10).saturating_sub(started.elapsed()));
    let mut slowed = Vec::new();
    while started.elapsed() < Duration::from_secs(14) {
        for n in sizes {
            let r = c.call(&solve, vec![Value::Int(n)]).unwrap();
            slowed.push(r.timing.kernel_s / (n as f64).powi(3) * 1e10);
        }
    }
    // The spell happened: the calls in it took 2.5 times their quiet time.
    assert!(slowed.len() >= 4, "{slowed:?}");
    assert!(
        slowed.iter().all(|s| (2.2..3.0).contains(s)),
        "calls in the loaded spell took {slowed:?} times their quiet time"
    );
    std::thread::sleep(Duration::from_millis(500));
    let after: Vec<f64> = sizes.iter().map(|&n| quiet(&c, n)).collect();
    for ((n, b), a) in sizes.iter().zip(&before).zip(&after) {
        let truth = (*n as f64).powi(3) / 1e10;
        assert!(
            (a / b - 1.0).abs() <= 0.03,
            "n = {n}: the quiet-host estimate moved from {b} s to {a} s over the loaded spell (true {truth} s)"
        );
    }
}

/// A server whose control group may use half a core reports half a core on an idle host,
/// whatever the host's counters say (issue 30: sensors of what the scheduler gives). Needs
/// root and a writable cgroup hierarchy of the CPU controller, as CI has; says why and checks
/// nothing where they are missing.
#[test]
fn a_server_under_a_cpu_quota_reports_the_share_its_group_may_use() {
    use gridwise_localgrid::cpu_group::CpuGroup;
    let group = match CpuGroup::make(&format!("gridwise-test-{}/quota", std::process::id())) {
        Ok(g) => std::sync::Arc::new(g),
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    group.set_quota(0.5).unwrap();
    let mut g = Grid::agent_in_cpu_group(group.clone(), &FAST_HEARTBEATS);
    g.server(
        "capped",
        "builtins = [\"add\"]\ncalibrate = false\nslots = 1\n",
    );
    g.wait_up(1);
    let c = g.client();
    let reported = || c.status().unwrap().servers[0].load.cpu_available;
    assert!(
        eventually(Duration::from_secs(10), || reported()
            .is_some_and(|a| (a - 0.5).abs() < 0.05)),
        "the capped server reports {:?}",
        reported()
    );
    drop(g);
    drop(group);
}
