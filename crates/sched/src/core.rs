//! The agent's decision core: registration, liveness, ranking and bookkeeping of assignments,
//! driven entirely by calls that carry the current time.

use crate::catalog::{Catalog, CatalogEntry, ServiceIdx};
use crate::config::CoreConfig;
use crate::policy::{self, Keyed};
use crate::queue::Assignment;
use crate::registry::{Registry, ServerEntry};
use crate::reservations::Reservations;
use gridwise_predict::{ComputeModel, EtcSpread, FpmModel, Links, Stoch};
use gridwise_proto::{
    Ack, AgentStatus, CallProfile, CallReport, Candidate, ErrorCode, Etc, Heartbeat, LinkInfo,
    LinkSample, Policy, RankOptions, Ranking, RpcError, ServerId, ServiceDesc, ServiceSummary,
    Ticket,
};
use std::hash::BuildHasher;
use std::time::Duration;

mod admission;
mod divide;
mod foreign;
mod graph_map;
mod learned;
mod models;
mod prune;
mod transit;
mod trust;

pub use admission::{Refusal, Registering};
pub use trust::Suspicion;

pub use graph_map::{GraphOutline, GraphSnapshot, MAX_GRAPH_CELLS, MappedGraph, map_graph_shared};

pub use learned::{Learned, Outcome, PointChange};

/// Everything the agent decides with. Pure: no I/O, no clock; every event carries `now`, the
/// monotonic time since the agent started.
pub struct AgentCore {
    config: CoreConfig,
    catalog: Catalog,
    registry: Registry,
    reservations: Reservations,
    model: std::sync::Arc<dyn ComputeModel>,
    // Tickets and server secrets are keyed hashes of a counter, so no peer can guess one.
    key: std::hash::RandomState,
    issued: u64,
    limiter: admission::RegistrationLimiter,
    ranked: u64,
    // Round-robin turns per service, so each service's calls rotate over its own servers.
    rr_turns: Vec<u64>,
    // Reused by `rank` so that a decision allocates only its answer.
    scratch: Vec<Keyed>,
    links: Links,
    // Per service, rate bounds by size class for exact MCT pruning (see `prune`).
    rate_orders: prune::RateOrders,
    // Per server slot, the calls other agents placed there as its last heartbeat showed them.
    foreign: foreign::Foreign,
    // The others' calls no server has told of yet, as a rate and a transit time.
    in_transit: transit::InTransit,
}

/// The servers a call may go to: a service's providers (name-sorted) or the one pinned server.
enum Source<'a> {
    Providers(&'a [usize]),
    Pinned(usize),
}

/// One call being decided, with its complexity and footprint evaluated once for all servers.
struct Call<'a> {
    svc: &'a CatalogEntry,
    work: Option<f64>,
    footprint: u64,
    profile: &'a CallProfile,
    now: Duration,
    /// The compute model the call's options ask for instead of the agent's.
    predictor: Option<FpmModel>,
}

impl Call<'_> {
    /// Whether `e` can hold the call (memory budget, frame limit).
    fn fits(&self, e: &ServerEntry) -> bool {
        e.can_hold(self.footprint, self.profile.inline_bytes)
    }
}

impl Source<'_> {
    fn slots(&self) -> &[usize] {
        match self {
            Source::Providers(s) => s,
            Source::Pinned(s) => std::slice::from_ref(s),
        }
    }
}

/// Runs a server's regression model needs before other servers may borrow it.
const REFERENCE_RUNS: usize = 8;

impl AgentCore {
    /// A core with no servers, estimating compute time with functional performance models
    /// ([`FpmModel`], falling back to calibrated rates).
    pub fn new(config: CoreConfig) -> Self {
        let model = std::sync::Arc::new(FpmModel::with_load(config.load_model));
        let key = std::hash::RandomState::new();
        let in_transit = transit::InTransit::salted(
            config
                .tie_salt
                .unwrap_or_else(|| std::hash::BuildHasher::hash_one(&key, "tie salt")),
        );
        Self {
            config,
            catalog: Catalog::new(),
            registry: Registry::new(),
            reservations: Reservations::default(),
            model,
            key,
            issued: 0,
            limiter: admission::RegistrationLimiter::default(),
            ranked: 0,
            rr_turns: Vec::new(),
            scratch: Vec::new(),
            links: Links::default(),
            rate_orders: prune::RateOrders::default(),
            foreign: foreign::Foreign::default(),
            in_transit,
        }
    }

