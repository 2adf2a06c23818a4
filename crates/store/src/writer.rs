//! The background writer: the agent hands it operations and never waits for the disk.
//!
//! A write that fails for a reason that may pass (the disk is full, another process holds the
//! database, an I/O error) is kept and retried, in order, until it succeeds: what the agent
//! learns while its disk is unwell reaches the disk once it recovers, and [`Writer::health`]
//! says meanwhile that it has not. Only writes that can never succeed (a value that cannot be
//! encoded) are dropped, with a log line.

use crate::error::StoreError;
use crate::store::{LoadRow, PointRow, Store};
use gridwise_proto::{CallReport, Registration, ServerId, ServiceDesc};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One write for the [`Writer`]; each is the [`Store`] method of the same name.
#[derive(Debug)]
pub enum Op {
    /// [`Store::save_service`].
    Service(ServiceDesc),
    /// [`Store::save_server`]: id, registration, seconds since the Unix epoch.
    Server(ServerId, Registration, f64),
    /// [`Store::touch_server`]: server name, seconds since the Unix epoch.
    Seen(String, f64),
    /// [`Store::upsert_points`].
    Points(Vec<PointRow>),
    /// [`Store::add_timings`]: server name, seconds since the Unix epoch, reports.
    Timings(String, f64, Vec<CallReport>),
    /// [`Store::add_load`].
    Load(LoadRow),
    /// [`Store::forget_server`]: server name.
    Forget(String),
    /// Answers on the channel once every operation sent before it is committed.
    Flush(Sender<()>),
}

impl Op {
    /// A short name for logs.
    fn kind(&self) -> &'static str {
        match self {
            Op::Service(_) => "service",
            Op::Server(..) => "server",
            Op::Seen(..) => "last-seen time",
            Op::Points(_) => "model points",
            Op::Timings(..) => "timings",
            Op::Load(..) => "load sample",
            Op::Forget(_) => "forgetting a server",
            Op::Flush(_) => "flush",
        }
    }
}

/// How the [`Writer`] batches, prunes and retries.
#[derive(Clone, Debug, PartialEq)]
pub struct WriterConfig {
    /// Most operations in one transaction.
    pub max_batch_ops: usize,
    /// How long a batch stays open for more operations after its first one (not when that
    /// one is a flush, or while a backlog fills whole batches).
    pub max_batch_wait: Duration,
    /// How often the history is pruned (when something was written since the last time).
    pub prune_every: Duration,
    /// Timings kept per (server, service).
    pub keep_timings_per_pair: usize,
    /// Load samples kept per server.
    pub keep_load_per_server: usize,
    /// Operations that may wait for the writer thread; beyond this [`Writer::send`] drops them
    /// (with a warning) rather than block the caller or grow without bound.
    pub queue_capacity: usize,
    /// How often failed writes are tried again.
    pub retry_every: Duration,
    /// Failed writes kept for retrying; beyond this the oldest are given up (and counted).
    pub retry_capacity: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            max_batch_ops: 1024,
            max_batch_wait: Duration::from_millis(10),
            prune_every: Duration::from_secs(60),
            keep_timings_per_pair: 10_000,
            keep_load_per_server: 10_000,
            queue_capacity: 100_000,
            retry_every: Duration::from_secs(1),
            retry_capacity: 100_000,
        }
    }
}

/// Whether what was sent reaches the disk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriterHealth {
    /// False while writes fail.
    pub ok: bool,
    /// The error of the last failed attempt, while writes fail.
    pub last_error: Option<String>,
    /// Writes kept for retrying.
    pub pending: u64,
    /// Writes given up: the queue or the retry queue overflowed, or they can never succeed.
    pub dropped: u64,
}

/// Writes on its own thread: the caller never waits for the disk.
#[derive(Debug)]
pub struct Writer {
    tx: Option<SyncSender<Op>>,
    handle: Option<JoinHandle<()>>,
    dropped: Arc<AtomicU64>,
    health: Arc<Mutex<WriterHealth>>,
}

impl Writer {
    /// Starts the writer thread with the default configuration.
    pub fn spawn(store: Store) -> Writer {
        Writer::spawn_with(store, WriterConfig::default())
    }

    /// Starts the writer thread with `config`.
    pub fn spawn_with(store: Store, config: WriterConfig) -> Writer {
        let (tx, rx) = mpsc::sync_channel(config.queue_capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let health = Arc::new(Mutex::new(WriterHealth {
            ok: true,
            ..WriterHealth::default()
        }));
        let thread = Thread {
            store,
            config,
            retry: VecDeque::new(),
            dropped: dropped.clone(),
            health: health.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name("gridwise-store".into())
            .spawn(move || thread.run(rx));
        match spawned {
            Ok(handle) => Writer {
                tx: Some(tx),
                handle: Some(handle),
                dropped,
                health,
            },
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "cannot start the database writer thread; nothing will be saved"
                );
                let w = Writer {
                    tx: None,
                    handle: None,
                    dropped,
                    health,
                };
                w.set_health(false, Some(format!("the writer thread did not start: {e}")));
                w
            }
        }
    }

