//! Connections to other servers, for pulling remote inputs straight from their holders.

use crate::data::not_found;
use gridwise_proto::{
    CallError, CallErrorKind, LinkSample, RemoteRef, ServerApiClient, Value, wire,
};
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
        let max = crate::link_probe::max_bytes_to(addr, crate::link_probe::PEER_MAX_BYTES);
        crate::link_probe::measure(addr, max, |n| {
            let c = c.clone();
            async move {
                // A broken pooled connection is replaced at the next use.
                c.sink(
                    wire::context(PROBE_TIMEOUT),
                    serde_bytes::ByteBuf::from(vec![0u8; n]),
                )
                .await
                .map_err(|e| {
                    CallError::new(CallErrorKind::Unavailable, format!("probing {addr}: {e}"))
                })
            }
        })
        .await
    }

    /// Pulls a value kept for `owner` from its holder (one retry on a fresh connection if the
    /// pooled one broke). A holder that is gone, or no longer has the value, makes the input
    /// lost ([`CallErrorKind::InputLost`]): another server would not find it either, so the
    /// call is not retried elsewhere, and a graph recomputes the value from its producer.
    pub async fn pull(&self, r: &RemoteRef, owner: &str) -> Result<Value, CallError> {
        let lost = |why: String| {
            CallError::input_lost(
                r.handle,
                format!("remote input {} ({}) is lost: {why}", r.handle, r.kind),
            )
        };
        if r.bytes >= wire::bulk::BULK_MIN_BYTES {
            return match self.bulk.get(&r.holder, r.handle, Some(owner)).await {
                Ok(v) => Ok(v),
                Err(wire::bulk::BulkError::Refused(e)) if e.kind == CallErrorKind::InputLost => {
                    Err(not_found(r.handle, &r.holder))
                }
                Err(wire::bulk::BulkError::Refused(e)) => Err(e),
                Err(e) => Err(lost(format!("pulling it from {} failed: {e}", r.holder))),
            };
        }
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
