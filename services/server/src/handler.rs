//! The tarpc face of a server: check a call, wait for a slot and for memory, run the kernel,
//! time it, report it.
//!
//! Every connection's handler knows its [`Peer`]: clients run calls and own what they keep;
//! servers (peers, and the agent checking this server) may only pull values for a call of
//! their owner, ping and probe. A call is measured against the server's limits before its
//! kernel runs: its inputs and outputs (twice: working copies, and the reply serialised) must
//! fit the memory budget and its returned outputs the frame limit, or it is refused with a
//! [`CallErrorKind::ResourceLimit`] that says by how much, and nothing is allocated for it.

use crate::bench_gate::BenchGate;
use crate::data::{DataStore, not_found};
use crate::peers::Peers;
use crate::sensors::Sensors;
use gridwise_kernels::{CancelFlag, Kernel, KernelCtx, KernelError};
use gridwise_metrics::ServerMetrics;
use gridwise_proto::clock::unix_ns;
use gridwise_proto::value::BULK_MIN_BYTES;
use gridwise_proto::wire::{Charge, MemoryBudget, Peer, Role};
use gridwise_proto::{
    CallError, CallErrorKind, CallId, CallReport, DataHandle, ExecuteReply, ExecuteRequest,
    LinkSample, LoadSample, ModelPoint, ModelProgress, Pong, RemoteRef, ServerApi, ServerInfo,
    Timing, Value,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;
use tarpc::context::Context;
use tokio::sync::{Semaphore, mpsc};

/// The server as one connection sees it: the shared state and who is asking.
#[derive(Clone)]
pub struct ServerHandler {
    inner: Arc<Inner>,
    /// Shared: tarpc clones the handler for every request.
    peer: Arc<Peer>,
}

struct Inner {
    name: String,
    /// Random per process: the agent checks registrations against it.
    instance: String,
    kernels: HashMap<String, Arc<dyn Kernel>>,
    slots: u32,
    free_slots: Semaphore,
    /// Calls here now, with the client that sent each.
    calls: Mutex<HashMap<CallId, (CancelFlag, Arc<Peer>)>>,
    running: AtomicU32,
    queued: AtomicU32,
    executed: AtomicU64,
    limits: CallLimits,
    /// Input bytes of calls waiting for a slot or for memory: held, but not yet charged.
    waiting_bytes: AtomicU64,
    to_agent: mpsc::UnboundedSender<ToAgent>,
    gate: BenchGate,
    sensors: Arc<Sensors>,
    progress: Mutex<Vec<ModelProgress>>,
    metrics: std::sync::OnceLock<Arc<ServerMetrics>>,
    /// The address clients and other servers reach this server at (names it as a holder).
    addr: String,
    data: DataStore,
    peers: Peers,
}

/// What one call may take here.
#[derive(Clone, Debug)]
pub struct CallLimits {
    /// Memory calls may take at once (frames still arriving are charged to a budget of their
    /// own).
    pub budget: Arc<MemoryBudget>,
    /// The largest frame this server sends, bytes.
    pub max_frame_bytes: u64,
}

impl CallLimits {
    /// Limits no test call reaches.
    pub fn unlimited() -> Self {
        Self {
            budget: MemoryBudget::new(u64::MAX),
            max_frame_bytes: u32::MAX as u64,
        }
    }
}

/// What a reply adds to its outputs' payload on the wire: the frame, the response envelope,
/// the timing and the server's name, with room to spare.
const REPLY_OVERHEAD: u64 = 64 * 1024;

/// Calls whose footprint is below this are not charged to the memory budget.
const UNCHARGED_BELOW: u64 = 256 * 1024;

/// How this server takes part in remote data: its address and how much it may keep.
pub struct RemoteData {
    /// Address other servers and clients reach it at.
    pub addr: String,
    /// Most payload bytes kept at once.
    pub max_bytes: u64,
    /// How long a kept value may go unused before it is freed (zero: never).
    pub idle_ttl: Duration,
    /// Connection settings for pulling from other servers.
    pub wire: gridwise_proto::wire::DialConfig,
}

/// What a server tells the agent besides heartbeats.
#[derive(Debug)]
pub enum ToAgent {
    /// A finished call, failed ones included (the agent clears their assignments too).
    Report(CallReport),
    /// A point a model build measured (or loaded from the model directory).
    Point(ModelPoint),
}

/// How long after its last benchmark the host load still carries the benchmark (the one-minute
/// load average remembers about that long).
const BENCH_LOAD_MEMORY: Duration = Duration::from_secs(60);

impl ServerHandler {
    /// A handler for these kernels; finished calls and model points go to `to_agent`. It acts
    /// for the server itself; connections get theirs from [`ServerHandler::for_peer`].
    pub fn new(
        name: String,
        kernels: HashMap<String, Arc<dyn Kernel>>,
        slots: u32,
        to_agent: mpsc::UnboundedSender<ToAgent>,
        remote: RemoteData,
        limits: CallLimits,
        sensors: Arc<Sensors>,
    ) -> Self {
        let peer = Arc::new(Peer::local(Role::Server, &name));
        Self {
            inner: Arc::new(Inner {
                data: DataStore::new(remote.max_bytes, remote.idle_ttl),
                peers: Peers::new(remote.wire, name.clone()),
                addr: remote.addr,
                name,
                instance: uuid::Uuid::new_v4().simple().to_string(),
                kernels,
                slots,
                free_slots: Semaphore::new(slots as usize),
                calls: Mutex::new(HashMap::new()),
                running: AtomicU32::new(0),
                queued: AtomicU32::new(0),
                executed: AtomicU64::new(0),
                limits,
                waiting_bytes: AtomicU64::new(0),
                to_agent,
                gate: BenchGate::default(),
                sensors,
                progress: Mutex::new(Vec::new()),
                metrics: std::sync::OnceLock::new(),
            }),
            peer,
        }
    }

    /// Records every call into `m` from now on (set once).
    pub fn set_metrics(&self, m: Arc<ServerMetrics>) {
        let _ = self.inner.metrics.set(m);
    }

    /// Calls running a kernel and calls waiting for a slot, now.
    pub fn occupancy(&self) -> (usize, usize) {
        (
            self.inner.running.load(Ordering::Relaxed) as usize,
            self.inner.queued.load(Ordering::Relaxed) as usize,
        )
    }

    /// The handler of a connection from `peer`.
    pub fn for_peer(&self, peer: &Peer) -> Self {
        Self {
            inner: self.inner.clone(),
            peer: Arc::new(peer.clone()),
        }
    }

    /// Random per process: what the agent checks a registration against.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// What calls take memory from; frames still arriving have a budget of their own.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.inner.limits.budget
    }

    /// Calls running and waiting now, with the host load.
    pub fn load(&self) -> LoadSample {
        LoadSample {
            running: self.inner.running.load(Ordering::Relaxed),
            queued: self.inner.queued.load(Ordering::Relaxed),
            loadavg_1m: crate::host::loadavg_1m(),
            benchmarking: self.inner.gate.recently_active(BENCH_LOAD_MEMORY),
            cpu_available: self.inner.sensors.availability_now(),
            free_memory_bytes: self.inner.sensors.free_memory_bytes(),
        }
    }

    /// What the server measures of its host.
    pub fn sensors(&self) -> &Sensors {
        &self.inner.sensors
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

    /// The latest progress of each service's build, as every heartbeat carries it.
    pub fn progress(&self) -> Vec<ModelProgress> {
        self.inner
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<CallId, (CancelFlag, Arc<Peer>)>> {
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

    /// Replaces every remote input by its value (from here or from its holder), as the
    /// calling client's; the time it took counts as input transfer. Inputs held elsewhere are
    /// pulled at once, not one after the other: a call of a task graph often has two or three
    /// on different servers, and each pull is a round trip (a tiled Cholesky's calls waited
    /// 0.5 ms for theirs, in turn).
    async fn pull_remote_inputs(&self, inputs: &mut [Value]) -> Result<f64, CallError> {
        let started = Instant::now();
        let owner = &self.peer.principal;
        let pulls = inputs
            .iter_mut()
            .filter(|v| matches!(v, Value::Ref(_)))
            .map(|v| async move {
                let Value::Ref(r) = &*v else { return Ok(()) };
                let value = if r.holder == self.inner.addr {
                    self.inner
                        .data
                        .get(r.handle, owner)
                        .ok_or_else(|| not_found(r.handle, &r.holder))?
                } else {
                    self.inner.peers.pull(r, owner).await?
                };
                *v = value;
                Ok::<_, CallError>(())
            });
        futures::future::try_join_all(pulls).await?;
        Ok(started.elapsed().as_secs_f64())
    }

    /// Measures a call against the memory budget and the frame limit before anything is
    /// pulled or allocated for it (remote inputs count at their declared size): its footprint,
    /// or the refusal.
    fn check_limits(
        &self,
        kernel: &dyn Kernel,
        req: &ExecuteRequest,
        keep: &[u32],
    ) -> Result<u64, CallError> {
        let desc = kernel.desc();
        let held: u64 = req.inputs.iter().map(Value::payload_bytes).sum();
        let outputs = desc.output_bytes(&req.inputs);
        let out: u64 = outputs.iter().sum();
        let footprint = held.saturating_add(out).saturating_mul(2);
        let budget = self.inner.limits.budget.total_bytes();
        if footprint > budget {
            return Err(CallError::new(
                CallErrorKind::ResourceLimit,
                format!(
                    "`{}` needs {:.1} MB here ({:.1} MB of inputs and {:.1} MB of outputs, twice), more than server {}'s memory budget of {:.1} MB (memory_budget_bytes); use smaller sizes or a server with more memory",
                    req.service,
                    mb(footprint),
                    mb(held),
                    mb(out),
                    self.inner.name,
                    mb(budget)
                ),
            ));
        }
        let returned: u64 = outputs
            .iter()
            .enumerate()
            .filter(|(i, b)| returned_inline(req, keep, *i, **b))
            .map(|(_, b)| *b)
            .sum();
        self.check_reply(&req.service, returned, req.reply_limit_bytes)?;
        Ok(footprint)
    }

    /// Takes a call's memory, waiting (in arrival order) for running calls to give some back.
    /// Small calls are not charged: at most `slots` of them run at once, and charging costs a
    /// lock per call.
    async fn take_memory(&self, footprint: u64) -> Result<Option<Charge>, CallError> {
        if footprint < UNCHARGED_BELOW {
            return Ok(None);
        }
        let budget = &self.inner.limits.budget;
        if let Some(c) = budget.try_charge(footprint) {
            return Ok(Some(c));
        }
        budget
            .charge(footprint)
            .await
            .map(Some)
            .map_err(|e| CallError::new(CallErrorKind::ResourceLimit, e.to_string()))
    }

    /// Counts a call's inputs as held while it waits for a slot and for memory; refuses it when
    /// waiting calls already hold a quarter of the budget (another server may take it).
    fn hold_while_waiting(&self, bytes: u64) -> Result<WaitingBytes, CallError> {
        let cap = self.inner.limits.budget.total_bytes() / 4;
        let before = self.inner.waiting_bytes.fetch_add(bytes, Ordering::Relaxed);
        let guard = WaitingBytes {
            handler: self.inner.clone(),
            bytes,
        };
        if bytes > 0 && before.saturating_add(bytes) > cap {
            return Err(CallError::new(
                CallErrorKind::Unavailable,
                format!(
                    "server {} is saturated: calls waiting here already hold {:.1} MB of inputs; another server may take this call",
                    self.inner.name,
                    mb(before)
                ),
            ));
        }
        Ok(guard)
    }

    /// Refuses outputs that would not fit in one reply frame: this server's, or the client's
    /// (`reply_limit`, 0 for none).
    fn check_reply(&self, service: &str, returned: u64, reply_limit: u64) -> Result<(), CallError> {
        let (limit, whose) = self.reply_limit(reply_limit);
        if returned.saturating_add(REPLY_OVERHEAD) > limit {
            return Err(CallError::new(
                CallErrorKind::ResourceLimit,
                format!(
                    "`{service}` would return {:.1} MB of outputs, more than one reply may carry ({:.1} MB, {whose}); keep the large outputs on the server (keep_outputs / call_keep) and fetch them in parts, or use smaller sizes",
                    returned as f64 / 1e6,
                    limit as f64 / 1e6
                ),
            ));
        }
        Ok(())
    }

    /// The largest reply this call may have (the client's limit or this server's, the lower)
    /// and whose limit that is.
    fn reply_limit(&self, client_limit: u64) -> (u64, &'static str) {
        let own = self.inner.limits.max_frame_bytes;
        if client_limit > 0 && client_limit < own {
            (client_limit, "the client's max_frame_bytes")
        } else {
            (own, "this server's max_frame_bytes")
        }
    }

    /// Requests only a client may make.
    fn client_only(&self, what: &str) -> Result<(), CallError> {
        if self.peer.role == Role::Client {
            Ok(())
        } else {
            Err(CallError::new(
                CallErrorKind::BadArguments,
                format!("only clients may {what}: this connection presented the server credential"),
            ))
        }
    }

    /// Stages `value` here for one read by `peer` (see [`DataStore::stage`]).
    pub fn stage_for(&self, peer: &Peer, value: Value, charge: Option<Charge>) -> RemoteRef {
        self.inner
            .data
            .stage(value, &self.inner.addr, &peer.principal, charge)
    }

    /// A value kept (or staged) here for `owner`, shared; a staged one is gone once read.
    pub fn read_kept(&self, handle: DataHandle, owner: &str) -> Option<Arc<Value>> {
        self.inner.data.read(handle, owner)
    }

    /// The address this server names itself by as a holder.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// Frees kept values nobody has read for longer than `idle`; returns how many and their
    /// bytes.
    pub fn expire_idle_data(&self, idle: Duration) -> (u32, u64) {
        self.inner.data.expire_idle(Instant::now(), idle)
    }

    /// Stages the large outputs the client collects on a bulk connection, returning
    /// references in their place. Not charged: the call's own memory held them until now, and
    /// its client collects them at once (or the idle limit frees them).
    fn stage_outputs(&self, mut outputs: Vec<Value>, req_keep: &[u32]) -> Vec<Value> {
        for (i, slot) in outputs.iter_mut().enumerate() {
            if req_keep.contains(&(i as u32))
                || matches!(slot, Value::Ref(_))
                || !gridwise_proto::wire::bulk::goes_bulk(slot)
            {
                continue;
            }
            let v = std::mem::replace(slot, Value::Int(0));
            *slot = Value::Ref(self.stage_for(&self.peer, v, None));
        }
        outputs
    }

    /// Keeps the outputs at positions `keep` here, returning references in their place, and
    /// copies of those smaller than `copy_below` bytes, the first kept first, `copy_room`
    /// bytes of them at most (the reply could not carry more, whatever the client asked).
    #[allow(clippy::type_complexity)]
    fn keep(
        &self,
        mut outputs: Vec<Value>,
        keep: &[u32],
        copy_below: u64,
        mut copy_room: u64,
    ) -> Result<(Vec<Value>, Vec<(u32, Value)>), CallError> {
        let mut copies = Vec::new();
        for &k in keep {
            let n = outputs.len();
            let slot = outputs.get_mut(k as usize).ok_or_else(|| {
                CallError::new(
                    CallErrorKind::BadArguments,
                    format!("cannot keep output {k}: the call has {n} output(s)"),
                )
            })?;
            let v = std::mem::replace(slot, Value::Int(0));
            let bytes = v.payload_bytes();
            if bytes < copy_below && bytes <= copy_room {
                copy_room -= bytes;
                copies.push((k, v.clone()));
            }
            let owner = &self.peer.principal;
            *slot = Value::Ref(self.inner.data.put(v, &self.inner.addr, owner)?);
        }
        Ok((outputs, copies))
    }

    /// The kernel offering `service`, or the error naming what this server offers.
    fn kernel_for(&self, service: &str) -> Result<Arc<dyn Kernel>, CallError> {
        self.inner.kernels.get(service).cloned().ok_or_else(|| {
            let mut offered: Vec<&str> = self.inner.kernels.keys().map(String::as_str).collect();
            offered.sort_unstable();
            CallError::new(
                CallErrorKind::UnknownService,
                format!(
                    "server {} does not offer `{service}` (it offers: {})",
                    self.inner.name,
                    offered.join(", ")
                ),
            )
        })
    }

    /// Runs an admitted call in the slot it holds, with the memory it was given: (outputs,
    /// queue wait s, kernel s, CPU availability, bytes of outputs the reply will carry).
    async fn run_call(
        &self,
        kernel: Arc<dyn Kernel>,
        mut req: ExecuteRequest,
        arrived: Instant,
        cancel: CancelFlag,
        keep: &[u32],
    ) -> Result<(Vec<Value>, f64, f64, Option<f64>, u64), CallError> {
        let queue_wait = arrived.elapsed().as_secs_f64();
        if cancel.is_cancelled() {
            return Err(KernelError::Cancelled.into_call_error());
        }

        // Counted down however the call ends: a client that goes away (or cancels) drops
        // this future while its kernel is still on a blocking thread.
        let running = Running::start(&self.inner);
        let ctx = KernelCtx { cancel };
        let inputs = std::mem::take(&mut req.inputs);
        // Timed where it runs: the hand-offs to and from the blocking thread (tens of µs each
        // on a host whose idle CPUs sleep) are the server's overhead, not the kernel's speed,
        // which is what the models learn from this time, as they learn from benchmarks.
        let timed = |k: &dyn Kernel, inputs: Vec<Value>, ctx: &KernelCtx| {
            let started = Instant::now();
            let r = k.run(&inputs, ctx).map(|out| (out, inputs));
            (r, started, Instant::now())
        };
        let (result, started, ended) = if kernel.is_instant() {
            timed(kernel.as_ref(), inputs, &ctx)
        } else {
            let k = kernel.clone();
            let handed = Instant::now();
            match tokio::task::spawn_blocking(move || timed(k.as_ref(), inputs, &ctx)).await {
                Ok(r) => r,
                Err(e) => (
                    Err(KernelError::Internal(format!("the kernel panicked: {e}"))),
                    handed,
                    Instant::now(),
                ),
            }
        };
        let kernel_s = ended.duration_since(started).as_secs_f64();
        let available = self.inner.sensors.availability_over(started, ended);
        drop(running);

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
        // Strings and bytes have no size until produced: judge the reply again now.
        let returned: u64 = outputs
            .iter()
            .enumerate()
            .filter(|(i, v)| returned_inline(&req, keep, *i, v.payload_bytes()))
            .map(|(_, v)| v.payload_bytes())
            .sum();
        self.check_reply(&req.service, returned, req.reply_limit_bytes)?;
        Ok((outputs, queue_wait, kernel_s, available, returned))
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// Whether output `i` (of `bytes`) goes back inside the reply: not kept here, and not staged
/// for the client to collect on a bulk connection.
fn returned_inline(req: &ExecuteRequest, keep: &[u32], i: usize, bytes: u64) -> bool {
    let kept = keep.contains(&(i as u32));
    let staged = req.bulk_outputs && bytes >= BULK_MIN_BYTES;
    !kept && !staged
}

/// A call running its kernel: counted in `running` while it lives, then in `executed`.
struct Running<'a>(&'a Inner);

impl<'a> Running<'a> {
    fn start(inner: &'a Inner) -> Self {
        inner.running.fetch_add(1, Ordering::Relaxed);
        Running(inner)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
        self.0.executed.fetch_add(1, Ordering::Relaxed);
    }
}

/// Input bytes a waiting call holds, counted until it has its memory (or gives up).
struct WaitingBytes {
    handler: Arc<Inner>,
    bytes: u64,
}

impl Drop for WaitingBytes {
    fn drop(&mut self) {
        self.handler
            .waiting_bytes
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Removes a call from the cancel table and stops its kernel if it is still going.
struct CallGuard {
    handler: ServerHandler,
    call_id: CallId,
    cancel: CancelFlag,
    /// The report of a call that never got to report (its client went away or cancelled it):
    /// the agent still clears its assignment.
    unreported: Option<CallReport>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.handler.calls().remove(&self.call_id);
        // Harmless after a normal finish; stops a kernel whose client went away.
        self.cancel.cancel();
        if let Some(r) = self.unreported.take() {
            let _ = self.handler.inner.to_agent.send(ToAgent::Report(r));
        }
    }
}

impl ServerApi for ServerHandler {
    async fn hello(self, _: Context) -> ServerInfo {
        let instance = self.inner.instance.clone();
        let mut services: Vec<_> = self
            .inner
            .kernels
            .values()
            .map(|k| k.desc().clone())
            .collect();
        services.sort_by(|a, b| a.name.cmp(&b.name));
        ServerInfo {
            name: self.inner.name.clone(),
            instance,
            services,
            slots: self.inner.slots,
            load: self.load(),
        }
    }

    async fn execute(self, _: Context, mut req: ExecuteRequest) -> Result<ExecuteReply, CallError> {
        self.client_only("run calls")?;
        let arrived = Instant::now();
        // Exact on one host; across hosts it carries the clocks' offset (documented in Timing).
        let mut input_transfer_s = unix_ns().saturating_sub(req.sent_at_unix_ns) as f64 * 1e-9;
        let ticket = req.ticket;
        let service = req.service.clone();
        let keep = std::mem::take(&mut req.keep_outputs);
        let mut sizes = Vec::new();
        let mut client_in_bytes = None;
        // Real calls come first: a model benchmark running now stops and is re-run later.
        self.inner.gate.yield_to_call();
        // Registered before queueing so a cancel reaches the call wherever it is; the guard
        // also cancels the kernel if the client goes away (tarpc drops this future).
        let cancel = CancelFlag::new();
        let mut guard = CallGuard {
            handler: self.clone(),
            call_id: req.call_id,
            cancel: cancel.clone(),
            unreported: Some(CallReport {
                cpu_available: None,
                client_in_bytes: None,
                ticket,
                service: service.clone(),
                sizes: Vec::new(),
                timing: Timing::default(),
                ok: false,
            }),
        };
        self.calls()
            .insert(req.call_id, (cancel.clone(), self.peer.clone()));
        let result = async {
            let kernel = self.kernel_for(&req.service)?;
            let footprint = self.check_limits(kernel.as_ref(), &req, &keep)?;
            let held: u64 = req.inputs.iter().map(Value::payload_bytes).sum();
            let waiting = self.hold_while_waiting(held)?;
            // The call takes its place in the slot queue on arrival, while its remote inputs
            // are pulled (checks and kernels only ever see values): calls run in the order
            // they came, not in the order their pulls happen to finish, which is what a
            // graph's plan assumes.
            self.inner.queued.fetch_add(1, Ordering::Relaxed);
            let remote = req.inputs.iter().any(|v| matches!(v, Value::Ref(_)));
            // A pull's time joins the transfer's: only calls whose inputs all came from the
            // client (in the request, or staged here just before it) time the client's link.
            let from_client = req.inputs.iter().all(|v| match v {
                Value::Ref(r) => r.holder == self.inner.addr && self.inner.data.is_staged(r.handle),
                _ => true,
            });
            client_in_bytes = from_client.then_some(held);
            // Pulling is rare and its future large: boxed, it does not weigh on every call.
            let pull = async {
                if remote {
                    Box::pin(self.pull_remote_inputs(&mut req.inputs)).await
                } else {
                    Ok(0.0)
                }
            };
            let (permit, pulled) = tokio::join!(self.inner.free_slots.acquire(), pull);
            self.inner.queued.fetch_sub(1, Ordering::Relaxed);
            input_transfer_s += pulled.as_ref().copied().unwrap_or(0.0);
            pulled?;
            let _permit = permit.map_err(|_| {
                CallError::new(CallErrorKind::Unavailable, "the server is shutting down")
            })?;
            kernel
                .desc()
                .check_inputs(&req.inputs)
                .map_err(|e| CallError::new(CallErrorKind::BadArguments, e.to_string()))?;
            sizes = kernel.desc().sizes(&req.inputs);
            // Pulled values are judged at their real size (a reference only declares one).
            let footprint = if remote {
                self.check_limits(kernel.as_ref(), &req, &keep)?
            } else {
                footprint
            };
            let _memory = self.take_memory(footprint).await?;
            drop(waiting);
            let bulk_outputs = req.bulk_outputs;
            let (copy_below, client_limit) = (req.copy_kept_below_bytes, req.reply_limit_bytes);
            let (outputs, q, k, a, returned) =
                self.run_call(kernel, req, arrived, cancel, &keep).await?;
            // Copies ride in the reply beside what it returns; those that would not fit are
            // left out, which costs their consumers a pull.
            let room = self
                .reply_limit(client_limit)
                .0
                .saturating_sub(REPLY_OVERHEAD)
                .saturating_sub(returned);
            let (outputs, copies) = self.keep(outputs, &keep, copy_below, room)?;
            let outputs = if bulk_outputs {
                self.stage_outputs(outputs, &keep)
            } else {
                outputs
            };
            Ok((outputs, copies, q, k, a))
        }
        .await;
        let (ok, queue_wait_s, kernel_s, cpu_available) = match &result {
            Ok((_, _, q, k, a)) => (true, *q, *k, *a),
            Err(_) => (false, 0.0, 0.0, None),
        };
        let timing = Timing {
            queue_wait_s,
            input_transfer_s,
            kernel_s,
            server_s: arrived.elapsed().as_secs_f64(),
        };
        if let Some(m) = self.inner.metrics.get() {
            let out_bytes = match &result {
                Ok((outputs, copies, ..)) => outputs
                    .iter()
                    .chain(copies.iter().map(|(_, v)| v))
                    .map(Value::payload_bytes)
                    .sum(),
                Err(_) => 0,
            };
            m.call(
                &service,
                ok,
                timing.server_s,
                queue_wait_s,
                client_in_bytes.unwrap_or(0),
                out_bytes,
            );
        }
        // The agent needs every outcome (it clears the assignment either way); a closed channel
        // only means the server is shutting down.
        guard.unreported = None;
        let _ = self.inner.to_agent.send(ToAgent::Report(CallReport {
            cpu_available,
            client_in_bytes,
            ticket,
            service,
            sizes,
            timing,
            ok,
        }));
        result.map(|(outputs, copies, ..)| ExecuteReply {
            outputs,
            timing,
            server: self.inner.name.clone(),
            copies,
        })
    }

    async fn cancel(self, _: Context, call: CallId) -> bool {
        match self.calls().get(&call) {
            Some((flag, owner)) if owner.principal == self.peer.principal => {
                flag.cancel();
                tracing::info!(%call, "call cancelled by the client");
                true
            }
            _ => false,
        }
    }

    async fn fetch(self, _: Context, handle: DataHandle) -> Result<Value, CallError> {
        self.client_only("fetch values")?;
        self.inner
            .data
            .get(handle, &self.peer.principal)
            .ok_or_else(|| not_found(handle, &self.inner.addr))
    }

    async fn pull(self, _: Context, handle: DataHandle, owner: String) -> Result<Value, CallError> {
        if self.peer.role != Role::Server {
            return Err(CallError::new(
                CallErrorKind::BadArguments,
                "only servers pull values for a call; a client fetches its own",
            ));
        }
        self.inner
            .data
            .get(handle, &owner)
            .ok_or_else(|| not_found(handle, &self.inner.addr))
    }

    async fn free(self, _: Context, handles: Vec<DataHandle>) -> u32 {
        self.inner.data.free(&handles, &self.peer.principal)
    }

    async fn renew(self, _: Context, handles: Vec<DataHandle>) -> u32 {
        self.inner.data.renew(&handles, &self.peer.principal)
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
            executed: self.inner.executed.load(Ordering::Relaxed),
        }
    }
}
