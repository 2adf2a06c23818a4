//! Task graphs (SmartGridSolve's `grpc_map`): record a block of calls whose inputs may be
//! outputs of earlier calls, have the agent map the whole block at once, and run it with data
//! moving server to server.
//!
//! ```no_run
//! # async fn demo(client: gridwise_client::GridClient) -> Result<(), gridwise_client::GrpcError> {
//! use gridwise_client::Value;
//! let a = Value::matrix_f64(2, 2, &[1.0, 2.0, 3.0, 4.0]);
//! let mut g = client.graph();
//! let c = g.call("dgemm", vec![2.into(), 2.into(), 2.into(), a.clone().into(), a.into()]);
//! let d = g.call("dgemm", vec![2.into(), 2.into(), 2.into(), c.output(0), c.output(0)]);
//! g.fetch(d); // only d's outputs come back; c's stays on its server and is freed
//! let run = g.run().await?;
//! println!("{:?} in {:.3} s", run.outputs(d), run.makespan_s);
//! # Ok(()) }
//! ```
//!
//! What happens in [`Graph::run`]:
//! 1. Every call is checked against its service's description; an argument taken from an
//!    earlier call must have the kind and shape that call's output has.
//! 2. The agent maps the graph ([`GraphPlan`]: server and order per call, predicted timeline)
//!    and reserves each call on its server's queue.
//! 3. Each call goes to its planned server once its inputs exist and the call before it in that
//!    server's order has gone out. Outputs other calls use stay on the server that made them
//!    ([`Value::Ref`]); the consumer's server pulls them from there (all of a call's at once).
//!    A small one (below [`COPY_BELOW_BYTES`]) with a consumer planned on another server also
//!    comes back in its producer's reply, and that consumer is sent the copy: one message
//!    instead of a round trip between servers before its kernel can start.
//!    If the planned server cannot be reached or refuses, the call is ranked afresh like a
//!    single call (and falls back like one).
//! 4. A kept output is freed on its server as soon as its last consumer has finished, unless it
//!    is to be fetched; fetched outputs come back at the end and are then freed too. On failure
//!    every kept output is freed and every unused reservation released. Meanwhile the run renews
//!    the kept outputs it still needs, a few times per their holders' `data_idle_ttl_s`, so a
//!    value may wait for its consumer longer than that limit.

use crate::client::{Attempt, GridClient};
use crate::error::GrpcError;
use crate::handle::Binding;
use gridwise_proto::{
    CallErrorKind, CallId, CallInput, CallProfile, DataHandle, ErrorCode, ExecuteRequest,
    GraphPlan, GraphRequest, RecordedCall, RemoteRef, ServiceDesc, Ticket, Timing, Value,
    check_graph,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Kept outputs below this size come back with their reply too, when a consumer is planned on
/// another server, which is then sent the copy instead of pulling it from the producer's
/// server. The copy crosses the client's link twice where a pull crosses a server link once,
/// but the pull's round trip goes: 0.2–0.4 ms between busy servers on one host (`bench
/// schedule`'s Cholesky, whose calls' inputs then reached them in 0.11 ms instead of 0.45).
/// 16 KiB takes 0.13 ms each way at 1 Gbit/s, far less on faster links.
pub const COPY_BELOW_BYTES: u64 = 16 * 1024;

/// An argument of a graph call: a value the client sends, or an output of an earlier call.
#[derive(Clone, Debug, PartialEq)]
pub enum GraphArg {
    /// Sent by the client.
    Value(Value),
    /// Output number `output` (over the producer's OUT and INOUT arguments) of `call`.
    Output {
        /// A call recorded before the consumer in the same graph (checked when the graph is
        /// planned or run).
        call: CallRef,
        /// From 0; that output's kind and shape must fit the argument it feeds.
        output: usize,
    },
}

impl From<Value> for GraphArg {
    fn from(v: Value) -> Self {
        GraphArg::Value(v)
    }
}

impl From<i64> for GraphArg {
    fn from(v: i64) -> Self {
        GraphArg::Value(Value::Int(v))
    }
}

impl From<f64> for GraphArg {
    fn from(v: f64) -> Self {
        GraphArg::Value(Value::Double(v))
    }
}

/// A call recorded in a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallRef(usize);

impl CallRef {
    /// Its `k`-th output (over the service's OUT and INOUT arguments), as a later call's input.
    pub fn output(self, k: usize) -> GraphArg {
        GraphArg::Output {
            call: self,
            output: k,
        }
    }

    /// Its position in the graph (submission order, from 0).
    pub fn index(self) -> usize {
        self.0
    }
}

#[derive(Clone, Debug)]
struct Recorded {
    name: String,
    service: String,
    args: Vec<GraphArg>,
}

/// A block of calls recorded for mapping as a whole. Recording never fails; everything is
/// checked when the graph is planned or run.
#[derive(Clone, Debug)]
pub struct Graph {
    client: GridClient,
    calls: Vec<Recorded>,
    fetch: Vec<usize>,
    policy: Option<String>,
    conservative_tf: Option<f64>,
    load_model: Option<gridwise_proto::LoadModel>,
    link_blind: bool,
}

/// How one call of a run went.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRecord {
    /// `service#i`, unless the call was recorded with [`Graph::call_named`].
    pub name: String,
    /// The server that ran it.
    pub server: String,
    /// Whether it ran somewhere other than planned (its planned server failed).
    pub fell_back: bool,
    /// When it started running, s from the start of the run (end minus the server's time
    /// after the queue: pulling inputs, kernel, replying).
    pub start_s: f64,
    /// When the server finished it, s from the start of the run.
    pub end_s: f64,
    /// As the server measured it; `start_s` is derived from it.
    pub timing: Timing,
    /// When the client sent it, s from the start of the run.
    pub sent_s: f64,
    /// When its reply reached the client, s from the start of the run.
    pub reply_s: f64,
}

