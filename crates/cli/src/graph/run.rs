//! `gridwise graph run FILE`: runs a graph file on the live grid through the client's graph API
//! (the agent maps the whole graph, data moves server to server, only the file's `outputs`
//! come back) and sets the prediction beside what happened.

use super::file::{Arg, GraphFile, parse_words};
use super::gantt;
use super::predict::{Platform, PolicySource, Prediction, ServerInfo, chart_name, load_checked};
use crate::args::render;
use anyhow::{Context, Result, anyhow};
use gridwise_client::{BlockingGraph, CallRef, Client, GraphArg, GraphRun};
use gridwise_proto::GraphPlan;
use gridwise_sched::graph::Slot;
use gridwise_sched::{Bounds, CommModel, EtcMatrix, GraphPolicy, Mapping, Replay, TaskGraph};
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;

/// Records `file`'s calls in a client graph: words parsed by each service's description
/// (`rand` arrays materialised), `{"from": …}` arguments as outputs of earlier calls.
pub fn record<'c>(
    client: &'c Client,
    file: &GraphFile,
    policy: Option<GraphPolicy>,
) -> Result<(BlockingGraph<'c>, Vec<CallRef>)> {
    let mut g = client.graph();
    let mut refs: Vec<CallRef> = Vec::with_capacity(file.tasks.len());
    for spec in &file.tasks {
        let desc = client
            .describe(&spec.service)
            .map_err(|e| anyhow!("task `{}`: {e}", spec.name))?;
        // Outputs of other tasks become placeholders the graph replaces (argument counts and
        // shapes are checked by `GraphFile::resolve` and by the graph).
        let values = parse_words(&desc, &spec.args, true)
            .with_context(|| format!("task `{}`", spec.name))?;
        let args: Vec<GraphArg> = spec
            .args
            .iter()
            .zip(values)
            .map(|(a, v)| match a {
                Arg::From { task, output } => refs[*task].output(*output),
                Arg::Word(_) => GraphArg::Value(v),
            })
            .collect();
        refs.push(g.call_named(&spec.name, &spec.service, args));
    }
    for &o in &file.outputs {
        g.fetch(refs[o]);
    }
    if let Some(p) = policy.or(file.policy) {
        g.policy(p.name());
    }
    Ok((g, refs))
}

/// The agent's plan as a [`Prediction`]: its ETC matrix, links and mapping, replayed here (the
/// replay is deterministic, so this is the agent's timeline).
pub fn prediction_of(
    plan: &GraphPlan,
    graph: TaskGraph,
    policy_source: PolicySource,
) -> Result<Prediction> {
    let (n, m) = (plan.server_of.len(), plan.servers.len());
    let policy: GraphPolicy = plan
        .policy
        .parse()
        .map_err(|e| anyhow!("the agent's plan: {e}"))?;
    let servers: Vec<ServerInfo> = plan
        .servers
        .iter()
        .map(|s| ServerInfo {
            name: s.name.clone(),
            addr: s.addr.clone(),
            slots: s.slots.max(1) as usize,
            default_rate: s.default_rate,
        })
        .collect();
    let etc = EtcMatrix::new(n, m, plan.etc.clone())?
        .with_slots(servers.iter().map(|s| s.slots).collect())?;
    let mut comm = CommModel::uniform(m, plan.default_latency_s, plan.default_bandwidth)?;
    for l in &plan.links {
        comm.set_link(l.from as usize, l.to as usize, l.latency_s, l.bandwidth)?;
    }
    let mapping = Mapping {
        server_of: plan.server_of.iter().map(|&s| s as usize).collect(),
        order: plan
            .order
            .iter()
            .map(|o| o.iter().map(|&t| t as usize).collect())
            .collect(),
    };
    let replay = gridwise_sched::replay(&graph, &etc, &comm, &mapping)
        .context("replaying the agent's plan")?;
    let bounds = Bounds::of(&graph, &etc)?;
    let unknown = plan
        .unknown
        .iter()
        .map(|&(t, s)| (t as usize, s as usize))
        .collect();
    Ok(Prediction {
        policy,
        policy_source,
        graph,
        platform: Platform {
            servers,
            etc,
            comm,
            unknown,
        },
        mapping,
        replay,
        bounds,
    })
}

/// What happened, as a timeline in the prediction's terms (for the side-by-side chart).
pub fn actual_of(pred: &Prediction, run: &GraphRun) -> Prediction {
    let mut per_server: Vec<Vec<Slot>> = vec![Vec::new(); pred.platform.servers.len()];
    let mut task_finish = vec![0.0; run.calls.len()];
    for (t, r) in run.calls.iter().enumerate() {
        task_finish[t] = r.end_s;
        if let Some(s) = pred
            .platform
            .servers
            .iter()
            .position(|s| s.name == r.server)
        {
            per_server[s].push(Slot {
                task: t,
                lane: 0,
                start_s: r.start_s,
                end_s: r.end_s,
            });
        }
    }
    for slots in &mut per_server {
        slots.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    }
    let mut actual = pred.clone();
    actual.replay = Replay {
        makespan_s: run.makespan_s,
        per_server,
        task_finish,
    };
    actual
}

