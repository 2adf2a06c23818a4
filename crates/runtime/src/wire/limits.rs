//! What a daemon allows its peers after the hello: how many connections (in all, per source
//! network and per peer address), how long a connection may sit idle, and how fast a frame must
//! arrive.
//!
//! Every accepted connection is in the daemon's [`ConnTable`] with its [`Activity`]. When a new
//! connection would pass a cap, a connection in its way is closed to make room — of the same
//! peer, of the same network, or of anyone, for the narrowest cap reached: the longest-idle one
//! (nothing in flight, no frame half read), else the one whose frame is arriving slowest (one
//! idle for only a moment goes after those). A connection with a request being served is never
//! closed to make room; only when every one in the way is serving one is the newcomer refused.
//! So neither idle connections nor frames trickled in byte by byte, however many a peer opens
//! and from however many addresses of its network, lock out a client that has work to do.
//!
//! Timeouts close what eviction leaves: a connection idle past `idle_timeout`, a frame silent
//! half-way past `stall_timeout`, and a frame that falls behind `min_frame_rate` once its
//! `frame_grace` is spent (silence alone cannot catch a frame that sends one byte every few
//! seconds).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64
}

/// A connection idle for less than this is taken to be between two steps of a client at work
/// (accepted, its hello not yet read; welcomed, its first request not yet in; answered, its
/// next request on the way), as one is for a round trip at a time: it is closed to make room
/// only after every frame half-way in. Otherwise, under a flood of trickling connections whose
/// senders reconnect as soon as they are closed, each newcomer would take the one idle
/// connection there is — a client's, a round trip into its work — rather than a trickle.
const JUST_IDLE: Duration = Duration::from_secs(1);

/// `frame_len` before the frame's header is complete.
const UNANNOUNCED: u64 = u64::MAX;

/// What one connection is doing, shared by its codec (reads), its request loop (requests in
/// flight) and the daemon's [`ConnTable`] (eviction).
#[derive(Debug)]
pub struct Activity {
    last_rx_ms: AtomicU64,
    mid_frame: AtomicBool,
    /// When the first bytes of the frame arriving now came.
    frame_start_ms: AtomicU64,
    /// Bytes of that frame in so far, its length header included.
    frame_got: AtomicU64,
    /// Its whole length as its header announced (header included), or [`UNANNOUNCED`].
    frame_len: AtomicU64,
    busy: AtomicUsize,
    close: CancellationToken,
}

impl Default for Activity {
    fn default() -> Self {
        let now = now_ms();
        Self {
            last_rx_ms: AtomicU64::new(now),
            mid_frame: AtomicBool::new(false),
            frame_start_ms: AtomicU64::new(now),
            frame_got: AtomicU64::new(0),
            frame_len: AtomicU64::new(UNANNOUNCED),
            busy: AtomicUsize::new(0),
            close: CancellationToken::new(),
        }
    }
}

/// Why a connection is closed by its timeouts.
#[derive(Clone, Debug, PartialEq)]
pub enum Breach {
    /// Nothing in flight and nothing arriving for this long.
    Idle(Duration),
    /// A frame half-way in and nothing arriving for this long.
    Stalled(Duration),
    /// A frame behind the pace `min_frame_rate` sets.
    TooSlow {
        /// Bytes of the frame in, header included.
        got: u64,
        /// Its length as announced, header included (none: the header is not complete).
        announced: Option<u64>,
        /// Since its first bytes came.
        elapsed: Duration,
        /// The pace it fell behind, bytes/s.
        min_rate: u64,
        /// The slack it had over that pace.
        grace: Duration,
    },
}

impl std::fmt::Display for Breach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Breach::Idle(d) => write!(f, "idle for {:.1} s (idle_timeout_s)", d.as_secs_f64()),
            Breach::Stalled(d) => write!(
                f,
                "a frame stalled half-way for {:.1} s (stall_timeout_s)",
                d.as_secs_f64()
            ),
            Breach::TooSlow {
                got,
                announced,
                elapsed,
                min_rate,
                grace,
            } => {
                match announced {
                    Some(n) => write!(f, "a frame arrived too slowly: {got} of {n} bytes")?,
                    None => write!(
                        f,
                        "a frame arrived too slowly: {got} bytes, its length header not complete"
                    )?,
                }
                write!(
                    f,
                    " in {:.1} s (it must keep up min_frame_rate_bytes_per_s = {min_rate} after frame_grace_s = {})",
                    elapsed.as_secs_f64(),
                    grace.as_secs_f64()
                )
            }
        }
    }
}

