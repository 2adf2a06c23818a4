//! The tarpc face of the agent: each RPC checks who asks (the connection's [`Peer`]), locks
//! the core, asks it, and answers. No decision is made here; what is decided here is only what
//! needs the network — dialling a registering server to check that it is where it says, and
//! dialling the holder of a contested name to see whether it is still there.

use crate::persist::ops_for;
use gridwise_dashboard::{CoreView, Dashboard};
use gridwise_metrics::AgentMetrics;
use gridwise_proto::clock::unix_s;
use gridwise_proto::{
    Ack, AgentApi, AgentStatus, CallProfile, CallReport, Candidate, ErrorCode, GraphPlan,
    GraphRequest, Heartbeat, LinkInfo, LinkSample, ModelExport, ModelPoint, ModelSummary,
    RankOptions, Ranking, RegisterReply, Registration, RpcError, ServerApiClient, ServerId,
    ServiceDesc, ServiceSummary, StorageHealth, Ticket,
};
use gridwise_runtime::wire::{self, DialConfig, Peer, Role};
use gridwise_sched::{AgentCore, Learned, Refusal, Registering, Suspicion, map_graph_shared};
use gridwise_store::{Op, Writer};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tarpc::context::Context;

/// Models the dashboard draws at most (one (server, service) pair each).
const MODELS_SHOWN: usize = 64;

/// How long checking a registering server (or a name's holder) may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// The agent as one connection sees it: the shared state, who is asking, and — on a server's
/// connection — which server registered on it.
#[derive(Clone)]
pub struct AgentHandler {
    shared: Arc<Shared>,
    /// Shared: tarpc clones the handler for every request.
    peer: Arc<Peer>,
    bound: Arc<Mutex<Option<Bound>>>,
}

/// The server a connection registered, and its registration (saved at its first heartbeat).
struct Bound {
    id: ServerId,
    reg: Registration,
}

struct Shared {
    core: Mutex<AgentCore>,
    epoch: Instant,
    writer: Option<Writer>,
    /// How to dial servers to check them; `None` checks nothing (in-process tests).
    dial: Option<DialConfig>,
    registered: tokio::sync::Notify,
    observers: Observers,
}

/// Who else hears what the agent does: metrics and the dashboard, each when switched on.
#[derive(Clone, Default)]
pub struct Observers {
    pub metrics: Option<Arc<AgentMetrics>>,
    pub dashboard: Option<Arc<Dashboard>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the metrics and the dashboard take from what the core learned: the calls reported.
fn record(observers: &Observers, learned: &[Learned]) {
    for l in learned {
        if let Learned::Timings {
            server,
            reports,
            predicted_kernel_s,
            ..
        } = l
        {
            if let Some(d) = &observers.dashboard {
                d.reported(server, reports, predicted_kernel_s);
            }
            let Some(m) = &observers.metrics else {
                continue;
            };
            for (i, r) in reports.iter().enumerate() {
                m.reported(
                    server,
                    &r.service,
                    r.ok,
                    r.timing.server_s,
                    predicted_kernel_s.get(i).copied().flatten(),
                    r.timing.kernel_s,
                    r.client_in_bytes,
                );
            }
        }
    }
}

fn refused(message: String) -> RpcError {
    RpcError::new(ErrorCode::RpcRefused, message)
}

impl AgentHandler {
    /// Wraps a core; what it learns is written through `writer`, if any; registering servers
    /// are checked by dialling them with `dial`, if any. The handler itself acts for the agent
    /// (every right); connections get theirs from [`AgentHandler::for_peer`].
    pub fn new(core: AgentCore, writer: Option<Writer>, dial: Option<DialConfig>) -> Self {
        Self::with_observers(core, writer, dial, Observers::default())
    }

