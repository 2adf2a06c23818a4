//! `gridwise graph predict`: what a graph file would take on the live grid, without running it.
//!
//! 1. The file is checked against the services' descriptions and becomes a [`TaskGraph`]: each
//!    task's work is its service's complexity at its sizes, each dependency's edge carries the
//!    bytes of the producer's output (from the output's shape at the producer's sizes).
//! 2. The ETC matrix (tasks × the agent's live servers) holds each candidate's *compute* term of
//!    the agent's explanation for the task (`explain`): its functional performance model or
//!    calibrated rate at the task's sizes. Queue wait and the transfers to and from the client
//!    are left out on purpose: the queue belongs to the moment a call is submitted (and the
//!    graph's own calls are what will fill it — the replay accounts for those), and the data a
//!    graph moves goes server to server along its edges, which the communication model prices.
//!    A server that is not a candidate (it does not offer the service, or its model says the
//!    call cannot run there) gets an infinite ETC: the mappers never place a task there.
//! 3. The communication model starts uniform (0.1 ms latency, 1 GB/s, a loopback-like default)
//!    and takes every link the servers measured to each other (`gridwise links`).
//! 4. The policy (`--policy`, else the file's, else the best for the graph's shape) maps the
//!    graph; [`replay()`] walks that mapping to the predicted makespan and per-server timeline,
//!    and [`Bounds`] gives the critical path, average parallelism and a lower bound no mapping
//!    can beat.

use super::file::{GraphFile, ResolvedGraph};
use super::gantt;
use anyhow::{Context, Result, anyhow, bail};
use gridwise_client::Client;
use gridwise_proto::{Candidate, ComputeSource, LinkInfo, RankOptions, ServerState};
use gridwise_sched::{
    Bounds, CommModel, EtcMatrix, GraphPolicy, Mapping, Replay, TaskGraph, replay,
};
use serde_json::json;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// Latency assumed between servers whose link has not been measured, s.
pub const DEFAULT_LATENCY_S: f64 = 1e-4;
/// Bandwidth assumed between servers whose link has not been measured, bytes/s.
pub const DEFAULT_BANDWIDTH: f64 = 1e9;

/// A live server, as the mapping knows it (index = its column in the ETC matrix).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerInfo {
    /// Its name.
    pub name: String,
    /// Where it is reached (the key of its links).
    pub addr: String,
    /// Calls it runs at once.
    pub slots: usize,
    /// Its calibrated default rate, operations/s (0 if it did not calibrate).
    pub default_rate: f64,
}

/// What the agent says about the platform, in the mapping core's terms.
#[derive(Clone, Debug)]
pub struct Platform {
    /// The live servers, by column.
    pub servers: Vec<ServerInfo>,
    /// Compute time of every task on every server (infinite where it cannot run).
    pub etc: EtcMatrix,
    /// Server-to-server transfer costs.
    pub comm: CommModel,
    /// `(task, server)` pairs the agent had no estimate for (no calibrated rate, model or past
    /// calls, and no default rate to divide the work by): counted as 0 s, so the prediction is
    /// optimistic wherever they are used.
    pub unknown: Vec<(usize, usize)>,
}

