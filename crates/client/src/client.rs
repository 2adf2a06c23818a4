//! [`GridClient`]: the asynchronous GridRPC client.

pub use crate::call::{CallResult, SessionId};
use crate::config::ClientConfig;
use crate::conn::{Conn, connection_lost};
use crate::error::{GrpcError, transport_text};
use crate::handle::{Binding, FunctionHandle};
use crate::moving::MayMove;
use crate::session::{CancelFlag, CompletionGuard, Sessions};
use gridwise_proto::clock::unix_ns;
use gridwise_proto::{
    AgentStatus, CallError, CallErrorKind, CallId, CallProfile, Candidate, DataHandle, ErrorCode,
    ExecuteReply, ExecuteRequest, LinkInfo, ModelExport, ModelSummary, Pong, RankOptions, Ranking,
    RemoteRef, ServerId, ServerStatus, ServiceDesc, ServiceSummary, Ticket, Value,
};
use gridwise_runtime::wire;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tarpc::client::RpcError as TransportError;
use tokio::runtime::Handle;

pub(crate) struct Inner {
    pub(crate) cfg: ClientConfig,
    pub(crate) conn: Conn,
    sessions: Arc<Sessions>,
    pub(crate) rt: Handle,
    next_handle: AtomicU64,
    pub(crate) call_timeout: Duration,
    /// Servers reported unreachable that this client pings until they answer again.
    awaiting_answer: std::sync::Mutex<std::collections::HashSet<ServerId>>,
}

/// A connection to a gridwise grid with GridRPC semantics (async). Cheap to clone; clones
/// share connections and sessions.
#[derive(Clone)]
pub struct GridClient {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for GridClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GridClient")
            .field("agent", &self.inner.cfg.agent)
            .finish_non_exhaustive()
    }
}

/// `fut`, or None once `cancel` is raised first (never, without a flag).
async fn unless_cancelled<F: Future>(cancel: Option<&CancelFlag>, fut: F) -> Option<F::Output> {
    match cancel {
        None => Some(fut.await),
        Some(c) => {
            tokio::select! {
                biased;
                out = fut => Some(out),
                _ = c.cancelled() => None,
            }
        }
    }
}

/// How one attempt to run a call on one server ended.
pub(crate) enum Attempt {
    /// It ran: the reply, and the execute round trip in seconds.
    Done(ExecuteReply, f64),
    /// The server refused before running it: another may take it.
    NotRun(String),
    /// Taken back before it started, for a server that answers again and that the agent now
    /// ranks first: to be placed afresh.
    Moved(String),
    /// The server could not be reached at all (no connection): another may take it, and the
    /// agent is told, so that it stops ranking that server first.
    Unreached(String),
    /// It was sent, and then the server died (its connection closed): it may have run, and it
    /// may be what brought the server down.
    Crashed(String),
    /// It was sent, and then the server stopped answering pings: frozen, or cut off from this
    /// client by the network. It may still be running the call. Not held against the call, as
    /// a crash is: a cut silences every server behind it at once, and a call failed for two
    /// of them would be a call lost to the network.
    Silent(String),
    /// A final answer about the call: it failed, timed out, or was cancelled.
    Failed(CallError, GrpcError),
}

/// How often a call waiting on a server may be taken back and placed afresh (each time a server
/// this client had lost answers again and the agent ranks it first); the last placing keeps it
/// where it goes, so a server that comes and goes cannot keep a call moving.
const MOST_MOVES: usize = 2;

/// A call to place: what each placing of it needs besides a ranking.
struct Placing<'a> {
    service: &'a str,
    profile: &'a CallProfile,
    opts: &'a RankOptions,
    inputs: &'a [Value],
    keep_outputs: &'a [u32],
    /// Whether it may be taken back from where it waits (see [`MOST_MOVES`]).
    may_move: bool,
    /// Servers tried in placings before this one.
    tried: u32,
}

/// How a placing ended, when it did not fail the call.
enum Placed {
    Ran(Box<CallResult>),
    /// Taken back before it started: to be placed afresh; the servers tried so far.
    Moved(u32),
}

/// Why a call failed, for the graph runner: the error, and the remote inputs found lost.
pub(crate) struct Failure {
    pub(crate) error: GrpcError,
    pub(crate) lost: Vec<DataHandle>,
}

impl From<GrpcError> for Failure {
    fn from(error: GrpcError) -> Self {
        Failure {
            error,
            lost: Vec::new(),
        }
    }
}

/// The longest a failover waits for the agent to hear that a candidate was unreachable.
const UNREACHABLE_WAIT: Duration = Duration::from_millis(200);

/// Crash-like failures after which a call is given up: once a server has died under it, the
/// call is tried on one more server; if that one dies too, the call may be what kills them.
const CRASHES_TOLERATED: usize = 2;

