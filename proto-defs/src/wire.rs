//! TCP transport: length-delimited frames carrying bincode, opened by a hello that checks the
//! protocol version and the shared token before any RPC is accepted.
//!
//! The hello is read with a small frame limit, so a stranger's bytes cannot make a daemon
//! reserve a large buffer; only after it is accepted does the limit rise to `max_frame_bytes`.
//! Every failure closes that one connection with a logged reason; the daemon goes on serving.

use crate::PROTOCOL_VERSION;
use crate::error::ErrorCode;
use bytes::Bytes;
use futures::{Sink, SinkExt, Stream, StreamExt};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tarpc::{ClientMessage, Response};
use tokio::net::{TcpListener, TcpStream};
use tokio_serde::formats::Bincode;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

const MAGIC: [u8; 8] = *b"GRIDWISE";
const HELLO_MAX_FRAME: usize = 64 * 1024;

/// A framed TCP connection after the hello.
pub type FramedTcp = Framed<TcpStream, LengthDelimitedCodec>;

/// Connection settings shared by both ends.
#[derive(Clone, Debug)]
pub struct WireConfig {
    /// Shared secret; when the listening side has one, peers must present the same.
    pub token: Option<String>,
    /// Largest frame accepted after the hello, bytes.
    pub max_frame_bytes: usize,
    /// Connect timeout (client side).
    pub connect_timeout: Duration,
    /// How long a new connection may take to say hello (both sides).
    pub hello_timeout: Duration,
}

impl Default for WireConfig {
    fn default() -> Self {
        Self {
            token: None,
            max_frame_bytes: 256 * 1024 * 1024,
            connect_timeout: Duration::from_secs(5),
            hello_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Hello {
    magic: [u8; 8],
    version: u32,
    token: Option<String>,
    who: String,
}

#[derive(Serialize, Deserialize)]
enum HelloReply {
    Welcome { version: u32, node: String },
    Refused { code: ErrorCode, message: String },
}

/// A connection that could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// TCP connect failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Peer address.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// The peer did not answer in time.
    #[error("{addr} did not answer the hello within {secs:.1}s (is it a gridwise daemon?)")]
    Timeout {
        /// Peer address.
        addr: String,
        /// Seconds waited.
        secs: f64,
    },
    /// The peer refused us (version or token).
    #[error("{addr} refused the connection: {message}")]
    Refused {
        /// Peer address.
        addr: String,
        /// Its reason.
        message: String,
    },
    /// The peer's bytes are not a gridwise hello.
    #[error("{addr} does not speak the gridwise protocol: {detail}")]
    Protocol {
        /// Peer address.
        addr: String,
        /// What was wrong.
        detail: String,
    },
}

impl WireError {
    /// The GridRPC code a client reports for this failure.
    pub fn code(&self) -> ErrorCode {
        match self {
            WireError::Refused { .. } => ErrorCode::RpcRefused,
            _ => ErrorCode::CommunicationFailed,
        }
    }
}

fn codec(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(max)
        .new_codec()
}

/// Opens a connection, says hello, and returns the framed stream ready for tarpc, plus the
/// name the peer gave.
pub async fn connect(
    addr: &str,
    cfg: &WireConfig,
    who: &str,
) -> Result<(FramedTcp, String), WireError> {
    let stream = tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| WireError::Timeout {
            addr: addr.to_string(),
            secs: cfg.connect_timeout.as_secs_f64(),
        })?
        .map_err(|source| WireError::Connect {
            addr: addr.to_string(),
            source,
        })?;
    // Small RPCs are latency-bound: never let Nagle hold a frame back.
    let _ = stream.set_nodelay(true);
    let mut framed = Framed::new(stream, codec(HELLO_MAX_FRAME));
    let hello = Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION,
        token: cfg.token.clone(),
        who: who.to_string(),
    };
    let protocol = |detail: String| WireError::Protocol {
        addr: addr.to_string(),
        detail,
    };
    let bytes = bincode::serialize(&hello).map_err(|e| protocol(e.to_string()))?;
    let exchange = async {
        framed
            .send(Bytes::from(bytes))
            .await
            .map_err(|e| protocol(format!("sending hello: {e}")))?;
        match framed.next().await {
            Some(Ok(frame)) => bincode::deserialize::<HelloReply>(&frame)
                .map_err(|e| protocol(format!("bad hello reply: {e}"))),
            Some(Err(e)) => Err(protocol(format!("reading hello reply: {e}"))),
            None => Err(protocol("connection closed during the hello".into())),
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
            framed.codec_mut().set_max_frame_length(cfg.max_frame_bytes);
            Ok((framed, node))
        }
        HelloReply::Refused { message, .. } => Err(WireError::Refused {
            addr: addr.to_string(),
            message,
        }),
    }
}