    /// The same core estimating compute time with `model` instead.
    pub fn with_compute_model(mut self, model: std::sync::Arc<dyn ComputeModel>) -> Self {
        self.model = model;
        self
    }

    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Every service ever offered, including those no server offers any more.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Every server not yet forgotten, up or down.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Links a server measured to its peers (by address).
    pub fn record_links(&mut self, server: ServerId, samples: &[LinkSample], now: Duration) -> Ack {
        let Some(e) = self.registry.get(server) else {
            return Ack::Reregister;
        };
        let (from, up) = (e.addr().to_string(), e.is_up());
        for s in samples {
            self.links.record(&from, s, now);
        }
        if up { Ack::Ok } else { Ack::Reregister }
    }

    /// Every measured link with its age at `now`, sorted by (from, to) address.
    pub fn link_matrix(&self, now: Duration) -> Vec<LinkInfo> {
        self.links.export(now)
    }

    pub fn links(&self) -> &Links {
        &self.links
    }

    /// Assignments recorded since the agent started: ranked calls and the calls of reserved
    /// graphs alike.
    pub fn ranked(&self) -> u64 {
        self.ranked
    }

    /// Assignments not yet reported, released or expired, over all servers.
    pub fn pending(&self) -> usize {
        self.reservations.len()
    }

    pub fn server(&self, id: ServerId) -> Option<&ServerEntry> {
        self.registry.get(id)
    }

    /// The calls reserved on the server with id `id` (empty for an unknown server).
    pub fn queue(&self, id: ServerId) -> &crate::queue::ServerQueue {
        let slot = self.registry.slot_of(id).unwrap_or(usize::MAX);
        self.reservations.queue(slot)
    }

    pub fn server_by_name(&self, name: &str) -> Option<&ServerEntry> {
        self.registry.by_name(name)
    }

    /// A server is alive. Unknown and down servers are told to register again. Teaches
    /// [`Learned::Joined`] at its first heartbeat since it registered (the moment it has proved
    /// alive and is worth saving) and [`Learned::Load`] when its load enters its history.
    pub fn heartbeat(&mut self, hb: &Heartbeat, now: Duration) -> Outcome<Ack> {
        let (ack, first, load) = self
            .registry
            .heartbeat(hb, now, &self.config.load_sampling());
        if ack == Ack::Ok
            && let Some(slot) = self.registry.slot_of(hb.server_id)
        {
            self.track_in_flight(slot, &hb.in_flight, now);
        }
        let mut learned = Vec::new();
        if first {
            learned.push(Learned::Joined(hb.server_id));
        }
        if let (Some(record), Some(e)) = (load, self.registry.get(hb.server_id)) {
            learned.push(Learned::Load {
                server: e.name().to_string(),
                record,
            });
        }
        Outcome {
            reply: ack,
            learned,
        }
    }