/// A finished graph run.
#[derive(Clone, Debug)]
pub struct GraphRun {
    /// The agent's mapping and prediction.
    pub plan: GraphPlan,
    /// Indexed by [`CallRef::index`].
    pub calls: Vec<CallRecord>,
    /// From the first call sent to the last reply, s.
    pub makespan_s: f64,
    /// Kept outputs freed on the servers.
    pub freed: u32,
    outputs: HashMap<usize, Vec<Value>>,
}

impl GraphRun {
    /// The outputs of a fetched call (None for calls whose outputs stayed on the servers).
    pub fn outputs(&self, c: CallRef) -> Option<&[Value]> {
        self.outputs.get(&c.0).map(Vec::as_slice)
    }
}

/// A graph checked against the descriptions, ready to map.
struct Prepared {
    request: GraphRequest,
    descs: Vec<Arc<ServiceDesc>>,
    /// Per call, the indices of the calls that use its outputs (each once).
    consumers: Vec<Vec<usize>>,
    /// Per call, the calls whose outputs it uses (each once).
    producers: Vec<Vec<usize>>,
}

fn invalid(message: String) -> GrpcError {
    GrpcError::new(ErrorCode::OtherErrorCode, message)
}

impl GridClient {
    /// A new, empty task graph on this grid: record calls with [`Graph::call`], then
    /// [`Graph::run`] maps them as a whole and runs them (see this module).
    pub fn graph(&self) -> Graph {
        Graph::new(self.clone())
    }
}

impl Graph {
    pub(crate) fn new(client: GridClient) -> Graph {
        Graph {
            client,
            calls: Vec::new(),
            fetch: Vec::new(),
            policy: None,
            conservative_tf: None,
            load_model: None,
            link_blind: false,
        }
    }

    /// Records a call of `service` with its IN and INOUT arguments in order; named
    /// `service#i` after its position.
    pub fn call(&mut self, service: &str, args: Vec<GraphArg>) -> CallRef {
        let name = format!("{service}#{}", self.calls.len());
        self.call_named(&name, service, args)
    }

    /// Records a call under a name of your own (for messages and charts).
    pub fn call_named(&mut self, name: &str, service: &str, args: Vec<GraphArg>) -> CallRef {
        self.calls.push(Recorded {
            name: name.to_string(),
            service: service.to_string(),
            args,
        });
        CallRef(self.calls.len() - 1)
    }

    /// Brings `c`'s outputs back to the client when the graph has run. Without any `fetch`,
    /// the outputs of the calls no other call uses come back.
    pub fn fetch(&mut self, c: CallRef) {
        if !self.fetch.contains(&c.0) {
            self.fetch.push(c.0);
        }
    }

