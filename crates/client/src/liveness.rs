//! Whether the servers running this client's calls still answer.
//!
//! A server that freezes (stopped, swapping, wedged) keeps its connections open, so a call on it
//! would wait for its timeout. While a server has calls of this client in flight, it is pinged
//! every `liveness_interval` on a connection of its own (a large frame on the call's connection
//! must not delay the pong); three intervals without an answer make it *unresponsive*: its
//! connections are closed, so every call waiting on it fails over at once (a call pays two
//! atomic counts for this, nothing more), and it stays *suspect* — tried last — until it
//! answers again.

use gridwise_proto::ServerApiClient;
use gridwise_runtime::wire::{self, DialConfig};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::watch;

/// Missed intervals that make a server unresponsive.
const MISSES: u32 = 3;
/// Probes started per interval at a server that went silent.
const PROBES_PER_INTERVAL: u32 = 4;

/// What to do when a server stops answering: close its connections (given its address).
pub(crate) type OnUnresponsive = Box<dyn Fn(&str) + Send + Sync>;

/// The servers being watched, by address.
pub(crate) struct Liveness {
    rt: Handle,
    dial: DialConfig,
    interval: Duration,
    on_unresponsive: OnUnresponsive,
    servers: Mutex<HashMap<String, Arc<Watched>>>,
    /// How many servers are unresponsive now: zero on the hot path, where nothing is looked up.
    unresponsive_count: Arc<AtomicUsize>,
    /// Told each time a server answers again after it was unresponsive (which one, and when,
    /// is its `back_at`).
    returned: watch::Sender<()>,
}

struct Watched {
    /// Live [`CallWatch`]es: the pinger stops once this is 0 and the server answers.
    calls: AtomicUsize,
    /// True while it does not answer.
    unresponsive: watch::Sender<bool>,
    /// Whether a pinger runs for it.
    pinging: AtomicBool,
    /// When it last answered again after being unresponsive.
    back_at: Mutex<Option<Instant>>,
}

/// One call's watch on its server; the server is pinged while any watch on it lives.
pub(crate) struct CallWatch {
    watched: Arc<Watched>,
}

