//! More than one agent: agents keep what they learn in one PostgreSQL database (a real server
//! from the system's packages, started by the test on a free loopback port and removed after).

use gridwise_e2e::{FAST_HEARTBEATS, Grid, eventually};
use gridwise_pgtemp::TempPostgres;
use gridwise_proto::{CallProfile, ComputeSource, RankOptions, Value};
use std::time::Duration;

const EMULATED_SOLVE: &str = "builtins = []\ncalibrate = false\n[[emulated]]\nname = \"solve\"\nparam = \"n\"\ncomplexity = \"n^3\"\nspeed = [[1, 1e10], [2000, 1e10]]\n";

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

/// An agent on `url` with fast heartbeats.
fn agent_on(url: &str) -> Grid {
    let mut args: Vec<&str> = FAST_HEARTBEATS.to_vec();
    args.extend(["--store", url]);
    Grid::agent(&args)
}

#[test]
fn what_an_agent_learns_in_postgres_survives_it_and_reaches_a_second_agent() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    // Trust authentication takes any password: this one must never reach a log.
    let url = pg
        .create_database("grid")
        .unwrap()
        .replace("postgres@", "postgres:hunter2@");
    let mut a = agent_on(&url);
    a.server("plain", EMULATED_SOLVE);
    a.wait_up(1);
    let c = a.client();
    let solve = c.function_handle_default("solve").unwrap();
    for n in [200, 400] {
        c.call(&solve, vec![Value::Int(n)]).unwrap();
    }
    assert!(
        eventually(Duration::from_secs(10), || c
            .model("plain", "solve")
            .map(|m| m.points.len() == 2)
            .unwrap_or(false)),
        "{}",
        a.logs()
    );
    // The store's writer commits within milliseconds; give it a heartbeat's worth.
    std::thread::sleep(Duration::from_millis(300));

    // A second agent on the same database starts with the first one's server and model.
    let b = agent_on(&url);
    let cb = b.client();
    let m = cb
        .model("plain", "solve")
        .unwrap_or_else(|e| panic!("{e}\n{}", b.logs()));
    assert_eq!(m.points.len(), 2, "{m:?}");

    // The first agent killed and started again: the same, from the database alone.
    a.restart_agent().unwrap();
    let c = a.client();
    assert_eq!(c.model("plain", "solve").unwrap().points.len(), 2);
    a.wait_up(1);
    let cands = c.explain(profile(300), RankOptions::default()).unwrap();
    assert!(
        matches!(
            cands[0].etc.compute_source,
            ComputeSource::Fpm { points: 2, .. }
        ),
        "{:?}",
        cands[0].etc.compute_source
    );
    assert!(
        a.logs().contains("postgres://postgres@127.0.0.1"),
        "the agent says where its store is:\n{}",
        a.logs()
    );
    assert!(!a.logs().contains("hunter2") && !b.logs().contains("hunter2"));
}

/// Two servers on both agents `a` and `b`.
fn servers_on_both(a: &mut Grid, b: &Grid) {
    let plain = "slots = 4\ncalibrate = false\n";
    servers_of_both(a, b, &[("s1", plain.into()), ("s2", plain.into())]);
}

/// `servers` (name, config) registered with both agents `a` and `b`.
fn servers_of_both(a: &mut Grid, b: &Grid, servers: &[(&str, String)]) {
    let agents = format!("agents = [\"{}\", \"{}\"]\n", a.agent.addr, b.agent.addr);
    for (name, toml) in servers {
        a.server(name, &format!("{agents}{toml}"));
    }
    a.wait_up(servers.len());
    b.wait_up(servers.len());
}

/// A client of both agents, and the pid of the one it uses.
fn client_of_both(a: &Grid, b: &Grid) -> (gridwise_client::Client, u32) {
    let mut cfg = a.client_config();
    cfg.agents = vec![a.agent.addr.clone(), b.agent.addr.clone()];
    let c = gridwise_client::Client::connect(cfg).unwrap();
    let pid = if c.agent_addr() == a.agent.addr {
        a.agent.pid()
    } else {
        b.agent.pid()
    };
    (c, pid)
}