    /// A server's finished calls. Their tickets are cleared wherever they are pending (the
    /// client may have fallen back to another server); successful kernel times feed the
    /// histories and models. Teaches [`Learned::Timings`] and a [`Learned::Point`] per model
    /// point the calls changed, but for calls another agent placed: every agent of a shared
    /// store hears every report, and the one that placed the call stores what it taught.
    pub fn report(
        &mut self,
        server: ServerId,
        reports: &[CallReport],
        now: Duration,
    ) -> Outcome<Ack> {
        let here = self.registry.slot_of(server);
        // What was predicted of each call, for the prediction error it is reported with; and
        // whether a call the agent ranked here was done here, which confirms the server.
        let mut confirmed = false;
        // And whether it was another agent's call (sharing the servers): that agent stores it.
        let mut theirs = Vec::with_capacity(reports.len());
        let mut predicted_kernel_s = Vec::with_capacity(reports.len());
        for r in reports {
            let held = r.ticket.and_then(|t| {
                let (slot, a) = self.reservations.take_from(t)?;
                Some((slot, a, self.ended_foreign(slot, t)))
            });
            theirs.push(held.as_ref().is_some_and(|h| h.2));
            predicted_kernel_s.push(held.map(|(slot, a, _)| {
                confirmed |= r.ok && Some(slot) == here;
                a.compute_s
            }));
        }
        let Some(slot) = here else {
            return Outcome::nothing(Ack::Reregister);
        };
        if confirmed {
            self.confirm(slot);
        }
        let mut changed = Vec::new();
        // Whatever the calls teach (points, misfits, rates, the client link) may move the
        // bounds pruning uses, for every service the server offers.
        let taught: Vec<ServiceIdx> = match reports.is_empty() {
            true => Vec::new(),
            false => self
                .registry
                .entry(slot)
                .all_offers()
                .iter()
                .map(|o| o.service)
                .collect(),
        };
        let mut references = Vec::new();
        let e = self.registry.entry_mut(slot);
        let (name, default_rate) = (e.name().to_string(), e.default_rate());
        let mut learned = Vec::new();
        for (i, r) in reports.iter().enumerate() {
            e.count_completed();
            if !r.ok {
                continue;
            }
            e.host_mut()
                .learn_timing(&r.timing, r.client_in_bytes, r.cpu_available);
            let Some(svc) = self.catalog.get(&r.service) else {
                continue;
            };
            let Some(o) = e.offer_mut(svc.idx) else {
                continue;
            };
            let (kernel_s, available) = (r.timing.kernel_s, r.cpu_available);
            learned.push((svc.idx, gridwise_predict::quiet_time(kernel_s, available)));
            let in_order = svc.sizes_match(&r.sizes);
            if let Some(x) = o
                .known
                .learn_call(&svc.facts, &r.sizes, in_order, kernel_s, available)
                && !theirs[i]
            {
                changed.push((svc.idx, x));
            }
            let runs = o.known.regression.observations();
            let lent = svc.facts.reference.as_ref();
            let mine = lent.is_none_or(|r| r.server == name);
            // Lend this server's regression to servers without runs (seed 001's scaling):
            // the first with enough runs becomes the reference, refreshed every 16 runs.
            if mine
                && runs >= REFERENCE_RUNS
                && (lent.is_none() || runs % 16 == 0)
                && let Some(rate) = o.known.rate.or(Some(default_rate)).filter(|r| *r > 0.0)
            {
                references.push((
                    svc.idx,
                    gridwise_predict::RegressionReference {
                        server: name.clone(),
                        rate,
                        model: o.known.regression.clone(),
                    },
                ));
            }
        }
        for (idx, quiet_s) in learned {
            self.catalog.record(idx, quiet_s);
        }
        for (idx, r) in references {
            self.catalog.facts_mut(idx).reference = Some(r);
            self.invalidate_rate_order(idx);
        }
        for idx in taught {
            self.invalidate_bound(idx, slot);
        }
        let e = self.registry.entry_mut(slot);
        let ack = if e.is_up() {
            e.heard_at(now);
            Ack::Ok
        } else {
            Ack::Reregister
        };
        let mut learned = vec![Learned::Timings {
            server: e.name().to_string(),
            reports: reports.to_vec(),
            predicted_kernel_s,
            theirs,
        }];
        learned.extend(self.point_changes(slot, changed));
        Outcome {
            reply: ack,
            learned,
        }
    }

    /// A client fetched `bytes` of a kept output from the server at `holder` in `seconds`: the
    /// server's client link learns its reply leg from it, as from a call's inputs (the host's
    /// load does not enter: no kernel shared the CPU with it that the agent knows of). False
    /// when no server is at `holder`.
    pub fn client_fetched(&mut self, holder: &str, bytes: u64, seconds: f64) -> bool {
        let Some(slot) =
            (0..self.registry.len()).find(|&s| self.registry.entry(s).addr() == holder)
        else {
            return false;
        };
        let e = self.registry.entry_mut(slot);
        e.host_mut().client_link.record(bytes, seconds, None);
        let offers: Vec<ServiceIdx> = e.all_offers().iter().map(|o| o.service).collect();
        for idx in offers {
            self.invalidate_bound(idx, slot);
        }
        true
    }