/// Relative error of a prediction, |predicted − actual| / actual.
pub fn relative_error(predicted: f64, actual: f64) -> f64 {
    if actual > 0.0 {
        (predicted - actual).abs() / actual
    } else {
        0.0
    }
}

/// The command: loads and checks `path`, runs it, prints the outputs and the prediction beside
/// the run (or one JSON object), and draws both timelines if asked.
pub fn run(
    path: &Path,
    policy: Option<&str>,
    as_json: bool,
    gantt_out: Option<&Path>,
    connect: impl FnOnce() -> Result<Client>,
) -> Result<()> {
    let (policy, file) = load_checked(path, policy, gantt_out)?;
    let client = connect()?;
    let resolved = file
        .resolve(|svc| Ok(client.describe(svc)?))
        .with_context(|| format!("checking {}", path.display()))?;
    let (g, refs) = record(&client, &file, policy)?;
    if !as_json {
        eprintln!(
            "running {} call(s) of {} on the grid…",
            file.tasks.len(),
            path.display()
        );
    }
    let run = g
        .run()
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("running {}", path.display()))?;
    let source = if policy.is_some() {
        PolicySource::Flag
    } else if file.policy.is_some() {
        PolicySource::File
    } else {
        PolicySource::Default
    };
    let pred = prediction_of(&run.plan, resolved.graph, source)?;
    let actual = actual_of(&pred, &run);
    if let Some(out) = gantt_out {
        gantt::draw_pair(&pred, &actual, out, &chart_name(path))?;
    }
    let fetched: Vec<(usize, &[gridwise_proto::Value])> = refs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| run.outputs(*r).map(|o| (i, o)))
        .collect();
    let err = relative_error(pred.makespan_s(), run.makespan_s);
    if as_json {
        let calls: Vec<_> = run
            .calls
            .iter()
            .enumerate()
            .map(|(t, r)| {
                json!({
                    "task": r.name,
                    "server": r.server,
                    "planned_server": pred.platform.servers[pred.mapping.server_of[t]].name,
                    "fell_back": r.fell_back,
                    "start_s": r.start_s,
                    "end_s": r.end_s,
                    "kernel_s": r.timing.kernel_s,
                    "predicted_start_s": run.plan.start_s[t],
                    "predicted_end_s": run.plan.end_s[t],
                })
            })
            .collect();
        let outputs: serde_json::Map<String, serde_json::Value> = fetched
            .iter()
            .map(|(i, o)| {
                (
                    file.tasks[*i].name.clone(),
                    json!(o.iter().map(render).collect::<Vec<_>>()),
                )
            })
            .collect();
        let j = json!({
            "policy": pred.policy.name(),
            "policy_source": pred.policy_source.as_str(),
            "tasks": pred.graph.len(),
            "servers": pred.platform.servers.len(),
            "predicted_makespan_s": pred.makespan_s(),
            "makespan_s": run.makespan_s,
            "prediction_error": err,
            "lower_bound_s": pred.bounds.lower_bound_s,
            "freed": run.freed,
            "calls": calls,
            "outputs": outputs,
        });
        println!("{j}");
        return Ok(());
    }
    let mut out = String::new();
    for (i, o) in &fetched {
        let _ = writeln!(
            out,
            "{}: {}",
            file.tasks[*i].name,
            o.iter().map(render).collect::<Vec<_>>().join(" ")
        );
    }
    let _ = writeln!(
        out,
        "\n{} task(s) on {} server(s), policy {}",
        pred.graph.len(),
        pred.platform.servers.len(),
        pred.policy
    );
    let _ = writeln!(out, "predicted makespan   {:.4} s", pred.makespan_s());
    let _ = writeln!(
        out,
        "actual makespan      {:.4} s (prediction off by {:.1}%)",
        run.makespan_s,
        err * 100.0
    );
    let _ = writeln!(
        out,
        "lower bound          {:.4} s",
        pred.bounds.lower_bound_s
    );
    let fell_back = run.calls.iter().filter(|r| r.fell_back).count();
    if fell_back > 0 {
        let _ = writeln!(
            out,
            "{fell_back} call(s) ran elsewhere than planned (their planned server failed)"
        );
    }
    let _ = writeln!(out, "kept values freed    {}", run.freed);
    let width = run
        .calls
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "\n{:<width$}  {:<12} {:>19}  {:>19}",
        "task", "server", "predicted (s)", "actual (s)"
    );
    for (t, r) in run.calls.iter().enumerate() {
        let _ = writeln!(
            out,
            "{:<width$}  {:<12} {:>8.4} – {:>8.4}  {:>8.4} – {:>8.4}",
            r.name, r.server, run.plan.start_s[t], run.plan.end_s[t], r.start_s, r.end_s
        );
    }
    if let Some(g) = gantt_out {
        let _ = writeln!(
            out,
            "\nGantt chart (predicted above actual): {}",
            g.display()
        );
    }
    print!("{out}");
    Ok(())
}
