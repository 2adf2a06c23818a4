//! What the agent believes of a server before work has shown it: a registration's claims are
//! words, and anyone with the server token can make them.
//!
//! - **Rates held back.** A new process claiming more speed than the grid's confirmed servers
//!   show (the median of their rates, per service and for the default rate) is ranked at that
//!   median until a call confirms it; then its claims stand. Where no server is confirmed yet
//!   (a grid starting, an agent restarted) there is nothing to compare with and claims stand.
//! - **Confirmed by a call.** A call the agent ranked on a server and that server reported done
//!   confirms it ([`AgentCore::confirm`]). A new process under the name starts unconfirmed.
//! - **Suspected at once.** A client that could not reach a candidate says so with the
//!   ticket of its ranking ([`AgentCore::unreachable`]); the server is then ranked behind
//!   every server not suspected for a heartbeat timeout, instead of staying a first choice
//!   until its heartbeats stop (a server that answers the agent but not its clients never
//!   stops them). Suspected again after that, for twice as long, and so on, until a call the
//!   agent ranked there is reported done.
//! - **Never only the unproven.** While confirmed servers are up and can take the call, they
//!   hold at least half of a ranking's places ([`AgentCore::with_confirmed`]), so a flood of
//!   new servers cannot leave a client with nowhere to go, even if one confirmed server fails
//!   at the same time.

use super::{AgentCore, Call, Source};
use gridwise_proto::{Candidate, Registration, ServerId, Ticket};
use std::time::Duration;

/// What a client's word that it could not reach a server did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Suspicion {
    /// The server is suspected from now on, for this long.
    For(Duration),
    /// It was suspected already.
    Already,
    /// Not taken: the ticket is not pending, or not this client's, or the server unknown.
    Ignored,
}

impl Suspicion {
    /// Whether the word was taken (the server is suspected now).
    pub fn taken(self) -> bool {
        self != Suspicion::Ignored
    }
}

/// The median of `xs` (none when empty); NaN-free input.
fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

fn usable(r: f64) -> bool {
    r.is_finite() && r > 0.0
}

impl AgentCore {
    /// Caps `reg`'s claimed rates at what the confirmed servers show, returning the claims
    /// held back (the default rate and per-service rates as claimed), if any was capped. A
    /// process the agent has already confirmed keeps its claims.
    pub(super) fn hold_claims(&self, reg: &mut Registration) -> Option<(f64, Vec<(String, f64)>)> {
        let known = self.registry.by_name(&reg.name);
        if known.is_some_and(|e| e.is_confirmed() && e.instance() == reg.instance) {
            return None;
        }
        let confirmed = || {
            self.registry
                .iter()
                .filter(|e| e.is_up() && e.is_confirmed() && e.name() != reg.name)
        };
        let claimed = (reg.default_rate, reg.rates.clone());
        let mut capped = false;
        let default_cap = median(
            confirmed()
                .map(|e| e.default_rate())
                .filter(|r| usable(*r))
                .collect(),
        );
        if let Some(cap) = default_cap
            && reg.default_rate > cap
        {
            reg.default_rate = cap;
            capped = true;
        }
        for (service, rate) in &mut reg.rates {
            let Some(svc) = self.catalog.get(service) else {
                continue;
            };
            let shown: Vec<f64> = confirmed()
                .filter_map(|e| e.rate(svc.idx).filter(|r| usable(*r)))
                .collect();
            if let Some(cap) = median(shown)
                && *rate > cap
            {
                *rate = cap;
                capped = true;
            }
        }
        capped.then_some(claimed)
    }

    /// A call the agent ranked on the server in `slot` was reported done there: its claims
    /// stand from now on.
    pub(super) fn confirm(&mut self, slot: usize) {
        self.registry.entry_mut(slot).trust.suspicions = 0;
        if self.registry.entry(slot).is_confirmed() {
            return;
        }
        let held = self.registry.change(slot, |e| {
            e.trust.confirmed = true;
            e.trust.held.take()
        });
        if let Some((default_rate, rates)) = held {
            self.registry.set_rates(slot, default_rate, &rates);
            self.invalidate_rate_orders();
        }
    }