    /// [`new`](Self::new), telling `observers` what happens.
    pub fn with_observers(
        core: AgentCore,
        writer: Option<Writer>,
        dial: Option<DialConfig>,
        observers: Observers,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                core: Mutex::new(core),
                epoch: Instant::now(),
                writer,
                dial,
                registered: tokio::sync::Notify::new(),
                observers,
            }),
            peer: Arc::new(Peer::local(Role::Server, "agent")),
            bound: Arc::new(Mutex::new(None)),
        }
    }

    /// The handler of a new connection from `peer`.
    pub fn for_peer(&self, peer: &Peer) -> Self {
        Self {
            shared: self.shared.clone(),
            peer: Arc::new(peer.clone()),
            bound: Arc::new(Mutex::new(None)),
        }
    }

    fn persist(&self, op: Option<Op>) {
        if let (Some(w), Some(op)) = (&self.shared.writer, op) {
            w.send(op);
        }
    }

    /// Writes what the core learned: the shell adds nothing and leaves nothing out. The
    /// metrics see it first.
    fn persist_learned(&self, learned: Vec<Learned>) {
        record(&self.shared.observers, &learned);
        if self.shared.writer.is_none() || learned.is_empty() {
            return;
        }
        let joined = |id| {
            lock(&self.bound)
                .as_ref()
                .filter(|b| b.id == id)
                .map(|b| (b.id, b.reg.clone()))
        };
        for op in ops_for(learned, joined, unix_s()) {
            self.persist(Some(op));
        }
    }

    /// Waits until everything learned so far has been tried on disk.
    pub fn flush(&self) {
        if let Some(w) = &self.shared.writer {
            w.flush();
        }
    }

    /// Monotonic time since start: the core's clock.
    pub fn now(&self) -> Duration {
        self.shared.epoch.elapsed()
    }

    /// The core, locked. A panic while holding the lock must not wedge the agent, so a poisoned
    /// lock is taken over: the core's methods leave it consistent between calls.
    pub fn core(&self) -> MutexGuard<'_, AgentCore> {
        lock(&self.shared.core)
    }

    /// What the dashboard shows of the core, read under one lock: servers, the forecast CPU
    /// availability its estimates use, models (the first [`MODELS_SHOWN`]) and links.
    pub fn dashboard_view(&self) -> CoreView {
        let now = self.now();
        let core = self.core();
        let status = core.status(now);
        let forecast_availability = status
            .servers
            .iter()
            .filter_map(|s| {
                let a = core.server(s.id)?.host().sensed.availability()?;
                Some((s.name.clone(), a.mean, a.sd))
            })
            .collect();
        let models = core
            .models()
            .iter()
            .take(MODELS_SHOWN)
            .filter_map(|s| core.model(&s.server, &s.service).ok())
            .collect();
        CoreView {
            links: core.link_matrix(now),
            status,
            models,
            forecast_availability,
        }
    }

    /// Sets the gauges that describe the grid now (servers, queues, models): at each scrape,
    /// so they are never older than it.
    pub fn gauge_servers(&self, m: &AgentMetrics) {
        let (status, models) = {
            let core = self.core();
            (core.status(self.now()), core.models())
        };
        let mut points: std::collections::HashMap<&str, usize> = Default::default();
        for s in &models {
            *points.entry(s.server.as_str()).or_default() += s.points as usize;
        }
        let state = |s: &gridwise_proto::ServerStatus| match s.state {
            gridwise_proto::ServerState::Up => "up",
            gridwise_proto::ServerState::Down => "down",
        };
        m.servers_now(status.servers.iter().map(|s| {
            (
                s.name.as_str(),
                state(s),
                s.pending as usize,
                points.get(s.name.as_str()).copied().unwrap_or(0),
                s.load.cpu_available,
            )
        }));
    }

    /// Marks silent servers down, forgets stale ones (on disk too) and expires old tickets.
    pub fn sweep(&self) {
        let now = self.now();
        let learned = self.core().sweep(now);
        for l in &learned {
            match l {
                Learned::Down(id) => {
                    tracing::warn!(server = %id, "no heartbeat within the timeout: marked down");
                    if let Some(m) = &self.shared.observers.metrics {
                        let name = self.core().server(*id).map(|e| e.name().to_string());
                        m.marked_down(&name.unwrap_or_else(|| id.to_string()));
                    }
                }
                Learned::Forgotten(name) => {
                    tracing::info!(server = %name, "forgotten: it never sent a heartbeat, or has been down longer than server_retention_s")
                }
                _ => {}
            }
        }
        self.persist_learned(learned);
    }

    /// Whether what is learned reaches the disk.
    pub fn storage(&self) -> StorageHealth {
        match &self.shared.writer {
            None => StorageHealth {
                ok: true,
                ..StorageHealth::default()
            },
            Some(w) => {
                let h = w.health();
                StorageHealth {
                    ok: h.ok,
                    last_error: h.last_error,
                    pending_writes: h.pending,
                    dropped_writes: h.dropped,
                }
            }
        }
    }

    fn is_server(&self) -> bool {
        self.peer.role == Role::Server
    }

    /// Whether this connection may speak for server `id`: it registered it, and its process
    /// still holds the entry. The answer to give otherwise.
    fn speaks_for(&self, id: ServerId) -> Result<(), Ack> {
        let instance = match lock(&self.bound).as_ref() {
            Some(b) if self.is_server() && b.id == id => b.reg.instance.clone(),
            _ => return Err(Ack::Reregister),
        };
        match self.core().replaced(id, &instance) {
            Some(ack) => {
                tracing::warn!(server = %id, peer = %self.peer.addr, "a replaced server process still speaks for its old entry: told so");
                Err(ack)
            }
            None => Ok(()),
        }
    }

    /// Asks the server at `addr` who it is.
    async fn identify(&self, dial: &DialConfig, addr: &str) -> Result<(String, String), String> {
        let ask = async {
            let (framed, _) = wire::connect(addr, dial, "agent")
                .await
                .map_err(|e| e.to_string())?;
            let client =
                ServerApiClient::new(wire::client_config(), wire::client_transport(framed)).spawn();
            let info = client
                .hello(wire::context(CHECK_TIMEOUT))
                .await
                .map_err(|e| format!("{addr} did not say who it is: {e}"))?;
            Ok((info.name, info.instance))
        };
        tokio::time::timeout(CHECK_TIMEOUT, ask)
            .await
            .unwrap_or_else(|_| Err(format!("{addr} did not answer within {CHECK_TIMEOUT:?}")))
    }

    /// Checks that the server registering is at the address it gave.
    async fn verify(&self, reg: &Registration) -> Result<(), RpcError> {
        let Some(dial) = &self.shared.dial else {
            return Ok(());
        };
        match self.identify(dial, &reg.addr).await {
            Ok((name, instance)) if name == reg.name && instance == reg.instance => Ok(()),
            Ok((name, _)) => Err(refused(format!(
                "registration of `{}` refused: the server at {} is `{name}`, not this one; register the address this server listens on",
                reg.name, reg.addr
            ))),
            Err(e) => Err(refused(format!(
                "registration of `{}` refused: the agent cannot reach it at {} ({e}); set `advertise` to an address the agent and clients can reach",
                reg.name, reg.addr
            ))),
        }
    }

    /// Whether the process holding a name is gone from its address. Asked only of holders
    /// already declared down; with the checks waived (`verify_servers = false`) such a holder
    /// is presumed gone.
    async fn holder_gone(&self, addr: &str, instance: &str) -> bool {
        let Some(dial) = &self.shared.dial else {
            return true;
        };
        match self.identify(dial, addr).await {
            Ok((_, there)) => there != instance,
            Err(_) => true,
        }
    }

    /// A server registering: checked (role, address, name), then admitted by the core.
    async fn admit_server(self, reg: Registration) -> Result<RegisterReply, RpcError> {
        let name = reg.name.clone();
        if !self.is_server() {
            tracing::warn!(peer = %self.peer.addr, %name, "a client tried to register as a server");
            return Err(refused(format!(
                "only servers may register: this connection presented the client credential; a server presents `server_token` (refused `{name}`)"
            )));
        }
        if let Some(certified) = &self.peer.certified
            && *certified != name
        {
            tracing::warn!(peer = %self.peer.addr, %name, %certified, "a server tried to register under another name than its certificate's");
            return Err(refused(format!(
                "`{name}` may not register: this server's certificate is for `{certified}`; a server registers under its certificate's name"
            )));
        }
        let source = self.peer.addr.ip().to_string();
        // Before any dial: a flood of registrations costs at most the limit's dials.
        let allowed = self.core().may_register(&source, self.now());
        if let Err(e) = allowed {
            tracing::debug!(peer = %self.peer.addr, %name, "registration refused: {}", e.message);
            return Err(e);
        }
        if let Err(e) = self.verify(&reg).await {
            tracing::warn!(peer = %self.peer.addr, %name, "registration refused: {}", e.message);
            return Err(e);
        }
        // Verified by the dial above, or waived with it (`verify_servers = false`).
        let mut ctx = Registering {
            source,
            verified: true,
            holder_gone: false,
        };
        let mut result = self.core().register_from(reg.clone(), &ctx, self.now());
        if let Err(Refusal::Contested { addr, instance, .. }) = &result
            && self.holder_gone(addr, instance).await
        {
            tracing::warn!(%name, old = %addr, new = %reg.addr, "the name's previous server is down and no longer answers at its address: the name passes to the new process");
            ctx.holder_gone = true;
            result = self.core().register_from(reg.clone(), &ctx, self.now());
        }
        let reply = result.map_err(Refusal::into_rpc);
        match &reply {
            Ok(r) => {
                tracing::info!(server = %r.server_id, %name, addr = %reg.addr, "server registered");
                for d in &reg.services {
                    self.persist(Some(Op::Service(d.clone())));
                }
                // Saved at its first heartbeat: a registration that never beats leaves nothing.
                let mut saved = reg;
                saved.secret = None;
                *lock(&self.bound) = Some(Bound {
                    id: r.server_id,
                    reg: saved,
                });
                self.shared.registered.notify_waiters();
            }
            Err(e) => {
                tracing::warn!(%name, peer = %self.peer.addr, "registration refused: {}", e.message)
            }
        }
        reply
    }

    /// A heartbeat from the connection's server: saved at its first.
    fn beat(&self, hb: Heartbeat) -> Ack {
        if let Err(ack) = self.speaks_for(hb.server_id) {
            return ack;
        }
        let out = self.core().heartbeat(&hb, self.now());
        self.persist_learned(out.learned);
        out.reply
    }
}

