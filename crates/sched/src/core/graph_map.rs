//! Mapping a whole task graph at once (`map_graph`): the agent's side of SmartGridSolve's
//! `grpc_map`. The ETC matrix holds each call's *compute* estimate on each live server (the same
//! model `rank` uses), the communication model the measured links, and a [`GraphPolicy`] maps
//! the graph; [`replay`] predicts its timeline.
//!
//! Queue wait is left out of the matrix on purpose: the graph's own calls are what will fill
//! the queues, and the replay accounts for them. What the client sends and receives is left out
//! too: a graph's data moves server to server along its edges.

use super::AgentCore;
use crate::graph::{Bounds, CommModel, EtcMatrix, GraphPolicy, Task, TaskGraph, replay};
use gridwise_proto::{
    ComputeSource, ErrorCode, GraphPlan, GraphRequest, PlannedLink, PlannedServer, RankOptions,
    RpcError,
};
use std::time::Duration;

/// Above this many (call × server) estimates a request is refused rather than tying up the agent.
pub const MAX_GRAPH_CELLS: usize = 20_000_000;

fn invalid(message: String) -> RpcError {
    RpcError::new(ErrorCode::OtherErrorCode, message)
}

impl AgentCore {
    /// Maps `req`'s graph on the live servers and predicts its timeline. With `req.reserve`,
    /// every call is recorded on its server's queue under a ticket of its own (cleared when the
    /// server reports the call, or released by the client), so calls ranked meanwhile see the
    /// graph's load.
    pub fn map_graph(&mut self, req: &GraphRequest, now: Duration) -> Result<GraphPlan, RpcError> {
        self.map_graph_for(None, req, now)
    }

