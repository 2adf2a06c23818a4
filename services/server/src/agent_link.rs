//! The server's side of its relationship with the agent: register (and register again after
//! an agent restart or a missed-heartbeat verdict), heartbeat with load and model-build
//! progress, and send call reports and model points in batches, so reporting costs the agent
//! one message per burst, not per call. Nothing is dropped while the agent is unreachable,
//! up to a bound.

use crate::handler::{ServerHandler, ToAgent};
use gridwise_proto::{
    Ack, AgentApiClient, CallError, CallReport, Heartbeat, LinkSample, ModelPoint, Registration,
    ServerId, ServerState, ServerStatus,
};
use gridwise_runtime::wire;
use gridwise_server_core::heartbeat;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::mpsc;

/// Reports or points kept while the agent is unreachable; the oldest go first beyond this.
const UNSENT_MAX: usize = 100_000;
const RPC_TIMEOUT: Duration = heartbeat::ANSWER_WAIT_MAX;
/// How long the first report of a burst waits for the others, unless a full batch is already
/// in or no other call is running or waiting here (no burst is coming): sent at once, each
/// report cost the agent a message and an answer in the middle of ranking the next call. The
/// price is bounded by it: the agent learns from a call this much later, and a call that ended
/// before its predicted finish still adds its queue wait (which ends at the predicted finish)
/// for up to this long. An idle server does not wait: a client that asked for a divisible
/// job's plan the moment its last calls came back had the plan skewed by 20–30 ms of queue
/// on the servers whose reports were still lingering. Heartbeats wait for it too, and then
/// flush what is queued before they go. An arrival notice that comes meanwhile ends the wait:
/// the other agents rank blind to that call until it lands.
const REPORT_LINGER: Duration = Duration::from_millis(5);
/// The longest wait between two registration attempts: an agent that restarts is back in
/// business as soon as its servers are, so they retry often.
const REGISTER_BACKOFF_MAX: Duration = Duration::from_millis(500);

struct Linked {
    client: AgentApiClient,
    id: ServerId,
}

/// What is waiting to be delivered.
#[derive(Default)]
struct Outbox {
    arrivals: VecDeque<gridwise_proto::InFlight>,
    reports: VecDeque<CallReport>,
    points: VecDeque<ModelPoint>,
    links: VecDeque<LinkSample>,
    /// Values clients fetched from here: (bytes, seconds).
    fetches: VecDeque<(u64, f64)>,
}

impl Outbox {
    fn push(&mut self, m: ToAgent) {
        match m {
            ToAgent::Report(r) => push_bounded(&mut self.reports, r),
            ToAgent::Point(p) => push_bounded(&mut self.points, p),
            ToAgent::Link(l) => push_bounded(&mut self.links, l),
            ToAgent::Arrived(a) => push_bounded(&mut self.arrivals, a),
            ToAgent::Fetched { bytes, seconds } => {
                push_bounded(&mut self.fetches, (bytes, seconds));
            }
        }
    }

    fn take_all(&mut self, inbox: &mut mpsc::UnboundedReceiver<ToAgent>) {
        while let Ok(m) = inbox.try_recv() {
            self.push(m);
        }
    }
}

fn push_bounded<T>(q: &mut VecDeque<T>, x: T) {
    if q.len() >= UNSENT_MAX {
        q.pop_front();
    }
    q.push_back(x);
}

