//! The agent connection: which of the configured agents is in use, its requests (repeated on a
//! new connection when one breaks, with backoff while a lone agent restarts), and failover to
//! the next of several when the host of the one in use goes silent.
//!
//! A silent host is told by bytes it does not acknowledge within [`FAILOVER_UNACKED`]: the
//! bytes of a request, of the nudges that follow one unanswered, or — while this client's calls
//! run on servers and it asks its agent nothing — of the nudges [`AgentLink::watch`] sends, so
//! that a busy client has moved by the time it needs an agent again.

use crate::conn::{connection_lost, on_runtime};
use crate::error::GrpcError;
use crate::liveness::lock;
use gridwise_proto::AgentApiClient;
use gridwise_runtime::wire::{self, DialConfig};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tarpc::client::RpcError as TransportError;
use tarpc::context::Context;
use tokio::runtime::Handle;
use tokio::sync::Notify;

/// First and longest wait between attempts to reach an agent that is not answering.
const AGENT_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// A tarpc client and whether its connection is still up (cleared when its dispatch ends).
type Live<C> = (Arc<C>, Arc<AtomicBool>);

/// Counts a request as awaiting its answer while it lives.
struct Asking<'a>(&'a AtomicUsize);

impl<'a> Asking<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Asking(count)
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Opens a connection to the agent at `addr`; `lost` is told when it closes.
async fn open_agent(
    rt: Handle,
    addr: String,
    wire_cfg: DialConfig,
    lost: Arc<Notify>,
) -> Result<Live<AgentApiClient>, GrpcError> {
    let rt2 = rt.clone();
    on_runtime(&rt, async move {
        let (framed, _node) = wire::connect(&addr, &wire_cfg, "client")
            .await
            .map_err(|e| GrpcError::new(e.code(), format!("agent: {e}")))?;
        let new = AgentApiClient::new(wire::client_config(), wire::client_transport(framed));
        let alive = Arc::new(AtomicBool::new(true));
        let (addr2, alive2) = (addr.clone(), alive.clone());
        rt2.spawn(async move {
            if let Err(e) = new.dispatch.await {
                tracing::debug!(agent = %addr2, "agent connection closed: {e}");
            }
            alive2.store(false, Ordering::Release);
            lost.notify_one();
        });
        Ok((Arc::new(new.client), alive))
    })
    .await
}

/// How long a dial to one agent of several may take before the next is tried.
const FAILOVER_DIAL: Duration = Duration::from_millis(500);
/// How long a request to one agent of several may go unacknowledged by its host before the
/// connection is dropped and the request sent to the next agent.
const FAILOVER_UNACKED: Duration = Duration::from_millis(500);
/// How long a request to one agent of several waits for its answer before a few bytes more
/// follow it on the same connection. A request its host had acknowledged before being cut off
/// leaves nothing unacknowledged to time out: what follows does. A client then moves within
/// about this plus [`FAILOVER_UNACKED`] of its agent's host going silent.
const FAILOVER_NUDGE: Duration = Duration::from_millis(150);

/// Awaits `request` to one of several agents over `client`, sending an empty `sink` on the
/// same connection every [`FAILOVER_NUDGE`] it goes unanswered: on a live host the bytes are
/// acknowledged and nothing happens; on a silent one they time the connection out.
async fn nudged<T>(
    request: impl Future<Output = T>,
    client: &Arc<AgentApiClient>,
    rt: &Handle,
) -> T {
    tokio::pin!(request);
    loop {
        tokio::select! {
            answer = &mut request => return answer,
            _ = tokio::time::sleep(FAILOVER_NUDGE) => nudge(client.clone(), rt),
        }
    }
}

/// Sends an empty `sink` over `client`'s connection, answered or not: bytes its host must
/// acknowledge within [`FAILOVER_UNACKED`].
fn nudge(client: Arc<AgentApiClient>, rt: &Handle) {
    rt.spawn(async move {
        let _ = client
            .sink(
                wire::context(FAILOVER_NUDGE * 4),
                serde_bytes::ByteBuf::new(),
            )
            .await;
    });
}

