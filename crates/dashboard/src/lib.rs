//! The agent's web dashboard (`--dashboard ADDR`): one page (`/`, plain HTML and JavaScript,
//! no build step) that draws the servers, each service's speed curves with their bands, a Gantt
//! of recent calls and graphs with the prediction beside what ran, and the links matrix. It
//! reads `/api/snapshot` once and then follows `/api/events` (server-sent events, one snapshot
//! a second while something changed).
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

/// Calls kept for the Gantt.
const RECENT_CALLS: usize = 400;
/// Graphs kept.
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

/// What the agent tells the dashboard, and who is watching.
#[derive(Default)]
pub struct Dashboard {
    calls: Mutex<VecDeque<CallRecord>>,
    graphs: Mutex<VecDeque<GraphRecord>>,
    /// Bumped by every record: a page gets a new snapshot only when it moved.
    version: AtomicU64,
    watchers: AtomicUsize,
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
        let mut graphs = lock(&self.graphs);
        if graphs.len() == RECENT_GRAPHS {
            graphs.pop_front();
        }
        graphs.push_back(GraphRecord {
            mapped_unix_s: unix_s(),
            policy: plan.policy.to_string(),
            makespan_s: plan.makespan_s,
            tasks,
        });
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    /// The recent calls and graphs, as the page reads them.
    pub fn recent(&self) -> Json {
        json!({
            "calls": lock(&self.calls).iter().collect::<Vec<_>>(),
            "graphs": lock(&self.graphs).iter().collect::<Vec<_>>(),
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
                        json!({
                            "x": x.first().copied().unwrap_or(0),
                            "min": st.min, "mean": st.mean, "max": st.max,
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
