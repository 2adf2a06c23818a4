//! The server's side of its relationship with the agent: register (and register again after
//! an agent restart or a missed-heartbeat verdict), heartbeat with the load, and send call
//! reports in batches so reporting costs the agent one message per burst, not per call.

use crate::handler::ServerHandler;
use gridwise_proto::{Ack, AgentApiClient, CallReport, Heartbeat, Registration, ServerId, wire};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::mpsc;

/// Reports kept while the agent is unreachable; the oldest go first beyond this.
const UNSENT_MAX: usize = 10_000;
const RPC_TIMEOUT: Duration = Duration::from_secs(5);

struct Linked {
    client: AgentApiClient,
    id: ServerId,
}

/// Keeps the server registered and reporting until the process ends.
pub async fn run(
    agent: String,
    wire_cfg: wire::WireConfig,
    reg: Registration,
    handler: ServerHandler,
    mut reports: mpsc::UnboundedReceiver<CallReport>,
    batch_max: usize,
) {
    let mut linked: Option<Linked> = None;
    let mut unsent: VecDeque<CallReport> = VecDeque::new();
    let mut backoff = Duration::from_millis(100);
    let mut interval = Duration::from_secs(1);
    let mut tick = tokio::time::interval(interval);
    let mut warned = false;
    loop {
        let Some(link) = &linked else {
            match register(&agent, &wire_cfg, &reg).await {
                Ok((l, every)) => {
                    tracing::info!(server = %l.id, %agent, "registered with the agent");
                    if every != interval {
                        interval = every;
                        tick = tokio::time::interval(interval);
                    }
                    if !flush(&l, &mut unsent, batch_max).await {
                        continue;
                    }
                    linked = Some(l);
                    backoff = Duration::from_millis(100);
                    warned = false;
                }
                Err(e) => {
                    // Say it once loudly; an agent that is still starting is normal.
                    if !warned {
                        tracing::warn!(%agent, "cannot register yet ({e}); retrying");
                        warned = true;
                    } else {
                        tracing::debug!(%agent, "cannot register yet ({e}); retrying");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
            continue;
        };
        tokio::select! {
            _ = tick.tick() => {
                let hb = Heartbeat { server_id: link.id, load: handler.load() };
                match link.client.heartbeat(wire::context(RPC_TIMEOUT), hb).await {
                    Ok(Ack::Ok) => {}
                    Ok(Ack::Reregister) => {
                        tracing::warn!("the agent no longer knows this server: registering again");
                        linked = None;
                    }
                    Err(e) => {
                        tracing::warn!("heartbeat to the agent failed ({e}); reconnecting");
                        linked = None;
                    }
                }
            }
            first = reports.recv() => {
                let Some(first) = first else { return };
                unsent.push_back(first);
                while unsent.len() < batch_max.max(1) {
                    match reports.try_recv() {
                        Ok(r) => unsent.push_back(r),
                        Err(_) => break,
                    }
                }
                if !flush(link, &mut unsent, batch_max).await {
                    linked = None;
                }
            }
        }
    }
}

/// Sends the kept reports in batches; false when the agent must be reached again first.
async fn flush(link: &Linked, unsent: &mut VecDeque<CallReport>, batch_max: usize) -> bool {
    while unsent.len() > UNSENT_MAX {
        unsent.pop_front();
    }
    while !unsent.is_empty() {
        let batch: Vec<CallReport> = unsent.iter().take(batch_max.max(1)).cloned().collect();
        let n = batch.len();
        match link
            .client
            .report(wire::context(RPC_TIMEOUT), link.id, batch)
            .await
        {
            Ok(Ack::Ok) => {
                unsent.drain(..n);
            }
            Ok(Ack::Reregister) => {
                // A new agent cannot use tickets of the old one; the timings are still samples.
                unsent.drain(..n);
                return false;
            }
            Err(e) => {
                tracing::warn!("sending {n} report(s) failed ({e}); keeping them for later");
                return false;
            }
        }
    }
    true
}

async fn register(
    agent: &str,
    wire_cfg: &wire::WireConfig,
    reg: &Registration,
) -> anyhow::Result<(Linked, Duration)> {
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
    ))
}