impl Inner {
    /// Tells the agent that the server `server` (a candidate of the ranking that gave
    /// `ticket`) could not be reached, waiting a moment for the agent to take it: the ticket
    /// must still be pending when the message arrives, and the next candidate's report would
    /// clear it. A slow agent does not hold the call up longer than `UNREACHABLE_WAIT`.
    pub(crate) async fn tell_unreachable(
        self: &Arc<Self>,
        ticket: Ticket,
        server: ServerId,
        addr: &str,
    ) {
        self.tell_reachable_when_it_answers(server, addr);
        let inner = self.clone();
        let told = self
            .rt
            .spawn(async move { inner.conn.unreachable(ticket, server).await });
        match tokio::time::timeout(UNREACHABLE_WAIT, told).await {
            Ok(Ok(Err(e))) => {
                tracing::debug!(%server, "could not tell the agent the server is unreachable: {e}")
            }
            Err(_) => {
                tracing::debug!(%server, "the agent is slow to hear of an unreachable server")
            }
            _ => {}
        }
    }

    /// Pings `addr` until it answers, then tells the agent, which ends the suspicion this
    /// client's report set: a healed partition's servers are used again within a liveness
    /// interval, not when a suspicion that doubles with each report runs out. Once per server
    /// at a time; nothing keeps the client alive for it.
    fn tell_reachable_when_it_answers(self: &Arc<Self>, server: ServerId, addr: &str) {
        if !crate::liveness::lock(&self.awaiting_answer).insert(server) {
            return;
        }
        let answers = self.conn.liveness.until_answers(addr);
        let inner = Arc::downgrade(self);
        self.rt.spawn(async move {
            answers.await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            crate::liveness::lock(&inner.awaiting_answer).remove(&server);
            if let Err(e) = inner.conn.reachable(server).await {
                tracing::debug!(%server, "could not tell the agent the server answers again: {e}");
            }
        });
    }

    /// Tells the agent in the background that the call of `ticket` goes to `server`, not to
    /// the server its ranking reserved (`AgentApi::placed`).
    fn placed_later(self: &Arc<Self>, ticket: Ticket, server: ServerId) {
        let inner = self.clone();
        self.rt.spawn(async move {
            if let Err(e) = inner.conn.placed(ticket, server).await {
                tracing::debug!(%ticket, %server, "could not tell the agent where the call went: {e}");
            }
        });
    }

    /// Gives up an assignment in the background.
    pub(crate) fn release_later(self: &Arc<Self>, ticket: Ticket) {
        let inner = self.clone();
        self.rt.spawn(async move {
            if let Err(e) = inner.conn.release(ticket).await {
                tracing::debug!(%ticket, "could not release the ticket: {e}");
            }
        });
    }

    /// Sends the call to the server at `addr` and waits for it, watching that the server keeps
    /// answering; `cancel` stops it (on the server too). With `may_move`, should a server
    /// this client had lost answer again and the agent now rank it first while the call waits
    /// there, the call is taken back (`Attempt::Moved`).
    /// `req` comes without inputs: `inputs` are borrowed, so that trying the next server
    /// copies none of the large ones.
    pub(crate) async fn attempt(
        self: &Arc<Self>,
        addr: &str,
        who: &str,
        (req, inputs): (ExecuteRequest, &[Value]),
        cancel: Option<&CancelFlag>,
        may_move: Option<MayMove<'_>>,
    ) -> Attempt {
        let mut req = req;
        let sent_at = Instant::now();
        // The transfer the server times starts with the first staged byte.
        req.sent_at_unix_ns = unix_ns();
        let staged = match unless_cancelled(cancel, self.stage_inputs(addr, who, inputs)).await {
            None => Err(None),
            Some(Ok((sent, staged))) => {
                req.inputs = sent;
                req.bulk_outputs = true;
                Ok(staged)
            }
            Some(Err(a)) => Err(Some(a)),
        };
        let staged = match staged {
            Ok(s) => s,
            Err(outcome) => {
                let service = req.service.clone();
                return outcome.unwrap_or_else(|| {
                    let e = GrpcError::cancelled(format!("the call to `{service}`"));
                    Attempt::Failed(
                        CallError::new(CallErrorKind::Cancelled, e.message.clone()),
                        e,
                    )
                });
            }
        };
        let keep = req.keep_outputs.clone();
        let outcome = self
            .execute_on(addr, who, req, cancel, sent_at, may_move)
            .await;
        match outcome {
            // The round trip runs from the first staged byte to the last collected one.
            Attempt::Done(mut rep, _) => {
                match self.collect_outputs(who, &mut rep.outputs, &keep).await {
                    Ok(()) => Attempt::Done(rep, sent_at.elapsed().as_secs_f64()),
                    Err(failed) => failed,
                }
            }
            other => {
                Box::pin(self.free_staged(addr, staged)).await;
                other
            }
        }
    }

