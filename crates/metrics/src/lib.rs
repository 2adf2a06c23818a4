//! What the agent and each server tell Prometheus (`--metrics ADDR`, `GET /metrics`, text
//! exposition format). The daemons record into these at the points where they already act
//! (a ranking, a report, a sweep, a call); nothing here decides anything.
//!
//! Names: `gridwise_agent_*` from the agent, `gridwise_server_*` from a server; counters end in
//! `_total`, times are seconds.

use axum::Router;
use axum::http::header;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use tokio::net::TcpListener;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceLabel {
    service: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabel {
    server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    service: String,
    server: String,
    /// `ok` or `failed`.
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    service: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

type Hist<L> = Family<L, Histogram, fn() -> Histogram>;

/// 10 µs to ~170 s: a no-op's ranking and an hour-long kernel both land in a bucket.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 2.5, 19))
}

/// |predicted − actual| / actual: 0.5% to ~500%.
fn ratio() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 11))
}

fn outcome(ok: bool) -> String {
    if ok { "ok" } else { "failed" }.to_string()
}

fn text(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, registry);
    out
}

/// The agent's metrics.
pub struct AgentMetrics {
    registry: Registry,
    ranked: Family<ServiceLabel, Counter>,
    rank_failed: Family<ServiceLabel, Counter>,
    rank_seconds: Histogram,
    calls: Family<CallLabels, Counter>,
    call_seconds: Hist<ServiceLabel>,
    prediction_error: Hist<ServiceLabel>,
    released: Counter,
    heartbeats_missed: Family<ServerLabel, Counter>,
    bytes_in: Family<ServerLabel, Counter>,
    queue_length: Family<ServerLabel, Gauge>,
    model_points: Family<ServerLabel, Gauge>,
    servers: Family<StateLabel, Gauge>,
    availability: Family<ServerLabel, Gauge<f64, AtomicU64>>,
}

impl AgentMetrics {
    pub fn new() -> Arc<Self> {
        let mut r = Registry::with_prefix("gridwise_agent");
        let m = AgentMetrics {
            ranked: Family::default(),
            rank_failed: Family::default(),
            rank_seconds: seconds(),
            calls: Family::default(),
            call_seconds: Family::new_with_constructor(seconds),
            prediction_error: Family::new_with_constructor(ratio),
            released: Counter::default(),
            heartbeats_missed: Family::default(),
            bytes_in: Family::default(),
            queue_length: Family::default(),
            model_points: Family::default(),
            servers: Family::default(),
            availability: Family::default(),
            registry: Registry::default(),
        };
        r.register(
            "calls_ranked",
            "Calls ranked, per service",
            m.ranked.clone(),
        );
        r.register(
            "rank_failures",
            "Rankings that found no server, per service",
            m.rank_failed.clone(),
        );
        r.register(
            "rank_seconds",
            "Time the agent took to rank one call",
            m.rank_seconds.clone(),
        );
        r.register(
            "calls",
            "Calls servers reported run, per service, server and outcome (ok, failed)",
            m.calls.clone(),
        );
        r.register(
            "call_seconds",
            "A call's time on its server (queue, input transfer, kernel), per service",
            m.call_seconds.clone(),
        );
        r.register(
            "prediction_error_ratio",
            "|predicted - actual| / actual of each call's kernel time, per service",
            m.prediction_error.clone(),
        );
        r.register(
            "calls_released",
            "Assignments clients gave back unrun: failed over to another server, or cancelled",
            m.released.clone(),
        );
        r.register(
            "heartbeats_missed",
            "Times a server fell silent past the heartbeat timeout and was marked down",
            m.heartbeats_missed.clone(),
        );
        r.register(
            "input_bytes",
            "Bytes clients sent to each server with their calls",
            m.bytes_in.clone(),
        );
        r.register(
            "queue_length",
            "Calls the agent has assigned to each server and not yet heard back about",
            m.queue_length.clone(),
        );
        r.register(
            "model_points",
            "Points in each server's performance models, all services together",
            m.model_points.clone(),
        );
        r.register("servers", "Servers known, per state", m.servers.clone());
        r.register(
            "cpu_available",
            "The fraction of a core a new call would get, as each server last measured it",
            m.availability.clone(),
        );
        Arc::new(AgentMetrics { registry: r, ..m })
    }

    /// A ranking of `service` took `secs`; `found` whether it found a server.
    pub fn ranked(&self, service: &str, secs: f64, found: bool) {
        let l = ServiceLabel {
            service: service.to_string(),
        };
        if found {
            self.ranked.get_or_create(&l).inc();
        } else {
            self.rank_failed.get_or_create(&l).inc();
        }
        self.rank_seconds.observe(secs);
    }