/// The link to the agent, measured as peers are (`link_probe`): the agent is on every call's
/// control path.
async fn probe_agent(
    handler: &ServerHandler,
    client: &AgentApiClient,
    addr: &str,
) -> Result<LinkSample, CallError> {
    handler
        .peers()
        .measure_link(addr, || async {
            client
                .sink(wire::context(RPC_TIMEOUT), serde_bytes::ByteBuf::new())
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .await
}

/// How long a probe round waits for the agent's view of the grid; it holds up heartbeats.
const STATUS_WAIT: Duration = Duration::from_millis(500);

/// One round of link probes: every other live server, in a random order, then the agent.
struct ProbeRound {
    handler: ServerHandler,
    client: AgentApiClient,
    agent_addr: String,
    /// Started although the grid was at work (it waited as long as
    /// [`crate::link_probe::wait_for_quiet`] lets a round wait): the servers at work are left
    /// out, each a few rounds in a row at most. A round begun on a quiet grid instead stops when work starts anywhere, and the
    /// peers it did not reach wait for the next one.
    forced: bool,
}

impl ProbeRound {
    async fn run(self, servers: Vec<ServerStatus>) {
        use rand::seq::SliceRandom;
        let h = &self.handler;
        let mut peers: Vec<ServerStatus> = servers
            .into_iter()
            .filter(|s| s.state == ServerState::Up && s.addr != h.addr())
            .collect();
        peers.shuffle(&mut rand::rng());
        let mut samples = Vec::new();
        let mut stopped = false;
        for (i, peer) in peers.iter().enumerate() {
            if self.forced {
                if crate::link_probe::at_work(peer) && h.peers().leave_for_later(&peer.addr) {
                    continue;
                }
            } else if i > 0 && !self.grid_still_quiet().await {
                tracing::debug!(
                    "link probes stopped after {i} of {} peers: work started on the grid",
                    peers.len()
                );
                stopped = true;
                break;
            }
            match h.peers().probe(&peer.addr).await {
                Ok(s) => samples.push(s),
                Err(e) => tracing::debug!(addr = %peer.addr, "link probe failed: {e}"),
            }
        }
        if !stopped {
            match probe_agent(h, &self.client, &self.agent_addr).await {
                Ok(s) => samples.push(s),
                Err(e) => tracing::debug!("cannot probe the link to the agent: {e}"),
            }
        }
        // Through the outbox, not straight to this agent: every agent of the server hears them.
        for s in samples {
            self.handler.tell_agents(ToAgent::Link(s));
        }
    }

    /// No call here and none at work elsewhere, as the agent sees the grid now.
    async fn grid_still_quiet(&self) -> bool {
        match self.client.status(wire::context(STATUS_WAIT)).await {
            Ok(st) => {
                self.handler.busy_calls() == 0
                    && !crate::link_probe::others_at_work(&st.servers, self.handler.addr())
            }
            Err(_) => false,
        }
    }
}

/// One inbox per agent from the handler's one: every agent hears every report, point and link
/// sample (each keeps its own registration, outbox and retries, so a dead agent holds up no
/// other). With one agent the inbox is its own.
pub fn fan_out(
    agents: Vec<String>,
    mut inbox: mpsc::UnboundedReceiver<ToAgent>,
) -> Vec<(String, mpsc::UnboundedReceiver<ToAgent>)> {
    if let [one] = agents.as_slice() {
        return vec![(one.clone(), inbox)];
    }
    let (senders, inboxes): (Vec<_>, Vec<_>) = agents
        .into_iter()
        .map(|a| {
            let (tx, rx) = mpsc::unbounded_channel();
            (tx, (a, rx))
        })
        .unzip();
    tokio::spawn(async move {
        while let Some(m) = inbox.recv().await {
            for tx in &senders {
                let _ = tx.send(m.clone());
            }
        }
    });
    inboxes
}

/// The wait before registering again after the agent refused a registration.
const REFUSED_BACKOFF: Duration = Duration::from_secs(2);

/// Says, loudly, that another process took this server's name while it was silent.
fn replaced(name: &str) {
    tracing::error!(
        server = %name,
        "another process registered as `{name}` while this server was silent past the agent's heartbeat timeout; it holds the name now (`gridwise status` shows where), and this server gets no calls under it. Registering again: the name comes back only once that process is gone (stop it, or give one of the two another `name`)"
    );
}

/// Keeps the server registered and reporting until the process ends.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    agent: String,
    wire_cfg: wire::DialConfig,
    mut reg: Registration,
    handler: ServerHandler,
    mut inbox: mpsc::UnboundedReceiver<ToAgent>,
    batch_max: usize,
    link_probe: Option<Duration>,
) {
    // Far in the future when probing is off: the select branch then never fires.
    let probe_every = link_probe.unwrap_or(Duration::from_secs(365 * 24 * 3600));
    let mut next_probe =
        tokio::time::Instant::now() + crate::link_probe::next_round_in(probe_every, true);
    // When the round now waiting for a quiet spell fell due.
    let mut probe_due: Option<tokio::time::Instant> = None;
    let mut grid_rest = crate::link_probe::GridRest::new(std::time::Instant::now());
    let batch_max = batch_max.max(1);
    let mut linked: Option<Linked> = None;
    let mut outbox = Outbox::default();
    let mut backoff = Duration::from_millis(100);
    let mut interval = Duration::from_secs(1);
    let mut tick = tokio::time::interval(interval);
    // A change of load is worth telling at once: a call ranked in the second before the next
    // heartbeat would be estimated for a host that is gone.
    let mut sensor_tick = tokio::time::interval(crate::sensors::PERIOD);
    let mut last_told: Option<f64> = None;
    let mut warned = false;
    loop {
        let Some(link) = &linked else {
            // Dials no longer than a heartbeat interval: a lost SYN is resent by the dial itself
            // (`wire::dial`), but a hello a cut dropped waits for TCP's backed-off resend, so
            // after a heal a fresh dial gets through sooner than an old one.
            let mut dial = wire_cfg.clone();
            dial.connect_timeout = interval
                .max(Duration::from_millis(500))
                .min(wire_cfg.connect_timeout);
            match register(&agent, &dial, &reg).await {
                Ok((l, every, secret)) => {
                    tracing::info!(server = %l.id, %agent, "registered with the agent");
                    // Proof that it is this server the next time it registers.
                    reg.secret = Some(secret);
                    // The first heartbeat at once: until it arrives the agent does not keep
                    // the registration.
                    let hb = Heartbeat {
                        server_id: l.id,
                        load: handler.load(),
                        models: handler.progress(),
                        in_flight: handler.in_flight(),
                    };
                    if let Err(e) = l.client.heartbeat(wire::context(RPC_TIMEOUT), hb).await {
                        tracing::warn!(
                            "first heartbeat to the agent failed ({e}); registering again"
                        );
                        continue;
                    }
                    if every != interval {
                        interval = every;
                        tick = tokio::time::interval(interval);
                    }
                    backoff = Duration::from_millis(100);
                    warned = false;
                    // Points queued before registering (a model loaded from disk) go now, not
                    // after a linger: the heartbeat just said their build is done.
                    outbox.take_all(&mut inbox);
                    if flush(
                        &l,
                        &mut outbox,
                        batch_max,
                        &reg,
                        heartbeat::answer_deadline(interval),
                    )
                    .await
                    {
                        linked = Some(l);
                    }
                }
                Err(e) => {
                    // Say it once loudly; an agent that is still starting is normal.
                    if !warned {
                        tracing::warn!(%agent, "cannot register yet ({e}); retrying");
                        warned = true;
                    } else {
                        tracing::debug!(%agent, "cannot register yet ({e}); retrying");
                    }
                    // Keep taking messages meanwhile, so the channel does not grow unbounded.
                    outbox.take_all(&mut inbox);
                    // A refusal (the name held elsewhere, a limit) holds for a while: asking
                    // often only makes the agent dial this server again.
                    let refused = e.downcast_ref::<gridwise_proto::RpcError>().is_some();
                    // A dial that timed out already waited: the network is silent (a cut, a
                    // dead route), which costs the agent nothing, so dial again at once.
                    let timed_out = matches!(
                        e.downcast_ref::<wire::WireError>(),
                        Some(wire::WireError::Timeout { .. })
                    );
                    let wait = if refused {
                        backoff.max(REFUSED_BACKOFF)
                    } else if timed_out {
                        Duration::ZERO
                    } else {
                        backoff
                    };
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(REGISTER_BACKOFF_MAX);
                }
            }
            continue;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next_probe), if link_probe.is_some() => {
                let now = tokio::time::Instant::now();
                let due = *probe_due.get_or_insert(now);
                let Ok(st) = link.client.status(wire::context(STATUS_WAIT)).await else {
                    probe_due = None;
                    next_probe = now + crate::link_probe::next_round_in(probe_every, false);
                    continue;
                };
                let grid_rest = grid_rest.look(&st.servers, handler.addr(), now.into_std());
                let quiet_for = handler.quiet_for().min(grid_rest);
                let busy_here = handler.busy_calls();
                if crate::link_probe::wait_for_quiet(busy_here, quiet_for, now - due, probe_every) {
                    next_probe = now + crate::link_probe::QUIET / 2;
                    continue;
                }
                let forced = busy_here > 0 || quiet_for < crate::link_probe::QUIET;
                if forced {
                    tracing::info!(
                        "probing the links although calls ran here or elsewhere in the last {:?}: the grid was not quiet for {:.0} s",
                        crate::link_probe::QUIET,
                        (now - due).as_secs_f64()
                    );
                }
                probe_due = None;
                next_probe = now + crate::link_probe::next_round_in(probe_every, false);
                // Off the loop: probes take a moment, heartbeats must not wait for them.
                let round = ProbeRound {
                    handler: handler.clone(),
                    client: link.client.clone(),
                    agent_addr: agent.clone(),
                    forced,
                };
                tokio::spawn(round.run(st.servers));
            }
            _ = sensor_tick.tick() => {
                if heartbeat::worth_telling_now(last_told, handler.sensors().availability_now()) {
                    tick.reset_immediately();
                }
            }
            _ = tick.tick() => {
                // Read before what is queued goes out: a heartbeat saying a build is done must
                // not reach the agent before the points queued when it was read.
                let mut hb = Heartbeat {
                    server_id: link.id,
                    load: handler.load(),
                    models: handler.progress(),
                    in_flight: Vec::new(),
                };
                outbox.take_all(&mut inbox);
                if !flush(link, &mut outbox, batch_max, &reg, heartbeat::answer_deadline(interval)).await {
                    linked = None;
                    continue;
                }
                // Read after: the heartbeat replaces the agent's view of the calls here, so
                // it lists every call whose arrival notice went before it.
                hb.in_flight = handler.in_flight();
                last_told = hb.load.cpu_available;
                match link
                    .client
                    .heartbeat(wire::context(heartbeat::answer_deadline(interval)), hb)
                    .await
                {
                    Ok(Ack::Ok) => {}
                    Ok(Ack::Reregister) => {
                        tracing::warn!("the agent no longer knows this server: registering again");
                        linked = None;
                    }
                    Ok(Ack::Replaced) => {
                        replaced(&reg.name);
                        linked = None;
                    }
                    Err(e) => {
                        tracing::warn!("heartbeat to the agent failed ({e}); reconnecting");
                        linked = None;
                    }
                }
            }
            first = inbox.recv() => {
                let Some(first) = first else { return };
                let urgent = first.goes_at_once();
                outbox.push(first);
                let mut n = 1;
                if !urgent && heartbeat::linger_for_burst(inbox.len(), batch_max, handler.busy_calls() as usize) {
                    // The burst's reports join this one, but an arrival ends the wait: in a
                    // busy grid a call's report is most often followed by its client's next
                    // call, whose arrival waited out the linger (the other agents of a bag
                    // learnt of a call 1.3–3.2 ms after its ranking, now 0.3–0.7 ms).
                    let until = tokio::time::Instant::now() + REPORT_LINGER;
                    while n < batch_max {
                        match tokio::time::timeout_at(until, inbox.recv()).await {
                            Ok(Some(m)) => {
                                let urgent = m.goes_at_once();
                                outbox.push(m);
                                n += 1;
                                if urgent {
                                    break;
                                }
                            }
                            // The linger is over (or the server stops: the next receive says so).
                            _ => break,
                        }
                    }
                }
                while n < batch_max {
                    match inbox.try_recv() {
                        Ok(m) => {
                            outbox.push(m);
                            n += 1;
                        }
                        Err(_) => break,
                    }
                }
                if !flush(link, &mut outbox, batch_max, &reg, heartbeat::answer_deadline(interval)).await {
                    linked = None;
                }
            }
        }
    }
}

