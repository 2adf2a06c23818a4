//! Large values on connections of their own: raw bytes written from the sender's buffer and
//! read into the receiver's final one, one value at a time.
//!
//! Inside an RPC a 256 MiB matrix is serialised into one contiguous frame (a second copy on
//! the sender), read whole into the codec's buffer and deserialised (two more on the
//! receiver), and copied again for every retry. Here a small bincode header says what comes,
//! then the payload follows as it is: the sender writes it straight from the value (TCP's own
//! window is the flow control), the receiver reads it into a buffer allocated once at its
//! final size, so each side holds the payload about once.
//!
//! A client *puts* an argument to the server it is about to call (the server stages it for
//! one call of that client, which takes it without a copy) and *gets* a large output the
//! server staged for it instead of returning it inline. A server *gets* a value another
//! server keeps for a call of the same owner (a graph's edge). The header exchange is two
//! phase for a put (the server says it has room before a byte of payload is sent), so a
//! refusal never leaves half a payload on the connection.
//!
//! Any peer may also *probe*: send bytes that are read and dropped, timed by the sender. Over
//! an RPC a link probe measured 0.78–0.93 of a 1 Gbit/s link that TCP fills to 0.96: the
//! copies above, on a host whose cores the daemons share, are that much of a 100 ms message.

use super::budget::Charge;
use super::hello::{Channel, Peer, Role};
use super::limits::{Activity, Breach, ConnLimits};
use super::messages::{decode, encode};
use super::{DialConfig, FramedTcp, WireError, connect_channel};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use gridwise_proto::error::{CallError, CallErrorKind};
use gridwise_proto::ids::DataHandle;
use gridwise_proto::value::{Array, ElemType, RemoteRef, Value};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use gridwise_proto::value::BULK_MIN_BYTES;

/// Bytes written or read per step: progress is noted (and a stall detected) this often.
const CHUNK: usize = 1 << 20;

/// A pooled bulk connection idle longer than this is dialled anew: the daemon closes idle
/// connections after its `idle_timeout_s` (300 s by default).
const IDLE_REUSE: Duration = Duration::from_secs(120);

/// What a payload is, so the receiver can make the value from the bytes alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Shape {
    /// `bytes`
    Bytes,
    /// `vector<T>[rows]` (cols is 1)
    Vector {
        elem: ElemType,
        rows: u64,
        cols: u64,
    },
    /// `matrix<T>[rows,cols]`
    Matrix {
        elem: ElemType,
        rows: u64,
        cols: u64,
    },
}

/// The header of a payload: its shape and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub shape: Shape,
    pub bytes: u64,
}

impl Header {
    /// The header of `v` and the bytes it sends, for the values a payload can carry.
    pub fn of(v: &Value) -> Option<(Header, &[u8])> {
        let (shape, data) = match v {
            Value::Bytes(b) => (Shape::Bytes, b.as_slice()),
            Value::Vector(a) => (
                Shape::Vector {
                    elem: a.elem,
                    rows: a.rows,
                    cols: a.cols,
                },
                a.data.as_slice(),
            ),
            Value::Matrix(a) => (
                Shape::Matrix {
                    elem: a.elem,
                    rows: a.rows,
                    cols: a.cols,
                },
                a.data.as_slice(),
            ),
            _ => return None,
        };
        Some((
            Header {
                shape,
                bytes: data.len() as u64,
            },
            data,
        ))
    }

    /// The value `data` (exactly `self.bytes` long) makes; an array whose shape does not match
    /// its length is refused.
    pub fn into_value(self, data: Vec<u8>) -> Result<Value, String> {
        let array = |elem, rows, cols, data| {
            let a = Array {
                elem,
                rows,
                cols,
                data,
            };
            if a.is_well_formed() {
                Ok(a)
            } else {
                Err(format!(
                    "a bulk value of {} bytes does not hold {rows}×{cols} {elem} elements",
                    a.data.len()
                ))
            }
        };
        match self.shape {
            Shape::Bytes => Ok(Value::Bytes(data)),
            Shape::Vector { elem, rows, cols } => array(elem, rows, cols, data).map(Value::Vector),
            Shape::Matrix { elem, rows, cols } => array(elem, rows, cols, data).map(Value::Matrix),
        }
    }
}