impl AgentApi for AgentHandler {
    async fn register(self, _: Context, reg: Registration) -> Result<RegisterReply, RpcError> {
        // Dialling servers makes this future kilobytes large; boxed, it does not make every
        // other request's future as large.
        Box::pin(self.admit_server(reg)).await
    }

    async fn heartbeat(self, _: Context, hb: Heartbeat) -> Ack {
        self.beat(hb)
    }

    async fn report(self, _: Context, server: ServerId, reports: Vec<CallReport>) -> Ack {
        if let Err(ack) = self.speaks_for(server) {
            return ack;
        }
        let out = self.core().report(server, &reports, self.now());
        self.persist_learned(out.learned);
        out.reply
    }

    async fn list_services(self, _: Context) -> Vec<ServiceSummary> {
        self.core().list_services()
    }

    async fn describe(self, _: Context, service: String) -> Result<ServiceDesc, RpcError> {
        self.core().describe(&service)
    }

    async fn rank(
        self,
        _: Context,
        profile: CallProfile,
        options: RankOptions,
    ) -> Result<Ranking, RpcError> {
        let holder = Some(self.peer.principal.as_str());
        loop {
            // Registered before asking, so a registration between the two is not missed.
            let registered = self.shared.registered.notified();
            let now = self.now();
            let started = Instant::now();
            let (result, waiting) = {
                let mut core = self.core();
                let r = core.rank_for(holder, &profile, &options, now);
                let waiting = r.is_err() && core.awaiting_servers(now);
                (r, waiting)
            };
            if let Some(m) = &self.shared.observers.metrics {
                m.ranked(
                    &profile.service,
                    started.elapsed().as_secs_f64(),
                    result.is_ok(),
                );
            }
            match result {
                Err(e) if waiting && e.code == ErrorCode::ServerNotFound => {
                    // Just restarted: the servers it knew are registering again.
                    let left = self.core().config().restore_grace.saturating_sub(now);
                    let _ = tokio::time::timeout(left, registered).await;
                }
                r => return r,
            }
        }
    }

