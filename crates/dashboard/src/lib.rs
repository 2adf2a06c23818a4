//! The agent's web dashboard (`--dashboard ADDR`): one page (`/`, plain HTML and JavaScript,
//! no build step) that draws the servers, the progress of recent graphs and divisible jobs, a
//! Gantt of recent calls, each server's utilisation and prediction error over time, graphs
//! with the plan beside what ran, each service's speed curves with their bands, and the links
//! matrix. It reads `/api/snapshot` once and then follows `/api/events` (server-sent events,
//! one snapshot a second while something changed).
//!
//! The agent hands this crate a function that builds a snapshot from its core and records
//! finished calls and mapped graphs here; snapshots are built only while a page is connected.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use futures::Stream;
use gridwise_proto::{AgentStatus, CallReport, GraphPlan, GraphRequest, LinkInfo, ModelExport};
use serde::Serialize;
use serde_json::{Value as Json, json};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;

pub mod progress;
use progress::{PlannedCall, Progress, progress};

/// Calls kept for the Gantt.
const RECENT_CALLS: usize = 400;
/// Graphs kept, and divisible jobs.
const RECENT_GRAPHS: usize = 8;
/// How often a connected page may get a new snapshot.
const PERIOD: Duration = Duration::from_secs(1);

const PAGE: &str = include_str!("page.html");

fn unix_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A finished call, as the Gantt draws it.
#[derive(Clone, Debug, Serialize)]
pub struct CallRecord {
    pub server: String,
    pub service: String,
    pub ok: bool,
    /// When the server's report reached the agent (close to the call's end), Unix s.
    pub end_unix_s: f64,
    /// Its time on the server: queue, input transfer, kernel.
    pub server_s: f64,
    pub queue_wait_s: f64,
    pub kernel_s: f64,
    /// The kernel time it was ranked with, when known.
    pub predicted_kernel_s: Option<f64>,
    /// Its assignment (as text: JavaScript numbers lose 64-bit integers).
    pub ticket: Option<String>,
    /// Its size parameters (a divisible job's parts are told apart by them).
    #[serde(skip)]
    pub sizes: Vec<(String, i64)>,
}