    /// A client gives back an assignment it holds; false if it was not pending or is held by
    /// another client (nobody may clear another's reservations).
    pub fn release_by(&mut self, ticket: Ticket, holder: &str) -> bool {
        self.reservations
            .release_by(ticket, self.key.hash_one(holder))
    }

    /// The client `holder` sent the call of `ticket` to `server` rather than where it was
    /// reserved: the reservation moves there (`Reservations::move_to`). After a partition
    /// healed, a call of a second reserved on the healed server that the client, not yet
    /// hearing from it, sent elsewhere kept that server looking busy for the call's predicted
    /// second: no call went there for up to 1.2 s. False if the ticket is not pending, not
    /// this client's, or the server unknown.
    pub fn placed(&mut self, ticket: Ticket, server: ServerId, holder: &str) -> bool {
        let key = self.key.hash_one(holder);
        let Some(slot) = self.registry.slot_of(server) else {
            return false;
        };
        self.reservations.is_held_by(ticket, key) && self.reservations.move_to(ticket, slot)
    }

    /// Forgets an assignment (reported, given up, or expired); false if it was not pending.
    pub fn release(&mut self, ticket: Ticket) -> bool {
        self.reservations.release(ticket)
    }

    /// Marks silent servers down (dropping their reservations), forgets stale ones and
    /// expires old reservations. Teaches [`Learned::Down`] and [`Learned::Forgotten`].
    pub fn sweep(&mut self, now: Duration) -> Vec<Learned> {
        let down: Vec<ServerId> = self
            .registry
            .sweep(now, self.config.heartbeat_timeout)
            .into_iter()
            .map(|(slot, id)| {
                self.reservations.drop_server(slot);
                id
            })
            .collect();
        self.reservations.expire(now, self.config.ticket_ttl);
        let gone = self.forget_stale(now);
        let mut learned: Vec<Learned> = down
            .into_iter()
            .filter(|id| !gone.iter().any(|(g, _)| g == id))
            .map(Learned::Down)
            .collect();
        learned.extend(gone.into_iter().map(|(_, name)| Learned::Forgotten(name)));
        learned
    }

    /// Ranks the live servers able to run the call and records an assignment to the first.
    pub fn rank(
        &mut self,
        profile: &CallProfile,
        opts: &RankOptions,
        now: Duration,
    ) -> Result<Ranking, RpcError> {
        self.rank_for(None, profile, opts, now)
    }