impl Activity {
    /// Restarts the idle clock: bytes arrived (or, from [`BusyGuard`], a request finished).
    pub fn touch(&self) {
        self.last_rx_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// Whether a frame is half-way in.
    pub fn mid_frame(&self) -> bool {
        self.mid_frame.load(Ordering::Relaxed)
    }

    /// Notes that a frame is arriving: `got` bytes of it so far (header included), and its
    /// whole length once the header is in. Its clock starts at the first call after
    /// [`frame_done`](Self::frame_done).
    pub(crate) fn frame_arriving(&self, got: u64, announced: Option<u64>) {
        if !self.mid_frame() {
            self.frame_start_ms.store(now_ms(), Ordering::Relaxed);
            self.mid_frame.store(true, Ordering::Relaxed);
        }
        self.frame_got.store(got, Ordering::Relaxed);
        self.frame_len
            .store(announced.unwrap_or(UNANNOUNCED), Ordering::Relaxed);
    }

    /// Notes that no frame is half-way in (the last one is complete, the next not begun).
    pub(crate) fn frame_done(&self) {
        self.mid_frame.store(false, Ordering::Relaxed);
    }

    /// How long since bytes last arrived.
    pub fn quiet_for(&self) -> Duration {
        Duration::from_millis(self.quiet_ms(now_ms()))
    }

    fn quiet_ms(&self, now: u64) -> u64 {
        now.saturating_sub(self.last_rx_ms.load(Ordering::Relaxed))
    }

    /// Bytes of the frame in so far and its announced length (both with its header), while one
    /// is half-way in.
    pub fn frame_progress(&self) -> Option<(u64, Option<u64>)> {
        self.mid_frame().then(|| {
            let len = self.frame_len.load(Ordering::Relaxed);
            (
                self.frame_got.load(Ordering::Relaxed),
                (len != UNANNOUNCED).then_some(len),
            )
        })
    }

    /// Bytes per second the frame half-way in has come at so far (eviction closes the slowest
    /// first).
    fn frame_rate(&self, now: u64) -> u64 {
        let age = now
            .saturating_sub(self.frame_start_ms.load(Ordering::Relaxed))
            .max(1);
        self.frame_got.load(Ordering::Relaxed).saturating_mul(1000) / age
    }

    /// Requests in flight ([`start_request`](Self::start_request) guards alive): a busy
    /// connection is never evicted.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Marks one request in flight until the guard drops.
    pub fn start_request(self: &Arc<Self>) -> BusyGuard {
        self.busy.fetch_add(1, Ordering::Relaxed);
        BusyGuard(self.clone())
    }

    /// Whether the connection is idle: nothing in flight and no frame half read.
    pub fn is_idle(&self) -> bool {
        self.busy() == 0 && !self.mid_frame()
    }

    /// Asks the connection to close (it was evicted).
    pub fn close(&self) {
        self.close.cancel();
    }

    /// Resolves once it is asked to close.
    pub async fn closed(&self) {
        self.close.cancelled().await
    }

    /// Whether it was asked to close.
    pub fn is_closed(&self) -> bool {
        self.close.is_cancelled()
    }

    /// Whether the timeouts of `limits` close the connection now; if not, how long until they
    /// could, should no byte arrive and no request start or end meanwhile.
    ///
    /// A frame must keep up `min_frame_rate` on average once `frame_grace` is spent: after `t`
    /// seconds it must have `(t − grace) × rate` bytes in. So it is complete by `grace + len /
    /// rate` at the latest, and announcing a large frame buys a trickle no time: it is closed as
    /// soon as it falls behind, not when its whole length would have been due. Before the header
    /// is complete (a few bytes) the grace alone applies.
    pub fn check(&self, limits: &ConnLimits) -> Result<Duration, Breach> {
        let now = now_ms();
        let quiet = Duration::from_millis(self.quiet_ms(now));
        if self.mid_frame() {
            if quiet >= limits.stall_timeout {
                return Err(Breach::Stalled(quiet));
            }
            let start = self.frame_start_ms.load(Ordering::Relaxed);
            let got = self.frame_got.load(Ordering::Relaxed);
            let owed = got.saturating_mul(1000) / limits.min_frame_rate.max(1);
            let due = start
                .saturating_add(limits.frame_grace.as_millis() as u64)
                .saturating_add(owed);
            if now >= due {
                let len = self.frame_len.load(Ordering::Relaxed);
                return Err(Breach::TooSlow {
                    got,
                    announced: (len != UNANNOUNCED).then_some(len),
                    elapsed: Duration::from_millis(now.saturating_sub(start)),
                    min_rate: limits.min_frame_rate,
                    grace: limits.frame_grace,
                });
            }
            return Ok((limits.stall_timeout - quiet).min(Duration::from_millis(due - now)));
        }
        if self.busy() > 0 {
            // Requests in flight: nothing to close, but look again after the shorter limit.
            return Ok(limits.idle_timeout.min(limits.stall_timeout));
        }
        if quiet >= limits.idle_timeout {
            return Err(Breach::Idle(quiet));
        }
        Ok(limits.idle_timeout - quiet)
    }

    /// Resolves, with the reason, once the timeouts of `limits` close the connection: for a task
    /// that reads its frames itself rather than through [`Guarded`]. Nothing wakes it when bytes
    /// come, so it looks again at least every `frame_grace` or `stall_timeout`, whichever is
    /// shorter: a frame that begins in between cannot be overdue any sooner.
    pub async fn breached(&self, limits: &ConnLimits) -> Breach {
        loop {
            match self.check(limits) {
                Err(why) => return why,
                Ok(left) => {
                    let next = left.min(limits.frame_grace).min(limits.stall_timeout);
                    tokio::time::sleep(next.max(Duration::from_millis(1))).await;
                }
            }
        }
    }
}

/// One request in flight on a connection.
#[derive(Debug)]
pub struct BusyGuard(Arc<Activity>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// Connection limits of a daemon.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnLimits {
    /// Connections open at once, in all.
    pub max_connections: usize,
    /// Connections open at once from one peer address.
    pub max_per_peer: usize,
    /// Connections open at once from one source [`Network`]: whoever holds several addresses
    /// usually holds them in one network, and a cap per address alone lets it fill the table.
    pub max_per_network: usize,
    /// A connection with nothing in flight and nothing arriving for this long is closed.
    pub idle_timeout: Duration,
    /// A frame that stops arriving half-way for this long closes its connection.
    pub stall_timeout: Duration,
    /// The slowest average pace a frame may keep once its grace is spent, bytes/s. Silence
    /// alone cannot catch a frame trickled a byte every few seconds; this does. 32 KiB/s by
    /// default: a client on a poor WAN link (256 kbit/s) still passes, and a 16 MiB frame may
    /// take eight and a half minutes, while a trickle is closed once its grace is spent.
    pub min_frame_rate: u64,
    /// The slack every frame has over that pace: the time before its first bytes must count,
    /// and all a frame whose length header is not yet complete gets. 10 s by default: longer
    /// than TCP's slow start and a few retransmission back-offs on a lossy link, short enough
    /// that a trickling connection holds its place for seconds, not for `stall_timeout`
    /// after every byte.
    pub frame_grace: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            max_per_peer: 1024,
            max_per_network: 2048,
            idle_timeout: Duration::from_secs(300),
            stall_timeout: Duration::from_secs(60),
            min_frame_rate: 32 * 1024,
            frame_grace: Duration::from_secs(10),
        }
    }
}

