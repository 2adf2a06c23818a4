//! Task graphs run for real: the agent maps the whole graph, data moves server to server as
//! kept values, only the fetched outputs come back, and the servers end up holding nothing.

use gridwise_client::{Client, GraphArg};
use gridwise_e2e::{Grid, eventually};
use gridwise_proto::GraphPolicy;
use gridwise_proto::{ErrorCode, Value};
use std::time::Duration;

fn m(rows: u64, cols: u64, v: &[f64]) -> Value {
    Value::matrix_f64(rows, cols, v)
}

fn dgemm(n: i64, a: GraphArg, b: GraphArg) -> Vec<GraphArg> {
    vec![n.into(), n.into(), n.into(), a, b]
}

fn held(g: &Grid, c: &Client) -> u64 {
    g.servers
        .iter()
        .map(|s| c.ping(&s.addr).unwrap().held_values)
        .sum()
}

fn no_pending(c: &Client) -> bool {
    c.status().unwrap().servers.iter().all(|s| s.pending == 0)
}

#[test]
fn a_diamond_runs_server_to_server_and_frees_what_it_no_longer_needs() {
    let g = Grid::two_servers();
    let c = g.client();
    let a = m(2, 2, &[1., 2., 3., 4.]);
    let swap = m(2, 2, &[0., 1., 1., 0.]);
    let id = m(2, 2, &[1., 0., 0., 1.]);

    let mut graph = c.graph();
    // top = A·S; left = top·I; right = top·S; bottom = left·right.
    let top = graph.call_named("top", "dgemm", dgemm(2, a.into(), swap.clone().into()));
    let left = graph.call_named("left", "dgemm", dgemm(2, top.output(0), id.into()));
    let right = graph.call_named("right", "dgemm", dgemm(2, top.output(0), swap.into()));
    let bottom = graph.call_named("bottom", "dgemm", dgemm(2, left.output(0), right.output(0)));
    graph.policy("round-robin"); // spread the calls so that data has to move
    let run = graph.run().unwrap();

    // A·S = [[2,1],[4,3]]; left = the same; right = [[1,2],[3,4]];
    // bottom = [[2,1],[4,3]]·[[1,2],[3,4]] = [[5,8],[13,20]].
    let out = run
        .outputs(bottom)
        .expect("the sink's outputs come back by default");
    assert_eq!(out[0], m(2, 2, &[5., 8., 13., 20.]));
    for other in [top, left, right] {
        assert!(
            run.outputs(other).is_none(),
            "intermediate outputs stay on the servers"
        );
    }
    assert_eq!(run.plan.policy, GraphPolicy::RoundRobin);
    let servers: std::collections::HashSet<&str> =
        run.calls.iter().map(|r| r.server.as_str()).collect();
    assert_eq!(
        servers.len(),
        2,
        "round-robin used both servers: {:?}",
        run.calls
    );
    assert!(run.calls.iter().all(|r| !r.fell_back));
    for (i, r) in run.calls.iter().enumerate() {
        let planned = &run.plan.servers[run.plan.server_of[i] as usize].name;
        assert_eq!(&r.server, planned, "call {} ran where planned", r.name);
        assert!(r.end_s >= r.start_s && r.end_s <= run.makespan_s + 1e-3);
    }
    // bottom starts only after both its inputs exist.
    assert!(run.calls[3].start_s >= run.calls[1].end_s.min(run.calls[2].end_s));
    // top, left and right were kept (one output each) and freed; bottom came straight back.
    assert_eq!(run.freed, 3);
    assert_eq!(held(&g, &c), 0);
    assert!(
        eventually(Duration::from_secs(10), || no_pending(&c)),
        "every reservation is cleared by the servers' reports"
    );
}

#[test]
fn fetch_chooses_the_outputs_and_plan_runs_nothing() {
    let g = Grid::two_servers();
    let c = g.client();
    let mut graph = c.graph();
    let x = graph.call(
        "dgemm",
        dgemm(1, m(1, 1, &[3.]).into(), m(1, 1, &[4.]).into()),
    );
    let y = graph.call("dgemm", dgemm(1, x.output(0), m(1, 1, &[2.]).into()));
    graph.fetch(x);
    let plan = graph.plan().unwrap();
    assert_eq!(
        plan.policy,
        GraphPolicy::BestOf,
        "a graph with a dependency defaults to best-of"
    );
    assert!(plan.tickets.is_empty(), "planning reserves nothing");
    assert!(plan.makespan_s >= 0.0 && plan.end_s.len() == 2);
    let run = graph.run().unwrap();
    assert_eq!(run.outputs(x).unwrap()[0], m(1, 1, &[12.]));
    assert!(run.outputs(y).is_none(), "only fetched calls come back");
    // x was kept for y and fetched, then freed; y's unwanted output was kept and freed.
    assert_eq!(run.freed, 2);
    assert_eq!(held(&g, &c), 0);
}

#[test]
fn bad_graphs_are_refused_before_anything_runs() {
    let g = Grid::two_servers();
    let c = g.client();

    let mut graph = c.graph();
    let x = graph.call(
        "dgemm",
        dgemm(2, m(2, 2, &[0.; 4]).into(), m(2, 2, &[0.; 4]).into()),
    );
    graph.call("dgemm", dgemm(3, x.output(0), m(3, 3, &[0.; 9]).into()));
    let e = graph.run().unwrap_err();
    assert!(
        e.message.contains("must be matrix<f64>[3,3]") && e.message.contains("[2,2]"),
        "{e}"
    );

    let mut graph = c.graph();
    let x = graph.call("add", vec![1i64.into()]);
    graph.call(
        "dgemm",
        vec![
            x.output(0),
            1i64.into(),
            1i64.into(),
            m(1, 1, &[1.]).into(),
            m(1, 1, &[1.]).into(),
        ],
    );
    let e = graph.run().unwrap_err();
    assert!(e.message.contains("is an int"), "{e}");

    let mut graph = c.graph();
    graph.call("nope", vec![]);
    let e = graph.run().unwrap_err();
    assert!(e.message.contains("nope"), "{e}");

    let mut graph = c.graph();
    graph.call("add", vec![1i64.into()]);
    graph.call("add", vec![2i64.into()]);
    graph.policy("fastest");
    let e = graph.run().unwrap_err();
    assert!(e.message.contains("unknown graph policy"), "{e}");

    assert!(c.graph().run().unwrap_err().message.contains("no calls"));
    assert!(no_pending(&c), "a refused graph reserves nothing");
}

