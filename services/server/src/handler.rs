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
use crate::slots::{Job, Slots, Ticket};
use gridwise_kernels::{CancelFlag, Kernel, KernelCtx, KernelError};
use gridwise_metrics::ServerMetrics;
use gridwise_proto::clock::unix_ns;
use gridwise_proto::value::BULK_MIN_BYTES;
use gridwise_proto::{
    CallError, CallErrorKind, CallId, CallReport, DataHandle, ExecuteReply, ExecuteRequest,
    LinkSample, LoadSample, ModelPoint, ModelProgress, Pong, RemoteRef, ServerApi, ServerInfo,
    Timing, Value,
};
use gridwise_runtime::wire::{Charge, MemoryBudget, Peer, Role};
use gridwise_server_core::StartGate;
use gridwise_server_core::admission::{self, Admission, CallSizes};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;
use tarpc::context::Context;
use tokio::sync::{mpsc, oneshot};

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
    slot_count: u32,
    /// Calls hold a slot while their kernel runs and queue for one from their arrival.
    slots: Slots,
    /// Calls here now, with the client that sent each.
    calls: Mutex<HashMap<CallId, Serving>>,
    /// Whether the agents are several (a shared grid): only then does each hear of a call's
    /// arrival, which the one agent of a grid placed itself.
    tell_arrivals: std::sync::atomic::AtomicBool,
    /// Kernels run to their end, however they ended (shared with the slot threads).
    executed: Arc<AtomicU64>,
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
    /// When data last moved through here (see [`ServerHandler::quiet_for`]).
    data_moved: Mutex<Instant>,
    /// Whether a call is taken: the rules, on values.
    admission: Admission,
}

/// Notes, when dropped, that data moves through the server (a call's reply leaves).
struct DataMoving<'a>(&'a ServerHandler);

impl Drop for DataMoving<'_> {
    fn drop(&mut self) {
        self.0.note_data_moving();
    }
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

/// How this server takes part in remote data: its address and how much it may keep.
pub struct RemoteData {
    /// Address other servers and clients reach it at.
    pub addr: String,
    /// Most payload bytes kept at once.
    pub max_bytes: u64,
    /// How long a kept value may go unused before it is freed (zero: never).
    pub idle_ttl: Duration,
    /// Connection settings for pulling from other servers.
    pub wire: gridwise_runtime::wire::DialConfig,
}

/// What a server tells the agent besides heartbeats.
#[derive(Clone, Debug)]
pub enum ToAgent {
    /// A finished call, failed ones included (the agent clears their assignments too).
    Report(CallReport),
    /// A point a model build measured (or loaded from the model directory).
    Point(ModelPoint),
    /// A link as a pull of a remote input used it ([`crate::peers::Peers::pull`]).
    Link(LinkSample),
    /// A call an agent placed reached this server (the other agents of a shared grid learn
    /// of it from this, not a heartbeat later).
    Arrived(gridwise_proto::InFlight),
    /// A client brought a value kept here back (`ServerApi::fetched`): `bytes` in `seconds`.
    Fetched { bytes: u64, seconds: f64 },
}

impl ToAgent {
    /// Whether it goes to the agents at once, never held back for a burst: an arrival, since
    /// the other agents rank blind to its call until it lands.
    pub fn goes_at_once(&self) -> bool {
        matches!(self, ToAgent::Arrived(_))
    }
}

/// How long after its last benchmark the host load still carries the benchmark (the one-minute
/// load average remembers about that long).
const BENCH_LOAD_MEMORY: Duration = Duration::from_secs(60);

impl ServerHandler {
    /// Whether this server reports to several agents: then each hears of every call's arrival.
    pub fn set_several_agents(&self, several: bool) {
        self.inner
            .tell_arrivals
            .store(several, std::sync::atomic::Ordering::Relaxed);
    }

    /// Queues `m` for every agent this server reports to.
    pub fn tell_agents(&self, m: ToAgent) {
        let _ = self.inner.to_agent.send(m);
    }

