//! Where a measured graph run's makespan went: its critical chain, walked back from the call
//! that ended last, each step to whichever call it waited for that ended latest — a producer
//! of its inputs or the call before it on its planned server (one slot per server, as in
//! `bench schedule`). Each step's wait (its kernel's start less that call's end) is time
//! beyond the kernels: dispatch through the client, transfers and pulls (the plan has only its
//! estimated transfers), slot hand-over. The waits are counted by what the step waited for.

use serde_json::{Value as Json, json};

/// What the chain is made of, one call per entry of the inputs.
pub struct Step {
    /// When its server finished the call (kernel, then keeping outputs and replying), s from
    /// the start of the run; its kernel is taken to have ended here.
    pub end_s: f64,
    /// How long its kernel ran.
    pub kernel_s: f64,
    /// The server that ran it.
    pub server: String,
    /// The calls whose outputs it uses.
    pub producers: Vec<usize>,
    /// The call before it on its planned server, if any.
    pub before: Option<usize>,
}

/// Gaps of one kind along the chain: how many, how long in all.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gaps {
    pub count: usize,
    pub total_s: f64,
}

impl Gaps {
    fn add(&mut self, s: f64) {
        self.count += 1;
        self.total_s += s;
    }

    fn json(self) -> Json {
        json!({"count": self.count, "total_s": round(self.total_s)})
    }
}

/// The chain of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chain {
    /// Calls on it.
    pub calls: usize,
    /// Their kernels' time.
    pub kernel_s: f64,
    /// When the chain's first call started: it waited for no call of the run.
    pub lead_s: f64,
    /// Steps to the call before on the same server that was not a producer.
    pub server_order: Gaps,
    /// Steps to a producer on the same server.
    pub same_server_data: Gaps,
    /// Steps to a producer on another server.
    pub cross_server_data: Gaps,
}

impl Chain {
    /// The chain of `steps` (empty for no calls).
    pub fn of(steps: &[Step]) -> Chain {
        let mut chain = Chain::default();
        let end = |i: usize| steps[i].end_s;
        let Some(mut i) = (0..steps.len()).max_by(|&a, &b| end(a).total_cmp(&end(b))) else {
            return chain;
        };
        loop {
            let s = &steps[i];
            chain.calls += 1;
            chain.kernel_s += s.kernel_s;
            let start = s.end_s - s.kernel_s;
            let waited = s
                .producers
                .iter()
                .copied()
                .chain(s.before)
                .max_by(|&a, &b| end(a).total_cmp(&end(b)));
            let Some(p) = waited else {
                chain.lead_s = start;
                return chain;
            };
            let gap = start - end(p);
            if !s.producers.contains(&p) {
                chain.server_order.add(gap);
            } else if steps[p].server == s.server {
                chain.same_server_data.add(gap);
            } else {
                chain.cross_server_data.add(gap);
            }
            i = p;
        }
    }

    /// All the time on the chain that was not kernels, lead aside.
    pub fn gap_s(&self) -> f64 {
        self.server_order.total_s + self.same_server_data.total_s + self.cross_server_data.total_s
    }

    /// The `chain` object of a `bench schedule` line.
    pub fn json(&self) -> Json {
        json!({
            "calls": self.calls,
            "kernel_s": round(self.kernel_s),
            "gap_s": round(self.gap_s()),
            "lead_s": round(self.lead_s),
            "server_order": self.server_order.json(),
            "same_server_data": self.same_server_data.json(),
            "cross_server_data": self.cross_server_data.json(),
        })
    }
}

fn round(x: f64) -> f64 {
    (x * 1e5).round() / 1e5
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(
        end_s: f64,
        kernel_s: f64,
        server: &str,
        producers: &[usize],
        before: Option<usize>,
    ) -> Step {
        Step {
            end_s,
            kernel_s,
            server: server.into(),
            producers: producers.to_vec(),
            before,
        }
    }

    #[test]
    fn walks_back_through_what_each_call_waited_for_longest() {
        // a (s1) → b (s2, after x on s2) → c (s1, after a there), and x on s2 alone.
        let steps = [
            step(1.0, 0.9, "s1", &[], None),     // a: starts at 0.1
            step(1.2, 1.2, "s2", &[], None),     // x: ends after a
            step(2.5, 1.0, "s2", &[0], Some(1)), // b: waits for x (1.2), starts 1.5
            step(3.0, 0.4, "s1", &[2], Some(0)), // c: waits for b (2.5), starts 2.6
        ];
        let c = Chain::of(&steps);
        // c ← b (another server's output) ← x (its server's previous call, not a producer).
        assert_eq!(c.calls, 3);
        assert!((c.kernel_s - 2.6).abs() < 1e-12);
        assert_eq!(c.lead_s, 0.0);
        assert_eq!(c.cross_server_data.count, 1);
        assert!((c.cross_server_data.total_s - 0.1).abs() < 1e-12);
        assert_eq!(c.server_order.count, 1);
        assert!((c.server_order.total_s - 0.3).abs() < 1e-12);
        assert_eq!(c.same_server_data, Gaps::default());
        // The chain's time is its kernels, gaps and lead.
        assert!((c.kernel_s + c.gap_s() + c.lead_s - 3.0).abs() < 1e-12);
    }

    #[test]
    fn a_producer_on_the_same_server_is_a_data_step() {
        let steps = [
            step(1.0, 1.0, "s1", &[], None),
            step(2.2, 1.0, "s1", &[0], Some(0)),
        ];
        let c = Chain::of(&steps);
        assert_eq!(c.same_server_data.count, 1);
        assert!((c.same_server_data.total_s - 0.2).abs() < 1e-12);
        assert_eq!(c.server_order.count, 0);
        assert_eq!(Chain::of(&[]), Chain::default());
    }
}
