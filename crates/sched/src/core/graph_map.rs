//! Mapping a whole task graph at once: the agent's side of SmartGridSolve's `grpc_map`, in three
//! steps so that a large graph never holds up the agent's other decisions.
//!
//! 1. [`AgentCore::snapshot_graph`] copies, under the core's lock, what the mapping reads: the
//!    catalog, the live servers offering the graph's services (models, rates, histories and
//!    queues), the measured links. A copy of a hundred servers takes well under a millisecond.
//! 2. [`GraphSnapshot::map`] runs without the lock: each call's *compute* estimate on each server
//!    (the same compute model `rank` uses), the communication model, the [`GraphPolicy`] and
//!    the [`replay`] that predicts the timeline. Each server's slots start when its queued calls
//!    end, so a plan counts the work it lands on.
//! 3. [`AgentCore::reserve_graph`], under the lock again, records one assignment per call when
//!    the request reserves, and refuses if a server the plan chose went down meanwhile.
//!
//! [`map_graph_shared`] runs the three around a `Mutex<AgentCore>`, as the agent does.
//!
//! What the client sends and receives is left out of the matrix: a graph's data moves server to
//! server along its edges.

use super::{AgentCore, Call, not_offered, sizes_mismatch};
use crate::catalog::Catalog;
use crate::graph::{
    CommModel, EtcMatrix, GraphPolicy, MapByPolicy, Sites, Task, TaskGraph, best_lower_bound,
    makespan_spread, replay,
};
use crate::registry::ServerEntry;
use gridwise_predict::{ComputeModel, Links};
use gridwise_proto::{
    ComputeSource, ErrorCode, GraphPlan, GraphRequest, PlannedLink, PlannedServer, RpcError,
    ServerId,
};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Above this many (call × server) estimates a request is refused rather than tying up the agent.
pub const MAX_GRAPH_CELLS: usize = 20_000_000;

/// How often [`map_graph_shared`] maps again when servers go down under it before giving up.
const MAP_ATTEMPTS: usize = 3;

fn invalid(message: String) -> RpcError {
    RpcError::new(ErrorCode::OtherErrorCode, message)
}

/// Everything mapping a graph reads, copied from the core so the mapping runs without its lock.
pub struct GraphSnapshot {
    policy: Option<GraphPolicy>,
    reserve: bool,
    catalog: Catalog,
    // The live servers offering at least one of the graph's services, by name.
    servers: Vec<ServerEntry>,
    // When each of their slots frees from the calls already reserved there, s from `taken_at`.
    busy: Vec<Vec<f64>>,
    links: Links,
    model: Arc<dyn ComputeModel>,
    default_latency_s: f64,
    default_bandwidth: f64,
    taken_at: Duration,
}

/// Every call's time on every server (row-major calls × servers), as `GraphSnapshot::map`
/// plans with them.
struct CallTimes {
    planned: Vec<f64>,
    means: Vec<f64>,
    spreads: Vec<f64>,
    unknown: Vec<(u32, u32)>,
    /// Per server, what its recent calls cost it besides queue and kernel, s.
    overhead: Vec<f64>,
    /// Per server, its one benchmark rate (constant-speed's view).
    rates: Vec<f64>,
}

/// The links a mapping is predicted over, and what the plan says of them.
struct Platform {
    comm: CommModel,
    links: Vec<PlannedLink>,
    site_of: Vec<u32>,
    dispatch_s: f64,
}

/// A mapped graph waiting for [`AgentCore::reserve_graph`].
pub struct MappedGraph {
    plan: GraphPlan,
    reserve: bool,
    // Each call's compute estimate on its server, s.
    compute_s: Vec<f64>,
}

impl MappedGraph {
    /// The plan, with no reservation made.
    pub fn plan(&self) -> &GraphPlan {
        &self.plan
    }
}

/// What a graph request asks of the platform (its policy and services), read from the
/// request alone so that the core's lock is not held for it.
pub struct GraphOutline<'r> {
    req: &'r GraphRequest,
    policy: Option<GraphPolicy>,
    services: Vec<&'r str>,
}

