//! In-process test agent and servers on 127.0.0.1 (tests only).

use futures::StreamExt;
use gridwise_proto::*;
use gridwise_runtime::wire;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tarpc::context::Context;
use tarpc::server::{BaseChannel, Channel};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// The services every test server offers.
pub fn services() -> Vec<ServiceDesc> {
    let two_ints = |name: &str| ServiceDesc {
        memory: None,
        duration: None,
        name: name.into(),
        doc: String::new(),
        args: vec![
            ArgDesc::new("a", ArgMode::In, "int"),
            ArgDesc::new("b", ArgMode::In, "int"),
            ArgDesc::new("c", ArgMode::Out, "int"),
        ],
        size_params: vec!["a".into()],
        complexity: None,
    };
    // add(a, b) -> a + b; sleep(ms, _) -> ms after ms milliseconds; fail -> Application error;
    // busy -> Unavailable (retryable).
    vec![
        two_ints("add"),
        two_ints("sleep"),
        two_ints("fail"),
        two_ints("busy"),
    ]
}

/// An address where nothing listens.
pub fn dead_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap().to_string();
    drop(l);
    a
}

/// Serves `$serve` (a tarpc `Serve` value) on 127.0.0.1:0 (or `$at`); evaluates to the address.
macro_rules! listen {
    ($name:expr, $serve:expr) => {{ listen!($name, $serve, "127.0.0.1:0") }};
    ($name:expr, $serve:expr, $at:expr) => {{
        let l = TcpListener::bind($at).await.unwrap();
        let addr: SocketAddr = l.local_addr().unwrap();
        let serve = $serve;
        tokio::spawn(wire::accept_loop(
            l,
            wire::AcceptConfig::new(1 << 30, 1 << 32),
            $name.to_string(),
            move |conn| {
                let serve = serve.clone();
                async move {
                    BaseChannel::with_defaults(wire::server_transport(conn))
                        .execute(serve)
                        .for_each(|f| async move {
                            tokio::spawn(f);
                        })
                        .await;
                }
            },
        ));
        addr
    }};
}

/// What the test agent knows and has seen.
#[derive(Default)]
pub struct AgentState {
    /// (name, addr) in ranking order.
    pub servers: Mutex<Vec<(String, String)>>,
    /// rank requests seen.
    pub ranks: AtomicU64,
    /// Tickets given back.
    pub released: Mutex<Vec<Ticket>>,
    /// Servers clients said they could not reach, with the ticket they said it with.
    pub unreachable: Mutex<Vec<(Ticket, ServerId)>>,
    /// Servers clients said they reach again.
    pub reachable: Mutex<Vec<ServerId>>,
    /// Where clients said a call went instead of its reserved server, with its ticket.
    pub placed: Mutex<Vec<(Ticket, ServerId)>>,
    /// (holder, bytes) of every fetch the client told of.
    pub fetched: Mutex<Vec<(String, u64)>>,
    next_ticket: AtomicU64,
    /// Delay before answering rank, ms.
    pub rank_delay_ms: AtomicU64,
    /// `sink` requests received (what clients nudge a connection with).
    pub sinks: AtomicU64,
}

/// Ranks every listed server, in the order of [`AgentState::servers`], for the test services;
/// no graphs, no models.
#[derive(Clone, Default)]
pub struct TestAgent(pub Arc<AgentState>);

fn etc(i: usize) -> Etc {
    Etc {
        overhead_s: 0.0,
        overhead_sd_s: 0.0,
        transfer_sd_s: 0.0,
        compute_sd_s: 0.0,
        cpu_available: None,
        queue_wait_sd_s: 0.0,
        queue_wait_s: 0.0,
        transfer_in_s: 0.0,
        compute_s: i as f64,
        transfer_out_s: 0.0,
        compute_source: ComputeSource::Assumed { seconds: 0.0 },
    }
}