impl ConnLimits {
    /// Refuses limits no daemon could work with, naming the setting.
    pub fn check(&self) -> Result<(), String> {
        for (key, v) in [
            ("max_connections", self.max_connections as u64),
            ("max_connections_per_peer", self.max_per_peer as u64),
            ("max_connections_per_network", self.max_per_network as u64),
            ("min_frame_rate_bytes_per_s", self.min_frame_rate),
        ] {
            if v == 0 {
                return Err(format!("{key} must be at least 1"));
            }
        }
        for (key, v) in [
            ("idle_timeout_s", self.idle_timeout),
            ("stall_timeout_s", self.stall_timeout),
            ("frame_grace_s", self.frame_grace),
        ] {
            if v.is_zero() {
                return Err(format!("{key} must be positive"));
            }
        }
        Ok(())
    }
}

/// The source network of a peer for `max_per_network`: its /24 for IPv4, its /64 for IPv6 (an
/// IPv4-mapped IPv6 address counts as the IPv4 address it is). These are the blocks one party
/// commonly holds whole: an IPv6 host is given a /64 of its own (so a cap per address means
/// nothing there), and the extra IPv4 addresses of one host or small site (aliases, a cloud
/// machine's secondary addresses) usually share their /24.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Network(IpAddr);

impl Network {
    /// The network `ip` belongs to.
    pub fn of(ip: IpAddr) -> Self {
        Network(match ip.to_canonical() {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & !0xff)),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & !(u128::MAX >> 64))),
        })
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(a) => write!(f, "{a}/24"),
            IpAddr::V6(a) => write!(f, "{a}/64"),
        }
    }
}