/// What the dialling side asks.
#[derive(Debug, Serialize, Deserialize)]
pub enum BulkRequest {
    /// Stage a value for one call of the asking client; its payload follows the server's
    /// [`BulkReply::Ready`].
    Put(Header),
    /// Send a value: a client's own (`owner` none), or one kept for `owner`'s call (servers
    /// only). A value staged for one read is gone once sent.
    Get {
        handle: DataHandle,
        owner: Option<String>,
    },
    /// Read this many raw bytes, which follow at once, and drop them: the far end of a link
    /// probe. Nothing is kept, so no room is asked for first; at most [`PROBE_MAX_BYTES`].
    Probe { bytes: u64 },
}

/// The most a probe may send in one message: enough for 0.1 s at 5 Gbit/s.
pub const PROBE_MAX_BYTES: u64 = 64 << 20;

/// What the server answers.
#[derive(Debug, Serialize, Deserialize)]
pub enum BulkReply {
    /// Room is held: send the payload.
    Ready,
    /// The payload arrived and is staged under this reference.
    Stored(RemoteRef),
    /// The value follows, `Header::bytes` raw bytes.
    Value(Header),
    /// Not done, and why.
    Refused(CallError),
    /// A probe's bytes all arrived.
    Received(u64),
}

async fn send_msg<T: Serialize>(framed: &mut FramedTcp, msg: &T) -> io::Result<()> {
    framed.send(Bytes::from(encode(msg)?)).await
}

async fn recv_msg<T: DeserializeOwned>(framed: &mut FramedTcp) -> io::Result<Option<T>> {
    match framed.next().await {
        None => Ok(None),
        Some(frame) => decode(&frame?).map(Some),
    }
}

/// Writes `data` raw, a chunk at a time.
async fn write_payload(framed: &mut FramedTcp, data: &[u8]) -> io::Result<()> {
    let stream = framed.get_mut();
    for chunk in data.chunks(CHUNK) {
        stream.write_all(chunk).await?;
    }
    stream.flush().await
}

/// Reads `bytes` raw bytes into one buffer of exactly that size: first whatever the frame
/// codec already read past the last header, then straight from the socket. With `guard` (the
/// accepting side) the payload is held to the rules of a frame: it must keep up
/// `min_frame_rate` on average once `frame_grace` is spent, and no read may wait past
/// `stall_timeout`; each read is noted in the connection's activity. Without it, it waits as
/// long as it takes.
async fn read_payload(
    framed: &mut FramedTcp,
    bytes: u64,
    guard: Option<(&ConnLimits, &Activity)>,
) -> io::Result<Vec<u8>> {
    let len = usize::try_from(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a payload too large to hold"))?;
    let mut data = gridwise_proto::value::array_bytes(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!("cannot allocate {len} bytes for a bulk value"),
        )
    })?;
    receive(framed, len, guard, &mut data, Keep::All).await?;
    Ok(data)
}

