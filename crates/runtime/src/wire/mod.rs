//! TCP transport: frames carrying bincode, opened by a hello that checks the protocol version
//! and the peer's role credential before any RPC is accepted.
//!
//! The hello is read with a small frame limit, so a stranger's bytes cannot make a daemon
//! reserve a large buffer; only after it is accepted does the limit rise to `max_frame_bytes`.
//! After it, every byte a peer makes a daemon hold is charged to the daemon's
//! [`MemoryBudget`] ([`frame`]), and the daemon's [`ConnTable`] caps connections (in all, per
//! source network, per address) and closes idle ones, stalled ones and ones whose frames arrive
//! too slowly ([`limits`]). Every failure closes that one connection with a logged
//! reason; the daemon goes on serving.

pub mod budget;
pub mod bulk;
pub mod dial;
pub mod frame;
pub mod hello;
pub mod limits;
pub mod messages;
pub mod tls;

pub use budget::{Charge, MemoryBudget, OverBudget};
pub use frame::FrameCodec;
pub use hello::{Channel, Credentials, Peer, Role};
pub use limits::{
    Activity, Admission, Breach, ConnLimits, ConnTable, Guarded, Network, raise_fd_limit,
};
pub use tls::{CertIdentity, CertRole, Tls, TlsFiles};

use bytes::Bytes;
use futures::{Sink, SinkExt, Stream, StreamExt};
use gridwise_proto::PROTOCOL_VERSION;
use gridwise_proto::error::ErrorCode;
use hello::{HELLO_MAX_FRAME, Hello, HelloReply, MAGIC};
use messages::Messages;
use serde::{Serialize, de::DeserializeOwned};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tarpc::{ClientMessage, Response};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;

/// A connection's byte stream: plain TCP, or TLS over it.
pub type ByteStream = tokio_util::either::Either<TcpStream, tokio_rustls::TlsStream<TcpStream>>;

/// A framed connection after the hello.
pub type FramedTcp = Framed<ByteStream, FrameCodec>;

/// How to open connections: the role to claim and its credential, limits and timeouts.
#[derive(Clone, Debug)]
pub struct DialConfig {
    /// The role claimed in the hello.
    pub role: Role,
    /// The credential of that role (the grid's client or server token), if it has one.
    pub credential: Option<String>,
    /// A client's own key: the daemons record it as the owner of its tickets and kept values.
    pub principal: String,
    /// Largest frame accepted after the hello, bytes.
    pub max_frame_bytes: usize,
    /// How long the TCP connect may take; past it, [`connect`] fails with
    /// [`WireError::Timeout`].
    pub connect_timeout: Duration,
    /// How long the peer may take to answer the hello (and, with TLS, to finish its handshake).
    pub hello_timeout: Duration,
    /// TLS to speak, when the grid uses it: the peer must then prove it holds a certificate
    /// for the host dialled, and we present ours.
    pub tls: Option<Arc<Tls>>,
    /// How long data sent may go unacknowledged before the connection is dropped
    /// (`TCP_USER_TIMEOUT`): a peer whose host is cut off is then known gone within about
    /// this long of the next request, not after the request's own deadline. `None` leaves
    /// the kernel's (minutes of retransmissions).
    pub unacked_limit: Option<Duration>,
}

impl DialConfig {
    /// Settings for dialling in `role` with `credential`.
    pub fn new(role: Role, credential: Option<String>) -> Self {
        Self {
            role,
            credential,
            principal: String::new(),
            max_frame_bytes: 256 * 1024 * 1024,
            connect_timeout: Duration::from_secs(5),
            hello_timeout: Duration::from_secs(5),
            tls: None,
            unacked_limit: None,
        }
    }
}