    async fn execute_on(
        self: &Arc<Self>,
        addr: &str,
        who: &str,
        req: ExecuteRequest,
        cancel: Option<&CancelFlag>,
        sent_at: Instant,
        may_move: Option<MayMove<'_>>,
    ) -> Attempt {
        let service = req.service.clone();
        let cancelled = || {
            let e = GrpcError::cancelled(format!("the call to `{service}`"));
            Attempt::Failed(
                CallError::new(CallErrorKind::Cancelled, e.message.clone()),
                e,
            )
        };
        let Some(conn) = unless_cancelled(cancel, self.conn.server(addr)).await else {
            return cancelled();
        };
        let conn = match conn {
            Ok(c) => c,
            Err(e) => return Attempt::Unreached(format!("{who}: {}", e.message)),
        };
        if cancel.is_some_and(CancelFlag::is_cancelled) {
            return cancelled();
        }
        let call_id = req.call_id;
        // While it is watched, the server is pinged; if it stops answering, its connections
        // are closed and `exec` fails below.
        let _watch = self.conn.liveness.watch(addr);
        let ctx = wire::context(self.call_timeout);
        // Boxed: tarpc's request future is kilobytes, and a spawned call's future is copied
        // as its task starts and again as it ends.
        let mut exec = Box::pin(conn.client.execute(ctx, req));
        let never = CancelFlag::default();
        let cancel_flag = cancel.unwrap_or(&never);
        // Servers coming back are watched for on a small channel; the looks at the agent's
        // ranking (a larger future) start only once one does.
        let mut returns = may_move.as_ref().map(|_| self.conn.liveness.returns());
        let mut looks = None;
        let reply = loop {
            tokio::select! {
                biased;
                r = &mut exec => break r,
                _ = cancel_flag.cancelled() => {
                    // Tell the server first; dropping `exec` afterwards stops waiting.
                    Box::pin(self.cancel_on_server(&conn.client, call_id, who)).await;
                    return cancelled();
                }
                back = async { returns.as_mut()?.changed().await.ok() }, if returns.is_some() && looks.is_none() => {
                    match (back, &may_move) {
                        (Some(()), Some(m)) => looks = Some(Box::pin(self.better_than(addr, m, sent_at))),
                        _ => returns = None,
                    }
                }
                Some(why) = async { Some(looks.as_mut()?.await) }, if looks.is_some() => {
                    (looks, returns) = (None, None);
                    if Box::pin(self.withdraw_on_server(&conn.client, call_id, who)).await {
                        // Dropping `exec` gives the call's place there up.
                        return Attempt::Moved(format!("{who}: taken back before it started: {why}"));
                    }
                }
            }
        };
        let round_trip_s = sent_at.elapsed().as_secs_f64();
        match reply {
            Ok(Ok(rep)) => Attempt::Done(rep, round_trip_s),
            Ok(Err(e)) if e.retryable() => Attempt::NotRun(format!("{who}: {e}")),
            Ok(Err(e)) => {
                let g = call_failed(who, e.clone());
                Attempt::Failed(e, g)
            }
            Err(TransportError::DeadlineExceeded) => {
                // Not retried: the call may still be running there.
                let g = GrpcError::communication(format!(
                    "{who} did not answer `{service}` within {} s (call_timeout_s)",
                    self.call_timeout.as_secs()
                ));
                Attempt::Failed(
                    CallError::new(CallErrorKind::Internal, g.message.clone()),
                    g,
                )
            }
            Err(_) if self.conn.liveness.is_suspect(addr) => Attempt::Silent(format!(
                "{who} stopped answering during the call (no answer to pings for {:.1} s)",
                self.conn.liveness.limit().as_secs_f64()
            )),
            Err(e) => {
                if connection_lost(&e) {
                    self.conn.drop_server(addr, conn.epoch);
                }
                Attempt::Crashed(format!(
                    "{who} closed the connection during the call ({})",
                    transport_text(&e)
                ))
            }
        }
    }

    /// The agent's ranking for a call, unless `cancel` fires first (then an assignment the
    /// agent records anyway is released when it comes).
    async fn rank_unless_cancelled(
        self: &Arc<Self>,
        service: &str,
        profile: CallProfile,
        opts: RankOptions,
        cancel: Option<&CancelFlag>,
    ) -> Result<Ranking, Failure> {
        let Some(c) = cancel else {
            return Ok(self.conn.rank(&profile, &opts).await?);
        };
        let inner = self.clone();
        let rank = async move { inner.conn.rank(&profile, &opts).await };
        let mut rank = Box::pin(rank);
        tokio::select! {
            biased;
            r = &mut rank => Ok(r?),
            _ = c.cancelled() => {
                let inner = self.clone();
                self.rt.spawn(async move {
                    if let Ok(r) = rank.await {
                        inner.release_later(r.ticket);
                    }
                });
                Err(GrpcError::cancelled(format!("the call to `{service}`")).into())
            }
        }
    }