/// A graph as mapped: each call's planned server and times.
#[derive(Clone, Debug, Serialize)]
pub struct GraphRecord {
    pub mapped_unix_s: f64,
    pub policy: String,
    pub makespan_s: f64,
    pub tasks: Vec<GraphTask>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GraphTask {
    pub name: String,
    pub server: String,
    pub start_s: f64,
    pub end_s: f64,
    pub ticket: Option<String>,
}

/// A divisible job as cut: its parts run as calls of `service` pinned to their servers, the
/// unit parameter set to their units.
#[derive(Clone, Debug)]
pub struct DivideRecord {
    pub mapped_unix_s: f64,
    pub service: String,
    pub units: u64,
    pub unit_param: String,
    pub policy: String,
    pub parts: Vec<gridwise_proto::DividePart>,
}

/// What the agent tells the dashboard, and who is watching.
#[derive(Default)]
pub struct Dashboard {
    calls: Mutex<VecDeque<CallRecord>>,
    graphs: Mutex<VecDeque<GraphRecord>>,
    divides: Mutex<VecDeque<DivideRecord>>,
    /// Bumped by every record: a page gets a new snapshot only when it moved.
    version: AtomicU64,
    watchers: AtomicUsize,
}

/// Appends `item`, dropping the oldest once `keep` are held.
fn keep_last<T>(list: &Mutex<VecDeque<T>>, keep: usize, item: T) {
    let mut list = lock(list);
    if list.len() == keep {
        list.pop_front();
    }
    list.push_back(item);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Dashboard {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Pages connected now.
    pub fn watchers(&self) -> usize {
        self.watchers.load(Ordering::Relaxed)
    }

    /// A server's reports, with the kernel time each call was ranked with (aligned).
    pub fn reported(&self, server: &str, reports: &[CallReport], predicted: &[Option<f64>]) {
        let now = unix_s();
        let mut calls = lock(&self.calls);
        for (i, r) in reports.iter().enumerate() {
            if calls.len() == RECENT_CALLS {
                calls.pop_front();
            }
            calls.push_back(CallRecord {
                server: server.to_string(),
                service: r.service.clone(),
                ok: r.ok,
                end_unix_s: now,
                server_s: r.timing.server_s,
                queue_wait_s: r.timing.queue_wait_s,
                kernel_s: r.timing.kernel_s,
                predicted_kernel_s: predicted.get(i).copied().flatten(),
                ticket: r.ticket.map(|t| t.0.to_string()),
                sizes: r.sizes.clone(),
            });
        }
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    /// A graph the agent mapped (kept only when it reserved: its calls then report tickets
    /// the page can match to the plan).
    pub fn mapped(&self, request: &GraphRequest, plan: &GraphPlan) {
        if plan.tickets.is_empty() {
            return;
        }
        let tasks = (0..plan.server_of.len())
            .map(|i| GraphTask {
                name: request
                    .calls
                    .get(i)
                    .map_or_else(|| format!("call {i}"), |c| c.name.clone()),
                server: plan
                    .servers
                    .get(plan.server_of[i] as usize)
                    .map_or_else(String::new, |s| s.name.clone()),
                start_s: plan.start_s.get(i).copied().unwrap_or(0.0),
                end_s: plan.end_s.get(i).copied().unwrap_or(0.0),
                ticket: plan.tickets.get(i).map(|t| t.0.to_string()),
            })
            .collect();
        keep_last(
            &self.graphs,
            RECENT_GRAPHS,
            GraphRecord {
                mapped_unix_s: unix_s(),
                policy: plan.policy.to_string(),
                makespan_s: plan.makespan_s,
                tasks,
            },
        );
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    /// A divisible job the agent cut.
    pub fn divided(
        &self,
        request: &gridwise_proto::DivideRequest,
        reply: &gridwise_proto::DivideReply,
    ) {
        keep_last(
            &self.divides,
            RECENT_GRAPHS,
            DivideRecord {
                mapped_unix_s: unix_s(),
                service: request.service.clone(),
                units: request.units,
                unit_param: request.unit_param.clone(),
                policy: reply.policy.clone(),
                parts: reply.parts.clone(),
            },
        );
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    /// The progress at `now_unix_s` of every recent graph and divisible job, newest first.
    pub fn progress(&self, now_unix_s: f64) -> Vec<Progress> {
        let calls = lock(&self.calls);
        let mut out: Vec<(f64, Progress)> = Vec::new();
        for g in lock(&self.graphs).iter() {
            let planned: Vec<PlannedCall> = g
                .tasks
                .iter()
                .map(|t| PlannedCall {
                    start_s: t.start_s,
                    end_s: t.end_s,
                    reported: t.ticket.as_ref().and_then(|k| {
                        calls
                            .iter()
                            .find(|c| c.ticket.as_ref() == Some(k))
                            .map(|c| c.ok)
                    }),
                })
                .collect();
            let what = format!("graph ({}), {} calls", g.policy, g.tasks.len());
            out.push((
                g.mapped_unix_s,
                progress(what, &planned, now_unix_s - g.mapped_unix_s),
            ));
        }
        for d in lock(&self.divides).iter() {
            // A part is the first call after the cut of its service on its server with its
            // units; each report answers one part.
            let mut used = vec![false; calls.len()];
            let planned: Vec<PlannedCall> = d
                .parts
                .iter()
                .map(|p| {
                    let units = i64::try_from(p.units).unwrap_or(i64::MAX);
                    let hit = calls.iter().enumerate().position(|(i, c)| {
                        !used[i]
                            && c.end_unix_s >= d.mapped_unix_s
                            && c.server == p.server
                            && c.service == d.service
                            && c.sizes
                                .iter()
                                .any(|(k, v)| *k == d.unit_param && *v == units)
                    });
                    if let Some(i) = hit {
                        used[i] = true;
                    }
                    PlannedCall {
                        start_s: 0.0,
                        end_s: p.predicted_s,
                        reported: hit.map(|i| calls[i].ok),
                    }
                })
                .collect();
            let what = format!(
                "divide {} {} {} ({}), {} part{}",
                d.service,
                d.units,
                d.unit_param,
                d.policy,
                d.parts.len(),
                if d.parts.len() == 1 { "" } else { "s" }
            );
            out.push((
                d.mapped_unix_s,
                progress(what, &planned, now_unix_s - d.mapped_unix_s),
            ));
        }
        out.sort_by(|a, b| b.0.total_cmp(&a.0));
        out.into_iter().map(|(_, p)| p).collect()
    }

    /// The recent calls and graphs, and the progress of every plan, as the page reads them.
    pub fn recent(&self) -> Json {
        json!({
            "calls": lock(&self.calls).iter().collect::<Vec<_>>(),
            "graphs": lock(&self.graphs).iter().collect::<Vec<_>>(),
            "progress": self.progress(unix_s()),
        })
    }
}

/// What only the agent's core knows, as it stands.
pub struct CoreView {
    pub status: AgentStatus,
    /// The models drawn, with their points.
    pub models: Vec<ModelExport>,
    pub links: Vec<LinkInfo>,
    /// Per server: the forecast CPU availability its estimates use, and its expected error.
    pub forecast_availability: Vec<(String, f64, f64)>,
}

/// Reads a [`CoreView`] from the agent.
pub type Snapshot = Arc<dyn Fn() -> CoreView + Send + Sync>;

#[derive(Clone)]
struct App {
    dash: Arc<Dashboard>,
    snapshot: Snapshot,
}

impl App {
    /// The page's snapshot: the core's view (each model's points by its first size, with the
    /// band of measured speeds) and the recent calls and graphs.
    fn full(&self) -> Json {
        let v = (self.snapshot)();
        let models: Vec<Json> = v
            .models
            .iter()
            .map(|m| {
                let points: Vec<Json> = m
                    .points
                    .iter()
                    .filter(|(_, st)| st.count > 0)
                    .map(|(x, st)| {
                        let (lo, hi) = band(st);
                        json!({
                            "x": x.first().copied().unwrap_or(0),
                            "lo": lo, "mean": st.mean, "hi": hi,
                        })
                    })
                    .collect();
                json!({
                    "server": m.server, "service": m.service, "params": m.params, "points": points,
                })
            })
            .collect();
        let forecasts: serde_json::Map<String, Json> = v
            .forecast_availability
            .iter()
            .map(|(name, mean, sd)| (name.clone(), json!({"mean": mean, "sd": sd})))
            .collect();
        json!({
            "policy": v.status.policy,
            "ranked": v.status.ranked,
            "servers": v.status.servers,
            "models": models,
            "links": v.links,
            "forecast_availability": forecasts,
            "recent": self.dash.recent(),
            "now_unix_s": unix_s(),
        })
    }
}

/// The band drawn around a point's mean speed: one standard deviation of its runs each way,
/// within the fastest and slowest run. The whole range is not drawn: one timing of a tiny
/// call that the clock cut short made a dgemm model's band reach 183 Gop/s on a server whose
/// runs averaged 37.
fn band(st: &gridwise_proto::PointStats) -> (f64, f64) {
    let lo = (st.mean - st.sd).max(st.min).min(st.mean);
    let hi = (st.mean + st.sd).min(st.max).max(st.mean);
    (lo, hi)
}

/// Counts a page as watching while its event stream lives.
struct Watching(Arc<Dashboard>);

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn page() -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], Html(PAGE))
}

async fn snapshot(State(app): State<App>) -> impl IntoResponse {
    axum::Json(app.full())
}

async fn events(
    State(app): State<App>,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    app.dash.watchers.fetch_add(1, Ordering::Relaxed);
    let guard = Watching(app.dash.clone());
    let stream = futures::stream::unfold(
        (app, guard, u64::MAX, true),
        |(app, guard, seen, first)| async move {
            if !first {
                tokio::time::sleep(PERIOD).await;
            }
            let mut quiet = 0;
            loop {
                let v = app.dash.version.load(Ordering::Relaxed);
                // Servers' states and loads change without calls: a fresh snapshot every few
                // seconds even when no call finished.
                if v != seen || quiet >= 4 {
                    let data = app.full().to_string();
                    let ev = Event::default().event("snapshot").data(data);
                    return Some((Ok(ev), (app, guard, v, false)));
                }
                quiet += 1;
                tokio::time::sleep(PERIOD).await;
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Serves the dashboard on `listener` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    dash: Arc<Dashboard>,
    snapshot: Snapshot,
) -> anyhow::Result<()> {
    let app = Router::new()
        .route("/", get(page))
        .route("/api/snapshot", get(self::snapshot))
        .route("/api/events", get(events))
        .with_state(App { dash, snapshot });
    axum::serve(listener, app).await?;
    Ok(())
}

/// Binds `addr` for [`serve`], with an error that names the setting.
pub async fn bind(addr: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        anyhow::anyhow!("cannot listen for the dashboard on {addr} (--dashboard): {e}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_points_band_is_its_spread_not_its_fastest_outlier() {
        let st = gridwise_proto::PointStats {
            count: 40,
            min: 30e9,
            mean: 37e9,
            max: 183e9,
            sd: 3e9,
        };
        assert_eq!(band(&st), (34e9, 40e9));
        // One run: no spread to draw.
        let one = gridwise_proto::PointStats {
            count: 1,
            min: 5e9,
            mean: 5e9,
            max: 5e9,
            sd: 0.0,
        };
        assert_eq!(band(&one), (5e9, 5e9));
    }

    #[test]
    fn a_divisible_jobs_parts_are_done_when_their_calls_report() {
        let d = Dashboard::default();
        let part = |server: &str, first, units, predicted_s| gridwise_proto::DividePart {
            server: server.into(),
            addr: String::new(),
            first,
            units,
            predicted_s,
            sd_s: 0.0,
            comm_s: 0.0,
        };
        let request = gridwise_proto::DivideRequest {
            service: "rows".into(),
            units: 100,
            unit_param: "m".into(),
            sizes: Vec::new(),
            in_bytes: (0, 0),
            out_bytes: (0, 0),
            comm: None,
            policy: None,
            servers: None,
            all: false,
            max_part: None,
        };
        let reply = gridwise_proto::DivideReply {
            parts: vec![part("a", 0, 60, 1.0), part("b", 60, 40, 1.0)],
            makespan_s: 1.0,
            makespan_sd_s: 0.0,
            policy: "fpm".into(),
            ordering: String::new(),
            slack: None,
        };
        d.divided(&request, &reply);
        let report = gridwise_proto::CallReport {
            ticket: None,
            service: "rows".into(),
            sizes: vec![("m".into(), 60)],
            timing: Default::default(),
            ok: true,
            cpu_available: None,
            client_in_bytes: None,
        };
        d.reported("a", std::slice::from_ref(&report), &[None]);
        // Another server's call of the same size is not part b.
        d.reported(
            "c",
            &[CallReport {
                sizes: vec![("m".into(), 40)],
                ..report.clone()
            }],
            &[None],
        );
        let p = &d.progress(unix_s() + 0.5)[0];
        assert_eq!(
            (p.calls, p.done, p.running, p.waiting),
            (2, 1, 1, 0),
            "{p:?}"
        );
        assert!(p.what.starts_with("divide rows 100 m (fpm)"), "{}", p.what);
        assert!(p.left_s > 0.0 && p.left_s <= 0.5 + 1e-3, "{p:?}");
    }
}
