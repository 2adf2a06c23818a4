//! Taking a waiting call back. A call sent while this client held some servers unresponsive
//! (a partition, a frozen server) went to a server below them, where it may wait behind
//! others; when one of them answers again, the call asks the agent where it would go now,
//! and if that is a server it can reach again, the server it waits on gives it back unrun
//! (`withdraw`, decided by `gridwise_server_core::StartGate`) and the call is placed afresh
//! (`Inner::run_call`). Without this the calls a healed partition frees wait for the queues
//! they were sent to, up to a second here, before the healed servers get work.

use crate::client::Inner;
use gridwise_proto::{CallId, CallProfile, RankOptions};
use gridwise_runtime::wire;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Ends, with the reason, when a call waiting on a server should be taken back and placed
/// afresh.
pub(crate) type Mover = std::pin::Pin<Box<dyn Future<Output = String> + Send>>;

/// How often, after a server this client held unresponsive answers again, a waiting call asks
/// the agent where it would go now, and for how long: a healed server registers with the agent
/// within a heartbeat or two of answering the client.
const MOVE_LOOKS: u32 = 8;
const MOVE_LOOK_EVERY: Duration = Duration::from_millis(150);

impl Inner {
    /// What moves a call about to be sent to `here`, while servers this client holds
    /// unresponsive (cut off, frozen) are out of its reach: once one answers again, the agent
    /// is asked where the call would go now (a ranking released at once), a few times while
    /// the healed servers register again; the mover ends when the first server it names that
    /// this client can reach is one of those, not `here`. None while every server answers.
    pub(crate) fn mover(
        self: &Arc<Self>,
        profile: CallProfile,
        opts: RankOptions,
        here: &str,
    ) -> Option<Mover> {
        let out = self.conn.liveness.unresponsive();
        if out.is_empty() {
            return None;
        }
        let (me, here) = (self.clone(), here.to_string());
        Some(Box::pin(async move {
            let back = me.conn.liveness.any_answers_again(&out).await;
            for _ in 0..MOVE_LOOKS {
                if let Ok(r) = me.conn.rank(&profile, &opts).await {
                    me.release_later(r.ticket);
                    let first = r
                        .candidates
                        .iter()
                        .find(|c| !me.conn.liveness.is_suspect(&c.addr));
                    if let Some(c) = first.filter(|c| c.addr != here && out.contains(&c.addr)) {
                        return format!(
                            "{} ({}) answers again ({back} first) and is ranked first now",
                            c.name, c.addr
                        );
                    }
                }
                tokio::time::sleep(MOVE_LOOK_EVERY).await;
            }
            std::future::pending().await
        }))
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