/// How a daemon accepts connections.
#[derive(Clone, Debug)]
pub struct AcceptConfig {
    /// The credentials each role must present.
    pub credentials: Credentials,
    /// Largest frame accepted after the hello, bytes.
    pub max_frame_bytes: usize,
    /// How long a new connection may take to say hello.
    pub hello_timeout: Duration,
    /// Caps and timeouts after the hello.
    pub limits: ConnLimits,
    /// What frames being received may hold at once.
    pub budget: Arc<MemoryBudget>,
    /// With TLS, only peers with a certificate from the grid's CA get as far as the hello.
    pub tls: Option<Arc<Tls>>,
}

impl AcceptConfig {
    /// Open credentials, default limits, and a budget of `budget_bytes` for frames in flight.
    pub fn new(max_frame_bytes: usize, budget_bytes: u64) -> Self {
        Self {
            credentials: Credentials::default(),
            max_frame_bytes,
            hello_timeout: Duration::from_secs(5),
            limits: ConnLimits::default(),
            budget: MemoryBudget::new(budget_bytes),
            tls: None,
        }
    }
}

/// Smallest `max_frame_bytes` a daemon accepts: below it, ordinary control messages would not
/// fit and every call would fail with "connection closed".
pub const MIN_FRAME_BYTES: usize = 64 * 1024;

/// Refuses a frame limit no connection could work with, naming the setting.
pub fn check_max_frame(max_frame_bytes: usize) -> Result<(), String> {
    if !(MIN_FRAME_BYTES..=u32::MAX as usize).contains(&max_frame_bytes) {
        return Err(format!(
            "max_frame_bytes = {max_frame_bytes} must be between {MIN_FRAME_BYTES} (64 KiB) and {} (4 GiB − 1)",
            u32::MAX
        ));
    }
    Ok(())
}

/// A connection that could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// TCP connect failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    /// The peer did not answer in time.
    #[error(
        "{addr} did not answer the hello within {secs:.1}s (is it a gridwise daemon, and is it running?)"
    )]
    Timeout {
        addr: String,
        /// The connect or hello timeout that ran out, s.
        secs: f64,
    },
    /// The peer refused us (version, credential, or a connection cap).
    #[error("{addr} refused the connection: {message}")]
    Refused {
        addr: String,
        /// The reason the peer's hello reply gave.
        message: String,
    },
    /// The TLS handshake failed: a certificate was refused, or only one side speaks TLS.
    #[error("TLS with {addr} failed: {detail}")]
    Tls { addr: String, detail: String },
    /// The peer's bytes are not a gridwise hello.
    #[error("{addr} does not speak the gridwise protocol: {detail}")]
    Protocol { addr: String, detail: String },
}

impl WireError {
    /// The GridRPC code a client reports for this failure.
    pub fn code(&self) -> ErrorCode {
        match self {
            WireError::Refused { .. } | WireError::Tls { .. } => ErrorCode::RpcRefused,
            _ => ErrorCode::CommunicationFailed,
        }
    }

    /// Whether nothing answers at the address at all (refused, unreachable, timed out): the
    /// peer is down, as opposed to up and saying no.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, WireError::Connect { .. } | WireError::Timeout { .. })
    }
}

/// Opens a connection, says hello, and returns the framed stream ready for tarpc, plus the
/// name the peer gave.
pub async fn connect(
    addr: &str,
    cfg: &DialConfig,
    who: &str,
) -> Result<(FramedTcp, String), WireError> {
    connect_channel(addr, cfg, who, Channel::Rpc).await
}

