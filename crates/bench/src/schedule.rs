//! `gridwise bench schedule`: scheduling quality, run for real. Each scenario starts an agent
//! and emulated servers on loopback; the servers build their performance models with GBBP (the
//! agent never sees the emulation's true speed functions); then the scenario's graph runs
//! through the client's graph API `repeat` times per policy (`round_order`, `SETTLE`), and
//! the median measured makespan (`makespan_s`; every run's in `makespan_runs_s`) is set beside:
//!
//! - `oracle_makespan_s`: HEFT computed offline with the true speed functions (and the agent's
//!   default links), replayed — what a scheduler that knew everything would predict with HEFT;
//!   `oracle_default_makespan_s` the same for the default policy (`best-of` for DAGs);
//! - `lower_bound_s`: the best lower bound with the true speed functions
//!   (`gridwise_sched::best_lower_bound`, the same choice as `gridwise sim` and the agent's
//!   plans), `lower_bound_kind` which one it is (`lp`, `lp_window`, `critical_path`,
//!   `total_work`), `makespan_over_bound` the measured makespan ÷ it;
//! - `predicted_makespan_s`: what the agent predicted for the mapping it chose;
//! - `chain`: where the measured makespan went, along the run's critical chain ([`chain`]):
//!   kernels, and the gaps between them by what each call waited for.
//!
//! The summary line sets the default policy's measured makespan beside HEFT's
//! (`heft_makespan_s`, `default_over_heft`, with `heft_run_spread`, how far HEFT's own runs
//! spread) and beside the bound.
//!
//! Scenarios (seed 003 §5.3 and the issue): `hydropad` (two servers, one of which pages beyond
//! a size and cannot run the largest; size swept), `crossing` (8 servers whose speed functions
//! cross, 2,000 independent calls of mixed sizes), `cholesky` (a tiled Cholesky DAG of 560
//! tasks on 16 servers of 4 classes, data moving along the edges).

mod chain;

use anyhow::{Result, anyhow, bail};
use chain::Chain;
use gridwise_client::{Client, GraphArg};
use gridwise_kernels::{EmulatedKernel, EmulatedSpec, Kernel};
use gridwise_localgrid::{Launcher, LocalGrid};
use gridwise_localgrid::{wait_for_models, wait_for_servers};
use gridwise_proto::Value;
use gridwise_sched::MapByPolicy;
use gridwise_sched::graph::generate::SplitMix64;
use gridwise_sched::{
    CommModel, EtcMatrix, GraphPolicy, Task, TaskGraph, best_lower_bound, replay,
};
use serde_json::{Value as Json, json};
use std::time::Duration;

/// The agent's default link, used for the oracle too: loopback-like.
const LATENCY_S: f64 = 1e-4;
const BANDWIDTH: f64 = 1e9;

/// One emulated service: its complexity in `n`, its data inputs and whether it returns data.
struct Service {
    name: &'static str,
    complexity: &'static str,
    inputs: u32,
    output: bool,
}