#[derive(Debug)]
struct Entry {
    peer: SocketAddr,
    ip: IpAddr,
    net: Network,
    activity: Arc<Activity>,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    conns: HashMap<u64, Entry>,
    per_ip: HashMap<IpAddr, usize>,
    per_net: HashMap<Network, usize>,
}

impl Table {
    fn forget(&mut self, id: u64) -> Option<Entry> {
        let e = self.conns.remove(&id)?;
        fn leave<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, k: &K) {
            if let Some(n) = counts.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(k);
                }
            }
        }
        leave(&mut self.per_ip, &e.ip);
        leave(&mut self.per_net, &e.net);
        Some(e)
    }
}

/// The connections a cap counts, from which one is evicted when it is reached.
#[derive(Clone, Copy, Debug)]
enum Scope {
    Peer(IpAddr),
    Network(Network),
    All,
}

impl Scope {
    fn holds(&self, e: &Entry) -> bool {
        match self {
            Scope::Peer(ip) => e.ip == *ip,
            Scope::Network(net) => e.net == *net,
            Scope::All => true,
        }
    }
}

/// Every open connection of a daemon, for caps and eviction.
#[derive(Debug)]
pub struct ConnTable {
    limits: ConnLimits,
    table: Mutex<Table>,
}

/// A connection's place in the [`ConnTable`]; leaving it when dropped.
#[derive(Debug)]
pub struct Admission {
    table: Arc<ConnTable>,
    id: u64,
    /// Shared with the connection's codec and request loop, which report reads and requests
    /// to it.
    pub activity: Arc<Activity>,
    made_room: bool,
}

impl Admission {
    /// Whether another connection was evicted to let this one in.
    pub fn made_room(&self) -> bool {
        self.made_room
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.table.lock().forget(self.id);
    }
}