#[test]
fn an_agent_killed_mid_batch_costs_no_call() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let url = pg.create_database("grid").unwrap();
    let mut a = agent_on(&url);
    let mut b = agent_on(&url);
    servers_on_both(&mut a, &b);
    let mut cfg = a.client_config();
    cfg.agents = vec![a.agent.addr.clone(), b.agent.addr.clone()];
    let c = gridwise_client::Client::connect(cfg).unwrap();
    let add = c.function_handle_default("add").unwrap();
    let first = c.agent_addr();
    // Calls in flight and calls still to be ranked when the client's agent dies.
    let mut ids = Vec::new();
    for i in 0..120 {
        if i == 40 {
            let victim = if first == a.agent.addr {
                &mut a
            } else {
                &mut b
            };
            victim.agent.kill();
        }
        ids.push(c.call_async(&add, vec![Value::Int(i)]).unwrap());
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut ran_on = std::collections::BTreeSet::new();
    for (i, id) in ids.into_iter().enumerate() {
        let r = c
            .wait(id)
            .unwrap_or_else(|e| panic!("call {i} failed: {e}\n{}\n{}", a.logs(), b.logs()));
        assert_eq!(r.outputs, vec![Value::Int(i as i64 + 1)], "call {i}");
        ran_on.insert(r.server);
    }
    let now = c.agent_addr();
    assert_ne!(now, first, "the client moved to the agent that lives");
    assert_eq!(ran_on.len(), 2, "both servers kept working: {ran_on:?}");
}

#[test]
fn a_graph_whose_agent_dies_mid_run_is_finished() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let url = pg.create_database("grid").unwrap();
    let mut a = agent_on(&url);
    let b = agent_on(&url);
    servers_on_both(&mut a, &b);
    // The agent that dies is the one that plans the graph.
    let (c, victim_pid) = client_of_both(&a, &b);
    let m = |v: &[f64]| Value::matrix_f64(2, 2, v);
    let mut graph = c.graph();
    // A chain of products, kept on the servers from one call to the next, beside calls that
    // last a second: the agent dies while the chain's values are held and calls still run.
    let mut prev = graph.call(
        "dgemm",
        vec![
            2.into(),
            2.into(),
            2.into(),
            m(&[1., 1., 0., 1.]).into(),
            m(&[1., 1., 0., 1.]).into(),
        ],
    );
    for _ in 0..3 {
        prev = graph.call(
            "dgemm",
            vec![
                2.into(),
                2.into(),
                2.into(),
                prev.output(0),
                m(&[1., 1., 0., 1.]).into(),
            ],
        );
    }
    for _ in 0..6 {
        graph.call("sleep", vec![1i64.into()]);
    }
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        gridwise_e2e::signal(victim_pid, libc::SIGKILL);
    });
    let run = graph
        .run()
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", a.logs(), b.logs()));
    killer.join().unwrap();
    // [[1,1],[0,1]]⁵ = [[1,5],[0,1]].
    assert_eq!(run.outputs(prev).unwrap()[0], m(&[1., 5., 0., 1.]));
    assert_eq!(run.calls.len(), 10);
}

/// An emulated `rows` service of `speed` units/s (a unit is 1e6 operations), calibrated once.
fn rows_server(speed: u64) -> String {
    format!(
        "builtins = []\ncalibrate = true\nslots = 1\n[[emulated]]\nname = \"rows\"\nparam = \"n\"\ncomplexity = \"n*1e6\"\n\
         speed = [[1, {speed}e6], [100000, {speed}e6]]\ncalibration_size = 10\ninputs = 0\noutput = false\n"
    )
}

#[test]
fn a_divisible_job_whose_agent_dies_is_finished() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let url = pg.create_database("grid").unwrap();
    let mut a = agent_on(&url);
    let b = agent_on(&url);
    let servers = [
        ("fast", rows_server(4000)),
        ("mid", rows_server(2000)),
        ("slow", rows_server(1000)),
    ];
    servers_of_both(&mut a, &b, &servers);
    let (c, victim_pid) = client_of_both(&a, &b);
    let first = c.agent_addr();
    let h = c.function_handle_default("rows").unwrap();
    let spec = gridwise_client::DivideSpec {
        unit_param: "n".into(),
        all: true,
        ..Default::default()
    };
    let inputs = |_: u64, units: u64| vec![Value::Int(units as i64)];
    // About 0.9 s an iteration on 7,000 units/s: the agent dies while the first one's parts
    // run, and the later iterations are planned by the agent that lives.
    let units = 6000;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        gridwise_e2e::signal(victim_pid, libc::SIGKILL);
    });
    let runs = c
        .divide_iter(&h, units, &spec, 3, &inputs)
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", a.logs(), b.logs()));
    killer.join().unwrap();
    assert_eq!(runs.len(), 3);
    for r in &runs {
        assert_eq!(r.parts.iter().map(|p| p.units).sum::<u64>(), units);
        assert_eq!(r.parts.len(), 3, "every server has a part: {:?}", r.plan);
    }
    assert!(
        runs[0].makespan_s > 0.4,
        "the first iteration ran past the kill ({} s)",
        runs[0].makespan_s
    );
    assert_ne!(
        c.agent_addr(),
        first,
        "the client moved to the agent that lives"
    );
}