impl AgentApi for TestAgent {
    async fn register(self, _: Context, _reg: Registration) -> Result<RegisterReply, RpcError> {
        Err(RpcError::new(ErrorCode::OtherErrorCode, "not in tests"))
    }
    async fn heartbeat(self, _: Context, _hb: Heartbeat) -> Ack {
        Ack::Ok
    }
    async fn report(self, _: Context, _s: ServerId, _r: Vec<CallReport>) -> Ack {
        Ack::Ok
    }
    async fn list_services(self, _: Context) -> Vec<ServiceSummary> {
        let up = self.0.servers.lock().unwrap().len() as u32;
        services()
            .into_iter()
            .map(|desc| ServiceSummary {
                desc,
                servers_up: up,
            })
            .collect()
    }
    async fn describe(self, _: Context, service: String) -> Result<ServiceDesc, RpcError> {
        services()
            .into_iter()
            .find(|s| s.name == service)
            .ok_or_else(|| {
                RpcError::new(
                    ErrorCode::FunctionNotFound,
                    format!("no server offers `{service}`"),
                )
            })
    }
    async fn rank(
        self,
        _: Context,
        profile: CallProfile,
        options: RankOptions,
    ) -> Result<Ranking, RpcError> {
        self.0.ranks.fetch_add(1, Ordering::SeqCst);
        let delay = self.0.rank_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if !services().iter().any(|s| s.name == profile.service) {
            return Err(RpcError::new(ErrorCode::FunctionNotFound, "unknown"));
        }
        let servers = self.0.servers.lock().unwrap().clone();
        let candidates: Vec<Candidate> = servers
            .into_iter()
            .filter(|(n, _)| options.pin_server.as_ref().is_none_or(|p| p == n))
            .enumerate()
            .map(|(i, (name, addr))| Candidate {
                server_id: ServerId::new_random(),
                name,
                addr,
                etc: etc(i),
            })
            .collect();
        if candidates.is_empty() {
            return Err(RpcError::new(ErrorCode::ServerNotFound, "no live server"));
        }
        Ok(Ranking {
            ticket: Ticket(self.0.next_ticket.fetch_add(1, Ordering::SeqCst) + 1),
            candidates,
            policy: options.policy.unwrap_or_default(),
        })
    }
    async fn explain(
        self,
        ctx: Context,
        profile: CallProfile,
        options: RankOptions,
    ) -> Result<Vec<Candidate>, RpcError> {
        self.rank(ctx, profile, options).await.map(|r| r.candidates)
    }
    async fn release(self, _: Context, ticket: Ticket) {
        self.0.released.lock().unwrap().push(ticket);
    }
    async fn unreachable(self, _: Context, ticket: Ticket, server: ServerId) {
        self.0.unreachable.lock().unwrap().push((ticket, server));
    }
    async fn reachable(self, _: Context, server: ServerId) {
        self.0.reachable.lock().unwrap().push(server);
    }
    async fn placed(self, _: Context, ticket: Ticket, server: ServerId) {
        self.0.placed.lock().unwrap().push((ticket, server));
    }
    async fn fetched(self, _: Context, holder: String, bytes: u64, _: f64) {
        self.0.fetched.lock().unwrap().push((holder, bytes));
    }
    async fn model_points(self, _: Context, _: ServerId, _: Vec<ModelPoint>) -> Ack {
        Ack::Ok
    }

    async fn links(self, _: Context, _: ServerId, _: Vec<LinkSample>) -> Ack {
        Ack::Ok
    }

    async fn arrived(self, _: Context, _: ServerId, _: Vec<gridwise_proto::InFlight>) -> Ack {
        Ack::Ok
    }

    async fn link_matrix(self, _: Context) -> Vec<LinkInfo> {
        Vec::new()
    }
    async fn sink(self, _: Context, data: serde_bytes::ByteBuf) -> u64 {
        self.0.sinks.fetch_add(1, Ordering::SeqCst);
        data.len() as u64
    }
    async fn map_graph(
        self,
        _: Context,
        _request: gridwise_proto::GraphRequest,
    ) -> Result<gridwise_proto::GraphPlan, RpcError> {
        Err(RpcError::new(ErrorCode::OtherErrorCode, "not in tests"))
    }

    async fn divide(
        self,
        _: Context,
        _request: gridwise_proto::DivideRequest,
    ) -> Result<gridwise_proto::DivideReply, RpcError> {
        Err(RpcError::new(ErrorCode::OtherErrorCode, "not in tests"))
    }

