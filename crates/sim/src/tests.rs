//! Scenario checks, the simulation against the replay, hand-computed load effects, bounds.

use crate::*;
use gridwise_sched::MapByPolicy;
use gridwise_sched::{Mapping, replay};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Two classes with crossing speed functions (one with 2 slots), a link override, no load.
fn base(workload: Value) -> Value {
    json!({
        "services": {
            "potrf": { "complexity": "n^3/3", "output_bytes": "16*n^2" },
            "trsm": { "complexity": "n^3" },
            "syrk": { "complexity": "n^3" },
            "gemm": { "complexity": "2*n^3", "output_bytes": "8*n^2" },
            "x": { "complexity": "1e6*m", "param": "m" }
        },
        "servers": [
            { "name": "a", "count": 3, "speeds": {
                "potrf": [[10, 1e8], [100, 1e9]], "trsm": [[10, 2e8], [100, 8e8]],
                "syrk": [[10, 2e8], [100, 8e8]], "gemm": [[10, 3e8], [100, 6e8]],
                "x": [[1, 5e8], [50, 1e9], [100, 2e8]] } },
            { "name": "b", "count": 2, "slots": 2, "speeds": {
                "trsm": [[10, 5e7], [100, 2e9]], "syrk": [[10, 5e7], [100, 2e9]],
                "gemm": [[10, 5e7], [100, 3e9]], "x": [[1, 1e8], [100, 1.5e9]] } }
        ],
        "links": { "latency_s": 1e-3, "bandwidth": 1e8,
                   "classes": [{ "from": "a", "to": "b", "latency_s": 5e-3, "bandwidth": 2e7 }] },
        "workload": workload
    })
}

fn parse(v: &Value) -> Result<Scenario, ScenarioError> {
    Scenario::parse(&v.to_string())
}

fn built(v: &Value) -> (Platform, Workload) {
    let s = parse(v).unwrap();
    (s.platform().unwrap(), s.workload().unwrap())
}

fn err(v: &Value) -> String {
    parse(v).unwrap_err().to_string()
}

fn cholesky() -> Value {
    base(json!({ "kind": "cholesky", "tiles": 5, "tile": 64 }))
}

fn layered(seed: u64) -> Value {
    base(
        json!({ "kind": "layered", "tasks": 120, "width": 12, "edge_prob": 0.2,
                 "services": ["x", "gemm"], "sizes": [5, 100], "seed": seed }),
    )
}

/// Policies that map DAGs.
const DAG_POLICIES: [GraphPolicy; 6] = [
    GraphPolicy::Heft,
    GraphPolicy::MinMin,
    GraphPolicy::Mct,
    GraphPolicy::Sufferage,
    GraphPolicy::RoundRobin,
    GraphPolicy::ConstantSpeed,
];

/// Simulates `mapping` and checks it equals the replay on the true ETC to the bit.
fn assert_equals_replay(p: &Platform, w: &Workload, mapping: &Mapping) {
    let etc = p.true_etc(w);
    let r = replay(&w.graph, &etc, &p.comm(), mapping).unwrap();
    let s = simulate(p, w, mapping).unwrap();
    assert_eq!(s.makespan_s, r.makespan_s);
    assert_eq!(s.task_finish, r.task_finish);
    assert_eq!(s.per_server, r.per_server);
}

#[test]
fn unknown_fields_are_rejected_with_their_name() {
    let mut v = cholesky();
    v["servers"][0]["spedds"] = json!({});
    assert!(err(&v).contains("unknown field `spedds`"), "{}", err(&v));
    let mut v = cholesky();
    v["workload"]["tile_size"] = json!(3);
    assert!(err(&v).contains("tile_size"), "{}", err(&v));
    let mut v = cholesky();
    v["colour"] = json!("blue");
    assert!(err(&v).contains("colour"), "{}", err(&v));
    let mut v = cholesky();
    v["workload"]["kind"] = json!("fft");
    assert!(err(&v).contains("fft"), "{}", err(&v));
    let mut v = layered(1);
    v["workload"]["sizes"] = json!("big");
    assert!(err(&v).contains("[lo, hi]"), "{}", err(&v));
}

