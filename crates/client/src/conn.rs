//! Connections: the agent link ([`AgentLink`]), a pool of server connections by address, the
//! liveness watch of the servers running calls, and the cache of service descriptions.

use crate::agent_link::AgentLink;
use crate::config::ClientConfig;
use crate::error::GrpcError;
use crate::liveness::{Liveness, lock};
use gridwise_proto::{
    AgentStatus, CallProfile, Candidate, GraphPlan, GraphRequest, LinkInfo, ModelExport,
    ModelSummary, RankOptions, Ranking, RpcError, ServerApiClient, ServerId, ServiceDesc,
    ServiceSummary, Ticket,
};
use gridwise_runtime::wire::{self, DialConfig};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tarpc::client::RpcError as TransportError;
use tokio::runtime::Handle;
use tokio::task::AbortHandle;

/// How long a failed connection attempt to a server is remembered, so that many calls do not
/// each wait out the same dead address.
const CONNECT_FAILURE_MEMORY: Duration = Duration::from_millis(500);
/// A pooled server connection idle for longer than this is replaced rather than reused: the
/// server closes idle connections (its `idle_timeout_s`, 300 s by default), and a request sent
/// just as it does would be lost in flight.
const IDLE_REUSE: Duration = Duration::from_secs(120);

/// Whether a tarpc error means the connection itself is gone (so a new one may succeed).
pub(crate) fn connection_lost(e: &TransportError) -> bool {
    matches!(
        e,
        TransportError::Shutdown | TransportError::Send(_) | TransportError::Channel(_)
    )
}

/// Runs `fut` as a task on `rt` and waits for it: sockets and tarpc dispatch tasks then belong
/// to the client's runtime whatever runtime the caller is on.
pub(crate) async fn on_runtime<T, F>(rt: &Handle, fut: F) -> Result<T, GrpcError>
where
    F: Future<Output = Result<T, GrpcError>> + Send + 'static,
    T: Send + 'static,
{
    rt.spawn(fut)
        .await
        .map_err(|e| GrpcError::communication(format!("the connection task did not finish: {e}")))?
}

/// A server connection: the client, whether it is up, and the task that carries it (aborting
/// it closes the connection and fails every call waiting on it).
type LiveServer = (Arc<ServerApiClient>, Arc<AtomicBool>, AbortHandle);

async fn open_server(
    rt: Handle,
    addr: String,
    wire_cfg: DialConfig,
) -> Result<LiveServer, GrpcError> {
    let rt2 = rt.clone();
    on_runtime(&rt, async move {
        let (framed, _node) = wire::connect(&addr, &wire_cfg, "client").await?;
        let new = ServerApiClient::new(wire::client_config(), wire::client_transport(framed));
        let alive = Arc::new(AtomicBool::new(true));
        let (addr2, alive2) = (addr.clone(), alive.clone());
        let dispatch = rt2.spawn(async move {
            if let Err(e) = new.dispatch.await {
                tracing::debug!(server = %addr2, "server connection closed: {e}");
            }
            alive2.store(false, Ordering::Release);
        });
        Ok((Arc::new(new.client), alive, dispatch.abort_handle()))
    })
    .await
}

/// Tells (debug) of a call that waited for a server connection longer than a lost SYN's
/// resend: what delays the calls moved to a healed server, if anything does.
fn log_slow_connect(addr: &str, asked: Instant, dialled: Option<Instant>) {
    let waited = asked.elapsed();
    if waited < wire::dial::SYN_RESEND {
        return;
    }
    let behind = dialled.map_or(waited, |d| d.duration_since(asked));
    tracing::debug!(
        server = %addr,
        waited_ms = waited.as_millis() as u64,
        behind_another_dial_ms = behind.as_millis() as u64,
        "a slow connection"
    );
}

/// A pooled server connection; `epoch` identifies it for [`Conn::drop_server`].
#[derive(Clone)]
pub(crate) struct ServerConn {
    /// Which connection this is, for dropping exactly this one.
    pub(crate) epoch: u64,
    pub(crate) client: Arc<ServerApiClient>,
    /// Cleared when the connection closes.
    alive: Arc<AtomicBool>,
    /// When it was last handed out.
    last_used: Arc<Mutex<Instant>>,
}

