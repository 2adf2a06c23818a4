//! `gridwise sim`: run mapping policies on a simulated platform described by a scenario file
//! (server classes with speed functions and load traces, links, a workload; see
//! `examples/sim/README.md`), and compare each policy's simulated makespan with its own
//! prediction and with the lower bounds. Pure and deterministic apart from the mapping time.

use anyhow::{Context, Result};
use gridwise_proto::Policy;
use gridwise_sim::{GraphPolicy, Scenario, SimReport, Simulation, simulate_online_agents};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

/// Tasks × servers from which progress is reported on stderr.
const PROGRESS_CELLS: usize = 1_000_000;

/// Arguments of `gridwise sim`.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// Scenario file (JSON; the format is described in examples/sim/README.md).
    pub scenario: PathBuf,
    /// Policy to run: best-of, heft, peft, min-min, mct, sufferage, lp, round-robin, constant-speed (repeat
    /// the flag or separate by commas). Default: the best for the workload's shape (lp for a bag
    /// small enough for the LP, heft otherwise).
    #[arg(long = "policy", value_name = "POLICY", value_delimiter = ',')]
    pub policies: Vec<GraphPolicy>,
    /// Run every policy that applies (lp only on bags small enough for the LP).
    #[arg(long, conflicts_with = "policies")]
    pub all: bool,
    /// Print one JSON object per policy per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// An online workload ranked by this many agents sharing the servers (call i by agent
    /// i mod N), each seeing the others' calls only as the servers tell of them (as each
    /// arrives, and in their heartbeats).
    #[arg(long, default_value_t = 1)]
    pub agents: usize,
    /// The servers' heartbeat interval (which lists the calls they hold to every agent), s.
    #[arg(long, default_value_t = 1.0)]
    pub heartbeat_s: f64,
}

/// Runs `gridwise sim`.
pub fn run(args: SimArgs) -> Result<()> {
    let scenario = Scenario::load(&args.scenario)?;
    if scenario.is_online() {
        return run_online(&scenario, &args);
    }
    let name = scenario.display_name().to_string();
    let platform = scenario.platform()?;
    let workload = scenario.workload()?;
    let (n, m) = (workload.len(), platform.servers());
    let loud = n.saturating_mul(m) >= PROGRESS_CELLS;
    let progress = |msg: String| {
        if loud {
            eprintln!("sim: {msg}");
        }
    };
    progress(format!("building the {n} x {m} ETC matrix …"));
    let sim = Simulation::new(&platform, &workload)
        .with_context(|| format!("preparing scenario {name}"))?;
    let default = sim.default_policy();
    let policies = if args.all {
        GraphPolicy::ALL
            .into_iter()
            .filter(|&p| {
                let ok = sim.applies(p);
                if !ok && workload.graph.is_bag() {
                    eprintln!("sim: lp skipped: {n} tasks x {m} servers is too large for the LP");
                }
                ok
            })
            .collect()
    } else if args.policies.is_empty() {
        vec![default]
    } else {
        let mut list = Vec::new();
        for p in &args.policies {
            if !list.contains(p) {
                list.push(*p);
            }
        }
        list
    };

    let mut reports: Vec<SimReport> = Vec::new();
    for policy in policies {
        progress(format!("mapping {n} tasks on {m} servers with {policy} …"));
        let (mapping, ms) = match sim.map(policy) {
            Ok(done) => done,
            // --all keeps going: one policy failing says nothing about the others.
            Err(e) if args.all => {
                eprintln!("sim: {e}");
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("scenario {name}")),
        };
        progress(format!(
            "mapped in {:.2} s; predicting and simulating …",
            ms / 1e3
        ));
        let started = Instant::now();
        let out = sim
            .evaluate(policy, mapping, ms)
            .with_context(|| format!("scenario {name}, policy {policy}"))?;
        progress(format!(
            "simulated {} events in {:.2} s",
            out.report.events,
            started.elapsed().as_secs_f64()
        ));
        reports.push(out.report);
    }
    // The lp policy may find the LP bound after earlier policies were reported without it.
    let lower = sim.lower();
    for r in &mut reports {
        r.lp_bound_s = lower.lp_s;
        r.lower_bound_s = lower.seconds;
        r.lower_bound_kind = lower.kind.name();
        r.makespan_over_bound = r.makespan_s / lower.seconds;
    }

    if args.json {
        for r in &reports {
            println!(
                "{}",
                json!({
                    "bench": "sim",
                    "scenario": name,
                    "policy": r.policy.name(),
                    "tasks": r.tasks,
                    "servers": r.servers,
                    "makespan_s": r.makespan_s,
                    "predicted_makespan_s": r.predicted_makespan_s,
                    "lower_bound_s": r.lower_bound_s,
                    "lower_bound_kind": r.lower_bound_kind,
                    "makespan_over_bound": r.makespan_over_bound,
                    "lp_bound_s": r.lp_bound_s,
                    "critical_path_s": r.critical_path_s,
                    "mapping_ms": r.mapping_ms,
                    "utilisation": r.utilisation,
                    "default": r.policy == default,
                })
            );
        }
        return Ok(());
    }
    print!(
        "{}",
        table(
            &name,
            &workload.graph,
            platform.classes().len(),
            &sim,
            &reports,
            default
        )
    );
    Ok(())
}