    async fn models(self, _: Context) -> Vec<ModelSummary> {
        Vec::new()
    }

    async fn model(self, _: Context, server: String, _: String) -> Result<ModelExport, RpcError> {
        Err(RpcError::new(
            ErrorCode::ServerNotFound,
            format!("the test agent holds no model of {server}"),
        ))
    }

    async fn status(self, _: Context) -> AgentStatus {
        let servers = self.0.servers.lock().unwrap().clone();
        AgentStatus {
            storage: Default::default(),
            others: None,
            policy: Policy::Mct,
            uptime_s: 1.0,
            ranked: self.0.ranks.load(Ordering::SeqCst),
            servers: servers
                .into_iter()
                .map(|(name, addr)| ServerStatus {
                    id: ServerId::new_random(),
                    name,
                    addr,
                    state: ServerState::Up,
                    services: vec!["add".into(), "sleep".into(), "fail".into()],
                    slots: 1,
                    pending: 0,
                    completed: 0,
                    load: LoadSample::default(),
                    last_heard_s: 0.0,
                    default_rate: 1e9,
                    not_offered: Vec::new(),
                })
                .collect(),
        }
    }
}

/// What a test server has seen.
#[derive(Default)]
pub struct ServerStateT {
    pub name: String,
    /// execute requests seen.
    pub executes: AtomicU64,
    /// cancel requests seen (with whether the call was running).
    pub cancels: Mutex<Vec<(CallId, bool)>>,
    /// Calls taken back by their client (a `sleep` counts as waiting, not started).
    pub withdrawals: Mutex<Vec<CallId>>,
    /// The `sleep` calls running, each with what cancels it.
    pub running: Mutex<HashMap<CallId, Arc<Notify>>>,
}

/// Runs `add`, `sleep` (ms, cancellable), `fail` and `busy` for real; keeps no values.
#[derive(Clone)]
pub struct TestServer(pub Arc<ServerStateT>);

impl ServerApi for TestServer {
    async fn fetch(self, _: Context, h: DataHandle) -> Result<Value, CallError> {
        Err(CallError::new(
            CallErrorKind::BadArguments,
            format!("the test server keeps no value {h}"),
        ))
    }

    async fn pull(self, _: Context, h: DataHandle, _: String) -> Result<Value, CallError> {
        Err(CallError::input_lost(h, "the test server keeps no value"))
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

    async fn fetched(self, _: Context, _: u64, _: f64) {}

    async fn hello(self, _: Context) -> ServerInfo {
        ServerInfo {
            instance: String::new(),
            name: self.0.name.clone(),
            services: services(),
            slots: 1,
            load: LoadSample::default(),
        }
    }
    async fn execute(self, _: Context, req: ExecuteRequest) -> Result<ExecuteReply, CallError> {
        self.0.executes.fetch_add(1, Ordering::SeqCst);
        let a = req.inputs.first().and_then(Value::as_int).unwrap_or(0);
        let b = req.inputs.get(1).and_then(Value::as_int).unwrap_or(0);
        let out = match req.service.as_str() {
            "add" => a + b,
            "sleep" => {
                let stop = Arc::new(Notify::new());
                self.0
                    .running
                    .lock()
                    .unwrap()
                    .insert(req.call_id, stop.clone());
                let slept = tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(a as u64)) => true,
                    _ = stop.notified() => false,
                };
                self.0.running.lock().unwrap().remove(&req.call_id);
                if !slept {
                    return Err(CallError::new(CallErrorKind::Cancelled, "cancelled"));
                }
                a
            }
            "fail" => {
                return Err(CallError::new(
                    CallErrorKind::Application,
                    "the kernel says no",
                ));
            }
            "busy" => {
                return Err(CallError::new(CallErrorKind::Unavailable, "shutting down"));
            }
            other => {
                return Err(CallError::new(
                    CallErrorKind::UnknownService,
                    format!("no `{other}` here"),
                ));
            }
        };
        Ok(ExecuteReply {
            outputs: vec![Value::Int(out)],
            timing: Timing::default(),
            server: self.0.name.clone(),
            copies: Vec::new(),
        })
    }
    async fn cancel(self, _: Context, call: CallId) -> bool {
        let stop = self.0.running.lock().unwrap().get(&call).cloned();
        self.0.cancels.lock().unwrap().push((call, stop.is_some()));
        match stop {
            Some(s) => {
                s.notify_one();
                true
            }
            None => false,
        }
    }
    async fn withdraw(self, _: Context, call: CallId) -> bool {
        let stop = self.0.running.lock().unwrap().remove(&call);
        match stop {
            Some(s) => {
                self.0.withdrawals.lock().unwrap().push(call);
                s.notify_one();
                true
            }
            None => false,
        }
    }
    async fn ping(self, _: Context) -> Pong {
        Pong {
            executed: 0,
            name: self.0.name.clone(),
            load: LoadSample::default(),
            held_values: 0,
            held_bytes: 0,
        }
    }
}