/// Like [`connect`], for a connection carrying `channel`.
pub async fn connect_channel(
    addr: &str,
    cfg: &DialConfig,
    who: &str,
    channel: Channel,
) -> Result<(FramedTcp, String), WireError> {
    let stream = dial::connect_tcp(addr, cfg.connect_timeout).await?;
    // Small RPCs are latency-bound: never let Nagle hold a frame back.
    let _ = stream.set_nodelay(true);
    if let Some(limit) = cfg.unacked_limit {
        dial::limit_unacked(&stream, limit);
    }
    let stream = match &cfg.tls {
        None => ByteStream::Left(stream),
        Some(tls) => ByteStream::Right(tls_connect(addr, tls, stream, cfg.hello_timeout).await?),
    };
    let mut framed = Framed::new(stream, FrameCodec::new(HELLO_MAX_FRAME));
    let protocol = |detail: String| WireError::Protocol {
        addr: addr.to_string(),
        detail,
    };
    let bytes = hello_body(cfg, who, channel).map_err(|e| protocol(e.to_string()))?;
    let exchange = async {
        // The peer may refuse before reading our hello (a connection cap): its reply counts
        // even when sending ours failed.
        let sent = framed.send(Bytes::from(bytes)).await;
        match framed.next().await {
            Some(Ok(frame)) => bincode::deserialize::<HelloReply>(&frame)
                .map_err(|e| protocol(format!("bad hello reply: {e}"))),
            Some(Err(e)) => Err(protocol(format!("reading hello reply: {e}"))),
            None => Err(protocol(match sent {
                Err(e) => format!("sending hello: {e}"),
                Ok(()) => "connection closed during the hello".into(),
            })),
        }
    };
    let reply = tokio::time::timeout(cfg.hello_timeout, exchange)
        .await
        .map_err(|_| WireError::Timeout {
            addr: addr.to_string(),
            secs: cfg.hello_timeout.as_secs_f64(),
        })??;
    match reply {
        HelloReply::Welcome { node, .. } => {
            framed.codec_mut().set_max_frame(cfg.max_frame_bytes);
            Ok((framed, node))
        }
        HelloReply::Refused { message, .. } => Err(WireError::Refused {
            addr: addr.to_string(),
            message,
        }),
    }
}

async fn tls_connect(
    addr: &str,
    tls: &Tls,
    stream: TcpStream,
    timeout: Duration,
) -> Result<tokio_rustls::TlsStream<TcpStream>, WireError> {
    let failed = |detail: String| WireError::Tls {
        addr: addr.to_string(),
        detail,
    };
    let name = tls::server_name(addr).map_err(failed)?;
    match tokio::time::timeout(timeout, tls.connector().connect(name, stream)).await {
        Err(_) => Err(WireError::Timeout {
            addr: addr.to_string(),
            secs: timeout.as_secs_f64(),
        }),
        Ok(Ok(s)) => Ok(tokio_rustls::TlsStream::Client(s)),
        Ok(Err(e)) => Err(failed(format!(
            "{e} (both sides need [tls] with certificates from the same grid CA, and the daemon's certificate must name the host dialled)"
        ))),
    }
}

fn hello_body(cfg: &DialConfig, who: &str, channel: Channel) -> bincode::Result<Vec<u8>> {
    bincode::serialize(&Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION,
        role: cfg.role,
        credential: cfg.credential.clone(),
        who: who.to_string(),
        principal: cfg.principal.clone(),
        channel,
    })
}

/// The bytes of a hello as `connect` sends them (length header included): for tools and tests
/// that speak to a daemon below the RPC layer.
pub fn hello_frame(cfg: &DialConfig, who: &str) -> Vec<u8> {
    let body = hello_body(cfg, who, Channel::Rpc).unwrap_or_default();
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&body);
    f
}

/// The serde half of a transport: bincode over our frames.
type Serde<In, Out> = tokio_serde::Framed<FramedTcp, In, Out, Messages<In, Out>>;

/// The client end of a tarpc connection: requests out, responses in.
pub type ClientTransport<Req, Resp> = Serde<Response<Resp>, ClientMessage<Req>>;

/// The client side of a tarpc transport over a framed connection.
pub fn client_transport<Req, Resp>(framed: FramedTcp) -> ClientTransport<Req, Resp>
where
    Req: Serialize,
    Resp: DeserializeOwned,
{
    tokio_serde::Framed::new(framed, Messages::default())
}