    /// The call path: rank, then try the candidates in order — servers that did not answer
    /// lately last. A server that cannot be reached or refuses leads to the next; a server that
    /// dies or stops answering during the call counts as a crash (`crashes` holds those already
    /// met, e.g. on a graph's planned server), and after two the call fails rather than walk
    /// the grid: it may be what kills them. A call waiting in a server's queue when a server
    /// this client had lost answers again is taken back, if the agent now ranks that one first
    /// and the call has not started, and ranked afresh (`moving.rs`): the calls a healed
    /// partition frees spread over the grid at once.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn run_call(
        self: &Arc<Self>,
        service: &str,
        binding: &Binding,
        profile: CallProfile,
        inputs: &[Value],
        cancel: Option<&CancelFlag>,
        keep_outputs: Vec<u32>,
        mut crashes: Vec<String>,
    ) -> Result<CallResult, Failure> {
        let cancelled = || GrpcError::cancelled(format!("the call to `{service}`"));
        if cancel.is_some_and(CancelFlag::is_cancelled) {
            return Err(cancelled().into());
        }
        check_inline_inputs(service, inputs, self.conn.max_frame_bytes() as u64)?;
        let opts = RankOptions {
            load_model: self.cfg.load_model,
            model_family: None,
            pin_server: binding.server().map(str::to_string),
            policy: self.cfg.policy,
        };
        let mut tried = 0;
        for placing in 0..=MOST_MOVES {
            let call = Placing {
                service,
                profile: &profile,
                opts: &opts,
                inputs,
                keep_outputs: &keep_outputs,
                may_move: placing < MOST_MOVES,
                tried,
            };
            let started = Instant::now();
            let ranking = self
                .rank_unless_cancelled(service, profile.clone(), opts.clone(), cancel)
                .await?;
            let ranked = (ranking, started.elapsed().as_secs_f64());
            match Box::pin(self.place(call, ranked, cancel, &mut crashes)).await? {
                Placed::Ran(r) => return Ok(*r),
                Placed::Moved(attempts) => tried = attempts,
            }
        }
        unreachable!("the last placing moves no call")
    }

    /// One placing of a call: the candidates of one ranking tried in order (see
    /// [`run_call`](Self::run_call)), unless the call is taken back from where it waits.
    async fn place(
        self: &Arc<Self>,
        call: Placing<'_>,
        (ranking, rank_s): (Ranking, f64),
        cancel: Option<&CancelFlag>,
        crashes: &mut Vec<String>,
    ) -> Result<Placed, Failure> {
        let Placing {
            service,
            inputs,
            keep_outputs,
            may_move,
            tried,
            profile,
            opts,
        } = call;
        let limit = self.conn.max_frame_bytes() as u64;
        let n = ranking.candidates.len();
        if n == 0 {
            self.release_later(ranking.ticket);
            return Err(GrpcError::new(
                ErrorCode::ServerNotFound,
                format!("the agent found no server for `{service}`"),
            )
            .into());
        }
        let mut failures: Vec<String> = Vec::new();
        // The ranking reserved its head; the agent hears where the call goes if not there.
        let reserved = ranking.candidates[0].server_id;
        let mut untried: Vec<&Candidate> = ranking.candidates.iter().collect();
        for i in 0..n {
            // Servers that did not answer lately go last (the agent may not know yet), judged
            // afresh before each try: the failure of one server behind a cut often shows that
            // its neighbours went silent too.
            let next = untried
                .iter()
                .position(|c| !self.conn.liveness.is_suspect(&c.addr))
                .unwrap_or(0);
            let cand = untried.remove(next);
            let mover = may_move.then_some(MayMove { profile, opts });
            let who = format!("{} ({})", cand.name, cand.addr);
            if tried > 0 || i > 0 {
                // Where a moved or failed-over call goes next: with the moves above, the trail
                // of a call a partition displaced.
                tracing::debug!(server = %who, call = %service, "sending it there");
            }
            if cand.server_id != reserved {
                self.placed_later(ranking.ticket, cand.server_id);
            }
            let req = ExecuteRequest {
                call_id: CallId::new_random(),
                ticket: Some(ranking.ticket),
                service: service.to_string(),
                inputs: Vec::new(),
                sent_at_unix_ns: 0,
                keep_outputs: keep_outputs.to_vec(),
                reply_limit_bytes: limit,
                bulk_outputs: true,
                copy_kept_below_bytes: 0,
            };
            match self
                .attempt(&cand.addr, &who, (req, inputs), cancel, mover)
                .await
            {
                Attempt::Done(rep, round_trip_s) => {
                    return Ok(Placed::Ran(Box::new(CallResult {
                        outputs: rep.outputs,
                        server: rep.server,
                        timing: rep.timing,
                        rank_s,
                        round_trip_s,
                        predicted: Some(cand.etc.clone()),
                        attempts: tried + (i + 1) as u32,
                    })));
                }
                Attempt::Moved(why) => {
                    tracing::debug!(server = %who, "placing it afresh: {why}");
                    self.release_later(ranking.ticket);
                    return Ok(Placed::Moved(tried + (i + 1) as u32));
                }
                Attempt::NotRun(why) => {
                    tracing::debug!(server = %who, "not run there, trying the next server: {why}");
                    failures.push(why);
                }
                Attempt::Unreached(why) => {
                    tracing::debug!(server = %who, "unreachable, trying the next server: {why}");
                    self.tell_unreachable(ranking.ticket, cand.server_id, &cand.addr)
                        .await;
                    failures.push(why);
                }
                Attempt::Silent(why) => {
                    tracing::warn!(server = %who, call = %service, "{why}; trying the next server");
                    self.tell_unreachable(ranking.ticket, cand.server_id, &cand.addr)
                        .await;
                    failures.push(why);
                }
                Attempt::Crashed(why) => {
                    tracing::warn!(server = %who, call = %service, "{why}");
                    crashes.push(why);
                    if crashes.len() >= CRASHES_TOLERATED {
                        self.release_later(ranking.ticket);
                        return Err(GrpcError::communication(format!(
                            "`{service}` was not retried further: the servers it ran on died or stopped answering during it, twice ({}); the call may be what brings them down (too large for their memory?), so it was not sent to more servers",
                            crashes.join("; ")
                        ))
                        .into());
                    }
                    failures.push(crashes.last().cloned().unwrap_or_default());
                }
                Attempt::Failed(e, g) => {
                    if e.kind == CallErrorKind::Cancelled {
                        self.release_later(ranking.ticket);
                    }
                    return Err(Failure {
                        error: g,
                        lost: e.lost,
                    });
                }
            }
        }
        self.release_later(ranking.ticket);
        Err(GrpcError::communication(format!(
            "every candidate server failed for `{service}` ({} tried): {}",
            n,
            failures.join("; ")
        ))
        .into())
    }

    /// Tells a server to stop a call, waiting (a bounded time) for its answer.
    async fn cancel_on_server(
        &self,
        server: &gridwise_proto::ServerApiClient,
        call_id: CallId,
        who: &str,
    ) {
        let timeout = self.cfg.agent_timeout();
        let ask = server.cancel(wire::context(timeout), call_id);
        match tokio::time::timeout(timeout, ask).await {
            Ok(Ok(known)) => {
                tracing::debug!(server = %who, %call_id, known, "cancel delivered");
            }
            Ok(Err(e)) => {
                tracing::debug!(server = %who, %call_id, "cancel not delivered: {e}");
            }
            Err(_) => tracing::debug!(server = %who, %call_id, "cancel not answered in time"),
        }
    }
}

