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
    /// A finished call's timing: its time in the server less queue and kernel, and less its
    /// input transfer when it `pulled` inputs from other servers (that time is in the server's
    /// too: a graph's cross-site pulls, 0.17 s each, made a server's every call look 0.1 s
    /// dearer and divisible jobs left it out). Nonsense (negative or non-finite) is ignored.
    pub fn record(&mut self, t: &Timing, pulled: bool) {
        let pulls = if pulled { t.input_transfer_s } else { 0.0 };
        let o = t.server_s - t.queue_wait_s - t.kernel_s - pulls;
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
            o.record(
                &Timing {
                    queue_wait_s: 0.5,
                    input_transfer_s: 9.0,
                    kernel_s: server_s - 0.5 - extra,
                    server_s,
                },
                false,
            );
        }
        o.record(
            &Timing {
                server_s: 1.0,
                kernel_s: 2.0,
                ..Timing::default()
            },
            false,
        );
        let e = o.estimate();
        assert!((e.mean - 0.002).abs() < 1e-9 && e.sd > 0.001, "{e:?}");
    }

    #[test]
    fn a_pull_from_another_server_is_not_overhead() {
        let mut o = CallOverhead::default();
        // 0.17 s pulling a 2 MB input across a 100 Mbit/s link, 1 ms of overhead.
        for _ in 0..4 {
            o.record(
                &Timing {
                    queue_wait_s: 0.0,
                    input_transfer_s: 0.17,
                    kernel_s: 0.3,
                    server_s: 0.471,
                },
                true,
            );
        }
        assert!(
            (o.estimate().mean - 0.001).abs() < 1e-9,
            "{:?}",
            o.estimate()
        );
    }
}
