//! Crashes during work (issue 9): a server killed in the middle of a batch, the agent killed
//! and restarted during a batch and during a graph, and a server holding a graph's kept values
//! killed before they were used. Nothing is lost: every call completes, a graph remakes what
//! died with its holder. One test at a time: they kill processes and time what follows.

use gridwise_client::{CallResult, Client, FunctionHandle, SessionId};
use gridwise_e2e::{FAST_HEARTBEATS, Grid, eventually};
use gridwise_proto::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn ones(n: u64) -> Value {
    Value::matrix_f64(n, n, &vec![1.0; (n * n) as usize])
}

/// Emulated services for graphs: `make` and `join` are instant, `slow` takes ~3 s at
/// n = 100 and `step` ~1.2 s.
const GRAPH_SERVER: &str = r#"
calibrate = false
slots = 2
[[emulated]]
name = "make"
output = true
speed = [[1, 1e9], [1000, 1e9]]
[[emulated]]
name = "slow"
output = true
speed = [[1, 3e5], [1000, 3e5]]
[[emulated]]
name = "join"
inputs = 2
output = true
speed = [[1, 1e9], [1000, 1e9]]
[[emulated]]
name = "step"
inputs = 1
output = true
speed = [[1, 8e5], [1000, 8e5]]
"#;

/// A mix of calls: `add` (instant), `sleep 0` and a 24³ `dgemm`, each with its right answer.
struct Mix {
    handles: [FunctionHandle; 3],
    kinds: HashMap<SessionId, (usize, i64)>,
}

impl Mix {
    fn new(c: &Client) -> Mix {
        Mix {
            handles: ["add", "sleep", "dgemm"].map(|s| c.function_handle_default(s).unwrap()),
            kinds: HashMap::new(),
        }
    }

    fn submit(&mut self, c: &Client, i: i64) {
        let kind = (i % 3) as usize;
        let inputs = match kind {
            0 => vec![Value::Int(i)],
            1 => vec![Value::Int(0)],
            _ => vec![24.into(), 24.into(), 24.into(), ones(24), ones(24)],
        };
        let id = c.call_async(&self.handles[kind], inputs).unwrap();
        self.kinds.insert(id, (kind, i));
    }

    fn check(&self, id: SessionId, r: &CallResult) {
        let (kind, i) = self.kinds[&id];
        match kind {
            0 => assert_eq!(r.outputs, vec![Value::Int(i + 1)]),
            1 => assert!(r.outputs[0].as_double().is_some_and(|s| s >= 0.0)),
            _ => {
                let c = r.outputs[0].as_array().and_then(|a| a.to_f64()).unwrap();
                assert!(c.iter().all(|x| *x == 24.0), "wrong product");
            }
        }
    }
}

/// Runs `total` mixed calls, `window` in flight, calling `at(done)` after each completion;
/// returns the failures.
fn batch(c: &Client, total: i64, window: i64, mut at: impl FnMut(i64)) -> Vec<String> {
    let mut mix = Mix::new(c);
    let mut failures = Vec::new();
    let (mut sent, mut done) = (0, 0);
    while sent < window.min(total) {
        mix.submit(c, sent);
        sent += 1;
    }
    while done < total {
        match c.wait_any() {
            Ok((id, r)) => mix.check(id, &r),
            Err(e) => failures.push(e.to_string()),
        }
        done += 1;
        at(done);
        if sent < total {
            mix.submit(c, sent);
            sent += 1;
        }
    }
    failures
}

#[test]
fn a_server_killed_and_restarted_during_a_batch_loses_no_call() {
    let _one = serial();
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    for name in ["s1", "s2", "s3"] {
        g.server(name, "calibrate = false\nslots = 2\n");
    }
    g.wait_up(3);
    let c = g.client();
    let failures = batch(&c, 600, 24, |done| {
        if done == 150 {
            g.servers[1].kill();
        }
        if done == 350 {
            g.restart_server(1).unwrap();
        }
    });
    assert!(failures.is_empty(), "{failures:#?}\n{}", g.logs());
    // The restarted server took its name back and gets calls again.
    assert!(eventually(Duration::from_secs(20), || {
        c.status()
            .unwrap()
            .servers
            .iter()
            .any(|s| s.name == "s2" && s.addr == g.servers[1].addr)
    }));
}