    async fn explain(
        self,
        _: Context,
        profile: CallProfile,
        options: RankOptions,
    ) -> Result<Vec<Candidate>, RpcError> {
        self.core().explain(&profile, &options, self.now())
    }

    async fn release(self, _: Context, ticket: Ticket) {
        let released = self.core().release_by(ticket, &self.peer.principal);
        if released && let Some(m) = &self.shared.observers.metrics {
            m.released();
        }
        if !released {
            tracing::debug!(%ticket, peer = %self.peer.addr, "release of a ticket that is not pending or not this peer's: ignored");
        }
    }

    async fn status(self, _: Context) -> AgentStatus {
        let mut s = self.core().status(self.now());
        s.storage = self.storage();
        s
    }

    async fn model_points(self, _: Context, server: ServerId, points: Vec<ModelPoint>) -> Ack {
        if let Err(ack) = self.speaks_for(server) {
            return ack;
        }
        let out = self.core().model_points(server, &points);
        self.persist_learned(out.learned);
        out.reply
    }

    async fn links(self, _: Context, server: ServerId, samples: Vec<LinkSample>) -> Ack {
        if let Err(ack) = self.speaks_for(server) {
            return ack;
        }
        self.core().record_links(server, &samples, self.now())
    }

    async fn arrived(
        self,
        _: Context,
        server: ServerId,
        calls: Vec<gridwise_proto::InFlight>,
    ) -> Ack {
        if let Err(ack) = self.speaks_for(server) {
            return ack;
        }
        let now = self.now();
        self.core().arrived(server, &calls, now)
    }

