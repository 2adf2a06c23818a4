//! Who may join the grid under which name: registrations checked, rate-limited and capped per
//! source, names that cannot be taken from a live server, and the forgetting of servers that
//! never proved alive or have been gone too long.
//!
//! A name belongs to the process holding it (and to its registration secret) until the agent
//! has declared that process down *and* found it gone. A registration under a held name is
//! accepted when it:
//! - carries the holder's secret (the holder itself, coming back after a missed-heartbeat
//!   verdict);
//! - or answers at the holder's own address, as the shell verified by dialling it
//!   ([`Registering::verified`]): the holder's process no longer listens there (a restart in
//!   place);
//! - or comes once the holder is down (silent past the heartbeat timeout, or restored from the
//!   store and not back yet) and the shell has dialled the holder's address and found nobody,
//!   or another process, there ([`Registering::holder_gone`]).
//!
//! A live holder therefore always wins: a frozen server (SIGSTOP, a full connection table)
//! keeps its name for the heartbeat timeout, and a newcomer elsewhere is refused without the
//! agent dialling anyone. For a down holder the core answers [`Refusal::Contested`] and the
//! shell decides by dialling; the core never does I/O.

use super::AgentCore;
use crate::catalog::ServiceIdx;
use gridwise_proto::{Ack, ErrorCode, RegisterReply, Registration, RpcError, ServerId, Ticket};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::time::Duration;

/// Where a registration comes from and what the shell found out by dialling.
#[derive(Clone, Debug, Default)]
pub struct Registering {
    /// The peer address (or any key) registrations are capped per.
    pub source: String,
    /// The shell dialled the registration's address and this very process (its instance)
    /// answered there; in-process registrations, which have no address to fake, count as
    /// verified.
    pub verified: bool,
    /// The shell dialled the current holder of the name and it is gone (nothing answers, or a
    /// different process does).
    pub holder_gone: bool,
}

/// Why a registration was not accepted.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// Refused outright, with what to do.
    Refused(RpcError),
    /// The name is held by a server that is down, and the registration does not carry its
    /// secret: the shell should dial the holder and retry with `holder_gone` if it is gone.
    Contested {
        name: String,
        /// The holder's registered address: where the shell dials it.
        addr: String,
        /// The instance the holder registered with: another one answering at `addr` means the
        /// holder is gone.
        instance: String,
    },
}

impl Refusal {
    /// The refusal as the wire error (a contested name is refused, saying by whom it is held).
    pub fn into_rpc(self) -> RpcError {
        match self {
            Refusal::Refused(e) => e,
            Refusal::Contested { name, addr, .. } => RpcError::new(
                ErrorCode::RpcRefused,
                format!(
                    "the name `{name}` is held by a server that still answers at {addr}; give \
                     this server another `name` (two servers may not share one)"
                ),
            ),
        }
    }
}

impl From<RpcError> for Refusal {
    fn from(e: RpcError) -> Self {
        Refusal::Refused(e)
    }
}

/// Token buckets of registrations per source.
#[derive(Clone, Debug, Default)]
pub(crate) struct RegistrationLimiter {
    buckets: HashMap<String, (f64, Duration)>,
}