    /// Maps the graph with this policy (`heft`, `min-min`, `mct`, `sufferage`, `lp`,
    /// `round-robin`, `constant-speed`) instead of the agent's default for its shape.
    pub fn policy(&mut self, policy: &str) {
        self.policy = Some(policy.to_string());
    }

    /// Maps by each call's time `tf` standard deviations above its mean (seed 000's
    /// conservative scheduling): calls keep off servers whose times are uncertain.
    pub fn conservative(&mut self, tf: f64) {
        self.conservative_tf = Some(tf);
    }

    /// Estimates with this load model instead of the agent's default (`blind` ignores load).
    pub fn load_model(&mut self, load: gridwise_proto::LoadModel) {
        self.load_model = Some(load);
    }

    /// Maps as if data moved between servers for free, and predicts that mapping with the
    /// links as they are: to see what the links the agent learned are worth.
    pub fn link_blind(&mut self) {
        self.link_blind = true;
    }

    /// Calls recorded so far: also the [`CallRef::index`] the next call will get.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// An empty graph cannot be planned or run.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The agent's mapping and predicted timeline, without running anything.
    pub async fn plan(&self) -> Result<GraphPlan, GrpcError> {
        let p = self.prepare(false).await?;
        self.client.inner.conn.map_graph(&p.request).await
    }

    /// Checks every call ([`check_graph`]) and builds the agent's request.
    async fn prepare(&self, reserve: bool) -> Result<Prepared, GrpcError> {
        let mut descs: Vec<Arc<ServiceDesc>> = Vec::with_capacity(self.calls.len());
        for c in &self.calls {
            let desc = self
                .client
                .inner
                .conn
                .desc(&c.service)
                .await
                .map_err(|e| invalid(format!("call `{}`: {}", c.name, e.message)))?;
            descs.push(desc);
        }
        let recorded: Vec<RecordedCall<'_>> = self
            .calls
            .iter()
            .zip(&descs)
            .map(|(c, desc)| RecordedCall {
                name: &c.name,
                desc,
                inputs: c
                    .args
                    .iter()
                    .map(|a| match a {
                        GraphArg::Value(v) => CallInput::Value(v),
                        GraphArg::Output { call, output } => CallInput::Output {
                            call: call.0,
                            output: *output,
                        },
                    })
                    .collect(),
            })
            .collect();
        let policy = self
            .policy
            .as_deref()
            .map(str::parse::<gridwise_proto::GraphPolicy>)
            .transpose()
            .map_err(|e| invalid(e.to_string()))?;
        let checked = check_graph(&recorded, policy, reserve).map_err(invalid)?;
        for &f in &self.fetch {
            if f >= self.calls.len() {
                return Err(invalid(format!(
                    "fetch: call #{f} is not in this graph ({} calls)",
                    self.calls.len()
                )));
            }
        }
        let mut request = checked.request;
        if !self.fetch.is_empty() {
            for (i, c) in request.calls.iter_mut().enumerate() {
                c.fetched = self.fetch.contains(&i);
            }
        }
        request.conservative_tf = self.conservative_tf;
        request.load_model = self.load_model;
        request.link_blind = self.link_blind;
        Ok(Prepared {
            request,
            descs,
            consumers: checked.consumers,
            producers: checked.producers,
        })
    }

    /// Each call as its task runs it: its producers, the call before it on its server, where
    /// and under which ticket it runs, which outputs stay on the server (and which are copied
    /// to consumers elsewhere); with the call after each one on its server.
    fn specs(
        &self,
        prepared: &Prepared,
        plan: &GraphPlan,
        wanted: &[bool],
    ) -> (Vec<Spec>, Vec<Option<usize>>) {
        let n = self.calls.len();
        // The calls before and after each one in its server's order.
        let mut before: Vec<Option<usize>> = vec![None; n];
        let mut after: Vec<Option<usize>> = vec![None; n];
        for order in &plan.order {
            for w in order.windows(2) {
                before[w[1] as usize] = Some(w[0] as usize);
                after[w[0] as usize] = Some(w[1] as usize);
            }
        }
        let specs: Vec<Spec> = (0..n)
            .map(|i| Spec {
                name: self.calls[i].name.clone(),
                service: self.calls[i].service.clone(),
                args: self.calls[i].args.clone(),
                desc: prepared.descs[i].clone(),
                producers: prepared.producers[i].clone(),
                before: before[i],
                server: plan.servers[plan.server_of[i] as usize].clone(),
                ticket: plan.tickets[i],
                copy_below: if prepared.consumers[i]
                    .iter()
                    .any(|&c| plan.server_of[c] != plan.server_of[i])
                {
                    COPY_BELOW_BYTES
                } else {
                    0
                },
                keep: if wanted[i] && prepared.consumers[i].is_empty() {
                    Vec::new()
                } else {
                    (0..prepared.descs[i].outputs().count() as u32).collect()
                },
            })
            .collect();
        (specs, after)
    }