    /// [`rank`](Self::rank) for the client `holder`: only it may release the assignment.
    pub fn rank_for(
        &mut self,
        holder: Option<&str>,
        profile: &CallProfile,
        opts: &RankOptions,
        now: Duration,
    ) -> Result<Ranking, RpcError> {
        let policy = opts.policy.unwrap_or(self.config.policy);
        if policy == Policy::Mct
            && let Some(svc) = self.catalog.get(&profile.service)
        {
            self.ensure_rate_order(svc.idx, profile);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.decide(profile, opts, policy, now, &mut scratch);
        self.scratch = scratch;
        let (mut candidates, mut slot, service, pinned) = result?;
        if matches!(policy, Policy::Mct | Policy::Conservative) && !pinned {
            self.around_calls_in_transit(&mut candidates, &mut slot, now);
        }

        let first = &candidates[0];
        let e = &first.etc;
        let finish = Stoch::new(now.as_secs_f64() + e.total_s(), e.finish_sd_s());
        let ticket = self.assign(slot, e.compute_s, finish, holder, now);
        if policy == Policy::RoundRobin && !pinned {
            self.rr_turns[service.0] += 1;
        }
        Ok(Ranking {
            ticket,
            candidates,
            policy,
        })
    }

    /// Records a call predicted to compute `compute_s` and finish at `finish` (seconds since
    /// the agent started, with its spread) on the server in `slot`, under a new ticket held by
    /// `holder`: the one bookkeeping of single calls and graph reservations alike.
    pub(crate) fn assign(
        &mut self,
        slot: usize,
        compute_s: f64,
        finish: Stoch,
        holder: Option<&str>,
        now: Duration,
    ) -> Ticket {
        let holder = self.holder_key(holder);
        self.assign_keyed(slot, compute_s, finish, holder, now)
    }

    /// The key a holder's tickets carry: compared, never shown.
    pub(crate) fn holder_key(&self, holder: Option<&str>) -> Option<u64> {
        holder.map(|h| self.key.hash_one(h))
    }

    /// [`assign`](Self::assign) with the holder already keyed, for many assignments at once.
    pub(crate) fn assign_keyed(
        &mut self,
        slot: usize,
        compute_s: f64,
        finish: Stoch,
        holder: Option<u64>,
        now: Duration,
    ) -> Ticket {
        let ticket = self.new_ticket();
        let a = Assignment {
            ticket,
            assigned_at: now,
            compute_s,
            finish_s: finish.mean,
            finish_sd_s: finish.sd,
        };
        self.reservations.add(slot, a, holder);
        self.ranked += 1;
        ticket
    }

    /// Every candidate for the call with its ETC breakdown, in the order `rank` would use now;
    /// records nothing.
    pub fn explain(
        &self,
        profile: &CallProfile,
        opts: &RankOptions,
        now: Duration,
    ) -> Result<Vec<Candidate>, RpcError> {
        let policy = opts.policy.unwrap_or(self.config.policy);
        let (service, source, call) = self.call(profile, opts, now)?;
        let mut keyed = Vec::new();
        self.collect(&mut keyed, policy, &call, &source)?;
        policy::order(policy, &mut keyed, usize::MAX, self.turn(service));
        let mut candidates = self.candidates(&keyed, &call, &source);
        if matches!(policy, Policy::Mct | Policy::Conservative)
            && matches!(source, Source::Providers(_))
        {
            // Ranked as `rank` ranks them: first where the others' calls in transit leave
            // the least expected time.
            // Among as many as `rank` weighs.
            let mut first = 0;
            let limit = self.config.max_candidates.clamp(1, candidates.len().max(1));
            if let Some(top) = candidates.get_mut(..limit) {
                self.around_calls_in_transit(top, &mut first, now);
            }
        }
        Ok(candidates)
    }

    /// Every server sorted by name, with its reservations as `pending`. `storage` is left
    /// at its default: the shell knows its store and fills it in.
    pub fn status(&self, now: Duration) -> AgentStatus {
        let mut servers: Vec<_> = (0..self.registry.len())
            .map(|s| {
                let pending = self.reservations.queue(s).len();
                self.registry.entry(s).status(now, pending)
            })
            .collect();
        servers.sort_by(|a, b| a.name.cmp(&b.name));
        AgentStatus {
            policy: self.config.policy,
            uptime_s: now.as_secs_f64(),
            servers,
            ranked: self.ranked,
            // The shell knows its storage; the core does not touch a disk.
            storage: Default::default(),
            others: self.in_transit.others(now),
        }
    }

    /// Every service ever offered, sorted by name, with how many live servers offer it.
    pub fn list_services(&self) -> Vec<ServiceSummary> {
        let mut out: Vec<ServiceSummary> = self
            .catalog
            .iter()
            .map(|e| ServiceSummary {
                desc: e.desc.clone(),
                servers_up: u32::try_from(self.registry.up_count(e.idx)).unwrap_or(u32::MAX),
            })
            .collect();
        out.sort_by(|a, b| a.desc.name.cmp(&b.desc.name));
        out
    }

    /// Also for services no server offers any more; `FunctionNotFound` only for a name never
    /// offered.
    pub fn describe(&self, name: &str) -> Result<ServiceDesc, RpcError> {
        self.catalog
            .get(name)
            .map(|e| e.desc.clone())
            .ok_or_else(|| not_offered(name))
    }

    fn turn(&self, service: ServiceIdx) -> u64 {
        self.rr_turns.get(service.0).copied().unwrap_or(0)
    }

    /// The call being decided: its service, where it may go, and its work evaluated once.
    fn call<'a>(
        &'a self,
        profile: &'a CallProfile,
        opts: &RankOptions,
        now: Duration,
    ) -> Result<(ServiceIdx, Source<'a>, Call<'a>), RpcError> {
        let (service, source) = self.resolve(profile, opts)?;
        let svc = self.catalog.entry(service);
        let call = Call {
            svc,
            work: svc.facts.work(profile),
            footprint: profile.footprint_bytes(),
            profile,
            now,
            predictor: self.predictor(opts.load_model, opts.model_family),
        };
        Ok((service, source, call))
    }