impl ServerConn {
    /// Whether it may be handed out again: open, and not idle long enough for the server to be
    /// about to close it.
    fn is_usable(&self) -> bool {
        self.alive.load(Ordering::Acquire) && lock(&self.last_used).elapsed() < IDLE_REUSE
    }

    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }
}

#[derive(Default)]
struct Connecting {
    epoch: u64,
    last_failure: Option<(Instant, GrpcError)>,
}

#[derive(Default)]
struct ServerSlot {
    current: Mutex<Option<ServerConn>>,
    connecting: tokio::sync::Mutex<Connecting>,
    /// Every connection opened to the server that may still carry calls.
    dispatches: Mutex<Vec<AbortHandle>>,
}

/// The server connections, by address.
type Servers = Arc<Mutex<HashMap<String, Arc<ServerSlot>>>>;

/// Closes every connection to the server at `addr` (it stopped answering): the calls waiting
/// on them fail over at once.
fn close_server(servers: &Servers, addr: &str) {
    let Some(slot) = lock(servers).get(addr).cloned() else {
        return;
    };
    *lock(&slot.current) = None;
    for d in lock(&slot.dispatches).drain(..) {
        d.abort();
    }
}

/// Everything the client keeps open or cached.
pub(crate) struct Conn {
    rt: Handle,
    wire_cfg: DialConfig,
    /// The servers running this client's calls, pinged while they do.
    pub(crate) liveness: Arc<Liveness>,
    pub(crate) agent: Arc<AgentLink>,
    servers: Servers,
    descs: Mutex<HashMap<String, Arc<ServiceDesc>>>,
    /// Large arguments go to servers, and large outputs come back, on bulk connections.
    pub(crate) bulk: wire::bulk::BulkPool,
}

impl Conn {
    /// Connects to the agent now (so a wrong address fails here).
    pub(crate) async fn open(cfg: &ClientConfig, rt: Handle) -> Result<Conn, GrpcError> {
        // This client's own key: the daemons record it as the owner of what it makes.
        let principal = uuid::Uuid::new_v4().simple().to_string();
        let wire_cfg = cfg.wire(&principal)?;
        let agent = Arc::new(
            AgentLink::open(
                rt.clone(),
                cfg.agent_addrs(),
                wire_cfg.clone(),
                cfg.agent_timeout(),
                cfg.agent_retry(),
            )
            .await?,
        );
        let servers: Servers = Arc::default();
        let to_close = servers.clone();
        let liveness = Arc::new(Liveness::new(
            rt.clone(),
            wire_cfg.clone(),
            cfg.liveness_interval(),
            Box::new(move |addr: &str| close_server(&to_close, addr)),
        ));
        let watched = liveness.clone();
        agent.watch(move || watched.calls_in_flight() > 0);
        Ok(Conn {
            rt,
            bulk: wire::bulk::BulkPool::new(wire_cfg.clone(), "client"),
            wire_cfg,
            liveness,
            agent,
            servers,
            descs: Mutex::new(HashMap::new()),
        })
    }

    /// The agent in use (reconnections dial it first, then the others configured).
    pub(crate) fn agent_addr(&self) -> String {
        self.agent.addr()
    }

    /// The largest frame this client accepts (and may send).
    pub(crate) fn max_frame_bytes(&self) -> usize {
        self.wire_cfg.max_frame_bytes
    }

    /// `AgentApi::rank`.
    pub(crate) async fn rank(
        &self,
        profile: &CallProfile,
        opts: &RankOptions,
    ) -> Result<Ranking, GrpcError> {
        self.agent
            .call(|c, ctx| {
                let (p, o) = (profile.clone(), opts.clone());
                async move { c.rank(ctx, p, o).await }
            })
            .await?
            .map_err(GrpcError::from)
    }

    /// `AgentApi::explain`.
    pub(crate) async fn explain(
        &self,
        profile: &CallProfile,
        opts: &RankOptions,
    ) -> Result<Vec<Candidate>, GrpcError> {
        self.agent
            .call(|c, ctx| {
                let (p, o) = (profile.clone(), opts.clone());
                async move { c.explain(ctx, p, o).await }
            })
            .await?
            .map_err(GrpcError::from)
    }