    /// The requested outputs, brought back (one whose holder lost it is made again first),
    /// and the kept values fetched (to free); nothing once the graph failed.
    async fn fetch_wanted(
        &self,
        shared: &Arc<Shared>,
        wanted: &[bool],
    ) -> (HashMap<usize, Vec<Value>>, Vec<RemoteRef>) {
        let mut fetched = HashMap::new();
        let mut kept = Vec::new();
        for i in (0..wanted.len()).filter(|&i| wanted[i]) {
            let back = loop {
                let vals = {
                    let st = lock(&shared.state);
                    if st.failed.is_some() {
                        break None;
                    }
                    st.outputs[i].clone()
                };
                let Some(vals) = vals else { break None };
                match fetch_all(&self.client, &vals).await {
                    Ok((back, refs)) => {
                        kept.extend(refs);
                        break Some(back);
                    }
                    Err(e) => {
                        tracing::warn!(call = %self.calls[i].name, "its output is lost ({}): making it again", e.message);
                        let refs: Vec<DataHandle> = refs(&vals).map(|r| r.handle).collect();
                        shared.lost(&refs, &[i]);
                        shared.join_all().await;
                    }
                }
            };
            if let Some(back) = back {
                fetched.insert(i, back);
            }
        }
        (fetched, kept)
    }

    /// Maps the graph, runs it and brings back the fetched outputs (see the module docs).
    pub async fn run(self) -> Result<GraphRun, GrpcError> {
        let prepared = self.prepare(true).await?;
        let inner = &self.client.inner;
        let plan = inner.conn.map_graph(&prepared.request).await?;
        let n = self.calls.len();
        if plan.server_of.len() != n || plan.tickets.len() != n {
            return Err(invalid(format!(
                "the agent's plan covers {} calls with {} tickets for a graph of {n}",
                plan.server_of.len(),
                plan.tickets.len()
            )));
        }
        let wanted: Vec<bool> = prepared.request.calls.iter().map(|c| c.fetched).collect();
        let (specs, after) = self.specs(&prepared, &plan, &wanted);
        let t0 = Instant::now();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                outputs: vec![None; n],
                copies: vec![Vec::new(); n],
                dispatched: vec![false; n],
                left: prepared.consumers.iter().map(Vec::len).collect(),
                records: vec![None; n],
                runs: vec![0; n],
                failed: None,
                freed: 0,
            }),
            wake: (0..n).map(|_| Notify::new()).collect(),
            consumers: prepared.consumers.clone(),
            next: after,
            wanted: wanted.clone(),
            specs,
            client: self.client.clone(),
            t0,
            tasks: Mutex::new(tokio::task::JoinSet::new()),
        });
        for i in 0..n {
            shared.spawn(i, false);
        }
        // Holders free what nobody touches for a while; what this graph keeps stays touched.
        let renewer = inner
            .rt
            .spawn(renew_kept(shared.clone(), self.client.clone()));
        let _stop_renewing = AbortOnDrop(renewer);
        shared.join_all().await;
        let makespan_s = t0.elapsed().as_secs_f64();

        let (fetched, kept) = self.fetch_wanted(&shared, &wanted).await;

        let (failed, outputs, records, mut freed) = {
            let mut st = lock(&shared.state);
            (
                st.failed.take(),
                std::mem::take(&mut st.outputs),
                std::mem::take(&mut st.records),
                st.freed,
            )
        };
        if let Some(err) = failed {
            let mut kept = kept;
            for (i, o) in outputs.iter().enumerate() {
                match o {
                    Some(vals) => kept.extend(refs(vals)),
                    None => {
                        let _ = inner.conn.release(plan.tickets[i]).await;
                    }
                }
            }
            let _ = self.client.free(&kept).await;
            return Err(err);
        }
        freed += self.client.free(&kept).await.unwrap_or(0);
        let calls = records
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| CallRecord {
                    name: self.calls[i].name.clone(),
                    server: String::new(),
                    fell_back: false,
                    start_s: 0.0,
                    end_s: 0.0,
                    timing: Timing::default(),
                    sent_s: 0.0,
                    reply_s: 0.0,
                })
            })
            .collect();
        Ok(GraphRun {
            plan,
            calls,
            makespan_s,
            freed,
            outputs: fetched,
        })
    }
}

