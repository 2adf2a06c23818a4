//! Connections to other servers, for pulling remote inputs straight from their holders.

use crate::data::not_found;
use gridwise_proto::{CallError, CallErrorKind, RemoteRef, ServerApiClient, Value, wire};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::Mutex;

/// A pool of connections to other servers, by address.
pub struct Peers {
    wire: wire::WireConfig,
    me: String,
    conns: Mutex<HashMap<String, ServerApiClient>>,
}

/// How long pulling one value may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(600);

impl Peers {
    /// A pool using the grid's connection settings; `me` names this server in hellos.
    pub fn new(wire: wire::WireConfig, me: String) -> Self {
        Self {
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
            .map_err(|e| {
                CallError::new(
                    CallErrorKind::Unavailable,
                    format!("pulling a remote input: {e}"),
                )
            })?;
        let c = ServerApiClient::new(wire::client_config(), wire::client_transport(framed)).spawn();
        self.conns.lock().await.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// Pulls a value from its holder (one retry on a fresh connection if the pooled one broke).
    pub async fn fetch(&self, r: &RemoteRef) -> Result<Value, CallError> {
        for attempt in 0..2 {
            let c = self.client(&r.holder).await?;
            match c.fetch(wire::context(FETCH_TIMEOUT), r.handle).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if e.kind == CallErrorKind::BadArguments => {
                    return Err(not_found(r.handle, &r.holder));
                }
                Ok(Err(e)) => return Err(e),
                Err(e) => {
                    self.conns.lock().await.remove(&r.holder);
                    if attempt == 1 {
                        return Err(CallError::new(
                            CallErrorKind::Unavailable,
                            format!("pulling remote input {} from {}: {e}", r.handle, r.holder),
                        ));
                    }
                }
            }
        }
        unreachable!("the loop returns on its second attempt")
    }
}