/// Connects to the first of `addrs` that answers, from `first` on round the list; which one,
/// and the connection. With several agents each dial is bounded by [`FAILOVER_DIAL`] (a
/// silent host costs that, not the whole connect timeout); refusals (credentials) end it.
async fn open_any_agent(
    rt: &Handle,
    addrs: &[String],
    first: usize,
    wire_cfg: &DialConfig,
    lost: &Arc<Notify>,
) -> Result<(usize, Live<AgentApiClient>), GrpcError> {
    let mut dial = wire_cfg.clone();
    if addrs.len() > 1 {
        dial.connect_timeout = dial.connect_timeout.min(FAILOVER_DIAL);
        dial.hello_timeout = dial.hello_timeout.min(FAILOVER_DIAL);
        dial.unacked_limit = Some(FAILOVER_UNACKED);
    }
    let mut failures = Vec::new();
    for i in 0..addrs.len() {
        let at = (first + i) % addrs.len();
        match open_agent(rt.clone(), addrs[at].clone(), dial.clone(), lost.clone()).await {
            Ok(live) => return Ok((at, live)),
            Err(e) if e.code != gridwise_proto::ErrorCode::CommunicationFailed => return Err(e),
            Err(e) => failures.push(e),
        }
    }
    match failures.len() {
        0 => Err(GrpcError::communication("no agent configured")),
        1 => Err(failures.pop().expect("one")),
        _ => Err(GrpcError::communication(format!(
            "no agent answers: {}",
            failures
                .iter()
                .map(|e| e.message.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ))),
    }
}

/// The agent connection in use.
struct AgentConn {
    epoch: u64,
    /// Which of the configured agents it is.
    at: usize,
    client: Arc<AgentApiClient>,
    alive: Arc<AtomicBool>,
}

/// The configured agents and the connection to the one in use.
pub(crate) struct AgentLink {
    rt: Handle,
    /// The agents, in the order they are tried (from the one in use on).
    addrs: Vec<String>,
    wire_cfg: DialConfig,
    timeout: Duration,
    retry: Duration,
    current: Mutex<AgentConn>,
    reconnecting: tokio::sync::Mutex<()>,
    /// Told when a connection to an agent closes.
    lost: Arc<Notify>,
    /// Requests awaiting their answer (with several agents): each is nudged while it waits,
    /// so the watch nudges only while there is none.
    asking: AtomicUsize,
}

impl AgentLink {
    /// Connects to one of `addrs` now, starting at a random one so that clients spread over
    /// the agents (so a wrong address fails here).
    pub(crate) async fn open(
        rt: Handle,
        addrs: Vec<String>,
        wire_cfg: DialConfig,
        timeout: Duration,
        retry: Duration,
    ) -> Result<AgentLink, GrpcError> {
        let first = rand::random_range(0..addrs.len().max(1));
        let lost = Arc::new(Notify::new());
        let (at, (client, alive)) = open_any_agent(&rt, &addrs, first, &wire_cfg, &lost)
            .await
            .map_err(|mut e| {
                // A newcomer's first call most often fails here: say where the address came from.
                if e.code == gridwise_proto::ErrorCode::CommunicationFailed {
                    e.message.push_str(
                        "; is an agent running there? The client takes its agents from `agent` in its config file, GRIDWISE_AGENT, or --agent on the command line (comma-separated for several)",
                    );
                }
                e
            })?;
        Ok(AgentLink {
            rt,
            addrs,
            wire_cfg,
            timeout,
            retry,
            current: Mutex::new(AgentConn {
                epoch: 0,
                at,
                client,
                alive,
            }),
            reconnecting: tokio::sync::Mutex::new(()),
            lost,
            asking: AtomicUsize::new(0),
        })
    }

    /// The connection in use, whatever its state: for a word sent in passing, not retried.
    pub(crate) fn client(&self) -> Arc<AgentApiClient> {
        lock(&self.current).client.clone()
    }

    /// The connection in use: its number, its client, and whether it is still up.
    fn current(&self) -> (u64, Arc<AgentApiClient>, bool) {
        let cur = lock(&self.current);
        (
            cur.epoch,
            cur.client.clone(),
            cur.alive.load(Ordering::Acquire),
        )
    }

    /// The agent in use (reconnections dial it first, then the others configured).
    pub(crate) fn addr(&self) -> String {
        self.addrs[lock(&self.current).at].clone()
    }

    pub(crate) fn ctx(&self) -> Context {
        wire::context(self.timeout)
    }

    fn error(&self, e: &TransportError) -> GrpcError {
        match e {
            TransportError::DeadlineExceeded => GrpcError::communication(format!(
                "agent {}: no answer within {} ms (agent_timeout_ms)",
                self.addr(),
                self.timeout.as_millis()
            )),
            e => GrpcError::transport(&format!("agent {}", self.addr()), e),
        }
    }

    /// Replaces the agent connection numbered `epoch` (unless someone already did): with one
    /// agent, the same one (a restart); with several, the next of the list that answers, so
    /// that a client whose agent's host went silent does not wait out a dial to it first.
    async fn reconnect(&self, epoch: u64) -> Result<Arc<AgentApiClient>, GrpcError> {
        let _one_at_a_time = self.reconnecting.lock().await;
        let from = {
            let cur = lock(&self.current);
            if cur.epoch != epoch {
                return Ok(cur.client.clone());
            }
            cur.at
        };
        let start = (from + 1) % self.addrs.len().max(1);
        tracing::debug!(agent = %self.addrs[from], "reconnecting to the agent");
        let (at, (client, alive)) =
            open_any_agent(&self.rt, &self.addrs, start, &self.wire_cfg, &self.lost).await?;
        if at != from {
            tracing::info!(
                from = %self.addrs[from],
                to = %self.addrs[at],
                "the agent stopped answering: moved to another"
            );
        }
        *lock(&self.current) = AgentConn {
            epoch: epoch + 1,
            at,
            client: client.clone(),
            alive,
        };
        Ok(client)
    }

    /// One agent request. When the connection is broken it is re-opened and the request sent
    /// again (agent requests are safe to repeat); while the agent cannot be reached at all (it
    /// is restarting), attempts go on with backoff for up to `agent_retry_s`.
    pub(crate) async fn call<T, F, Fut>(&self, f: F) -> Result<T, GrpcError>
    where
        F: Fn(Arc<AgentApiClient>, Context) -> Fut,
        Fut: Future<Output = Result<T, TransportError>>,
    {
        let deadline = Instant::now() + self.retry;
        let mut backoff = AGENT_BACKOFF.0;
        let mut lost_once = false;
        loop {
            let (epoch, client, alive) = self.current();
            // A connection known to be closed is replaced before use.
            let attempt = if alive {
                Ok(client)
            } else {
                Box::pin(self.reconnect(epoch)).await
            };
            let outcome = match attempt {
                // Boxed: tarpc's request future is kilobytes (see `execute_on`).
                Ok(client) => match if self.addrs.len() > 1 {
                    let _asking = Asking::new(&self.asking);
                    nudged(Box::pin(f(client.clone(), self.ctx())), &client, &self.rt).await
                } else {
                    Box::pin(f(client, self.ctx())).await
                } {
                    Ok(v) => return Ok(v),
                    // One of several agents that does not answer in time is as good as gone.
                    Err(e)
                        if connection_lost(&e)
                            || (self.addrs.len() > 1
                                && matches!(e, TransportError::DeadlineExceeded)) =>
                    {
                        // Drop it, so the next attempt reconnects.
                        self.mark_lost(epoch);
                        if !lost_once {
                            // A connection that broke while idle: reconnect at once.
                            lost_once = true;
                            continue;
                        }
                        self.error(&e)
                    }
                    Err(e) => return Err(self.error(&e)),
                },
                // Refused (wrong credentials, a full agent) is an answer: no retrying.
                Err(e) if e.code != gridwise_proto::ErrorCode::CommunicationFailed => {
                    return Err(e);
                }
                Err(e) => e,
            };
            if Instant::now() + backoff > deadline {
                return Err(GrpcError::communication(format!(
                    "{} (the agent has not answered for {} s, agent_retry_s)",
                    outcome.message,
                    self.retry.as_secs()
                )));
            }
            tracing::debug!(agent = %self.addr(), "agent unreachable, retrying: {}", outcome.message);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(AGENT_BACKOFF.1);
        }
    }

    /// Forgets the agent connection `epoch` after it broke.
    fn mark_lost(&self, epoch: u64) {
        let cur = lock(&self.current);
        if cur.epoch == epoch {
            cur.alive.store(false, Ordering::Release);
        }
    }

    /// While `busy` (this client has calls running on servers) and several agents are
    /// configured, nudges the agent in use every [`FAILOVER_NUDGE`], and moves to the next as
    /// soon as the connection closes: a client whose calls all wait on servers asks its agent
    /// nothing and would otherwise learn its host went silent only when it next needs it.
    /// Ends when the link is dropped.
    pub(crate) fn watch(self: &Arc<Self>, busy: impl Fn() -> bool + Send + 'static) {
        if self.addrs.len() < 2 {
            return;
        }
        let (link, lost) = (Arc::downgrade(self), self.lost.clone());
        self.rt.spawn(watch_loop(link, lost, busy));
    }
}

async fn watch_loop(link: Weak<AgentLink>, lost: Arc<Notify>, busy: impl Fn() -> bool) {
    loop {
        let closed = tokio::select! {
            _ = lost.notified() => true,
            _ = tokio::time::sleep(FAILOVER_NUDGE) => false,
        };
        let Some(link) = link.upgrade() else { return };
        let (epoch, client, alive) = link.current();
        if !alive {
            if busy()
                && let Err(e) = link.reconnect(epoch).await
            {
                tracing::debug!("no agent answers yet: {}", e.message);
                // Every dial failed just now: wait a little before the next round.
                tokio::time::sleep(AGENT_BACKOFF.1).await;
            }
            continue;
        }
        if !closed && busy() && link.asking.load(Ordering::Acquire) == 0 {
            nudge(client, &link.rt);
        }
    }
}