/// An online workload: each ranking policy of the agent (`--policy` among mct, round-robin,
/// constant-speed; mct by default, all three with `--all`) on the same stream of calls.
fn run_online(scenario: &Scenario, args: &SimArgs) -> Result<()> {
    let name = scenario.display_name();
    let policies: Vec<Policy> = if args.all {
        Policy::ALL.to_vec()
    } else if args.policies.is_empty() {
        vec![Policy::Mct]
    } else {
        let mut list = Vec::new();
        for p in &args.policies {
            let q: Policy = p.name().parse().map_err(|_| {
                anyhow::anyhow!(
                    "--policy {p}: an online workload is ranked call by call by the agent; use \
                     mct, round-robin or constant-speed"
                )
            })?;
            if !list.contains(&q) {
                list.push(q);
            }
        }
        list
    };
    let mut rows = Vec::new();
    for policy in policies {
        let run = match simulate_online_agents(scenario, policy, args.agents, args.heartbeat_s) {
            Ok(run) => run,
            Err(e) if args.all => {
                eprintln!("sim: {policy}: {e}");
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("scenario {name}, policy {policy}")),
        };
        let r = run.report;
        if args.json {
            let mut j = serde_json::to_value(&r)?;
            j["bench"] = json!("sim");
            j["scenario"] = json!(name);
            j["agents"] = json!(args.agents);
            j["heartbeat_s"] = json!(args.heartbeat_s);
            println!("{j}");
        } else {
            rows.push(r);
        }
    }
    if !args.json {
        let Some(first) = rows.first() else {
            return Ok(());
        };
        println!(
            "scenario {name}: {} online calls on {} servers, ranked by the agent core\n",
            first.calls, first.servers
        );
        println!(
            "{:<15} {:>11} {:>11} {:>11} {:>11} {:>11} {:>13}",
            "policy",
            "makespan",
            "mean resp.",
            "p95 resp.",
            "mean wait",
            "pred. error",
            "decisions/s"
        );
        for r in &rows {
            println!(
                "{:<15} {:>11} {:>11} {:>11} {:>11} {:>10.1}% {:>13.0}",
                r.policy,
                secs(r.makespan_s),
                secs(r.mean_response_s),
                secs(r.p95_response_s),
                secs(r.mean_wait_s),
                r.mean_prediction_error * 100.0,
                r.decisions_per_s
            );
        }
    }
    Ok(())
}

/// Seconds with about four significant digits.
fn secs(x: f64) -> String {
    match x.abs() {
        a if a >= 1000.0 => format!("{x:.0} s"),
        a if a >= 100.0 => format!("{x:.1} s"),
        a if a >= 10.0 => format!("{x:.2} s"),
        a if a >= 1.0 => format!("{x:.3} s"),
        _ => format!("{x:.4} s"),
    }
}