    /// A server reported a finished call.
    #[allow(clippy::too_many_arguments)]
    pub fn reported(
        &self,
        server: &str,
        service: &str,
        ok: bool,
        server_s: f64,
        predicted_kernel_s: Option<f64>,
        kernel_s: f64,
        input_bytes: Option<u64>,
    ) {
        self.calls
            .get_or_create(&CallLabels {
                service: service.to_string(),
                server: server.to_string(),
                outcome: outcome(ok),
            })
            .inc();
        let l = ServiceLabel {
            service: service.to_string(),
        };
        if ok {
            self.call_seconds.get_or_create(&l).observe(server_s);
            if let Some(p) = predicted_kernel_s
                && kernel_s > 0.0
                && p.is_finite()
            {
                self.prediction_error
                    .get_or_create(&l)
                    .observe((p - kernel_s).abs() / kernel_s);
            }
        }
        if let Some(b) = input_bytes {
            self.bytes_in
                .get_or_create(&ServerLabel {
                    server: server.to_string(),
                })
                .inc_by(b);
        }
    }

    pub fn released(&self) {
        self.released.inc();
    }

    pub fn marked_down(&self, server: &str) {
        self.heartbeats_missed
            .get_or_create(&ServerLabel {
                server: server.to_string(),
            })
            .inc();
    }

    /// The servers as the agent sees them now: name, state, queue length, model points and
    /// measured CPU availability. Servers gone since the last call disappear from the gauges.
    pub fn servers_now<'a>(
        &self,
        servers: impl IntoIterator<Item = (&'a str, &'a str, usize, usize, Option<f64>)>,
    ) {
        self.queue_length.clear();
        self.model_points.clear();
        self.servers.clear();
        self.availability.clear();
        for (name, state, queue, points, avail) in servers {
            let l = ServerLabel {
                server: name.to_string(),
            };
            self.queue_length.get_or_create(&l).set(queue as i64);
            self.model_points.get_or_create(&l).set(points as i64);
            if let Some(a) = avail {
                self.availability.get_or_create(&l).set(a);
            }
            self.servers
                .get_or_create(&StateLabel {
                    state: state.to_string(),
                })
                .inc();
        }
    }

    /// The exposition text.
    pub fn encode(&self) -> String {
        text(&self.registry)
    }
}

/// A server's metrics.
pub struct ServerMetrics {
    registry: Registry,
    calls: Family<OutcomeLabels, Counter>,
    call_seconds: Hist<ServiceLabel>,
    queue_wait_seconds: Hist<ServiceLabel>,
    bytes_in: Counter,
    bytes_out: Counter,
    running: Gauge,
    waiting: Gauge,
    cpu_share: Gauge<f64, AtomicU64>,
    cpu_pressure: Gauge<f64, AtomicU64>,
    cpu_quota: Gauge<f64, AtomicU64>,
}

impl ServerMetrics {
    pub fn new() -> Arc<Self> {
        let mut r = Registry::with_prefix("gridwise_server");
        let m = ServerMetrics {
            calls: Family::default(),
            call_seconds: Family::new_with_constructor(seconds),
            queue_wait_seconds: Family::new_with_constructor(seconds),
            bytes_in: Counter::default(),
            bytes_out: Counter::default(),
            running: Gauge::default(),
            waiting: Gauge::default(),
            cpu_share: Gauge::default(),
            cpu_pressure: Gauge::default(),
            cpu_quota: Gauge::default(),
            registry: Registry::default(),
        };
        r.register(
            "calls",
            "Calls executed, per service and outcome (ok, failed)",
            m.calls.clone(),
        );
        r.register(
            "call_seconds",
            "A call's time here from arrival to its reply (queue, transfer, kernel), per service",
            m.call_seconds.clone(),
        );
        r.register(
            "queue_wait_seconds",
            "Time calls waited for a slot, per service",
            m.queue_wait_seconds.clone(),
        );
        r.register(
            "input_bytes",
            "Bytes of call inputs received",
            m.bytes_in.clone(),
        );
        r.register(
            "output_bytes",
            "Bytes of call outputs sent",
            m.bytes_out.clone(),
        );
        r.register(
            "calls_running",
            "Calls running a kernel now",
            m.running.clone(),
        );
        r.register(
            "calls_waiting",
            "Calls waiting for a slot or memory now",
            m.waiting.clone(),
        );
        r.register(
            "cpu_share",
            "The fraction of a core each thread of a new call would get now, as the server reports it to the agent",
            m.cpu_share.clone(),
        );
        r.register(
            "cpu_pressure",
            "The fraction of the last sampling period in which some task on the host waited for a core (PSI some); NaN where the kernel does not count it",
            m.cpu_pressure.clone(),
        );
        r.register(
            "cpu_quota_cores",
            "The cores the server's control group may use (its CPU quota); 0 without one",
            m.cpu_quota.clone(),
        );
        Arc::new(ServerMetrics { registry: r, ..m })
    }

