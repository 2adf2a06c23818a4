//! [`Client`]: the same API as [`GridClient`], blocking, for programs without an async runtime.

use crate::client::{CallResult, GridClient};
use crate::config::ClientConfig;
use crate::error::GrpcError;
use crate::graph::{Graph, GraphRun};
use crate::handle::FunctionHandle;
use crate::session::SessionId;
use gridwise_proto::{
    AgentStatus, CallProfile, Candidate, ErrorCode, GraphPlan, LinkInfo, ModelExport, ModelSummary,
    RankOptions, RemoteRef, ServiceDesc, ServiceSummary, Value,
};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// A blocking GridRPC client. It owns a single-threaded tokio runtime driven by a background
/// thread; each method runs on the caller's thread until its answer is in. Methods may be
/// called from many threads at once. Do not call them from inside an async runtime (use
/// [`GridClient`] there): they return `OtherErrorCode` if you do.
pub struct Client {
    inner: GridClient,
    rt: Handle,
    calls: SyncCalls,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("agent", &self.inner.agent_addr())
            .finish_non_exhaustive()
    }
}

fn inside_runtime() -> GrpcError {
    GrpcError::new(
        ErrorCode::OtherErrorCode,
        "the blocking gridwise Client was used inside an async runtime: use GridClient there",
    )
}

/// How long a caller polls its call's task before it sleeps. A sleeping thread is woken by a
/// futex and, on a VM, an interrupt to its CPU: on the 2-core VM of `bench rpc` that cost
/// about 40 µs of a 180 µs call, and a CPU kept busy also wakes the runtime thread faster.
/// Polling between yields gives the CPU to whatever else is runnable, so daemons sharing the
/// cores are not starved; a call longer than this costs [`SPIN`] of CPU and then sleeps.
pub const SPIN: std::time::Duration = std::time::Duration::from_micros(200);

/// How long the client's runtime thread stays awake after a blocking call returns, unless
/// the next call begins sooner. A runtime thread asleep in `epoll_wait` must be woken by the
/// next call's task: on the 2-core VM of `bench rpc` that cost about 20 µs of a 115 µs call,
/// a sixth of it. Staying awake costs at most this much CPU per call, and only callers that
/// called again within it last time are waited for (see [`SyncCalls`]).
pub const LINGER: std::time::Duration = std::time::Duration::from_micros(100);

/// Keeps the runtime thread polling (tokio polls its I/O without sleeping while a task is
/// ready) until `linger` has passed or a call after `call` has begun.
async fn stay_awake(calls: Arc<AtomicU64>, call: u64, linger: std::time::Duration) {
    let until = std::time::Instant::now() + linger;
    while calls.load(Ordering::Relaxed) == call && std::time::Instant::now() < until {
        tokio::task::yield_now().await;
    }
}

/// Synchronous calls made on one client runtime: each runs as one task on the runtime's
/// thread, waited for on the caller's ([`wait_for_task`]). After a call that began within
/// [`LINGER`] of the previous one's end, the runtime thread stays awake for `LINGER` unless
/// the next call begins sooner: a program calling in a loop finds it awake, one calling now
/// and then costs no CPU for it. Clones count the same calls.
#[derive(Clone, Debug)]
pub struct SyncCalls {
    /// Calls begun so far: a runtime thread staying awake stops when the next one begins.
    begun: Arc<AtomicU64>,
    /// When the last call returned to its caller, in ns after `epoch` (`u64::MAX`: none yet).
    last_end_ns: Arc<AtomicU64>,
    epoch: std::time::Instant,
}

impl Default for SyncCalls {
    fn default() -> Self {
        SyncCalls {
            begun: Arc::default(),
            last_end_ns: Arc::new(AtomicU64::new(u64::MAX)),
            epoch: std::time::Instant::now(),
        }
    }
}

