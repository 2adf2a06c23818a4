//! Taking a waiting call back. A call waits in a server's queue; meanwhile a server this client
//! had lost (cut off by the network, frozen) answers again. The call then asks the agent where
//! it would go now, a few times while the healed servers register again, and if the agent's
//! first choice among the servers this client reaches is one that came back, the server the
//! call waits on gives it back unrun (`withdraw`, decided by `gridwise_server_core::StartGate`)
//! and the call is placed afresh (`Inner::run_call`). Without this the calls a healed
//! partition frees wait in the queues they were sent to, up to a second on the test bed,
//! before the healed servers get work.

use crate::client::Inner;
use gridwise_proto::{CallId, CallProfile, RankOptions};
use gridwise_runtime::wire;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a call may be moved with: its profile and options, to ask the agent where it would go.
pub(crate) struct MayMove<'a> {
    pub(crate) profile: &'a CallProfile,
    pub(crate) opts: &'a RankOptions,
}

/// How often, after a server this client had lost answers again, a waiting call asks the agent
/// where it would go now, and for how long: a healed server registers with the agent within a
/// heartbeat or two of answering the client, and the client's word that it reaches the server
/// again may come to the agent just after the first look.
const MOVE_LOOKS: u32 = 8;
const MOVE_LOOK_EVERY: Duration = Duration::from_millis(150);

impl Inner {
    /// Ends, with the reason, once the agent ranks first for the call waiting at `here` a
    /// server that answered this client again after `since` (each ranking is released at
    /// once); never ends if none does within the looks after a return.
    pub(crate) async fn better_than(
        self: &Arc<Self>,
        here: &str,
        call: &MayMove<'_>,
        since: Instant,
    ) -> String {
        let live = &self.conn.liveness;
        for _ in 0..MOVE_LOOKS {
            if let Ok(r) = self.conn.rank(call.profile, call.opts).await {
                self.release_later(r.ticket);
                let first = r.candidates.iter().find(|c| !live.is_suspect(&c.addr));
                if let Some(c) =
                    first.filter(|c| c.addr != here && live.answered_again_since(&c.addr, since))
                {
                    return format!(
                        "{} ({}) answers again and is ranked first now",
                        c.name, c.addr
                    );
                }
            }
            tokio::time::sleep(MOVE_LOOK_EVERY).await;
        }
        std::future::pending().await
    }

    /// Asks a server to give back a call that has not started; whether it did (a call it
    /// does not answer for in time is left to run there).
    pub(crate) async fn withdraw_on_server(
        &self,
        server: &gridwise_proto::ServerApiClient,
        call_id: CallId,
        who: &str,
    ) -> bool {
        let timeout = self.cfg.agent_timeout();
        let ask = server.withdraw(wire::context(timeout), call_id);
        match tokio::time::timeout(timeout, ask).await {
            Ok(Ok(taken)) => taken,
            Ok(Err(e)) => {
                tracing::debug!(server = %who, %call_id, "withdrawal not delivered: {e}");
                false
            }
            Err(_) => {
                tracing::debug!(server = %who, %call_id, "withdrawal not answered in time");
                false
            }
        }
    }
}
