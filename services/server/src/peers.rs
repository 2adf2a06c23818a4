//! Connections to other servers, for pulling remote inputs straight from their holders.

use crate::data::not_found;
use gridwise_proto::{CallError, CallErrorKind, LinkSample, RemoteRef, ServerApiClient, Value};
use gridwise_runtime::wire;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::Mutex;

/// A pool of connections to other servers, by address.
pub struct Peers {
    wire: wire::DialConfig,
    me: String,
    conns: Mutex<HashMap<String, ServerApiClient>>,
    /// Large values come over bulk connections, straight into their final buffer.
    bulk: wire::bulk::BulkPool,
    /// Per peer, the latency its last probe measured: what a timed pull's bandwidth is net of.
    latency_s: std::sync::Mutex<HashMap<String, f64>>,
    /// Per daemon, the probe rounds skipped in a row because its link was busy.
    skipped: std::sync::Mutex<HashMap<String, u32>>,
}

/// How long pulling one value may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(600);
/// How long one probe message may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

impl Peers {
    /// A pool using the grid's connection settings; `me` names this server in hellos.
    pub fn new(wire: wire::DialConfig, me: String) -> Self {
        Self {
            bulk: wire::bulk::BulkPool::new(wire.clone(), format!("server {me}")),
            wire,
            me,
            conns: Mutex::new(HashMap::new()),
            latency_s: std::sync::Mutex::default(),
            skipped: std::sync::Mutex::default(),
        }
    }

    async fn client(&self, addr: &str) -> Result<ServerApiClient, CallError> {
        if let Some(c) = self.conns.lock().await.get(addr) {
            return Ok(c.clone());
        }
        let (framed, _) = wire::connect(addr, &self.wire, &format!("server {}", self.me))
            .await
            .map_err(|e| CallError::new(CallErrorKind::Unavailable, e.to_string()))?;
        let c = ServerApiClient::new(wire::client_config(), wire::client_transport(framed)).spawn();
        self.conns.lock().await.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// Measures the link to `addr` (`crate::link_probe`).
    pub async fn probe(&self, addr: &str) -> Result<LinkSample, CallError> {
        let c = self.client(addr).await?;
        let sample = self
            .measure_link(addr, || {
                let c = c.clone();
                async move {
                    // A broken pooled connection is replaced at the next use.
                    c.sink(wire::context(PROBE_TIMEOUT), serde_bytes::ByteBuf::new())
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string())
                }
            })
            .await?;
        Ok(sample)
    }

