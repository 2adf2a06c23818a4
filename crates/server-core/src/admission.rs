//! Whether a server takes a call: its footprint against the memory budget, the outputs it
//! returns inside the reply against the frame limits, and the room calls waiting for a slot may
//! hold. Each refusal says what was too large and what to do.

use gridwise_proto::{CallError, CallErrorKind, footprint_bytes};

/// What a reply adds to its outputs' payload on the wire: the frame, the response envelope,
/// the timing and the server's name, with room to spare.
pub const REPLY_OVERHEAD: u64 = 64 * 1024;

/// Calls whose footprint is below this are not charged to the memory budget: at most `slots`
/// of them run at once, and charging costs a lock per call.
pub const UNCHARGED_BELOW: u64 = 256 * 1024;

/// The share of the memory budget the inputs of calls waiting here may hold.
const WAITING_SHARE: u64 = 4;

/// A server's limits, as configured.
#[derive(Clone, Debug)]
pub struct Admission {
    /// The server's name, for the refusals.
    pub server: String,
    /// `memory_budget_bytes`.
    pub budget_bytes: u64,
    /// `max_frame_bytes`: the largest reply it sends.
    pub max_frame_bytes: u64,
}

/// A call's sizes as the server sees them on arrival.
#[derive(Clone, Debug)]
pub struct CallSizes<'a> {
    pub service: &'a str,
    /// Its inputs, those sent and those it will pull (at their declared size).
    pub input_bytes: u64,
    /// Each output's bytes, and whether it goes back inside the reply (not kept here, not
    /// staged for the client to collect on a bulk connection).
    pub outputs: Vec<(u64, bool)>,
    /// The client's reply limit (its `max_frame_bytes`; 0 for none).
    pub client_reply_limit: u64,
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

impl Admission {
    /// The call's footprint ([`footprint_bytes`]) when it fits this server, or why not: more
    /// than the whole budget, or outputs returned inline that no reply may carry.
    pub fn admit(&self, call: &CallSizes<'_>) -> Result<u64, CallError> {
        let out: u64 = call.outputs.iter().map(|(b, _)| *b).sum();
        let footprint = footprint_bytes(call.input_bytes, out);
        if footprint > self.budget_bytes {
            return Err(CallError::new(
                CallErrorKind::ResourceLimit,
                format!(
                    "`{}` needs {:.1} MB here ({:.1} MB of inputs and {:.1} MB of outputs, twice), more than server {}'s memory budget of {:.1} MB (memory_budget_bytes); use smaller sizes or a server with more memory",
                    call.service,
                    mb(footprint),
                    mb(call.input_bytes),
                    mb(out),
                    self.server,
                    mb(self.budget_bytes)
                ),
            ));
        }
        let returned = call
            .outputs
            .iter()
            .filter(|(_, inline)| *inline)
            .map(|(b, _)| *b)
            .sum();
        self.check_reply(call.service, returned, call.client_reply_limit)?;
        Ok(footprint)
    }

    /// Refuses `returned` bytes of outputs that would not fit in one reply frame: this
    /// server's, or the client's (`client_limit`, 0 for none).
    pub fn check_reply(
        &self,
        service: &str,
        returned: u64,
        client_limit: u64,
    ) -> Result<(), CallError> {
        let (limit, whose) = self.reply_limit(client_limit);
        if returned.saturating_add(REPLY_OVERHEAD) > limit {
            return Err(CallError::new(
                CallErrorKind::ResourceLimit,
                format!(
                    "`{service}` would return {:.1} MB of outputs, more than one reply may carry ({:.1} MB, {whose}); keep the large outputs on the server (keep_outputs / call_keep) and fetch them in parts, or use smaller sizes",
                    mb(returned),
                    mb(limit)
                ),
            ));
        }
        Ok(())
    }

    /// The largest reply a call may have (the client's limit or this server's, the lower) and
    /// whose limit that is.
    pub fn reply_limit(&self, client_limit: u64) -> (u64, &'static str) {
        if client_limit > 0 && client_limit < self.max_frame_bytes {
            (client_limit, "the client's max_frame_bytes")
        } else {
            (self.max_frame_bytes, "this server's max_frame_bytes")
        }
    }

    /// The room left in a reply of a call that returns `returned` bytes inline, for copies of
    /// its kept outputs.
    pub fn reply_room(&self, client_limit: u64, returned: u64) -> u64 {
        self.reply_limit(client_limit)
            .0
            .saturating_sub(REPLY_OVERHEAD)
            .saturating_sub(returned)
    }