    /// [`map_graph`](Self::map_graph) for the client `holder`, who alone may release the
    /// reservations.
    pub fn map_graph_for(
        &mut self,
        holder: Option<&str>,
        req: &GraphRequest,
        now: Duration,
    ) -> Result<GraphPlan, RpcError> {
        if req.calls.is_empty() {
            return Err(invalid("the graph has no calls".into()));
        }
        let policy = req
            .policy
            .as_deref()
            .map(str::parse::<GraphPolicy>)
            .transpose()
            .map_err(|e| invalid(e.to_string()))?;
        // Every call checked as `rank` would (service offered, sizes in order), work once.
        let opts = RankOptions::default();
        let mut calls = Vec::with_capacity(req.calls.len());
        let mut graph = TaskGraph::new();
        for c in &req.calls {
            let (service, _, call) = self
                .call(&c.profile, &opts, now)
                .map_err(|e| RpcError::new(e.code, format!("call `{}`: {}", c.name, e.message)))?;
            graph.add_task(Task::new(
                c.name.clone(),
                c.profile.service.clone(),
                call.work.unwrap_or(0.0),
            ));
            calls.push((service, call));
        }
        for e in &req.edges {
            graph
                .add_edge(e.from as usize, e.to as usize, e.bytes)
                .map_err(|err| invalid(err.to_string()))?;
        }
        graph.adjacency().map_err(|err| invalid(err.to_string()))?;

        // The live servers offering at least one of the graph's services, by name.
        let mut slots: Vec<usize> = (0..self.registry.len())
            .filter(|&s| {
                let e = self.registry.entry(s);
                e.is_up() && calls.iter().any(|(svc, _)| e.offers(*svc))
            })
            .collect();
        slots.sort_by(|&a, &b| {
            self.registry
                .entry(a)
                .name
                .cmp(&self.registry.entry(b).name)
        });
        if slots.is_empty() {
            return Err(RpcError::new(
                ErrorCode::ServerNotFound,
                "no live server offers any of the graph's services; start servers first",
            ));
        }
        let (n, m) = (calls.len(), slots.len());
        if n.saturating_mul(m) > MAX_GRAPH_CELLS {
            return Err(invalid(format!(
                "the graph has {n} calls and the grid {m} servers: {} estimates, over the \
                 agent's limit of {MAX_GRAPH_CELLS}; split the graph",
                n * m
            )));
        }

        let mut values = vec![f64::INFINITY; n * m];
        let mut unknown = Vec::new();
        // Offered, but the model says the call does not fit: classic GridSolve cannot know.
        let mut blind_spots = Vec::new();
        for (t, (svc, call)) in calls.iter().enumerate() {
            for (col, &slot) in slots.iter().enumerate() {
                let e = self.registry.entry(slot);
                if !e.offers(*svc) {
                    continue;
                }
                if !call.fits(e) {
                    continue;
                }
                if !self.model.feasible(e, call.svc, call.profile) {
                    blind_spots.push((t, col));
                    continue;
                }
                let (mut compute, source) =
                    self.model.compute(e, call.svc, call.work, call.profile);
                if matches!(source, ComputeSource::Assumed { .. }) {
                    match call.work {
                        Some(w)
                            if w > 0.0 && e.default_rate.is_finite() && e.default_rate > 0.0 =>
                        {
                            compute = w / e.default_rate;
                        }
                        _ => unknown.push((t as u32, col as u32)),
                    }
                }
                if compute.is_finite() {
                    values[t * m + col] = compute.max(0.0);
                }
            }
        }
        let policy_requested = policy.is_some();
        let policy = policy.unwrap_or_else(|| GraphPolicy::default_for(&graph));
        // Classic GridSolve: one benchmark rate per server. A server's rate is its calibrated
        // rate for the first of the graph's services it offers (measured at one size, which is
        // the point: it cannot see paging), else its default rate.
        let rates: Vec<f64> = slots
            .iter()
            .map(|&slot| {
                let e = self.registry.entry(slot);
                calls
                    .iter()
                    .find_map(|(svc, _)| e.rate(*svc))
                    .unwrap_or(e.default_rate)
            })
            .collect();
        if policy == GraphPolicy::ConstantSpeed {
            if let Some(col) = rates.iter().position(|r| !(r.is_finite() && *r > 0.0)) {
                let name = &self.registry.entry(slots[col]).name;
                return Err(invalid(format!(
                    "constant-speed divides work by each server's calibrated rate, but server \
                     `{name}` has none (calibrate = false?); choose another policy"
                )));
            }
            // Blind to memory as GridSolve was: it places calls where they do not fit, and
            // they fail there (the Hydropad lesson, seed 003 §5.3).
            for &(t, col) in &blind_spots {
                values[t * m + col] = calls[t].1.work.unwrap_or(0.0).max(0.0) / rates[col];
            }
        }
        for (t, (_, call)) in calls.iter().enumerate() {
            if values[t * m..(t + 1) * m].iter().all(|v| v.is_infinite()) {
                return Err(RpcError::new(
                    ErrorCode::ServerNotFound,
                    format!(
                        "call `{}`: no live server can run `{}` at these sizes (the models say it \
                         does not fit anywhere); use smaller sizes or add a server",
                        req.calls[t].name,
                        call.svc.name()
                    ),
                ));
            }
        }
        let servers: Vec<PlannedServer> = slots
            .iter()
            .map(|&s| {
                let e = self.registry.entry(s);
                PlannedServer {
                    server_id: e.id,
                    name: e.name.clone(),
                    addr: e.addr.clone(),
                    slots: e.slots.max(1),
                    default_rate: e.default_rate,
                }
            })
            .collect();
        let etc = EtcMatrix::new(n, m, values)
            .and_then(|x| x.with_slots(servers.iter().map(|s| s.slots as usize).collect()))
            .map_err(|e| invalid(e.to_string()))?;
        let (lat, bw) = (
            self.config.default_latency_s,
            self.config.default_bandwidth_bytes_per_s,
        );
        let mut comm = CommModel::uniform(m, lat, bw).map_err(|e| invalid(e.to_string()))?;
        let mut links = Vec::new();
        for (a, sa) in servers.iter().enumerate() {
            for (b, sb) in servers.iter().enumerate() {
                if a == b {
                    continue;
                }
                if let Some(l) = self.links.get(&sa.addr, &sb.addr)
                    && comm
                        .set_link(a, b, l.latency_s, l.bandwidth_bytes_per_s)
                        .is_ok()
                {
                    links.push(PlannedLink {
                        from: a as u32,
                        to: b as u32,
                        latency_s: l.latency_s,
                        bandwidth: l.bandwidth_bytes_per_s,
                    });
                }
            }
        }

        let mapping = policy
            .map(&graph, &etc, &comm, Some(&rates))
            .map_err(|e| invalid(format!("mapping the graph with {policy}: {e}")))?;
        let predicted = replay(&graph, &etc, &comm, &mapping)
            .map_err(|e| invalid(format!("replaying the {policy} mapping: {e}")))?;
        let bounds = Bounds::of(&graph, &etc).map_err(|e| invalid(e.to_string()))?;

        let (mut start_s, mut end_s, mut lane) = (vec![0.0; n], vec![0.0; n], vec![0u32; n]);
        for server in &predicted.per_server {
            for s in server {
                start_s[s.task] = s.start_s;
                end_s[s.task] = s.end_s;
                lane[s.task] = s.lane as u32;
            }
        }
        let mut tickets = Vec::new();
        if req.reserve {
            tickets.reserve(n);
            for (t, &col) in mapping.server_of.iter().enumerate() {
                let finish_s = now.as_secs_f64() + end_s[t];
                tickets.push(self.assign(slots[col], etc.get(t, col), finish_s, holder, now));
            }
        }
        Ok(GraphPlan {
            policy: policy.name().to_string(),
            policy_requested,
            servers,
            server_of: mapping.server_of.iter().map(|&s| s as u32).collect(),
            order: mapping
                .order
                .iter()
                .map(|o| o.iter().map(|&t| t as u32).collect())
                .collect(),
            tickets,
            etc: (0..n).flat_map(|t| etc.row(t).to_vec()).collect(),
            unknown,
            default_latency_s: lat,
            default_bandwidth: bw,
            links,
            start_s,
            end_s,
            lane,
            makespan_s: predicted.makespan_s,
            lower_bound_s: bounds.lower_bound_s,
            critical_path_s: bounds.critical_path_s,
            average_parallelism: bounds.average_parallelism,
            total_work_s: bounds.total_work_s,
        })
    }
}