    /// A handler for these kernels; finished calls and model points go to `to_agent`. It acts
    /// for the server itself; connections get theirs from [`ServerHandler::for_peer`]. Fails
    /// only if the slots' threads cannot be started.
    pub fn new(
        name: String,
        kernels: HashMap<String, Arc<dyn Kernel>>,
        slots: u32,
        to_agent: mpsc::UnboundedSender<ToAgent>,
        remote: RemoteData,
        limits: CallLimits,
        sensors: Arc<Sensors>,
    ) -> std::io::Result<Self> {
        let peer = Arc::new(Peer::local(Role::Server, &name));
        let slot_threads = Slots::new(slots as usize, &name)?;
        let (name_for_refusals, limits_budget, limits_frame) = (
            name.clone(),
            limits.budget.total_bytes(),
            limits.max_frame_bytes,
        );
        Ok(Self {
            inner: Arc::new(Inner {
                data: DataStore::new(remote.max_bytes, remote.idle_ttl),
                peers: Peers::new(remote.wire, name.clone()),
                addr: remote.addr,
                name,
                instance: uuid::Uuid::new_v4().simple().to_string(),
                kernels,
                slot_count: slots,
                slots: slot_threads,
                calls: Mutex::new(HashMap::new()),
                tell_arrivals: Default::default(),
                executed: Arc::new(AtomicU64::new(0)),
                limits,
                waiting_bytes: AtomicU64::new(0),
                to_agent,
                gate: BenchGate::default(),
                sensors,
                progress: Mutex::new(Vec::new()),
                metrics: std::sync::OnceLock::new(),
                data_moved: Mutex::new(Instant::now()),
                admission: Admission {
                    server: name_for_refusals,
                    budget_bytes: limits_budget,
                    max_frame_bytes: limits_frame,
                },
            }),
            peer,
        })
    }

    /// Records every call into `m` from now on (set once).
    pub fn set_metrics(&self, m: Arc<ServerMetrics>) {
        let _ = self.inner.metrics.set(m);
    }

    /// Calls running and calls waiting (for a slot, or holding one while their inputs
    /// arrive), now.
    pub fn occupancy(&self) -> (usize, usize) {
        self.inner.slots.occupancy()
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
        gridwise_server_core::heartbeat::load(&gridwise_server_core::HostNow {
            occupancy: self.occupancy(),
            loadavg_1m: crate::host::loadavg_1m(),
            benchmarking: self.inner.gate.recently_active(BENCH_LOAD_MEMORY),
            cpu_available: self.inner.sensors.availability_now(),
            free_memory_bytes: self.inner.sensors.free_memory_bytes(),
        })
    }

    /// The calls here that an agent placed, for every agent's queue view (see
    /// [`gridwise_proto::InFlight`]).
    pub fn in_flight(&self) -> Vec<gridwise_proto::InFlight> {
        self.calls()
            .values()
            .filter_map(|s| {
                Some(gridwise_proto::InFlight {
                    ticket: s.ticket?,
                    service: s.service.clone(),
                    sizes: s.sizes.clone(),
                    ran_s: s.gate.ran_for().map(|d| d.as_secs_f64()),
                })
            })
            .collect()
    }

    /// What the server measures of its host.
    pub fn sensors(&self) -> &Sensors {
        &self.inner.sensors
    }