/// The readable report: the workload, the bounds, one row per policy.
fn table(
    name: &str,
    graph: &gridwise_sched::TaskGraph,
    classes: usize,
    sim: &Simulation,
    reports: &[SimReport],
    default: GraphPolicy,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let shape = if graph.is_bag() {
        "independent calls".to_string()
    } else {
        format!("{} dependencies", graph.edge_count())
    };
    let b = sim.bounds();
    let lower = sim.lower();
    let lp = match lower.lp_s {
        Some(v) => format!("LP {}", secs(v)),
        None => "LP bound skipped".to_string(),
    };
    let window = match lower.window_s {
        Some(v) => format!(", window LP {}", secs(v)),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "scenario {name}: {} tasks ({shape}) on {} servers in {classes} classes",
        graph.len(),
        sim.etc().servers()
    );
    let _ = writeln!(
        out,
        "lower bound {} = {} (critical path {}, work / slots {}, {lp}{window})\n",
        secs(lower.seconds),
        lower.kind,
        secs(b.critical_path_s),
        secs(b.total_work_s / sim.etc().total_slots().max(1) as f64)
    );
    let _ = writeln!(
        out,
        "{:<17} {:>12} {:>12} {:>8} {:>11} {:>11}",
        "policy", "makespan", "predicted", "x bound", "utilisation", "mapping"
    );
    for r in reports {
        let mark = if r.policy == default { " *" } else { "" };
        let ratio = if r.lower_bound_s > 0.0 {
            format!("{:.3}", r.makespan_s / r.lower_bound_s)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "{:<17} {:>12} {:>12} {:>8} {:>10.1}% {:>8.1} ms",
            format!("{}{mark}", r.policy),
            secs(r.makespan_s),
            secs(r.predicted_makespan_s),
            ratio,
            100.0 * r.utilisation,
            r.mapping_ms
        );
    }
    let _ = writeln!(
        out,
        "\n* default policy for this workload. makespan: simulated under the load traces; predicted: the policy's own plan at full availability."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimArgs,
    }

    fn example(name: &str) -> String {
        format!(
            "{}/../../examples/sim/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        )
    }

    #[test]
    fn runs_the_examples_with_every_flag_shape() {
        for extra in [&["--all"][..], &["--policy", "heft,mct", "--json"], &[]] {
            let argv = ["sim".to_string(), example("small")]
                .into_iter()
                .chain(extra.iter().map(|s| s.to_string()));
            run(Cli::try_parse_from(argv).unwrap().args).unwrap();
        }
        let cli = Cli::try_parse_from(["sim", "x.json", "--policy", "heft", "--policy", "lp"]);
        assert_eq!(
            cli.unwrap().args.policies,
            [GraphPolicy::Heft, GraphPolicy::Lp]
        );
        assert!(Cli::try_parse_from(["sim", "x.json", "--policy", "fastest"]).is_err());
        assert!(Cli::try_parse_from(["sim", "x.json", "--all", "--policy", "mct"]).is_err());
        let err = run(Cli::try_parse_from([
            "sim".to_string(),
            example("small"),
            "--policy".into(),
            "lp".into(),
        ])
        .unwrap()
        .args)
        .unwrap_err();
        assert!(format!("{err:#}").contains("use heft"), "{err:#}");
    }

    #[test]
    fn table_marks_the_default_and_names_the_bounds() {
        let s = Scenario::load(example("crossing-bag")).unwrap();
        let (p, w) = (s.platform().unwrap(), s.workload().unwrap());
        let sim = Simulation::new(&p, &w).unwrap();
        let reports = vec![
            sim.run(GraphPolicy::Lp).unwrap(),
            sim.run(GraphPolicy::Mct).unwrap(),
        ];
        let t = table(
            "crossing-bag",
            &w.graph,
            2,
            &sim,
            &reports,
            sim.default_policy(),
        );
        assert!(
            t.contains("2000 tasks (independent calls) on 8 servers in 2 classes"),
            "{t}"
        );
        assert!(t.contains("\nlp *") && t.contains("\nmct "), "{t}");
        assert!(t.contains(", LP "), "{t}");
        assert!(t.contains(" = lp (critical path"), "{t}");
    }

    #[test]
    fn seconds_keep_four_digits() {
        assert_eq!(secs(1234.4), "1234 s");
        assert_eq!(secs(12.3456), "12.35 s");
        assert_eq!(secs(0.001234), "0.0012 s");
    }
}