/// Whether a call beginning at `now_ns` came within [`LINGER`] of the previous call's end at
/// `last_end_ns` (`u64::MAX`: there was none), i.e. whether its caller calls in a loop.
fn back_to_back(last_end_ns: u64, now_ns: u64) -> bool {
    last_end_ns != u64::MAX && now_ns.saturating_sub(last_end_ns) <= LINGER.as_nanos() as u64
}

impl SyncCalls {
    /// Runs `call` on `rt`'s thread and waits for it here.
    pub fn run<T, F>(&self, rt: &Handle, call: F) -> Result<T, tokio::task::JoinError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let looping = back_to_back(self.last_end_ns.load(Ordering::Relaxed), self.now_ns());
        let begun = self.begun.clone();
        let this = begun.fetch_add(1, Ordering::Relaxed) + 1;
        let task = rt.spawn(async move {
            let out = call.await;
            if looping {
                tokio::spawn(stay_awake(begun, this, LINGER));
            }
            out
        });
        let out = wait_for_task(rt, task);
        self.last_end_ns.store(self.now_ns(), Ordering::Relaxed);
        out
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// Waits on the calling thread for `task`, spawned on `rt` (a runtime driven by another
/// thread): polled for up to [`SPIN`], then slept on. How the blocking client waits for each
/// call; `bench rpc` times its floors with it too.
pub fn wait_for_task<T>(
    rt: &Handle,
    mut task: tokio::task::JoinHandle<T>,
) -> Result<T, tokio::task::JoinError> {
    use std::task::{Context, Poll, Waker};
    let mut cx = Context::from_waker(Waker::noop());
    let until = std::time::Instant::now() + SPIN;
    loop {
        if let Poll::Ready(done) = std::pin::Pin::new(&mut task).poll(&mut cx) {
            return done;
        }
        if std::time::Instant::now() >= until {
            return rt.block_on(task);
        }
        std::thread::yield_now();
    }
}

/// Starts the runtime a blocking client drives its calls on: current-thread, on a thread of
/// its own; returns its handle, the stop signal and the thread. `bench rpc`'s floors start
/// theirs with it too.
pub fn start_runtime() -> Result<(Handle, oneshot::Sender<()>, JoinHandle<()>), GrpcError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            GrpcError::new(
                ErrorCode::OtherErrorCode,
                format!("cannot start the client runtime: {e}"),
            )
        })?;
    let handle = rt.handle().clone();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("gridwise-client".into())
        .spawn(move || {
            // Drives I/O and timers for every caller until the client is dropped.
            rt.block_on(async {
                let _ = stop_rx.await;
            });
        })
        .map_err(|e| {
            GrpcError::new(
                ErrorCode::OtherErrorCode,
                format!("cannot start the client thread: {e}"),
            )
        })?;
    Ok((handle, stop_tx, thread))
}

impl Client {
    /// The agent in use: of several configured, the one that last answered.
    pub fn agent_addr(&self) -> String {
        self.inner.agent_addr()
    }

    /// Connects to the agent named in `cfg`.
    pub fn connect(cfg: ClientConfig) -> Result<Client, GrpcError> {
        if Handle::try_current().is_ok() {
            return Err(inside_runtime());
        }
        let (rt, stop, thread) = start_runtime()?;
        let mut stop = Some(stop);
        let mut thread = Some(thread);
        match rt.block_on(GridClient::connect(cfg)) {
            Ok(inner) => Ok(Client {
                inner,
                rt,
                calls: SyncCalls::default(),
                stop,
                thread,
            }),
            Err(e) => {
                shut_down(&mut stop, &mut thread);
                Err(e)
            }
        }
    }

    /// Reads a configuration file (see [`ClientConfig::from_file`]) and connects.
    pub fn from_config_file(path: impl AsRef<std::path::Path>) -> Result<Client, GrpcError> {
        Client::connect(ClientConfig::from_file(path)?)
    }

    /// The async client underneath, for use from async code.
    pub fn async_client(&self) -> &GridClient {
        &self.inner
    }