/// Reads `bytes` raw bytes and drops them, a chunk at a time, under the same rules as
/// [`read_payload`].
async fn drain_payload(
    framed: &mut FramedTcp,
    bytes: u64,
    guard: Option<(&ConnLimits, &Activity)>,
) -> io::Result<()> {
    let len = usize::try_from(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a payload too large to read"))?;
    let mut scratch = Vec::with_capacity(CHUNK.min(len));
    receive(framed, len, guard, &mut scratch, Keep::None).await
}

/// What [`receive`] does with the bytes it read.
#[derive(Clone, Copy, PartialEq)]
enum Keep {
    /// Appends them to the buffer (sized for them).
    All,
    /// Reuses the buffer for each read.
    None,
}

/// Reads `len` payload bytes into `data`: first whatever the frame codec already read past
/// the last header, then straight from the socket.
async fn receive(
    framed: &mut FramedTcp,
    len: usize,
    guard: Option<(&ConnLimits, &Activity)>,
    data: &mut Vec<u8>,
    keep: Keep,
) -> io::Result<()> {
    let start = Instant::now();
    let early = framed.read_buffer_mut();
    let take = early.len().min(len);
    let early = early.split_to(take);
    if keep == Keep::All {
        data.extend_from_slice(&early);
    }
    let mut got = take;
    if let Some((_, a)) = guard {
        // The codec took those bytes for the start of a frame; they were the payload's.
        a.frame_done();
    }
    let stream = framed.get_mut();
    while got < len {
        let have = got;
        let want = (len - have).min(CHUNK);
        if keep == Keep::None {
            data.clear();
        }
        let mut window = (&mut *data).limit(want);
        let read = stream.read_buf(&mut window);
        let n = match guard {
            None => read.await?,
            Some((limits, _)) => {
                let owed =
                    Duration::from_secs_f64(have as f64 / limits.min_frame_rate.max(1) as f64);
                let due = start + limits.frame_grace + owed;
                let too_slow = || {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "a bulk value arrived too slowly: {have} of {len} bytes in {:.1} s (it must keep up min_frame_rate_bytes_per_s = {} after frame_grace_s = {})",
                            start.elapsed().as_secs_f64(),
                            limits.min_frame_rate,
                            limits.frame_grace.as_secs_f64()
                        ),
                    )
                };
                let left = due.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(too_slow());
                }
                match tokio::time::timeout(left.min(limits.stall_timeout), read).await {
                    Ok(r) => r?,
                    Err(_) if Instant::now() >= due => return Err(too_slow()),
                    Err(_) => {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "a bulk value stalled after {have} of {len} bytes (stall_timeout_s)"
                            ),
                        ));
                    }
                }
            }
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the connection closed after {have} of {len} bytes"),
            ));
        }
        got += n;
        if let Some((_, a)) = guard {
            a.touch();
        }
    }
    Ok(())
}

use bytes::BufMut as _;

/// Why a bulk transfer failed.
#[derive(Debug)]
pub enum BulkError {
    /// The connection could not be opened.
    Dial(WireError),
    /// It broke, or the peer spoke out of turn.
    Io(io::Error),
    /// The peer refused, saying why.
    Refused(CallError),
}

impl std::fmt::Display for BulkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BulkError::Dial(e) => write!(f, "{e}"),
            BulkError::Io(e) => write!(f, "bulk transfer: {e}"),
            BulkError::Refused(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for BulkError {
    fn from(e: io::Error) -> Self {
        BulkError::Io(e)
    }
}

fn out_of_turn(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the peer answered a bulk {what} out of turn"),
    )
}

/// One bulk connection, dialled.
struct BulkConn {
    framed: FramedTcp,
}

