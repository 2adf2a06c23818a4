//! The background writer: the agent hands it operations and never waits for the disk.

use crate::error::StoreError;
use crate::store::{PointRow, Store};
use gridwise_proto::{CallReport, Registration, ServerId, ServiceDesc};
use std::sync::Arc;
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
    /// [`Store::add_load`]: server name, seconds since the Unix epoch, one-minute load average.
    Load(String, f64, f64),
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
            Op::Flush(_) => "flush",
        }
    }
}

/// How the [`Writer`] batches and prunes.
#[derive(Clone, Debug, PartialEq)]
pub struct WriterConfig {
    /// Most operations in one transaction.
    pub max_batch_ops: usize,
    /// Longest a batch stays open for more operations after its first one.
    pub max_batch_wait: Duration,
    /// How often the history is pruned (when something was written since the last time).
    pub prune_every: Duration,
    /// Timings kept per (server, service).
    pub keep_timings_per_pair: usize,
    /// Load samples kept per server.
    pub keep_load_per_server: usize,
    /// Operations that may wait for the disk; beyond this [`Writer::send`] drops them (with a
    /// warning) rather than block the caller or grow without bound.
    pub queue_capacity: usize,
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
        }
    }
}

/// Writes on its own thread: the caller never waits for the disk.
#[derive(Debug)]
pub struct Writer {
    tx: Option<SyncSender<Op>>,
    handle: Option<JoinHandle<()>>,
    dropped: Arc<AtomicU64>,
}

impl Writer {
    /// Starts the writer thread with the default configuration.
    pub fn spawn(store: Store) -> Writer {
        Writer::spawn_with(store, WriterConfig::default())
    }

    /// Starts the writer thread with `config`.
    pub fn spawn_with(store: Store, config: WriterConfig) -> Writer {
        let (tx, rx) = mpsc::sync_channel(config.queue_capacity.max(1));
        let spawned = std::thread::Builder::new()
            .name("gridwise-store".into())
            .spawn(move || run(store, rx, config));
        match spawned {
            Ok(handle) => Writer {
                tx: Some(tx),
                handle: Some(handle),
                dropped: Arc::new(AtomicU64::new(0)),
            },
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "cannot start the database writer thread; nothing will be saved"
                );
                Writer {
                    tx: None,
                    handle: None,
                    dropped: Arc::new(AtomicU64::new(0)),
                }
            }
        }
    }

    /// Queues a write; never blocks on I/O. When the queue is full (the disk stalls), the
    /// operation is dropped with a warning.
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

    /// Operations dropped so far because the queue was full or the thread had stopped.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits until everything sent so far is on disk (for shutdown and tests).
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

/// Applies one operation (a savepoint of its own inside the batch).
fn apply(store: &Store, op: &Op) -> Result<(), StoreError> {
    match op {
        Op::Service(d) => store.save_service(d),
        Op::Server(id, reg, at) => store.save_server(*id, reg, *at),
        Op::Seen(name, at) => store.touch_server(name, *at),
        Op::Points(rows) => store.upsert_points(rows),
        Op::Timings(server, at, reports) => store.add_timings(server, *at, reports),
        Op::Load(server, at, l) => store.add_load(server, *at, *l),
        Op::Flush(_) => Ok(()),
    }
}

/// Commits a batch in one transaction; a failing operation is rolled back alone and logged.
fn write_batch(store: &Store, batch: &[Op]) {
    let writes = batch
        .iter()
        .filter(|op| !matches!(op, Op::Flush(_)))
        .count();
    if writes == 0 {
        return;
    }
    // Without the outer transaction each operation still commits on its own.
    let in_tx = match store.begin_batch() {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, "writing operations one by one");
            false
        }
    };
    let mut failed = 0usize;
    for op in batch {
        if let Err(e) = apply(store, op) {
            failed += 1;
            // One line per failing batch kind is enough to diagnose; avoid floods.
            if failed <= 3 {
                tracing::error!(op = op.kind(), error = %e, "not saved to the database");
            }
        }
    }
    if failed > 3 {
        tracing::error!(failed, "more operations were not saved to the database");
    }
    if in_tx {
        if let Err(e) = store.commit_batch() {
            tracing::error!(error = %e, lost = writes, "a batch of writes was not saved");
        }
    }
}

fn prune(store: &Store, config: &WriterConfig) {
    if let Err(e) = store.prune(config.keep_timings_per_pair, config.keep_load_per_server) {
        tracing::error!(error = %e, "pruning the history failed; it will be retried");
    }
}

/// The writer thread.
fn run(store: Store, rx: Receiver<Op>, config: WriterConfig) {
    // Bound the history right away: the limits may have shrunk since the last run.
    prune(&store, &config);
    let mut last_prune = Instant::now();
    let mut dirty = false;
    loop {
        // Idle and nothing new to prune: sleep until the next operation.
        let next = if dirty {
            rx.recv_timeout(config.prune_every.saturating_sub(last_prune.elapsed()))
        } else {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        };
        let first = match next {
            Ok(op) => op,
            Err(RecvTimeoutError::Timeout) => {
                if dirty {
                    prune(&store, &config);
                    dirty = false;
                }
                last_prune = Instant::now();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut batch = vec![first];
        let deadline = Instant::now() + config.max_batch_wait;
        let mut closed = false;
        while batch.len() < config.max_batch_ops.max(1)
            && !matches!(batch.last(), Some(Op::Flush(_)))
        {
            let left = deadline.saturating_duration_since(Instant::now());
            // Take what is already queued even when the wait is over.
            let next = if left.is_zero() {
                rx.try_recv().map_err(|e| match e {
                    mpsc::TryRecvError::Empty => RecvTimeoutError::Timeout,
                    mpsc::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                })
            } else {
                rx.recv_timeout(left)
            };
            match next {
                Ok(op) => batch.push(op),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        write_batch(&store, &batch);
        dirty |= batch.iter().any(|op| !matches!(op, Op::Flush(_)));
        for op in batch {
            if let Op::Flush(ack) = op {
                // The flusher may have given up waiting; nothing to do then.
                let _ = ack.send(());
            }
        }
        if closed {
            break;
        }
        if dirty && last_prune.elapsed() >= config.prune_every {
            prune(&store, &config);
            dirty = false;
            last_prune = Instant::now();
        }
    }
}