impl Platform {
    /// A platform from the live servers, each task's work and candidates (from `explain`, in
    /// task order) and the measured links. Candidates are matched to servers by name, links by
    /// address; links to anything else (the agent) and unusable measurements are ignored. Where
    /// the agent knows nothing about a server's speed for a service, the task's work ÷ the
    /// server's default rate stands in, if it has one (else 0 s, listed in `unknown`).
    pub fn build(
        servers: Vec<ServerInfo>,
        work: &[f64],
        candidates: &[Vec<Candidate>],
        links: &[LinkInfo],
    ) -> Result<Platform> {
        if work.len() != candidates.len() {
            bail!(
                "{} work values for {} tasks' candidates",
                work.len(),
                candidates.len()
            );
        }
        let m = servers.len();
        let by_name: HashMap<&str, usize> = servers
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let mut values = vec![f64::INFINITY; candidates.len() * m];
        let mut unknown = Vec::new();
        for (t, cands) in candidates.iter().enumerate() {
            for c in cands {
                let Some(&s) = by_name.get(c.name.as_str()) else {
                    continue;
                };
                let mut compute = c.etc.compute_s;
                if matches!(c.etc.compute_source, ComputeSource::Assumed { .. }) {
                    let rate = servers[s].default_rate;
                    if work[t] > 0.0 && rate.is_finite() && rate > 0.0 {
                        compute = work[t] / rate;
                    } else {
                        unknown.push((t, s));
                    }
                }
                if compute.is_finite() && compute >= 0.0 {
                    values[t * m + s] = compute;
                }
            }
        }
        let etc = EtcMatrix::new(candidates.len(), m, values)?
            .with_slots(servers.iter().map(|s| s.slots.max(1)).collect())?;
        let mut comm = CommModel::uniform(m, DEFAULT_LATENCY_S, DEFAULT_BANDWIDTH)?;
        let by_addr: HashMap<&str, usize> = servers
            .iter()
            .enumerate()
            .map(|(i, s)| (s.addr.as_str(), i))
            .collect();
        for l in links {
            let (Some(&a), Some(&b)) = (
                by_addr.get(l.from.as_str()),
                by_addr.get(l.sample.to.as_str()),
            ) else {
                continue;
            };
            if a != b {
                // A measurement that cannot be a link (negative, NaN, zero bandwidth) keeps the
                // default rather than failing the prediction.
                let _ = comm.set_link(a, b, l.sample.latency_s, l.sample.bandwidth_bytes_per_s);
            }
        }
        Ok(Platform {
            servers,
            etc,
            comm,
            unknown,
        })
    }
}

/// Where the policy came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// `--policy`.
    Flag,
    /// The file's `policy`.
    File,
    /// [`GraphPolicy::default_for`] the graph's shape.
    Default,
}

impl PolicySource {
    /// Its name in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicySource::Flag => "flag",
            PolicySource::File => "file",
            PolicySource::Default => "default",
        }
    }
}

/// A graph mapped and replayed: the predicted execution.
#[derive(Clone, Debug)]
pub struct Prediction {
    /// The policy that mapped it.
    pub policy: GraphPolicy,
    /// Where that policy came from.
    pub policy_source: PolicySource,
    /// The graph (task index = file order).
    pub graph: TaskGraph,
    /// Servers, ETC matrix and links it was mapped on.
    pub platform: Platform,
    /// Which server runs each task, in which order.
    pub mapping: Mapping,
    /// The predicted execution: makespan and per-server timeline.
    pub replay: Replay,
    /// Critical path, average parallelism, lower bound.
    pub bounds: Bounds,
}

/// Predicts `file` on the grid `client` talks to: descriptions, estimates and links from the
/// agent, then [`predict_on`]. `policy` overrides the file's.
pub fn predict(
    client: &Client,
    file: &GraphFile,
    policy: Option<GraphPolicy>,
) -> Result<Prediction> {
    let resolved = file.resolve(|svc| Ok(client.describe(svc)?))?;
    let platform = platform(client, file, &resolved)?;
    predict_on(resolved.graph, file.policy, platform, policy)
}

/// Asks the agent for the live servers, every task's candidates and the links.
pub fn platform(client: &Client, file: &GraphFile, resolved: &ResolvedGraph) -> Result<Platform> {
    let status = client
        .status()
        .context("asking the agent for its servers")?;
    let servers: Vec<ServerInfo> = status
        .servers
        .iter()
        .filter(|s| s.state == ServerState::Up)
        .map(|s| ServerInfo {
            name: s.name.clone(),
            addr: s.addr.clone(),
            slots: s.slots.max(1) as usize,
            default_rate: s.default_rate,
        })
        .collect();
    if servers.is_empty() {
        bail!(
            "the agent has no live server ({} known, all down); start servers first",
            status.servers.len()
        );
    }
    let mut candidates = Vec::with_capacity(resolved.tasks.len());
    for (spec, task) in file.tasks.iter().zip(&resolved.tasks) {
        let profile = task
            .desc
            .profile_for_sizes(&task.sizes)
            .map_err(|e| anyhow!("task `{}`: {e}", spec.name))?;
        let cands = client
            .explain(profile, RankOptions::default())
            .with_context(|| {
                format!(
                    "task `{}`: asking the agent for `{}`'s estimates",
                    spec.name, spec.service
                )
            })?;
        candidates.push(cands);
    }
    let links = client
        .link_matrix()
        .context("asking the agent for the links")?;
    let work: Vec<f64> = resolved.tasks.iter().map(|t| t.work).collect();
    Platform::build(servers, &work, &candidates, &links)
}

