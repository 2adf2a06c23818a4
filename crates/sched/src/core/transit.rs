//! The calls other agents placed that no server has told of yet, and what they are likely to
//! cost the call being ranked. An agent hears of another's call when it reaches its server
//! (the arrival notice); in between it is in transit, and every agent, ranking with the same
//! models and nearly the same view, sent it to the server it would choose itself. Where that
//! server had one slot left, the next call sent there waits for a whole call: on the simulated
//! 10,000 servers, ten agents lost 5–10 % of mean response to such collisions, which one agent
//! (who sees all its calls) never meets.
//!
//! So, with several agents, the call's best candidates are ranked by their expected time: the
//! calls in transit are taken as Poisson, `u` of them on average (the rate of the others'
//! arrivals times how long this agent's own calls took to be told of), the k-th best candidate
//! holding one more call with the chance that k or more are in transit. A server with room
//! for both loses nothing by it and keeps its place; one about to fill gives way to the next
//! only where waiting behind the unseen call would cost more than the difference.
//!
//! That alone leaves the commonest collision: servers equally good for the call (a class of
//! identical machines, idle), which every agent orders the same way, so all send their calls to
//! the first of them. So among the candidates whose expected time is within [`AS_GOOD`] of the
//! best, each agent takes the one its own salt (`CoreConfig::tie_salt`) puts first: different
//! agents prefer different ones, and each keeps its preference, filling its own choice as it
//! sees it. On the simulated 10,000 servers this took ten agents from 1.057× one agent's mean
//! response to 0.985× (seeds 1–3), and from 1.048× to 0.988× over seeds 1–6, whose draws
//! alone move one agent's mean by ±5 %; three agents went from 1.009× to 1.029× over the six,
//! within that noise. One agent hears of no other's calls: its rankings do not change.

use super::AgentCore;
use gridwise_proto::Candidate;
use std::time::Duration;

/// How far back the others' arrival rate looks (an exponential window), s.
const RATE_WINDOW_S: f64 = 1.0;
/// How much each new sample of the transit time weighs.
const TRANSIT_WEIGHT: f64 = 0.05;
/// Below this expected number of unseen calls, rankings are left as they are.
const LEAST_UNSEEN: f64 = 1e-3;
/// Candidates whose expected time is within this fraction of the best's are as good as it:
/// well inside the models' error (a fifth to a third of a call's time in the simulator), so
/// the choice among them is the salt's. Ten agents did worse there with 1 % (1.049× one
/// agent's mean response on seeds 1–3, against 0.985×) and with 5 % (1.032× on seeds 1–2,
/// against 1.009×).
const AS_GOOD: f64 = 0.02;

/// What an agent knows of the calls in transit: the others' arrival rate, and how long a call
/// takes from its ranking to its server's arrival notice.
#[derive(Clone, Debug, Default)]
pub(super) struct InTransit {
    /// Arrivals per second of calls other agents placed, as of `rate_at_s`.
    rate: f64,
    rate_at_s: f64,
    /// Seconds from ranking to arrival notice of this agent's own calls (a running mean);
    /// `None` until one was told of.
    transit_s: Option<f64>,
    /// Orders servers about as good as each other, differently for each agent.
    salt: u64,
}

impl InTransit {
    pub(super) fn salted(salt: u64) -> Self {
        Self {
            salt,
            ..Self::default()
        }
    }