#[test]
fn unknown_services_are_named_where_they_are_used() {
    let v = base(json!({ "kind": "bag", "tasks": 3, "services": ["dgemm"], "sizes": 10 }));
    let e = err(&v);
    assert!(
        e.contains("workload.services[0]") && e.contains("\"dgemm\" is not declared"),
        "{e}"
    );
    // Declared but offered by no class.
    let mut v = cholesky();
    v["services"]["fft"] = json!({ "complexity": "n" });
    v["workload"] =
        json!({ "kind": "tasks", "tasks": [{ "name": "f", "service": "fft", "size": 4 }] });
    assert!(
        err(&v).contains("no server class offers service \"fft\""),
        "{}",
        err(&v)
    );
    // A speed function for an undeclared service.
    let mut v = cholesky();
    v["servers"][1]["speeds"]["fft"] = json!([[1, 1]]);
    let e = err(&v);
    assert!(
        e.contains("servers[1].speeds.fft") && e.contains("not declared"),
        "{e}"
    );
    // Cholesky needs its four services.
    let mut v = cholesky();
    v["services"].as_object_mut().unwrap().remove("syrk");
    for c in 0..2 {
        v["servers"][c]["speeds"]
            .as_object_mut()
            .unwrap()
            .remove("syrk");
    }
    assert!(err(&v).contains("(kind cholesky)"), "{}", err(&v));
}

#[test]
fn bad_speed_points_traces_and_links_are_explained() {
    let cases = [
        (
            "/servers/0/speeds/x",
            json!([[50, 1e9], [10, 2e9]]),
            "strictly increasing",
        ),
        ("/servers/0/speeds/x", json!([[50, -1.0]]), ">= 0"),
        ("/servers/0/speeds/x", json!([]), "at least one"),
        (
            "/servers/0/speeds/x",
            json!([[1, 0], [9, 0]]),
            "no size fits",
        ),
        (
            "/servers/1/load",
            json!([[0, 0.5], [0, 1]]),
            "strictly increasing",
        ),
        ("/servers/1/load", json!([[3, 0]]), "(0, 1]"),
        ("/servers/1/slots", json!(0), "slots is 0"),
        ("/servers/1/name", json!("a"), "declared twice"),
        ("/links/bandwidth", json!(0), "bandwidth > 0"),
        (
            "/links/classes/0/to",
            json!("c"),
            "no server class is named \"c\"",
        ),
        ("/services/x/complexity", json!("m^("), "does not parse"),
        ("/services/x/complexity", json!("n^2"), "`n`"),
    ];
    for (path, value, msg) in cases {
        let mut v = cholesky();
        set(&mut v, path, value);
        let e = err(&v);
        assert!(e.contains(msg), "{path}: {e}");
    }
}

/// Sets the value at a JSON pointer, creating missing object keys on the way.
fn set(v: &mut Value, pointer: &str, value: Value) {
    let mut at = v;
    for key in pointer.split('/').skip(1) {
        at = match at {
            Value::Array(a) => &mut a[key.parse::<usize>().unwrap()],
            other => &mut other[key],
        };
    }
    *at = value;
}

