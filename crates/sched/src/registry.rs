//! The servers the agent knows, up or down, and which of them offer each service.
//!
//! Servers are never removed: a down server keeps its id, history and counters so that when it
//! registers again under the same name it resumes where it was.

use crate::catalog::ServiceIdx;
use gridwise_predict::{
    HostKnowledge, LoadRecord, LoadSampling, LoadTrack, OfferKnowledge, ServerView,
};
use gridwise_proto::{
    Ack, Heartbeat, LoadSample, ModelProgress, NotOffered, Registration, ServerId, ServerState,
    ServerStatus,
};
use std::collections::HashMap;
use std::time::Duration;

/// A service as one server offers it.
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    pub service: ServiceIdx,
    /// What the server has shown about it: rate, histories, performance model.
    pub known: OfferKnowledge,
}

/// One server as the agent sees it. Its fields change only through the registry and the
/// core's events (registration, heartbeat, report, sweep), so they are read through methods.
#[derive(Clone, Debug)]
pub struct ServerEntry {
    /// Assigned at first registration, kept across re-registrations under the same name.
    id: ServerId,
    /// Unique in the registry: a registration under it replaces this entry (a restart) and
    /// keeps its id.
    name: String,
    /// Where clients reach it.
    addr: String,
    /// Calls it runs at once.
    slots: u32,
    /// Names of the services it offers, in registration order.
    services: Vec<String>,
    /// What its description files describe that it does not offer, as it registered.
    not_offered: Vec<NotOffered>,
    /// Per-service data, aligned with `services`.
    offers: Vec<Offer>,
    /// Physical memory of the host, bytes (0 where the server could not tell), as registered:
    /// ranking reads `memory_budget_bytes`, not this.
    memory_bytes: u64,
    /// CPU cores of the host, as registered: ranking counts `slots`, not cores.
    cores: u32,
    /// Up from a registration on; down once silent past the heartbeat timeout, or restored
    /// from the store, until it registers again. Only up servers get calls.
    state: ServerState,
    /// When it was last heard from (registration, heartbeat or report).
    last_heard: Duration,
    /// Its load in the last heartbeat; all zero from a registration until the next heartbeat.
    load: LoadSample,
    /// Calls reported finished since it first registered.
    completed: u64,
    /// Its model builds, as its last heartbeat told.
    progress: Vec<ModelProgress>,
    /// Its default rate and background load: what estimates read about it whatever it runs.
    host: HostKnowledge,
    /// Random per server process, as its registration said.
    instance: String,
    /// The secret the agent issued at its registration; a re-registration presenting it is
    /// this server coming back.
    secret: String,
    /// The peer address the registration came from (registrations are limited per source).
    source: String,
    /// Whether it has sent a heartbeat since it registered (the shell saves it then).
    joined: bool,
    /// Whether it has ever sent a heartbeat: a registration that never did is forgotten at
    /// the heartbeat timeout, not marked down and kept.
    proven: bool,
    /// Whether it was restored from the agent's store and has not registered since.
    restored: bool,
    /// Bytes one call may take there (inputs, outputs and their working copies).
    memory_budget_bytes: u64,
    /// The largest frame the server sends or receives, bytes: a call whose inputs are larger
    /// is not sent there.
    max_frame_bytes: u64,
    /// What it has shown of its claims: see `core/trust.rs`.
    pub(crate) trust: Trust,
}

/// What the agent believes of a server's claims until calls show them (decided in
/// `core/trust.rs`; kept here with the rest of the entry).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Trust {
    /// A call the agent ranked there was reported done there, by this process.
    pub(crate) confirmed: bool,
    /// The rates its registration claimed above what the grid's confirmed servers show,
    /// held back until a call confirms it: the default rate and per-service rates.
    pub(crate) held: Option<(f64, Vec<(String, f64)>)>,
    /// A client failed to reach it: it is ranked behind the servers clients can reach until
    /// then (time since the agent started).
    pub(crate) suspect_until: Duration,
    /// Suspicions since a call last ran there: each doubles the next one's length.
    pub(crate) suspicions: u32,
    /// The client (holder key) whose report set the current suspicion: only its word that
    /// the server answers again lifts it.
    pub(crate) suspected_by: Option<u64>,
}