    /// Ranks without recording: the ordered candidates, the first one's server slot, the
    /// service, and whether the call was pinned.
    fn decide(
        &self,
        profile: &CallProfile,
        opts: &RankOptions,
        policy: Policy,
        now: Duration,
        keyed: &mut Vec<Keyed>,
    ) -> Result<(Vec<Candidate>, usize, ServiceIdx, bool), RpcError> {
        let (service, source, call) = self.call(profile, opts, now)?;
        let limit = self.config.max_candidates;
        let pruned = (policy == Policy::Mct && call.predictor.is_none())
            .then(|| self.pruned_mct(&call, &source, limit))
            .flatten();
        let (mut candidates, mut first) = match pruned {
            Some(found) => found,
            None => {
                self.collect(keyed, policy, &call, &source)?;
                policy::order(policy, keyed, limit, self.turn(service));
                let candidates = self.candidates(keyed, &call, &source);
                (candidates, source.slots()[keyed[0].pos])
            }
        };
        self.with_confirmed(&mut candidates, &mut first, &call, &source, limit);
        Ok((
            candidates,
            first,
            service,
            matches!(source, Source::Pinned(_)),
        ))
    }

    /// The compute model options ask for: the agent's own unless they name a load model or a
    /// model family (to compare predictors on the same calls).
    fn predictor(
        &self,
        load: Option<gridwise_proto::LoadModel>,
        family: Option<gridwise_proto::ModelFamily>,
    ) -> Option<FpmModel> {
        (load.is_some() || family.is_some()).then(|| FpmModel {
            load: load.unwrap_or(self.config.load_model),
            family,
        })
    }