    /// Real calls running or waiting for a slot.
    pub fn busy_calls(&self) -> u32 {
        let (running, queued) = self.occupancy();
        (running + queued) as u32
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
        self.tell_agents(ToAgent::Point(p));
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

    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<CallId, Serving>> {
        self.inner.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connections to other daemons: pulls and link probes.
    pub fn peers(&self) -> &crate::peers::Peers {
        &self.inner.peers
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
                    let (value, sample) = self.inner.peers.pull(r, owner).await?;
                    if let Some(s) = sample {
                        self.tell_agents(ToAgent::Link(s));
                    }
                    value
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
        let outputs = kernel.desc().output_bytes(&req.inputs);
        self.inner.admission.admit(&CallSizes {
            service: &req.service,
            input_bytes: req.inputs.iter().map(Value::payload_bytes).sum(),
            outputs: outputs
                .iter()
                .enumerate()
                .map(|(i, b)| (*b, returned_inline(req, keep, i, *b)))
                .collect(),
            client_reply_limit: req.reply_limit_bytes,
        })
    }

    /// Takes a call's memory, waiting (in arrival order) for running calls to give some back.
    /// Small calls are not charged: at most `slots` of them run at once, and charging costs a
    /// lock per call.
    async fn take_memory(&self, footprint: u64) -> Result<Option<Charge>, CallError> {
        if !admission::charged(footprint) {
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
        let before = self.inner.waiting_bytes.fetch_add(bytes, Ordering::Relaxed);
        let guard = WaitingBytes {
            handler: self.inner.clone(),
            bytes,
        };
        self.inner.admission.may_wait(before, bytes)?;
        Ok(guard)
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

    /// Notes that data moves through here now: a call arrives or ends, a value is staged or
    /// read, a bulk transfer ends.
    pub(crate) fn note_data_moving(&self) {
        *self
            .inner
            .data_moved
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// How long no data moved through here. A link probe waits for a quiet spell: beside a
    /// graph's pulls it measured their transfers, not the link, and slowed them (the graph's
    /// makespan came out 6–12% past its prediction on the test bed).
    pub fn quiet_for(&self) -> Duration {
        self.inner
            .data_moved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Stages `value` here for one read by `peer` (see [`DataStore::stage`]).
    pub fn stage_for(&self, peer: &Peer, value: Value, charge: Option<Charge>) -> RemoteRef {
        self.note_data_moving();
        self.inner
            .data
            .stage(value, &self.inner.addr, &peer.principal, charge)
    }

    /// A value kept (or staged) here for `owner`, shared; a staged one is gone once read.
    pub fn read_kept(&self, handle: DataHandle, owner: &str) -> Option<Arc<Value>> {
        self.note_data_moving();
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
            if req_keep.contains(&(i as u32)) || matches!(slot, Value::Ref(_)) || !slot.goes_bulk()
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

    /// Runs an admitted call in its turn and checks its outputs. The kernel runs on a slot's
    /// thread once the call holds a slot (slots go to calls in arrival order); an instant
    /// kernel runs on this task if the call holds its slot already. A call needing more memory
    /// than calls may take uncharged takes it only once it holds its slot (taking it before
    /// would let waiting calls hold memory the calls holding slots need).
    async fn run_call(
        &self,
        kernel: Arc<dyn Kernel>,
        mut req: ExecuteRequest,
        turn: Turn,
        keep: &[u32],
    ) -> Result<Finished, CallError> {
        let Turn {
            arrived,
            cancel,
            gate,
            footprint,
            waiting,
            ticket,
        } = turn;
        let inputs = std::mem::take(&mut req.inputs);
        let executed = self.inner.executed.clone();
        let k = kernel.clone();
        let sensors = self.inner.sensors.clone();
        // Timed where it runs: a hand-off to or from the slot's thread is the server's
        // overhead, not the kernel's speed, which is what the models learn from this time, as
        // they learn from benchmarks.
        let work = move || {
            let queue_wait_s = arrived.elapsed().as_secs_f64();
            let started = Instant::now();
            // A withdrawn call was sent elsewhere: it must not run here too.
            if !gate.start() || cancel.is_cancelled() {
                return Attempt {
                    result: Err(KernelError::Cancelled),
                    queue_wait_s,
                    started,
                    ended: started,
                    share: None,
                };
            }
            let ctx = KernelCtx::with_cancel(cancel);
            let timed = sensors.timed(k.sleeps(), k.threads(), &ctx, || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| k.run(&inputs, &ctx)))
            });
            let (ran, started, ended) = (timed.value, timed.started, timed.ended);
            executed.fetch_add(1, Ordering::Relaxed);
            let result = match ran {
                Ok(r) => r.map(|out| (out, inputs)),
                Err(panic) => Err(KernelError::Internal(format!(
                    "the kernel panicked: {}",
                    panic_message(panic.as_ref())
                ))),
            };
            Attempt {
                result,
                queue_wait_s,
                started,
                ended,
                share: timed.share,
            }
        };
        let gone = || CallError::new(CallErrorKind::Unavailable, "the server is shutting down");
        let (attempt, memory) = if admission::charged(footprint) {
            // The slot's thread waits for the work while this task waits for the memory.
            let (granted_tx, granted) = oneshot::channel();
            let (work_tx, work_rx) = std::sync::mpsc::sync_channel::<Job>(1);
            ticket.submit(Box::new(move || {
                if granted_tx.send(()).is_ok()
                    && let Ok(job) = work_rx.recv()
                {
                    job();
                }
            }));
            granted.await.map_err(|_| gone())?;
            let memory = self.take_memory(footprint).await?;
            drop(waiting);
            let (tx, rx) = oneshot::channel();
            let _ = work_tx.send(Box::new(move || {
                let _ = tx.send(work());
            }));
            (rx.await.map_err(|_| gone())?, memory)
        } else if let Some(slot) = kernel.is_instant().then(|| ticket.try_inline()).flatten() {
            drop(waiting);
            let attempt = work();
            drop(slot);
            (attempt, None)
        } else {
            let (tx, rx) = oneshot::channel();
            ticket.submit(Box::new(move || {
                drop(waiting);
                let _ = tx.send(work());
            }));
            (rx.await.map_err(|_| gone())?, None)
        };
        drop(ticket);
        let Attempt {
            result,
            queue_wait_s,
            started,
            ended,
            share: cpu_available,
        } = attempt;
        let kernel_s = ended.duration_since(started).as_secs_f64();
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
        self.inner
            .admission
            .check_reply(&req.service, returned, req.reply_limit_bytes)?;
        // A client calling again with arrays of the same size is received into these buffers,
        // whose pages are in already.
        inputs.into_iter().for_each(Value::recycle);
        Ok(Finished {
            outputs,
            queue_wait_s,
            kernel_s,
            cpu_available,
            returned,
            _memory: memory,
        })
    }
}

/// What a panic carried, as text where it was text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text payload".into())
}

/// An admitted call waiting for its turn: what [`ServerHandler::run_call`] needs besides the
/// request.
struct Turn {
    arrived: Instant,
    cancel: CancelFlag,
    gate: Arc<StartGate>,
    /// Memory the call takes while it runs (see [`admission::charged`]).
    footprint: u64,
    waiting: WaitingBytes,
    ticket: Ticket,
}

/// A kernel's run on a slot, timed there.
struct Attempt {
    /// The outputs and the inputs (given back to check the outputs against).
    result: Result<(Vec<Value>, Vec<Value>), KernelError>,
    queue_wait_s: f64,
    started: Instant,
    ended: Instant,
    /// The share of a core it got ([`crate::sensors::TimedRun::share`]).
    share: Option<f64>,
}

/// A call that ran: its outputs and what the report says of it.
struct Finished {
    outputs: Vec<Value>,
    queue_wait_s: f64,
    kernel_s: f64,
    cpu_available: Option<f64>,
    /// Bytes of outputs the reply carries.
    returned: u64,
    /// Held until the reply is built.
    _memory: Option<Charge>,
}

/// Whether output `i` (of `bytes`) goes back inside the reply: not kept here, and not staged
/// for the client to collect on a bulk connection.
fn returned_inline(req: &ExecuteRequest, keep: &[u32], i: usize, bytes: u64) -> bool {
    let kept = keep.contains(&(i as u32));
    let staged = req.bulk_outputs && bytes >= BULK_MIN_BYTES;
    !kept && !staged
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

/// A call being served: how to stop it, whose it is, and whether it may still be withdrawn.
struct Serving {
    cancel: CancelFlag,
    owner: Arc<Peer>,
    gate: Arc<StartGate>,
    /// What other agents than the one that placed it need to know of it (heartbeats).
    ticket: Option<gridwise_proto::Ticket>,
    service: String,
    /// Known once its inputs are checked.
    sizes: Vec<(String, i64)>,
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
            self.handler.tell_agents(ToAgent::Report(r));
        }
    }
}

/// What a call's serving learned of it besides its outputs, for its report.
#[derive(Default)]
struct CallFacts {
    /// From the client's send to the inputs all here (pulls included).
    input_transfer_s: f64,
    sizes: Vec<(String, i64)>,
    /// The bytes that came from the client, when all of them did (they time its link).
    client_in_bytes: Option<u64>,
}

/// A call served: its outputs for the reply and where its time went.
struct Served {
    outputs: Vec<Value>,
    copies: Vec<(u32, Value)>,
    queue_wait_s: f64,
    kernel_s: f64,
    cpu_available: Option<f64>,
}

impl ServerHandler {
    /// Serves a call: admitted (memory, frames), queued for a slot on arrival, its remote
    /// inputs pulled, checked, run, its outputs kept or staged as asked.
    async fn serve_call(
        &self,
        mut req: ExecuteRequest,
        keep: &[u32],
        (cancel, gate): (CancelFlag, Arc<StartGate>),
        arrived: Instant,
        facts: &mut CallFacts,
    ) -> Result<Served, CallError> {
        let kernel = self.kernel_for(&req.service)?;
        let footprint = self.check_limits(kernel.as_ref(), &req, keep)?;
        let held: u64 = req.inputs.iter().map(Value::payload_bytes).sum();
        let waiting = self.hold_while_waiting(held)?;
        // The call takes its place in the slot queue on arrival, while its remote inputs
        // are pulled (checks and kernels only ever see values): calls run in the order
        // they came, not in the order their pulls happen to finish, which is what a
        // graph's plan assumes.
        let ticket = self.inner.slots.enter();
        let remote = req.inputs.iter().any(|v| matches!(v, Value::Ref(_)));
        // A pull's time joins the transfer's: only calls whose inputs all came from the
        // client (in the request, or staged here just before it) time the client's link.
        let from_client = req.inputs.iter().all(|v| match v {
            Value::Ref(r) => r.holder == self.inner.addr && self.inner.data.is_staged(r.handle),
            _ => true,
        });
        facts.client_in_bytes = from_client.then_some(held);
        if remote {
            // Pulling is rare and its future large: boxed, it does not weigh on every call.
            let pulled = Box::pin(self.pull_remote_inputs(&mut req.inputs)).await;
            facts.input_transfer_s += pulled.as_ref().copied().unwrap_or(0.0);
            pulled?;
        }
        kernel
            .desc()
            .check_inputs(&req.inputs)
            .map_err(|e| CallError::new(CallErrorKind::BadArguments, e.to_string()))?;
        facts.sizes = kernel.desc().sizes(&req.inputs);
        if let Some(s) = self.calls().get_mut(&req.call_id) {
            s.sizes = facts.sizes.clone();
        }
        if let Some(ticket) = req.ticket
            && self
                .inner
                .tell_arrivals
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.tell_agents(ToAgent::Arrived(gridwise_proto::InFlight {
                ticket,
                service: req.service.clone(),
                sizes: facts.sizes.clone(),
                ran_s: None,
            }));
        }
        // Pulled values are judged at their real size (a reference only declares one).
        let footprint = if remote {
            self.check_limits(kernel.as_ref(), &req, keep)?
        } else {
            footprint
        };
        let bulk_outputs = req.bulk_outputs;
        let (copy_below, client_limit) = (req.copy_kept_below_bytes, req.reply_limit_bytes);
        let turn = Turn {
            arrived,
            cancel,
            gate,
            footprint,
            waiting,
            ticket,
        };
        let ran = self.run_call(kernel, req, turn, keep).await?;
        // Copies ride in the reply beside what it returns; those that would not fit are
        // left out, which costs their consumers a pull.
        let room = self.inner.admission.reply_room(client_limit, ran.returned);
        let (outputs, copies) = self.keep(ran.outputs, keep, copy_below, room)?;
        let outputs = if bulk_outputs {
            self.stage_outputs(outputs, keep)
        } else {
            outputs
        };
        Ok(Served {
            outputs,
            copies,
            queue_wait_s: ran.queue_wait_s,
            kernel_s: ran.kernel_s,
            cpu_available: ran.cpu_available,
        })
    }

    /// Counts a served (or refused) call in the metrics and reports it to the agent; its
    /// timing, for the reply.
    fn tell(
        &self,
        ticket: Option<gridwise_proto::Ticket>,
        service: String,
        facts: CallFacts,
        arrived: Instant,
        result: &Result<Served, CallError>,
    ) -> Timing {
        let (ok, queue_wait_s, kernel_s, cpu_available) = match result {
            Ok(s) => (true, s.queue_wait_s, s.kernel_s, s.cpu_available),
            Err(_) => (false, 0.0, 0.0, None),
        };
        let timing = Timing {
            queue_wait_s,
            input_transfer_s: facts.input_transfer_s,
            kernel_s,
            server_s: arrived.elapsed().as_secs_f64(),
        };
        if let Some(m) = self.inner.metrics.get() {
            let out_bytes = match result {
                Ok(s) => s
                    .outputs
                    .iter()
                    .chain(s.copies.iter().map(|(_, v)| v))
                    .map(Value::payload_bytes)
                    .sum(),
                Err(_) => 0,
            };
            m.call(
                &service,
                ok,
                timing.server_s,
                queue_wait_s,
                facts.client_in_bytes.unwrap_or(0),
                out_bytes,
            );
        }
        // A closed channel only means the server is shutting down.
        self.tell_agents(ToAgent::Report(CallReport {
            cpu_available,
            client_in_bytes: facts.client_in_bytes,
            ticket,
            service,
            sizes: facts.sizes,
            timing,
            ok,
        }));
        timing
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
            slots: self.inner.slot_count,
            load: self.load(),
        }
    }