    fn set_health(&self, ok: bool, error: Option<String>) {
        let mut h = lock(&self.health);
        h.ok = ok;
        h.last_error = error;
    }

    /// Queues a write; never blocks on I/O. When the queue is full (the writer thread cannot
    /// keep up), the operation is dropped with a warning.
    pub fn send(&self, op: Op) {
        let Some(tx) = &self.tx else {
            self.note_dropped(op.kind(), "the writer thread is not running");
            return;
        };
        match tx.try_send(op) {
            Ok(()) => {}
            Err(TrySendError::Full(op)) => {
                self.note_dropped(op.kind(), "the write queue is full (is the disk stalled?)")
            }
            Err(TrySendError::Disconnected(op)) => {
                self.note_dropped(op.kind(), "the writer thread has stopped")
            }
        }
    }

    fn note_dropped(&self, kind: &'static str, why: &'static str) {
        let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        // The first drop, then every power of two: visible, but no log flood.
        if n.is_power_of_two() {
            tracing::warn!(op = kind, dropped = n, "not saving to the database: {why}");
        }
    }

    /// Operations given up so far (queue or retry queue full, thread stopped, or a write that
    /// can never succeed).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Whether writes reach the disk, and what waits to be retried.
    pub fn health(&self) -> WriterHealth {
        let mut h = lock(&self.health).clone();
        h.dropped = self.dropped();
        h
    }

    /// Waits until everything sent so far has been tried once (for shutdown and tests); what
    /// failed stays queued for retrying.
    pub fn flush(&self) {
        let Some(tx) = &self.tx else { return };
        let (ack_tx, ack_rx) = mpsc::channel();
        if tx.send(Op::Flush(ack_tx)).is_err() {
            tracing::warn!("cannot flush the database: the writer thread has stopped");
            return;
        }
        if ack_rx.recv().is_err() {
            tracing::warn!("the database writer stopped before the flush completed");
        }
    }
}