impl ConnTable {
    /// An empty table enforcing `limits`.
    pub fn new(limits: ConnLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            table: Mutex::new(Table::default()),
        })
    }

    /// As given to [`new`](Self::new) (`accept_loop` may have lowered `max_connections` below
    /// the open-file limit first).
    pub fn limits(&self) -> &ConnLimits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections admitted and not yet dropped; an evicted one leaves at once, before its
    /// task has closed it.
    pub fn len(&self) -> usize {
        self.lock().conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes a new connection from `peer`. At a cap (the narrowest reached: the peer's, its
    /// network's, the total) it closes one connection of that scope to make room, or refuses
    /// (with the reason) when every one there is serving a request.
    pub fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Admission, String> {
        let ip = peer.ip().to_canonical();
        let net = Network::of(ip);
        let mut t = self.lock();
        let from_peer = t.per_ip.get(&ip).copied().unwrap_or(0);
        let from_net = t.per_net.get(&net).copied().unwrap_or(0);
        let scope = if from_peer >= self.limits.max_per_peer {
            Some(Scope::Peer(ip))
        } else if from_net >= self.limits.max_per_network {
            Some(Scope::Network(net))
        } else if t.conns.len() >= self.limits.max_connections {
            Some(Scope::All)
        } else {
            None
        };
        let made_room = scope.is_some();
        if let Some(scope) = scope {
            let Some(v) = Self::victim(&t, scope) else {
                return Err(match scope {
                    Scope::Peer(_) => format!(
                        "{from_peer} connections from {ip} are open and busy (max_connections_per_peer = {})",
                        self.limits.max_per_peer
                    ),
                    Scope::Network(_) => format!(
                        "{from_net} connections from {net} are open and busy (max_connections_per_network = {})",
                        self.limits.max_per_network
                    ),
                    Scope::All => format!(
                        "{} connections are open and busy (max_connections = {})",
                        t.conns.len(),
                        self.limits.max_connections
                    ),
                });
            };
            // Forget it at once so the count makes room; its task closes it.
            if let Some(e) = t.forget(v) {
                e.activity.close();
                match e.activity.frame_progress() {
                    None => tracing::info!(
                        peer = %e.peer,
                        idle_s = e.activity.quiet_for().as_secs_f64(),
                        "closing an idle connection to make room"
                    ),
                    Some((got, announced)) => tracing::info!(
                        peer = %e.peer,
                        got,
                        announced,
                        bytes_per_s = e.activity.frame_rate(now_ms()),
                        "closing the connection whose frame arrives slowest to make room"
                    ),
                }
            }
        }
        t.next += 1;
        let id = t.next;
        let activity = Arc::new(Activity::default());
        t.conns.insert(
            id,
            Entry {
                peer,
                ip,
                net,
                activity: activity.clone(),
            },
        );
        *t.per_ip.entry(ip).or_insert(0) += 1;
        *t.per_net.entry(net).or_insert(0) += 1;
        Ok(Admission {
            table: self.clone(),
            id,
            activity,
            made_room,
        })
    }

    /// The connection of `scope` to close for a newcomer: the longest idle, else the one whose
    /// frame has come slowest so far, else the longest idle of those idle for less than
    /// [`JUST_IDLE`]; never one serving a request. Among equals (the clocks count
    /// milliseconds) the oldest.
    fn victim(t: &Table, scope: Scope) -> Option<u64> {
        let now = now_ms();
        let just = JUST_IDLE.as_millis() as u64;
        let open = t
            .conns
            .iter()
            .filter(|(_, e)| scope.holds(e) && e.activity.busy() == 0 && !e.activity.is_closed());
        let idle = |young: bool| {
            open.clone()
                .filter(move |(_, e)| {
                    !e.activity.mid_frame() && (e.activity.quiet_ms(now) < just) == young
                })
                .max_by_key(|(id, e)| (e.activity.quiet_ms(now), std::cmp::Reverse(**id)))
        };
        idle(false)
            .or_else(|| {
                open.clone()
                    .filter(|(_, e)| e.activity.mid_frame())
                    .min_by_key(|(id, e)| (e.activity.frame_rate(now), **id))
            })
            .or_else(|| idle(true))
            .map(|(id, _)| *id)
    }
}

/// Raises this process's open-file limit to its hard limit and returns the soft limit now in
/// force, so a daemon can keep its connection cap below it (accepting past it fails).
pub fn raise_fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit only read and write the struct we pass.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                return None;
            }
            if lim.rlim_cur < lim.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: lim.rlim_max,
                    rlim_max: lim.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    lim = raised;
                }
            }
        }
        Some(lim.rlim_cur)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// A server-side transport that ends (closing the connection, with a logged reason) when the
/// peer is idle past the idle timeout, stalls mid-frame past the stall timeout, sends a frame
/// slower than the frame rate allows, or the connection is evicted.
#[pin_project::pin_project]
pub struct Guarded<T> {
    #[pin]
    inner: T,
    activity: Arc<Activity>,
    limits: ConnLimits,
    peer: SocketAddr,
    timer: Pin<Box<tokio::time::Sleep>>,
    closed: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    hold: Option<Admission>,
}

impl<T> Guarded<T> {
    /// Wraps `inner`, the transport of a connection whose activity is `activity`.
    pub fn new(inner: T, activity: Arc<Activity>, limits: &ConnLimits, peer: SocketAddr) -> Self {
        let closed = Box::pin(activity.close.clone().cancelled_owned());
        Self {
            inner,
            limits: limits.clone(),
            peer,
            timer: Box::pin(tokio::time::sleep(limits.idle_timeout)),
            closed,
            activity,
            hold: None,
        }
    }

