//! The tarpc services: what the agent and the servers answer.

use crate::error::{CallError, RpcError};
use crate::graph::{GraphPlan, GraphRequest};
use crate::ids::{CallId, DataHandle, ServerId, Ticket};
use crate::messages::*;
use crate::service::ServiceDesc;
use crate::value::Value;

/// The agent: registry, ranking, reports, status.
#[tarpc::service]
pub trait AgentApi {
    /// A server joins (or re-joins under the same name).
    async fn register(reg: Registration) -> Result<RegisterReply, RpcError>;
    /// A server is alive, with its load.
    async fn heartbeat(hb: Heartbeat) -> Ack;
    /// A server's finished calls (batched).
    async fn report(server: ServerId, reports: Vec<CallReport>) -> Ack;
    /// Every service in the catalog, with how many live servers offer it now (possibly none).
    async fn list_services() -> Vec<ServiceSummary>;
    /// One service's description, for checking and packing arguments.
    async fn describe(service: String) -> Result<ServiceDesc, RpcError>;
    /// Ranks the live servers for a call and records the assignment to the first.
    async fn rank(profile: CallProfile, options: RankOptions) -> Result<Ranking, RpcError>;
    /// Like `rank`, but records nothing: every candidate's ETC breakdown.
    async fn explain(
        profile: CallProfile,
        options: RankOptions,
    ) -> Result<Vec<Candidate>, RpcError>;
    /// The client gives up an assignment it holds without running it anywhere.
    async fn release(ticket: Ticket);
    /// Servers, their state and queues.
    async fn status() -> AgentStatus;
    /// Points a server's model builder measured (streamed as they arrive).
    async fn model_points(server: ServerId, points: Vec<ModelPoint>) -> Ack;
    /// Every (server, service) model the agent holds.
    async fn models() -> Vec<ModelSummary>;
    /// One model, in full.
    async fn model(server: String, service: String) -> Result<ModelExport, RpcError>;
    /// Links a server measured to its peers.
    async fn links(server: ServerId, samples: Vec<LinkSample>) -> Ack;
    /// Calls that just reached a server, told every agent of a shared grid at once (as reports
    /// are) so that none waits for the next heartbeat to see what the others placed there.
    async fn arrived(server: ServerId, calls: Vec<InFlight>) -> Ack;
    /// Every measured link.
    async fn link_matrix() -> Vec<LinkInfo>;
    /// Swallows bytes: a server times it to measure its link to the agent.
    async fn sink(data: serde_bytes::ByteBuf) -> u64;
    /// Maps a whole task graph at once; with `reserve`, records every call as an assignment.
    async fn map_graph(request: GraphRequest) -> Result<GraphPlan, RpcError>;
    /// Plans a divisible job: which servers, and how many units each.
    async fn divide(
        request: crate::divide::DivideRequest,
    ) -> Result<crate::divide::DivideReply, RpcError>;
    /// A client could not reach `server`, one of the candidates of the ranking that gave it
    /// `ticket` (still pending): the agent ranks that server behind the others for a while
    /// instead of waiting for its heartbeat timeout.
    async fn unreachable(ticket: Ticket, server: ServerId);
    /// A server this client reported unreachable answers it again (a partition healed): the
    /// agent ends the suspicion the report set, so the server is used again at once.
    async fn reachable(server: ServerId);
    /// The call of `ticket` goes to `server`, a candidate of its ranking other than the one
    /// its reservation is on (that one could not be reached, or the client holds it
    /// unresponsive): the reservation follows the call, so the agent's queues hold it where it
    /// runs, not on a server that will never see it.
    async fn placed(ticket: Ticket, server: ServerId);
    /// The client brought `bytes` of a kept output back from the server at `holder` in
    /// `seconds`: the reply leg of that server's client link, which calls whose inputs are
    /// small or pulled from other servers never show (a graph's fetched 2 MB output over a
    /// 20 Mbit/s link was predicted at 2 ms from 50-byte requests, once at 45 s).
    async fn fetched(holder: String, bytes: u64, seconds: f64);
}

/// A compute server: runs calls.
#[tarpc::service]
pub trait ServerApi {
    /// Who the server is and what it offers.
    async fn hello() -> ServerInfo;
    /// Runs one call (waiting for a free slot first).
    async fn execute(req: ExecuteRequest) -> Result<ExecuteReply, CallError>;
    /// Cancels a queued or running call of the asking client; false if the server does not
    /// know it (or it is someone else's).
    async fn cancel(call: CallId) -> bool;
    /// Takes back a call of the asking client that has not started (waiting for a slot or
    /// pulling its inputs), to send it to another server: true if it will not run here (its
    /// `execute` then ends as cancelled), false if it has started or is unknown here.
    async fn withdraw(call: CallId) -> bool;
    /// Liveness and load.
    async fn ping() -> Pong;
    /// A value this server keeps for the asking client (clients fetch only their own).
    async fn fetch(handle: DataHandle) -> Result<Value, CallError>;
    /// A value kept for `owner`, pulled by another server running a call of that owner
    /// (servers only).
    async fn pull(handle: DataHandle, owner: String) -> Result<Value, CallError>;
    /// Forgets the asking client's kept values; returns how many it held.
    async fn free(handles: Vec<DataHandle>) -> u32;
    /// Marks the asking client's kept values as used now, restarting their idle limit;
    /// returns how many it holds.
    async fn renew(handles: Vec<DataHandle>) -> u32;
    /// Takes bytes and says how many arrived: the far end of a bandwidth probe.
    async fn sink(data: serde_bytes::ByteBuf) -> u64;
    /// The asking client brought `bytes` of a value kept here back in `seconds` (the reply leg
    /// of this server's client link): the server tells every agent of its list
    /// (`AgentApi::fetched`), so that what one client measured reaches all of them.
    async fn fetched(bytes: u64, seconds: f64);
}
