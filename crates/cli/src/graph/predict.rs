//! `gridwise graph predict`: what a graph file would take on the live grid, without running it.
//!
//! The file is recorded in a client graph exactly as `gridwise graph run` records it (`rand`
//! arrays sized but not filled) and the agent maps it without reserving anything: the same
//! mapping code, estimates, links and queues a run gets, so the prediction is the plan a run
//! made now would follow. This module only prints that plan and draws it.

use anyhow::{Context, Result, anyhow};
use gridwise_charts::gantt::{self, ChartServer, Slot, Timeline};
use gridwise_client::Client;
use gridwise_graphfile::{GraphFile, Rand, record};
use gridwise_proto::GraphPlan;
use gridwise_sched::GraphPolicy;
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;

/// Where the policy came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// `--policy`.
    Flag,
    /// The file's `policy`.
    File,
    /// The agent's default for the graph's shape.
    Default,
}

impl PolicySource {
    /// `--policy` wins over the file's policy; neither leaves the choice to the agent.
    pub fn of(flag: Option<GraphPolicy>, file: &GraphFile) -> PolicySource {
        match (flag, file.policy) {
            (Some(_), _) => PolicySource::Flag,
            (None, Some(_)) => PolicySource::File,
            (None, None) => PolicySource::Default,
        }
    }

    /// Its name in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicySource::Flag => "flag",
            PolicySource::File => "file",
            PolicySource::Default => "default",
        }
    }
}

/// The agent's plan for a graph file, with the file's names.
#[derive(Clone, Debug)]
pub struct Prediction {
    /// The agent's mapping and predicted timeline.
    pub plan: GraphPlan,
    /// Where its policy came from.
    pub policy_source: PolicySource,
    /// Each task's name and service, in file order (the plan's call order).
    pub tasks: Vec<(String, String)>,
    /// Data dependencies between tasks (task pairs, each once).
    pub dependencies: usize,
}

/// Asks the agent for the plan of `file` on the grid `client` talks to, reserving nothing.
/// `policy` overrides the file's.
pub fn predict(
    client: &Client,
    file: &GraphFile,
    policy: Option<GraphPolicy>,
) -> Result<Prediction> {
    let (g, _) = record(client, file, policy, Rand::SizeOnly)?;
    let plan = g.plan().map_err(|e| anyhow!("{e}"))?;
    Prediction::of(plan, PolicySource::of(policy, file), file)
}

impl Prediction {
    /// `plan` (the agent's, for `file`) with the file's task names.
    pub fn of(plan: GraphPlan, policy_source: PolicySource, file: &GraphFile) -> Result<Self> {
        let n = file.tasks.len();
        let m = plan.servers.len();
        if plan.server_of.len() != n
            || plan.start_s.len() != n
            || plan.end_s.len() != n
            || plan.lane.len() != n
            || plan.server_of.iter().any(|&s| s as usize >= m)
        {
            return Err(anyhow!(
                "the agent's plan does not fit the file: {} placed call(s) on {m} server(s) for \
                 {n} task(s); is the agent a different gridwise version?",
                plan.server_of.len()
            ));
        }
        Ok(Prediction {
            plan,
            policy_source,
            tasks: file
                .tasks
                .iter()
                .map(|t| (t.name.clone(), t.service.clone()))
                .collect(),
            dependencies: file.tasks.iter().map(|t| t.uses().len()).sum(),
        })
    }

    /// The predicted makespan, s.
    pub fn makespan_s(&self) -> f64 {
        self.plan.makespan_s
    }

    /// Each server's calls, in order of their predicted start.
    pub fn per_server(&self) -> Vec<Vec<Slot>> {
        let p = &self.plan;
        let mut per_server = vec![Vec::new(); p.servers.len()];
        for (t, &s) in p.server_of.iter().enumerate() {
            per_server[s as usize].push(Slot {
                task: t,
                lane: p.lane[t] as usize,
                start_s: p.start_s[t],
                end_s: p.end_s[t],
            });
        }
        for slots in &mut per_server {
            slots.sort_by(|a, b| a.start_s.total_cmp(&b.start_s).then(a.task.cmp(&b.task)));
        }
        per_server
    }

