//! What a daemon allows its peers after the hello: how many connections (in all and per peer
//! address), how long a connection may sit idle, and how long a frame may stall half-way.
//!
//! Every accepted connection is in the daemon's [`ConnTable`] with its [`Activity`]. When a new
//! connection would pass a cap, the longest-idle connection (nothing in flight, no frame half
//! read) of the same peer — or of anyone, for the total cap — is closed to make room; only when
//! none is idle is the newcomer refused. So idle connections, however many a peer opens, never
//! lock out a client that has work to do.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
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

/// What one connection is doing, shared by its codec (reads), its request loop (requests in
/// flight) and the daemon's [`ConnTable`] (eviction).
#[derive(Debug)]
pub struct Activity {
    last_rx_ms: AtomicU64,
    mid_frame: AtomicBool,
    busy: AtomicUsize,
    close: CancellationToken,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            last_rx_ms: AtomicU64::new(now_ms()),
            mid_frame: AtomicBool::new(false),
            busy: AtomicUsize::new(0),
            close: CancellationToken::new(),
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

    pub(crate) fn set_mid_frame(&self, mid: bool) {
        self.mid_frame.store(mid, Ordering::Relaxed);
    }

    /// How long since bytes last arrived.
    pub fn quiet_for(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.last_rx_ms.load(Ordering::Relaxed)))
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
    /// A connection with nothing in flight and nothing arriving for this long is closed.
    pub idle_timeout: Duration,
    /// A frame that stops arriving half-way for this long closes its connection.
    pub stall_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            max_per_peer: 1024,
            idle_timeout: Duration::from_secs(300),
            stall_timeout: Duration::from_secs(60),
        }
    }
}

impl ConnLimits {
    /// Refuses limits no daemon could work with, naming the setting.
    pub fn check(&self) -> Result<(), String> {
        if self.max_connections == 0 || self.max_per_peer == 0 {
            return Err("max_connections and max_connections_per_peer must be at least 1".into());
        }
        if self.idle_timeout.is_zero() || self.stall_timeout.is_zero() {
            return Err("idle_timeout_s and stall_timeout_s must be positive".into());
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Entry {
    ip: IpAddr,
    activity: Arc<Activity>,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    conns: HashMap<u64, Entry>,
    per_ip: HashMap<IpAddr, usize>,
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
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut t = self.table.lock();
        if let Some(e) = t.conns.remove(&self.id)
            && let Some(n) = t.per_ip.get_mut(&e.ip)
        {
            *n -= 1;
            if *n == 0 {
                t.per_ip.remove(&e.ip);
            }
        }
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

    /// Takes a new connection from `peer`, closing the longest-idle one in its way if a cap is
    /// reached; refuses (with the reason) when none is idle.
    pub fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Admission, String> {
        let ip = peer.ip();
        let mut t = self.lock();
        let from_peer = t.per_ip.get(&ip).copied().unwrap_or(0);
        let victim_scope = if from_peer >= self.limits.max_per_peer {
            Some(Some(ip))
        } else if t.conns.len() >= self.limits.max_connections {
            Some(None)
        } else {
            None
        };
        if let Some(scope) = victim_scope {
            let victim = t
                .conns
                .iter()
                .filter(|(_, e)| scope.is_none_or(|ip| e.ip == ip))
                .filter(|(_, e)| e.activity.is_idle() && !e.activity.is_closed())
                // Longest idle first; among equals (the clock counts milliseconds) the oldest.
                .max_by_key(|(id, e)| (e.activity.quiet_for(), std::cmp::Reverse(**id)))
                .map(|(id, _)| *id);
            let Some(v) = victim else {
                return Err(match scope {
                    Some(_) => format!(
                        "{from_peer} connections from {ip} are open and busy (max_connections_per_peer = {})",
                        self.limits.max_per_peer
                    ),
                    None => format!(
                        "{} connections are open and busy (max_connections = {})",
                        t.conns.len(),
                        self.limits.max_connections
                    ),
                });
            };
            // Forget it at once so the count makes room; its task closes it.
            if let Some(e) = t.conns.remove(&v) {
                e.activity.close();
                tracing::info!(peer = %e.ip, idle_s = e.activity.quiet_for().as_secs_f64(), "closing an idle connection to make room");
                if let Some(n) = t.per_ip.get_mut(&e.ip) {
                    *n -= 1;
                }
            }
        }
        t.next += 1;
        let id = t.next;
        let activity = Arc::new(Activity::default());
        t.conns.insert(
            id,
            Entry {
                ip,
                activity: activity.clone(),
            },
        );
        *t.per_ip.entry(ip).or_insert(0) += 1;
        Ok(Admission {
            table: self.clone(),
            id,
            activity,
        })
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
/// peer is idle past the idle timeout, stalls mid-frame past the stall timeout, or the
/// connection is evicted.
#[pin_project::pin_project]
pub struct Guarded<T> {
    #[pin]
    inner: T,
    activity: Arc<Activity>,
    limits: (Duration, Duration),
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
            limits: (limits.idle_timeout, limits.stall_timeout),
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
            let a = &this.activity;
            let (idle, stall) = *this.limits;
            let limit = if a.mid_frame() {
                Some((stall, "a frame stalled half-way"))
            } else if a.busy() == 0 {
                Some((idle, "idle"))
            } else {
                None
            };
            let quiet = a.quiet_for();
            let left = match limit {
                Some((lim, why)) if quiet >= lim => {
                    tracing::info!(peer = %this.peer, quiet_s = quiet.as_secs_f64(), "closing the connection: {why} past its timeout");
                    return Poll::Ready(None);
                }
                Some((lim, _)) => lim - quiet,
                // Requests in flight: look again after the shorter limit.
                None => idle.min(stall),
            };
            // Activity only ever pushes the end later, so a timer due earlier merely wakes us
            // to look again: it is moved only when it fired or is due too late (this runs on
            // every poll, and moving a timer costs).
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
        stalled.set_mid_frame(true);
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
