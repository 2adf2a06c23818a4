//! Who may join the grid under which name: registrations checked, rate-limited and capped per
//! source, names that cannot be taken from a live server, and the forgetting of servers that
//! never proved alive or have been gone too long.
//!
//! A name belongs to the server that holds it while that server is up. A registration under a
//! live name is accepted only with the secret the agent issued to the holder (it is the holder
//! coming back, e.g. after a missed-heartbeat verdict) or when the shell has found the holder's
//! process gone ([`Registering::holder_gone`]: it dialled the holder's address and nobody, or
//! another process, answered). Anything else is [`Refusal::Contested`]: the shell decides by
//! dialling, the core never does I/O.

use super::AgentCore;
use crate::catalog::ServiceIdx;
use gridwise_proto::{ErrorCode, RegisterReply, Registration, RpcError, ServerId, Ticket};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::time::Duration;

/// Where a registration comes from and what the shell found out about the name's holder.
#[derive(Clone, Debug, Default)]
pub struct Registering {
    /// The peer address (or any key) registrations are limited per.
    pub source: String,
    /// The shell dialled the current holder of the name and it is gone (nothing answers, or a
    /// different process does).
    pub holder_gone: bool,
}

/// Why a registration was not accepted.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// Refused outright, with what to do.
    Refused(RpcError),
    /// The name is held by a server that is up, and the registration does not carry its
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
                    "the name `{name}` is held by a live server at {addr}; give this server \
                     another `name` (two servers may not share one)"
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
    /// use: the registration has no particular source and cannot take a live server's name
    /// without its secret.
    pub fn register(
        &mut self,
        reg: Registration,
        now: Duration,
    ) -> Result<RegisterReply, RpcError> {
        self.register_from(reg, &Registering::default(), now)
            .map_err(Refusal::into_rpc)
    }

    /// A server joins from `ctx.source`, or re-joins under its name (keeping its id and what
    /// was learned of it). Nothing changes unless the whole registration is acceptable.
    pub fn register_from(
        &mut self,
        reg: Registration,
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
        let cfg = &self.config;
        if !ctx.source.is_empty()
            && !self.limiter.allow(
                &ctx.source,
                now,
                cfg.registrations_per_s,
                cfg.registration_burst,
            )
        {
            return refuse(format!(
                "too many registrations from {}: at most {} per second (burst {}); retry shortly",
                ctx.source, cfg.registrations_per_s, cfg.registration_burst
            ));
        }
        if let Some(e) = self.registry.by_name(&reg.name)
            && e.is_up()
        {
            let proven = !e.secret().is_empty() && reg.secret.as_deref() == Some(e.secret());
            if !proven && !ctx.holder_gone {
                return Err(Refusal::Contested {
                    name: e.name().to_string(),
                    addr: e.addr().to_string(),
                    instance: e.instance().to_string(),
                });
            }
        }
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
        let (slot, server_id) = self.registry.register(reg, &services, now);
        // A registration is a new process: whatever was queued on the old one died with it.
        self.reservations.drop_server(slot);
        let e = self.registry.entry_mut(slot);
        e.set_credentials(&secret, &ctx.source);
        Ok(RegisterReply {
            server_id,
            heartbeat_interval_ms: u64::try_from(self.config.heartbeat_interval.as_millis())
                .unwrap_or(u64::MAX),
            secret,
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