/// Brings back every value of `vals` (kept ones from their holders): the values, and the
/// references fetched (to free).
async fn fetch_all(
    client: &GridClient,
    vals: &[Value],
) -> Result<(Vec<Value>, Vec<RemoteRef>), GrpcError> {
    let mut back = Vec::with_capacity(vals.len());
    let mut fetched = Vec::new();
    for v in vals {
        match v {
            Value::Ref(r) => {
                back.push(client.fetch(r).await?);
                fetched.push(r.clone());
            }
            v => back.push(v.clone()),
        }
    }
    Ok((back, fetched))
}

/// Renews the graph's kept values that are still to be used or fetched, a few times per their
/// holders' idle limit, until aborted.
async fn renew_kept(shared: Arc<Shared>, client: GridClient) {
    loop {
        let live: Vec<RemoteRef> = {
            let st = lock(&shared.state);
            st.outputs
                .iter()
                .enumerate()
                .filter(|(i, _)| shared.still_needed(&st, *i))
                .filter_map(|(_, o)| o.as_deref())
                .flat_map(refs)
                .collect()
        };
        let ttl_ms = live.iter().map(|r| r.idle_ttl_ms).filter(|&t| t > 0).min();
        if ttl_ms.is_some() {
            // A failed renewal is not the graph's failure: the consumer will say what is gone.
            let _ = client.renew(&live).await;
        }
        let every = ttl_ms.map_or(Duration::from_millis(100), |t| Duration::from_millis(t / 4));
        tokio::time::sleep(every.clamp(Duration::from_millis(20), Duration::from_secs(60))).await;
    }
}