#[test]
fn a_failing_call_fails_the_graph_and_leaves_nothing_behind() {
    let g = Grid::two_servers();
    let c = g.client();
    let mut graph = c.graph();
    let a = graph.call_named(
        "a",
        "dgemm",
        dgemm(1, m(1, 1, &[1.]).into(), m(1, 1, &[1.]).into()),
    );
    graph.call_named("boom", "fail", vec![Value::Str("on purpose".into()).into()]);
    graph.call_named("c", "dgemm", dgemm(1, a.output(0), m(1, 1, &[1.]).into()));
    let e = graph.run().unwrap_err();
    assert!(e.message.contains("graph call `boom` failed"), "{e}");
    assert_eq!(e.code, ErrorCode::SessionFailed);
    assert_eq!(held(&g, &c), 0, "kept values are freed on failure");
    assert!(
        eventually(Duration::from_secs(10), || no_pending(&c)),
        "unused reservations are released"
    );
}

/// The graph file path of `gridwise graph run`: the file's calls recorded through the client,
/// the agent's plan turned back into a prediction, and both timelines drawn.
#[test]
fn a_graph_file_runs_and_its_prediction_matches_the_plan() {
    use gridwise_charts::gantt;
    use gridwise_cli::graph::predict::{PolicySource, Prediction};
    use gridwise_cli::graph::run::actual_of;
    use gridwise_graphfile::{GraphFile, Rand, record};
    let g = Grid::two_servers();
    let c = g.client();
    let text = r#"{"tasks": [
        {"name": "a", "service": "dgemm", "args": [2, 2, 2, [[1,2],[3,4]], [[0,1],[1,0]]]},
        {"name": "b", "service": "dgemm", "args": [2, 2, 2, {"from": "a", "output": 0}, "[[1,0],[0,1]]"]},
        {"name": "x", "service": "add", "args": [41]}
      ], "outputs": ["b", "x"]}"#;
    let file = GraphFile::parse(text).unwrap();
    let (graph, refs) = record(&c, &file, None, Rand::Values).unwrap();
    let run = graph.run().unwrap();
    assert_eq!(run.outputs(refs[1]).unwrap()[0], m(2, 2, &[2., 1., 4., 3.]));
    assert_eq!(run.outputs(refs[2]).unwrap()[0], Value::Int(42));
    assert!(run.outputs(refs[0]).is_none());

    let pred = Prediction::of(run.plan.clone(), PolicySource::Default, &file).unwrap();
    assert_eq!(pred.plan.policy, GraphPolicy::BestOf);
    let planned = pred.timeline();
    assert_eq!(planned.makespan_s, run.plan.makespan_s);
    let actual = actual_of(&pred, &run);
    assert_eq!(actual.makespan_s, run.makespan_s);
    let placed: usize = actual.per_server.iter().map(Vec::len).sum();
    assert_eq!(placed, 3);
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("pair.svg");
    gantt::draw_pair(&planned, &actual, &svg, "g.json").unwrap();
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.contains("predicted makespan") && drawn.contains("actual run"),
        "both titles in the SVG: {}",
        drawn
    );
    assert_eq!(held(&g, &c), 0);
}

/// A server frees kept values nobody touches for `data_idle_ttl_s`; a running graph renews the
/// ones it still needs. Here `v`'s output waits 2.5 s for `w`, past a 1 s limit, and `j` still
/// gets it.
#[test]
fn a_running_graph_keeps_its_values_alive_past_the_idle_limit() {
    let mut g = Grid::agent(&gridwise_e2e::FAST_HEARTBEATS);
    g.server(
        "s1",
        r#"
slots = 2
calibrate = false
builtins = []
data_idle_ttl_s = 1.0
[[emulated]]
name = "fast"
output = true
speed = [[1, 1e12], [1000, 1e12]]
[[emulated]]
name = "slow"
output = true
speed = [[1, 4e5], [1000, 4e5]]
[[emulated]]
name = "join"
inputs = 2
output = true
speed = [[1, 1e12], [1000, 1e12]]
"#,
    );
    g.wait_up(1);
    let c = g.client();
    let n = || GraphArg::from(100i64);
    let mut graph = c.graph();
    let v = graph.call_named("v", "fast", vec![n()]);
    let w = graph.call_named("w", "slow", vec![n()]); // 100³ / 4e5 = 2.5 s
    let j = graph.call_named("j", "join", vec![n(), v.output(0), w.output(0)]);
    graph.fetch(j);
    let run = graph.run().unwrap_or_else(|e| panic!("{e}\n{}", g.logs()));
    let at = |name: &str| run.calls.iter().find(|r| r.name == name).unwrap();
    assert!(
        at("j").start_s - at("v").end_s > 1.5,
        "v's output should have waited past the limit: {:?}",
        run.calls
    );
    assert!(run.outputs(j).is_some());
    assert!(
        eventually(Duration::from_secs(10), || held(&g, &c) == 0),
        "{}",
        g.logs()
    );
}
