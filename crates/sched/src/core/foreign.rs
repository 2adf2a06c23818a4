//! What the servers' heartbeats say of the calls they hold ([`InFlight`]), and the queue view
//! made from it. Where several agents share the servers, each sees only its own reservations:
//! the calls a heartbeat lists that this agent did not place become reservations of its view
//! until the next heartbeat replaces them, so the view of the others' calls is as old as the
//! server's last heartbeat (a call another agent placed since is not in it). And a call this
//! agent placed is predicted again from what the server says of it: one that overran its
//! prediction holds its slot, and those waiting behind it wait longer.

use super::{AgentCore, Call};
use crate::queue::Assignment;
use gridwise_proto::{CallProfile, InFlight, Ticket};
use std::time::Duration;

/// The least of its predicted time a running call is still counted to need: one that overran
/// its prediction holds its slot until it ends, and a slot counted free would draw calls.
const OVERRUN_LEFT: f64 = 0.05;

/// Per server slot, the tickets of other agents' calls this agent holds as reservations.
#[derive(Clone, Debug, Default)]
pub(super) struct Foreign(Vec<Vec<Ticket>>);

impl AgentCore {
    /// Replaces what this agent holds of other agents' calls on the server in `slot` by what
    /// its heartbeat at `now` lists, and predicts its own calls listed there again: each with
    /// this agent's models (the store gives every agent the same ones), less what its kernel
    /// has run. Without it an agent's own calls that overran their predictions counted as
    /// ended: on the simulated 1,000 servers one agent queued 55 calls on a four-slot server
    /// it thought free.
    pub(super) fn track_in_flight(&mut self, slot: usize, in_flight: &[InFlight], now: Duration) {
        // Gone ones ended (their reports may still be on the way); the rest are predicted
        // again from what they have run by now.
        for t in std::mem::take(self.foreign_on(slot)) {
            self.reservations.release(t);
        }
        // Running calls first, then the waiting ones, each of which queues behind those
        // before it (its finish is the wait for a slot plus its time, as a call this agent
        // places is reserved).
        let mut order: Vec<&InFlight> = in_flight.iter().collect();
        order.sort_by(|a, b| b.ran_s.unwrap_or(-1.0).total_cmp(&a.ran_s.unwrap_or(-1.0)));
        for f in order {
            if !self.repredict_own(slot, f, now) {
                self.hold_foreign(slot, f, now);
            }
        }
    }

    /// Predicts again, at `now`, when the call of `f` ends if it is this agent's own on `slot`
    /// (the others' were let go first). Its reservation keeps its ticket, holder and age, and
    /// the kernel time predicted when it was placed, which its report is judged against.
    /// False if this agent holds no such call.
    fn repredict_own(&mut self, slot: usize, f: &InFlight, now: Duration) -> bool {
        let Some(held) = self.reservations.lift(slot, f.ticket) else {
            return false;
        };
        let again = self.listed_assignment(slot, f, now).map(|a| Assignment {
            assigned_at: held.assigned_at,
            compute_s: held.compute_s,
            ..a
        });
        self.reservations.requeue(slot, again.unwrap_or(held));
        true
    }

    /// Calls that just reached the server `server` (its arrival notice): those this agent did
    /// not place join its view at once, until the server's next heartbeat replaces them.
    pub fn arrived(
        &mut self,
        server: gridwise_proto::ServerId,
        calls: &[InFlight],
        now: Duration,
    ) -> gridwise_proto::Ack {
        let Some(slot) = self.registry.slot_of(server) else {
            return gridwise_proto::Ack::Reregister;
        };
        for f in calls {
            match self.own_assigned_at(slot, f.ticket) {
                Some(at) => self.in_transit.own_arrived(now.saturating_sub(at)),
                None if !self.reservations.contains(f.ticket) => {
                    self.in_transit.foreign_arrived(now);
                    self.hold_foreign(slot, f, now);
                }
                None => {}
            }
        }
        gridwise_proto::Ack::Ok
    }

    /// When this agent ranked its own call `ticket`, pending on `slot`; `None` for a call it
    /// did not place.
    fn own_assigned_at(&mut self, slot: usize, ticket: gridwise_proto::Ticket) -> Option<Duration> {
        if self.foreign_on(slot).contains(&ticket) {
            return None;
        }
        self.reservations
            .queue(slot)
            .iter()
            .find(|a| a.ticket == ticket)
            .map(|a| a.assigned_at)
    }

    /// Whether `ticket`, reported done on `slot`, was another agent's call held here; it is
    /// forgotten.
    pub(super) fn ended_foreign(&mut self, slot: usize, ticket: Ticket) -> bool {
        let held = self.foreign_on(slot);
        match held.iter().position(|t| *t == ticket) {
            Some(i) => {
                held.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// The tickets of other agents' calls held on `slot`.
    fn foreign_on(&mut self, slot: usize) -> &mut Vec<Ticket> {
        if self.foreign.0.len() <= slot {
            self.foreign.0.resize_with(slot + 1, Vec::new);
        }
        &mut self.foreign.0[slot]
    }

    /// Holds `f` as a reservation on `slot` unless this agent holds it already (its own call,
    /// or told of it before), or knows nothing of its service.
    fn hold_foreign(&mut self, slot: usize, f: &InFlight, now: Duration) {
        if self.reservations.contains(f.ticket) {
            return;
        }
        if let Some(a) = self.listed_assignment(slot, f, now) {
            self.reservations.add(slot, a, None);
            self.foreign_on(slot).push(f.ticket);
        }
    }

    /// What `f` is expected to hold of the server in `slot`, as a reservation; `None` for a
    /// service this agent does not know.
    fn listed_assignment(&self, slot: usize, f: &InFlight, now: Duration) -> Option<Assignment> {
        let svc = self.catalog.get(&f.service)?;
        let profile = CallProfile {
            service: f.service.clone(),
            sizes: f.sizes.clone(),
            in_bytes: 0,
            out_bytes: 0,
            remote_in: Vec::new(),
            inline_bytes: 0,
        };
        let call = Call {
            svc,
            work: svc.facts.work(&profile),
            footprint: 0,
            profile: &profile,
            now,
            predictor: None,
        };
        let etc = self.estimate(slot, &call);
        let compute = etc.compute_s;
        let left = match f.ran_s {
            Some(ran) => (compute - ran).max(OVERRUN_LEFT * compute),
            None => etc.queue_wait_s + compute,
        };
        Some(Assignment {
            ticket: f.ticket,
            assigned_at: now,
            compute_s: compute,
            finish_s: now.as_secs_f64() + left,
            finish_sd_s: etc.compute_sd_s,
        })
    }
}