impl Drop for CallWatch {
    fn drop(&mut self) {
        self.watched.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Liveness {
    /// Pings with `dial` every `interval` on `rt`; `on_unresponsive` closes the connections
    /// of a server that stopped answering.
    pub(crate) fn new(
        rt: Handle,
        dial: DialConfig,
        interval: Duration,
        on_unresponsive: OnUnresponsive,
    ) -> Self {
        Self {
            rt,
            dial,
            interval,
            on_unresponsive,
            servers: Mutex::new(HashMap::new()),
            unresponsive_count: Arc::new(AtomicUsize::new(0)),
            returned: watch::channel(()).0,
        }
    }

    /// How long a server may be silent before its calls move: three intervals.
    pub(crate) fn limit(&self) -> Duration {
        self.interval * MISSES
    }

    /// Whether the server at `addr` did not answer lately (tried last until it does).
    pub(crate) fn is_suspect(&self, addr: &str) -> bool {
        if self.unresponsive_count.load(Ordering::Acquire) == 0 {
            return false;
        }
        lock(&self.servers)
            .get(addr)
            .is_some_and(|w| *w.unresponsive.borrow())
    }

    /// How many of this client's calls run on servers now.
    pub(crate) fn calls_in_flight(&self) -> usize {
        lock(&self.servers)
            .values()
            .map(|w| w.calls.load(Ordering::Acquire))
            .sum()
    }

    /// The servers that did not answer lately, by address.
    pub(crate) fn unresponsive(&self) -> Vec<String> {
        if self.unresponsive_count.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let mut v: Vec<String> = lock(&self.servers)
            .iter()
            .filter(|(_, w)| *w.unresponsive.borrow())
            .map(|(a, _)| a.clone())
            .collect();
        v.sort();
        v
    }

    fn watched(&self, addr: &str) -> Arc<Watched> {
        lock(&self.servers)
            .entry(addr.to_string())
            .or_insert_with(|| {
                Arc::new(Watched {
                    calls: AtomicUsize::new(0),
                    unresponsive: watch::channel(false).0,
                    pinging: AtomicBool::new(false),
                    back_at: Mutex::new(None),
                })
            })
            .clone()
    }

    fn ensure_pinging(self: &Arc<Self>, addr: &str, watched: &Arc<Watched>) {
        if !watched.pinging.swap(true, Ordering::AcqRel) {
            let me = self.clone();
            let (w, a) = (watched.clone(), addr.to_string());
            self.rt.spawn(async move { me.ping_loop(a, w).await });
        }
    }

    /// Sets whether `w` answers, keeping the count; whether that changed anything.
    fn set_unresponsive(&self, w: &Watched, silent: bool) -> bool {
        let changed = w.unresponsive.send_if_modified(|u| {
            let changed = *u != silent;
            *u = silent;
            changed
        });
        if changed {
            if silent {
                self.unresponsive_count.fetch_add(1, Ordering::AcqRel);
            } else {
                self.unresponsive_count.fetch_sub(1, Ordering::AcqRel);
            }
        }
        changed
    }

    /// Watches the server at `addr` for the length of one call.
    pub(crate) fn watch(self: &Arc<Self>, addr: &str) -> CallWatch {
        let watched = self.watched(addr);
        watched.calls.fetch_add(1, Ordering::AcqRel);
        self.ensure_pinging(addr, &watched);
        CallWatch { watched }
    }

    /// A call could not reach the server at `addr`: it is suspect (tried last) from now, and
    /// pinged every interval until it answers; the future ends when it does (a partition
    /// healed, a restarted server listening again).
    pub(crate) fn until_answers(
        self: &Arc<Self>,
        addr: &str,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let watched = self.watched(addr);
        let mut answers = watched.unresponsive.subscribe();
        self.set_unresponsive(&watched, true);
        self.ensure_pinging(addr, &watched);
        async move {
            let _ = answers.wait_for(|silent| !*silent).await;
        }
    }

    /// Changes each time a server this client held unresponsive answers again; what a waiting
    /// call watches to learn that a server it could go to is back.
    pub(crate) fn returns(&self) -> watch::Receiver<()> {
        self.returned.subscribe()
    }

    /// Whether the server at `addr` answered again, after being unresponsive, since `since`.
    pub(crate) fn answered_again_since(&self, addr: &str, since: Instant) -> bool {
        let Some(w) = lock(&self.servers).get(addr).cloned() else {
            return false;
        };
        lock(&w.back_at).is_some_and(|at| at >= since)
    }

    /// Pings `addr` while it has calls in flight or is suspect. The first ping waits an
    /// interval: most calls are over by then, and cost no ping at all.
    async fn ping_loop(self: Arc<Self>, addr: String, w: Arc<Watched>) {
        let mut client: Option<ServerApiClient> = None;
        let mut last_ok = Instant::now();
        tokio::time::sleep(self.interval).await;
        loop {
            if w.calls.load(Ordering::Acquire) == 0 && !*w.unresponsive.borrow() {
                w.pinging.store(false, Ordering::Release);
                // A call that came meanwhile may have seen the flag still up and counted on
                // this loop: take the flag back for it, unless a new loop already did.
                if w.calls.load(Ordering::Acquire) == 0 || w.pinging.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
            if *w.unresponsive.borrow() {
                client = Some(self.until_it_answers(&addr).await);
                last_ok = Instant::now();
                if self.set_unresponsive(&w, false) {
                    tracing::info!(server = %addr, "answers again");
                    *lock(&w.back_at) = Some(Instant::now());
                    self.returned.send_replace(());
                }
                tokio::time::sleep(self.interval).await;
                continue;
            }
            let started = Instant::now();
            // The verdict falls due three intervals after the last answer, not after a third
            // ping's own wait: a ping that would outlast that deadline waits only until it,
            // so a server that freezes just after answering loses its calls within three
            // intervals on a busy host too.
            let left = self.limit().saturating_sub(last_ok.elapsed());
            let wait = self.interval.min(left.max(Duration::from_millis(1)));
            let answered = tokio::time::timeout(wait, async {
                if client.is_none() {
                    client = Some(dial(&addr, &self.dial).await?);
                }
                let c = client.as_ref()?;
                c.ping(wire::context(self.interval)).await.ok()
            })
            .await
            .ok()
            .flatten()
            .is_some();
            if answered {
                // Known alive when the ping left, not when its answer came: an answer can
                // arrive after the server was cut off (a shaped link's queue holds it; the
                // test bed's client link queues 200 ms), and a verdict counted from it falls
                // due past three intervals from the cut (3.00 s in one cut of twelve).
                last_ok = started;
            } else {
                client = None;
                if last_ok.elapsed() >= self.limit() && !*w.unresponsive.borrow() {
                    tracing::warn!(
                        server = %addr,
                        silent_s = last_ok.elapsed().as_secs_f64(),
                        "not answering: moving its calls to other servers"
                    );
                    self.set_unresponsive(&w, true);
                    (self.on_unresponsive)(&addr);
                }
            }
            tokio::time::sleep(self.interval.saturating_sub(started.elapsed())).await;
        }
    }

    /// Probes a silent server until it answers, and returns the connection that did: a fresh
    /// probe every quarter interval, each given the whole interval. A dial resends a lost SYN
    /// itself (`wire::dial`), but a hello or ping a cut dropped waits for TCP's backed-off
    /// resend, so after a heal a fresh probe gets through first (one probe per interval saw
    /// healed servers up to 2.1 s late on the test bed); overlapping them still gives a slow
    /// link's dial and hello their whole interval.
    async fn until_it_answers(&self, addr: &str) -> ServerApiClient {
        let mut probes = tokio::task::JoinSet::new();
        let mut every = tokio::time::interval(self.interval / PROBES_PER_INTERVAL);
        loop {
            tokio::select! {
                _ = every.tick() => {
                    if probes.len() < PROBES_PER_INTERVAL as usize {
                        let (addr, cfg, interval) =
                            (addr.to_string(), self.dial.clone(), self.interval);
                        probes.spawn(async move {
                            tokio::time::timeout(interval, async {
                                let c = dial(&addr, &cfg).await?;
                                c.ping(wire::context(interval)).await.ok()?;
                                Some(c)
                            })
                            .await
                            .ok()
                            .flatten()
                        });
                    }
                }
                Some(done) = probes.join_next() => {
                    // The others are aborted as `probes` drops.
                    if let Ok(Some(c)) = done {
                        return c;
                    }
                }
            }
        }
    }
}

/// A liveness connection of its own to the server at `addr`.
async fn dial(addr: &str, cfg: &DialConfig) -> Option<ServerApiClient> {
    let (framed, _) = wire::connect(addr, cfg, "client liveness").await.ok()?;
    Some(ServerApiClient::new(wire::client_config(), wire::client_transport(framed)).spawn())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_server_that_never_answers_is_declared_unresponsive_and_suspect() {
        // Accepts TCP but never says hello: what a stopped process looks like.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let live = Arc::new(Liveness::new(
            Handle::current(),
            DialConfig::new(wire::Role::Client, None),
            Duration::from_millis(50),
            Box::new(move |a: &str| {
                let _ = tx.send(a.to_string());
            }),
        ));
        let w = live.watch(&addr);
        assert!(!live.is_suspect(&addr));
        let started = Instant::now();
        let closed = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("declared unresponsive");
        assert_eq!(closed.as_deref(), Some(addr.as_str()));
        assert!(started.elapsed() >= live.limit());
        assert!(live.is_suspect(&addr));
        assert_eq!(live.unresponsive(), vec![addr.clone()]);
        drop((w, l));
    }
}