    /// Measures the link to the daemon at `addr` (a peer server or the agent): round trips
    /// with `ping`, an empty request on a connection of its own; the messages on a bulk
    /// connection, where the bytes are read and dropped. In an RPC the copies of a 100 ms
    /// message on cores the daemons share made a 1 Gbit/s link look 7–22% slower.
    pub async fn measure_link<F, Fut>(&self, addr: &str, ping: F) -> Result<LinkSample, CallError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let max = crate::link_probe::max_bytes_to(addr, crate::link_probe::MAX_BYTES);
        // The latency a quiet link showed, unless that let too many rounds in a row go by:
        // a path whose latency grew for good would never be measured again.
        let skipped = self.skipped().get(addr).copied().unwrap_or(0);
        let quiet_latency = (skipped < crate::link_probe::MOST_SKIPPED)
            .then(|| self.latencies().get(addr).copied())
            .flatten();
        let sample = crate::link_probe::measure(addr, max, quiet_latency, |n| {
            let ping = (n == 0).then(&ping);
            async move {
                let sent = match ping {
                    Some(p) => p.await,
                    None => tokio::time::timeout(PROBE_TIMEOUT, self.bulk.probe(addr, n as u64))
                        .await
                        .map_err(|_| format!("no answer in {PROBE_TIMEOUT:?}"))
                        .and_then(|r| r.map_err(|e| e.to_string())),
                };
                sent.map_err(|e| {
                    CallError::new(CallErrorKind::Unavailable, format!("probing {addr}: {e}"))
                })
            }
        })
        .await?;
        let Some(sample) = sample else {
            *self.skipped().entry(addr.to_string()).or_default() += 1;
            return Err(CallError::new(
                CallErrorKind::Unavailable,
                format!("not probing {addr}: its round trips show the link carrying other data"),
            ));
        };
        self.skipped().remove(addr);
        self.latencies().insert(addr.to_string(), sample.latency_s);
        Ok(sample)
    }

    /// Whether a round forced through a busy spell may leave `addr`, a server at work, for a
    /// later one: at most [`crate::link_probe::MOST_SKIPPED`] rounds in a row.
    pub fn leave_for_later(&self, addr: &str) -> bool {
        let mut skipped = self.skipped();
        let n = skipped.entry(addr.to_string()).or_default();
        let leave = *n < crate::link_probe::MOST_SKIPPED;
        if leave {
            *n += 1;
        }
        leave
    }

    fn skipped(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.skipped.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn latencies(&self) -> std::sync::MutexGuard<'_, HashMap<String, f64>> {
        self.latency_s.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pulls a value kept for `owner` from its holder (one retry on a fresh connection if the
    /// pooled one broke). A holder that is gone, or no longer has the value, makes the input
    /// lost ([`CallErrorKind::InputLost`]): another server would not find it either, so the
    /// call is not retried elsewhere, and a graph recomputes the value from its producer.
    ///
    /// A large value (on a bulk connection) also times the link as calls use it
    /// ([`crate::link_probe::pulled`]): a sample for the agent.
    pub async fn pull(
        &self,
        r: &RemoteRef,
        owner: &str,
    ) -> Result<(Value, Option<LinkSample>), CallError> {
        if r.bytes >= wire::bulk::BULK_MIN_BYTES {
            let started = std::time::Instant::now();
            let v = self.pull_bulk(r, owner).await?;
            let secs = started.elapsed().as_secs_f64();
            let latency_s = self.latencies().get(&r.holder).copied().unwrap_or(0.0);
            let sample = crate::link_probe::pulled(&r.holder, v.payload_bytes(), secs, latency_s);
            return Ok((v, sample));
        }
        self.pull_rpc(r, owner).await.map(|v| (v, None))
    }

    async fn pull_bulk(&self, r: &RemoteRef, owner: &str) -> Result<Value, CallError> {
        let lost = |why: String| {
            CallError::input_lost(
                r.handle,
                format!("remote input {} ({}) is lost: {why}", r.handle, r.kind),
            )
        };
        match self.bulk.get(&r.holder, r.handle, Some(owner)).await {
            Ok(v) => Ok(v),
            Err(wire::bulk::BulkError::Refused(e)) if e.kind == CallErrorKind::InputLost => {
                Err(not_found(r.handle, &r.holder))
            }
            Err(wire::bulk::BulkError::Refused(e)) => Err(e),
            Err(e) => Err(lost(format!("pulling it from {} failed: {e}", r.holder))),
        }
    }

    async fn pull_rpc(&self, r: &RemoteRef, owner: &str) -> Result<Value, CallError> {
        let lost = |why: String| {
            CallError::input_lost(
                r.handle,
                format!("remote input {} ({}) is lost: {why}", r.handle, r.kind),
            )
        };
        for attempt in 0..2 {
            let c = self
                .client(&r.holder)
                .await
                .map_err(|e| lost(format!("its holder cannot be reached ({})", e.message)))?;
            match c
                .pull(wire::context(FETCH_TIMEOUT), r.handle, owner.to_string())
                .await
            {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if e.kind == CallErrorKind::InputLost => {
                    return Err(not_found(r.handle, &r.holder));
                }
                Ok(Err(e)) => return Err(e),
                Err(e) => {
                    self.conns.lock().await.remove(&r.holder);
                    if attempt == 1 {
                        return Err(lost(format!("pulling it from {} failed: {e}", r.holder)));
                    }
                }
            }
        }
        unreachable!("the loop returns on its second attempt")
    }
}