    /// Where the server in `slot` stands among those about as good as it, for this agent.
    fn preference(&self, slot: usize) -> u64 {
        // SplitMix64's finaliser: nearby slots and salts land far apart.
        let mut z = self.salt ^ (slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Another agent's call reached a server at `now`.
    pub(super) fn foreign_arrived(&mut self, now: Duration) {
        let now = now.as_secs_f64();
        self.rate = self.rate_at(now) + 1.0 / RATE_WINDOW_S;
        self.rate_at_s = now;
    }

    /// One of this agent's calls, ranked `took` before, reached its server.
    pub(super) fn own_arrived(&mut self, took: Duration) {
        let s = took.as_secs_f64();
        self.transit_s = Some(match self.transit_s {
            Some(t) => t + TRANSIT_WEIGHT * (s - t),
            None => s,
        });
    }

    fn rate_at(&self, now_s: f64) -> f64 {
        let age = (now_s - self.rate_at_s).max(0.0);
        self.rate * (-age / RATE_WINDOW_S).exp()
    }

    /// What this agent sees of the others' calls at `now`; `None` when it heard of none.
    pub(super) fn others(&self, now: Duration) -> Option<gridwise_proto::OthersView> {
        (self.rate_at_s > 0.0).then(|| gridwise_proto::OthersView {
            arrivals_per_s: self.rate_at(now.as_secs_f64()),
            unseen_for_s: self.transit_s,
        })
    }

    /// The expected number of the others' calls in transit at `now`.
    pub(super) fn unseen(&self, now: Duration) -> f64 {
        // Before any arrival of theirs, no rate: none unseen.
        self.others(now).map_or(0.0, |o| o.unseen_calls())
    }
}

/// The chance that a Poisson count of mean `u` is `k` or more.
fn at_least(k: usize, u: f64) -> f64 {
    // 1 − P(N < k), the terms of P(N < k) summed as they are made.
    let mut term = (-u).exp();
    let mut below = 0.0;
    for i in 0..k {
        below += term;
        term *= u / (i + 1) as f64;
    }
    (1.0 - below).max(0.0)
}

/// The wait for a slot once one more call of `extra_s` seconds took the slot that frees
/// first, given when each slot frees (`free_in`, seconds from now, ascending).
fn wait_behind_one_more(free_in: &[f64], extra_s: f64) -> f64 {
    match free_in {
        [] => extra_s,
        [only] => only + extra_s,
        [first, second, ..] => (first + extra_s).min(*second),
    }
}

impl AgentCore {
    /// Puts first, of the ranked `candidates`, the one with the least expected time once the
    /// others' calls in transit are counted (module doc); `first` becomes its server slot. The
    /// candidates' estimates are left as they are: they say what is known.
    pub(super) fn around_calls_in_transit(
        &self,
        candidates: &mut [Candidate],
        first: &mut usize,
        now: Duration,
    ) {
        let u = self.in_transit.unseen(now);
        if u < LEAST_UNSEEN || candidates.len() < 2 {
            return;
        }
        let mut expected: Vec<(usize, f64, usize)> = Vec::with_capacity(candidates.len());
        for (k, c) in candidates.iter().enumerate() {
            let Some(slot) = self.registry.slot_of(c.server_id) else {
                continue;
            };
            let e = &c.etc;
            let free_in = self
                .reservations
                .queue(slot)
                .free_in_s(now, self.registry.entry(slot).slots());
            let wait = free_in.first().copied().unwrap_or(0.0);
            // The unseen call is taken to be like this one.
            let extra = wait_behind_one_more(&free_in, e.compute_s) - wait;
            expected.push((k, e.total_s() + at_least(k + 1, u) * extra.max(0.0), slot));
        }
        let least = expected.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
        // Of those about as good as the best, the one this agent prefers: the others, ranking
        // with the same models and view, prefer others among them.
        let best = expected
            .into_iter()
            .filter(|x| x.1 <= least * (1.0 + AS_GOOD))
            .min_by_key(|x| self.in_transit.preference(x.2));
        if let Some((k, _, slot)) = best.filter(|(k, _, _)| *k > 0) {
            candidates[..=k].rotate_right(1);
            *first = slot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_tails_are_one_minus_what_lies_below() {
        assert!((at_least(1, 0.5) - (1.0 - (-0.5f64).exp())).abs() < 1e-12);
        let two = 1.0 - (-0.5f64).exp() * (1.0 + 0.5);
        assert!((at_least(2, 0.5) - two).abs() < 1e-12);
        assert_eq!(at_least(1, 0.0), 0.0);
    }

    #[test]
    fn one_more_call_takes_the_slot_that_frees_first() {
        assert_eq!(wait_behind_one_more(&[0.0, 0.0], 2.0), 0.0);
        assert_eq!(wait_behind_one_more(&[0.0, 1.5], 2.0), 1.5);
        assert_eq!(wait_behind_one_more(&[0.0, 3.0], 2.0), 2.0);
        assert_eq!(wait_behind_one_more(&[0.5], 2.0), 2.5);
    }

    #[test]
    fn the_unseen_are_the_others_rate_times_the_transit() {
        let mut t = InTransit::default();
        assert_eq!(t.unseen(Duration::from_secs(1)), 0.0);
        for i in 0..1000 {
            t.foreign_arrived(Duration::from_secs_f64(1.0 + i as f64 * 1e-3));
        }
        // Nothing known of the transit yet: nothing is counted unseen.
        assert_eq!(t.unseen(Duration::from_secs(2)), 0.0);
        t.own_arrived(Duration::from_micros(200));
        let u = t.unseen(Duration::from_secs(2));
        // About 1,000 arrivals a second (the window's estimate of it) × 200 µs.
        assert!(u > 0.1 && u < 0.2, "{u}");
        // A quiet spell lets the rate fade.
        assert!(t.unseen(Duration::from_secs(10)) < 1e-3 * u);
    }
}