impl RegistrationLimiter {
    /// Takes one registration from `source` if its bucket (refilled at `per_s`, holding at
    /// most `burst`) has one.
    fn allow(&mut self, source: &str, now: Duration, per_s: f64, burst: f64) -> bool {
        if self.buckets.len() > 100_000 {
            // Sources whose buckets have refilled are indistinguishable from new ones.
            self.buckets
                .retain(|_, (tokens, at)| *tokens + (now - *at).as_secs_f64() * per_s < burst);
        }
        let (tokens, at) = self
            .buckets
            .entry(source.to_string())
            .or_insert((burst, now));
        *tokens = (*tokens + now.saturating_sub(*at).as_secs_f64() * per_s).min(burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl AgentCore {
    /// A server joins, or re-joins under its name (keeping its id). For tests and in-process
    /// use: the registration has no particular source, is where it says it is, and cannot
    /// take a live server's name elsewhere without its secret.
    pub fn register(
        &mut self,
        reg: Registration,
        now: Duration,
    ) -> Result<RegisterReply, RpcError> {
        let ctx = Registering {
            verified: true,
            ..Registering::default()
        };
        self.register_from(reg, &ctx, now)
            .map_err(Refusal::into_rpc)
    }

    /// Takes one registration attempt from `source` out of its rate limit, refusing when it
    /// has none left: asked before the shell dials anyone, so a flood of registrations costs
    /// at most the limit's dials.
    pub fn may_register(&mut self, source: &str, now: Duration) -> Result<(), RpcError> {
        let cfg = &self.config;
        if self
            .limiter
            .allow(source, now, cfg.registrations_per_s, cfg.registration_burst)
        {
            return Ok(());
        }
        Err(RpcError::new(
            ErrorCode::RpcRefused,
            format!(
                "too many registrations from {source}: at most {} per second (burst {}); retry \
                 shortly",
                cfg.registrations_per_s, cfg.registration_burst
            ),
        ))
    }

    /// A server joins from `ctx.source`, or re-joins under its name (keeping its id and what
    /// was learned of it). Nothing changes unless the whole registration is acceptable.
    pub fn register_from(
        &mut self,
        mut reg: Registration,
        ctx: &Registering,
        now: Duration,
    ) -> Result<RegisterReply, Refusal> {
        let refuse = |m: String| Err(Refusal::Refused(RpcError::new(ErrorCode::RpcRefused, m)));
        if reg.name.trim().is_empty() {
            return refuse(
                "registration refused: the server name is empty; give the server a unique `name`"
                    .into(),
            );
        }
        if reg.addr.trim().is_empty() {
            return refuse(format!(
                "registration of server `{}` refused: its address is empty; set the host:port \
                 clients reach it at",
                reg.name
            ));
        }
        if reg.slots == 0 {
            return refuse(format!(
                "registration of server `{}` refused: it declares 0 slots; `slots` must be at \
                 least 1",
                reg.name
            ));
        }
        self.may_take_name(&reg, ctx, now)?;
        let from_source = if ctx.source.is_empty() {
            0
        } else {
            self.registry
                .iter()
                .filter(|e| e.is_up() && e.source() == ctx.source && e.name() != reg.name)
                .count()
        };
        if from_source >= self.config.max_servers_per_source {
            return refuse(format!(
                "{from_source} servers registered from {} are up, the most one source may have \
                 (max_servers_per_source); stop some or raise the limit",
                ctx.source
            ));
        }
        let mut complexities = Vec::with_capacity(reg.services.len());
        for (i, desc) in reg.services.iter().enumerate() {
            if reg.services[..i].iter().any(|d| d.name == desc.name) {
                return refuse(format!(
                    "registration of server `{}` refused: service `{}` is listed twice",
                    reg.name, desc.name
                ));
            }
            let other = self
                .catalog
                .get(&desc.name)
                .and_then(|e| self.registry.other_provider(e.idx, &reg.name));
            complexities.push(self.catalog.admit(&reg.name, desc, other)?);
        }

        let services: Vec<(ServiceIdx, bool)> = reg
            .services
            .iter()
            .zip(complexities)
            .map(|(d, c)| {
                let (idx, changed) = self.catalog.upsert(d, c);
                let family = self.config.families.get(&d.name).copied();
                self.catalog.facts_mut(idx).family = family.unwrap_or_default();
                (idx, changed)
            })
            .collect();
        self.rr_turns.resize(self.catalog.len(), 0);
        self.invalidate_rate_orders();
        let secret = self.new_secret(&reg.name);
        let held = self.hold_claims(&mut reg);
        let (slot, server_id) = self.registry.register(reg, &services, now);
        // A registration is a new process: whatever was queued on the old one died with it.
        self.reservations.drop_server(slot);
        let e = self.registry.entry_mut(slot);
        e.set_credentials(&secret, &ctx.source);
        e.trust.held = held;
        Ok(RegisterReply {
            server_id,
            heartbeat_interval_ms: u64::try_from(self.config.heartbeat_interval.as_millis())
                .unwrap_or(u64::MAX),
            secret,
        })
    }

    /// What to answer the process `instance` when it speaks for server `id`: `None` while it
    /// holds the entry (or the agent does not know the id: the event's own answer says so),
    /// [`Ack::Replaced`] when another process has taken the name since — it must not beat for
    /// the new holder.
    pub fn replaced(&self, id: ServerId, instance: &str) -> Option<Ack> {
        let e = self.registry.get(id)?;
        (e.instance() != instance).then_some(Ack::Replaced)
    }

    /// Whether `reg` may take its name (see the module's rules): nothing is held, or it is
    /// the holder, or the holder is provably gone.
    fn may_take_name(
        &self,
        reg: &Registration,
        ctx: &Registering,
        now: Duration,
    ) -> Result<(), Refusal> {
        let Some(e) = self.registry.by_name(&reg.name) else {
            return Ok(());
        };
        let holder = !e.secret().is_empty() && reg.secret.as_deref() == Some(e.secret());
        let in_its_place = ctx.verified && reg.addr == e.addr();
        if holder || in_its_place {
            return Ok(());
        }
        if e.is_up() {
            let heard = now.saturating_sub(e.last_heard()).as_secs_f64();
            return Err(Refusal::Refused(RpcError::new(
                ErrorCode::RpcRefused,
                format!(
                    "the name `{}` is held by a live server at {} (heard from {heard:.1} s ago); \
                     a name passes to another process only once its holder has been silent for \
                     the heartbeat timeout ({:?}) and no longer answers at its address. Give \
                     this server another `name`, or stop the other one",
                    e.name(),
                    e.addr(),
                    self.config.heartbeat_timeout
                ),
            )));
        }
        if ctx.holder_gone {
            return Ok(());
        }
        Err(Refusal::Contested {
            name: e.name().to_string(),
            addr: e.addr().to_string(),
            instance: e.instance().to_string(),
        })
    }

    /// Whether restored servers may still come back on their own: the agent restarted less
    /// than `restore_grace` ago and some servers it knew have not registered again. A call
    /// that finds no live server then is worth holding a moment rather than failing.
    pub fn awaiting_servers(&self, now: Duration) -> bool {
        now < self.config.restore_grace && self.registry.iter().any(|e| e.restored())
    }

    /// A fresh value no peer can guess: a keyed hash (SipHash with this agent's random key)
    /// of a counter.
    fn unguessable(&mut self, salt: &str) -> u64 {
        self.issued += 1;
        self.key.hash_one((salt, self.issued))
    }

    fn new_secret(&mut self, name: &str) -> String {
        let (a, b) = (self.unguessable(name), self.unguessable(name));
        format!("{a:016x}{b:016x}")
    }

    /// A ticket no peer can guess, so that only its holders (the client that asked, the server
    /// it was sent to) can give it back.
    pub(crate) fn new_ticket(&mut self) -> Ticket {
        loop {
            let t = Ticket(self.unguessable("ticket"));
            if t.0 != 0 && !self.reservations.contains(t) {
                return t;
            }
        }
    }

    /// Forgets servers that registered but never sent a heartbeat within the timeout (they
    /// never proved alive: nothing of them is kept), and servers down for longer than
    /// `server_retention`. Returns their ids and names.
    pub(crate) fn forget_stale(&mut self, now: Duration) -> Vec<(ServerId, String)> {
        let timeout = self.config.heartbeat_timeout;
        let retention = self.config.server_retention;
        let mut gone = Vec::new();
        let mut slot = 0;
        while slot < self.registry.len() {
            let e = self.registry.entry(slot);
            let silent = now.saturating_sub(e.last_heard());
            let never_beat = !e.proven() && !e.restored() && silent > timeout;
            let long_gone = !e.is_up() && silent > retention;
            if !(never_beat || long_gone) {
                slot += 1;
                continue;
            }
            self.reservations.drop_server(slot);
            let (entry, moved) = self.registry.remove(slot);
            if let Some(from) = moved {
                self.reservations.move_server(from, slot);
            }
            gone.push((entry.id(), entry.name().to_string()));
            self.invalidate_rate_orders();
        }
        gone
    }

    /// The id a restored server had, so that its id survives agent restarts.
    pub(crate) fn keep_id(&mut self, name: &str, id: ServerId) {
        if let Some(slot) = self.registry.slot_by_name(name) {
            self.registry.set_id(slot, id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_refills_at_its_rate_up_to_its_burst() {
        let mut l = RegistrationLimiter::default();
        let s = |x: f64| Duration::from_secs_f64(x);
        for _ in 0..3 {
            assert!(l.allow("a", s(0.0), 1.0, 3.0));
        }
        assert!(!l.allow("a", s(0.0), 1.0, 3.0));
        assert!(l.allow("b", s(0.0), 1.0, 3.0), "sources are limited apart");
        assert!(!l.allow("a", s(0.5), 1.0, 3.0));
        assert!(l.allow("a", s(1.6), 1.0, 3.0));
        assert!(l.allow("a", s(100.0), 1.0, 3.0));
        assert!(l.allow("a", s(100.0), 1.0, 3.0));
        assert!(l.allow("a", s(100.0), 1.0, 3.0));
        assert!(!l.allow("a", s(100.0), 1.0, 3.0));
    }
}