impl Drop for Writer {
    /// Writes out everything queued, then stops the thread.
    fn drop(&mut self) {
        // Closing the channel makes the thread commit what is queued and return.
        drop(self.tx.take());
        if let Some(handle) = self.handle.take() {
            if handle.join().is_err() {
                tracing::error!("the database writer thread panicked; recent writes may be lost");
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Applies one operation (a savepoint of its own inside the batch).
fn apply(store: &Store, op: &Op) -> Result<(), StoreError> {
    match op {
        Op::Service(d) => store.save_service(d),
        Op::Server(id, reg, at) => store.save_server(*id, reg, *at),
        Op::Seen(name, at) => store.touch_server(name, *at),
        Op::Points(rows) => store.upsert_points(rows),
        Op::Timings(server, at, reports) => store.add_timings(server, *at, reports),
        Op::Load(row) => store.add_load(row),
        Op::Forget(name) => store.forget_server(name),
        Op::Flush(_) => Ok(()),
    }
}

/// Whether a write that failed with `e` may succeed later.
fn may_pass(e: &StoreError) -> bool {
    !matches!(e, StoreError::Encode { .. })
}

/// The writer thread's state.
struct Thread {
    store: Store,
    config: WriterConfig,
    /// Writes that failed and may succeed later, oldest first.
    retry: VecDeque<Op>,
    dropped: Arc<AtomicU64>,
    health: Arc<Mutex<WriterHealth>>,
}

impl Thread {
    /// Commits `ops` in one transaction (each a savepoint of its own): returns the flushes to
    /// answer, and keeps what failed (and may pass) for the next attempt.
    fn write(&mut self, ops: Vec<Op>) -> Vec<Sender<()>> {
        let mut acks = Vec::new();
        let writes: Vec<Op> = ops
            .into_iter()
            .filter_map(|op| match op {
                Op::Flush(ack) => {
                    acks.push(ack);
                    None
                }
                op => Some(op),
            })
            .collect();
        if writes.is_empty() {
            return acks;
        }
        // When even the transaction cannot start (the database is locked, the disk is gone),
        // every operation would fail the same way, each after its own wait: keep them all.
        // First all at once; only a batch in which something fails is done again with each
        // operation on its own savepoint, to keep the rest. The savepoints cost two round
        // trips per operation on PostgreSQL: most of the agent's CPU for the store.
        if self.fast_batch(&writes) {
            self.keep(Vec::new(), None);
            return acks;
        }
        let (kept, error) = match self.store.begin_batch() {
            Err(e) => (writes, Some(e.to_string())),
            Ok(()) => self.apply_batch(writes),
        };
        self.keep(kept, error);
        acks
    }

    /// Applies every one of `writes` in one transaction without savepoints and commits; false
    /// (nothing written) if anything failed, for the careful way to sort it out.
    fn fast_batch(&mut self, writes: &[Op]) -> bool {
        if self.store.begin_batch().is_err() {
            return false;
        }
        self.store.set_op_savepoints(false);
        let all = writes.iter().all(|op| apply(&self.store, op).is_ok());
        self.store.set_op_savepoints(true);
        if !all {
            self.store.rollback_batch();
            return false;
        }
        self.store.commit_batch().is_ok()
    }

    /// Applies `writes` inside the open transaction and commits: what is to be tried again, and
    /// the last error.
    fn apply_batch(&mut self, writes: Vec<Op>) -> (Vec<Op>, Option<String>) {
        let store = &self.store;
        let mut failed: Vec<(Op, StoreError)> = Vec::new();
        let mut done: Vec<Op> = Vec::new();
        for op in writes {
            match apply(store, &op) {
                Ok(()) => done.push(op),
                Err(e) => failed.push((op, e)),
            }
        }
        let mut last_error = None;
        let mut kept = Vec::new();
        if let Err(e) = store.commit_batch() {
            // The commit rolled back everything the batch did: all of it is to do again.
            last_error = Some(e.to_string());
            kept = done;
        }
        for (op, e) in failed {
            if may_pass(&e) {
                last_error = Some(e.to_string());
                kept.push(op);
            } else {
                tracing::error!(op = op.kind(), error = %e, "not saved to the database (it never can be)");
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        (kept, last_error)
    }

    /// Queues `kept` for retrying ahead of newer writes, and records the health.
    fn keep(&mut self, kept: Vec<Op>, last_error: Option<String>) {
        // Retried writes go first, so they stay in the order they were sent.
        for op in kept.into_iter().rev() {
            self.retry.push_front(op);
        }
        while self.retry.len() > self.config.retry_capacity.max(1) {
            self.retry.pop_back();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        let mut h = lock(&self.health);
        let was_ok = h.ok;
        h.ok = last_error.is_none();
        h.pending = self.retry.len() as u64;
        match &last_error {
            Some(e) if was_ok => {
                tracing::error!(error = %e, pending = h.pending, "database writes fail; keeping them and retrying every {:?}", self.config.retry_every)
            }
            None if !was_ok => tracing::info!("database writes succeed again"),
            _ => {}
        }
        h.last_error = last_error;
    }

    fn prune(&self) {
        let c = &self.config;
        if let Err(e) = self
            .store
            .prune(c.keep_timings_per_pair, c.keep_load_per_server)
        {
            tracing::error!(error = %e, "pruning the history failed; it will be retried");
        }
    }

    fn run(mut self, rx: Receiver<Op>) {
        // Bound the history right away: the limits may have shrunk since the last run.
        self.prune();
        let mut last_prune = Instant::now();
        let mut dirty = false;
        // The last batch was cut short by its size: more may be queued already.
        let mut backlog = false;
        loop {
            // Idle, nothing to retry and nothing new to prune: sleep until the next operation.
            let wait = if !self.retry.is_empty() {
                Some(self.config.retry_every)
            } else if dirty {
                Some(self.config.prune_every.saturating_sub(last_prune.elapsed()))
            } else {
                None
            };
            let next = match wait {
                Some(w) => rx.recv_timeout(w),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let first = match next {
                Ok(op) => Some(op),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let mut batch: Vec<Op> = self.retry.drain(..).collect();
            let mut closed = false;
            let after_backlog = std::mem::take(&mut backlog);
            if let Some(first) = first {
                let flushing = matches!(first, Op::Flush(_));
                batch.push(first);
                // The batch's window is slept through, not waited out on the channel: a
                // receiver blocked on it is woken by every send (a futex wake and a context
                // switch, per call under load), a sleeping one by none. A flush that comes
                // first is answered at once, one that comes during the window at its end; a
                // backlog needs no window.
                if !flushing && !after_backlog {
                    std::thread::sleep(self.config.max_batch_wait);
                }
                loop {
                    if matches!(batch.last(), Some(Op::Flush(_))) {
                        break;
                    }
                    if batch.len() >= self.config.max_batch_ops.max(1) {
                        backlog = true;
                        break;
                    }
                    match rx.try_recv() {
                        Ok(op) => batch.push(op),
                        Err(mpsc::TryRecvError::Empty) => break,
                        Err(mpsc::TryRecvError::Disconnected) => {
                            closed = true;
                            break;
                        }
                    }
                }
            }
            dirty |= batch.iter().any(|op| !matches!(op, Op::Flush(_)));
            for ack in self.write(batch) {
                // The flusher may have given up waiting; nothing to do then.
                let _ = ack.send(());
            }
            if closed {
                break;
            }
            if dirty && last_prune.elapsed() >= self.config.prune_every {
                self.prune();
                dirty = false;
                last_prune = Instant::now();
            }
        }
        // Closing: one last try for what is still to retry.
        if !self.retry.is_empty() {
            let left: Vec<Op> = self.retry.drain(..).collect();
            self.write(left);
            if !self.retry.is_empty() {
                tracing::error!(
                    lost = self.retry.len(),
                    "the database is still failing at shutdown: these writes are lost"
                );
            }
        }
    }
}