    /// A call finished here.
    pub fn call(
        &self,
        service: &str,
        ok: bool,
        secs: f64,
        queue_wait_s: f64,
        in_bytes: u64,
        out_bytes: u64,
    ) {
        self.calls
            .get_or_create(&OutcomeLabels {
                service: service.to_string(),
                outcome: outcome(ok),
            })
            .inc();
        let l = ServiceLabel {
            service: service.to_string(),
        };
        self.call_seconds.get_or_create(&l).observe(secs);
        self.queue_wait_seconds
            .get_or_create(&l)
            .observe(queue_wait_s);
        self.bytes_in.inc_by(in_bytes);
        self.bytes_out.inc_by(out_bytes);
    }

    /// Calls running and waiting now.
    pub fn occupancy(&self, running: usize, waiting: usize) {
        self.running.set(running as i64);
        self.waiting.set(waiting as i64);
    }

    /// What the server's CPU sensors read now.
    pub fn cpu(&self, share: Option<f64>, pressure: Option<f64>, quota_cores: Option<f64>) {
        self.cpu_share.set(share.unwrap_or(f64::NAN));
        self.cpu_pressure.set(pressure.unwrap_or(f64::NAN));
        self.cpu_quota.set(quota_cores.unwrap_or(0.0));
    }

    pub fn encode(&self) -> String {
        text(&self.registry)
    }
}

/// The content type of the text exposition format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `GET /metrics` on `listener` with what `encode` returns, until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    encode: Arc<dyn Fn() -> String + Send + Sync>,
) -> anyhow::Result<()> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let e = encode.clone();
            async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], e()) }
        }),
    );
    axum::serve(listener, app).await?;
    Ok(())
}

/// Binds `addr` for [`serve`], with an error that names the setting.
pub async fn bind(addr: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen for metrics on {addr} (--metrics): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_exposes_what_it_was_told() {
        let m = AgentMetrics::new();
        m.ranked("dgemm", 0.0002, true);
        m.ranked("dgemm", 0.0001, false);
        m.reported("s1", "dgemm", true, 0.5, Some(0.55), 0.5, Some(1000));
        m.reported("s1", "dgemm", false, 0.1, None, 0.0, None);
        m.marked_down("s2");
        m.servers_now([("s1", "up", 3, 40, Some(0.7)), ("s2", "down", 0, 10, None)]);
        let t = m.encode();
        for want in [
            "gridwise_agent_calls_ranked_total{service=\"dgemm\"} 1",
            "gridwise_agent_rank_failures_total{service=\"dgemm\"} 1",
            "gridwise_agent_rank_seconds_count 2",
            "outcome=\"failed\"",
            "gridwise_agent_prediction_error_ratio_count{service=\"dgemm\"} 1",
            "gridwise_agent_heartbeats_missed_total{server=\"s2\"} 1",
            "gridwise_agent_queue_length{server=\"s1\"} 3",
            "gridwise_agent_servers{state=\"up\"} 1",
            "gridwise_agent_input_bytes_total{server=\"s1\"} 1000",
        ] {
            assert!(t.contains(want), "missing {want} in\n{t}");
        }
        // A server no longer known leaves the gauges.
        m.servers_now([("s1", "up", 0, 40, None)]);
        assert!(!m.encode().contains("queue_length{server=\"s2\"}"));
    }

    #[test]
    fn a_server_exposes_its_calls() {
        let m = ServerMetrics::new();
        m.call("add", true, 0.001, 0.0, 8, 8);
        m.occupancy(1, 2);
        m.cpu(Some(0.5), None, Some(1.5));
        let t = m.encode();
        assert!(t.contains("gridwise_server_cpu_share 0.5"), "{t}");
        assert!(t.contains("gridwise_server_cpu_pressure NaN"), "{t}");
        assert!(t.contains("gridwise_server_cpu_quota_cores 1.5"), "{t}");
        assert!(
            t.contains("gridwise_server_calls_total{service=\"add\",outcome=\"ok\"} 1"),
            "{t}"
        );
        assert!(t.contains("gridwise_server_calls_waiting 2"), "{t}");
        assert!(t.contains("gridwise_server_input_bytes_total 8"), "{t}");
    }
}