/// A connection a daemon accepted: the framed stream after the hello, who it is, and its
/// place in the daemon's connection table.
pub struct Accepted {
    /// The stream, at the daemon's frame limit.
    pub framed: FramedTcp,
    /// Who it is, as its hello claimed and its credential allowed.
    pub peer: Peer,
    admission: Admission,
    limits: ConnLimits,
    /// What the daemon's data in flight may hold (bulk values are charged to it as they come).
    budget: Arc<MemoryBudget>,
}

impl Accepted {
    /// The connection's activity (count requests in flight with `start_request`).
    pub fn activity(&self) -> Arc<Activity> {
        self.admission.activity.clone()
    }
}

/// The server side of a tarpc transport: ends when the peer idles or stalls past the limits or
/// is evicted; read and decode errors are logged with the peer before the channel closes.
pub fn server_transport<Req, Resp>(
    conn: Accepted,
) -> impl Stream<Item = io::Result<ClientMessage<Req>>>
+ Sink<Response<Resp>, Error = io::Error>
+ Send
+ Unpin
where
    Req: DeserializeOwned + Send + Unpin + 'static,
    Resp: Serialize + Send + Unpin + 'static,
{
    let peer = conn.peer.addr;
    let serde: Serde<ClientMessage<Req>, Response<Resp>> =
        tokio_serde::Framed::new(conn.framed, Messages::default());
    let logged = serde.inspect(move |r| {
        if let Err(e) = r {
            tracing::warn!(%peer, "closing connection: {e}");
        }
    });
    Guarded::new(logged, conn.admission.activity.clone(), &conn.limits, peer)
        .holding(conn.admission)
}

/// tarpc client settings for many concurrent calls on one connection.
pub fn client_config() -> tarpc::client::Config {
    let mut c = tarpc::client::Config::default();
    c.max_in_flight_requests = 1 << 20;
    c.pending_request_buffer = 1024;
    c
}

/// A request context whose deadline is `timeout` from now (capped, so it never overflows).
pub fn context(timeout: Duration) -> tarpc::context::Context {
    let mut ctx = tarpc::context::current();
    let cap = Duration::from_secs(365 * 24 * 3600);
    ctx.deadline = Instant::now()
        .checked_add(timeout.min(cap))
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
    ctx
}

fn reply_frame(reply: &HelloReply) -> Option<Vec<u8>> {
    let body = bincode::serialize(reply).ok()?;
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&body);
    Some(f)
}

/// The TLS handshake of an accepted connection, when the daemon speaks TLS: the stream and the
/// identity of the peer's certificate. A plaintext peer is told, in plaintext, what to set.
async fn accept_tls(
    stream: TcpStream,
    cfg: &AcceptConfig,
    node: &str,
) -> Result<(ByteStream, Option<CertIdentity>), String> {
    let Some(tls) = &cfg.tls else {
        let mut first = [0u8; 1];
        if let Ok(Ok(1)) =
            tokio::time::timeout(Duration::from_millis(200), stream.peek(&mut first)).await
            && first[0] == tls::HANDSHAKE_RECORD
        {
            tracing::warn!(
                "a peer speaks TLS to this plaintext daemon: configure [tls] here or remove it there"
            );
        }
        return Ok((ByteStream::Left(stream), None));
    };
    let mut first = [0u8; 1];
    match tokio::time::timeout(cfg.hello_timeout, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] != tls::HANDSHAKE_RECORD => {
            let refusal = HelloReply::Refused {
                code: ErrorCode::RpcRefused,
                message: format!(
                    "{node} accepts TLS connections only: configure [tls] (ca, cert, key) with a certificate from the grid's CA"
                ),
            };
            if let Some(f) = reply_frame(&refusal) {
                let _ = stream.try_write(&f);
            }
            return Err("a plaintext peer on a TLS daemon; told it to configure [tls]".into());
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("reading: {e}")),
        Err(_) => return Err("no TLS handshake in time".into()),
    }
    let s = tokio::time::timeout(cfg.hello_timeout, tls.acceptor().accept(stream))
        .await
        .map_err(|_| "no TLS handshake in time".to_string())?
        .map_err(|e| format!("TLS handshake refused: {e}"))?;
    let identity = s
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| tls::identity_of(c))
        .transpose()?;
    Ok((
        ByteStream::Right(tokio_rustls::TlsStream::Server(s)),
        identity,
    ))
}