#[test]
fn an_agent_whose_host_is_cut_off_costs_no_call_and_its_clients_move() {
    let dir = gridwise_e2e::cargo_build(&["-p", "gridwise", "--bin", "gridwise"])
        .unwrap_or_else(|e| panic!("{e}"));
    // Two agents on hosts of a test bed, the database and three servers on others; 4 clients
    // listing both, 150 calls each; the first client's agent's host cut off at a third.
    let row = gridwise_bench::agents::cut::run(&dir.join("gridwise"), 4, 150, 2)
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        row.get("skipped").is_none(),
        "the test bed needs root and iproute2: {row}"
    );
    assert_eq!(
        (
            row["lost"].as_u64(),
            row["failed"].as_u64(),
            row["wrong"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{row}"
    );
    assert!(row["clients_on_the_cut_agent"].as_u64() >= Some(1), "{row}");
    // Moved by the silence, not at the end of the 30 s agent_timeout a request waits out.
    let moved = row["moved_within_s"].as_f64();
    assert!(moved.is_some_and(|s| s < 5.0), "{row}");
    assert!(
        row["survivor_estimates_with"]
            .as_str()
            .is_some_and(|s| s.starts_with("Fpm")),
        "{row}"
    );
}

/// What agent `g` estimates of bringing 8 MiB of `source`'s output from `s1` to a client.
fn reply_estimate_s(g: &Grid) -> f64 {
    let p = CallProfile {
        service: "source".into(),
        sizes: vec![("n".into(), 1 << 20)],
        in_bytes: 8,
        out_bytes: 8 << 20,
        remote_in: Vec::new(),
        inline_bytes: 0,
    };
    g.client().explain(p, RankOptions::default()).unwrap()[0]
        .etc
        .transfer_out_s
}

#[test]
fn what_a_client_of_one_agent_measures_fetching_reaches_the_other_agent() {
    let pg = TempPostgres::start().unwrap_or_else(|e| panic!("{e}"));
    let url = pg.create_database("grid").unwrap();
    let mut a = agent_on(&url);
    let b = agent_on(&url);
    let toml = "builtins = [\"source\", \"add\"]\ncalibrate = false\n".to_string();
    servers_of_both(&mut a, &b, &[("s1", toml)]);
    // A client of agent a only: small calls, then three 8 MiB outputs kept on the server.
    let c = a.client();
    let add = c.function_handle_default("add").unwrap();
    for i in 0..8 {
        c.call(&add, vec![Value::Int(i)]).unwrap();
    }
    let source = c.function_handle_default("source").unwrap();
    let kept: Vec<_> = (0..3)
        .map(|_| {
            let r = c
                .call_keep(&source, vec![Value::Int(1 << 20)], &[0])
                .unwrap();
            match r.outputs[0].clone() {
                Value::Ref(r) => r,
                other => panic!("a kept output is a reference: {other:?}"),
            }
        })
        .collect();
    // Calls with small inputs say nothing of 8 MiB: agent b estimates the reply at its default.
    std::thread::sleep(Duration::from_millis(300));
    let before = reply_estimate_s(&b);
    for r in &kept {
        c.fetch(r).unwrap();
    }
    // The fetches teach the server's client link at agent a, and at agent b through the
    // server: b never saw the client.
    assert!(
        eventually(Duration::from_secs(10), || reply_estimate_s(&b) != before),
        "agent b still estimates the reply at {before} s\n{}\n{}",
        a.logs(),
        b.logs()
    );
    assert!(eventually(Duration::from_secs(10), || {
        (reply_estimate_s(&a) - reply_estimate_s(&b)).abs() < 1e-6
    }));
}