pub(crate) fn call_failed(who: &str, e: CallError) -> GrpcError {
    let code = e.code();
    GrpcError::new(code, format!("{who}: {e}"))
}

impl GridClient {
    /// Connects to the agent named in `cfg`. Must be called inside a tokio runtime; session
    /// tasks and connections live on that runtime.
    pub async fn connect(cfg: ClientConfig) -> Result<GridClient, GrpcError> {
        let rt = Handle::try_current().map_err(|_| {
            GrpcError::new(
                ErrorCode::OtherErrorCode,
                "GridClient::connect needs a tokio runtime (use the blocking Client otherwise)",
            )
        })?;
        if cfg.agent_addrs().is_empty() {
            return Err(GrpcError::new(
                ErrorCode::ConfigfileError,
                "no agent address: set agent = \"host:port\"",
            ));
        }
        let conn = Conn::open(&cfg, rt.clone()).await?;
        let call_timeout = cfg.call_timeout();
        Ok(GridClient {
            inner: Arc::new(Inner {
                cfg,
                conn,
                sessions: Arc::new(Sessions::default()),
                rt,
                next_handle: AtomicU64::new(1),
                call_timeout,
                awaiting_answer: Default::default(),
            }),
        })
    }

    /// The configuration the client was made with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.cfg
    }

    fn new_handle(&self, binding: Binding, desc: Arc<ServiceDesc>) -> FunctionHandle {
        let id = self.inner.next_handle.fetch_add(1, Ordering::Relaxed);
        FunctionHandle::new(id, binding, desc)
    }

    /// A handle for `service` on whichever server the agent ranks best
    /// (`grpc_function_handle_default`); `FunctionNotFound` when no server offers it.
    pub async fn function_handle_default(
        &self,
        service: &str,
    ) -> Result<FunctionHandle, GrpcError> {
        let desc = self.inner.conn.desc(service).await?;
        Ok(self.new_handle(Binding::Default, desc))
    }

    /// A handle for `service` bound to one server (`grpc_function_handle_init`), named by its
    /// registered name or by the `host:port` it serves on (what GridRPC programs pass);
    /// `ServerNotFound` for an unknown server, `FunctionNotFound` when that server does not
    /// offer the service.
    pub async fn function_handle_init(
        &self,
        service: &str,
        server: &str,
    ) -> Result<FunctionHandle, GrpcError> {
        let status = self.inner.conn.status().await?;
        let by_name = status.servers.iter().find(|s| s.name == server);
        let Some(server) = by_name.or_else(|| at_address(&status.servers, server)) else {
            let known: Vec<String> = status
                .servers
                .iter()
                .map(|s| format!("{} ({})", s.name, s.addr))
                .collect();
            return Err(GrpcError::new(
                ErrorCode::ServerNotFound,
                format!(
                    "the agent knows no server named or at `{server}` (known: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        };
        let server_name = server.name.as_str();
        if !server.services.iter().any(|s| s == service) {
            return Err(GrpcError::new(
                ErrorCode::FunctionNotFound,
                format!(
                    "server `{server_name}` does not offer `{service}` (it offers: {})",
                    server.services.join(", ")
                ),
            ));
        }
        let desc = self.inner.conn.desc(service).await?;
        Ok(self.new_handle(Binding::Server(server_name.to_string()), desc))
    }

    /// Invalidates a handle (`grpc_function_handle_destruct`); later calls through it (or its
    /// clones) get `InvalidFunctionHandle`. Running sessions are not affected.
    pub fn function_handle_destruct(&self, h: &FunctionHandle) -> Result<(), GrpcError> {
        if h.destruct() {
            Ok(())
        } else {
            Err(invalid_handle(h))
        }
    }

    /// The handle a session was started with (`grpc_get_handle`).
    pub fn get_handle(&self, id: SessionId) -> Result<FunctionHandle, GrpcError> {
        self.inner.sessions.handle(id)
    }

    fn check(h: &FunctionHandle, inputs: &[Value]) -> Result<CallProfile, GrpcError> {
        if !h.is_live() {
            return Err(invalid_handle(h));
        }
        Ok(h.desc.profile(inputs)?)
    }

    /// Calls the service and waits for its outputs (`grpc_call`).
    pub async fn call(
        &self,
        h: &FunctionHandle,
        inputs: Vec<Value>,
    ) -> Result<CallResult, GrpcError> {
        self.call_borrowed(h, &inputs).await
    }

    /// [`GridClient::call`] leaving the inputs to the caller, who may use their buffers again
    /// (the Python client gives them back to [`gridwise_proto::value::recycle`]).
    pub async fn call_borrowed(
        &self,
        h: &FunctionHandle,
        inputs: &[Value],
    ) -> Result<CallResult, GrpcError> {
        let profile = Self::check(h, inputs)?;
        self.inner
            .run_call(
                &h.service,
                &h.binding,
                profile,
                inputs,
                None,
                Vec::new(),
                Vec::new(),
            )
            .await
            .map_err(|f| f.error)
    }

    /// Like [`GridClient::call`], but the outputs at positions `keep` (among the service's
    /// outputs) stay on the server that ran the call and come back as [`Value::Ref`]: a later
    /// call on any server can take them as inputs and pulls them straight from that server.
    /// Fetch them with [`GridClient::fetch`]; release them with [`GridClient::free`].
    pub async fn call_keep(
        &self,
        h: &FunctionHandle,
        inputs: Vec<Value>,
        keep: &[usize],
    ) -> Result<CallResult, GrpcError> {
        let profile = Self::check(h, &inputs)?;
        let keep = Self::check_keep(h, keep)?;
        self.inner
            .run_call(
                &h.service,
                &h.binding,
                profile,
                &inputs,
                None,
                keep,
                Vec::new(),
            )
            .await
            .map_err(|f| f.error)
    }

    fn check_keep(h: &FunctionHandle, keep: &[usize]) -> Result<Vec<u32>, GrpcError> {
        let outputs = h.desc.outputs().count();
        keep.iter()
            .map(|&k| {
                if k < outputs {
                    Ok(k as u32)
                } else {
                    Err(GrpcError::new(
                        ErrorCode::OtherErrorCode,
                        format!(
                            "`{}` has {outputs} output(s): cannot keep output {k}",
                            h.service
                        ),
                    ))
                }
            })
            .collect()
    }

    /// Asks a server (by address) for its name, load and the values it keeps.
    pub async fn ping(&self, addr: &str) -> Result<Pong, GrpcError> {
        let conn = self.inner.conn.server(addr).await?;
        conn.client
            .ping(wire::context(self.inner.cfg.agent_timeout()))
            .await
            .map_err(|e| GrpcError::transport(addr, &e))
    }

    /// A value kept on a server, brought back.
    pub async fn fetch(&self, r: &RemoteRef) -> Result<Value, GrpcError> {
        if r.bytes >= wire::bulk::BULK_MIN_BYTES {
            return match self.inner.conn.bulk_get(r).await {
                Ok(v) => Ok(v),
                Err(wire::bulk::BulkError::Refused(e)) => Err(GrpcError::from(e)),
                Err(wire::bulk::BulkError::Dial(e)) => Err(GrpcError::from(e)),
                Err(e) => Err(GrpcError::communication(format!("{}: {e}", r.holder))),
            };
        }
        let conn = self.inner.conn.server(&r.holder).await?;
        match conn
            .client
            .fetch(wire::context(self.inner.call_timeout), r.handle)
            .await
        {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(GrpcError::from(e)),
            Err(e) => Err(GrpcError::transport(&r.holder, &e)),
        }
    }

    /// Releases kept values on their servers; returns how many were still held.
    pub async fn free(&self, refs: &[RemoteRef]) -> Result<u32, GrpcError> {
        self.per_holder(
            refs,
            |c, ctx, handles| async move { c.free(ctx, handles).await },
        )
        .await
    }

    /// Marks kept values as still needed, restarting their holders' idle limit
    /// (`RemoteRef::idle_ttl_ms`); returns how many are still held. Graph runs renew what they
    /// keep by themselves.
    pub async fn renew(&self, refs: &[RemoteRef]) -> Result<u32, GrpcError> {
        self.per_holder(refs, |c, ctx, handles| async move {
            c.renew(ctx, handles).await
        })
        .await
    }

    /// Sends each holder one request for its handles among `refs`; adds up the answers.
    async fn per_holder<F, Fut>(&self, refs: &[RemoteRef], op: F) -> Result<u32, GrpcError>
    where
        F: Fn(
            Arc<gridwise_proto::ServerApiClient>,
            tarpc::context::Context,
            Vec<DataHandle>,
        ) -> Fut,
        Fut: std::future::Future<Output = Result<u32, tarpc::client::RpcError>>,
    {
        let mut by_holder: std::collections::BTreeMap<&str, Vec<DataHandle>> =
            std::collections::BTreeMap::new();
        for r in refs {
            by_holder
                .entry(r.holder.as_str())
                .or_default()
                .push(r.handle);
        }
        let mut n = 0;
        for (holder, handles) in by_holder {
            let conn = self.inner.conn.server(holder).await?;
            n += op(
                conn.client.clone(),
                wire::context(self.inner.cfg.agent_timeout()),
                handles,
            )
            .await
            .map_err(|e| GrpcError::transport(holder, &e))?;
        }
        Ok(n)
    }

    /// Starts the call and returns at once (`grpc_call_async`). Wrong arguments are reported
    /// here, before anything is sent.
    pub fn call_async(
        &self,
        h: &FunctionHandle,
        inputs: Vec<Value>,
    ) -> Result<SessionId, GrpcError> {
        let profile = Self::check(h, &inputs)?;
        let (id, cancel) = self.inner.sessions.start(h.clone());
        let guard = CompletionGuard::new(self.inner.sessions.clone(), id);
        let inner = self.inner.clone();
        let (service, binding) = (h.service.clone(), h.binding.clone());
        self.inner.rt.spawn(async move {
            let r = inner
                .run_call(
                    &service,
                    &binding,
                    profile,
                    &inputs,
                    Some(&cancel),
                    Vec::new(),
                    Vec::new(),
                )
                .await
                .map_err(|f| f.error);
            guard.complete(r);
        });
        Ok(id)
    }

    /// Ok when the session has finished, `NotCompleted` while it runs (`grpc_probe`).
    pub fn probe(&self, id: SessionId) -> Result<(), GrpcError> {
        self.inner.sessions.probe(id)
    }

    /// The earliest-completed of `ids`, or `NoneCompleted` (`grpc_probe_or`);
    /// `InvalidSessionId` if one of them is unknown.
    pub fn probe_or(&self, ids: &[SessionId]) -> Result<SessionId, GrpcError> {
        self.inner.sessions.probe_or(ids)
    }

    /// Waits for a session and returns its result (`grpc_wait`). The session is consumed: a
    /// second wait gets `InvalidSessionId`.
    pub async fn wait(&self, id: SessionId) -> Result<CallResult, GrpcError> {
        self.inner.sessions.wait(id).await
    }

    /// Waits for all of `ids` (`grpc_wait_and`). If any failed: `SessionFailed` naming them
    /// (see [`GridClient::get_failed_session_id`]); the successful ones stay waitable.
    pub async fn wait_and(&self, ids: &[SessionId]) -> Result<Vec<CallResult>, GrpcError> {
        let done = self.inner.sessions.wait_all_of(ids).await?;
        Ok(done.into_iter().map(|(_, r)| r).collect())
    }

    /// Waits for the earliest-completed of `ids` and consumes it (`grpc_wait_or`). If that
    /// session failed, its error is returned naming it ([`GrpcError::session`]).
    pub async fn wait_or(&self, ids: &[SessionId]) -> Result<(SessionId, CallResult), GrpcError> {
        let (id, r) = self.inner.sessions.wait_first(Some(ids)).await?;
        Ok((id, r.map_err(|e| e.in_session(id))?))
    }

    /// Waits for every session not yet waited for (`grpc_wait_all`), in start order; failures
    /// as in [`GridClient::wait_and`].
    pub async fn wait_all(&self) -> Result<Vec<(SessionId, CallResult)>, GrpcError> {
        let ids = self.inner.sessions.all_ids();
        self.inner.sessions.wait_all_of(&ids).await
    }

    /// Waits for the earliest-completed of all sessions and consumes it (`grpc_wait_any`); a
    /// failed one as in [`GridClient::wait_or`].
    pub async fn wait_any(&self) -> Result<(SessionId, CallResult), GrpcError> {
        let (id, r) = self.inner.sessions.wait_first(None).await?;
        Ok((id, r.map_err(|e| e.in_session(id))?))
    }

    /// Stops a session (`grpc_cancel`): a running call is cancelled on its server, a call being
    /// ranked gives its assignment back. The session then fails with "cancelled". Ok without
    /// effect for a finished session.
    pub async fn cancel(&self, id: SessionId) -> Result<(), GrpcError> {
        if self.inner.sessions.cancel(id)? {
            // Returns once the server has been told (or could not be) and the session is done.
            self.inner.sessions.wait_done(id).await?;
        }
        Ok(())
    }

    /// Stops every running session (`grpc_cancel_all`).
    pub async fn cancel_all(&self) -> Result<(), GrpcError> {
        let ids = self.inner.sessions.cancel_all();
        for id in ids {
            // A concurrent wait may already have consumed it: that is fine.
            let _ = self.inner.sessions.wait_done(id).await;
        }
        Ok(())
    }

    /// The error of a finished session, also after it was waited for (`grpc_get_error`):
    /// `None` for a session that succeeded or is still running, `InvalidSessionId` for an id
    /// this client never issued.
    pub fn get_error(&self, id: SessionId) -> Result<Option<GrpcError>, GrpcError> {
        self.inner.sessions.error(id)
    }

    /// The next failed session of the last `wait_and` / `wait_all`
    /// (`grpc_get_failed_sessionid`); None when there are no more.
    pub fn get_failed_session_id(&self) -> Option<SessionId> {
        self.inner.sessions.next_failed()
    }

    /// The agent's view of the grid.
    pub async fn status(&self) -> Result<AgentStatus, GrpcError> {
        self.inner.conn.status().await
    }

    /// Every network link the servers measured.
    pub async fn link_matrix(&self) -> Result<Vec<LinkInfo>, GrpcError> {
        self.inner.conn.link_matrix().await
    }

    /// Every (server, service) performance model the agent holds.
    pub async fn models(&self) -> Result<Vec<ModelSummary>, GrpcError> {
        self.inner.conn.models().await
    }

    /// One performance model in full.
    pub async fn model(&self, server: &str, service: &str) -> Result<ModelExport, GrpcError> {
        self.inner.conn.model(server, service).await
    }

    /// Every service in the agent's catalog, with how many live servers offer it now (possibly
    /// none).
    pub async fn list_services(&self) -> Result<Vec<ServiceSummary>, GrpcError> {
        self.inner.conn.list_services().await
    }

    /// One service's description, fresh from the agent.
    pub async fn describe(&self, service: &str) -> Result<ServiceDesc, GrpcError> {
        Ok((*self.inner.conn.describe(service).await?).clone())
    }

    /// Every candidate server's ETC breakdown for a call, without recording anything.
    pub async fn explain(
        &self,
        profile: CallProfile,
        opts: RankOptions,
    ) -> Result<Vec<Candidate>, GrpcError> {
        self.inner.conn.explain(&profile, &opts).await
    }

    /// The agent in use: of several in the [`ClientConfig`], the one that last answered.
    pub fn agent_addr(&self) -> String {
        self.inner.conn.agent_addr()
    }

    /// The servers (by address) that stopped answering while running this client's calls and
    /// have not answered since: their calls moved elsewhere, and they are tried last.
    pub fn unresponsive_servers(&self) -> Vec<String> {
        self.inner.conn.liveness.unresponsive()
    }
}

/// The server serving at `addr` (`host:port`): the same text, else the same socket address once
/// both resolve (`localhost:7100` is `127.0.0.1:7100`).
fn at_address<'a>(servers: &'a [ServerStatus], addr: &str) -> Option<&'a ServerStatus> {
    use std::net::ToSocketAddrs;
    if let Some(s) = servers.iter().find(|s| s.addr == addr) {
        return Some(s);
    }
    // Only something that looks like host:port is resolved (a bare name never is).
    let (_, port) = addr.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let wanted: Vec<std::net::SocketAddr> = addr.to_socket_addrs().ok()?.collect();
    servers.iter().find(|s| {
        s.addr
            .to_socket_addrs()
            .is_ok_and(|mut a| a.any(|a| wanted.contains(&a)))
    })
}

fn invalid_handle(h: &FunctionHandle) -> GrpcError {
    GrpcError::new(
        ErrorCode::InvalidFunctionHandle,
        format!(
            "function handle {} (`{}`) was destructed; make a new one",
            h.id, h.service
        ),
    )
}

/// Refuses a call whose inline inputs would not fit one frame: large values travel on bulk
/// connections and remote ones are pulled by the server, so only the rest must fit (the
/// server judges the outputs the same way).
fn check_inline_inputs(service: &str, inputs: &[Value], limit: u64) -> Result<(), GrpcError> {
    let inline_in: u64 = inputs.iter().map(Value::inline_bytes).sum();
    if inline_in <= limit {
        return Ok(());
    }
    Err(GrpcError::new(
        ErrorCode::OtherErrorCode,
        format!(
            "the inputs of `{service}` take {:.1} MB, more than one frame may carry ({:.1} MB, max_frame_bytes); pass fewer small values in one call, or raise max_frame_bytes",
            inline_in as f64 / 1e6,
            limit as f64 / 1e6
        ),
    ))
}