impl<'r> GraphOutline<'r> {
    /// Refuses an empty graph.
    pub fn of(req: &'r GraphRequest) -> Result<Self, RpcError> {
        if req.calls.is_empty() {
            return Err(invalid("the graph has no calls".into()));
        }
        let policy = req.policy;
        let mut services: Vec<&str> = Vec::new();
        for c in &req.calls {
            // Graphs call a handful of services: a scan beats hashing 10⁵ names.
            if !services.contains(&c.profile.service.as_str()) {
                services.push(&c.profile.service);
            }
        }
        Ok(GraphOutline {
            req,
            policy,
            services,
        })
    }
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
    /// reservations. The three steps at one instant, for callers that hold the core alone.
    pub fn map_graph_for(
        &mut self,
        holder: Option<&str>,
        req: &GraphRequest,
        now: Duration,
    ) -> Result<GraphPlan, RpcError> {
        let mapped = self
            .snapshot_graph(&GraphOutline::of(req)?, now)?
            .map(req)?;
        self.reserve_graph(holder, mapped, now)
    }

    /// Step 1: copies what mapping the outlined graph reads. An unknown service or no live
    /// server fails here; what concerns single calls fails in [`GraphSnapshot::map`].
    pub fn snapshot_graph(
        &self,
        outline: &GraphOutline<'_>,
        now: Duration,
    ) -> Result<GraphSnapshot, RpcError> {
        let mut services = Vec::with_capacity(outline.services.len());
        for name in &outline.services {
            let svc = self.catalog.get(name).ok_or_else(|| {
                let e = not_offered(name);
                let call = outline
                    .req
                    .calls
                    .iter()
                    .find(|c| c.profile.service == *name);
                let call = call.map_or("?", |c| c.name.as_str());
                RpcError::new(e.code, format!("call `{call}`: {}", e.message))
            })?;
            services.push(svc.idx);
        }
        let mut slots: Vec<usize> = self.reachable(
            (0..self.registry.len())
                .filter(|&s| {
                    let e = self.registry.entry(s);
                    e.is_up() && services.iter().any(|svc| e.offers(*svc))
                })
                .collect(),
            now,
        );
        if slots.is_empty() {
            return Err(RpcError::new(
                ErrorCode::ServerNotFound,
                "no live server offers any of the graph's services; start servers first",
            ));
        }
        let (n, m) = (outline.req.calls.len(), slots.len());
        if n.saturating_mul(m) > MAX_GRAPH_CELLS {
            return Err(invalid(format!(
                "the graph has {n} calls and the grid {m} servers: {} estimates, over the \
                 agent's limit of {MAX_GRAPH_CELLS}; split the graph",
                n * m
            )));
        }
        slots.sort_by(|&a, &b| {
            self.registry
                .entry(a)
                .name()
                .cmp(self.registry.entry(b).name())
        });
        Ok(GraphSnapshot {
            policy: outline.policy,
            reserve: outline.req.reserve,
            catalog: self.catalog.clone(),
            servers: slots
                .iter()
                .map(|&s| self.registry.entry(s).clone())
                .collect(),
            busy: slots
                .iter()
                .map(|&s| {
                    let e = self.registry.entry(s);
                    self.reservations.queue(s).free_in_s(now, e.slots())
                })
                .collect(),
            links: self.links.clone(),
            model: Arc::clone(&self.model),
            default_latency_s: self.config.default_latency_s,
            default_bandwidth: self.config.default_bandwidth_bytes_per_s,
            taken_at: now,
        })
    }