impl ServerEntry {
    /// Assigned at first registration, kept across re-registrations under the same name.
    pub fn id(&self) -> ServerId {
        self.id
    }

    /// Unique in the registry: a registration under it replaces this entry (a restart) and
    /// keeps its id.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where clients reach it.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Calls it runs at once.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Names of the services it offers, in registration order.
    pub fn services(&self) -> &[String] {
        &self.services
    }

    /// Per-service data, aligned with `services`.
    pub fn all_offers(&self) -> &[Offer] {
        &self.offers
    }

    /// Operations/s for services without a rate of their own (0 when it did not calibrate).
    pub fn default_rate(&self) -> f64 {
        self.host.default_rate
    }

    /// Physical memory of the host, bytes (0 where the server could not tell), as registered:
    /// ranking reads [`memory_budget_bytes`](Self::memory_budget_bytes), not this.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }

    /// CPU cores of the host, as registered: ranking counts [`slots`](Self::slots), not cores.
    pub fn cores(&self) -> u32 {
        self.cores
    }

    /// Up from a registration on; down once silent past the heartbeat timeout, or restored
    /// from the store, until it registers again. Only up servers get calls.
    pub fn state(&self) -> ServerState {
        self.state
    }

    /// When it was last heard from (registration, heartbeat or report), as time since the
    /// agent started.
    pub fn last_heard(&self) -> Duration {
        self.last_heard
    }

    /// Its load in the last heartbeat; all zero from a registration until the next heartbeat.
    pub fn load(&self) -> LoadSample {
        self.load
    }

    /// Calls reported finished since it first registered.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// Its model builds, as its last heartbeat told.
    pub fn progress(&self) -> &[ModelProgress] {
        &self.progress
    }

    /// Its load history (one-minute load averages, one per `load_sample`), without the
    /// periods its own model benchmarks ran.
    pub fn load_track(&self) -> &LoadTrack {
        &self.host.load
    }

    /// What is known of the host whatever it runs: its sensors' forecasts among it.
    pub fn host(&self) -> &HostKnowledge {
        &self.host
    }

    pub(crate) fn host_mut(&mut self) -> &mut HostKnowledge {
        &mut self.host
    }