    async fn link_matrix(self, _: Context) -> Vec<LinkInfo> {
        self.core().link_matrix(self.now())
    }

    async fn sink(self, _: Context, data: serde_bytes::ByteBuf) -> u64 {
        data.len() as u64
    }

    async fn map_graph(self, _: Context, request: GraphRequest) -> Result<GraphPlan, RpcError> {
        // The mapping may take seconds on a large graph: off the runtime's threads, and off
        // the core's lock but for the copy it maps from and the reservations it records.
        let shared = self.shared.clone();
        let holder = self.peer.principal.clone();
        tokio::task::spawn_blocking(move || {
            let epoch = shared.epoch;
            let plan = map_graph_shared(&shared.core, Some(&holder), &request, || epoch.elapsed());
            if let (Ok(p), Some(d)) = (&plan, &shared.observers.dashboard) {
                d.mapped(&request, p);
            }
            plan
        })
        .await
        .unwrap_or_else(|e| {
            Err(RpcError::new(
                ErrorCode::OtherErrorCode,
                format!("mapping the graph failed inside the agent: {e}"),
            ))
        })
    }

    async fn divide(
        self,
        _: Context,
        request: gridwise_proto::DivideRequest,
    ) -> Result<gridwise_proto::DivideReply, RpcError> {
        let reply = self.core().divide(&request, self.now());
        if let (Ok(r), Some(d)) = (&reply, &self.shared.observers.dashboard) {
            d.divided(&request, r);
        }
        reply
    }

    async fn unreachable(self, _: Context, ticket: Ticket, server: ServerId) {
        let now = self.now();
        let said = self
            .core()
            .unreachable(ticket, server, &self.peer.principal, now);
        match said {
            Suspicion::For(period) => {
                tracing::info!(%server, peer = %self.peer.addr, "a client could not reach the server: ranked behind the others for {period:?}")
            }
            Suspicion::Already => {}
            Suspicion::Ignored => {
                tracing::debug!(%server, %ticket, peer = %self.peer.addr, "an unreachable report without a pending ticket of this client: ignored")
            }
        }
    }

    async fn reachable(self, _: Context, server: ServerId) {
        let now = self.now();
        if self.core().reached_again(server, &self.peer.principal, now) {
            tracing::info!(%server, peer = %self.peer.addr, "the client that could not reach the server reaches it again: ranked as before");
        }
    }

    async fn placed(self, _: Context, ticket: Ticket, server: ServerId) {
        if !self.core().placed(ticket, server, &self.peer.principal) {
            tracing::debug!(%server, %ticket, peer = %self.peer.addr, "a call placed elsewhere without a pending ticket of this client: ignored");
        }
    }

    async fn fetched(self, _: Context, holder: String, bytes: u64, seconds: f64) {
        self.core().client_fetched(&holder, bytes, seconds);
    }

    async fn models(self, _: Context) -> Vec<ModelSummary> {
        self.core().models()
    }

    async fn model(
        self,
        _: Context,
        server: String,
        service: String,
    ) -> Result<ModelExport, RpcError> {
        self.core().model(&server, &service)
    }
}