impl BulkConn {
    async fn put(&mut self, v: &Value) -> Result<RemoteRef, BulkError> {
        let (header, data) = Header::of(v).ok_or_else(|| {
            BulkError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a {} cannot travel as a bulk value", v.kind()),
            ))
        })?;
        send_msg(&mut self.framed, &BulkRequest::Put(header)).await?;
        match recv_msg(&mut self.framed).await? {
            Some(BulkReply::Ready) => {}
            Some(BulkReply::Refused(e)) => return Err(BulkError::Refused(e)),
            _ => return Err(out_of_turn("put").into()),
        }
        write_payload(&mut self.framed, data).await?;
        match recv_msg(&mut self.framed).await? {
            Some(BulkReply::Stored(r)) => Ok(r),
            Some(BulkReply::Refused(e)) => Err(BulkError::Refused(e)),
            _ => Err(out_of_turn("put").into()),
        }
    }

    /// Sends `bytes` of zeros to be dropped; done when the peer has read them all.
    async fn probe(&mut self, bytes: u64) -> Result<u64, BulkError> {
        static ZEROS: [u8; CHUNK] = [0; CHUNK];
        if bytes > PROBE_MAX_BYTES {
            // The far end would refuse it only once the bytes were on their way.
            return Err(BulkError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a probe of {bytes} bytes is larger than the {PROBE_MAX_BYTES} a daemon reads"
                ),
            )));
        }
        send_msg(&mut self.framed, &BulkRequest::Probe { bytes }).await?;
        let stream = self.framed.get_mut();
        let mut left = bytes;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            stream.write_all(&ZEROS[..n]).await?;
            left -= n as u64;
        }
        stream.flush().await?;
        match recv_msg(&mut self.framed).await? {
            Some(BulkReply::Received(n)) => Ok(n),
            Some(BulkReply::Refused(e)) => Err(BulkError::Refused(e)),
            _ => Err(out_of_turn("probe").into()),
        }
    }

    async fn get(&mut self, handle: DataHandle, owner: Option<&str>) -> Result<Value, BulkError> {
        let req = BulkRequest::Get {
            handle,
            owner: owner.map(str::to_string),
        };
        send_msg(&mut self.framed, &req).await?;
        match recv_msg(&mut self.framed).await? {
            Some(BulkReply::Value(h)) => {
                let data = read_payload(&mut self.framed, h.bytes, None).await?;
                h.into_value(data)
                    .map_err(|e| BulkError::Io(io::Error::new(io::ErrorKind::InvalidData, e)))
            }
            Some(BulkReply::Refused(e)) => Err(BulkError::Refused(e)),
            _ => Err(out_of_turn("get").into()),
        }
    }
}

/// Bulk connections by server address, reused one transfer at a time (concurrent transfers
/// to one server each get their own connection).
pub struct BulkPool {
    dial: DialConfig,
    who: String,
    idle: Mutex<HashMap<String, Vec<(BulkConn, Instant)>>>,
}

