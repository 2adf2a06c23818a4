//! `gridwise graph run FILE`: runs a graph file on the live grid through the client's graph API
//! (the agent maps the whole graph, data moves server to server, only the file's `outputs`
//! come back) and sets the prediction beside what happened.

use super::predict::{PolicySource, Prediction, chart_name, load_checked};
use anyhow::{Context, Result, anyhow};
use gridwise_charts::gantt::{self, Slot, Timeline};
use gridwise_client::Client;
use gridwise_client::GraphRun;
use gridwise_graphfile::{Rand, record, render};
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;

/// What happened, as a timeline on the plan's servers (for the side-by-side chart). Calls that
/// ran on a server the plan did not have (after a fallback) are left out of the chart.
pub fn actual_of(pred: &Prediction, run: &GraphRun) -> Timeline {
    let mut per_server: Vec<Vec<Slot>> = vec![Vec::new(); pred.plan.servers.len()];
    for (t, r) in run.calls.iter().enumerate() {
        if let Some(s) = pred.plan.servers.iter().position(|s| s.name == r.server) {
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
    pred.timeline_with(per_server, run.makespan_s)
}

/// Writes each fetched output as `TASK.K.npy` (arrays) or `TASK.K.txt` (anything else).
fn save_outputs(
    dir: &Path,
    tasks: &[gridwise_graphfile::TaskSpec],
    fetched: &[(usize, &[gridwise_proto::Value])],
) -> Result<()> {
    use gridwise_proto::Value;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    for (i, outs) in fetched {
        for (k, v) in outs.iter().enumerate() {
            let name = &tasks[*i].name;
            let (file, bytes) = match v {
                Value::Vector(a) => (
                    format!("{name}.{k}.npy"),
                    gridwise_routines::npy::write(a, true),
                ),
                Value::Matrix(a) => (
                    format!("{name}.{k}.npy"),
                    gridwise_routines::npy::write(a, false),
                ),
                Value::Str(s) => (format!("{name}.{k}.txt"), s.clone().into_bytes()),
                Value::Bytes(b) => (format!("{name}.{k}.bin"), b.clone()),
                other => (
                    format!("{name}.{k}.txt"),
                    format!("{}\n", render(other)).into_bytes(),
                ),
            };
            let path = dir.join(file);
            std::fs::write(&path, bytes)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    Ok(())
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
    save: Option<&Path>,
    connect: impl FnOnce() -> Result<Client>,
) -> Result<()> {
    let (policy, file) = load_checked(path, policy, gantt_out)?;
    let client = connect()?;
    let (g, refs) = record(&client, &file, policy, Rand::Values)?;
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
    let pred = Prediction::of(run.plan.clone(), PolicySource::of(policy, &file), &file)?;
    if let Some(out) = gantt_out {
        gantt::draw_pair(
            &pred.timeline(),
            &actual_of(&pred, &run),
            out,
            &chart_name(path),
        )?;
    }
    let fetched: Vec<(usize, &[gridwise_proto::Value])> = refs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| run.outputs(*r).map(|o| (i, o)))
        .collect();
    if let Some(dir) = save {
        save_outputs(dir, &file.tasks, &fetched)?;
    }
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
                    "planned_server": pred.plan.servers[pred.plan.server_of[t] as usize].name,
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
            "policy": pred.plan.policy,
            "policy_source": pred.policy_source.as_str(),
            "tasks": pred.tasks.len(),
            "servers": pred.plan.servers.len(),
            "predicted_makespan_s": pred.makespan_s(),
            "predicted_makespan_interval90_s": pred.plan.makespan_interval90_s.map(|(lo, hi)| [lo, hi]),
            "makespan_s": run.makespan_s,
            "prediction_error": err,
            "lower_bound_s": pred.plan.lower_bound_s,
            "lower_bound_kind": pred.plan.lower_bound_kind,
            "makespan_over_bound": super::predict::ratio(run.makespan_s, pred.plan.lower_bound_s),
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
        pred.tasks.len(),
        pred.plan.servers.len(),
        pred.plan.policy
    );
    let _ = writeln!(
        out,
        "predicted makespan   {:.4} s{}",
        pred.makespan_s(),
        pred.interval_text()
    );
    let _ = writeln!(
        out,
        "actual makespan      {:.4} s (prediction off by {:.1}%)",
        run.makespan_s,
        err * 100.0
    );
    let _ = writeln!(
        out,
        "lower bound          {:.4} s{}",
        pred.plan.lower_bound_s,
        super::predict::bound_note(&pred.plan, run.makespan_s)
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