/// Maps `graph` on `platform` by `flag`, else `file_policy`, else the default for its shape,
/// and replays the mapping. Pure: no network.
pub fn predict_on(
    graph: TaskGraph,
    file_policy: Option<GraphPolicy>,
    platform: Platform,
    flag: Option<GraphPolicy>,
) -> Result<Prediction> {
    let (policy, policy_source) = match (flag, file_policy) {
        (Some(p), _) => (p, PolicySource::Flag),
        (None, Some(p)) => (p, PolicySource::File),
        (None, None) => (GraphPolicy::default_for(&graph), PolicySource::Default),
    };
    let rates: Vec<f64> = platform.servers.iter().map(|s| s.default_rate).collect();
    if policy == GraphPolicy::ConstantSpeed
        && let Some(s) = platform
            .servers
            .iter()
            .find(|s| !(s.default_rate.is_finite() && s.default_rate > 0.0))
    {
        bail!(
            "constant-speed divides work by each server's calibrated rate, but server `{}` has \
             none (started with calibrate = false?); choose another policy",
            s.name
        );
    }
    let (etc, comm) = (&platform.etc, &platform.comm);
    let mapping = policy
        .map(&graph, etc, comm, Some(&rates))
        .with_context(|| format!("mapping the graph with {policy}"))?;
    let replay = replay(&graph, etc, comm, &mapping).context("replaying the mapping")?;
    let bounds = Bounds::of(&graph, etc)?;
    Ok(Prediction {
        policy,
        policy_source,
        graph,
        platform,
        mapping,
        replay,
        bounds,
    })
}

impl Prediction {
    /// The predicted makespan, s.
    pub fn makespan_s(&self) -> f64 {
        self.replay.makespan_s
    }