    fn run<T, F>(&self, fut: F) -> Result<T, GrpcError>
    where
        F: Future<Output = Result<T, GrpcError>>,
    {
        if Handle::try_current().is_ok() {
            return Err(inside_runtime());
        }
        self.rt.block_on(fut)
    }

    /// Runs `fut` as a task on the client's runtime thread and waits for it here. A call
    /// makes two round trips (agent, server): polled on the caller's thread, each would cross
    /// to the runtime thread and back; as one task it crosses once each way ([`SyncCalls`],
    /// which also keeps the runtime thread awake between calls made in a loop).
    fn run_on_runtime<T, F>(&self, fut: F) -> Result<T, GrpcError>
    where
        F: Future<Output = Result<T, GrpcError>> + Send + 'static,
        T: Send + 'static,
    {
        if Handle::try_current().is_ok() {
            return Err(inside_runtime());
        }
        self.calls
            .run(&self.rt, fut)
            .map_err(|e| GrpcError::communication(format!("the call's task did not finish: {e}")))?
    }

    /// A new, empty task graph (see [`crate::graph`]); [`BlockingGraph::run`] blocks.
    pub fn graph(&self) -> BlockingGraph<'_> {
        BlockingGraph {
            client: self,
            graph: self.inner.graph(),
        }
    }

    /// See [`GridClient::function_handle_default`].
    pub fn function_handle_default(&self, service: &str) -> Result<FunctionHandle, GrpcError> {
        self.run(self.inner.function_handle_default(service))
    }

    /// See [`GridClient::function_handle_init`].
    pub fn function_handle_init(
        &self,
        service: &str,
        server: &str,
    ) -> Result<FunctionHandle, GrpcError> {
        self.run(self.inner.function_handle_init(service, server))
    }

    /// See [`GridClient::function_handle_destruct`].
    pub fn function_handle_destruct(&self, h: &FunctionHandle) -> Result<(), GrpcError> {
        self.inner.function_handle_destruct(h)
    }

    /// See [`GridClient::get_handle`].
    pub fn get_handle(&self, id: SessionId) -> Result<FunctionHandle, GrpcError> {
        self.inner.get_handle(id)
    }

    /// See [`GridClient::call`].
    pub fn call(&self, h: &FunctionHandle, inputs: Vec<Value>) -> Result<CallResult, GrpcError> {
        let (inner, h) = (self.inner.clone(), h.clone());
        self.run_on_runtime(async move { inner.call(&h, inputs).await })
    }

    /// See [`GridClient::call_async`].
    pub fn call_async(
        &self,
        h: &FunctionHandle,
        inputs: Vec<Value>,
    ) -> Result<SessionId, GrpcError> {
        self.inner.call_async(h, inputs)
    }

    /// See [`GridClient::probe`].
    pub fn probe(&self, id: SessionId) -> Result<(), GrpcError> {
        self.inner.probe(id)
    }

    /// See [`GridClient::probe_or`].
    pub fn probe_or(&self, ids: &[SessionId]) -> Result<SessionId, GrpcError> {
        self.inner.probe_or(ids)
    }

    /// See [`GridClient::wait`].
    pub fn wait(&self, id: SessionId) -> Result<CallResult, GrpcError> {
        self.run(self.inner.wait(id))
    }

    /// See [`GridClient::wait_and`].
    pub fn wait_and(&self, ids: &[SessionId]) -> Result<Vec<CallResult>, GrpcError> {
        self.run(self.inner.wait_and(ids))
    }

    /// See [`GridClient::wait_or`].
    pub fn wait_or(&self, ids: &[SessionId]) -> Result<(SessionId, CallResult), GrpcError> {
        self.run(self.inner.wait_or(ids))
    }

    /// See [`GridClient::wait_all`].
    pub fn wait_all(&self) -> Result<Vec<(SessionId, CallResult)>, GrpcError> {
        self.run(self.inner.wait_all())
    }

    /// See [`GridClient::wait_any`].
    pub fn wait_any(&self) -> Result<(SessionId, CallResult), GrpcError> {
        self.run(self.inner.wait_any())
    }

    /// See [`GridClient::cancel`].
    pub fn cancel(&self, id: SessionId) -> Result<(), GrpcError> {
        self.run(self.inner.cancel(id))
    }

    /// See [`GridClient::cancel_all`].
    pub fn cancel_all(&self) -> Result<(), GrpcError> {
        self.run(self.inner.cancel_all())
    }

    /// See [`GridClient::get_error`].
    pub fn get_error(&self, id: SessionId) -> Result<Option<GrpcError>, GrpcError> {
        self.inner.get_error(id)
    }

    /// See [`GridClient::get_failed_session_id`].
    pub fn get_failed_session_id(&self) -> Option<SessionId> {
        self.inner.get_failed_session_id()
    }

    /// See [`GridClient::divide_plan`].
    pub fn divide_plan(
        &self,
        h: &FunctionHandle,
        units: u64,
        spec: &crate::DivideSpec,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<gridwise_proto::DivideReply, GrpcError> {
        self.run(self.inner.divide_plan(h, units, spec, inputs))
    }

    /// See [`GridClient::divide`].
    pub fn divide(
        &self,
        h: &FunctionHandle,
        units: u64,
        spec: &crate::DivideSpec,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<crate::DivideRun, GrpcError> {
        self.run(self.inner.divide(h, units, spec, inputs))
    }

    /// See [`GridClient::run_divide`].
    pub fn run_divide(
        &self,
        h: &FunctionHandle,
        plan: gridwise_proto::DivideReply,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<crate::DivideRun, GrpcError> {
        self.run(self.inner.run_divide(h, plan, inputs))
    }

    /// See [`GridClient::divide_slab`].
    pub fn divide_slab(
        &self,
        h: &FunctionHandle,
        units: u64,
        spec: &crate::DivideSpec,
        halo_bytes: u64,
        steps: usize,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<crate::SlabRun, GrpcError> {
        self.run(
            self.inner
                .divide_slab(h, units, spec, halo_bytes, steps, inputs),
        )
    }

    /// See [`GridClient::run_slab`].
    pub fn run_slab(
        &self,
        h: &FunctionHandle,
        plan: gridwise_proto::DivideReply,
        steps: usize,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<crate::SlabRun, GrpcError> {
        self.run(self.inner.run_slab(h, plan, steps, inputs))
    }

    /// See [`GridClient::divide_iter`].
    pub fn divide_iter(
        &self,
        h: &FunctionHandle,
        units: u64,
        spec: &crate::DivideSpec,
        iterations: usize,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<Vec<crate::DivideRun>, GrpcError> {
        self.run(self.inner.divide_iter(h, units, spec, iterations, inputs))
    }

    /// See [`GridClient::status`].
    pub fn status(&self) -> Result<AgentStatus, GrpcError> {
        self.run(self.inner.status())
    }

    /// See [`GridClient::unresponsive_servers`].
    pub fn unresponsive_servers(&self) -> Vec<String> {
        self.inner.unresponsive_servers()
    }

    /// See [`GridClient::call_keep`].
    pub fn call_keep(
        &self,
        h: &FunctionHandle,
        inputs: Vec<Value>,
        keep: &[usize],
    ) -> Result<CallResult, GrpcError> {
        let (inner, h, keep) = (self.inner.clone(), h.clone(), keep.to_vec());
        self.run_on_runtime(async move { inner.call_keep(&h, inputs, &keep).await })
    }

    /// See [`GridClient::fetch`].
    pub fn fetch(&self, r: &RemoteRef) -> Result<Value, GrpcError> {
        self.run(self.inner.fetch(r))
    }

    /// See [`GridClient::ping`].
    pub fn ping(&self, addr: &str) -> Result<gridwise_proto::Pong, GrpcError> {
        self.run(self.inner.ping(addr))
    }

    /// See [`GridClient::free`].
    pub fn free(&self, refs: &[RemoteRef]) -> Result<u32, GrpcError> {
        self.run(self.inner.free(refs))
    }

    /// See [`GridClient::renew`].
    pub fn renew(&self, refs: &[RemoteRef]) -> Result<u32, GrpcError> {
        self.run(self.inner.renew(refs))
    }

    /// See [`GridClient::link_matrix`].
    pub fn link_matrix(&self) -> Result<Vec<LinkInfo>, GrpcError> {
        self.run(self.inner.link_matrix())
    }

    /// See [`GridClient::models`].
    pub fn models(&self) -> Result<Vec<ModelSummary>, GrpcError> {
        self.run(self.inner.models())
    }

    /// See [`GridClient::model`].
    pub fn model(&self, server: &str, service: &str) -> Result<ModelExport, GrpcError> {
        self.run(self.inner.model(server, service))
    }

    /// See [`GridClient::list_services`].
    pub fn list_services(&self) -> Result<Vec<ServiceSummary>, GrpcError> {
        self.run(self.inner.list_services())
    }

    /// See [`GridClient::describe`].
    pub fn describe(&self, service: &str) -> Result<ServiceDesc, GrpcError> {
        self.run(self.inner.describe(service))
    }

    /// See [`GridClient::explain`].
    pub fn explain(
        &self,
        profile: CallProfile,
        opts: RankOptions,
    ) -> Result<Vec<Candidate>, GrpcError> {
        self.run(self.inner.explain(profile, opts))
    }
}

fn shut_down(stop: &mut Option<oneshot::Sender<()>>, thread: &mut Option<JoinHandle<()>>) {
    if let Some(s) = stop.take() {
        let _ = s.send(());
    }
    if let Some(t) = thread.take() {
        let _ = t.join();
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        shut_down(&mut self.stop, &mut self.thread);
    }
}

/// A [`Graph`] recorded through the blocking [`Client`]: the same recording methods (through
/// `Deref`), with [`plan`](Self::plan) and [`run`](Self::run) blocking.
pub struct BlockingGraph<'a> {
    client: &'a Client,
    graph: Graph,
}

impl BlockingGraph<'_> {
    /// See [`Graph::plan`].
    pub fn plan(&self) -> Result<GraphPlan, GrpcError> {
        self.client.run(self.graph.plan())
    }

    /// See [`Graph::run`].
    pub fn run(self) -> Result<GraphRun, GrpcError> {
        self.client.run(self.graph.run())
    }
}

impl std::ops::Deref for BlockingGraph<'_> {
    type Target = Graph;
    fn deref(&self) -> &Graph {
        &self.graph
    }
}

impl std::ops::DerefMut for BlockingGraph<'_> {
    fn deref_mut(&mut self) -> &mut Graph {
        &mut self.graph
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    #[tokio::test]
    async fn the_runtime_stays_awake_until_the_next_call_begins() {
        let calls = Arc::new(AtomicU64::new(1));
        let mut stay = std::pin::pin!(stay_awake(calls.clone(), 1, Duration::from_secs(60)));
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..3 {
            assert!(
                stay.as_mut().poll(&mut cx).is_pending(),
                "no call has begun"
            );
        }
        calls.fetch_add(1, Ordering::Relaxed);
        assert_eq!(stay.as_mut().poll(&mut cx), Poll::Ready(()));
    }

    #[test]
    fn only_a_caller_calling_again_within_the_linger_is_waited_for() {
        let linger = LINGER.as_nanos() as u64;
        assert!(!back_to_back(u64::MAX, 5), "the first call");
        assert!(back_to_back(1_000, 1_000 + linger / 2));
        assert!(back_to_back(1_000, 1_000 + linger));
        assert!(
            !back_to_back(1_000, 1_000 + 2 * linger),
            "a caller that paused"
        );
    }

    #[tokio::test]
    async fn the_runtime_sleeps_again_after_its_linger() {
        let calls = Arc::new(AtomicU64::new(1));
        let mut stay = std::pin::pin!(stay_awake(calls, 1, Duration::ZERO));
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(stay.as_mut().poll(&mut cx), Poll::Ready(()));
    }
}