    /// `AgentApi::release`.
    pub(crate) async fn release(&self, ticket: Ticket) -> Result<(), GrpcError> {
        self.agent
            .call(|c, ctx| async move { c.release(ctx, ticket).await })
            .await
    }

    /// `AgentApi::unreachable`.
    pub(crate) async fn unreachable(
        &self,
        ticket: Ticket,
        server: ServerId,
    ) -> Result<(), GrpcError> {
        self.agent
            .call(|c, ctx| async move { c.unreachable(ctx, ticket, server).await })
            .await
    }

    /// `AgentApi::placed`.
    pub(crate) async fn placed(&self, ticket: Ticket, server: ServerId) -> Result<(), GrpcError> {
        self.agent
            .call(|c, ctx| async move { c.placed(ctx, ticket, server).await })
            .await
    }

    /// `AgentApi::reachable`.
    pub(crate) async fn reachable(&self, server: ServerId) -> Result<(), GrpcError> {
        self.agent
            .call(|c, ctx| async move { c.reachable(ctx, server).await })
            .await
    }

    /// Brings a large value from its holder on a bulk connection and tells the holder, in
    /// passing (one attempt, not waited for), how long it took: the reply leg of its client
    /// link, which it tells every agent of its list (`ServerApi::fetched`). Without a
    /// connection to the holder at hand, the client's agent is told itself
    /// (`AgentApi::fetched`).
    pub(crate) async fn bulk_get(
        &self,
        r: &gridwise_proto::RemoteRef,
    ) -> Result<gridwise_proto::Value, wire::bulk::BulkError> {
        let started = Instant::now();
        let v = self.bulk.get(&r.holder, r.handle, None).await?;
        let seconds = started.elapsed().as_secs_f64();
        let (holder, bytes) = (r.holder.clone(), v.payload_bytes());
        let ctx = self.agent.ctx();
        match self.pooled_server(&holder) {
            Some(server) => {
                self.rt.spawn(async move {
                    if let Err(e) = server.client.fetched(ctx, bytes, seconds).await {
                        tracing::debug!(server = %holder, "could not tell a server of a fetch: {e}");
                    }
                });
            }
            None => {
                let agent = self.agent.client();
                self.rt.spawn(async move {
                    if let Err(e) = agent.fetched(ctx, holder, bytes, seconds).await {
                        tracing::debug!("could not tell the agent of a fetch: {e}");
                    }
                });
            }
        }
        Ok(v)
    }

    /// `AgentApi::status`.
    pub(crate) async fn status(&self) -> Result<AgentStatus, GrpcError> {
        self.agent
            .call(|c, ctx| async move { c.status(ctx).await })
            .await
    }

    /// `AgentApi::map_graph`.
    pub(crate) async fn map_graph(&self, req: &GraphRequest) -> Result<GraphPlan, GrpcError> {
        self.agent
            .call(|c, ctx| {
                let r = req.clone();
                async move { c.map_graph(ctx, r).await }
            })
            .await?
            .map_err(GrpcError::from)
    }

    /// `AgentApi::divide`.
    pub(crate) async fn divide(
        &self,
        req: &gridwise_proto::DivideRequest,
    ) -> Result<gridwise_proto::DivideReply, GrpcError> {
        self.agent
            .call(|c, ctx| {
                let r = req.clone();
                async move { c.divide(ctx, r).await }
            })
            .await?
            .map_err(GrpcError::from)
    }

    /// `AgentApi::link_matrix`.
    pub(crate) async fn link_matrix(&self) -> Result<Vec<LinkInfo>, GrpcError> {
        self.agent
            .call(|c, ctx| async move { c.link_matrix(ctx).await })
            .await
    }

    /// `AgentApi::models`.
    pub(crate) async fn models(&self) -> Result<Vec<ModelSummary>, GrpcError> {
        self.agent
            .call(|c, ctx| async move { c.models(ctx).await })
            .await
    }

    /// `AgentApi::model`.
    pub(crate) async fn model(
        &self,
        server: &str,
        service: &str,
    ) -> Result<ModelExport, GrpcError> {
        self.agent
            .call(|c, ctx| {
                let (a, b) = (server.to_string(), service.to_string());
                async move { c.model(ctx, a, b).await }
            })
            .await?
            .map_err(GrpcError::from)
    }