impl BulkPool {
    /// A pool dialling with `dial`, naming itself `who` in hellos.
    pub fn new(dial: DialConfig, who: impl Into<String>) -> Self {
        Self {
            dial,
            who: who.into(),
            idle: Mutex::new(HashMap::new()),
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<(BulkConn, Instant)>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn checkout(&self, addr: &str) -> Option<BulkConn> {
        let mut idle = self.idle();
        let conns = idle.get_mut(addr)?;
        while let Some((c, since)) = conns.pop() {
            if since.elapsed() < IDLE_REUSE {
                return Some(c);
            }
        }
        None
    }

    async fn dial(&self, addr: &str) -> Result<BulkConn, BulkError> {
        let (framed, _) = connect_channel(addr, &self.dial, &self.who, Channel::Bulk)
            .await
            .map_err(BulkError::Dial)?;
        Ok(BulkConn { framed })
    }

    /// Runs `op` on a pooled connection to `addr`, or a new one; a pooled connection that
    /// turns out broken is replaced once (the server may have closed it while idle). A
    /// connection is pooled again only after a transfer that left it clean.
    async fn run(&self, addr: &str, op: Op<'_>) -> Result<Done, BulkError> {
        if let Some(mut c) = self.checkout(addr) {
            match c.run(&op).await {
                Err(BulkError::Io(_)) => {}
                done => return self.give_back(addr, c, done),
            }
        }
        let mut c = self.dial(addr).await?;
        let done = c.run(&op).await;
        self.give_back(addr, c, done)
    }

    fn give_back(
        &self,
        addr: &str,
        c: BulkConn,
        done: Result<Done, BulkError>,
    ) -> Result<Done, BulkError> {
        if !matches!(done, Err(BulkError::Io(_))) {
            self.idle()
                .entry(addr.to_string())
                .or_default()
                .push((c, Instant::now()));
        }
        done
    }

    /// Stages `v` on the server at `addr` for one call of ours.
    pub async fn put(&self, addr: &str, v: &Value) -> Result<RemoteRef, BulkError> {
        match self.run(addr, Op::Put(v)).await? {
            Done::Stored(r) => Ok(r),
            _ => Err(out_of_turn("put").into()),
        }
    }

    /// Brings a value from the server at `addr`: ours (`owner` none), or one kept for
    /// `owner`'s call.
    pub async fn get(
        &self,
        addr: &str,
        handle: DataHandle,
        owner: Option<&str>,
    ) -> Result<Value, BulkError> {
        match self.run(addr, Op::Get(handle, owner)).await? {
            Done::Value(v) => Ok(v),
            _ => Err(out_of_turn("get").into()),
        }
    }

    /// Sends `bytes` (at most [`PROBE_MAX_BYTES`]) to the daemon at `addr`, which drops them:
    /// time it to measure the link. Done when they have all arrived.
    pub async fn probe(&self, addr: &str, bytes: u64) -> Result<(), BulkError> {
        match self.run(addr, Op::Probe(bytes)).await? {
            Done::Received(n) if n == bytes => Ok(()),
            _ => Err(out_of_turn("probe").into()),
        }
    }
}

/// A transfer, kept so that it can be tried again on a fresh connection.
enum Op<'a> {
    Put(&'a Value),
    Get(DataHandle, Option<&'a str>),
    Probe(u64),
}

enum Done {
    Stored(RemoteRef),
    Value(Value),
    Received(u64),
}

impl BulkConn {
    async fn run(&mut self, op: &Op<'_>) -> Result<Done, BulkError> {
        match *op {
            Op::Put(v) => self.put(v).await.map(Done::Stored),
            Op::Get(h, owner) => self.get(h, owner).await.map(Done::Value),
            Op::Probe(bytes) => self.probe(bytes).await.map(Done::Received),
        }
    }
}

/// What a daemon serving bulk connections does with what arrives and what is asked for.
pub trait BulkStore: Send + Sync {
    /// Keeps a value `peer` put, for one call of it; `charge` holds its bytes against the
    /// daemon's budget for as long as it is kept.
    fn stage(&self, peer: &Peer, value: Value, charge: Charge) -> Result<RemoteRef, CallError>;
    /// The value `peer` asks for (see [`BulkRequest::Get`]).
    fn read(
        &self,
        peer: &Peer,
        handle: DataHandle,
        owner: Option<&str>,
    ) -> Result<Arc<Value>, CallError>;
    /// A request's bytes have all gone or come (a put, a get or a probe): a daemon that times
    /// its quiet spells (a server waiting to probe its links) notes it.
    fn moved(&self) {}
}

/// The bulk side of a daemon that keeps no values (the agent): it only reads probes, so
/// servers can measure their link to it as they do to each other.
pub struct ProbesOnly;

impl BulkStore for ProbesOnly {
    fn stage(&self, _: &Peer, _: Value, _: Charge) -> Result<RemoteRef, CallError> {
        Err(CallError::new(
            CallErrorKind::BadArguments,
            "this daemon keeps no values: put them to the server that runs the call",
        ))
    }

    fn read(&self, _: &Peer, handle: DataHandle, _: Option<&str>) -> Result<Arc<Value>, CallError> {
        Err(CallError::new(
            CallErrorKind::InputLost,
            format!(
                "this daemon keeps no values ({handle} is not here): fetch it from the server that ran the call"
            ),
        ))
    }
}

/// Serves one accepted bulk connection until the peer closes it, idles past the idle timeout,
/// stalls or sends a header or payload too slowly (the frame rules of its [`ConnLimits`]),
/// breaks the protocol, or the daemon evicts it.
pub async fn serve<S: BulkStore>(conn: super::Accepted, store: &S) -> Result<(), String> {
    let super::Accepted {
        mut framed,
        peer,
        admission,
        limits,
        budget,
    } = conn;
    let activity = admission.activity.clone();
    loop {
        let next = tokio::select! {
            r = recv_msg::<BulkRequest>(&mut framed) => r,
            why = activity.breached(&limits) => match why {
                Breach::Idle(_) => return Ok(()),
                why => return Err(why.to_string()),
            },
            _ = activity.closed() => return Err("evicted to make room for a new connection".into()),
        };
        let req = match next {
            Ok(None) => return Ok(()),
            Err(e) => return Err(e.to_string()),
            Ok(Some(req)) => req,
        };
        let _busy = activity.start_request();
        match req {
            BulkRequest::Put(header) => {
                let staged = async {
                    if peer.role != Role::Client {
                        return Err(CallError::new(
                            CallErrorKind::BadArguments,
                            "only clients put values; servers pull them",
                        ));
                    }
                    budget.try_charge(header.bytes).ok_or_else(|| {
                        CallError::new(
                            CallErrorKind::Unavailable,
                            format!(
                                "receiving a {:.1} MB value would pass this server's memory budget for data in flight ({:.1} MB free now); another server may take the call",
                                header.bytes as f64 / 1e6,
                                budget.available_bytes() as f64 / 1e6
                            ),
                        )
                    })
                }
                .await;
                let charge = match staged {
                    Ok(c) => c,
                    Err(e) => {
                        send_msg(&mut framed, &BulkReply::Refused(e))
                            .await
                            .map_err(|e| e.to_string())?;
                        continue;
                    }
                };
                send_msg(&mut framed, &BulkReply::Ready)
                    .await
                    .map_err(|e| e.to_string())?;
                let data = read_payload(&mut framed, header.bytes, Some((&limits, &activity)))
                    .await
                    .map_err(|e| e.to_string())?;
                let reply = match header.into_value(data) {
                    Err(e) => BulkReply::Refused(CallError::new(CallErrorKind::BadArguments, e)),
                    Ok(v) => match store.stage(&peer, v, charge) {
                        Ok(r) => BulkReply::Stored(r),
                        Err(e) => BulkReply::Refused(e),
                    },
                };
                send_msg(&mut framed, &reply)
                    .await
                    .map_err(|e| e.to_string())?;
                store.moved();
            }
            BulkRequest::Probe { bytes } => {
                if bytes > PROBE_MAX_BYTES {
                    // The bytes are on their way: refuse and close, or they would be read as
                    // the next request.
                    let e = CallError::new(
                        CallErrorKind::BadArguments,
                        format!(
                            "a probe of {bytes} bytes is larger than the {PROBE_MAX_BYTES} this daemon reads"
                        ),
                    );
                    let _ = send_msg(&mut framed, &BulkReply::Refused(e)).await;
                    return Err(format!("refused a probe of {bytes} bytes"));
                }
                drain_payload(&mut framed, bytes, Some((&limits, &activity)))
                    .await
                    .map_err(|e| e.to_string())?;
                send_msg(&mut framed, &BulkReply::Received(bytes))
                    .await
                    .map_err(|e| e.to_string())?;
                store.moved();
            }
            BulkRequest::Get { handle, owner } => {
                let value = match store.read(&peer, handle, owner.as_deref()) {
                    Ok(v) => v,
                    Err(e) => {
                        send_msg(&mut framed, &BulkReply::Refused(e))
                            .await
                            .map_err(|e| e.to_string())?;
                        continue;
                    }
                };
                let Some((header, data)) = Header::of(&value) else {
                    let e = CallError::new(
                        CallErrorKind::BadArguments,
                        format!(
                            "{handle} is a {}, which travels in the RPC: fetch it there",
                            value.kind()
                        ),
                    );
                    send_msg(&mut framed, &BulkReply::Refused(e))
                        .await
                        .map_err(|e| e.to_string())?;
                    continue;
                };
                send_msg(&mut framed, &BulkReply::Value(header))
                    .await
                    .map_err(|e| e.to_string())?;
                write_payload(&mut framed, data)
                    .await
                    .map_err(|e| e.to_string())?;
                // A staged output read once is gone: its buffer serves the next of its size.
                if let Ok(v) = Arc::try_unwrap(value) {
                    v.recycle();
                }
                store.moved();
            }
        }
    }
}
