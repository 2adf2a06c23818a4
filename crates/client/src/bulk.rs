//! A call's large values on bulk connections ([`gridwise_runtime::wire::bulk`]): arguments are
//! staged on the server about to run the call, straight from the caller's buffers (so a retry
//! on another server sends them again without a copy), and large outputs are collected from
//! the server that staged them, into buffers of their final size.

use crate::client::{Attempt, Inner, call_failed};
use gridwise_proto::{CallErrorKind, DataHandle, RemoteRef, Value};
use gridwise_runtime::wire;
use gridwise_runtime::wire::bulk::BulkError;

impl Inner {
    /// The inputs as the request to `addr` carries them: small values copied, large ones
    /// staged there first and passed as references (`Err`: the attempt's outcome).
    pub(crate) async fn stage_inputs(
        &self,
        addr: &str,
        who: &str,
        inputs: &[Value],
    ) -> Result<(Vec<Value>, Vec<DataHandle>), Attempt> {
        let mut sent = Vec::with_capacity(inputs.len());
        let mut staged = Vec::new();
        for v in inputs {
            if !v.goes_bulk() {
                sent.push(v.clone());
                continue;
            }
            // Boxed, as every large-value path here: the futures of the calls that carry no
            // large value stay small (a spawned call's future is copied as it starts and ends).
            match Box::pin(self.conn.bulk.put(addr, v)).await {
                Ok(r) => {
                    staged.push(r.handle);
                    sent.push(Value::Ref(r));
                }
                Err(e) => {
                    Box::pin(self.free_staged(addr, staged)).await;
                    return Err(bulk_failure(who, "sending an argument", e));
                }
            }
        }
        Ok((sent, staged))
    }

    /// Replaces the outputs `addr` staged for us (references at positions not in `keep`) by
    /// their values.
    pub(crate) async fn collect_outputs(
        &self,
        who: &str,
        outputs: &mut [Value],
        keep: &[u32],
    ) -> Result<(), Attempt> {
        for (i, slot) in outputs.iter_mut().enumerate() {
            let Value::Ref(r) = slot else { continue };
            if keep.contains(&(i as u32)) {
                continue;
            }
            *slot = Box::pin(self.conn.bulk_get(r))
                .await
                .map_err(|e| collect_failure(who, i, r, e))?;
        }
        Ok(())
    }

    /// Frees values staged for a call that did not take them (the server would free them
    /// after a minute anyway; this is on failure paths only).
    pub(crate) async fn free_staged(&self, addr: &str, staged: Vec<DataHandle>) {
        if staged.is_empty() {
            return;
        }
        let Ok(conn) = self.conn.server(addr).await else {
            return;
        };
        if let Err(e) = conn
            .client
            .free(wire::context(self.call_timeout), staged)
            .await
        {
            tracing::debug!(server = %addr, "could not free staged arguments: {e}");
        }
    }
}

fn bulk_failure(who: &str, what: &str, e: BulkError) -> Attempt {
    match e {
        BulkError::Refused(e) if e.retryable() => Attempt::NotRun(format!("{who}: {e}")),
        BulkError::Refused(e) => {
            let g = call_failed(who, e.clone());
            Attempt::Failed(e, g)
        }
        e => Attempt::NotRun(format!("{who}: {what}: {e}")),
    }
}

fn collect_failure(who: &str, i: usize, r: &RemoteRef, e: BulkError) -> Attempt {
    match e {
        BulkError::Refused(e) if e.kind != CallErrorKind::InputLost => {
            let g = call_failed(who, e.clone());
            Attempt::Failed(e, g)
        }
        e => Attempt::Crashed(format!(
            "{who} ran the call, but its output {i} ({}) could not be brought back: {e}",
            r.kind
        )),
    }
}