/// Sends what is waiting, in batches, each answered within `deadline`; false when the agent
/// must be reached (or registered with) again first (what was not delivered stays queued).
async fn flush(
    link: &Linked,
    outbox: &mut Outbox,
    batch_max: usize,
    reg: &Registration,
    deadline: Duration,
) -> bool {
    let name = reg.name.as_str();
    let ctx = || wire::context(deadline);
    // Arrivals before reports: a call that arrived and ended in one burst is told in order.
    let arrivals = send_all(&mut outbox.arrivals, batch_max, "arrival(s)", name, |b| {
        link.client.arrived(ctx(), link.id, b)
    });
    if !arrivals.await {
        return false;
    }
    let points = send_all(&mut outbox.points, batch_max, "model point(s)", name, |b| {
        link.client.model_points(ctx(), link.id, b)
    });
    if !points.await {
        return false;
    }
    let links = send_all(&mut outbox.links, batch_max, "link sample(s)", name, |b| {
        link.client.links(ctx(), link.id, b)
    });
    if !links.await {
        return false;
    }
    while let Some(&(bytes, seconds)) = outbox.fetches.front() {
        if let Err(e) = link
            .client
            .fetched(ctx(), reg.addr.clone(), bytes, seconds)
            .await
        {
            tracing::debug!(server = %name, "could not tell the agent of a fetch: {e}");
            return false;
        }
        outbox.fetches.pop_front();
    }
    while !outbox.reports.is_empty() {
        let batch: Vec<CallReport> = outbox.reports.iter().take(batch_max).cloned().collect();
        let n = batch.len();
        let r = link
            .client
            .report(wire::context(deadline), link.id, batch)
            .await;
        match r {
            // A new agent cannot use tickets of the old one (nor a replaced process report for
            // its successor); the batch is spent either way.
            Ok(ack @ (Ack::Reregister | Ack::Replaced)) => {
                if ack == Ack::Replaced {
                    replaced(name);
                }
                outbox.reports.drain(..n);
                return false;
            }
            other => {
                if !delivered(other, n, "report(s)", name) {
                    return false;
                }
                outbox.reports.drain(..n);
            }
        }
    }
    true
}