    /// The predicted timeline, for a Gantt chart.
    pub fn timeline(&self) -> Timeline {
        self.timeline_with(self.per_server(), self.plan.makespan_s)
    }

    /// A timeline on the plan's servers and tasks with other slots (e.g. what happened).
    pub fn timeline_with(&self, per_server: Vec<Vec<Slot>>, makespan_s: f64) -> Timeline {
        Timeline {
            policy: self.plan.policy.to_string(),
            servers: self
                .plan
                .servers
                .iter()
                .map(|s| ChartServer {
                    name: s.name.clone(),
                    slots: s.slots.max(1) as usize,
                })
                .collect(),
            tasks: self.tasks.clone(),
            per_server,
            makespan_s,
            lower_bound_s: self.plan.lower_bound_s,
        }
    }

    fn is_bag(&self) -> bool {
        self.dependencies == 0
    }

    /// One JSON object: the policy, makespan, bounds and per-server timeline.
    pub fn to_json(&self) -> serde_json::Value {
        let p = &self.plan;
        let per_server: Vec<_> = p
            .servers
            .iter()
            .zip(self.per_server())
            .map(|(s, slots)| {
                json!({
                    "server": s.name,
                    "slots": s.slots.max(1),
                    "tasks": slots.iter().map(|x| json!({
                        "task": self.tasks[x.task].0,
                        "start_s": x.start_s,
                        "end_s": x.end_s,
                        "lane": x.lane,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "policy": p.policy,
            "policy_source": self.policy_source.as_str(),
            "tasks": self.tasks.len(),
            "dependencies": self.dependencies,
            "servers": p.servers.len(),
            "makespan_s": p.makespan_s,
            "makespan_sd_s": p.makespan_sd_s,
            "makespan_interval90_s": p.makespan_interval90_s.map(|(lo, hi)| [lo, hi]),
            "lower_bound_s": p.lower_bound_s,
            "lower_bound_kind": p.lower_bound_kind,
            "makespan_over_bound": ratio(p.makespan_s, p.lower_bound_s),
            "critical_path_s": p.critical_path_s,
            "average_parallelism": p.average_parallelism,
            "total_work_s": p.total_work_s,
            "unknown_estimates": p.unknown.len(),
            "per_server": per_server,
        })
    }

    /// The plan's 90% makespan interval, when its estimates have spreads.
    pub fn interval_text(&self) -> String {
        interval_text(&self.plan, 4)
    }

    /// The report for people.
    pub fn render_text(&self) -> String {
        let p = &self.plan;
        let ms = p.makespan_s;
        let d = decimals(ms.max(p.lower_bound_s));
        let why = match self.policy_source {
            PolicySource::Flag => "from --policy",
            PolicySource::File => "from the file",
            PolicySource::Default if self.is_bag() => "default for independent calls",
            PolicySource::Default => "default for a graph with dependencies",
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} task(s), {} dependenc{}, {} live server(s)",
            self.tasks.len(),
            self.dependencies,
            if self.dependencies == 1 { "y" } else { "ies" },
            p.servers.len()
        );
        let _ = writeln!(out, "policy               {} ({why})", p.policy);
        let _ = writeln!(
            out,
            "predicted makespan   {ms:.d$} s{}",
            interval_text(p, d)
        );
        let _ = writeln!(
            out,
            "lower bound          {:.d$} s{}",
            p.lower_bound_s,
            bound_note(p, ms)
        );
        let _ = writeln!(
            out,
            "critical path        {:.d$} s (every task at its best time, free transfers)",
            p.critical_path_s
        );
        let _ = writeln!(
            out,
            "average parallelism  {:.2} (best-case work {:.d$} s / critical path)",
            p.average_parallelism, p.total_work_s
        );
        if !p.unknown.is_empty() {
            let _ = writeln!(
                out,
                "note: the agent has no estimate for {} of {} task/server pair(s) (no calibrated \
                 rate, model or past calls); each counts as an assumed time, so this is a guess \
                 until calls have run",
                p.unknown.len(),
                self.tasks.len() * p.servers.len()
            );
        }
        let width = self
            .tasks
            .iter()
            .map(|t| t.0.chars().count())
            .max()
            .unwrap_or(0)
            .max(4);
        let w2 = format!("{:.d$}", ms.max(0.0)).len();
        for (s, slots) in p.servers.iter().zip(self.per_server()) {
            let busy = slots.iter().fold(0.0, |b, x| b + (x.end_s - x.start_s));
            let _ = write!(
                out,
                "\n{} ({} slot{}): ",
                s.name,
                s.slots,
                if s.slots == 1 { "" } else { "s" },
            );
            if slots.is_empty() {
                let _ = writeln!(out, "idle");
            } else {
                let _ = writeln!(out, "{} task(s), busy {busy:.d$} s", slots.len());
            }
            for x in slots {
                let (name, service) = &self.tasks[x.task];
                let _ = writeln!(
                    out,
                    "  {name:<width$}  {:>w2$.d$} – {:>w2$.d$} s  {service}",
                    x.start_s,
                    x.end_s,
                    w2 = w2
                );
            }
        }
        out
    }
}

/// Decimals that show about four significant digits of times up to `max` seconds.
fn decimals(max: f64) -> usize {
    if !(max.is_finite() && max > 0.0) {
        return 3;
    }
    (3 - max.log10().floor() as i64).clamp(1, 6) as usize
}

/// What the graph commands check before connecting: the `--policy`, the file, the chart's format.
pub fn load_checked(
    path: &Path,
    policy: Option<&str>,
    gantt_out: Option<&Path>,
) -> Result<(Option<GraphPolicy>, GraphFile)> {
    let policy = policy
        .map(str::parse::<GraphPolicy>)
        .transpose()
        .map_err(|e| anyhow!("--policy: {e}"))?;
    let file = GraphFile::load(path)?;
    if let Some(out) = gantt_out {
        gantt::check_format(out)?;
    }
    Ok((policy, file))
}

/// The graph file's name, for chart titles.
pub fn chart_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

/// The command: loads `path`, asks the grid `connect` reaches for its plan, prints the report
/// (or JSON) and draws the Gantt chart if asked. The file and the chart's format are checked
/// before connecting.
pub fn run(
    path: &Path,
    policy: Option<&str>,
    as_json: bool,
    gantt_out: Option<&Path>,
    connect: impl FnOnce() -> Result<Client>,
) -> Result<()> {
    let (policy, file) = load_checked(path, policy, gantt_out)?;
    let client = connect()?;
    let p = predict(&client, &file, policy)
        .with_context(|| format!("predicting {}", path.display()))?;
    if let Some(out) = gantt_out {
        gantt::draw(&p.timeline(), out, &chart_name(path))?;
    }
    if as_json {
        println!("{}", p.to_json());
    } else {
        print!("{}: {}", path.display(), p.render_text());
        if let Some(out) = gantt_out {
            println!("\nGantt chart: {}", out.display());
        }
    }
    Ok(())
}

/// ", 90% interval a to b s" for a plan whose makespan has a spread; empty otherwise.
fn interval_text(p: &gridwise_proto::GraphPlan, d: usize) -> String {
    match p.makespan_interval90_s {
        Some((lo, hi)) => format!(" (90% interval {lo:.d$} to {hi:.d$} s)"),
        None => String::new(),
    }
}

/// `makespan ÷ bound`, or null when the bound is 0.
pub fn ratio(makespan_s: f64, bound_s: f64) -> serde_json::Value {
    if bound_s > 0.0 {
        json!(makespan_s / bound_s)
    } else {
        serde_json::Value::Null
    }
}

/// " (lp_window; makespan = 1.08 x bound)": which bound it is and how far `makespan_s` is.
pub fn bound_note(p: &GraphPlan, makespan_s: f64) -> String {
    let kind = if p.lower_bound_kind.is_empty() {
        "critical path / work"
    } else {
        p.lower_bound_kind.as_str()
    };
    if p.lower_bound_s > 0.0 {
        format!(
            " ({kind}; makespan = {:.2} x bound)",
            makespan_s / p.lower_bound_s
        )
    } else {
        format!(" ({kind})")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use gridwise_proto::{PlannedServer, ServerId};

    /// a → b, a → c: all three in a row on s1 (1 + 3 + 1 s), s2 idle.
    pub(crate) fn fork() -> (GraphFile, GraphPlan) {
        let file = GraphFile::parse(
            r#"{"tasks":[
            {"name":"a","service":"dgemm","args":[100,100,100,"rand","rand"]},
            {"name":"b","service":"dgemm","args":[100,100,100,{"from":"a","output":0},"rand"]},
            {"name":"c","service":"dgemm","args":[100,100,100,{"from":"a","output":0},"rand"]}]}"#,
        )
        .unwrap();
        let server = |name: &str, slots| PlannedServer {
            server_id: ServerId::new_random(),
            name: name.into(),
            addr: format!("{name}:1"),
            slots,
            default_rate: 1e9,
        };
        let plan = GraphPlan {
            makespan_interval90_s: None,
            makespan_sd_s: 0.0,
            policy: gridwise_proto::GraphPolicy::Heft,
            policy_requested: false,
            servers: vec![server("s1", 1), server("s2", 2)],
            server_of: vec![0, 0, 0],
            order: vec![vec![0, 2, 1], vec![]],
            tickets: vec![],
            etc: vec![1.0, 2.0, 1.0, f64::INFINITY, 3.0, f64::INFINITY],
            unknown: vec![],
            default_latency_s: 1e-4,
            default_bandwidth: 1e9,
            links: vec![],
            site_of: vec![],
            dispatch_s: 0.0,
            start_s: vec![0.0, 4.0, 1.0],
            end_s: vec![1.0, 5.0, 4.0],
            lane: vec![0, 0, 0],
            makespan_s: 5.0,
            lower_bound_s: 4.0,
            lower_bound_kind: "critical_path".into(),
            critical_path_s: 4.0,
            average_parallelism: 1.25,
            total_work_s: 5.0,
        };
        (file, plan)
    }

    #[test]
    fn prediction_reports_the_plan_in_start_order() {
        let (file, plan) = fork();
        let pred = Prediction::of(plan, PolicySource::of(None, &file), &file).unwrap();
        assert_eq!(pred.dependencies, 2);
        let j = pred.to_json();
        assert_eq!(j["policy"], "heft");
        assert_eq!(j["policy_source"], "default");
        assert_eq!(j["makespan_s"], 5.0);
        assert_eq!(j["lower_bound_s"], 4.0);
        assert_eq!(j["lower_bound_kind"], "critical_path");
        assert_eq!(j["makespan_over_bound"], 1.25);
        assert_eq!(j["per_server"][0]["server"], "s1");
        let order: Vec<&str> = (0..3)
            .map(|k| j["per_server"][0]["tasks"][k]["task"].as_str().unwrap())
            .collect();
        assert_eq!(order, ["a", "c", "b"], "by predicted start");
        assert_eq!(j["per_server"][0]["tasks"][2]["end_s"], 5.0);
        let text = pred.render_text();
        assert!(
            text.contains("policy               heft (default for a graph"),
            "{text}"
        );
        assert!(text.contains("predicted makespan   5.000 s"), "{text}");
        assert!(text.contains("s2 (2 slots): idle"), "{text}");
        assert!(text.contains("  a     0.000 – 1.000 s  dgemm"), "{text}");
        let t = pred.timeline();
        assert_eq!(t.tasks[2], ("c".to_string(), "dgemm".to_string()));
        assert_eq!(t.per_server[0].len(), 3);
        assert!(t.per_server[1].is_empty());
    }

    #[test]
    fn policy_source_and_plans_that_do_not_fit() {
        let (mut file, plan) = fork();
        assert_eq!(
            PolicySource::of(Some(GraphPolicy::Mct), &file),
            PolicySource::Flag
        );
        file.policy = Some(GraphPolicy::MinMin);
        assert_eq!(PolicySource::of(None, &file), PolicySource::File);
        let mut short = plan.clone();
        short.server_of.pop();
        assert!(Prediction::of(short, PolicySource::File, &file).is_err());
        let mut stray = plan;
        stray.server_of[0] = 7;
        let e = Prediction::of(stray, PolicySource::File, &file).unwrap_err();
        assert!(e.to_string().contains("does not fit the file"), "{e}");
    }

    #[test]
    fn decimals_keep_four_digits() {
        assert_eq!(decimals(0.05), 5);
        assert_eq!(decimals(0.4), 4);
        assert_eq!(decimals(4.0), 3);
        assert_eq!(decimals(420.0), 1);
        assert_eq!(decimals(0.0), 3);
    }
}