/// The client end of a tarpc connection: requests out, responses in.
pub type ClientTransport<Req, Resp> = tarpc::serde_transport::Transport<
    TcpStream,
    Response<Resp>,
    ClientMessage<Req>,
    Bincode<Response<Resp>, ClientMessage<Req>>,
>;

/// The client side of a tarpc transport over a framed connection.
pub fn client_transport<Req, Resp>(framed: FramedTcp) -> ClientTransport<Req, Resp>
where
    Req: Serialize,
    Resp: DeserializeOwned,
{
    tarpc::serde_transport::new(framed, Bincode::default())
}

/// The server side of a tarpc transport; read and decode errors are logged with the peer
/// before the channel closes.
pub fn server_transport<Req, Resp>(
    framed: FramedTcp,
    peer: SocketAddr,
) -> impl Stream<Item = io::Result<ClientMessage<Req>>>
+ Sink<Response<Resp>, Error = io::Error>
+ Send
+ Unpin
where
    Req: DeserializeOwned + Send + Unpin,
    Resp: Serialize + Send + Unpin,
{
    tarpc::serde_transport::new(framed, Bincode::default()).inspect(move |r| {
        if let Err(e) = r {
            tracing::warn!(%peer, "closing connection: {e}");
        }
    })
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

async fn accept_hello(
    stream: TcpStream,
    peer: SocketAddr,
    cfg: &WireConfig,
    node: &str,
) -> Result<FramedTcp, String> {
    let _ = stream.set_nodelay(true);
    let mut framed = Framed::new(stream, codec(HELLO_MAX_FRAME));
    let frame = match tokio::time::timeout(cfg.hello_timeout, framed.next()).await {
        Err(_) => return Err("no hello in time".into()),
        Ok(None) => return Err("closed before the hello".into()),
        Ok(Some(Err(e))) => return Err(format!("bad hello frame: {e}")),
        Ok(Some(Ok(f))) => f,
    };
    let hello = match bincode::deserialize::<Hello>(&frame) {
        Ok(h) if h.magic == MAGIC => h,
        _ => return Err("the first frame is not a gridwise hello".into()),
    };
    let refusal = if hello.version != PROTOCOL_VERSION {
        Some((
            ErrorCode::RpcRefused,
            format!(
                "protocol version mismatch: {node} speaks version {PROTOCOL_VERSION}, {} speaks {}; run the same gridwise release on both",
                hello.who, hello.version
            ),
        ))
    } else if !token_matches(cfg.token.as_deref(), hello.token.as_deref()) {
        Some((
            ErrorCode::RpcRefused,
            format!("{node} needs the shared token: set the same `token` in both configs"),
        ))
    } else {
        None
    };
    let reply = match &refusal {
        Some((code, message)) => HelloReply::Refused {
            code: *code,
            message: message.clone(),
        },
        None => HelloReply::Welcome {
            version: PROTOCOL_VERSION,
            node: node.to_string(),
        },
    };
    let bytes = bincode::serialize(&reply).map_err(|e| e.to_string())?;
    let _ = tokio::time::timeout(cfg.hello_timeout, framed.send(Bytes::from(bytes))).await;
    if let Some((_, message)) = refusal {
        return Err(format!("refused {} ({peer}): {message}", hello.who));
    }
    tracing::debug!(%peer, who = %hello.who, "connection accepted");
    framed.codec_mut().set_max_frame_length(cfg.max_frame_bytes);
    Ok(framed)
}

fn token_matches(expected: Option<&str>, given: Option<&str>) -> bool {
    match expected {
        None => true,
        Some(e) => {
            let g = given.unwrap_or("");
            // Compare every byte so the time taken does not reveal the matching prefix.
            e.len() == g.len()
                && e.bytes()
                    .zip(g.bytes())
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0
        }
    }
}

/// Accepts connections forever: each one must say hello, then `on_conn` gets the framed stream
/// (to build a tarpc channel on). Accept errors (e.g. out of file descriptors) are logged and
/// waited out, never fatal.
pub async fn accept_loop<F, Fut>(listener: TcpListener, cfg: WireConfig, node: String, on_conn: F)
where
    F: Fn(FramedTcp, SocketAddr) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let cfg = Arc::new(cfg);
    let node = Arc::new(node);
    let on_conn = Arc::new(on_conn);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept failed: {e}; retrying shortly");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (cfg, node, on_conn) = (cfg.clone(), node.clone(), on_conn.clone());
        tokio::spawn(async move {
            match accept_hello(stream, peer, &cfg, &node).await {
                Ok(framed) => on_conn(framed, peer).await,
                Err(reason) => tracing::warn!(%peer, "closing connection: {reason}"),
            }
        });
    }
}

