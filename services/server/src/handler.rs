//! The tarpc face of a server: check a call, wait for a slot, run the kernel, time it, report it.

use crate::bench_gate::BenchGate;
use crate::data::{DataStore, not_found};
use crate::peers::Peers;
use gridwise_kernels::{CancelFlag, Kernel, KernelCtx, KernelError};
use gridwise_proto::{
    CallError, CallErrorKind, CallId, CallReport, DataHandle, ExecuteReply, ExecuteRequest,
    LinkSample, LoadSample, ModelPoint, ModelProgress, Pong, ServerApi, ServerInfo, Timing, Value,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tarpc::context::Context;
use tokio::sync::{Semaphore, mpsc};

/// Shared server state.
#[derive(Clone)]
pub struct ServerHandler {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    kernels: HashMap<String, Arc<dyn Kernel>>,
    slots: u32,
    free_slots: Semaphore,
    calls: Mutex<HashMap<CallId, CancelFlag>>,
    running: AtomicU32,
    queued: AtomicU32,
    to_agent: mpsc::UnboundedSender<ToAgent>,
    gate: BenchGate,
    progress: Mutex<Vec<ModelProgress>>,
    /// The address clients and other servers reach this server at (names it as a holder).
    addr: String,
    data: DataStore,
    peers: Peers,
}

/// How this server takes part in remote data: its address and how much it may keep.
pub struct RemoteData {
    /// Address other servers and clients reach it at.
    pub addr: String,
    /// Most payload bytes kept at once.
    pub max_bytes: u64,
    /// How long a kept value may go unused before it is freed (zero: never).
    pub idle_ttl: Duration,
    /// Connection settings for pulling from other servers.
    pub wire: gridwise_proto::wire::WireConfig,
}

/// What a server tells the agent besides heartbeats.
#[derive(Debug)]
pub enum ToAgent {
    /// A finished call.
    Report(CallReport),
    /// A point a model build measured (or loaded from the model directory).
    Point(ModelPoint),
}

/// How long after its last benchmark the host load still carries the benchmark (the one-minute
/// load average remembers about that long).
const BENCH_LOAD_MEMORY: Duration = Duration::from_secs(60);

impl ServerHandler {
    /// A handler for these kernels; finished calls and model points go to `to_agent`.
    pub fn new(
        name: String,
        kernels: HashMap<String, Arc<dyn Kernel>>,
        slots: u32,
        to_agent: mpsc::UnboundedSender<ToAgent>,
        remote: RemoteData,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                data: DataStore::new(remote.max_bytes, remote.idle_ttl),
                peers: Peers::new(remote.wire, name.clone()),
                addr: remote.addr,
                name,
                kernels,
                slots,
                free_slots: Semaphore::new(slots as usize),
                calls: Mutex::new(HashMap::new()),
                running: AtomicU32::new(0),
                queued: AtomicU32::new(0),
                to_agent,
                gate: BenchGate::default(),
                progress: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Calls running and waiting now, with the host load.
    pub fn load(&self) -> LoadSample {
        LoadSample {
            running: self.inner.running.load(Ordering::Relaxed),
            queued: self.inner.queued.load(Ordering::Relaxed),
            loadavg_1m: crate::host::loadavg_1m(),
            benchmarking: self.inner.gate.recently_active(BENCH_LOAD_MEMORY),
        }
    }

    /// Real calls running or waiting for a slot.
    pub fn busy_calls(&self) -> u32 {
        self.inner.running.load(Ordering::Relaxed) + self.inner.queued.load(Ordering::Relaxed)
    }

    /// The gate model benchmarks pass through.
    pub fn gate(&self) -> &BenchGate {
        &self.inner.gate
    }

    /// The kernel offering `service`.
    pub fn kernel(&self, service: &str) -> Option<Arc<dyn Kernel>> {
        self.inner.kernels.get(service).cloned()
    }

    /// Sends a model point on to the agent.
    pub fn send_point(&self, p: ModelPoint) {
        let _ = self.inner.to_agent.send(ToAgent::Point(p));
    }

    /// Records a model build's progress (replacing that service's previous record).
    pub fn set_progress(&self, p: ModelProgress) {
        let mut all = self
            .inner
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match all.iter_mut().find(|q| q.service == p.service) {
            Some(q) => *q = p,
            None => all.push(p),
        }
    }

    /// Every model build's progress.
    pub fn progress(&self) -> Vec<ModelProgress> {
        self.inner
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<CallId, CancelFlag>> {
        self.inner.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Measures the links to other servers (their addresses; this server's own is skipped).
    pub async fn probe_links(&self, peers: &[String]) -> Vec<LinkSample> {
        let mut out = Vec::new();
        for addr in peers.iter().filter(|a| **a != self.inner.addr) {
            match self.inner.peers.probe(addr).await {
                Ok(s) => out.push(s),
                Err(e) => tracing::debug!(%addr, "link probe failed: {e}"),
            }
        }
        out
    }

    /// Replaces every remote input by its value (from here or from its holder); the time it
    /// took counts as input transfer.
    async fn pull_remote_inputs(&self, inputs: &mut [Value]) -> Result<f64, CallError> {
        let started = Instant::now();
        for v in inputs.iter_mut() {
            let Value::Ref(r) = v else { continue };
            let value = if r.holder == self.inner.addr {
                self.inner
                    .data
                    .get(r.handle)
                    .ok_or_else(|| not_found(r.handle, &r.holder))?
            } else {
                self.inner.peers.fetch(r).await?
            };
            *v = value;
        }
        Ok(started.elapsed().as_secs_f64())
    }

    /// Frees kept values nobody has read for longer than `idle`; returns how many and their
    /// bytes.
    pub fn expire_idle_data(&self, idle: Duration) -> (u32, u64) {
        self.inner.data.expire_idle(Instant::now(), idle)
    }

    /// Keeps the outputs at positions `keep` here, returning references in their place.
    fn keep(&self, mut outputs: Vec<Value>, keep: &[u32]) -> Result<Vec<Value>, CallError> {
        for &k in keep {
            let n = outputs.len();
            let slot = outputs.get_mut(k as usize).ok_or_else(|| {
                CallError::new(
                    CallErrorKind::BadArguments,
                    format!("cannot keep output {k}: the call has {n} output(s)"),
                )
            })?;
            let v = std::mem::replace(slot, Value::Int(0));
            *slot = Value::Ref(self.inner.data.put(v, &self.inner.addr)?);
        }
        Ok(outputs)
    }

    /// Finds the kernel and checks the inputs against its description.
    fn admit(&self, req: &ExecuteRequest) -> Result<Arc<dyn Kernel>, CallError> {
        let kernel = self
            .inner
            .kernels
            .get(&req.service)
            .cloned()
            .ok_or_else(|| {
                CallError::new(
                    CallErrorKind::UnknownService,
                    format!(
                        "server {} does not offer `{}`",
                        self.inner.name, req.service
                    ),
                )
            })?;
        kernel
            .desc()
            .check_inputs(&req.inputs)
            .map_err(|e| CallError::new(CallErrorKind::BadArguments, e.to_string()))?;
        Ok(kernel)
    }

    /// Runs an admitted call in the slot it holds: (outputs, queue wait s, kernel s).
    async fn run_call(
        &self,
        kernel: Arc<dyn Kernel>,
        req: ExecuteRequest,
        arrived: Instant,
        permit: Result<tokio::sync::SemaphorePermit<'_>, tokio::sync::AcquireError>,
        cancel: CancelFlag,
    ) -> Result<(Vec<Value>, f64, f64), CallError> {
        let _permit = permit.map_err(|_| {
            CallError::new(CallErrorKind::Unavailable, "the server is shutting down")
        })?;
        let queue_wait = arrived.elapsed().as_secs_f64();
        if cancel.is_cancelled() {
            return Err(KernelError::Cancelled.into_call_error());
        }

        self.inner.running.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let ctx = KernelCtx { cancel };
        let inputs = req.inputs;
        let result = if kernel.is_instant() {
            kernel.run(&inputs, &ctx).map(|out| (out, inputs))
        } else {
            let k = kernel.clone();
            match tokio::task::spawn_blocking(move || k.run(&inputs, &ctx).map(|out| (out, inputs)))
                .await
            {
                Ok(r) => r,
                Err(e) => Err(KernelError::Internal(format!("the kernel panicked: {e}"))),
            }
        };
        let kernel_s = started.elapsed().as_secs_f64();
        self.inner.running.fetch_sub(1, Ordering::Relaxed);

        let (outputs, inputs) = result.map_err(KernelError::into_call_error)?;
        kernel
            .desc()
            .check_outputs(&inputs, &outputs)
            .map_err(|e| {
                CallError::new(
                    CallErrorKind::Internal,
                    format!(
                        "the `{}` kernel returned malformed outputs: {e}",
                        req.service
                    ),
                )
            })?;
        Ok((outputs, queue_wait, kernel_s))
    }
}

/// Removes a call from the cancel table and stops its kernel if it is still going.
struct CallGuard {
    handler: ServerHandler,
    call_id: CallId,
    cancel: CancelFlag,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.handler.calls().remove(&self.call_id);
        // Harmless after a normal finish; stops a kernel whose client went away.
        self.cancel.cancel();
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl ServerApi for ServerHandler {
    async fn hello(self, _: Context) -> ServerInfo {
        let mut services: Vec<_> = self
            .inner
            .kernels
            .values()
            .map(|k| k.desc().clone())
            .collect();
        services.sort_by(|a, b| a.name.cmp(&b.name));
        ServerInfo {
            name: self.inner.name.clone(),
            services,
            slots: self.inner.slots,
            load: self.load(),
        }
    }

    async fn execute(self, _: Context, mut req: ExecuteRequest) -> Result<ExecuteReply, CallError> {
        let arrived = Instant::now();
        // Exact on one host; across hosts it carries the clocks' offset (documented in Timing).
        let mut input_transfer_s = unix_ns().saturating_sub(req.sent_at_unix_ns) as f64 * 1e-9;
        let ticket = req.ticket;
        let service = req.service.clone();
        let keep = std::mem::take(&mut req.keep_outputs);
        let mut sizes = Vec::new();
        // Real calls come first: a model benchmark running now stops and is re-run later.
        self.inner.gate.yield_to_call();
        // Registered before queueing so a cancel reaches the call wherever it is; the guard
        // also cancels the kernel if the client goes away (tarpc drops this future).
        let cancel = CancelFlag::new();
        let _guard = CallGuard {
            handler: self.clone(),
            call_id: req.call_id,
            cancel: cancel.clone(),
        };
        self.calls().insert(req.call_id, cancel.clone());
        // The call takes its place in the slot queue on arrival, while its remote inputs are
        // pulled (checks and kernels only ever see values): calls run in the order they came,
        // not in the order their pulls happen to finish, which is what a graph's plan assumes.
        self.inner.queued.fetch_add(1, Ordering::Relaxed);
        let (permit, pulled) = tokio::join!(
            self.inner.free_slots.acquire(),
            self.pull_remote_inputs(&mut req.inputs)
        );
        self.inner.queued.fetch_sub(1, Ordering::Relaxed);
        input_transfer_s += pulled.as_ref().copied().unwrap_or(0.0);
        let result = match pulled.and_then(|_| self.admit(&req)) {
            Ok(kernel) => {
                sizes = kernel.desc().sizes(&req.inputs);
                self.run_call(kernel, req, arrived, permit, cancel).await
            }
            Err(e) => Err(e),
        };
        let result = result.and_then(|(outputs, q, k)| Ok((self.keep(outputs, &keep)?, q, k)));
        let (ok, queue_wait_s, kernel_s) = match &result {
            Ok((_, q, k)) => (true, *q, *k),
            Err(_) => (false, 0.0, 0.0),
        };
        let timing = Timing {
            queue_wait_s,
            input_transfer_s,
            kernel_s,
            server_s: arrived.elapsed().as_secs_f64(),
        };
        // The agent needs every outcome (it clears the assignment either way); a closed channel
        // only means the server is shutting down.
        let _ = self.inner.to_agent.send(ToAgent::Report(CallReport {
            ticket,
            service,
            sizes,
            timing,
            ok,
        }));
        result.map(|(outputs, _, _)| ExecuteReply {
            outputs,
            timing,
            server: self.inner.name.clone(),
        })
    }

    async fn cancel(self, _: Context, call: CallId) -> bool {
        match self.calls().get(&call) {
            Some(flag) => {
                flag.cancel();
                tracing::info!(%call, "call cancelled by the client");
                true
            }
            None => false,
        }
    }

    async fn fetch(self, _: Context, handle: DataHandle) -> Result<Value, CallError> {
        self.inner
            .data
            .get(handle)
            .ok_or_else(|| not_found(handle, &self.inner.addr))
    }

    async fn free(self, _: Context, handles: Vec<DataHandle>) -> u32 {
        self.inner.data.free(&handles)
    }

    async fn renew(self, _: Context, handles: Vec<DataHandle>) -> u32 {
        self.inner.data.renew(&handles)
    }

    async fn sink(self, _: Context, data: serde_bytes::ByteBuf) -> u64 {
        data.len() as u64
    }

    async fn ping(self, _: Context) -> Pong {
        let (values, bytes) = self.inner.data.usage();
        Pong {
            name: self.inner.name.clone(),
            load: self.load(),
            held_values: values as u64,
            held_bytes: bytes,
        }
    }
}