    /// Whether a call holding `bytes` of inputs may wait for a slot or memory while waiting
    /// calls hold `waiting_before`: they may hold a quarter of the budget together (another
    /// server may take the call).
    pub fn may_wait(&self, waiting_before: u64, bytes: u64) -> Result<(), CallError> {
        let cap = self.budget_bytes / WAITING_SHARE;
        if bytes > 0 && waiting_before.saturating_add(bytes) > cap {
            return Err(CallError::new(
                CallErrorKind::Unavailable,
                format!(
                    "server {} is saturated: calls waiting here already hold {:.1} MB of inputs; another server may take this call",
                    self.server,
                    mb(waiting_before)
                ),
            ));
        }
        Ok(())
    }
}

/// The bytes of finished arrays' buffers a server may keep to use again
/// (`gridwise_proto::value::limit_spare`): a quarter of its memory budget, as for the calls
/// waiting. They are charged to no call, so a server with a small budget keeps few.
pub fn spare_bytes(budget_bytes: u64) -> u64 {
    budget_bytes / WAITING_SHARE
}

/// Whether a call of `footprint` bytes is charged to the memory budget.
pub fn charged(footprint: u64) -> bool {
    footprint >= UNCHARGED_BELOW
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    fn server() -> Admission {
        Admission {
            server: "s1".into(),
            budget_bytes: 100 * MB,
            max_frame_bytes: 16 * MB,
        }
    }

    fn call(input_bytes: u64, outputs: Vec<(u64, bool)>) -> CallSizes<'static> {
        CallSizes {
            service: "dgemm",
            input_bytes,
            outputs,
            client_reply_limit: 0,
        }
    }

    #[test]
    fn spare_buffers_take_a_quarter_of_the_budget() {
        assert_eq!(spare_bytes(64 << 20), 16 << 20);
        assert_eq!(spare_bytes(server().budget_bytes), 25 * MB);
    }

    #[test]
    fn the_footprint_is_inputs_and_outputs_twice_and_must_fit_the_budget() {
        let s = server();
        assert_eq!(s.admit(&call(20 * MB, vec![(10 * MB, false)])), Ok(60 * MB));
        // 50 MB twice is the whole budget: still admitted; a byte more is not.
        assert_eq!(
            s.admit(&call(40 * MB, vec![(10 * MB, false)])),
            Ok(100 * MB)
        );
        let e = s
            .admit(&call(40 * MB, vec![(10 * MB + 1, false)]))
            .unwrap_err();
        assert_eq!(e.kind, CallErrorKind::ResourceLimit);
        assert!(e.message.contains("memory_budget_bytes"), "{e}");
        assert!(e.message.contains("server s1"), "{e}");
    }

    #[test]
    fn only_outputs_returned_inline_count_against_the_reply_and_the_lower_limit_wins() {
        let s = server();
        // 20 MB kept or staged: not in the reply.
        assert!(s.admit(&call(MB, vec![(20 * MB, false)])).is_ok());
        let e = s.admit(&call(MB, vec![(20 * MB, true)])).unwrap_err();
        assert!(e.message.contains("this server's max_frame_bytes"), "{e}");
        // The overhead counts: an output of exactly the frame does not fit.
        assert!(s.check_reply("f", 16 * MB - REPLY_OVERHEAD, 0).is_ok());
        assert!(s.check_reply("f", 16 * MB - REPLY_OVERHEAD + 1, 0).is_err());
        // A client that takes less is the limit.
        let e = s.check_reply("f", 3 * MB, 2 * MB).unwrap_err();
        assert!(e.message.contains("the client's max_frame_bytes"), "{e}");
        // A client limit above the server's does not raise it.
        assert_eq!(s.reply_limit(64 * MB).0, 16 * MB);
        assert_eq!(s.reply_room(0, MB), 16 * MB - REPLY_OVERHEAD - MB);
        assert_eq!(s.reply_room(MB, 2 * MB), 0);
    }

    #[test]
    fn waiting_calls_hold_a_quarter_of_the_budget_at_most() {
        let s = server();
        assert!(s.may_wait(0, 25 * MB).is_ok());
        assert!(s.may_wait(20 * MB, 5 * MB).is_ok());
        let e = s.may_wait(20 * MB, 5 * MB + 1).unwrap_err();
        assert_eq!(e.kind, CallErrorKind::Unavailable);
        assert!(e.message.contains("saturated"), "{e}");
        // A call holding nothing always waits.
        assert!(s.may_wait(u64::MAX, 0).is_ok());
    }

    #[test]
    fn small_calls_are_not_charged() {
        assert!(!charged(UNCHARGED_BELOW - 1));
        assert!(charged(UNCHARGED_BELOW));
    }
}