    /// One JSON object: the policy, makespan, bounds and per-server timeline.
    pub fn to_json(&self) -> serde_json::Value {
        let per_server: Vec<_> = self
            .platform
            .servers
            .iter()
            .zip(&self.replay.per_server)
            .map(|(s, slots)| {
                json!({
                    "server": s.name,
                    "slots": s.slots,
                    "tasks": slots.iter().map(|x| json!({
                        "task": self.graph.task(x.task).name,
                        "start_s": x.start_s,
                        "end_s": x.end_s,
                        "lane": x.lane,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "policy": self.policy.name(),
            "policy_source": self.policy_source.as_str(),
            "tasks": self.graph.len(),
            "dependencies": self.graph.edge_count(),
            "servers": self.platform.servers.len(),
            "makespan_s": self.replay.makespan_s,
            "lower_bound_s": self.bounds.lower_bound_s,
            "critical_path_s": self.bounds.critical_path_s,
            "average_parallelism": self.bounds.average_parallelism,
            "total_work_s": self.bounds.total_work_s,
            "unknown_estimates": self.platform.unknown.len(),
            "per_server": per_server,
        })
    }

    /// The report for people.
    pub fn render_text(&self) -> String {
        let b = &self.bounds;
        let ms = self.replay.makespan_s;
        let d = decimals(ms.max(b.lower_bound_s));
        let why = match self.policy_source {
            PolicySource::Flag => "from --policy".to_string(),
            PolicySource::File => "from the file".to_string(),
            PolicySource::Default if self.graph.is_bag() => {
                "default for independent calls".to_string()
            }
            PolicySource::Default => "default for a graph with dependencies".to_string(),
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} task(s), {} dependenc{}, {} live server(s)",
            self.graph.len(),
            self.graph.edge_count(),
            if self.graph.edge_count() == 1 {
                "y"
            } else {
                "ies"
            },
            self.platform.servers.len()
        );
        let _ = writeln!(out, "policy               {} ({why})", self.policy);
        let _ = writeln!(out, "predicted makespan   {ms:.d$} s");
        let ratio = if b.lower_bound_s > 0.0 {
            format!(" (makespan = {:.2} x bound)", ms / b.lower_bound_s)
        } else {
            String::new()
        };
        let _ = writeln!(out, "lower bound          {:.d$} s{ratio}", b.lower_bound_s);
        let _ = writeln!(
            out,
            "critical path        {:.d$} s (every task at its best time, free transfers)",
            b.critical_path_s
        );
        let _ = writeln!(
            out,
            "average parallelism  {:.2} (best-case work {:.d$} s / critical path)",
            b.average_parallelism, b.total_work_s
        );
        if !self.platform.unknown.is_empty() {
            let _ = writeln!(
                out,
                "note: the agent has no estimate for {} of {} task/server pair(s) (no calibrated \
                 rate, model or past calls); they count as 0 s, so this is optimistic",
                self.platform.unknown.len(),
                self.graph.len() * self.platform.servers.len()
            );
        }
        let width = self
            .graph
            .tasks()
            .map(|t| t.name.chars().count())
            .max()
            .unwrap_or(0)
            .max(4);
        let w2 = format!("{:.d$}", ms.max(0.0)).len();
        for (s, slots) in self.platform.servers.iter().zip(&self.replay.per_server) {
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
                let t = self.graph.task(x.task);
                let _ = writeln!(
                    out,
                    "  {:<width$}  {:>w2$.d$} – {:>w2$.d$} s  {}",
                    t.name,
                    x.start_s,
                    x.end_s,
                    t.service,
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

/// The command: loads `path`, predicts it on the grid `connect` reaches, prints the report (or
/// JSON) and draws the Gantt chart if asked. The file and the chart's format are checked before
/// connecting.
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
        gantt::draw(&p, out, &chart_name(path))?;
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use gridwise_proto::{ComputeSource, Etc, LinkSample, ServerId};

    fn server(name: &str, slots: usize) -> ServerInfo {
        ServerInfo {
            name: name.into(),
            addr: format!("{name}:1"),
            slots,
            default_rate: 1e9,
        }
    }

    fn cand(name: &str, compute_s: f64) -> Candidate {
        Candidate {
            server_id: ServerId::new_random(),
            name: name.into(),
            addr: format!("{name}:1"),
            etc: Etc {
                queue_wait_s: 100.0,
                transfer_in_s: 100.0,
                compute_s,
                transfer_out_s: 100.0,
                compute_source: ComputeSource::CalibratedRate { rate: 1e9 },
            },
        }
    }

    fn link(from: &str, to: &str, latency_s: f64, bw: f64) -> LinkInfo {
        LinkInfo {
            from: format!("{from}:1"),
            sample: LinkSample {
                to: to.into(),
                latency_s,
                bandwidth_bytes_per_s: bw,
            },
            age_s: 0.0,
        }
    }

    /// a → b, a → c on two servers; `b` only on s1.
    pub(crate) fn fork() -> (TaskGraph, Platform) {
        let text = r#"{"tasks":[
            {"name":"a","service":"dgemm","args":[100,100,100,"rand","rand"]},
            {"name":"b","service":"dgemm","args":[100,100,100,{"from":"a","output":0},"rand"]},
            {"name":"c","service":"dgemm","args":[100,100,100,{"from":"a","output":0},"rand"]}]}"#;
        let r = GraphFile::parse(text)
            .unwrap()
            .resolve(|_| Ok(gridwise_kernels::builtin("dgemm").unwrap().desc().clone()))
            .unwrap();
        let work: Vec<f64> = r.tasks.iter().map(|t| t.work).collect();
        let p = Platform::build(
            vec![server("s1", 1), server("s2", 2)],
            &work,
            &[
                vec![cand("s1", 1.0), cand("s2", 2.0)],
                vec![cand("s1", 1.0), cand("gone", 0.1)],
                vec![cand("s2", f64::INFINITY), cand("s1", 3.0)],
            ],
            &[
                link("s1", "s2:1", 0.5, 80_000.0),
                link("s1", "agent:9", 9.0, 1.0),
                link("s2", "s1:1", -1.0, 1.0),
            ],
        )
        .unwrap();
        (r.graph, p)
    }

    #[test]
    fn platform_takes_compute_only_and_measured_links() {
        let (_, p) = fork();
        let e = &p.etc;
        assert_eq!(e.row(0), [1.0, 2.0]);
        assert_eq!(
            e.row(1),
            [1.0, f64::INFINITY],
            "not a candidate: cannot run"
        );
        assert_eq!(
            e.row(2),
            [3.0, f64::INFINITY],
            "infinite compute: cannot run"
        );
        assert_eq!(e.all_slots(), [1, 2]);
        // 80 kB edge (100x100 f64) over the measured s1 → s2 link: 0.5 s + 1 s.
        assert!((p.comm.transfer_s(0, 1, 80_000) - 1.5).abs() < 1e-12);
        // The unusable s2 → s1 measurement keeps the default.
        let want = DEFAULT_LATENCY_S + 80_000.0 / DEFAULT_BANDWIDTH;
        assert!((p.comm.transfer_s(1, 0, 80_000) - want).abs() < 1e-12);
    }

    #[test]
    fn unknown_estimates_fall_back_to_the_default_rate_or_are_flagged() {
        let unknown = |name: &str| {
            let mut c = cand(name, 0.0);
            c.etc.compute_source = ComputeSource::Assumed { seconds: 0.0 };
            c
        };
        let mut slow = server("s2", 1);
        slow.default_rate = 0.0;
        let p = Platform::build(
            vec![server("s1", 1), slow],
            &[2e9],
            &[vec![unknown("s1"), unknown("s2")]],
            &[],
        )
        .unwrap();
        assert_eq!(p.etc.row(0), [2.0, 0.0], "2e9 ops at 1e9 ops/s; no rate: 0");
        assert_eq!(p.unknown, [(0, 1)]);
        assert!(Platform::build(vec![server("s1", 1)], &[], &[vec![]], &[]).is_err());
    }

    #[test]
    fn prediction_places_every_task_and_respects_the_bounds() {
        let (g, p) = fork();
        let pred = predict_on(g, None, p, None).unwrap();
        assert_eq!(pred.policy, GraphPolicy::Heft);
        assert_eq!(pred.policy_source, PolicySource::Default);
        // b and c run on s1 only, and a waits less there than on s2 plus a transfer: all
        // three in a row on s1, 1 + 3 + 1 = 5 s.
        assert_eq!(pred.mapping.server_of, [0, 0, 0]);
        assert_eq!(pred.makespan_s(), 5.0);
        assert_eq!(pred.bounds.critical_path_s, 4.0);
        assert!(pred.makespan_s() >= pred.bounds.lower_bound_s);
        let j = pred.to_json();
        for k in [
            "policy",
            "makespan_s",
            "lower_bound_s",
            "critical_path_s",
            "average_parallelism",
            "per_server",
        ] {
            assert!(j.get(k).is_some(), "{k} missing in {j}");
        }
        assert_eq!(j["per_server"][0]["server"], "s1");
        assert_eq!(j["per_server"][0]["tasks"][0]["task"], "a");
        assert_eq!(j["per_server"][0]["tasks"][2]["end_s"], 5.0);
        let text = pred.render_text();
        assert!(
            text.contains("policy               heft (default for a graph"),
            "{text}"
        );
        assert!(text.contains("predicted makespan   5.000 s"), "{text}");
        assert!(text.contains("s2 (2 slots): idle"), "{text}");
        assert!(text.contains("  a     0.000 – 1.000 s  dgemm"), "{text}");
    }

    #[test]
    fn policy_precedence_and_constant_speed_rates() {
        let (g, p) = fork();
        let pred = predict_on(g.clone(), Some(GraphPolicy::Mct), p.clone(), None).unwrap();
        assert_eq!(
            (pred.policy, pred.policy_source),
            (GraphPolicy::Mct, PolicySource::File)
        );
        let pred = predict_on(
            g.clone(),
            Some(GraphPolicy::Mct),
            p.clone(),
            Some(GraphPolicy::RoundRobin),
        )
        .unwrap();
        assert_eq!(
            (pred.policy, pred.policy_source),
            (GraphPolicy::RoundRobin, PolicySource::Flag)
        );
        let mut p0 = p;
        p0.servers[1].default_rate = 0.0;
        let e = predict_on(g, None, p0, Some(GraphPolicy::ConstantSpeed)).unwrap_err();
        assert!(e.to_string().contains("server `s2` has none"), "{e}");
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
