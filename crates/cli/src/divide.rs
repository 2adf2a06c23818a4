//! `gridwise divide SERVICE N --unit PARAM`: one service over N units, cut into parts by the
//! agent (which servers, how many units each), run, and set beside the plan. The parts' data
//! are generated (random arrays of the sizes the description gives); a program divides its
//! own data with the client API (`divide`).

use anyhow::{Context, Result, anyhow};
use gridwise_charts::gantt::{self, ChartServer, Slot, Timeline};
use gridwise_client::{Client, DivideRun, DivideSpec, NeighbourComm};
use gridwise_proto::{ServiceDesc, Value};
use serde_json::json;
use std::path::Path;

/// What `gridwise divide` was asked.
pub struct DivideArgs<'a> {
    pub service: &'a str,
    pub units: u64,
    pub unit_param: &'a str,
    /// The other size parameters, `k=v,…`.
    pub sizes: Option<&'a str>,
    pub policy: Option<&'a str>,
    pub servers: Option<u32>,
    pub all: bool,
    pub iterations: usize,
    pub comm_bytes: Option<u64>,
    pub json: bool,
    pub gantt: Option<&'a Path>,
}

/// The inputs of a part of `units` units: the description's generated inputs at those sizes.
fn part_inputs(
    desc: &ServiceDesc,
    unit_param: &str,
    sizes: &[(String, i64)],
    units: u64,
) -> Vec<Value> {
    let values: Vec<i64> = desc
        .size_params
        .iter()
        .map(|p| {
            if p == unit_param {
                units as i64
            } else {
                sizes.iter().find(|(n, _)| n == p).map_or(1, |(_, v)| *v)
            }
        })
        .collect();
    gridwise_kernels::inputs_for_sizes(desc, &values).unwrap_or_default()
}

pub fn run(a: &DivideArgs<'_>, client: Client) -> Result<()> {
    if let Some(g) = a.gantt {
        gantt::check_format(g)?;
    }
    let sizes = match a.sizes {
        Some(s) => gridwise_graphfile::parse_sizes(s)?,
        None => Vec::new(),
    };
    let h = client
        .function_handle_default(a.service)
        .map_err(|e| anyhow!("{e}"))?;
    let desc = h.desc.clone();
    let spec = DivideSpec {
        unit_param: a.unit_param.to_string(),
        sizes: sizes.clone(),
        policy: a.policy.map(str::to_string),
        servers: a.servers,
        all: a.all,
        max_part: None,
        comm: a.comm_bytes.map(|b| NeighbourComm {
            bytes: b,
            messages: 2,
        }),
    };
    let inputs = |_first: u64, units: u64| part_inputs(&desc, a.unit_param, &sizes, units);
    let runs: Vec<DivideRun> = client
        .divide_iter(&h, a.units, &spec, a.iterations.max(1), &inputs)
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("dividing {} units of `{}`", a.units, a.service))?;
    if a.json {
        let its: Vec<_> = runs
            .iter()
            .map(|r| {
                json!({
                    "policy": r.plan.policy,
                    "ordering": r.plan.ordering,
                    "slack": r.plan.slack,
                    "predicted_s": r.plan.makespan_s,
                    "predicted_sd_s": r.plan.makespan_sd_s,
                    "makespan_s": r.makespan_s,
                    "parts": r.parts.iter().map(|p| json!({
                        "server": p.server,
                        "first": p.first,
                        "units": p.units,
                        "predicted_s": p.predicted_s,
                        "actual_s": p.actual_s,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            json!({ "service": a.service, "units": a.units, "iterations": its })
        );
    } else {
        for (i, r) in runs.iter().enumerate() {
            if runs.len() > 1 {
                println!("iteration {}", i + 1);
            }
            println!(
                "{} units of {} over {} server(s): policy {}, servers from the `{}` ordering{}",
                a.units,
                a.service,
                r.parts.len(),
                r.plan.policy,
                r.plan.ordering,
                r.plan.slack.map_or(String::new(), |s| format!(
                    ", balance within {:.0}%",
                    s * 100.0
                ))
            );
            println!(
                "{:<16} {:>10} {:>10} {:>12} {:>12}",
                "server", "first", "units", "predicted s", "actual s"
            );
            for p in &r.parts {
                println!(
                    "{:<16} {:>10} {:>10} {:>12.4} {:>12.4}",
                    p.server, p.first, p.units, p.predicted_s, p.actual_s
                );
            }
            println!(
                "makespan: predicted {:.4} s (± {:.4}), actual {:.4} s",
                r.plan.makespan_s, r.plan.makespan_sd_s, r.makespan_s
            );
        }
    }
    if let (Some(path), Some(last)) = (a.gantt, runs.last()) {
        let servers: Vec<ChartServer> = last
            .parts
            .iter()
            .map(|p| ChartServer {
                name: p.server.clone(),
                slots: 1,
            })
            .collect();
        let tasks: Vec<(String, String)> = last
            .parts
            .iter()
            .map(|p| {
                (
                    format!("{}..{}", p.first, p.first + p.units),
                    a.service.to_string(),
                )
            })
            .collect();
        let timeline = |ends: &dyn Fn(usize) -> (f64, f64), makespan: f64| Timeline {
            policy: last.plan.policy.clone(),
            servers: servers.clone(),
            tasks: tasks.clone(),
            per_server: (0..last.parts.len())
                .map(|i| {
                    let (start_s, end_s) = ends(i);
                    vec![Slot {
                        task: i,
                        lane: 0,
                        start_s,
                        end_s,
                    }]
                })
                .collect(),
            makespan_s: makespan,
            lower_bound_s: 0.0,
        };
        let predicted = timeline(&|i| (0.0, last.parts[i].predicted_s), last.plan.makespan_s);
        let actual = timeline(
            &|i| {
                (
                    (last.parts[i].end_s - last.parts[i].actual_s).max(0.0),
                    last.parts[i].end_s,
                )
            },
            last.makespan_s,
        );
        gantt::draw_pair(&predicted, &actual, path, &format!("divide {}", a.service))?;
        if !a.json {
            println!("timeline: {}", path.display());
        }
    }
    Ok(())
}