#[test]
fn bad_workloads_are_explained() {
    let tasks = |list: Value| base(json!({ "kind": "tasks", "tasks": list }));
    let e = err(&tasks(json!([
        { "name": "a", "service": "x", "size": 1, "after": ["b"] },
        { "name": "b", "service": "x", "size": 1, "after": ["a"] }
    ])));
    assert!(e.contains("cycle") && e.contains("a -> b -> a"), "{e}");
    let e = err(&tasks(
        json!([{ "name": "a", "service": "x", "size": 1, "after": ["z"] }]),
    ));
    assert!(e.contains("\"z\", which is not in the list"), "{e}");
    let e = err(&tasks(json!([
        { "name": "a", "service": "x", "size": 1 },
        { "name": "a", "service": "x", "size": 2 }
    ])));
    assert!(e.contains("listed twice"), "{e}");
    let mut v = layered(1);
    v["workload"]["sizes"] = json!([9, 3]);
    assert!(err(&v).contains("low end is above"), "{}", err(&v));
    v["workload"]["sizes"] = json!({ "one_of": [] });
    assert!(err(&v).contains("one_of is empty"), "{}", err(&v));
    v["workload"]["edge_prob"] = json!(1.5);
    assert!(err(&v).contains("edge_prob"), "{}", err(&v));
    // A complexity that goes negative at a size fails when the workload is built.
    let mut v = base(json!({ "kind": "bag", "tasks": 2, "services": ["x"], "sizes": 3 }));
    v["services"]["x"]["complexity"] = json!("m-5");
    let e = parse(&v).unwrap().workload().unwrap_err().to_string();
    assert!(e.contains("services.x.complexity at size 3"), "{e}");
}

