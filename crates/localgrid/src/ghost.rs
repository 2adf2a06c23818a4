//! Ghost servers: registrations that answer the agent's dial-back check, claim whatever speed
//! they like, keep heartbeating, and then serve nothing — every client that tries one finds
//! its port closed. They are what a holder of the server token can do without running a
//! kernel, for the hardening tests and `bench faults`' adversarial phase.

use futures::StreamExt;
use gridwise_proto::{
    AgentApiClient, CallError, CallErrorKind, CallId, DataHandle, ExecuteReply, ExecuteRequest,
    Heartbeat, LoadSample, Pong, Registration, ServerApi, ServerInfo, ServiceDesc, Value,
};
use gridwise_runtime::wire::{self, DialConfig};
use std::time::Duration;
use tarpc::context::Context;
use tarpc::server::{BaseChannel, Channel};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Answers the agent's `hello` as the ghost it registers; refuses everything else.
#[derive(Clone)]
struct Front(ServerInfo);

fn refused() -> CallError {
    CallError::new(CallErrorKind::Unavailable, "a ghost runs nothing")
}

impl ServerApi for Front {
    async fn hello(self, _: Context) -> ServerInfo {
        self.0
    }
    async fn execute(self, _: Context, _: ExecuteRequest) -> Result<ExecuteReply, CallError> {
        Err(refused())
    }
    async fn cancel(self, _: Context, _: CallId) -> bool {
        false
    }
    async fn withdraw(self, _: Context, _: CallId) -> bool {
        false
    }
    async fn fetched(self, _: Context, _: u64, _: f64) {}
    async fn ping(self, _: Context) -> Pong {
        Pong {
            name: self.0.name,
            load: LoadSample::default(),
            held_values: 0,
            held_bytes: 0,
            executed: 0,
        }
    }
    async fn fetch(self, _: Context, _: DataHandle) -> Result<Value, CallError> {
        Err(refused())
    }
    async fn pull(self, _: Context, _: DataHandle, _: String) -> Result<Value, CallError> {
        Err(refused())
    }
    async fn free(self, _: Context, _: Vec<DataHandle>) -> u32 {
        0
    }
    async fn renew(self, _: Context, _: Vec<DataHandle>) -> u32 {
        0
    }
    async fn sink(self, _: Context, data: serde_bytes::ByteBuf) -> u64 {
        data.len() as u64
    }
}

/// Ghosts raised by [`raise`]: they keep heartbeating until this is dropped.
pub struct Ghosts {
    tasks: Vec<JoinHandle<()>>,
    /// How many the agent accepted.
    pub accepted: usize,
    /// What the agent said to the others.
    pub refusals: Vec<String>,
}

impl Drop for Ghosts {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Registers `n` ghosts named `{prefix}{i}` with the agent at `agent` (dialled with `dial`,
/// the server role and token), each offering `services` and claiming `rate` op/s. Each
/// answers the agent's check from a port of its own, closed as soon as it is accepted.
pub async fn raise(
    agent: &str,
    dial: &DialConfig,
    prefix: &str,
    n: usize,
    services: &[ServiceDesc],
    rate: f64,
) -> Ghosts {
    let mut ghosts = Ghosts {
        tasks: Vec::new(),
        accepted: 0,
        refusals: Vec::new(),
    };
    for i in 0..n {
        match raise_one(agent, dial, &format!("{prefix}{i}"), services, rate).await {
            Ok(task) => {
                ghosts.accepted += 1;
                ghosts.tasks.push(task);
            }
            Err(e) => ghosts.refusals.push(e),
        }
    }
    ghosts
}

async fn raise_one(
    agent: &str,
    dial: &DialConfig,
    name: &str,
    services: &[ServiceDesc],
    rate: f64,
) -> Result<JoinHandle<()>, String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener
        .local_addr()
        .map_err(|e| e.to_string())?
        .to_string();
    let instance = format!("ghost-{}", gridwise_proto::CallId::new_random());
    let front = Front(ServerInfo {
        name: name.to_string(),
        instance: instance.clone(),
        services: services.to_vec(),
        slots: 64,
        load: LoadSample::default(),
    });
    let answering = tokio::spawn(wire::accept_loop(
        listener,
        wire::AcceptConfig::new(1 << 20, 1 << 24),
        name.to_string(),
        move |conn| {
            let front = front.clone();
            async move {
                BaseChannel::with_defaults(wire::server_transport(conn))
                    .execute(front.serve())
                    .for_each(|f| async move {
                        tokio::spawn(f);
                    })
                    .await;
            }
        },
    ));
    let reg = Registration {
        name: name.to_string(),
        instance,
        secret: None,
        addr,
        slots: 64,
        services: services.to_vec(),
        rates: services.iter().map(|s| (s.name.clone(), rate)).collect(),
        default_rate: rate,
        memory_bytes: 1 << 40,
        cores: 64,
        memory_budget_bytes: 1 << 40,
        max_frame_bytes: 1 << 30,
        sleeping: Vec::new(),
        not_offered: Vec::new(),
    };
    let timeout = Duration::from_secs(10);
    let (framed, _) = wire::connect(agent, dial, name)
        .await
        .map_err(|e| e.to_string())?;
    let agent = AgentApiClient::new(wire::client_config(), wire::client_transport(framed)).spawn();
    let accepted = agent.register(wire::context(timeout), reg).await;
    // Accepted or not, nobody reaches it any more.
    answering.abort();
    let reply = accepted
        .map_err(|e| e.to_string())?
        .map_err(|e| e.message)?;
    let every = Duration::from_millis(reply.heartbeat_interval_ms.max(10));
    Ok(tokio::spawn(async move {
        loop {
            let hb = Heartbeat {
                server_id: reply.server_id,
                load: LoadSample::default(),
                models: Vec::new(),
                in_flight: Vec::new(),
            };
            if agent.heartbeat(wire::context(timeout), hb).await.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    }))
}