async fn accept_hello(
    stream: TcpStream,
    addr: SocketAddr,
    cfg: &AcceptConfig,
    node: &str,
    activity: &Arc<Activity>,
) -> Result<(FramedTcp, Peer), String> {
    let _ = stream.set_nodelay(true);
    let (stream, cert) = accept_tls(stream, cfg, node).await?;
    let codec = FrameCodec::guarded(HELLO_MAX_FRAME, &cfg.budget, activity.clone());
    let mut framed = Framed::new(stream, codec);
    let frame = match tokio::time::timeout(cfg.hello_timeout, framed.next()).await {
        Err(_) => return Err("no hello in time".into()),
        Ok(None) => return Err("closed before the hello".into()),
        Ok(Some(Err(e))) => return Err(format!("bad hello frame: {e}")),
        Ok(Some(Ok(f))) => f,
    };
    let refusal = match hello::judge(&frame, &cfg.credentials, cert.as_ref(), addr, node) {
        hello::Verdict::NotAHello(why) => return Err(why),
        hello::Verdict::Refused(code, message) => Err((code, message)),
        hello::Verdict::Welcome(peer) => Ok(peer),
    };
    let reply = match &refusal {
        Err((code, message)) => HelloReply::Refused {
            code: *code,
            message: message.clone(),
        },
        Ok(_) => HelloReply::Welcome {
            version: PROTOCOL_VERSION,
            node: node.to_string(),
        },
    };
    let bytes = bincode::serialize(&reply).map_err(|e| e.to_string())?;
    let _ = tokio::time::timeout(cfg.hello_timeout, framed.send(Bytes::from(bytes))).await;
    match refusal {
        Err((_, message)) => Err(format!("refused: {message}")),
        Ok(peer) => {
            tracing::debug!(%addr, who = %peer.who, role = %peer.role, "connection accepted");
            framed.codec_mut().set_max_frame(cfg.max_frame_bytes);
            Ok((framed, peer))
        }
    }
}

/// Accepts connections forever: each must find room in the connection table and say hello,
/// then `on_conn` gets it (to serve a tarpc channel on). Accept errors (e.g. out of file
/// descriptors) are logged and waited out, never fatal.
pub async fn accept_loop<F, Fut>(listener: TcpListener, cfg: AcceptConfig, node: String, on_conn: F)
where
    F: Fn(Accepted) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut limits = cfg.limits.clone();
    // Accepting past the open-file limit fails for everyone: stay below it.
    if let Some(fds) = raise_fd_limit() {
        let room = usize::try_from(fds.saturating_sub(128).max(16)).unwrap_or(usize::MAX);
        if limits.max_connections > room {
            tracing::info!(
                max_connections = room,
                "capping connections below the open-file limit ({fds})"
            );
            limits.max_connections = room;
        }
    }
    let table = ConnTable::new(limits.clone());
    let cfg = Arc::new(cfg);
    let node = Arc::new(node);
    let on_conn = Arc::new(on_conn);
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept failed: {e}; retrying shortly");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admission = match table.admit(addr) {
            Ok(a) => a,
            Err(reason) => {
                tracing::warn!(peer = %addr, "refusing a connection: {reason}");
                let refusal = HelloReply::Refused {
                    code: ErrorCode::RpcRefused,
                    message: format!("{node} is full: {reason}; retry later"),
                };
                // Best effort and never waiting: the socket's buffer is empty.
                if let Some(f) = reply_frame(&refusal) {
                    let _ = stream.try_write(&f);
                }
                continue;
            }
        };
        if admission.made_room() {
            // Let the connection just evicted close before accepting more: under a flood, a
            // burst of accepts would otherwise each leave an evicted socket open until the
            // burst ends (on a one-thread runtime, its task runs only when this one yields).
            tokio::task::yield_now().await;
        }
        let (cfg, node, on_conn, limits) =
            (cfg.clone(), node.clone(), on_conn.clone(), limits.clone());
        tokio::spawn(async move {
            // Evicted before it is served (its TLS handshake or hello still to come): closed
            // at once, not when that phase times out.
            let hello = tokio::select! {
                r = accept_hello(stream, addr, &cfg, &node, &admission.activity) => r,
                _ = admission.activity.closed() => Err("evicted before its hello".into()),
            };
            match hello {
                Ok((framed, peer)) => {
                    on_conn(Accepted {
                        framed,
                        peer,
                        admission,
                        limits,
                        budget: cfg.budget.clone(),
                    })
                    .await
                }
                Err(reason) => tracing::warn!(peer = %addr, "closing connection: {reason}"),
            }
        });
    }
}

