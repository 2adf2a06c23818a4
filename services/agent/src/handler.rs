//! The tarpc face of the agent: each RPC locks the core, asks it, and answers. No decision is
//! made here.

use crate::persist::{points_op, unix_now};
use gridwise_proto::{
    Ack, AgentApi, AgentStatus, CallProfile, CallReport, Candidate, GraphPlan, GraphRequest,
    Heartbeat, LinkInfo, LinkSample, ModelExport, ModelPoint, ModelSummary, RankOptions, Ranking,
    RegisterReply, Registration, RpcError, ServerId, ServiceDesc, ServiceSummary, Ticket,
};
use gridwise_sched::AgentCore;
use gridwise_store::{Op, Writer};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tarpc::context::Context;

/// Shared agent state: the decision core and the instant its clock starts at.
#[derive(Clone)]
pub struct AgentHandler {
    core: Arc<Mutex<AgentCore>>,
    epoch: Instant,
    writer: Option<Arc<Writer>>,
}

impl AgentHandler {
    /// Wraps a core; what it learns is written through `writer`, if any.
    pub fn new(core: AgentCore, writer: Option<Writer>) -> Self {
        Self {
            core: Arc::new(Mutex::new(core)),
            epoch: Instant::now(),
            writer: writer.map(Arc::new),
        }
    }

    fn persist(&self, op: Option<Op>) {
        if let (Some(w), Some(op)) = (&self.writer, op) {
            w.send(op);
        }
    }

    /// Waits until everything learned so far is on disk.
    pub fn flush(&self) {
        if let Some(w) = &self.writer {
            w.flush();
        }
    }

    /// Monotonic time since start: the core's clock.
    pub fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// The core, locked. A panic while holding the lock must not wedge the agent, so a poisoned
    /// lock is taken over: the core's methods leave it consistent between calls.
    pub fn core(&self) -> MutexGuard<'_, AgentCore> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks silent servers down and forgets stale assignments.
    pub fn sweep(&self) {
        let now = self.now();
        let down = self.core().sweep(now);
        for id in down {
            tracing::warn!(server = %id, "no heartbeat within the timeout: marked down");
        }
    }
}

impl AgentApi for AgentHandler {
    async fn register(self, _: Context, reg: Registration) -> Result<RegisterReply, RpcError> {
        let (name, addr) = (reg.name.clone(), reg.addr.clone());
        let r = self.core().register(reg.clone(), self.now());
        match &r {
            Ok(reply) => {
                tracing::info!(server = %reply.server_id, %name, %addr, "server registered");
                for d in &reg.services {
                    self.persist(Some(Op::Service(d.clone())));
                }
                self.persist(Some(Op::Server(reply.server_id, reg, unix_now())));
            }
            Err(e) => tracing::warn!(%name, "registration refused: {e}"),
        }
        r
    }

    async fn heartbeat(self, _: Context, hb: Heartbeat) -> Ack {
        let (ack, name) = {
            let mut core = self.core();
            let ack = core.heartbeat(&hb, self.now());
            (ack, core.server(hb.server_id).map(|e| e.name.clone()))
        };
        // The server's own benchmarks are not load the calls will meet.
        if let (Some(name), false) = (name, hb.load.benchmarking) {
            self.persist(Some(Op::Load(name, unix_now(), hb.load.loadavg_1m)));
        }
        ack
    }

    async fn report(self, _: Context, server: ServerId, reports: Vec<CallReport>) -> Ack {
        let (ack, name, dirty) = {
            let mut core = self.core();
            let ack = core.report(server, &reports, self.now());
            let name = core.server(server).map(|e| e.name.clone());
            (ack, name, core.take_dirty_points())
        };
        if let Some(name) = name {
            self.persist(Some(Op::Timings(name, unix_now(), reports)));
        }
        self.persist(points_op(dirty));
        ack
    }

    async fn list_services(self, _: Context) -> Vec<ServiceSummary> {
        self.core().list_services()
    }

    async fn describe(self, _: Context, service: String) -> Result<ServiceDesc, RpcError> {
        self.core().describe(&service)
    }

    async fn rank(
        self,
        _: Context,
        profile: CallProfile,
        options: RankOptions,
    ) -> Result<Ranking, RpcError> {
        self.core().rank(&profile, &options, self.now())
    }

    async fn explain(
        self,
        _: Context,
        profile: CallProfile,
        options: RankOptions,
    ) -> Result<Vec<Candidate>, RpcError> {
        self.core().explain(&profile, &options, self.now())
    }

    async fn release(self, _: Context, ticket: Ticket) {
        self.core().release(ticket);
    }

    async fn status(self, _: Context) -> AgentStatus {
        self.core().status(self.now())
    }

    async fn model_points(self, _: Context, server: ServerId, points: Vec<ModelPoint>) -> Ack {
        let (ack, dirty) = {
            let mut core = self.core();
            (core.model_points(server, &points), core.take_dirty_points())
        };
        self.persist(points_op(dirty));
        ack
    }

    async fn links(self, _: Context, server: ServerId, samples: Vec<LinkSample>) -> Ack {
        self.core().record_links(server, &samples, self.now())
    }

    async fn link_matrix(self, _: Context) -> Vec<LinkInfo> {
        self.core().link_matrix(self.now())
    }

    async fn sink(self, _: Context, data: serde_bytes::ByteBuf) -> u64 {
        data.len() as u64
    }

    async fn map_graph(self, _: Context, request: GraphRequest) -> Result<GraphPlan, RpcError> {
        let now = self.now();
        self.core().map_graph(&request, now)
    }

    async fn models(self, _: Context) -> Vec<ModelSummary> {
        self.core().models()
    }

    async fn model(
        self,
        _: Context,
        server: String,
        service: String,
    ) -> Result<ModelExport, RpcError> {
        self.core().model(&server, &service)
    }
}
