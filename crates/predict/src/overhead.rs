//! What a server spends on a call besides its queue and its kernel: decoding the request,
//! encoding the reply, handing between threads. Small against a long kernel, but the whole
//! error of a prediction for a short one, and its jitter is part of every interval.

use crate::stoch::{Stoch, of_samples};
use gridwise_proto::Timing;
use std::collections::VecDeque;

/// Calls remembered: the overhead drifts with the server's load and message sizes.
const KEPT: usize = 64;

/// The overheads of a server's recent calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallOverhead {
    recent: VecDeque<f64>,
    now: Stoch,
}

impl CallOverhead {
    /// A finished call's timing: its time in the server less queue and kernel. Nonsense
    /// (negative or non-finite) is ignored.
    pub fn record(&mut self, t: &Timing) {
        let o = t.server_s - t.queue_wait_s - t.kernel_s;
        if !(o.is_finite() && o >= 0.0) {
            return;
        }
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(o);
        self.now = of_samples(self.recent.make_contiguous());
    }

    /// The mean overhead and its spread (zero before any call).
    pub fn estimate(&self) -> Stoch {
        self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_is_server_time_less_queue_and_kernel() {
        let mut o = CallOverhead::default();
        assert_eq!(o.estimate(), Stoch::point(0.0));
        for (server_s, extra) in [(1.0, 0.001), (2.0, 0.003)] {
            o.record(&Timing {
                queue_wait_s: 0.5,
                input_transfer_s: 9.0,
                kernel_s: server_s - 0.5 - extra,
                server_s,
            });
        }
        o.record(&Timing {
            server_s: 1.0,
            kernel_s: 2.0,
            ..Timing::default()
        });
        let e = o.estimate();
        assert!((e.mean - 0.002).abs() < 1e-9 && e.sd > 0.001, "{e:?}");
    }
}