#[test]
fn calls_ride_out_an_agent_restart() {
    let _one = serial();
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    for name in ["s1", "s2"] {
        g.server(name, "calibrate = false\nslots = 2\n");
    }
    g.wait_up(2);
    let c = g.client();
    let failures = batch(&c, 400, 16, |done| {
        if done == 100 {
            g.restart_agent().unwrap();
        }
    });
    assert!(failures.is_empty(), "{failures:#?}\n{}", g.logs());
}

fn graph_grid() -> Grid {
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    for name in ["s1", "s2", "s3"] {
        g.server(name, GRAPH_SERVER);
    }
    g.wait_up(3);
    g
}

/// What a graph run in the background gives back: the outputs of its fetched call, and each
/// call's record.
type Ran = (Option<Vec<Value>>, Vec<gridwise_client::CallRecord>);

/// Records a graph with `record` (which returns the call to fetch) and runs it on a thread of
/// its own; the result arrives on the returned channel.
fn run_in_background(
    g: &Grid,
    record: impl FnOnce(&mut gridwise_client::BlockingGraph<'_>) -> gridwise_client::CallRef
    + Send
    + 'static,
) -> std::sync::mpsc::Receiver<Result<Ran, gridwise_client::GrpcError>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let cfg = g.client_config();
    std::thread::spawn(move || {
        let c = Client::connect(cfg).unwrap();
        let mut graph = c.graph();
        let last = record(&mut graph);
        graph.fetch(last);
        let _ = tx.send(
            graph
                .run()
                .map(|r| (r.outputs(last).map(|o| o.to_vec()), r.calls)),
        );
    });
    rx
}

/// Waits for a background graph, failing with the grid's logs.
fn finished(
    g: &Grid,
    rx: std::sync::mpsc::Receiver<Result<Ran, gridwise_client::GrpcError>>,
) -> Ran {
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the graph hung")
        .unwrap_or_else(|e| panic!("{e}\n{}", g.logs()))
}

#[test]
fn a_graph_rides_out_an_agent_restart() {
    let _one = serial();
    let mut g = graph_grid();
    let c = g.client();
    let rx = run_in_background(&g, |graph| {
        let mut last = graph.call_named("first", "make", vec![100.into()]);
        for i in 0..3 {
            last = graph.call_named(
                &format!("step{i}"),
                "step",
                vec![100.into(), last.output(0)],
            );
        }
        last
    });
    // Restart the agent while the chain runs.
    assert!(eventually(Duration::from_secs(20), || c
        .status()
        .map(|s| s.servers.iter().any(|x| x.load.running > 0))
        .unwrap_or(false)));
    g.restart_agent().unwrap();
    let (out, calls) = finished(&g, rx);
    let out = out.expect("the last step's outputs come back");
    assert_eq!(out[0], Value::vector_f64(&[0.0; 100]));
    assert_eq!(calls.len(), 4);
}

#[test]
fn a_graph_remakes_values_lost_with_their_server() {
    let _one = serial();
    let mut g = graph_grid();
    let c = g.client();
    let rx = run_in_background(&g, |graph| {
        let a = graph.call_named("a", "make", vec![100.into()]);
        let b = graph.call_named("b", "slow", vec![100.into()]);
        graph.call_named("join", "join", vec![100.into(), a.output(0), b.output(0)])
    });
    // `a` finished at once and its output waits on its server for `b` (3 s): kill that
    // server. Its value is gone; the graph must make it again.
    let mut holder = None;
    assert!(
        eventually(Duration::from_secs(20), || {
            holder = g
                .servers
                .iter()
                .position(|s| c.ping(&s.addr).map(|p| p.held_values > 0).unwrap_or(false));
            holder.is_some()
        }),
        "no server ever held a's output"
    );
    g.servers[holder.unwrap()].kill();
    let (out, calls) = finished(&g, rx);
    assert_eq!(
        out.expect("join's outputs")[0],
        Value::vector_f64(&[0.0; 100])
    );
    let a = calls.iter().find(|r| r.name == "a").unwrap();
    assert!(a.fell_back, "a was not made again: {a:?}");
    assert_ne!(a.server, g.names[holder.unwrap()]);
}