    fn model_for<'a>(&'a self, call: &'a Call<'_>) -> &'a dyn ComputeModel {
        match &call.predictor {
            Some(p) => p,
            None => self.model.as_ref(),
        }
    }

    /// Checks the call against the catalog and the pin, and finds where it may go.
    fn resolve(
        &self,
        profile: &CallProfile,
        opts: &RankOptions,
    ) -> Result<(ServiceIdx, Source<'_>), RpcError> {
        let svc = self
            .catalog
            .get(&profile.service)
            .ok_or_else(|| not_offered(&profile.service))?;
        if !svc.sizes_match(&profile.sizes) {
            return Err(sizes_mismatch(svc, profile));
        }
        let Some(pin) = &opts.pin_server else {
            return Ok((svc.idx, Source::Providers(self.registry.providers(svc.idx))));
        };
        let slot = self.registry.slot_by_name(pin).ok_or_else(|| {
            RpcError::new(
                ErrorCode::ServerNotFound,
                format!(
                    "server `{pin}` is not registered with the agent; `gridwise status` lists \
                     servers"
                ),
            )
        })?;
        let e = self.registry.entry(slot);
        if !e.offers(svc.idx) {
            return Err(RpcError::new(
                ErrorCode::FunctionNotFound,
                format!(
                    "server `{pin}` does not offer `{}` (it offers: {})",
                    profile.service,
                    list_or_none(e.services())
                ),
            ));
        }
        if !e.is_up() {
            return Err(RpcError::new(
                ErrorCode::ServerNotFound,
                format!(
                    "server `{pin}` is down (no heartbeat for longer than {:?}); it gets calls \
                     again once it registers again",
                    self.config.heartbeat_timeout
                ),
            ));
        }
        if !e.can_hold(profile.footprint_bytes(), profile.inline_bytes) {
            return Err(beyond_limits(&profile.service, profile, e));
        }
        Ok((svc.idx, Source::Pinned(slot)))
    }

    /// Fills `keyed` with the live servers of `source` and their policy keys: those no client
    /// failed to reach lately, or the suspected ones when they are all there is.
    fn collect(
        &self,
        keyed: &mut Vec<Keyed>,
        policy: Policy,
        call: &Call<'_>,
        source: &Source<'_>,
    ) -> Result<(), RpcError> {
        let result = self.collect_among(keyed, policy, call, source, false);
        if keyed.is_empty()
            && source
                .slots()
                .iter()
                .any(|&s| self.registry.entry(s).is_suspected(call.now))
        {
            return self.collect_among(keyed, policy, call, source, true);
        }
        result
    }

    fn collect_among(
        &self,
        keyed: &mut Vec<Keyed>,
        policy: Policy,
        call: &Call<'_>,
        source: &Source<'_>,
        suspects: bool,
    ) -> Result<(), RpcError> {
        keyed.clear();
        let mut cannot_run: Vec<&str> = Vec::new();
        let mut too_big: Vec<&ServerEntry> = Vec::new();
        for (pos, &slot) in source.slots().iter().enumerate() {
            let e = self.registry.entry(slot);
            if !e.is_up() || (!suspects && e.is_suspected(call.now)) {
                continue;
            }
            if !call.fits(e) {
                too_big.push(e);
                continue;
            }
            if !self
                .model
                .feasible(e.view(call.svc.idx), &call.svc.facts, call.profile)
            {
                cannot_run.push(e.name());
                continue;
            }
            let key = policy::key(
                policy,
                self.config.conservative_tf,
                || self.estimate(slot, call),
                || e.rate(call.svc.idx),
            );
            keyed.push(Keyed { key, pos });
        }
        if keyed.is_empty() {
            if cannot_run.is_empty()
                && let Some(biggest) = too_big.iter().max_by_key(|e| e.memory_budget_bytes())
            {
                return Err(too_big_error(call, biggest));
            }
            if !cannot_run.is_empty() {
                let sizes: Vec<String> = call
                    .profile
                    .sizes
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                return Err(RpcError::new(
                    ErrorCode::ServerNotFound,
                    format!(
                        "no live server can run `{}` at {}: the performance models of {} say it does not fit there (speed 0); use smaller sizes or add a server with more memory",
                        call.svc.name(),
                        sizes.join(", "),
                        cannot_run.join(", ")
                    ),
                ));
            }
            return Err(none_up(call.svc, source, &self.registry));
        }
        Ok(())
    }

    /// The wire candidates for ordered `keyed`, each with its full estimate.
    fn candidates(&self, keyed: &[Keyed], call: &Call<'_>, source: &Source<'_>) -> Vec<Candidate> {
        keyed
            .iter()
            .map(|k| {
                let slot = source.slots()[k.pos];
                let e = self.registry.entry(slot);
                Candidate {
                    server_id: e.id(),
                    name: e.name().to_string(),
                    addr: e.addr().to_string(),
                    etc: self.estimate(slot, call),
                }
            })
            .collect()
    }

    /// Whether `e` may get the call at all: up, able to hold it, and not ruled out by its model
    /// (suspicion is the ranking's to weigh, not a bar).
    fn eligible(&self, e: &ServerEntry, call: &Call<'_>) -> bool {
        e.is_up()
            && call.fits(e)
            && self
                .model
                .feasible(e.view(call.svc.idx), &call.svc.facts, call.profile)
    }

    /// The ETC of `call` on the server in `slot`, its queue wait from its reservations.
    fn estimate(&self, slot: usize, call: &Call<'_>) -> Etc {
        let server = self.registry.entry(slot);
        let wait = self.reservations.queue(slot).wait(call.now, server.slots());
        gridwise_predict::estimate(
            self.model_for(call),
            &self.config.transfers(),
            &self.links,
            server.view(call.svc.idx),
            server.addr(),
            wait,
            &call.svc.facts,
            call.work,
            call.profile,
        )
    }
}