    /// A call from a client: registered (so a cancel reaches it), served (`serve_call`), reported
    /// to the agent and answered (`tell`).
    async fn execute(self, _: Context, mut req: ExecuteRequest) -> Result<ExecuteReply, CallError> {
        self.client_only("run calls")?;
        let arrived = Instant::now();
        self.note_data_moving();
        // And when it ends: its reply is on its way.
        let _ends = DataMoving(&self);
        // Exact on one host; across hosts it carries the clocks' offset (documented in Timing).
        let mut facts = CallFacts {
            input_transfer_s: unix_ns().saturating_sub(req.sent_at_unix_ns) as f64 * 1e-9,
            ..CallFacts::default()
        };
        let ticket = req.ticket;
        let service = req.service.clone();
        let keep = std::mem::take(&mut req.keep_outputs);
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
        let gate = Arc::new(StartGate::new());
        let serving = Serving {
            cancel: cancel.clone(),
            owner: self.peer.clone(),
            gate: gate.clone(),
            ticket,
            service: service.clone(),
            sizes: Vec::new(),
        };
        self.calls().insert(req.call_id, serving);
        let result = self
            .serve_call(req, &keep, (cancel, gate), arrived, &mut facts)
            .await;
        // The agent needs every outcome (it clears the assignment either way); the guard's
        // report is for a call that never gets this far.
        guard.unreported = None;
        let timing = self.tell(ticket, service, facts, arrived, &result);
        result.map(|s| ExecuteReply {
            outputs: s.outputs,
            timing,
            server: self.inner.name.clone(),
            copies: s.copies,
        })
    }

