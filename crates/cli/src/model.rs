//! `gridwise model …`: the performance models the agent holds — build progress, points,
//! exports (the `pmm_view` role; plots are in `plot`).

use gridwise_client::Client;
use gridwise_proto::{BuildState, ModelExport, ModelSummary};
use serde_json::json;

fn state_text(s: &BuildState) -> String {
    match s {
        BuildState::Queued => "queued".into(),
        BuildState::Waiting(why) => format!("waiting: {why}"),
        BuildState::Building => "building".into(),
        BuildState::Done => "done".into(),
        BuildState::Failed(e) => format!("FAILED: {e}"),
    }
}

/// Prints every model with its build progress.
pub fn print_status(client: &Client, as_json: bool) -> anyhow::Result<()> {
    let models = client.models()?;
    if as_json {
        println!(
            "{}",
            serde_json::to_string(&models.iter().map(summary_json).collect::<Vec<_>>())?
        );
        return Ok(());
    }
    if models.is_empty() {
        println!(
            "no models yet: servers build them from [[models]] in their config, and every real call adds a point"
        );
        return Ok(());
    }
    println!(
        "{:<16} {:<12} {:>7} {:<14} {:>6} {:>6} {:>9}  state",
        "server", "service", "points", "method", "built", "runs", "bench s"
    );
    for m in &models {
        let (method, built, runs, bench, state) = match &m.progress {
            Some(p) => (
                p.method.clone(),
                p.points.to_string(),
                p.runs.to_string(),
                format!("{:.2}", p.bench_time_s),
                state_text(&p.state),
            ),
            None => (
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "from real calls only".into(),
            ),
        };
        println!(
            "{:<16} {:<12} {:>7} {:<14} {:>6} {:>6} {:>9}  {}",
            m.server, m.service, m.points, method, built, runs, bench, state
        );
    }
    Ok(())
}

fn summary_json(m: &ModelSummary) -> serde_json::Value {
    json!({
        "server": m.server, "service": m.service, "points": m.points,
        "progress": m.progress.as_ref().map(|p| json!({
            "method": p.method, "state": state_text(&p.state), "points": p.points,
            "runs": p.runs, "bench_time_s": p.bench_time_s,
        })),
    })
}

/// A model as JSON: parameters, complexity, points with their speed statistics.
pub fn export_json(m: &ModelExport) -> serde_json::Value {
    json!({
        "server": m.server,
        "service": m.service,
        "params": m.params,
        "complexity": m.complexity,
        "assumed_zero": m.assumed_zero,
        "points": m.points.iter().map(|(x, s)| json!({
            "x": x, "count": s.count, "min": s.min, "mean": s.mean, "max": s.max,
        })).collect::<Vec<_>>(),
        "progress": m.progress.as_ref().map(|p| json!({
            "method": p.method, "state": state_text(&p.state), "points": p.points, "runs": p.runs,
            "bench_time_s": p.bench_time_s,
            "intervals": p.intervals.iter().map(|i| json!({"lo": i.lo, "hi": i.hi, "finalised": i.finalised})).collect::<Vec<_>>(),
        })),
    })
}

/// Prints one model's points.
pub fn print_show(client: &Client, server: &str, service: &str) -> anyhow::Result<()> {
    let m = client.model(server, service)?;
    println!(
        "{} on {}: {} point(s) over ({}), complexity {}",
        m.service,
        m.server,
        m.points.len(),
        m.params.join(", "),
        m.complexity.as_deref().unwrap_or("-")
    );
    if let Some(p) = &m.progress {
        println!(
            "build: {} — {}, {} runs, {:.2} s of benchmarks",
            p.method,
            state_text(&p.state),
            p.runs,
            p.bench_time_s
        );
    }
    println!(
        "{:>20} {:>6} {:>12} {:>12} {:>12}",
        "size", "runs", "min Gop/s", "mean Gop/s", "max Gop/s"
    );
    for (x, s) in &m.points {
        let size: Vec<String> = x.iter().map(|v| v.to_string()).collect();
        println!(
            "{:>20} {:>6} {:>12.4} {:>12.4} {:>12.4}",
            size.join(","),
            s.count,
            s.min / 1e9,
            s.mean / 1e9,
            s.max / 1e9
        );
    }
    if let Some(z) = &m.assumed_zero {
        let size: Vec<String> = z.iter().map(|v| v.to_string()).collect();
        println!(
            "{:>20}  speed 0 assumed (top of the build range)",
            size.join(",")
        );
    }
    Ok(())
}

/// Exports one model, or every model, as JSON.
pub fn export(client: &Client, server: Option<&str>, service: Option<&str>) -> anyhow::Result<()> {
    let out = match (server, service) {
        (Some(a), Some(b)) => export_json(&client.model(a, b)?),
        (None, None) => {
            let mut all = Vec::new();
            for s in client.models()? {
                all.push(export_json(&client.model(&s.server, &s.service)?));
            }
            json!(all)
        }
        _ => anyhow::bail!("give both --server and --service, or neither (to export every model)"),
    };
    println!("{out}");
    Ok(())
}

/// Draws models to SVG or PNG: one service across `servers` (all that model it when empty),
/// or one service per server.
pub fn plot(
    client: &Client,
    servers: &[String],
    services: &[String],
    output: &std::path::Path,
    slice: &[String],
) -> anyhow::Result<()> {
    let pairs: Vec<(String, String)> = match (servers.len(), services.len()) {
        (0, _) => client
            .models()?
            .into_iter()
            .filter(|m| services.contains(&m.service))
            .map(|m| (m.server, m.service))
            .collect(),
        (_, 1) => servers
            .iter()
            .map(|s| (s.clone(), services[0].clone()))
            .collect(),
        (a, b) if a == b => servers
            .iter()
            .cloned()
            .zip(services.iter().cloned())
            .collect(),
        _ => anyhow::bail!("give one --service for all servers, or one per --server"),
    };
    anyhow::ensure!(
        !pairs.is_empty(),
        "no model of {} yet: `gridwise model status` lists models",
        services.join(", ")
    );
    let exports = pairs
        .iter()
        .map(|(a, b)| client.model(a, b))
        .collect::<Result<Vec<_>, _>>()?;
    let slice = slice
        .iter()
        .map(|s| gridwise_graphfile::parse_sizes(s))
        .collect::<anyhow::Result<Vec<_>>>()?
        .concat();
    gridwise_charts::models::plot_models(
        &exports,
        &gridwise_charts::models::PlotOptions {
            output: output.to_path_buf(),
            slice,
            width: 1000,
            height: 600,
            title: None,
        },
    )?;
    println!("{}", output.display());
    Ok(())
}