    /// Step 3: with `mapped`'s request reserving, records each call on its server's queue
    /// under a ticket `holder` alone may release; refuses (`ServerNotFound`, nothing recorded)
    /// if a server the plan uses is gone or down by now.
    pub fn reserve_graph(
        &mut self,
        holder: Option<&str>,
        mapped: MappedGraph,
        now: Duration,
    ) -> Result<GraphPlan, RpcError> {
        let MappedGraph {
            mut plan,
            reserve,
            compute_s,
        } = mapped;
        if !reserve {
            return Ok(plan);
        }
        let mut slot_of = Vec::with_capacity(plan.servers.len());
        for s in &plan.servers {
            let used = plan
                .server_of
                .iter()
                .any(|&c| plan.servers[c as usize].server_id == s.server_id);
            let slot = self.live_slot(s.server_id);
            if used && slot.is_none() {
                return Err(server_gone(&s.name));
            }
            slot_of.push(slot);
        }
        // Each server's calls in order of predicted finish, so every push lands at the end
        // of its queue (sorted by finish) instead of shifting it.
        let mut order: Vec<usize> = (0..plan.server_of.len()).collect();
        order.sort_by(|&a, &b| plan.end_s[a].total_cmp(&plan.end_s[b]));
        let mut tickets = vec![gridwise_proto::Ticket(0); order.len()];
        let holder = self.holder_key(holder);
        self.reservations.reserve(order.len());
        for t in order {
            let slot = slot_of[plan.server_of[t] as usize].expect("checked above");
            let finish = gridwise_predict::Stoch::point(now.as_secs_f64() + plan.end_s[t]);
            tickets[t] = self.assign_keyed(slot, compute_s[t], finish, holder, now);
        }
        plan.tickets = tickets;
        Ok(plan)
    }

    fn live_slot(&self, id: ServerId) -> Option<usize> {
        self.registry
            .slot_of(id)
            .filter(|&s| self.registry.entry(s).is_up())
    }
}

fn server_gone(name: &str) -> RpcError {
    RpcError::new(
        ErrorCode::ServerNotFound,
        format!(
            "server `{name}` went down while the graph was being mapped; map it again (the \
             servers that are left get it)"
        ),
    )
}

fn lock(core: &Mutex<AgentCore>) -> MutexGuard<'_, AgentCore> {
    core.lock().unwrap_or_else(|p| p.into_inner())
}

/// Maps and reserves `req` on the core behind `core`, holding the lock only to copy what the
/// mapping reads and to record the reservations; `now` is read at each step. If servers the
/// plan chose go down before it is reserved, maps again on the servers left (a few times).
pub fn map_graph_shared(
    core: &Mutex<AgentCore>,
    holder: Option<&str>,
    req: &GraphRequest,
    now: impl Fn() -> Duration,
) -> Result<GraphPlan, RpcError> {
    let outline = GraphOutline::of(req)?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let snapshot = lock(core).snapshot_graph(&outline, now())?;
        let mapped = snapshot.map(req)?;
        match lock(core).reserve_graph(holder, mapped, now()) {
            Err(e) if e.code == ErrorCode::ServerNotFound && attempt < MAP_ATTEMPTS => continue,
            other => return other,
        }
    }
}

impl GraphSnapshot {
    /// What a data edge costs besides its link (see [`GraphPlan::dispatch_s`]): a graph run
    /// sends a consumer once its producer's reply is back at the client, so the reply crosses
    /// one client link and the consumer's request another, wherever the output is. Each
    /// crossing at the mean of the servers' client links for a message without data: the
    /// latency their recent calls showed, or the default latency where none was measured yet
    /// (as for a link between servers).
    fn dispatch_s(&self) -> f64 {
        if self.servers.is_empty() {
            return 0.0;
        }
        let crossing = |e: &ServerEntry| {
            e.host()
                .client_link
                .transfer(0, None)
                .map(|t| t.mean)
                .filter(|t| t.is_finite())
                .unwrap_or(self.default_latency_s)
        };
        let sum: f64 = self.servers.iter().map(crossing).sum();
        2.0 * sum / self.servers.len() as f64
    }

    /// Seconds to bring `bytes` of outputs from server `s` back to the client: its client
    /// link as its recent calls showed it, else the narrowest another server's calls showed,
    /// else the default link.
    fn to_client_s(&self, s: usize, bytes: u64) -> f64 {
        let others = self.servers.iter().map(|e| &e.host().client_link);
        gridwise_predict::client_link::transfer_or_narrowest(
            &self.servers[s].host().client_link,
            others,
            bytes,
            None,
        )
        .map(|t| t.mean)
        .unwrap_or(self.default_latency_s + bytes as f64 / self.default_bandwidth)
    }

