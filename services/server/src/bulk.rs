//! What this server does with bulk connections ([`gridwise_runtime::wire::bulk`]): a client's
//! large arguments are staged for its next call here, and large values leave here raw —
//! outputs staged for their client, and kept values pulled by a peer for a call of their owner.

use crate::data::not_found;
use crate::handler::ServerHandler;
use gridwise_proto::{CallError, CallErrorKind, DataHandle, RemoteRef, Value};
use gridwise_runtime::wire::bulk::BulkStore;
use gridwise_runtime::wire::{Charge, Peer, Role};
use std::sync::Arc;

impl BulkStore for ServerHandler {
    fn stage(&self, peer: &Peer, value: Value, charge: Charge) -> Result<RemoteRef, CallError> {
        Ok(self.stage_for(peer, value, Some(charge)))
    }

    fn read(
        &self,
        peer: &Peer,
        handle: DataHandle,
        owner: Option<&str>,
    ) -> Result<Arc<Value>, CallError> {
        // A client reads its own values; a server reads only for a call of the value's owner.
        let owner = match (peer.role, owner) {
            (Role::Client, None) => peer.principal.as_str(),
            (Role::Server, Some(o)) => o,
            (Role::Client, Some(_)) => {
                return Err(CallError::new(
                    CallErrorKind::BadArguments,
                    "a client reads only its own values: ask without an owner",
                ));
            }
            (Role::Server, None) => {
                return Err(CallError::new(
                    CallErrorKind::BadArguments,
                    "a server pulls a value for a call: name the call's owner",
                ));
            }
        };
        self.read_kept(handle, owner)
            .ok_or_else(|| not_found(handle, self.addr()))
    }

    fn moved(&self) {
        self.note_data_moving();
    }
}

/// Serves one bulk connection, logging why it ended if it was not the peer's doing.
pub async fn serve(handler: ServerHandler, conn: gridwise_runtime::wire::Accepted) {
    let peer = conn.peer.addr;
    let h = handler.for_peer(&conn.peer);
    if let Err(why) = gridwise_runtime::wire::bulk::serve(conn, &h).await {
        tracing::info!(%peer, "closing a bulk connection: {why}");
    }
}