/// A running test grid: one agent and its servers.
pub struct Grid {
    pub agent_addr: String,
    pub agent: Arc<AgentState>,
    /// The servers' states by name.
    pub servers: HashMap<String, Arc<ServerStateT>>,
}

impl Grid {
    /// Starts an agent and one server per name (ranked in that order). A name starting with
    /// `dead` gets an address where nothing listens. Must run inside a tokio runtime.
    pub async fn start(names: &[&str]) -> Grid {
        let agent = TestAgent::default();
        let mut servers = HashMap::new();
        for name in names {
            let addr = if name.starts_with("dead") {
                dead_addr()
            } else {
                let st = Arc::new(ServerStateT {
                    name: name.to_string(),
                    ..Default::default()
                });
                servers.insert(name.to_string(), st.clone());
                listen!(name, TestServer(st).serve()).to_string()
            };
            agent
                .0
                .servers
                .lock()
                .unwrap()
                .push((name.to_string(), addr));
        }
        let state = agent.0.clone();
        let agent_addr = listen!("agent", agent.serve()).to_string();
        Grid {
            agent_addr,
            agent: state,
            servers,
        }
    }

    /// The address the agent hands out for a server.
    pub fn addr_of(&self, name: &str) -> String {
        let servers = self.agent.servers.lock().unwrap();
        servers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.clone())
            .unwrap()
    }

    /// A `dead…` server comes up at its address (a healed partition, a restart); its state.
    pub async fn revive(&mut self, name: &str) -> Arc<ServerStateT> {
        let addr = self.addr_of(name);
        let st = Arc::new(ServerStateT {
            name: name.to_string(),
            ..Default::default()
        });
        listen!(name, TestServer(st.clone()).serve(), addr.as_str());
        self.servers.insert(name.to_string(), st.clone());
        st
    }

    /// Panics for a `dead…` or unknown name: only live test servers have a state.
    pub fn server(&self, name: &str) -> &ServerStateT {
        &self.servers[name]
    }

    /// Puts a proxy in front of a server (the agent hands out the proxy's address).
    pub async fn proxy_server(&self, name: &str) -> Proxy {
        let mut servers = self.agent.servers.lock().unwrap().clone();
        let Some(entry) = servers.iter_mut().find(|(n, _)| n == name) else {
            panic!("no server {name}");
        };
        let proxy = Proxy::start(entry.1.clone()).await;
        entry.1 = proxy.addr.clone();
        *self.agent.servers.lock().unwrap() = servers;
        proxy
    }

    /// The client settings for this grid.
    pub fn config(&self) -> crate::ClientConfig {
        crate::ClientConfig::with_agent(&self.agent_addr)
    }
}

/// A TCP proxy whose connections can be cut, to simulate lost connections.
pub struct Proxy {
    /// The proxy's own address, handed out in place of the target's.
    pub addr: String,
    conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicU64>,
}

impl Proxy {
    /// Forwards a fresh local port to `target`.
    pub async fn start(target: String) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let conns: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let accepted = Arc::new(AtomicU64::new(0));
        let (conns2, accepted2) = (conns.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = l.accept().await {
                accepted2.fetch_add(1, Ordering::SeqCst);
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                conns2.lock().unwrap().push(task);
            }
        });
        Proxy {
            addr,
            conns,
            accepted,
        }
    }

    /// Closes every connection made so far (new ones are still accepted).
    pub fn cut(&self) {
        for t in self.conns.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}