    /// Step 2: maps the graph on the copied platform and predicts its timeline. Pure and
    /// possibly long (HEFT on 10⁵ calls, an LP), so run it without the core's lock. Its
    /// steps: the calls checked into a task graph, every call's time on every server, the
    /// links and sites between the servers, the mapping and its replay, the plan.
    pub fn map(self, req: &GraphRequest) -> Result<MappedGraph, RpcError> {
        let (graph, calls) = self.task_graph(req)?;
        let policy_requested = self.policy.is_some();
        let policy = self
            .policy
            .unwrap_or_else(|| GraphPolicy::default_for(&graph));
        let CallTimes {
            planned,
            means,
            spreads,
            unknown,
            overhead,
            rates,
        } = self.call_times(req, &calls, policy)?;
        let servers = self.planned_servers();
        let etc = self.etc_matrix(&servers, planned, calls.len())?;
        let means = self.etc_matrix(&servers, means, calls.len())?;
        let platform = self.links_between(&servers)?;
        let blind;
        let mapped_with = if req.link_blind {
            blind = CommModel::free(servers.len())
                .with_dispatch(platform.dispatch_s)
                .map_err(|e| invalid(e.to_string()))?
                .pulled_when_sent();
            &blind
        } else {
            &platform.comm
        };
        let mapping = policy
            .map(&graph, &etc, mapped_with, Some(&rates))
            .map_err(|e| invalid(format!("mapping the graph with {policy}: {e}")))?;
        let predicted = replay(&graph, &etc, &platform.comm, &mapping)
            .map_err(|e| invalid(format!("replaying the {policy} mapping: {e}")))?;
        // The makespan's spread, drawn around the estimates' means (not the conservative
        // times the mapping may have planned with).
        let spread = makespan_spread(&graph, &means, &spreads, &platform.comm, &mapping, 1)
            .map_err(|e| invalid(format!("replaying the {policy} mapping: {e}")))?;
        let lower = best_lower_bound(&graph, &etc, None).map_err(|e| invalid(e.to_string()))?;
        let bounds = lower.bounds;

        // The client fetches the outputs it wants once every call has run, one after the
        // other (`gridwise_client`'s graph runner), so their trips over the client links add
        // to the makespan.
        let fetch_s: f64 = req
            .calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.fetched)
            .map(|(t, c)| self.to_client_s(mapping.server_of[t], c.profile.out_bytes))
            .sum();
        let n = calls.len();
        let (mut start_s, mut end_s, mut lane) = (vec![0.0; n], vec![0.0; n], vec![0u32; n]);
        for server in &predicted.per_server {
            for s in server {
                start_s[s.task] = s.start_s;
                end_s[s.task] = s.end_s;
                lane[s.task] = s.lane as u32;
            }
        }
        // Reserved as single calls are, at the kernel's time: the agent compares it with the
        // kernel's when the report comes.
        let compute_s = (0..n)
            .map(|t| {
                let s = mapping.server_of[t];
                (etc.get(t, s) - overhead[s]).max(0.0)
            })
            .collect();
        Ok(MappedGraph {
            plan: GraphPlan {
                policy,
                policy_requested,
                servers,
                server_of: mapping.server_of.iter().map(|&s| s as u32).collect(),
                order: mapping
                    .order
                    .iter()
                    .map(|o| o.iter().map(|&t| t as u32).collect())
                    .collect(),
                tickets: Vec::new(),
                etc: (0..n).flat_map(|t| etc.row(t).to_vec()).collect(),
                unknown,
                default_latency_s: self.default_latency_s,
                default_bandwidth: self.default_bandwidth,
                links: platform.links,
                site_of: platform.site_of,
                dispatch_s: platform.dispatch_s,
                start_s,
                end_s,
                lane,
                makespan_s: predicted.makespan_s + fetch_s,
                makespan_sd_s: spread.as_ref().map_or(0.0, |s| s.sd_s),
                makespan_interval90_s: spread
                    .map(|s| (s.interval90_s.0 + fetch_s, s.interval90_s.1 + fetch_s)),
                lower_bound_s: lower.seconds,
                lower_bound_kind: lower.kind.name().to_string(),
                critical_path_s: bounds.critical_path_s,
                average_parallelism: bounds.average_parallelism,
                total_work_s: bounds.total_work_s,
            },
            reserve: self.reserve,
            compute_s,
        })
    }

    /// The request's calls, each checked as `rank` would check it (offered, sizes in order),
    /// with its work evaluated once, and its data edges: the task graph to map.
    fn task_graph<'s>(
        &'s self,
        req: &'s GraphRequest,
    ) -> Result<(TaskGraph, Vec<Call<'s>>), RpcError> {
        let mut calls = Vec::with_capacity(req.calls.len());
        let mut graph = TaskGraph::new();
        for c in &req.calls {
            let svc = self
                .catalog
                .get(&c.profile.service)
                .ok_or_else(|| not_offered(&c.profile.service))?;
            if !svc.sizes_match(&c.profile.sizes) {
                let e = sizes_mismatch(svc, &c.profile);
                return Err(RpcError::new(
                    e.code,
                    format!("call `{}`: {}", c.name, e.message),
                ));
            }
            let call = Call {
                svc,
                work: svc.facts.work(&c.profile),
                footprint: c.profile.footprint_bytes(),
                profile: &c.profile,
                now: self.taken_at,
                predictor: None,
            };
            graph.add_task(Task::new(
                c.name.clone(),
                c.profile.service.clone(),
                call.work.unwrap_or(0.0),
            ));
            calls.push(call);
        }
        for e in &req.edges {
            graph
                .add_edge(e.from as usize, e.to as usize, e.bytes)
                .map_err(|err| invalid(err.to_string()))?;
        }
        graph.adjacency().map_err(|err| invalid(err.to_string()))?;
        Ok((graph, calls))
    }

    /// Every call's time on every server: the estimate planned with (`planned`: the
    /// conservative one where the request asks, plus the server's recent per-call cost;
    /// infinite where it cannot run), its mean and spread, the calls with no estimate at all,
    /// and each server's classic-GridSolve rate for constant-speed. Refuses a call no live
    /// server can run.
    fn call_times(
        &self,
        req: &GraphRequest,
        calls: &[Call<'_>],
        policy: GraphPolicy,
    ) -> Result<CallTimes, RpcError> {
        let (n, m) = (calls.len(), self.servers.len());
        let mut values = vec![f64::INFINITY; n * m];
        let mut spreads = vec![0.0; n * m];
        let mut means = vec![f64::INFINITY; n * m];
        let tf = match req.conservative_tf {
            Some(tf) if !(tf.is_finite() && tf >= 0.0) => {
                return Err(invalid(format!(
                    "conservative_tf must be a finite number >= 0, got {tf}"
                )));
            }
            tf => tf.unwrap_or(0.0),
        };
        let own;
        let model: &dyn ComputeModel = match req.load_model {
            Some(load) => {
                own = gridwise_predict::FpmModel::with_load(load);
                &own
            }
            None => self.model.as_ref(),
        };
        let mut unknown = Vec::new();
        // Offered, but the model says the call does not fit: classic GridSolve cannot know.
        let mut blind_spots = Vec::new();
        // A call holds its server for its kernel and for what the server's calls cost besides
        // (starting the kernel's thread, building the reply), as its recent calls showed
        // (finite and ≥ 0: `CallOverhead` records nothing else).
        let overhead: Vec<f64> = self
            .servers
            .iter()
            .map(|e| e.host().overhead.estimate().mean)
            .collect();
        for (t, call) in calls.iter().enumerate() {
            for (col, e) in self.servers.iter().enumerate() {
                if !e.offers(call.svc.idx) || !call.fits(e) {
                    continue;
                }
                let view = e.view(call.svc.idx);
                if !model.feasible(view, &call.svc.facts, call.profile) {
                    blind_spots.push((t, col));
                    continue;
                }
                let compute = model.compute(view, &call.svc.facts, call.work, call.profile);
                if matches!(compute.source, ComputeSource::Assumed { .. }) {
                    unknown.push((t as u32, col as u32));
                }
                let planned = compute.seconds + tf * compute.sd_s;
                if planned.is_finite() {
                    values[t * m + col] = planned.max(0.0) + overhead[col];
                    means[t * m + col] = compute.seconds.max(0.0) + overhead[col];
                    spreads[t * m + col] = compute.sd_s;
                }
            }
        }
        // Classic GridSolve: one benchmark rate per server. A server's rate is its calibrated
        // rate for the first of the graph's services it offers (measured at one size, which is
        // the point: it cannot see paging), else its default rate.
        let rates: Vec<f64> = self
            .servers
            .iter()
            .map(|e| {
                calls
                    .iter()
                    .find_map(|c| e.rate(c.svc.idx))
                    .unwrap_or(e.default_rate())
            })
            .collect();
        if policy == GraphPolicy::ConstantSpeed {
            if let Some(col) = rates.iter().position(|r| !(r.is_finite() && *r > 0.0)) {
                let name = &self.servers[col].name();
                return Err(invalid(format!(
                    "constant-speed divides work by each server's calibrated rate, but server \
                     `{name}` has none (calibrate = false?); choose another policy"
                )));
            }
            // Blind to memory as GridSolve was: it places calls where they do not fit, and
            // they fail there (the Hydropad lesson, seed 003 §5.3).
            for &(t, col) in &blind_spots {
                values[t * m + col] =
                    gridwise_predict::constant_speed_s(calls[t].work.unwrap_or(0.0), rates[col])
                        + overhead[col];
            }
        }
        for (t, call) in calls.iter().enumerate() {
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
        // Constant-speed's blind spots have a planned time but no estimate: their mean is it.
        for (i, v) in values.iter().enumerate() {
            if means[i].is_infinite() {
                means[i] = *v;
            }
        }
        Ok(CallTimes {
            planned: values,
            means,
            spreads,
            unknown,
            overhead,
            rates,
        })
    }

    /// The live servers as the plan numbers them.
    fn planned_servers(&self) -> Vec<PlannedServer> {
        self.servers
            .iter()
            .map(|e| PlannedServer {
                server_id: e.id(),
                name: e.name().to_string(),
                addr: e.addr().to_string(),
                slots: e.slots().max(1),
                default_rate: e.default_rate(),
            })
            .collect()
    }

    /// A calls × servers matrix of `values` with the servers' slots and the calls already
    /// reserved on them.
    fn etc_matrix(
        &self,
        servers: &[PlannedServer],
        values: Vec<f64>,
        n: usize,
    ) -> Result<EtcMatrix, RpcError> {
        EtcMatrix::new(n, servers.len(), values)
            .and_then(|x| x.with_slots(servers.iter().map(|s| s.slots as usize).collect()))
            .and_then(|x| x.with_busy(self.busy.clone()))
            .map_err(|e| invalid(e.to_string()))
    }

    /// What moving data between the servers costs: the measured links (the default where
    /// none was), the dispatch every edge pays, and the sites read off the links, whose
    /// paths transfers share.
    fn links_between(&self, servers: &[PlannedServer]) -> Result<Platform, RpcError> {
        let m = servers.len();
        let (lat, bw) = (self.default_latency_s, self.default_bandwidth);
        let dispatch_s = self.dispatch_s();
        let mut comm = CommModel::uniform(m, lat, bw)
            .and_then(|c| c.with_dispatch(dispatch_s))
            .map_err(|e| invalid(e.to_string()))?;
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
        // Paths between sites are shared: read the sites off the links measured.
        let addrs: Vec<&str> = servers.iter().map(|s| s.addr.as_str()).collect();
        let sites = Sites::learned(&addrs, &self.links);
        let site_of = (0..m).map(|s| sites.site(s) as u32).collect();
        // As the client runs a graph: a call is sent once all its producers are done, and its
        // server then pulls the inputs that are elsewhere.
        let comm = comm
            .with_sites(sites)
            .map_err(|e| invalid(e.to_string()))?
            .pulled_when_sent();

        Ok(Platform {
            comm,
            links,
            site_of,
            dispatch_s,
        })
    }
}