/// Servers of one kind: `count` of them, each with a true speed function per service (scaled
/// by `1 + spread·i` for the i-th, so that no two are identical).
struct Class {
    name: &'static str,
    count: usize,
    speeds: Vec<(&'static str, Vec<[f64; 2]>)>,
    spread: f64,
}

/// One call of a scenario's graph.
struct Call {
    name: String,
    service: &'static str,
    size: i64,
    deps: Vec<usize>,
}

struct Scenario {
    name: &'static str,
    services: Vec<Service>,
    classes: Vec<Class>,
    /// GBBP range for every model: (min, max, stride).
    model_range: (i64, i64, i64),
    /// Problem sizes swept (one run of every policy per size).
    sizes: Vec<i64>,
    /// Whether to report `size` (the scenario sweeps one).
    sweeps: bool,
    calls: fn(i64, bool) -> Vec<Call>,
    /// Size every service calibrates at (its one "benchmark rate" for constant-speed).
    calibration_size: i64,
}

fn svc(name: &'static str, complexity: &'static str, inputs: u32, output: bool) -> Service {
    Service {
        name,
        complexity,
        inputs,
        output,
    }
}

fn hydropad() -> Scenario {
    let all = |fast: Vec<[f64; 2]>| {
        ["init", "gravity", "darkmatter", "barmatter"]
            .into_iter()
            .map(|s| (s, fast.clone()))
            .collect()
    };
    Scenario {
        name: "hydropad",
        services: vec![
            svc("init", "n^2", 0, true),
            svc("gravity", "2*n^2", 2, true),
            svc("darkmatter", "3*n^2", 2, true),
            svc("barmatter", "4*n^2", 2, true),
        ],
        classes: vec![
            // Fast until its memory runs out: pages from n = 700, cannot run from n = 950.
            Class {
                name: "fast",
                count: 1,
                speeds: all(vec![
                    [100.0, 4e7],
                    [600.0, 4e7],
                    [700.0, 3e6],
                    [900.0, 2e6],
                    [920.0, 0.0],
                ]),
                spread: 0.0,
            },
            // Slower, with memory for every size.
            Class {
                name: "big",
                count: 1,
                speeds: all(vec![[100.0, 1.2e7], [2000.0, 1.0e7]]),
                spread: 0.0,
            },
        ],
        model_range: (200, 1000, 50),
        sizes: vec![400, 600, 800, 1000],
        sweeps: true,
        calls: hydropad_calls,
        calibration_size: 200,
    }
}

/// init, then iterations of gravity → (darkmatter ∥ barmatter) (seed 003 Fig. 5.6).
fn hydropad_calls(n: i64, quick: bool) -> Vec<Call> {
    let iterations = if quick { 1 } else { 3 };
    let mut calls = vec![Call {
        name: "init".into(),
        service: "init",
        size: n,
        deps: vec![],
    }];
    let (mut dark, mut bar) = (0, 0);
    for it in 1..=iterations {
        let mut push = |name: &str, service, deps| {
            calls.push(Call {
                name: format!("{name}[{it}]"),
                service,
                size: n,
                deps,
            });
            calls.len() - 1
        };
        let deps = if dark == bar {
            vec![dark]
        } else {
            vec![dark, bar]
        };
        let g = push("gravity", "gravity", deps);
        let d = push("darkmatter", "darkmatter", vec![g, dark]);
        let b = push("barmatter", "barmatter", vec![g, bar]);
        (dark, bar) = (d, b);
    }
    calls
}

fn crossing() -> Scenario {
    Scenario {
        name: "crossing",
        services: vec![svc("solve", "n^2", 0, false)],
        classes: vec![
            // Fast for small sizes, slow for large…
            Class {
                name: "small",
                count: 4,
                speeds: vec![("solve", vec![[300.0, 9e6], [1000.0, 2.5e7]])],
                spread: 0.1,
            },
            // …and the reverse.
            Class {
                name: "large",
                count: 4,
                speeds: vec![("solve", vec![[300.0, 2.25e6], [1000.0, 1e8]])],
                spread: 0.1,
            },
        ],
        model_range: (300, 1000, 50),
        sizes: vec![0],
        sweeps: false,
        calls: crossing_calls,
        calibration_size: 300,
    }
}

/// 2,000 independent calls, sizes 300, 400, …, 1000 drawn at random.
fn crossing_calls(_: i64, quick: bool) -> Vec<Call> {
    let mut rng = SplitMix64::new(2000);
    let n = if quick { 40 } else { 2000 };
    (0..n)
        .map(|i| Call {
            name: format!("solve#{i}"),
            service: "solve",
            size: 300 + 100 * rng.below(8) as i64,
            deps: vec![],
        })
        .collect()
}

fn cholesky() -> Scenario {
    let class = |name, count, potrf: f64, trsm: f64, syrk: f64, gemm: f64| Class {
        name,
        count,
        speeds: [
            ("potrf", potrf),
            ("trsm", trsm),
            ("syrk", syrk),
            ("gemm", gemm),
        ]
        .into_iter()
        .map(|(s, r)| (s, vec![[100.0, 0.6 * r], [200.0, r], [300.0, 1.1 * r]]))
        .collect(),
        spread: 0.05,
    };
    Scenario {
        name: "cholesky",
        services: vec![
            svc("potrf", "n^3/3", 1, true),
            svc("trsm", "n^3", 2, true),
            svc("syrk", "n^3", 2, true),
            svc("gemm", "2*n^3", 3, true),
        ],
        classes: vec![
            class("cpu", 4, 3.3e8, 3.3e8, 3.3e8, 4e8),
            class("slow", 4, 1.3e8, 1.3e8, 1.3e8, 1.6e8),
            class("gpu", 4, 3.3e7, 2.7e8, 6.7e8, 1.3e9),
            class("old", 4, 1e8, 1e8, 1e8, 1e8),
        ],
        model_range: (100, 300, 25),
        sizes: vec![200],
        sweeps: false,
        calls: cholesky_calls,
        calibration_size: 200,
    }
}

/// Tiled right-looking Cholesky: for k: potrf(k); trsm(i,k); syrk(i,k); gemm(i,j,k); each
/// call depends on the last writer of every tile it reads or updates. 14 tiles: 560 calls.
fn cholesky_calls(b: i64, quick: bool) -> Vec<Call> {
    let tiles = if quick { 3 } else { 14 };
    let mut calls: Vec<Call> = Vec::new();
    let mut last: Vec<Option<usize>> = vec![None; tiles * tiles];
    let at = |i: usize, j: usize| i * tiles + j;
    let push = |calls: &mut Vec<Call>, name: String, service, reads: &[Option<usize>]| {
        let mut deps = Vec::new();
        for d in reads.iter().flatten() {
            if !deps.contains(d) {
                deps.push(*d);
            }
        }
        calls.push(Call {
            name,
            service,
            size: b,
            deps,
        });
        calls.len() - 1
    };
    for k in 0..tiles {
        let p = push(
            &mut calls,
            format!("potrf({k})"),
            "potrf",
            &[last[at(k, k)]],
        );
        last[at(k, k)] = Some(p);
        for i in k + 1..tiles {
            let t = push(
                &mut calls,
                format!("trsm({i},{k})"),
                "trsm",
                &[Some(p), last[at(i, k)]],
            );
            last[at(i, k)] = Some(t);
        }
        for i in k + 1..tiles {
            let s = push(
                &mut calls,
                format!("syrk({i},{k})"),
                "syrk",
                &[last[at(i, k)], last[at(i, i)]],
            );
            last[at(i, i)] = Some(s);
            for j in k + 1..i {
                let g = push(
                    &mut calls,
                    format!("gemm({i},{j},{k})"),
                    "gemm",
                    &[last[at(i, k)], last[at(j, k)], last[at(i, j)]],
                );
                last[at(i, j)] = Some(g);
            }
        }
    }
    calls
}

/// Every scenario by name, in the order they run.
pub const SCENARIOS: [&str; 3] = ["hydropad", "crossing", "cholesky"];

fn scenario(name: &str) -> Result<Scenario> {
    Ok(match name {
        "hydropad" => hydropad(),
        "crossing" => crossing(),
        "cholesky" => cholesky(),
        other => bail!(
            "unknown scenario `{other}`; expected one of {}",
            SCENARIOS.join(", ")
        ),
    })
}

/// The emulated services of the `i`-th server of `class`: the true speeds that the server's
/// config carries and only the oracle may read.
fn emulated(s: &Scenario, class: &Class, i: usize) -> Vec<EmulatedSpec> {
    let scale = 1.0 + class.spread * i as f64;
    s.services
        .iter()
        .filter_map(|service| {
            let (_, speed) = class.speeds.iter().find(|(n, _)| *n == service.name)?;
            Some(EmulatedSpec {
                name: service.name.to_string(),
                doc: String::new(),
                param: "n".into(),
                complexity: service.complexity.into(),
                speed: speed.iter().map(|p| [p[0], p[1] * scale]).collect(),
                calibration_size: Some(s.calibration_size),
                inputs: service.inputs,
                output: service.output,
                halo_bytes: 0,
            })
        })
        .collect()
}

/// A server's TOML config: its emulated services and a GBBP model to build for each.
fn server_toml(s: &Scenario, specs: &[EmulatedSpec]) -> Result<String> {
    #[derive(serde::Serialize)]
    struct Config<'a> {
        builtins: [&'a str; 0],
        slots: u32,
        emulated: &'a [EmulatedSpec],
    }
    let mut t = toml::to_string(&Config {
        builtins: [],
        slots: 1,
        emulated: specs,
    })?;
    let (lo, hi, stride) = s.model_range;
    for spec in specs {
        t.push_str(&format!(
            "\n[[models]]\nservice = \"{}\"\nmethod = \"gbbp\"\nfuzzy_max = true\n\
             params = [{{ name = \"n\", min = {lo}, max = {hi}, stride = {stride} }}]\n",
            spec.name
        ));
    }
    Ok(t)
}

/// The true compute time of every call on every server (servers in name order, as the agent
/// lists them), from the emulated kernels themselves: what only the oracle may know.
fn true_etc(calls: &[Call], servers: &[(String, Vec<EmulatedKernel>)]) -> Result<EtcMatrix> {
    let etc = EtcMatrix::from_fn(calls.len(), servers.len(), |t, s| {
        servers[s]
            .1
            .iter()
            .find(|k| k.desc().name == calls[t].service)
            .and_then(|k| k.true_time(calls[t].size))
            .unwrap_or(f64::INFINITY)
    })?;
    Ok(etc)
}

fn task_graph(calls: &[Call]) -> Result<TaskGraph> {
    let mut g = TaskGraph::new();
    for c in calls {
        g.add_task(Task::new(&c.name, c.service, 0.0));
    }
    for (i, c) in calls.iter().enumerate() {
        for &d in &c.deps {
            g.add_edge(d, i, (calls[d].size.max(0) as u64) * 8)?;
        }
    }
    Ok(g)
}

/// One scenario: start its grid, let the models build, run every applicable policy `repeat`
/// times per size (in rounds, each in another order), and report each policy's median run.
/// Each size's results go to `emit` once its rounds are done. `agent` and `server` say how to
/// start the daemons.
pub fn run_scenario(
    agent: &Launcher,
    server: Launcher,
    name: &str,
    quick: bool,
    repeat: usize,
    emit: &mut dyn FnMut(Json),
) -> Result<()> {
    anyhow::ensure!(repeat >= 1, "--repeat must be at least 1");
    let s = scenario(name)?;
    let hb = [
        "--heartbeat-interval-ms",
        "500",
        "--heartbeat-timeout-ms",
        "5000",
    ]
    .map(String::from);
    let mut grid = LocalGrid::start(agent, server, &hb)?;
    let mut servers: Vec<(String, Vec<EmulatedKernel>)> = Vec::new();
    let mut models = 0;
    for class in &s.classes {
        let count = if quick {
            class.count.min(2)
        } else {
            class.count
        };
        for i in 0..count {
            let sname = if class.count == 1 {
                class.name.to_string()
            } else {
                format!("{}-{i:02}", class.name)
            };
            let specs = emulated(&s, class, i);
            grid.add_server(&sname, &server_toml(&s, &specs)?)?;
            models += specs.len();
            let kernels = specs
                .iter()
                .map(EmulatedSpec::build)
                .collect::<Result<_, _>>()?;
            servers.push((sname, kernels));
        }
    }
    // The agent lists servers by name; the oracle's columns follow the same order.
    servers.sort_by(|a, b| a.0.cmp(&b.0));
    let client = Client::connect(grid.client_config())?;
    wait_for_servers(&client, servers.len(), Duration::from_secs(60))?;
    eprintln!(
        "bench schedule {name}: {} servers are building {models} models with GBBP…",
        servers.len()
    );
    wait_for_models(&client, models, Duration::from_secs(600))?;
    // The client connects to a server at its first call: without this, the policy that runs
    // first would pay every connection's setup (0.3-0.5 ms into its first calls measured) and
    // the others none, as a client that has been working a while pays none.
    for s in client.status().map_err(|e| anyhow!("{e}"))?.servers {
        client
            .ping(&s.addr)
            .map_err(|e| anyhow!("pinging server {}: {e}", s.name))?;
    }
    let sizes: Vec<i64> = if quick {
        s.sizes.iter().copied().take(1).collect()
    } else {
        s.sizes.clone()
    };
    for &size in &sizes {
        let calls = (s.calls)(size, quick);
        let graph = task_graph(&calls)?;
        let etc = true_etc(&calls, &servers)?;
        let comm = CommModel::uniform(servers.len(), LATENCY_S, BANDWIDTH)?;
        let oracle_of = |policy: GraphPolicy| -> Result<f64> {
            let m = policy.map(&graph, &etc, &comm, None)?;
            Ok(replay(&graph, &etc, &comm, &m)?.makespan_s)
        };
        let oracle = oracle_of(GraphPolicy::Heft)?;
        let default = GraphPolicy::default_for(&graph);
        let oracle_default = oracle_of(default)?;
        let lower = best_lower_bound(&graph, &etc, None)?;
        let policies: Vec<GraphPolicy> = GraphPolicy::ALL
            .into_iter()
            .filter(|&p| p != GraphPolicy::Lp || graph.is_bag())
            .collect();
        let mut runs: Vec<Vec<Result<Measured>>> = policies.iter().map(|_| Vec::new()).collect();
        for round in 0..repeat {
            for i in round_order(policies.len(), round, repeat) {
                let policy = policies[i];
                eprintln!(
                    "bench schedule {name}{}: {} calls with {policy}{}…",
                    if s.sweeps {
                        format!(" n={size}")
                    } else {
                        String::new()
                    },
                    calls.len(),
                    if repeat > 1 {
                        format!(" (run {} of {repeat})", round + 1)
                    } else {
                        String::new()
                    }
                );
                std::thread::sleep(SETTLE);
                runs[i].push(run_once(&client, &s, &calls, policy));
            }
        }
        for (policy, runs) in policies.into_iter().zip(runs) {
            let mut line = json!({
                "bench": "schedule",
                "scenario": s.name,
                "policy": policy.name(),
                "tasks": calls.len(),
                "servers": servers.len(),
                "oracle_makespan_s": round(oracle),
                "oracle_default_makespan_s": round(oracle_default),
                "lower_bound_s": round(lower.seconds),
                "lower_bound_kind": lower.kind.name(),
                "default": policy == default,
                "runs": runs.len(),
            });
            if s.sweeps {
                line["size"] = json!(size);
            }
            match median_run(runs) {
                Ok((m, all)) => {
                    line["makespan_s"] = json!(round(m.makespan_s));
                    line["makespan_runs_s"] =
                        json!(all.iter().map(|&x| round(x)).collect::<Vec<_>>());
                    line["makespan_over_bound"] = json!(round(m.makespan_s / lower.seconds));
                    line["predicted_makespan_s"] = json!(round(m.predicted_s));
                    line["chain"] = m.chain.json();
                }
                Err(e) => {
                    line["makespan_s"] = Json::Null;
                    line["predicted_makespan_s"] = Json::Null;
                    line["error"] = json!(format!("{e:#}"));
                }
            }
            emit(line);
        }
    }
    drop(client);
    drop(grid);
    Ok(())
}

/// A pause before each run, so that what the run before left to do is done before the next
/// starts: its reports (servers hold them up to 5 ms), the agent learning from them and writing
/// them to its database, freeing the values the run kept. Without it the first run after
/// another measured up to 1% slower on hydropad's 0.1 s runs, whichever policy it was.
const SETTLE: Duration = Duration::from_millis(250);

/// The order the policies run in, in round `round` of `rounds`: each round starts a fair share
/// further along the list, so no policy always runs first at a size (the first run after the
/// bound and the oracle are computed measured up to 1% slower on hydropad, whichever it was).
fn round_order(policies: usize, round: usize, rounds: usize) -> Vec<usize> {
    let shift = (round * policies).div_ceil(rounds.max(1));
    (0..policies).map(|i| (i + shift) % policies).collect()
}

/// One measured run of a policy.
struct Measured {
    makespan_s: f64,
    predicted_s: f64,
    chain: Chain,
}

/// The run of median makespan (the lower middle of an even count) and every run's makespan in
/// the order they ran; the first error if any run failed.
fn median_run(runs: Vec<Result<Measured>>) -> Result<(Measured, Vec<f64>)> {
    let mut ok = runs.into_iter().collect::<Result<Vec<Measured>>>()?;
    let all: Vec<f64> = ok.iter().map(|m| m.makespan_s).collect();
    ok.sort_by(|a, b| a.makespan_s.total_cmp(&b.makespan_s));
    let mid = ok.len().saturating_sub(1) / 2;
    let m = ok
        .into_iter()
        .nth(mid)
        .ok_or_else(|| anyhow!("no run was made"))?;
    Ok((m, all))
}

fn round(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// Runs the scenario's graph once with `policy`: (measured, predicted) makespan and where the
/// measured one went.
fn run_once(
    client: &Client,
    s: &Scenario,
    calls: &[Call],
    policy: GraphPolicy,
) -> Result<Measured> {
    let mut g = client.graph();
    let mut refs: Vec<gridwise_client::CallRef> = Vec::with_capacity(calls.len());
    for c in calls {
        let service = s
            .services
            .iter()
            .find(|x| x.name == c.service)
            .ok_or_else(|| anyhow!("no service {}", c.service))?;
        let mut args: Vec<GraphArg> = vec![c.size.into()];
        for k in 0..service.inputs as usize {
            args.push(match c.deps.get(k) {
                Some(&d) => refs[d].output(0),
                None => Value::vector_f64(&vec![0.0; c.size.max(0) as usize]).into(),
            });
        }
        refs.push(g.call_named(&c.name, c.service, args));
    }
    // Nothing comes back but the small `seconds` of the last call: the run is about placement.
    if let Some(&last) = refs.last() {
        g.fetch(last);
    }
    g.policy(policy.name());
    let run = g.run().map_err(|e| anyhow!("{e}"))?;
    let mut before = vec![None; calls.len()];
    for order in &run.plan.order {
        for w in order.windows(2) {
            before[w[1] as usize] = Some(w[0] as usize);
        }
    }
    let steps: Vec<chain::Step> = calls
        .iter()
        .zip(&run.calls)
        .zip(before)
        .map(|((c, r), before)| chain::Step {
            end_s: r.end_s,
            kernel_s: r.timing.kernel_s,
            server: r.server.clone(),
            producers: c.deps.clone(),
            before,
        })
        .collect();
    Ok(Measured {
        makespan_s: run.makespan_s,
        predicted_s: run.plan.makespan_s,
        chain: Chain::of(&steps),
    })
}

/// Every scenario named (all by default), one JSON line per policy (and size) to `emit`, then
/// one summary line per scenario checking the goals.
pub fn run(
    scenarios: &[String],
    quick: bool,
    repeat: usize,
    emit: &mut dyn FnMut(Json),
) -> Result<()> {
    let exe = std::env::current_exe()?;
    let names: Vec<String> = if scenarios.is_empty() {
        SCENARIOS.iter().map(|s| s.to_string()).collect()
    } else {
        scenarios.to_vec()
    };
    for n in &names {
        scenario(n)?;
    }
    for n in &names {
        let mut lines = Vec::new();
        let agent = Launcher::subcommand(exe.clone(), "agent");
        let server = Launcher::subcommand(exe.clone(), "server");
        run_scenario(&agent, server, n, quick, repeat, &mut |l| {
            lines.push(l.clone());
            emit(l);
        })?;
        emit(summary(n, &lines));
    }
    Ok(())
}

/// The goals for one scenario's default policy, from its lines.
pub fn summary(scenario: &str, lines: &[Json]) -> Json {
    let f = |l: &Json, k: &str| l[k].as_f64();
    let mut out = json!({"bench": "schedule_summary", "scenario": scenario});
    let by =
        |policy: &str| -> Vec<&Json> { lines.iter().filter(|l| l["policy"] == policy).collect() };
    let default: Vec<&Json> = lines.iter().filter(|l| l["default"] == true).collect();
    let Some(d) = default.first() else {
        return out;
    };
    out["default_policy"] = d["policy"].clone();
    let worst = |vals: Vec<Option<f64>>| vals.into_iter().flatten().fold(f64::NAN, f64::max);
    // Within 10% of the oracle (DAGs) or the LP bound (bags).
    let reference = if d["policy"] == "lp" {
        "lower_bound_s"
    } else {
        "oracle_makespan_s"
    };
    let vs_ref = worst(
        default
            .iter()
            .map(|l| Some(f(l, "makespan_s")? / f(l, reference)?))
            .collect(),
    );
    out["default_vs_reference"] = json!(round(vs_ref));
    out["reference"] = json!(reference);
    let rr = by("round-robin");
    let speedups: Vec<f64> = default
        .iter()
        .zip(&rr)
        .filter_map(|(d, r)| Some(f(r, "makespan_s")? / f(d, "makespan_s")?))
        .collect();
    out["round_robin_over_default_min"] = json!(round(
        speedups.iter().copied().fold(f64::INFINITY, f64::min)
    ));
    // Per size where the scenario sweeps one: where only one server can run the calls, every
    // policy is the same and the ratio is 1 by construction.
    if default.iter().any(|l| l.get("size").is_some()) {
        out["round_robin_over_default"] = default
            .iter()
            .zip(&rr)
            .map(|(d, r)| {
                let ratio = f(r, "makespan_s")
                    .zip(f(d, "makespan_s"))
                    .map(|(r, d)| round(r / d));
                json!({"size": d["size"], "ratio": ratio})
            })
            .collect();
    }
    let pred = worst(
        default
            .iter()
            .map(|l| {
                Some(
                    (f(l, "predicted_makespan_s")? - f(l, "makespan_s")?).abs()
                        / f(l, "makespan_s")?,
                )
            })
            .collect(),
    );
    out["prediction_error_max"] = json!(round(pred));
    // The default against HEFT, both measured, and against the bound (worst size).
    let heft = by("heft");
    if d["policy"] != "heft" && !heft.is_empty() {
        let ratios: Vec<f64> = default
            .iter()
            .zip(&heft)
            .filter_map(|(d, h)| Some(f(d, "makespan_s")? / f(h, "makespan_s")?))
            .collect();
        out["heft_makespan_s"] = heft[0]["makespan_s"].clone();
        out["default_makespan_s"] = d["makespan_s"].clone();
        out["default_over_heft"] = json!(round(ratios.iter().copied().fold(f64::NAN, f64::max)));
        // How far HEFT's own runs of one plan spread (worst size): a default within it of
        // HEFT is not measurably worse.
        out["heft_run_spread"] = json!(round(worst(
            heft.iter()
                .map(|l| -> Option<f64> {
                    let runs: Vec<f64> = l["makespan_runs_s"]
                        .as_array()?
                        .iter()
                        .filter_map(Json::as_f64)
                        .collect();
                    let (lo, hi) = runs
                        .iter()
                        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                            (lo.min(x), hi.max(x))
                        });
                    let median = f(l, "makespan_s")?;
                    (runs.len() > 1).then(|| (hi - lo) / median)
                })
                .collect()
        )));
        out["oracle_default_over_oracle_heft"] = json!(round(worst(
            default
                .iter()
                .map(|l| Some(f(l, "oracle_default_makespan_s")? / f(l, "oracle_makespan_s")?))
                .collect()
        )));
    }
    out["lower_bound_kind"] = d["lower_bound_kind"].clone();
    out["default_over_bound"] = json!(round(worst(
        default
            .iter()
            .map(|l| Some(f(l, "makespan_s")? / f(l, "lower_bound_s")?))
            .collect()
    )));
    out["oracle_default_over_bound"] = json!(round(worst(
        default
            .iter()
            .map(|l| Some(f(l, "oracle_default_makespan_s")? / f(l, "lower_bound_s")?))
            .collect()
    )));
    if scenario == "hydropad" {
        let heft = by("heft");
        let cs = by("constant-speed");
        let ratios: Vec<Json> = heft
            .iter()
            .zip(&cs)
            .map(|(h, c)| {
                json!({"size": h["size"], "constant_speed_over_heft": f(c, "makespan_s").zip(f(h, "makespan_s")).map(|(c, h)| round(c / h))})
            })
            .collect();
        out["constant_speed_over_heft"] = json!(ratios);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(policy: &str, makespan: f64, default: bool) -> Json {
        json!({
            "bench": "schedule", "scenario": "cholesky", "policy": policy,
            "makespan_s": makespan, "predicted_makespan_s": makespan,
            "oracle_makespan_s": 1.1, "oracle_default_makespan_s": 1.0,
            "lower_bound_s": 0.8, "lower_bound_kind": "lp_window", "default": default,
        })
    }

    #[test]
    fn each_round_starts_another_policy_and_runs_them_all() {
        assert_eq!(round_order(8, 0, 3), [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(round_order(8, 1, 3), [3, 4, 5, 6, 7, 0, 1, 2]);
        assert_eq!(round_order(8, 2, 3), [6, 7, 0, 1, 2, 3, 4, 5]);
        assert_eq!(round_order(3, 0, 1), [0, 1, 2]);
    }

    #[test]
    fn the_median_run_is_reported_with_every_run_in_order() {
        let run = |s: f64| -> Result<Measured> {
            Ok(Measured {
                makespan_s: s,
                predicted_s: s / 2.0,
                chain: Chain::of(&[]),
            })
        };
        let (m, all) = median_run(vec![run(3.0), run(1.0), run(2.0)]).unwrap();
        assert_eq!((m.makespan_s, m.predicted_s), (2.0, 1.0));
        assert_eq!(all, [3.0, 1.0, 2.0]);
        let (m, _) = median_run(vec![run(4.0), run(1.0)]).unwrap();
        assert_eq!(m.makespan_s, 1.0);
        let failed = median_run(vec![run(1.0), Err(anyhow!("server gone"))]);
        assert!(failed.is_err_and(|e| e.to_string().contains("server gone")));
    }

    #[test]
    fn summary_sets_the_default_against_heft_and_the_named_bound() {
        let mut heft = line("heft", 1.25, false);
        heft["makespan_runs_s"] = json!([1.3, 1.25, 1.2]);
        let lines = [
            line("best-of", 1.0, true),
            heft,
            line("round-robin", 4.0, false),
        ];
        let s = summary("cholesky", &lines);
        assert_eq!(s["default_policy"], "best-of");
        assert_eq!(s["heft_makespan_s"], 1.25);
        assert_eq!(s["default_over_heft"], 0.8);
        assert_eq!(s["heft_run_spread"], round(0.1 / 1.25));
        assert_eq!(s["default_over_bound"], 1.25);
        assert_eq!(s["oracle_default_over_bound"], 1.25);
        assert_eq!(s["oracle_default_over_oracle_heft"], round(1.0 / 1.1));
        assert_eq!(s["lower_bound_kind"], "lp_window");
    }
}