    /// A client (`holder`, the one its ticket was issued to) could not reach `server`, one of
    /// the candidates of the ranking that gave it `ticket`. Nothing changes when the ticket is
    /// not pending or not the client's: only a client that was sent there may say so.
    pub fn unreachable(
        &mut self,
        ticket: Ticket,
        server: ServerId,
        holder: &str,
        now: Duration,
    ) -> Suspicion {
        let Some(key) = self.holder_key(Some(holder)) else {
            return Suspicion::Ignored;
        };
        if !self.reservations.is_held_by(ticket, key) {
            return Suspicion::Ignored;
        }
        let Some(slot) = self.registry.slot_of(server) else {
            return Suspicion::Ignored;
        };
        let trust = &mut self.registry.entry_mut(slot).trust;
        if now < trust.suspect_until {
            return Suspicion::Already;
        }
        // A server still unreachable after its last suspicion ran out is asked about less
        // and less often: a ghost costs clients a round of failed connections per period,
        // and the periods double (up to 64 heartbeat timeouts).
        let period = self.config.heartbeat_timeout * (1u32 << trust.suspicions.min(6));
        trust.suspicions = trust.suspicions.saturating_add(1);
        trust.suspect_until = now + period;
        trust.suspected_by = Some(key);
        Suspicion::For(period)
    }

    /// The client `holder`, whose report made `server` suspect, reached it again (its link
    /// healed): the suspicion ends now rather than when its period runs out, which after a
    /// few reports is many heartbeat timeouts. Whether it was lifted.
    pub fn reached_again(&mut self, server: ServerId, holder: &str, now: Duration) -> bool {
        let Some(key) = self.holder_key(Some(holder)) else {
            return false;
        };
        let Some(slot) = self.registry.slot_of(server) else {
            return false;
        };
        let trust = &mut self.registry.entry_mut(slot).trust;
        if now >= trust.suspect_until || trust.suspected_by != Some(key) {
            return false;
        }
        trust.suspect_until = now;
        trust.suspected_by = None;
        true
    }

    /// `slots` without the servers clients failed to reach lately, unless that leaves none:
    /// what graphs and divisible jobs are planned over.
    pub(super) fn reachable(&self, mut slots: Vec<usize>, now: Duration) -> Vec<usize> {
        let suspected = |s: &usize| self.registry.entry(*s).is_suspected(now);
        if slots.iter().any(suspected) && !slots.iter().all(suspected) {
            slots.retain(|s| !suspected(s));
        }
        slots
    }

    /// Makes sure confirmed servers hold at least half of a ranking's places (or all there
    /// are, if fewer) while any is up and can take the call: the best of them by estimate
    /// replace the worst unproven candidates, and the list is ordered by estimate again.
    /// `first` (the slot the ranking reserves on) follows the new head. A flood of new servers
    /// then costs a client some quick failed connections, never its call, even when one of the
    /// confirmed servers fails too.
    pub(super) fn with_confirmed(
        &self,
        candidates: &mut Vec<Candidate>,
        first: &mut usize,
        call: &Call<'_>,
        source: &Source<'_>,
        limit: usize,
    ) {
        let Source::Providers(slots) = source else {
            return;
        };
        if self.registry.confirmed_up() == 0 {
            return;
        }
        let confirmed = |c: &Candidate| {
            self.registry
                .get(c.server_id)
                .is_some_and(|e| e.is_confirmed())
        };
        let limit = limit.max(1);
        let want = limit.div_ceil(2);
        let held = candidates.iter().filter(|c| confirmed(c)).count();
        if held >= want {
            return;
        }
        let mut more: Vec<(usize, gridwise_proto::Etc)> = slots
            .iter()
            .filter(|&&s| {
                let e = self.registry.entry(s);
                e.is_confirmed()
                    && self.eligible(e, call)
                    && !candidates.iter().any(|c| c.server_id == e.id())
            })
            .map(|&s| (s, self.estimate(s, call)))
            .collect();
        if more.is_empty() {
            return;
        }
        // Suspicion is a client's word and confirmation is work: a suspected confirmed server
        // still comes before none, after the others.
        let suspected = |s: usize| self.registry.entry(s).is_suspected(call.now);
        more.sort_by(|a, b| {
            (suspected(a.0), a.1.total_s())
                .partial_cmp(&(suspected(b.0), b.1.total_s()))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        more.truncate(want - held);
        // Room: the worst unproven candidates go.
        while candidates.len() + more.len() > limit {
            let Some(worst) = candidates.iter().rposition(|c| !confirmed(c)) else {
                break;
            };
            candidates.remove(worst);
        }
        for (slot, etc) in more {
            let e = self.registry.entry(slot);
            candidates.push(Candidate {
                server_id: e.id(),
                name: e.name().to_string(),
                addr: e.addr().to_string(),
                etc,
            });
        }
        candidates.sort_by(|a, b| a.etc.total_s().total_cmp(&b.etc.total_s()));
        if let Some(slot) = candidates
            .first()
            .and_then(|c| self.registry.slot_of(c.server_id))
        {
            *first = slot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }
}