    /// What an estimate of `service` here may read.
    pub fn view(&self, service: ServiceIdx) -> ServerView<'_> {
        ServerView {
            host: &self.host,
            offer: self.offer(service).map(|o| &o.known),
        }
    }

    /// Random per server process, as its registration said.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The secret the agent issued at its registration; a re-registration presenting it is
    /// this server coming back.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The peer address the registration came from (registrations are limited per source).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether it has sent a heartbeat since it registered (the shell saves it then).
    pub fn joined(&self) -> bool {
        self.joined
    }

    /// Whether it has ever sent a heartbeat: a registration that never did is forgotten at
    /// the heartbeat timeout, not marked down and kept.
    pub fn proven(&self) -> bool {
        self.proven
    }

    /// Whether it was restored from the agent's store and has not registered since.
    pub fn restored(&self) -> bool {
        self.restored
    }

    /// Bytes one call may take there (inputs, outputs and their working copies).
    pub fn memory_budget_bytes(&self) -> u64 {
        self.memory_budget_bytes
    }

    /// The largest frame the server sends or receives, bytes: a call whose inputs are larger
    /// is not sent there.
    pub fn max_frame_bytes(&self) -> u64 {
        self.max_frame_bytes
    }

    /// Its data for `service`, to learn into.
    pub(crate) fn offer_mut(&mut self, service: ServiceIdx) -> Option<&mut Offer> {
        self.offers.iter_mut().find(|o| o.service == service)
    }

    /// A call of it was reported finished (well or not).
    pub(crate) fn count_completed(&mut self) {
        self.completed += 1;
    }

    /// It was heard from at `now` (a report): it is alive.
    pub(crate) fn heard_at(&mut self, now: Duration) {
        self.last_heard = now;
    }

    /// Restored from the agent's store: down until it registers again, but it had proved
    /// alive before it was saved.
    pub(crate) fn mark_restored(&mut self) {
        self.state = ServerState::Down;
        self.proven = true;
        self.restored = true;
    }

    /// The secret issued to this registration, and the peer address it came from.
    pub(crate) fn set_credentials(&mut self, secret: &str, source: &str) {
        secret.clone_into(&mut self.secret);
        source.clone_into(&mut self.source);
    }

    /// Whether it is up (heartbeats arrive).
    pub fn is_up(&self) -> bool {
        self.state == ServerState::Up
    }

    /// Whether a call the agent ranked there was reported done by this process: what it
    /// claimed at registration has been shown by work.
    pub fn is_confirmed(&self) -> bool {
        self.trust.confirmed
    }

    /// Whether a client failed to reach it lately (it is ranked behind the others).
    pub fn is_suspected(&self, now: Duration) -> bool {
        now < self.trust.suspect_until
    }

    /// Whether a call fits what the server accepts: its memory budget for the call's
    /// `footprint` ([`CallProfile::footprint_bytes`]), and its frame limit for the `inline`
    /// bytes the request carries (large values travel on bulk connections, and those are
    /// not bound by it).
    ///
    /// [`CallProfile::footprint_bytes`]: gridwise_proto::CallProfile::footprint_bytes
    pub fn can_hold(&self, footprint: u64, inline: u64) -> bool {
        footprint <= self.memory_budget_bytes && inline <= self.max_frame_bytes
    }

    /// Its data for `service`, if it offers it.
    pub fn offer(&self, service: ServiceIdx) -> Option<&Offer> {
        // Servers offer a handful of services: a scan beats hashing.
        self.offers.iter().find(|o| o.service == service)
    }

    /// Whether it offers `service`.
    pub fn offers(&self, service: ServiceIdx) -> bool {
        self.offer(service).is_some()
    }

    /// The rate to divide `service`'s complexity by: its own calibrated rate, else the default
    /// rate; `None` when neither is a positive finite number.
    pub fn rate(&self, service: ServiceIdx) -> Option<f64> {
        self.view(service).rate()
    }

    /// Its status line at `now`, with `pending` calls reserved on it.
    pub fn status(&self, now: Duration, pending: usize) -> ServerStatus {
        ServerStatus {
            id: self.id,
            name: self.name.clone(),
            addr: self.addr.clone(),
            state: self.state,
            services: self.services.clone(),
            slots: self.slots,
            pending: u32::try_from(pending).unwrap_or(u32::MAX),
            completed: self.completed,
            load: self.load,
            last_heard_s: now.saturating_sub(self.last_heard).as_secs_f64(),
            default_rate: self.host.default_rate,
            not_offered: self.not_offered.clone(),
        }
    }
}