/// No live server can hold the call: say what it needs and the most any server offers. A
/// resource limit refuses it, as a server's own would (`GRPC_RPC_REFUSED`): servers exist.
fn too_big_error(call: &Call<'_>, biggest: &ServerEntry) -> RpcError {
    let p = call.profile;
    let mb = |b: u64| b as f64 / 1e6;
    let detail = if p.footprint_bytes() > biggest.memory_budget_bytes() {
        format!(
            "it needs {:.1} MB of memory (inputs and outputs, twice), and the largest memory budget is {:.1} MB ({}); use smaller sizes, or raise memory_budget_bytes where the memory exists",
            mb(p.footprint_bytes()),
            mb(biggest.memory_budget_bytes()),
            biggest.name()
        )
    } else {
        format!(
            "its request carries {:.2} MB of small inputs in one frame, more than the servers' max_frame_bytes allow; pass fewer small values in one call, or raise max_frame_bytes on the servers",
            mb(p.inline_bytes)
        )
    };
    RpcError::new(
        ErrorCode::RpcRefused,
        format!("no live server can take `{}`: {detail}", call.svc.name()),
    )
}

/// A call pinned to a server that cannot hold it: refused before anything is sent, with the
/// sizes, as the server itself would refuse it (`GRPC_RPC_REFUSED`, a resource limit).
fn beyond_limits(service: &str, p: &CallProfile, e: &ServerEntry) -> RpcError {
    let mb = |b: u64| b as f64 / 1e6;
    let why = if p.footprint_bytes() > e.memory_budget_bytes() {
        format!(
            "it needs {:.2} MB of memory (inputs and outputs, twice) and the server's memory_budget_bytes is {:.2} MB",
            mb(p.footprint_bytes()),
            mb(e.memory_budget_bytes())
        )
    } else {
        format!(
            "its request carries {:.2} MB inside one frame and the server's max_frame_bytes is {:.2} MB",
            mb(p.inline_bytes),
            mb(e.max_frame_bytes())
        )
    };
    RpcError::new(
        ErrorCode::RpcRefused,
        format!(
            "resource limit: `{service}` cannot run on server `{}`: {why}; send it to a larger server, or make the call smaller",
            e.name()
        ),
    )
}

fn not_offered(service: &str) -> RpcError {
    RpcError::new(
        ErrorCode::FunctionNotFound,
        format!("no server offers `{service}`; `gridwise status` lists services"),
    )
}

fn sizes_mismatch(svc: &CatalogEntry, profile: &CallProfile) -> RpcError {
    let given: Vec<&str> = profile.sizes.iter().map(|(n, _)| n.as_str()).collect();
    RpcError::new(
        ErrorCode::OtherErrorCode,
        format!(
            "the call profile for `{}` gives size parameters ({}), but the service's are ({}), \
             in that order; build the profile from the service description",
            svc.name(),
            given.join(", "),
            svc.desc.size_params.join(", ")
        ),
    )
}

fn none_up(svc: &CatalogEntry, source: &Source<'_>, registry: &Registry) -> RpcError {
    let names: Vec<String> = source
        .slots()
        .iter()
        .map(|&s| registry.entry(s).name().to_string())
        .collect();
    let message = if names.is_empty() {
        format!(
            "no live server offers `{}`: the servers that offered it no longer do",
            svc.name()
        )
    } else {
        format!(
            "no live server offers `{}`: its servers ({}) are down; they get calls again once \
             they register again",
            svc.name(),
            names.join(", ")
        )
    };
    RpcError::new(ErrorCode::ServerNotFound, message)
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "nothing".into()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod divide_tests;
#[cfg(test)]
mod foreign_tests;
#[cfg(test)]
mod graph_map_tests;
#[cfg(test)]
mod hardening_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod prune_tests;
#[cfg(test)]
mod tests;