#[test]
fn load_reports_the_file_and_defaults_the_name() {
    let dir = std::env::temp_dir().join(format!("gridwise-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("chol.json");
    std::fs::write(&path, cholesky().to_string()).unwrap();
    assert_eq!(Scenario::load(&path).unwrap().display_name(), "chol");
    std::fs::write(&path, "{\"services\": 3}").unwrap();
    let e = Scenario::load(&path).unwrap_err().to_string();
    assert!(e.starts_with(&path.display().to_string()), "{e}");
    let e = Scenario::load(dir.join("missing.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read scenario"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn workloads_are_built_as_specified() {
    let (p, w) = built(&cholesky());
    assert_eq!(p.names(), ["a-0", "a-1", "a-2", "b-0", "b-1"]);
    assert_eq!(p.slots(), [1, 1, 1, 2, 2]);
    // 5 potrf + 10 trsm + 10 syrk + 10 gemm.
    assert_eq!(w.len(), 35);
    assert!(w.sizes.iter().all(|&s| s == 64.0));
    let potrf = w.graph.task(0);
    assert_eq!(
        (potrf.service.as_str(), potrf.work),
        ("potrf", 64f64.powi(3) / 3.0)
    );
    // potrf and gemm declare output bytes; trsm and syrk do not, so their edges keep the
    // generator's tile of doubles.
    for (a, _, bytes) in w.graph.edges() {
        let expect = match w.graph.task(a).service.as_str() {
            "potrf" => 16 * 64 * 64,
            "gemm" => 8 * 64 * 64,
            _ => 64 * 64 * 8,
        };
        assert_eq!(bytes, expect);
    }
    // Same seed, same graph; services round robin; sizes in range.
    let (_, w1) = built(&layered(3));
    let (_, w2) = built(&layered(3));
    assert_eq!(w1.sizes, w2.sizes);
    assert_eq!(
        w1.graph.edges().collect::<Vec<_>>(),
        w2.graph.edges().collect::<Vec<_>>()
    );
    assert!(w1.sizes.iter().all(|&s| (5.0..=100.0).contains(&s)));
    assert_eq!(w1.graph.task(1).service, "gemm");
    assert_ne!(built(&layered(4)).1.sizes, w1.sizes);
    let (_, h) = built(
        &base(json!({ "kind": "hydropad", "iterations": 2, "size": 16 })).tap(|v| {
            for s in ["init", "gravity", "darkmatter", "barmatter"] {
                v["services"][s] = json!({ "complexity": "n^3" });
                v["servers"][0]["speeds"][s] = json!([[1, 1e9]]);
            }
        }),
    );
    assert_eq!(h.len(), 7);
}

/// `Value::tap`: edit a value in place and return it (keeps the JSON tests declarative).
trait Tap: Sized {
    fn tap(self, f: impl FnOnce(&mut Self)) -> Self;
}

impl Tap for Value {
    fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }
}

#[test]
fn true_etc_divides_complexity_by_speed_and_marks_what_cannot_run() {
    let v = base(json!({ "kind": "tasks", "tasks": [
        { "name": "p", "service": "potrf", "size": 100 },
        { "name": "x", "service": "x", "size": 50 },
        { "name": "huge", "service": "x", "size": 200 }
    ]}))
    .tap(|v| v["servers"][1]["speeds"]["x"] = json!([[1, 1e8], [100, 1.5e9], [150, 0]]));
    let (p, w) = built(&v);
    let etc = p.true_etc(&w);
    assert_eq!(etc.get(0, 0), 1e6 / 3.0 / 1e9);
    assert!(!etc.feasible(0, 3), "class b offers no potrf");
    assert_eq!(etc.get(1, 1), 50e6 / 1e9);
    assert_eq!(etc.get(1, 4), 50e6 / p.speed(4, "x").unwrap().speed(50.0));
    assert!(!etc.feasible(2, 3), "speed 0 at size 200: does not fit");
    assert_eq!(etc.get(2, 0), 200e6 / 2e8);
    assert_eq!(etc.all_slots(), [1, 1, 1, 2, 2]);
    // One benchmark rate per server: first service by name (gemm) at mid-range size.
    assert_eq!(p.rates(None), [4.5e8, 4.5e8, 4.5e8, 1.525e9, 1.525e9]);
    assert_eq!(p.rates(Some(10.0))[0], 3e8);
}

#[test]
fn unloaded_simulation_equals_replay_on_cholesky_and_layered() {
    for v in [cholesky(), layered(1), layered(2)] {
        let (p, w) = built(&v);
        let sim = Simulation::new(&p, &w).unwrap();
        for policy in DAG_POLICIES {
            let out = sim.run_full(policy).unwrap();
            assert_equals_replay(&p, &w, &out.mapping);
            assert_eq!(
                out.report.makespan_s, out.report.predicted_makespan_s,
                "{policy}"
            );
            assert!(out.report.makespan_s >= out.report.lower_bound_s * (1.0 - 1e-12));
            assert_eq!(out.report.events, 2 * w.len());
        }
    }
}

#[test]
fn one_server_runs_everything_back_to_back() {
    let v = layered(5).tap(|v| {
        v["servers"] =
            json!([{ "name": "solo", "speeds": { "x": [[1, 1e9]], "gemm": [[1, 2e9]] } }]);
        v["links"] = json!({});
    });
    let (p, w) = built(&v);
    assert_eq!(p.names(), ["solo"]);
    let total: f64 = (0..w.len()).map(|t| p.exec_s(&w, t, 0)).sum();
    for policy in [GraphPolicy::Heft, GraphPolicy::Mct] {
        let r = run(&p, &w, policy).unwrap();
        assert!(
            (r.makespan_s - total).abs() <= 1e-9 * total,
            "{policy}: {} vs {total}",
            r.makespan_s
        );
        assert!((r.utilisation - 1.0).abs() < 1e-9);
    }
}

#[test]
fn half_availability_stretches_the_task_by_hand() {
    // One server at 1 op/s; a = 10 ops, then b = 4 ops after it. From t = 2 the server runs at
    // half speed: a does 2 ops by t = 2 and the other 8 in 16 s (ends at 18); b needs 8 s.
    let v = json!({
        "services": { "s": { "complexity": "n" } },
        "servers": [{ "name": "one", "speeds": { "s": [[1, 1]] }, "load": [[2, 0.5]] }],
        "workload": { "kind": "tasks", "tasks": [
            { "name": "a", "service": "s", "size": 10 },
            { "name": "b", "service": "s", "size": 4, "after": ["a"] }
        ]}
    });
    let (p, w) = built(&v);
    let out = Simulation::new(&p, &w)
        .unwrap()
        .run_full(GraphPolicy::Heft)
        .unwrap();
    assert_eq!(out.actual.task_finish, [18.0, 26.0]);
    assert_eq!(out.report.makespan_s, 26.0);
    assert_eq!(out.report.predicted_makespan_s, 14.0);
    assert!((out.report.lower_bound_s - 14.0).abs() < 1e-9);
}

#[test]
fn unlimited_servers_reach_the_critical_path() {
    // A chain and a fan of independent tasks on as many identical servers as tasks, free links.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let after: Vec<String> = if i > 0 {
            vec![format!("c{}", i - 1)]
        } else {
            vec![]
        };
        tasks.push(json!({ "name": format!("c{i}"), "service": "x", "size": 10 * (i + 1), "after": after }));
    }
    for i in 0..6 {
        tasks.push(json!({ "name": format!("f{i}"), "service": "x", "size": 7 * (i + 1) }));
    }
    let v = base(json!({ "kind": "tasks", "tasks": tasks })).tap(|v| {
        v["servers"] = json!([{ "name": "u", "count": 12, "speeds": { "x": [[1, 1e9]] } }]);
        v["links"] = json!({ "latency_s": 0, "bandwidth": 1e12 });
    });
    let (p, w) = built(&v);
    let chain: f64 = (1..=6).map(|i| 10.0 * i as f64 * 1e6 / 1e9).sum();
    for policy in [GraphPolicy::Heft, GraphPolicy::Mct, GraphPolicy::MinMin] {
        let r = run(&p, &w, policy).unwrap();
        assert!((r.critical_path_s - chain).abs() < 1e-12);
        assert!(
            (r.makespan_s - chain).abs() < 1e-12,
            "{policy}: {}",
            r.makespan_s
        );
    }
}

#[test]
fn bags_default_to_lp_with_its_bound_and_dags_to_best_of() {
    let v = base(
        json!({ "kind": "bag", "tasks": 200, "services": ["x", "gemm"],
                        "sizes": { "one_of": [5, 40, 90] }, "seed": 9 }),
    );
    let (p, w) = built(&v);
    let sim = Simulation::new(&p, &w).unwrap();
    assert_eq!(sim.default_policy(), GraphPolicy::Lp);
    let r = sim.run(GraphPolicy::Lp).unwrap();
    let lp = r.lp_bound_s.unwrap();
    assert!(r.lower_bound_s >= lp && r.makespan_s >= lp * (1.0 - 1e-9));
    assert!(r.makespan_s <= 1.5 * lp, "{} vs {lp}", r.makespan_s);
    let (p, w) = built(&cholesky());
    let sim = Simulation::new(&p, &w).unwrap();
    assert_eq!(sim.default_policy(), GraphPolicy::BestOf);
    assert!(!sim.applies(GraphPolicy::Lp));
    let e = sim.run(GraphPolicy::Lp).unwrap_err().to_string();
    assert!(e.contains("use heft"), "{e}");
}

#[test]
fn lp_on_a_huge_bag_is_refused_not_attempted() {
    let v = json!({
        "services": { "s": { "complexity": "n" } },
        "servers": [{ "name": "s", "count": 1000, "speeds": { "s": [[1, 1e9]] } }],
        "workload": { "kind": "bag", "tasks": MAX_LP_CELLS / 1000 + 1, "services": ["s"], "sizes": [1, 1000] }
    });
    let (p, w) = built(&v);
    let sim = Simulation::new(&p, &w).unwrap();
    assert_eq!(sim.default_policy(), GraphPolicy::Heft);
    assert!(!sim.applies(GraphPolicy::Lp));
    let e = sim.map(GraphPolicy::Lp).unwrap_err();
    assert!(
        matches!(e, SimError::LpTooLarge { servers: 1000, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("use heft or mct"), "{e}");
    assert_eq!(sim.lp_bound_s(), None);
}

#[test]
fn broken_mappings_are_reported() {
    let v = base(json!({ "kind": "tasks", "tasks": [
        { "name": "a", "service": "potrf", "size": 10 },
        { "name": "b", "service": "x", "size": 10, "after": ["a"] }
    ]}));
    let (p, w) = built(&v);
    // b before a on one server: a deadlock.
    let m = Mapping {
        server_of: vec![0, 0],
        order: vec![vec![1, 0], vec![], vec![], vec![], vec![]],
    };
    let e = simulate(&p, &w, &m).unwrap_err();
    assert_eq!(
        e,
        EngineError::Deadlock {
            server: "a-0".into(),
            task: "b".into(),
            waits_for: "a".into()
        }
    );
    // potrf on class b, which does not offer it.
    let m = Mapping {
        server_of: vec![3, 0],
        order: vec![vec![1], vec![], vec![], vec![0], vec![]],
    };
    assert!(matches!(
        simulate(&p, &w, &m),
        Err(EngineError::Infeasible { .. })
    ));
    let m = Mapping {
        server_of: vec![0, 0],
        order: vec![vec![0], vec![], vec![], vec![], vec![]],
    };
    assert!(
        simulate(&p, &w, &m)
            .unwrap_err()
            .to_string()
            .contains("on no server")
    );
}

#[test]
fn example_scenarios_parse_and_the_small_ones_run() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sim");
    for name in ["small", "crossing-bag", "large"] {
        let s = Scenario::load(dir.join(format!("{name}.json"))).unwrap();
        assert_eq!(s.display_name(), name);
        if name == "large" {
            assert_eq!(s.platform().unwrap().servers(), 1000);
            continue;
        }
        let (p, w) = (s.platform().unwrap(), s.workload().unwrap());
        let sim = Simulation::new(&p, &w).unwrap();
        let r = sim.run(sim.default_policy()).unwrap();
        assert!(r.makespan_s >= r.predicted_makespan_s && r.makespan_s >= r.lower_bound_s);
    }
}

/// A random layered DAG and platform: 1–3 classes, 1–3 slots, optional load traces.
fn random_scenario(seed: u64, classes: usize, slots: usize, loaded: bool) -> Value {
    let mut v = layered(seed);
    v["workload"]["tasks"] = json!(10 + seed % 70);
    v["workload"]["width"] = json!(1 + seed % 9);
    let mut list = Vec::new();
    for k in 0..classes {
        let f = 1.0 + k as f64;
        let mut c = json!({ "name": format!("c{k}"), "count": 1 + (seed as usize + k) % 3,
            "slots": 1 + (k + slots) % 3, "speeds": {
                "x": [[1, 1e8 * f], [50, 1e9 / f], [100, 3e8 * f]],
                "gemm": [[5, 2e8 / f], [100, 9e8 * f]] } });
        if loaded {
            c["load"] = json!([[0.01 * f, 0.3 + 0.2 * k as f64], [0.5 * f, 1.0], [2.0, 0.7]]);
        }
        list.push(c);
    }
    v["servers"] = json!(list);
    v["links"]["classes"] = json!([]);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn unloaded_simulation_is_the_replay(seed in 0u64..10_000, classes in 1usize..4,
                                         slots in 0usize..3, pick in 0usize..6) {
        let (p, w) = built(&random_scenario(seed, classes, slots, false));
        let rates = p.rates(None);
        let m = DAG_POLICIES[pick].map(&w.graph, &p.true_etc(&w), &p.comm(), Some(&rates)).unwrap();
        assert_equals_replay(&p, &w, &m);
    }

    #[test]
    fn load_only_ever_delays(seed in 0u64..10_000, classes in 1usize..4,
                             slots in 0usize..3, pick in 0usize..6) {
        let (p, w) = built(&random_scenario(seed, classes, slots, true));
        let etc = p.true_etc(&w);
        let rates = p.rates(None);
        let m = DAG_POLICIES[pick].map(&w.graph, &etc, &p.comm(), Some(&rates)).unwrap();
        let r = replay(&w.graph, &etc, &p.comm(), &m).unwrap();
        let s = simulate(&p, &w, &m).unwrap();
        for (a, b) in s.task_finish.iter().zip(&r.task_finish) {
            // Up to rounding: integrating a trace step by step is not the replay's one addition.
            prop_assert!(*a >= b * (1.0 - 1e-12), "simulated {} before predicted {}", a, b);
        }
        prop_assert!(s.makespan_s >= r.makespan_s * (1.0 - 1e-12));
        prop_assert_eq!(s.events, 2 * w.len());
    }
}