/// Every server ever registered, by slot, name and id, plus the servers of each service.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    servers: Vec<ServerEntry>,
    by_name: HashMap<String, usize>,
    by_id: HashMap<ServerId, usize>,
    // Per service, the slots of the servers offering it (up or down), sorted by server name so
    // that policies break ties and rotate by name without sorting per decision.
    providers: Vec<Vec<usize>>,
    // Servers up and confirmed: a ranking without any of them looks for one only when some
    // exist, so a grid where none is confirmed yet pays nothing for the look.
    confirmed_up: usize,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The server in slot `slot` (slots come from this registry, so it exists).
    pub fn entry(&self, slot: usize) -> &ServerEntry {
        &self.servers[slot]
    }

    pub(crate) fn entry_mut(&mut self, slot: usize) -> &mut ServerEntry {
        &mut self.servers[slot]
    }

    /// Changes the server in `slot` by `f`, keeping the count of confirmed live servers.
    pub(crate) fn change<R>(&mut self, slot: usize, f: impl FnOnce(&mut ServerEntry) -> R) -> R {
        let counted = |e: &ServerEntry| e.is_up() && e.trust.confirmed;
        let before = counted(&self.servers[slot]);
        let r = f(&mut self.servers[slot]);
        let after = counted(&self.servers[slot]);
        match (before, after) {
            (false, true) => self.confirmed_up += 1,
            (true, false) => self.confirmed_up -= 1,
            _ => {}
        }
        r
    }

    /// Sets the server's default rate and the per-service `rates` it offers (claims that a
    /// call confirmed).
    pub(crate) fn set_rates(&mut self, slot: usize, default_rate: f64, rates: &[(String, f64)]) {
        let e = &mut self.servers[slot];
        e.host.default_rate = default_rate;
        for (name, rate) in rates {
            if let Some(i) = e.services.iter().position(|s| s == name) {
                e.offers[i].known.rate = Some(*rate);
            }
        }
    }

    /// How many servers are up and confirmed.
    pub fn confirmed_up(&self) -> usize {
        self.confirmed_up
    }

    /// The slot of the server with `id`.
    pub fn slot_of(&self, id: ServerId) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// The slot of the server called `name`.
    pub fn slot_by_name(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub fn get(&self, id: ServerId) -> Option<&ServerEntry> {
        self.slot_of(id).map(|s| &self.servers[s])
    }

    pub fn by_name(&self, name: &str) -> Option<&ServerEntry> {
        self.slot_by_name(name).map(|s| &self.servers[s])
    }

    /// Every server, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &ServerEntry> {
        self.servers.iter()
    }

    /// How many servers are known.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Slots of the servers offering `service`, up or down, sorted by name.
    pub fn providers(&self, service: ServiceIdx) -> &[usize] {
        self.providers
            .get(service.0)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// How many up servers offer `service`.
    pub fn up_count(&self, service: ServiceIdx) -> usize {
        self.providers(service)
            .iter()
            .filter(|&&s| self.servers[s].is_up())
            .count()
    }

    /// Another server than `name` offering `service`, up or down, if any.
    pub fn other_provider(&self, service: ServiceIdx, name: &str) -> Option<&str> {
        self.providers(service)
            .iter()
            .map(|&s| self.servers[s].name.as_str())
            .find(|n| *n != name)
    }

    /// Adds a server or replaces the data of the one with the same name (a restart), keeping
    /// its id, completed count and the history of services whose description did not change.
    /// `services` pairs each of `reg.services`, in order, with its catalog index and whether its
    /// description changed.
    pub(crate) fn register(
        &mut self,
        reg: Registration,
        services: &[(ServiceIdx, bool)],
        now: Duration,
    ) -> (usize, ServerId) {
        let instance = reg.instance.clone();
        let slot = match self.by_name.get(&reg.name) {
            Some(&s) => s,
            None => self.add(&reg.name, now),
        };
        let mut old_offers = std::mem::take(&mut self.servers[slot].offers);
        for o in &old_offers {
            if !services.iter().any(|(s, _)| *s == o.service) {
                self.remove_provider(o.service, slot);
            }
        }
        let mut offers = Vec::with_capacity(services.len());
        for (desc, &(service, changed)) in reg.services.iter().zip(services) {
            // What was learned survives a restart of the server, unless the service changed.
            let kept = old_offers
                .iter()
                .position(|o| o.service == service && !changed)
                .map(|i| old_offers.swap_remove(i));
            let rate = reg
                .rates
                .iter()
                .find(|(n, _)| *n == desc.name)
                .map(|(_, r)| *r);
            let sleeps = reg.sleeping.contains(&desc.name);
            let known = match kept {
                Some(o) => OfferKnowledge {
                    rate,
                    sleeps,
                    ..o.known
                },
                None => OfferKnowledge {
                    sleeps,
                    ..OfferKnowledge::new(desc.size_params.clone(), rate)
                },
            };
            offers.push(Offer { service, known });
            self.add_provider(service, slot);
        }
        let e = &mut self.servers[slot];
        e.services = reg.services.into_iter().map(|d| d.name).collect();
        e.not_offered = reg.not_offered;
        e.offers = offers;
        e.addr = reg.addr;
        e.slots = reg.slots;
        e.host.default_rate = reg.default_rate;
        e.memory_bytes = reg.memory_bytes;
        e.cores = reg.cores;
        e.memory_budget_bytes = reg.memory_budget_bytes;
        e.max_frame_bytes = reg.max_frame_bytes;
        e.joined = false;
        e.restored = false;
        e.last_heard = now;
        e.load = LoadSample::default();
        let id = e.id;
        self.change(slot, |e| {
            if e.instance != instance {
                // Another process: what the last one showed proves nothing of this one.
                e.trust = Trust::default();
            }
            e.instance = instance;
            e.state = ServerState::Up;
        });
        (slot, id)
    }

    /// Forgets the server in `slot` entirely. The last server takes its slot: returns the
    /// removed entry and, if one moved, the slot it moved from.
    pub(crate) fn remove(&mut self, slot: usize) -> (ServerEntry, Option<usize>) {
        let services: Vec<ServiceIdx> = self.servers[slot]
            .offers
            .iter()
            .map(|o| o.service)
            .collect();
        for svc in services {
            self.remove_provider(svc, slot);
        }
        self.change(slot, |e| e.state = ServerState::Down);
        let last = self.servers.len() - 1;
        let gone = self.servers.swap_remove(slot);
        self.by_name.remove(&gone.name);
        self.by_id.remove(&gone.id);
        if slot == last {
            return (gone, None);
        }
        let moved = &self.servers[slot];
        self.by_name.insert(moved.name.clone(), slot);
        self.by_id.insert(moved.id, slot);
        for o in &moved.offers {
            if let Some(list) = self.providers.get_mut(o.service.0) {
                for s in list.iter_mut().filter(|s| **s == last) {
                    *s = slot;
                }
            }
        }
        (gone, Some(last))
    }

    /// Gives a server the id it had before (restoring from storage), so that ids stay stable
    /// across agent restarts.
    pub(crate) fn set_id(&mut self, slot: usize, id: ServerId) {
        let old = self.servers[slot].id;
        self.by_id.remove(&old);
        self.servers[slot].id = id;
        self.by_id.insert(id, slot);
    }

    fn add(&mut self, name: &str, now: Duration) -> usize {
        let id = ServerId::new_random();
        let slot = self.servers.len();
        self.servers.push(ServerEntry {
            id,
            name: name.to_string(),
            addr: String::new(),
            slots: 1,
            services: Vec::new(),
            not_offered: Vec::new(),
            offers: Vec::new(),
            memory_bytes: 0,
            cores: 0,
            state: ServerState::Up,
            last_heard: now,
            load: LoadSample::default(),
            completed: 0,
            progress: Vec::new(),
            host: HostKnowledge::default(),
            instance: String::new(),
            secret: String::new(),
            source: String::new(),
            joined: false,
            proven: false,
            restored: false,
            memory_budget_bytes: u64::MAX,
            max_frame_bytes: u64::MAX,
            trust: Trust::default(),
        });
        self.by_name.insert(name.to_string(), slot);
        self.by_id.insert(id, slot);
        slot
    }

    fn add_provider(&mut self, service: ServiceIdx, slot: usize) {
        if self.providers.len() <= service.0 {
            self.providers.resize_with(service.0 + 1, Vec::new);
        }
        let servers = &self.servers;
        let list = &mut self.providers[service.0];
        let name = servers[slot].name.as_str();
        if let Err(at) = list.binary_search_by(|&s| servers[s].name.as_str().cmp(name)) {
            list.insert(at, slot);
        }
    }

    fn remove_provider(&mut self, service: ServiceIdx, slot: usize) {
        if let Some(list) = self.providers.get_mut(service.0) {
            list.retain(|&s| s != slot);
        }
    }

    /// Notes a heartbeat: unknown and down servers are told to register again. Also says
    /// whether it is the server's first since it registered, and what entered the server's
    /// load histories, if anything did.
    pub(crate) fn heartbeat(
        &mut self,
        hb: &Heartbeat,
        now: Duration,
        sampling: &LoadSampling,
    ) -> (Ack, bool, Option<LoadRecord>) {
        match self.slot_of(hb.server_id).map(|s| &mut self.servers[s]) {
            Some(e) if e.is_up() => {
                let first = !e.joined;
                e.joined = true;
                e.proven = true;
                e.last_heard = now;
                e.load = hb.load;
                e.progress.clone_from(&hb.models);
                let kept = e.host.learn_load(now, &hb.load, sampling);
                (Ack::Ok, first, kept)
            }
            _ => (Ack::Reregister, false, None),
        }
    }

    /// Marks down the up servers not heard from for longer than `timeout`; returns their
    /// slots and ids.
    pub(crate) fn sweep(&mut self, now: Duration, timeout: Duration) -> Vec<(usize, ServerId)> {
        let mut down = Vec::new();
        for slot in 0..self.servers.len() {
            let e = &self.servers[slot];
            if e.is_up() && now.saturating_sub(e.last_heard) > timeout {
                down.push((slot, e.id));
                self.change(slot, |e| e.state = ServerState::Down);
            }
        }
        down
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::registration;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn history_is_a_running_mean_of_valid_times() {
        let mut h = gridwise_predict::KernelHistory::default();
        h.record(1.0);
        h.record(3.0);
        h.record(f64::NAN);
        h.record(-1.0);
        assert_eq!(h.calls, 2);
        assert_eq!(h.mean_s, 2.0);
    }

    #[test]
    fn rate_prefers_own_then_default_then_nothing() {
        let mut r = Registry::new();
        let mut reg = registration("s", &[]);
        reg.default_rate = 5.0;
        reg.rates = vec![("a".into(), 7.0), ("b".into(), 0.0)];
        reg.services = vec![crate::testutil::named("a"), crate::testutil::named("b")];
        let svcs = [(ServiceIdx(0), false), (ServiceIdx(1), false)];
        let (slot, _) = r.register(reg, &svcs, secs(0));
        let e = r.entry(slot);
        assert_eq!(e.rate(ServiceIdx(0)), Some(7.0));
        assert_eq!(e.rate(ServiceIdx(1)), Some(5.0));
        assert_eq!(e.rate(ServiceIdx(2)), Some(5.0));
        r.entry_mut(slot).host.default_rate = f64::INFINITY;
        assert_eq!(r.entry(slot).rate(ServiceIdx(1)), None);
    }

    #[test]
    fn providers_stay_sorted_by_name_and_follow_reregistration() {
        let mut r = Registry::new();
        let s = [(ServiceIdx(0), false)];
        for name in ["c", "a", "b"] {
            let mut reg = registration(name, &[]);
            reg.services = vec![crate::testutil::named("x")];
            r.register(reg, &s, secs(0));
        }
        let names: Vec<&str> = r
            .providers(ServiceIdx(0))
            .iter()
            .map(|&s| r.entry(s).name.as_str())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(r.other_provider(ServiceIdx(0), "a"), Some("b"));
        // `b` comes back without the service.
        r.register(registration("b", &[]), &[], secs(1));
        assert_eq!(r.providers(ServiceIdx(0)).len(), 2);
        assert_eq!(r.up_count(ServiceIdx(0)), 2);
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn heartbeat_and_sweep() {
        let mut r = Registry::new();
        let (_, id) = r.register(registration("s", &[]), &[], secs(0));
        let hb = Heartbeat {
            server_id: id,
            load: LoadSample {
                cpu_available: None,
                free_memory_bytes: None,
                running: 1,
                queued: 2,
                loadavg_1m: 0.5,
                benchmarking: false,
            },
            models: Vec::new(),
            in_flight: Vec::new(),
        };
        let sampling = crate::CoreConfig::default().load_sampling();
        let kept = LoadRecord {
            loadavg_1m: Some(0.5),
            ..LoadRecord::default()
        };
        assert_eq!(
            r.heartbeat(&hb, secs(3), &sampling),
            (Ack::Ok, true, Some(kept))
        );
        assert_eq!(r.heartbeat(&hb, secs(3), &sampling), (Ack::Ok, false, None));
        assert_eq!(r.get(id).unwrap().load.queued, 2);
        assert!(r.sweep(secs(13), secs(10)).is_empty());
        assert_eq!(r.sweep(secs(14), secs(10)), vec![(0, id)]);
        assert_eq!(r.get(id).unwrap().state, ServerState::Down);
        assert_eq!(r.heartbeat(&hb, secs(15), &sampling).0, Ack::Reregister);
        let stranger = Heartbeat {
            server_id: ServerId::new_random(),
            load: LoadSample::default(),
            models: Vec::new(),
            in_flight: Vec::new(),
        };
        assert_eq!(
            r.heartbeat(&stranger, secs(15), &sampling).0,
            Ack::Reregister
        );
        assert!(r.sweep(secs(100), secs(10)).is_empty());
    }
}