    /// Keeps the connection's place in its table for as long as the transport lives.
    pub fn holding(mut self, admission: Admission) -> Self {
        self.hold = Some(admission);
        self
    }
}

impl<T, I, E> futures::Stream for Guarded<T>
where
    T: futures::Stream<Item = Result<I, E>>,
{
    type Item = Result<I, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        if let Poll::Ready(x) = this.inner.poll_next(cx) {
            return Poll::Ready(x);
        }
        if this.closed.as_mut().poll(cx).is_ready() {
            tracing::info!(peer = %this.peer, "closing the connection: evicted to make room for a new one");
            return Poll::Ready(None);
        }
        loop {
            let left = match this.activity.check(this.limits) {
                Ok(left) => left,
                Err(why) => {
                    tracing::info!(peer = %this.peer, "closing the connection: {why}");
                    return Poll::Ready(None);
                }
            };
            // Bytes arriving wake this poll (through `inner`), so the limits are looked at
            // again whenever they could have moved. A timer due earlier than needed merely
            // wakes us to look again: it is moved only when it fired or is due too late (this
            // runs on every poll, and moving a timer costs).
            let want = tokio::time::Instant::now() + left;
            if this.timer.is_elapsed() || this.timer.deadline() > want {
                this.timer.as_mut().reset(want);
            }
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

use std::future::Future;

impl<T, S> futures::Sink<S> for Guarded<T>
where
    T: futures::Sink<S>,
{
    type Error = T::Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        self.project().inner.poll_ready(cx)
    }

    fn start_send(self: Pin<&mut Self>, item: S) -> Result<(), T::Error> {
        self.project().inner.start_send(item)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        self.project().inner.poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(ip: [u8; 4], port: u16) -> SocketAddr {
        SocketAddr::from((ip, port))
    }

    #[test]
    fn a_full_table_evicts_the_longest_idle_connection() {
        let t = ConnTable::new(ConnLimits {
            max_connections: 3,
            max_per_peer: 2,
            ..ConnLimits::default()
        });
        let a = t.admit(addr([10, 0, 0, 1], 1)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let b = t.admit(addr([10, 0, 0, 1], 2)).unwrap();
        let _busy = b.activity.start_request();
        // Peer cap: the idle one of the same peer makes room.
        let c = t.admit(addr([10, 0, 0, 1], 3)).unwrap();
        assert!(a.activity.is_closed());
        assert!(!b.activity.is_closed());
        // Both of that peer's connections are busy now: refused, with the reason.
        let _busy_c = c.activity.start_request();
        let e = t.admit(addr([10, 0, 0, 1], 4)).unwrap_err();
        assert!(e.contains("max_connections_per_peer = 2"), "{e}");
        // Another peer: fits until the total cap, then only busy ones remain.
        let d = t.admit(addr([10, 0, 0, 2], 1)).unwrap();
        let _busy_d = d.activity.start_request();
        let e = t.admit(addr([10, 0, 0, 3], 1)).unwrap_err();
        assert!(e.contains("max_connections = 3"), "{e}");
        drop(a);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn a_network_cap_evicts_across_the_addresses_of_one_network() {
        let t = ConnTable::new(ConnLimits {
            max_connections: 100,
            max_per_peer: 100,
            max_per_network: 2,
            ..ConnLimits::default()
        });
        let a = t.admit(addr([10, 0, 0, 1], 1)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let b = t.admit(addr([10, 0, 0, 2], 1)).unwrap();
        // A third address of 10.0.0.0/24: the network's longest-idle connection (a) makes room.
        let c = t.admit(addr([10, 0, 0, 3], 1)).unwrap();
        assert!(a.activity.is_closed() && c.made_room() && !b.made_room());
        assert!(!b.activity.is_closed() && !c.activity.is_closed());
        // Another network is not in its way.
        let d = t.admit(addr([10, 0, 1, 1], 1)).unwrap();
        assert!(!b.activity.is_closed() && !c.activity.is_closed());
        assert_eq!(t.len(), 3);
        // An IPv4-mapped IPv6 address counts as the IPv4 address it is.
        let _busy = (b.activity.start_request(), c.activity.start_request());
        let mapped = SocketAddr::new("::ffff:10.0.0.9".parse().unwrap(), 1);
        let e = t.admit(mapped).unwrap_err();
        assert!(
            e.contains("10.0.0.0/24") && e.contains("max_connections_per_network = 2"),
            "{e}"
        );
        assert!(!d.activity.is_closed());
        // IPv6: a /64.
        let v6 = |s: &str| SocketAddr::new(s.parse().unwrap(), 1);
        let f = t.admit(v6("2001:db8::1")).unwrap();
        let _g = t.admit(v6("2001:db8::2")).unwrap();
        let _h = t.admit(v6("2001:db8:0:1::1")).unwrap();
        assert!(!f.activity.is_closed());
        let _i = t.admit(v6("2001:db8::ffff:1")).unwrap();
        assert!(f.activity.is_closed());
        assert_eq!(
            Network::of("2001:db8::ffff:1".parse().unwrap()).to_string(),
            "2001:db8::/64"
        );
    }

    #[test]
    fn a_table_of_trickles_makes_room_by_closing_the_slowest_never_a_busy_one() {
        let t = ConnTable::new(ConnLimits {
            max_connections: 3,
            ..ConnLimits::default()
        });
        let peer = |i: u8| addr([10, 0, i, 1], 1);
        // Frames half-way in: a trickle, a fast one, and the slowest of all on a connection
        // serving a request.
        let slow = t.admit(peer(1)).unwrap();
        slow.activity.frame_arriving(5, Some(1 << 20));
        let fast = t.admit(peer(2)).unwrap();
        fast.activity.frame_arriving(1 << 20, Some(8 << 20));
        let busy = t.admit(peer(3)).unwrap();
        busy.activity.frame_arriving(0, None);
        let _req = busy.activity.start_request();
        // None is idle, yet a newcomer finds room: the slowest frame's connection goes.
        let newcomer = t.admit(peer(4)).unwrap_or_else(|e| panic!("{e}"));
        assert!(slow.activity.is_closed());
        assert!(!fast.activity.is_closed() && !busy.activity.is_closed());
        // The newcomer trickles in turn: the next one closes it.
        newcomer.activity.frame_arriving(2, None);
        let last = t.admit(peer(5)).unwrap_or_else(|e| panic!("{e}"));
        assert!(newcomer.activity.is_closed());
        assert!(!fast.activity.is_closed() && !busy.activity.is_closed());
        assert_eq!(t.len(), 3);
        // Only connections serving requests left: refused.
        let _reqs = (fast.activity.start_request(), last.activity.start_request());
        let e = t.admit(peer(6)).unwrap_err();
        assert!(e.contains("max_connections = 3"), "{e}");
        assert!(!fast.activity.is_closed() && !busy.activity.is_closed());
    }

    #[test]
    fn an_idle_connection_goes_first_unless_it_only_just_went_idle() {
        let t = ConnTable::new(ConnLimits {
            max_connections: 2,
            ..ConnLimits::default()
        });
        let peer = |i: u8| addr([10, 0, i, 1], 1);
        let trickle = t.admit(peer(1)).unwrap();
        trickle.activity.frame_arriving(1, None);
        // Accepted, its hello not yet read: a client a round trip into its work.
        let fresh = t.admit(peer(2)).unwrap();
        let c = t.admit(peer(3)).unwrap();
        assert!(trickle.activity.is_closed());
        assert!(!fresh.activity.is_closed());
        // Idle for a while, it goes before any frame half-way in, however slow.
        c.activity.frame_arriving(1, None);
        std::thread::sleep(JUST_IDLE + Duration::from_millis(50));
        let _d = t.admit(peer(4)).unwrap();
        assert!(fresh.activity.is_closed());
        assert!(!c.activity.is_closed());
    }

    #[test]
    fn limits_name_the_setting_they_refuse() {
        assert!(ConnLimits::default().check().is_ok());
        for (l, key) in [
            (
                ConnLimits {
                    max_per_network: 0,
                    ..ConnLimits::default()
                },
                "max_connections_per_network",
            ),
            (
                ConnLimits {
                    min_frame_rate: 0,
                    ..ConnLimits::default()
                },
                "min_frame_rate_bytes_per_s",
            ),
            (
                ConnLimits {
                    frame_grace: Duration::ZERO,
                    ..ConnLimits::default()
                },
                "frame_grace_s",
            ),
        ] {
            assert!(l.check().unwrap_err().contains(key), "{key}");
        }
    }

    #[test]
    fn a_frame_must_keep_up_the_pace_its_size_sets() {
        // The default rate (32 KiB/s) and a short grace.
        let limits = ConnLimits {
            frame_grace: Duration::from_millis(50),
            ..ConnLimits::default()
        };
        // A trickle: a header announcing a large frame buys it nothing once its grace is spent,
        // though it never falls silent long enough to stall.
        let trickle = Activity::default();
        trickle.frame_arriving(5, Some(1 << 30));
        assert!(trickle.check(&limits).is_ok());
        for got in 6..12 {
            std::thread::sleep(Duration::from_millis(10));
            trickle.touch();
            trickle.frame_arriving(got, Some(1 << 30));
        }
        match trickle.check(&limits) {
            Err(Breach::TooSlow { got, announced, .. }) => {
                assert_eq!((got, announced), (11, Some(1 << 30)));
            }
            other => panic!("{other:?}"),
        }
        let why = trickle.check(&limits).unwrap_err().to_string();
        assert!(
            why.contains("11 of 1073741824 bytes") && why.contains("min_frame_rate_bytes_per_s"),
            "{why}"
        );
        // A header that never completes gets the grace alone.
        let headless = Activity::default();
        headless.frame_arriving(2, None);
        std::thread::sleep(Duration::from_millis(60));
        headless.touch();
        assert!(matches!(
            headless.check(&limits),
            Err(Breach::TooSlow {
                announced: None,
                ..
            })
        ));
        // A large frame coming fast is on time all the way, and its pace gives it room ahead.
        let fast = Activity::default();
        for got in (0..=64u64).map(|i| i << 20) {
            fast.touch();
            fast.frame_arriving(got + 4, Some((64 << 20) + 4));
            let left = fast.check(&limits).unwrap();
            assert!(left > Duration::ZERO);
        }
        fast.frame_done();
        assert!(fast.check(&limits).is_ok());
    }

    #[test]
    fn leaving_frees_the_place() {
        let t = ConnTable::new(ConnLimits {
            max_connections: 1,
            ..ConnLimits::default()
        });
        let a = t.admit(addr([127, 0, 0, 1], 1)).unwrap();
        let _g = a.activity.start_request();
        assert!(t.admit(addr([127, 0, 0, 1], 2)).is_err());
        drop(_g);
        drop(a);
        assert!(t.is_empty());
        assert!(t.admit(addr([127, 0, 0, 1], 2)).is_ok());
    }

    #[tokio::test]
    async fn idle_stalled_and_evicted_connections_end_busy_ones_do_not() {
        use futures::StreamExt;
        let limits = ConnLimits {
            idle_timeout: Duration::from_millis(150),
            stall_timeout: Duration::from_millis(60),
            ..ConnLimits::default()
        };
        let peer = addr([127, 0, 0, 1], 9);
        let guarded = |a: &Arc<Activity>| {
            Guarded::new(
                futures::stream::pending::<Result<u8, ()>>(),
                a.clone(),
                &limits,
                peer,
            )
        };
        let bound = Duration::from_secs(10);
        // Idle: ends.
        let idle = Arc::new(Activity::default());
        assert!(
            tokio::time::timeout(bound, guarded(&idle).next())
                .await
                .unwrap()
                .is_none()
        );
        // A frame half-way that stops: ends, sooner than idle.
        let stalled = Arc::new(Activity::default());
        stalled.frame_arriving(1, None);
        assert!(
            tokio::time::timeout(bound, guarded(&stalled).next())
                .await
                .unwrap()
                .is_none()
        );
        // A request in flight: stays open however quiet.
        let busy = Arc::new(Activity::default());
        let _req = busy.start_request();
        let mut g = guarded(&busy);
        assert!(
            tokio::time::timeout(Duration::from_millis(400), g.next())
                .await
                .is_err()
        );
        // Evicted: ends at once.
        busy.close();
        assert!(
            tokio::time::timeout(bound, g.next())
                .await
                .unwrap()
                .is_none()
        );
    }
}