    async fn cancel(self, _: Context, call: CallId) -> bool {
        match self.calls().get(&call) {
            Some(c) if c.owner.principal == self.peer.principal => {
                c.cancel.cancel();
                tracing::info!(%call, "call cancelled by the client");
                true
            }
            _ => false,
        }
    }

    async fn withdraw(self, _: Context, call: CallId) -> bool {
        match self.calls().get(&call) {
            Some(c) if c.owner.principal == self.peer.principal => {
                if !c.gate.withdraw() {
                    return false;
                }
                // If its turn comes, its work ends without running; the client stops waiting
                // for its `execute`, and the dropped request gives its place up.
                c.cancel.cancel();
                tracing::info!(%call, "call withdrawn by the client before it started");
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

    async fn fetched(self, _: Context, bytes: u64, seconds: f64) {
        if seconds.is_finite() && seconds > 0.0 {
            self.tell_agents(ToAgent::Fetched { bytes, seconds });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use gridwise_kernels::AddKernel;
    use gridwise_proto::ServiceDesc;
    use gridwise_runtime::wire::DialConfig;

    /// `add`'s interface, run on a slot's thread (not instant), panicking on a negative x and
    /// holding its slot for `x - HOLD` ms from `HOLD` up; records the x of every run.
    struct PanicsBelowZero(AddKernel, Arc<Mutex<Vec<i64>>>);

    const HOLD: i64 = 1_000_000;

    impl Kernel for PanicsBelowZero {
        fn desc(&self) -> &ServiceDesc {
            self.0.desc()
        }

        fn run(&self, inputs: &[Value], ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
            let x = inputs[0].as_int().unwrap_or_default();
            self.1.lock().unwrap().push(x);
            if x < 0 {
                panic!("x was negative");
            }
            if x >= HOLD {
                ctx.cancel
                    .wait_timeout(Duration::from_millis((x - HOLD) as u64));
            }
            self.0.run(inputs, ctx)
        }
    }

    fn one_slot_server() -> (
        ServerHandler,
        mpsc::UnboundedReceiver<ToAgent>,
        Arc<Mutex<Vec<i64>>>,
    ) {
        let runs = Arc::new(Mutex::new(Vec::new()));
        let kernels: HashMap<String, Arc<dyn Kernel>> = [(
            "add".to_string(),
            Arc::new(PanicsBelowZero(AddKernel::new(), runs.clone())) as Arc<dyn Kernel>,
        )]
        .into();
        let (to_agent, reports) = mpsc::unbounded_channel();
        let remote = RemoteData {
            addr: "127.0.0.1:1".into(),
            max_bytes: 1 << 20,
            idle_ttl: Duration::ZERO,
            wire: DialConfig::new(Role::Server, None),
        };
        let sensors = Sensors::start(None, Instant::now(), None);
        let server = ServerHandler::new(
            "s".into(),
            kernels,
            1,
            to_agent,
            remote,
            CallLimits::unlimited(),
            sensors,
        )
        .unwrap();
        let client = server.for_peer(&Peer::local(Role::Client, "c"));
        (client, reports, runs)
    }

    fn add(x: i64) -> ExecuteRequest {
        ExecuteRequest {
            call_id: CallId::new_random(),
            ticket: None,
            service: "add".into(),
            inputs: vec![Value::Int(x)],
            sent_at_unix_ns: unix_ns(),
            keep_outputs: Vec::new(),
            reply_limit_bytes: 0,
            bulk_outputs: false,
            copy_kept_below_bytes: 0,
        }
    }

    /// A slot's thread gives its slot back just after the reply is handed over.
    async fn slots_come_back(server: &ServerHandler) {
        for _ in 0..500 {
            if server.occupancy() == (0, 0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("slots still busy: {:?}", server.occupancy());
    }

    #[tokio::test]
    async fn a_panicking_kernel_fails_its_call_and_the_slot_serves_the_next() {
        let (server, mut reports, _) = one_slot_server();
        let err = server
            .clone()
            .execute(Context::current(), add(-1))
            .await
            .unwrap_err();
        assert_eq!(err.kind, CallErrorKind::Internal);
        assert!(
            err.message.contains("the kernel panicked: x was negative"),
            "{}",
            err.message
        );
        let reply = server
            .clone()
            .execute(Context::current(), add(41))
            .await
            .unwrap();
        assert_eq!(reply.outputs, [Value::Int(42)]);
        let oks: Vec<bool> = std::iter::from_fn(|| reports.try_recv().ok())
            .filter_map(|m| match m {
                ToAgent::Report(r) => Some(r.ok),
                _ => None,
            })
            .collect();
        assert_eq!(oks, [false, true]);
        slots_come_back(&server).await;
    }

    #[tokio::test]
    async fn calls_on_one_slot_run_in_the_order_they_arrived() {
        let (server, _reports, runs) = one_slot_server();
        let calls = (0..20).map(|x| server.clone().execute(Context::current(), add(x)));
        // join_all polls them in turn: each takes its ticket and hands in its work before
        // the next arrives.
        let replies = futures::future::join_all(calls).await;
        for (x, r) in replies.into_iter().enumerate() {
            assert_eq!(r.unwrap().outputs, [Value::Int(x as i64 + 1)]);
        }
        assert_eq!(*runs.lock().unwrap(), (0..20).collect::<Vec<i64>>());
        slots_come_back(&server).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_call_withdrawn_never_runs_and_a_started_one_stays() {
        let (server, _reports, runs) = one_slot_server();
        let (long, waiting) = (add(HOLD + 300), add(7));
        let (long_id, waiting_id) = (long.call_id, waiting.call_id);
        let first = tokio::spawn(server.clone().execute(Context::current(), long));
        while runs.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let second = tokio::spawn(server.clone().execute(Context::current(), waiting));
        while !server.calls().contains_key(&waiting_id) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert!(!server.clone().withdraw(Context::current(), long_id).await);
        assert!(
            server
                .clone()
                .withdraw(Context::current(), waiting_id)
                .await
        );
        // Asked again, or for a call it does not know, the server's answer stands.
        assert!(
            server
                .clone()
                .withdraw(Context::current(), waiting_id)
                .await
        );
        assert!(
            !server
                .clone()
                .withdraw(Context::current(), CallId::new_random())
                .await
        );
        let e = second.await.unwrap().unwrap_err();
        assert_eq!(e.kind, CallErrorKind::Cancelled, "{}", e.message);
        assert_eq!(
            first.await.unwrap().unwrap().outputs,
            [Value::Int(HOLD + 301)]
        );
        assert_eq!(*runs.lock().unwrap(), [HOLD + 300]);
        slots_come_back(&server).await;
    }
}