/// Serves a tarpc handler (a value with `.serve()`, its service trait in scope) on every
/// connection `listener` accepts, each request in its own task. A macro, not a function:
/// tarpc's `Serve` trait uses `async fn`, so the `Send` bound `tokio::spawn` needs on each
/// request's future can only be checked on the concrete handler type.
#[macro_export]
macro_rules! serve_forever {
    ($listener:expr, $cfg:expr, $node:expr, $handler:expr) => {{
        use $crate::__reexport::futures::StreamExt as _;
        use $crate::__reexport::tarpc::server::{BaseChannel, Channel as _};
        let handler = $handler;
        $crate::wire::accept_loop($listener, $cfg, $node, move |framed, peer| {
            let handler = handler.clone();
            async move {
                BaseChannel::with_defaults($crate::wire::server_transport(framed, peer))
                    .execute(handler.serve())
                    .for_each(|call| async move {
                        ::tokio::spawn(call);
                    })
                    .await;
            }
        })
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        assert!(token_matches(None, None));
        assert!(token_matches(None, Some("x")));
        assert!(token_matches(Some("abc"), Some("abc")));
        assert!(!token_matches(Some("abc"), Some("abd")));
        assert!(!token_matches(Some("abc"), None));
        assert!(!token_matches(Some("abc"), Some("abcd")));
    }

    async fn listener(cfg: WireConfig) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(accept_loop(
            l,
            cfg,
            "test-node".into(),
            |mut framed, _| async move {
                // Echo frames back until the peer goes away.
                while let Some(Ok(f)) = framed.next().await {
                    if framed.send(f.freeze()).await.is_err() {
                        break;
                    }
                }
            },
        ));
        addr
    }

    #[tokio::test]
    async fn hello_then_frames_flow() {
        let addr = listener(WireConfig::default()).await.to_string();
        let (mut f, node) = connect(&addr, &WireConfig::default(), "t").await.unwrap();
        assert_eq!(node, "test-node");
        f.send(Bytes::from_static(b"ping")).await.unwrap();
        assert_eq!(&f.next().await.unwrap().unwrap()[..], b"ping");
    }

    #[tokio::test]
    async fn wrong_token_is_refused_with_a_reason() {
        let server_cfg = WireConfig {
            token: Some("s3cret".into()),
            ..WireConfig::default()
        };
        let addr = listener(server_cfg).await.to_string();
        let err = connect(&addr, &WireConfig::default(), "t")
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::RpcRefused);
        assert!(err.to_string().contains("token"), "{err}");
        let ok_cfg = WireConfig {
            token: Some("s3cret".into()),
            ..WireConfig::default()
        };
        connect(&addr, &ok_cfg, "t").await.unwrap();
    }

    #[tokio::test]
    async fn garbage_does_not_stop_the_listener() {
        use tokio::io::AsyncWriteExt;
        let addr = listener(WireConfig::default()).await;
        for junk in [
            &b"\xff\xff\xff\xffxxxx"[..],
            b"\x00\x00\x00\x04abcd",
            b"GET / HTTP/1.1\r\n\r\n",
        ] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(junk).await.unwrap();
        }
        connect(&addr.to_string(), &WireConfig::default(), "t")
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn connecting_to_nothing_says_where() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        drop(l);
        let err = connect(&addr, &WireConfig::default(), "t")
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::CommunicationFailed);
        assert!(err.to_string().contains(&addr));
    }
}