/// Sends `queue` in batches of `batch_max` with `send`, each acknowledged before the next;
/// false (what was not delivered stays queued) when the agent must be reached again first.
async fn send_all<T: Clone, F, Fut>(
    queue: &mut VecDeque<T>,
    batch_max: usize,
    what: &str,
    name: &str,
    send: F,
) -> bool
where
    F: Fn(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = Result<Ack, tarpc::client::RpcError>>,
{
    while !queue.is_empty() {
        let batch: Vec<T> = queue.iter().take(batch_max).cloned().collect();
        let n = batch.len();
        if !delivered(send(batch).await, n, what, name) {
            return false;
        }
        queue.drain(..n);
    }
    true
}

fn delivered(r: Result<Ack, tarpc::client::RpcError>, n: usize, what: &str, name: &str) -> bool {
    match r {
        Ok(Ack::Ok) => true,
        Ok(Ack::Reregister) => false,
        Ok(Ack::Replaced) => {
            replaced(name);
            false
        }
        Err(e) => {
            tracing::warn!("sending {n} {what} failed ({e}); keeping them for later");
            false
        }
    }
}

async fn register(
    agent: &str,
    wire_cfg: &wire::DialConfig,
    reg: &Registration,
) -> anyhow::Result<(Linked, Duration, String)> {
    let (framed, _) = wire::connect(agent, wire_cfg, &format!("server {}", reg.name)).await?;
    let client = AgentApiClient::new(wire::client_config(), wire::client_transport(framed)).spawn();
    let reply = client
        .register(wire::context(RPC_TIMEOUT), reg.clone())
        .await??;
    let every = Duration::from_millis(reply.heartbeat_interval_ms.max(10));
    Ok((
        Linked {
            client,
            id: reply.server_id,
        },
        every,
        reply.secret,
    ))
}