/// Aborts a task when dropped, so every way out of a run stops it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn refs(vals: &[Value]) -> impl Iterator<Item = RemoteRef> + '_ {
    vals.iter().filter_map(|v| match v {
        Value::Ref(r) => Some(r.clone()),
        _ => None,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How many times one call may run: its first run, and remaking its outputs after they were
/// lost (each loss needs a server holding them to die or restart).
const MAX_RUNS: u32 = 4;

struct State {
    /// Each finished call's outputs (kept ones as [`Value::Ref`]); `None` again while lost
    /// outputs are being made again.
    outputs: Vec<Option<Vec<Value>>>,
    /// Copies of each call's small kept outputs, by position, while they are needed: a
    /// consumer on another server is sent the copy, not the reference.
    copies: Vec<Vec<(u32, Value)>>,
    dispatched: Vec<bool>,
    /// Runs of each call's consumers that have not finished yet (a consumer run again to remake
    /// a lost value counts again): its kept outputs are needed while positive.
    left: Vec<usize>,
    records: Vec<Option<CallRecord>>,
    /// Runs started per call.
    runs: Vec<u32>,
    failed: Option<GrpcError>,
    freed: u32,
}

/// What one call of the graph is, whichever run of it.
struct Spec {
    name: String,
    service: String,
    args: Vec<GraphArg>,
    desc: Arc<ServiceDesc>,
    producers: Vec<usize>,
    before: Option<usize>,
    server: gridwise_proto::PlannedServer,
    ticket: Ticket,
    keep: Vec<u32>,
    /// [`COPY_BELOW_BYTES`] when a consumer is planned on another server, else 0.
    copy_below: u64,
}

struct Shared {
    state: Mutex<State>,
    /// One wake-up per call: a call is woken only by what it waits for (an input, its turn on
    /// the server, or a failure), so a large graph does not wake every call on every event.
    wake: Vec<Notify>,
    consumers: Vec<Vec<usize>>,
    next: Vec<Option<usize>>,
    /// Whether each call's outputs come back to the client.
    wanted: Vec<bool>,
    specs: Vec<Spec>,
    client: GridClient,
    t0: Instant,
    tasks: Mutex<tokio::task::JoinSet<()>>,
}

impl Shared {
    /// Whether call `i`'s kept outputs are still to be used by a consumer or fetched: kept and
    /// renewed while true, freed once false.
    fn still_needed(&self, st: &State, i: usize) -> bool {
        st.left[i] > 0 || self.wanted[i]
    }

    fn wake_all(&self) {
        for w in &self.wake {
            w.notify_one();
        }
    }

    /// Starts a run of call `i`: its first (in plan order, on its planned server), or a run to
    /// make its lost outputs again (ranked afresh).
    fn spawn(self: &Arc<Self>, i: usize, again: bool) {
        let job = Job {
            i,
            shared: self.clone(),
            again,
        };
        lock(&self.tasks).spawn_on(job.run(), &self.client.inner.rt);
    }

    /// Waits until no run is in flight (runs may start more runs meanwhile).
    async fn join_all(&self) {
        loop {
            let mut set = std::mem::take(&mut *lock(&self.tasks));
            if set.is_empty() {
                return;
            }
            while set.join_next().await.is_some() {}
        }
    }

    /// The values `handles` are gone (their holder died or restarted) and `consumers` need
    /// them: every call that made one runs again, unless it already does. Each run again of a
    /// producer also counts as a consumer of its own producers, so they keep their outputs.
    fn lost(self: &Arc<Self>, handles: &[DataHandle], consumers: &[usize]) {
        let mut again = Vec::new();
        {
            let mut st = lock(&self.state);
            let mut producers: Vec<usize> = consumers
                .iter()
                .flat_map(|&c| self.specs[c].producers.iter().copied())
                .collect();
            // A call whose own outputs were lost (at the final fetch) is its own producer.
            producers.extend(consumers.iter().filter(|&&c| {
                st.outputs[c]
                    .as_deref()
                    .is_some_and(|o| refs(o).any(|r| handles.contains(&r.handle)))
            }));
            producers.sort_unstable();
            producers.dedup();
            for p in producers {
                let holds_lost = st.outputs[p].as_deref().is_some_and(|o| {
                    refs(o).any(|r| handles.is_empty() || handles.contains(&r.handle))
                });
                if !holds_lost {
                    continue;
                }
                if st.runs[p] >= MAX_RUNS {
                    if st.failed.is_none() {
                        st.failed = Some(GrpcError::communication(format!(
                            "graph call `{}`: its outputs were lost {} times (the servers holding them died or restarted); giving up",
                            self.specs[p].name, st.runs[p]
                        )));
                    }
                    continue;
                }
                st.outputs[p] = None;
                st.copies[p] = Vec::new();
                for &pp in &self.specs[p].producers {
                    st.left[pp] += 1;
                }
                again.push(p);
            }
        }
        for p in again {
            tracing::info!(call = %self.specs[p].name, "its outputs were lost: running it again");
            self.spawn(p, true);
        }
        if lock(&self.state).failed.is_some() {
            self.wake_all();
        }
    }
}

/// Output `output` of call `producer` as an input for a call on server `to` (`None`: not
/// known): its copy where it is held on another server and was small enough to come back,
/// else the value or reference as returned.
fn input_from(st: &State, producer: usize, output: usize, to: Option<&str>) -> Value {
    let Some(v) = st.outputs[producer].as_ref().and_then(|o| o.get(output)) else {
        return Value::Int(0);
    };
    if let Value::Ref(r) = v
        && to != Some(r.holder.as_str())
        && let Some((_, copy)) = st.copies[producer]
            .iter()
            .find(|(k, _)| *k as usize == output)
    {
        return copy.clone();
    }
    v.clone()
}

/// What a run brought back: its outputs, copies of the small kept ones, where it ran and
/// whether that was elsewhere than planned.
struct Ran {
    outputs: Vec<Value>,
    copies: Vec<(u32, Value)>,
    server: String,
    timing: Timing,
    fell_back: bool,
}

/// One run of one call, from waiting for its inputs to freeing what it no longer needs.
struct Job {
    i: usize,
    shared: Arc<Shared>,
    /// A run to make lost outputs again: no turn to wait for, ranked afresh.
    again: bool,
}

enum Ready {
    Go(Vec<Value>),
    Abandon,
}

enum Outcome {
    Ran(Ran),
    Lost(Vec<DataHandle>),
    Failed(GrpcError),
}

impl Job {
    fn spec(&self) -> &Spec {
        &self.shared.specs[self.i]
    }

    async fn run(self) {
        let shared = self.shared.clone();
        loop {
            let inputs = match self.wait_ready().await {
                Ready::Go(inputs) => inputs,
                Ready::Abandon => return,
            };
            lock(&shared.state).runs[self.i] += 1;
            let sent = shared.t0.elapsed().as_secs_f64();
            let result = self.execute(inputs).await;
            let reply = shared.t0.elapsed().as_secs_f64();
            match result {
                Outcome::Ran(ran) => {
                    self.finish(ran, sent, reply).await;
                    return;
                }
                Outcome::Lost(handles) => {
                    // Its inputs are made again; then it runs again.
                    shared.lost(&handles, &[self.i]);
                }
                Outcome::Failed(e) => {
                    let mut st = lock(&shared.state);
                    if st.failed.is_none() {
                        st.failed = Some(GrpcError::new(
                            e.code,
                            format!("graph call `{}` failed: {}", self.spec().name, e.message),
                        ));
                    }
                    drop(st);
                    shared.wake_all();
                    return;
                }
            }
        }
    }

    /// Records a run's outputs, frees what nothing needs any more, wakes the consumers.
    async fn finish(&self, ran: Ran, sent: f64, reply: f64) {
        let Ran {
            outputs,
            copies,
            server,
            timing,
            fell_back,
        } = ran;
        let shared = &self.shared;
        let mut to_free = Vec::new();
        {
            let mut st = lock(&shared.state);
            // On one host the server's clock is the client's: the call ended when the server
            // replied, and ran for the server's time after its queue.
            let end = (sent + timing.input_transfer_s + timing.server_s).min(reply);
            let start = (end - (timing.server_s - timing.queue_wait_s).max(0.0)).max(sent);
            st.records[self.i] = Some(CallRecord {
                name: self.spec().name.clone(),
                server,
                fell_back: fell_back || self.again,
                start_s: start,
                end_s: end,
                timing,
                sent_s: sent,
                reply_s: reply,
            });
            st.outputs[self.i] = Some(outputs);
            st.copies[self.i] = copies;
            for &p in &self.spec().producers {
                st.left[p] = st.left[p].saturating_sub(1);
                if !shared.still_needed(&st, p)
                    && let Some(vals) = &st.outputs[p]
                {
                    to_free.extend(refs(vals));
                    st.copies[p] = Vec::new();
                }
            }
            // Nothing uses this call's outputs and nobody wants them.
            if !shared.still_needed(&st, self.i)
                && let Some(vals) = &st.outputs[self.i]
            {
                to_free.extend(refs(vals));
            }
        }
        for &c in &shared.consumers[self.i] {
            shared.wake[c].notify_one();
        }
        if !to_free.is_empty()
            && let Ok(k) = shared.client.free(&to_free).await
        {
            lock(&shared.state).freed += k;
        }
    }

    /// Waits until the inputs exist and (for a first run) the call before it on its server
    /// has gone out; returns its inputs.
    async fn wait_ready(&self) -> Ready {
        let shared = &self.shared;
        loop {
            {
                let mut st = lock(&shared.state);
                if st.failed.is_some() {
                    return Ready::Abandon;
                }
                let spec = self.spec();
                let inputs_ready = spec.producers.iter().all(|&p| st.outputs[p].is_some());
                let turn = self.again
                    || st.dispatched[self.i]
                    || spec.before.is_none_or(|b| st.dispatched[b]);
                if inputs_ready && turn {
                    let first = !st.dispatched[self.i];
                    st.dispatched[self.i] = true;
                    // A run again is ranked afresh: its server is not known yet.
                    let to = (!self.again).then_some(spec.server.addr.as_str());
                    let inputs = spec
                        .args
                        .iter()
                        .map(|a| match a {
                            GraphArg::Value(v) => v.clone(),
                            GraphArg::Output { call, output } => {
                                input_from(&st, call.0, *output, to)
                            }
                        })
                        .collect();
                    drop(st);
                    // The next call on this server may go now.
                    if first && let Some(next) = shared.next[self.i] {
                        shared.wake[next].notify_one();
                    }
                    return Ready::Go(inputs);
                }
            }
            // A wake-up sent since the check above is stored as a permit, so none is missed.
            shared.wake[self.i].notified().await;
        }
    }

    /// Sends a first run to its planned server; if that server cannot take it (or for a run
    /// again), ranks it afresh like a single call.
    async fn execute(&self, inputs: Vec<Value>) -> Outcome {
        let spec = self.spec();
        let inner = &self.shared.client.inner;
        let mut crashes = Vec::new();
        if !self.again {
            let who = format!("{} ({})", spec.server.name, spec.server.addr);
            let req = ExecuteRequest {
                call_id: CallId::new_random(),
                ticket: Some(spec.ticket),
                service: spec.service.clone(),
                inputs: Vec::new(),
                sent_at_unix_ns: 0,
                keep_outputs: spec.keep.clone(),
                reply_limit_bytes: inner.conn.max_frame_bytes() as u64,
                bulk_outputs: true,
                copy_kept_below_bytes: spec.copy_below,
            };
            match inner
                .attempt(&spec.server.addr, &who, (req, &inputs), None, None)
                .await
            {
                Attempt::Done(rep, _) => {
                    return Outcome::Ran(Ran {
                        outputs: rep.outputs,
                        copies: rep.copies,
                        server: rep.server,
                        timing: rep.timing,
                        fell_back: false,
                    });
                }
                Attempt::Failed(e, _) if e.kind == CallErrorKind::InputLost => {
                    return Outcome::Lost(e.lost);
                }
                Attempt::Failed(_, g) => return Outcome::Failed(g),
                Attempt::NotRun(why) | Attempt::Moved(why) => {
                    tracing::debug!(call = %spec.name, "planned server did not take it, ranking afresh: {why}");
                }
                Attempt::Unreached(why) => {
                    tracing::debug!(call = %spec.name, "planned server unreachable, ranking afresh: {why}");
                    inner
                        .tell_unreachable(spec.ticket, spec.server.server_id, &spec.server.addr)
                        .await;
                }
                Attempt::Silent(why) => {
                    tracing::warn!(call = %spec.name, "{why}; ranking afresh");
                    inner
                        .tell_unreachable(spec.ticket, spec.server.server_id, &spec.server.addr)
                        .await;
                }
                Attempt::Crashed(why) => {
                    tracing::warn!(call = %spec.name, "{why}; ranking afresh");
                    crashes.push(why);
                }
            }
            inner.release_later(spec.ticket);
        }
        let profile: CallProfile = match spec.desc.profile(&inputs) {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(e.into()),
        };
        match inner
            .run_call(
                &spec.service,
                &Binding::Default,
                profile,
                &inputs,
                None,
                spec.keep.clone(),
                crashes,
            )
            .await
        {
            Ok(r) => Outcome::Ran(Ran {
                outputs: r.outputs,
                copies: Vec::new(),
                server: r.server,
                timing: r.timing,
                fell_back: true,
            }),
            Err(f) if !f.lost.is_empty() => Outcome::Lost(f.lost),
            Err(f) => Outcome::Failed(f.error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_on(holder: &str) -> Value {
        Value::Ref(RemoteRef {
            handle: DataHandle::new_random(),
            holder: holder.into(),
            bytes: 8,
            kind: "vector<f64>[1]".into(),
            idle_ttl_ms: 1000,
        })
    }

    fn state(outputs: Vec<Vec<Value>>, copies: Vec<Vec<(u32, Value)>>) -> State {
        let n = outputs.len();
        State {
            outputs: outputs.into_iter().map(Some).collect(),
            copies,
            dispatched: vec![false; n],
            left: vec![1; n],
            records: vec![None; n],
            runs: vec![1; n],
            failed: None,
            freed: 0,
        }
    }

    #[test]
    fn a_consumer_elsewhere_gets_the_copy_and_one_on_the_holder_the_reference() {
        let copy = Value::vector_f64(&[2.5]);
        let (kept, other) = (held_on("a:1"), held_on("a:1"));
        let st = state(
            vec![vec![kept.clone(), other.clone()], vec![Value::Int(3)]],
            vec![vec![(0, copy.clone())], Vec::new()],
        );
        assert_eq!(input_from(&st, 0, 0, Some("b:2")), copy);
        assert_eq!(input_from(&st, 0, 0, Some("a:1")), kept);
        // Not known where it runs (ranked afresh): the copy, valid anywhere.
        assert_eq!(input_from(&st, 0, 0, None), copy);
        // No copy of that output (too large, or none asked for): the reference.
        assert_eq!(input_from(&st, 0, 1, Some("b:2")), other);
        // Returned whole in the first place.
        assert_eq!(input_from(&st, 1, 0, Some("b:2")), Value::Int(3));
    }
}
