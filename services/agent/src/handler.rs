//! The tarpc face of the agent: each RPC locks the core, asks it, and answers. No decision is
//! made here.

use gridwise_proto::{
    Ack, AgentApi, AgentStatus, CallProfile, CallReport, Candidate, Heartbeat, RankOptions,
    Ranking, RegisterReply, Registration, RpcError, ServerId, ServiceDesc, ServiceSummary, Ticket,
};
use gridwise_sched::AgentCore;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tarpc::context::Context;

/// Shared agent state: the decision core and the instant its clock starts at.
#[derive(Clone)]
pub struct AgentHandler {
    core: Arc<Mutex<AgentCore>>,
    epoch: Instant,
}

impl AgentHandler {
    /// Wraps a core.
    pub fn new(core: AgentCore) -> Self {
        Self {
            core: Arc::new(Mutex::new(core)),
            epoch: Instant::now(),
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
        let r = self.core().register(reg, self.now());
        match &r {
            Ok(reply) => {
                tracing::info!(server = %reply.server_id, %name, %addr, "server registered")
            }
            Err(e) => tracing::warn!(%name, "registration refused: {e}"),
        }
        r
    }

    async fn heartbeat(self, _: Context, hb: Heartbeat) -> Ack {
        self.core().heartbeat(&hb, self.now())
    }

    async fn report(self, _: Context, server: ServerId, reports: Vec<CallReport>) -> Ack {
        self.core().report(server, &reports, self.now())
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
}