/// Serves a tarpc handler on every connection `listener` accepts, each request in its own
/// task. `$make` builds the connection's handler from its [`Peer`] (so every request knows who
/// asks). A macro, not a function: tarpc's `Serve` trait uses `async fn`, so the `Send` bound
/// `tokio::spawn` needs on each request's future can only be checked on the concrete handler
/// type.
#[macro_export]
macro_rules! serve_forever {
    ($listener:expr, $cfg:expr, $node:expr, $make:expr) => {{
        $crate::serve_forever!($listener, $cfg, $node, $make, bulk: |conn: $crate::wire::Accepted| async move {
            let peer = conn.peer.addr.clone();
            if let Err(why) = $crate::wire::bulk::serve(conn, &$crate::wire::bulk::ProbesOnly).await {
                $crate::__reexport::tracing::debug!(%peer, "bulk connection closed: {why}");
            }
        })
    }};
    ($listener:expr, $cfg:expr, $node:expr, $make:expr, bulk: $bulk:expr) => {{
        use $crate::__reexport::futures::StreamExt as _;
        use $crate::__reexport::tarpc::server::{BaseChannel, Channel as _};
        let make = $make;
        let bulk = ::std::sync::Arc::new($bulk);
        $crate::wire::accept_loop(
            $listener,
            $cfg,
            $node,
            move |conn: $crate::wire::Accepted| {
                let bulk = if conn.peer.channel == $crate::wire::Channel::Bulk {
                    Some(bulk.clone())
                } else {
                    None
                };
                let handler = make(&conn.peer);
                let activity = conn.activity();
                // Requests still running when the connection ends are dropped: nobody can
                // read their answers, and dropping a call stops its kernel.
                let gone = $crate::__reexport::CancellationToken::new();
                async move {
                    if let Some(bulk) = bulk {
                        return bulk(conn).await;
                    }
                    let _stop = gone.clone().drop_guard();
                    // A connection's requests run concurrently inside its own task rather than
                    // one spawned task each: a reply then leaves from the thread that read the
                    // request, without a hop to another worker and back (handlers never block:
                    // kernels and graph mappings go to blocking threads). When the peer goes,
                    // the marker after its last request stops those still running.
                    let ended = gone.clone();
                    let requests = BaseChannel::with_defaults($crate::wire::server_transport(conn))
                        .execute(handler.serve())
                        .map(Some)
                        .chain($crate::__reexport::futures::stream::once(async move {
                            ended.cancel();
                            None
                        }));
                    requests
                        .for_each_concurrent(None, |call| {
                            let busy = call.as_ref().map(|_| activity.start_request());
                            let gone = gone.clone();
                            async move {
                                if let Some(call) = call {
                                    ::tokio::select! {
                                        biased;
                                        _ = call => {}
                                        _ = gone.cancelled() => {}
                                    }
                                }
                                drop(busy);
                            }
                        })
                        .await;
                }
            },
        )
    }};
}

#[cfg(test)]
mod tests;