    /// `AgentApi::list_services`.
    pub(crate) async fn list_services(&self) -> Result<Vec<ServiceSummary>, GrpcError> {
        self.agent
            .call(|c, ctx| async move { c.list_services(ctx).await })
            .await
    }

    /// `AgentApi::describe`, always asking the agent; the answer refreshes the cache.
    pub(crate) async fn describe(&self, service: &str) -> Result<Arc<ServiceDesc>, GrpcError> {
        let desc: Result<ServiceDesc, RpcError> = self
            .agent
            .call(|c, ctx| {
                let s = service.to_string();
                async move { c.describe(ctx, s).await }
            })
            .await?;
        let desc = Arc::new(desc?);
        lock(&self.descs).insert(service.to_string(), desc.clone());
        Ok(desc)
    }

    /// A service's description, from the cache or else from the agent.
    pub(crate) async fn desc(&self, service: &str) -> Result<Arc<ServiceDesc>, GrpcError> {
        if let Some(d) = lock(&self.descs).get(service) {
            return Ok(d.clone());
        }
        self.describe(service).await
    }

    /// A connection to the server at `addr`: the pooled one, or a new one.
    pub(crate) async fn server(&self, addr: &str) -> Result<ServerConn, GrpcError> {
        if let Some(c) = self.pooled_server(addr) {
            return Ok(c);
        }
        // Boxed: connecting is rare, and its future would weigh on every call's.
        Box::pin(self.connect_server(addr)).await
    }

    /// The pooled connection to `addr`, if it is usable.
    fn pooled_server(&self, addr: &str) -> Option<ServerConn> {
        let slot = lock(&self.servers).get(addr)?.clone();
        let cur = lock(&slot.current);
        let c = cur.as_ref().filter(|c| c.is_usable())?;
        c.touch();
        Some(c.clone())
    }

    async fn connect_server(&self, addr: &str) -> Result<ServerConn, GrpcError> {
        let slot = {
            let mut pool = lock(&self.servers);
            match pool.get(addr) {
                Some(s) => s.clone(),
                None => pool.entry(addr.to_string()).or_default().clone(),
            }
        };
        if let Some(c) = lock(&slot.current).as_ref()
            && c.is_usable()
        {
            c.touch();
            return Ok(c.clone());
        }
        let asked = Instant::now();
        let mut connecting = slot.connecting.lock().await;
        if let Some(c) = lock(&slot.current).as_ref()
            && c.is_usable()
        {
            c.touch();
            log_slow_connect(addr, asked, None);
            return Ok(c.clone());
        }
        // Remembered only while the server is held unresponsive: once it answers a liveness
        // ping (a partition healed, a server restarted), it is dialled again at once.
        if let Some((at, e)) = &connecting.last_failure
            && at.elapsed() < CONNECT_FAILURE_MEMORY
            && self.liveness.is_suspect(addr)
        {
            return Err(e.clone());
        }
        let dialled = Instant::now();
        let opened = open_server(self.rt.clone(), addr.to_string(), self.wire_cfg.clone()).await;
        log_slow_connect(addr, asked, Some(dialled));
        match opened {
            Ok((client, alive, dispatch)) => {
                connecting.epoch += 1;
                connecting.last_failure = None;
                let mut all = lock(&slot.dispatches);
                all.retain(|d| !d.is_finished());
                all.push(dispatch);
                drop(all);
                let c = ServerConn {
                    epoch: connecting.epoch,
                    client,
                    alive,
                    last_used: Arc::new(Mutex::new(Instant::now())),
                };
                *lock(&slot.current) = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                connecting.last_failure = Some((Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Forgets the pooled connection `epoch` to `addr` (after it failed), so the next use
    /// reconnects.
    pub(crate) fn drop_server(&self, addr: &str, epoch: u64) {
        let slot = lock(&self.servers).get(addr).cloned();
        if let Some(slot) = slot {
            let mut cur = lock(&slot.current);
            if cur.as_ref().is_some_and(|c| c.epoch == epoch) {
                *cur = None;
            }
        }
    }
}
