//! Online calls on a simulated platform, ranked by the agent's own decision core.
//!
//! Every simulated server registers with a real [`AgentCore`] (same service descriptions as an
//! emulated server of the same speeds would publish), and sends its first heartbeat. Calls
//! arrive on virtual time; each is ranked by `AgentCore::rank` when it arrives — its queues,
//! MCT with pruning, whatever the agent knows by then — and runs on the first candidate: at
//! once if a slot is free, else after the calls queued there before it. When a call ends, the
//! server reports it and the core learns from it (histories, online model samples) exactly as
//! from a live server's report. Nothing reads a clock except the decision timer.
//!
//! A call's inputs travel from the client before it queues and its outputs back after its
//! kernel, over the scenario's default link. Every `heartbeat_s` each server's heartbeat lists
//! the calls it holds to every agent, with no load sample (so no load history and no load
//! band). What is left out: load in heartbeats, link contention, failures.

use crate::platform::Platform;
use crate::scenario::{Gaps, Knowledge, Scenario, ScenarioError, WorkloadSpec};
use crate::workload::draw;
use gridwise_kernels::{EmulatedSpec, Kernel};
use gridwise_proto::{
    CallProfile, CallReport, Heartbeat, LoadSample, ModelPoint, PointSource, PointStats, Policy,
    RankOptions, Registration, ServerId, ServiceDesc, Ticket, Timing,
};
use gridwise_sched::graph::generate::SplitMix64;
use gridwise_sched::{AgentCore, CoreConfig};
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// One call's fate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decision {
    /// Its index in arrival order.
    pub call: usize,
    pub service: String,
    /// The value of its service's size parameter (`param` in the scenario).
    pub size: u64,
    /// When it arrived, s.
    pub arrival_s: f64,
    /// Name of the agent's first candidate, where the call ran.
    pub server: String,
    /// The agent's estimate of its whole time there (queue wait + transfers + compute), s.
    pub predicted_s: f64,
    /// When its inputs reached the server, s.
    pub ready_s: f64,
    /// When its kernel started, s.
    pub start_s: f64,
    /// When its kernel ended, s.
    pub end_s: f64,
    /// When its outputs were back at the client, s.
    pub done_s: f64,
}

/// What a ranking policy achieved on an online workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OnlineReport {
    /// The ranking policy, named as configs spell it.
    pub policy: String,
    /// Calls simulated.
    pub calls: usize,
    /// Servers in the platform.
    pub servers: usize,
    /// When the last call ended, s.
    pub makespan_s: f64,
    /// Mean time from arrival to end, s.
    pub mean_response_s: f64,
    /// 95th percentile of the response times, s.
    pub p95_response_s: f64,
    /// Longest response time, s.
    pub max_response_s: f64,
    /// Mean time a call waited for a slot once its inputs were there, s.
    pub mean_wait_s: f64,
    /// Mean of |predicted − actual| ÷ actual over the calls' response times.
    pub mean_prediction_error: f64,
    /// Decisions the agent core made per second of wall-clock time (the only
    /// non-deterministic figure).
    pub decisions_per_s: f64,
}

/// A simulation's report and every decision behind it.
#[derive(Clone, Debug)]
pub struct OnlineRun {
    pub report: OnlineReport,
    /// One per call, in arrival order.
    pub decisions: Vec<Decision>,
}

/// The ranking policies an online workload can be simulated with.
pub const POLICIES: [Policy; 4] = Policy::ALL;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Event {
    /// A call's kernel ends on a server.
    End { server: usize, call: usize },
    /// A server's heartbeat reaches every agent.
    Beat(usize),
    /// A call's inputs reach its server.
    Ready { server: usize, call: usize },
    /// A call arrives.
    Arrive(usize),
}

/// Events by time; at equal times ends before arrivals (a freed slot is seen by the next
/// call), then by sequence, so a run is deterministic.
#[derive(Debug, PartialEq)]
struct Due {
    at: f64,
    seq: u64,
    event: Event,
}

impl Eq for Due {}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        let rank = |e: &Event| match e {
            Event::End { .. } => 0u8,
            Event::Ready { .. } => 1,
            Event::Beat(_) => 2,
            Event::Arrive(_) => 3,
        };
        other
            .at
            .total_cmp(&self.at)
            .then(rank(&other.event).cmp(&rank(&self.event)))
            .then(other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One simulated server's slots and waiting calls.
#[derive(Default)]
struct Station {
    busy: usize,
    waiting: VecDeque<usize>,
    /// The calls here, waiting or running (what its heartbeat lists to the agents).
    here: Vec<usize>,
}

/// The description an emulated server publishes for `service` of `scenario` (the speed does
/// not enter it).
pub fn service_desc(scenario: &Scenario, service: &str) -> Result<ServiceDesc, ScenarioError> {
    let spec = scenario.services.get(service).ok_or_else(|| {
        ScenarioError::invalid("services", format!("service {service:?} is not declared"))
    })?;
    let emulated = EmulatedSpec {
        name: service.to_string(),
        doc: String::new(),
        param: spec.param.clone(),
        complexity: spec.complexity.clone(),
        speed: vec![[1.0, 1.0]],
        calibration_size: None,
        inputs: 0,
        output: false,
        halo_bytes: 0,
    };
    emulated
        .build()
        .map(|k| k.desc().clone())
        .map_err(|e| ScenarioError::invalid(format!("services.{service}"), e.to_string()))
}

/// Simulates `scenario`'s online workload with the agent ranking by `policy`: the workload
/// checked, the calls' arrivals drawn, then every event in time order (a call arrives and is
/// ranked, its inputs reach its server, its kernel ends and is reported, a server's heartbeat,
/// every second, lists the calls it holds).
pub fn simulate_online(scenario: &Scenario, policy: Policy) -> Result<OnlineRun, ScenarioError> {
    simulate_online_agents(scenario, policy, 1, 1.0)
}

/// Whether `agents` agents at a heartbeat every `heartbeat_s` can be simulated: at least one
/// agent, and a positive, finite interval (checked before a long run, not after it).
pub fn check_agents(agents: usize, heartbeat_s: f64) -> Result<(), ScenarioError> {
    if agents == 0 || !(heartbeat_s.is_finite() && heartbeat_s > 0.0) {
        return Err(ScenarioError::invalid(
            "agents",
            "at least one agent, and a positive, finite heartbeat interval in seconds",
        ));
    }
    Ok(())
}

/// [`simulate_online`] with `agents` agents sharing the servers, as several agents sharing a
/// store do: call `i` is ranked by agent `i mod agents`; every server tells every agent of
/// each call as it arrives (`AgentCore::arrived`) and as it ends (its report), and every
/// `heartbeat_s` (phases spread over the servers) lists the calls it holds
/// ([`gridwise_proto::InFlight`]). That is all an agent knows of the calls the others placed:
/// not those still on their way to a server. One agent is the omniscient one: it placed
/// every call. Every agent, the one alone too, predicts its own calls again from what the
/// heartbeats say of them, as a deployed agent does.
pub fn simulate_online_agents(
    scenario: &Scenario,
    policy: Policy,
    agents: usize,
    heartbeat_s: f64,
) -> Result<OnlineRun, ScenarioError> {
    let agent_knows = check_online(scenario, policy)?;
    check_agents(agents, heartbeat_s)?;
    let platform = scenario.platform()?;
    let mut descs = HashMap::new();
    for name in scenario.services.keys() {
        descs.insert(name.clone(), service_desc(scenario, name)?);
    }
    let mut cores = Vec::with_capacity(agents);
    let mut ids = Vec::with_capacity(agents);
    for _ in 0..agents {
        let (core, id) = agent(&platform, &descs, agent_knows, cores.len() as u64)?;
        cores.push(core);
        ids.push(id);
    }
    let arrivals = arrivals(&scenario.workload);
    let mut sim = OnlineSim {
        scenario,
        server_of: ids
            .iter()
            .map(|ids| ids.iter().enumerate().map(|(i, id)| (*id, i)).collect())
            .collect(),
        stations: (0..platform.servers())
            .map(|_| Station::default())
            .collect(),
        platform,
        descs,
        cores,
        ids,
        opts: RankOptions {
            policy: Some(policy),
            ..RankOptions::default()
        },
        due: BinaryHeap::new(),
        seq: 0,
        decisions: vec![None; arrivals.len()],
        tickets: vec![None; arrivals.len()],
        ranking: Duration::ZERO,
        heartbeat_s,
        arrivals,
    };
    for i in 0..sim.arrivals.len() {
        sim.push(sim.arrivals[i].0, Event::Arrive(i));
    }
    let servers = sim.stations.len();
    for s in 0..servers {
        sim.push(heartbeat_s * s as f64 / servers as f64, Event::Beat(s));
    }
    let mut left = sim.arrivals.len();
    while let Some(Due { at: now, event, .. }) = sim.due.pop() {
        match event {
            Event::Arrive(i) => sim.arrive(i, now)?,
            Event::Ready { server, call } => sim.ready(server, call, now),
            Event::End { server, call } => {
                sim.end(server, call, now)?;
                left -= 1;
            }
            // Heartbeats go on while calls are out.
            Event::Beat(s) if left > 0 => sim.beat(s, now),
            Event::Beat(_) => {}
        }
    }
    let decisions: Vec<Decision> = sim.decisions.into_iter().flatten().collect();
    let report = summarise(policy, sim.platform.servers(), &decisions, sim.ranking);
    Ok(OnlineRun { report, decisions })
}

/// What the agent is told of the servers, once the workload is checked to be an online one
/// `policy` can rank.
fn check_online(scenario: &Scenario, policy: Policy) -> Result<Knowledge, ScenarioError> {
    let WorkloadSpec::Online { agent_knows, .. } = &scenario.workload else {
        return Err(ScenarioError::invalid(
            "workload",
            "not an online workload (kind \"online\"); map graphs with a graph policy instead",
        ));
    };
    if policy == Policy::ConstantSpeed && *agent_knows != Knowledge::Rates {
        return Err(ScenarioError::invalid(
            "workload.agent_knows",
            "constant-speed ranks by each server's calibrated rate: set \"agent_knows\": \
             \"rates\" to give the agent one",
        ));
    }
    Ok(*agent_knows)
}

/// The calls of an online workload, (arrival s, service, size): services in turn, sizes and
/// gaps drawn from its seed. Nothing for another kind of workload.
fn arrivals(workload: &WorkloadSpec) -> Vec<(f64, String, u64)> {
    let WorkloadSpec::Online {
        calls,
        services,
        sizes,
        mean_gap_s,
        gaps,
        seed,
        ..
    } = workload
    else {
        return Vec::new();
    };
    let mut rng = SplitMix64::new(*seed);
    let mut out = Vec::with_capacity(*calls);
    let mut t = 0.0;
    for i in 0..*calls {
        let service = services[i % services.len()].clone();
        let size = draw(sizes, &mut rng);
        out.push((t, service, size));
        t += match gaps {
            Gaps::Fixed => *mean_gap_s,
            Gaps::Poisson => -mean_gap_s * (1.0 - rng.uniform(0.0, 1.0)).ln(),
        };
    }
    out
}

/// An online simulation under way: the agent core, the servers' stations, the events due.
struct OnlineSim<'a> {
    scenario: &'a Scenario,
    platform: Platform,
    descs: HashMap<String, ServiceDesc>,
    /// The agents; call `i` is ranked by agent `i mod cores.len()`.
    cores: Vec<AgentCore>,
    /// Per agent, the id it gave each server.
    ids: Vec<Vec<ServerId>>,
    server_of: Vec<HashMap<ServerId, usize>>,
    opts: RankOptions,
    arrivals: Vec<(f64, String, u64)>,
    due: BinaryHeap<Due>,
    seq: u64,
    stations: Vec<Station>,
    decisions: Vec<Option<Decision>>,
    tickets: Vec<Option<Ticket>>,
    /// Wall-clock time spent in the agent's ranking.
    ranking: Duration,
    heartbeat_s: f64,
}

impl OnlineSim<'_> {
    fn push(&mut self, at: f64, event: Event) {
        self.seq += 1;
        self.due.push(Due {
            at,
            seq: self.seq,
            event,
        });
    }

    /// Call `i` arrives at `now`: the agent ranks it, and its inputs leave for the first
    /// candidate.
    fn arrive(&mut self, i: usize, now: f64) -> Result<(), ScenarioError> {
        let (arrival_s, service, size) = self.arrivals[i].clone();
        let profile = profile_of(&self.descs[&service], size)?;
        let a = i % self.cores.len();
        let t0 = Instant::now();
        let ranked = self.cores[a].rank(&profile, &self.opts, at(now));
        self.ranking += t0.elapsed();
        let ranked = ranked.map_err(|e| {
            ScenarioError::invalid(
                format!("call {i} ({service}, size {size})"),
                format!("the agent cannot place it: {}", e.message),
            )
        })?;
        let first = &ranked.candidates[0];
        let s = self.server_of[a][&first.server_id];
        if self
            .platform
            .class_of(s)
            .exec_s(&service, 1.0, size as f64)
            .is_infinite()
        {
            return Err(ScenarioError::invalid(
                format!("call {i} ({service}, size {size})"),
                format!(
                    "the agent chose {}, where the size does not fit; give the agent \
                     models (\"agent_knows\": \"models\") or use sizes every server runs",
                    first.name
                ),
            ));
        }
        self.tickets[i] = Some(ranked.ticket);
        let link = &self.scenario.links;
        let ready_s = now + link.latency_s + profile.in_bytes as f64 / link.bandwidth;
        self.decisions[i] = Some(Decision {
            call: i,
            service,
            size,
            arrival_s,
            server: first.name.clone(),
            predicted_s: first.etc.total_s(),
            ready_s,
            start_s: f64::NAN,
            end_s: f64::NAN,
            done_s: f64::NAN,
        });
        self.push(ready_s, Event::Ready { server: s, call: i });
        Ok(())
    }

    /// A call's inputs are on `server` at `now`: it starts if a slot is free, else waits.
    fn ready(&mut self, server: usize, call: usize, now: f64) {
        self.stations[server].here.push(call);
        if self.cores.len() > 1 {
            self.tell_arrival(server, call, now);
        }
        if self.stations[server].busy < self.platform.class_of(server).slots {
            self.stations[server].busy += 1;
            self.start(call, server, now);
        } else {
            self.stations[server].waiting.push_back(call);
        }
    }

    /// `call` starts on `server` at `now`; its end is due when the server's availability
    /// lets its work finish.
    fn start(&mut self, call: usize, server: usize, now: f64) {
        let (_, service, size) = &self.arrivals[call];
        let work = work_of(self.scenario, service, *size);
        let full = self
            .platform
            .class_of(server)
            .exec_s(service, work, *size as f64);
        let end_s = self.platform.availability(server).finish(now, full);
        let d = self.decisions[call]
            .as_mut()
            .expect("a call starts after it arrived");
        d.start_s = now;
        d.end_s = end_s;
        self.push(end_s, Event::End { server, call });
    }

    /// `call`'s kernel ends on `server` at `now`: its outputs leave for the client, the
    /// server reports it (the core learns from it), and the next call waiting there starts.
    fn end(&mut self, server: usize, call: usize, now: f64) -> Result<(), ScenarioError> {
        let link = &self.scenario.links;
        let d = self.decisions[call]
            .as_mut()
            .expect("a call ends after it arrived");
        let desc = &self.descs[&d.service];
        let out_bytes = profile_of(desc, d.size)?.out_bytes;
        d.done_s = now + link.latency_s + out_bytes as f64 / link.bandwidth;
        let report = CallReport {
            client_in_bytes: None,
            cpu_available: None,
            ticket: self.tickets[call],
            service: d.service.clone(),
            sizes: desc
                .size_params
                .iter()
                .map(|p| (p.clone(), d.size as i64))
                .collect(),
            timing: Timing {
                kernel_s: d.end_s - d.start_s,
                ..Timing::default()
            },
            ok: true,
        };
        for (core, ids) in self.cores.iter_mut().zip(&self.ids) {
            let _ = core.report(ids[server], std::slice::from_ref(&report), at(now));
        }
        self.stations[server].here.retain(|c| *c != call);
        match self.stations[server].waiting.pop_front() {
            Some(next) => self.start(next, server, now),
            None => self.stations[server].busy -= 1,
        }
        Ok(())
    }
}

impl OnlineSim<'_> {
    /// What server `s` lists of `call` to the agents at `now`.
    fn in_flight(&self, call: usize, now: f64) -> Option<gridwise_proto::InFlight> {
        let d = self.decisions[call].as_ref()?;
        Some(gridwise_proto::InFlight {
            ticket: self.tickets[call]?,
            service: d.service.clone(),
            sizes: self.descs[&d.service]
                .size_params
                .iter()
                .map(|p| (p.clone(), d.size as i64))
                .collect(),
            ran_s: (d.start_s <= now).then_some(now - d.start_s),
        })
    }

    /// `call` reached server `s` at `now`: every agent hears of it (the server's arrival
    /// notice; the one that placed it knows it already).
    fn tell_arrival(&mut self, s: usize, call: usize, now: f64) {
        let Some(f) = self.in_flight(call, now) else {
            return;
        };
        for (core, ids) in self.cores.iter_mut().zip(&self.ids) {
            let _ = core.arrived(ids[s], std::slice::from_ref(&f), at(now));
        }
    }

    /// Server `s`'s heartbeat at `now`: every agent hears the calls it holds; the next one
    /// is due a heartbeat later.
    fn beat(&mut self, s: usize, now: f64) {
        let in_flight: Vec<gridwise_proto::InFlight> = self.stations[s]
            .here
            .iter()
            .filter_map(|&c| self.in_flight(c, now))
            .collect();
        for (core, ids) in self.cores.iter_mut().zip(&self.ids) {
            let hb = Heartbeat {
                server_id: ids[s],
                load: LoadSample::default(),
                models: Vec::new(),
                in_flight: in_flight.clone(),
            };
            let _ = core.heartbeat(&hb, at(now));
        }
        self.push(now + self.heartbeat_s, Event::Beat(s));
    }
}

/// Virtual seconds as the core's time.
fn at(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// Operations of a call of `service` at `size` (the scenario is checked, so it evaluates).
fn work_of(scenario: &Scenario, service: &str, size: u64) -> f64 {
    scenario
        .compiled(service)
        .ok()
        .and_then(|(c, _)| {
            let param = scenario.services[service].param.clone();
            c.eval(&[(param, size as i64)]).ok()
        })
        .unwrap_or(0.0)
}

fn profile_of(desc: &ServiceDesc, size: u64) -> Result<CallProfile, ScenarioError> {
    let sizes: Vec<(String, i64)> = desc
        .size_params
        .iter()
        .map(|p| (p.clone(), size as i64))
        .collect();
    desc.profile_for_sizes(&sizes)
        .map_err(|e| ScenarioError::invalid(format!("services.{}", desc.name), e))
}

/// A core with every server of `platform` registered (in server order) and joined, knowing
/// what `knows` says.
fn agent(
    platform: &Platform,
    descs: &HashMap<String, ServiceDesc>,
    knows: Knowledge,
    salt: u64,
) -> Result<(AgentCore, Vec<ServerId>), ScenarioError> {
    let mut core = AgentCore::new(CoreConfig {
        tie_salt: Some(salt),
        ..CoreConfig::default()
    });
    let rates = platform.rates(None);
    let mut ids = Vec::with_capacity(platform.servers());
    for (s, name) in platform.names().iter().enumerate() {
        let class = platform.class_of(s);
        let reg = Registration {
            secret: None,
            instance: format!("sim-{s}"),
            max_frame_bytes: u64::MAX,
            sleeping: Vec::new(),
            not_offered: Vec::new(),
            memory_budget_bytes: u64::MAX,
            name: name.clone(),
            addr: format!("sim-{s}:0"),
            slots: class.slots as u32,
            services: class.speeds.keys().map(|k| descs[k].clone()).collect(),
            rates: vec![],
            default_rate: if knows == Knowledge::Rates {
                rates[s]
            } else {
                0.0
            },
            memory_bytes: u64::MAX,
            cores: class.slots as u32,
        };
        let id = core
            .register(reg, Duration::ZERO)
            .map_err(|e| ScenarioError::invalid(format!("servers ({name})"), e.message))?
            .server_id;
        let _ = core.heartbeat(
            &Heartbeat {
                server_id: id,
                load: LoadSample::default(),
                models: Vec::new(),
                in_flight: Vec::new(),
            },
            Duration::ZERO,
        );
        if knows == Knowledge::Models {
            let points: Vec<ModelPoint> = model_points(platform, s);
            let _ = core.model_points(id, &points);
        }
        ids.push(id);
    }
    Ok((core, ids))
}

/// Server `s`'s performance models as a finished build would have measured them: one point
/// at each point of each speed function (sizes below 1 cannot be a call's size).
pub fn model_points(platform: &Platform, s: usize) -> Vec<ModelPoint> {
    let mut out = Vec::new();
    for (service, f) in &platform.class_of(s).speeds {
        for &(size, speed) in f.points() {
            if size < 1.0 {
                continue;
            }
            out.push(ModelPoint {
                service: service.clone(),
                x: vec![size.round() as i64],
                stats: PointStats {
                    sd: 0.0,
                    count: 1,
                    min: speed,
                    mean: speed,
                    max: speed,
                },
                source: PointSource::Benchmark,
            });
        }
    }
    out
}

fn summarise(
    policy: Policy,
    servers: usize,
    decisions: &[Decision],
    ranking: Duration,
) -> OnlineReport {
    let n = decisions.len().max(1) as f64;
    let mut response: Vec<f64> = decisions.iter().map(|d| d.done_s - d.arrival_s).collect();
    response.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        if response.is_empty() {
            0.0
        } else {
            response[((response.len() - 1) as f64 * q).round() as usize]
        }
    };
    let error: f64 = decisions
        .iter()
        .map(|d| {
            let actual = d.done_s - d.arrival_s;
            if actual > 0.0 {
                (d.predicted_s - actual).abs() / actual
            } else {
                0.0
            }
        })
        .sum();
    OnlineReport {
        policy: policy.as_str().to_string(),
        calls: decisions.len(),
        servers,
        makespan_s: decisions.iter().map(|d| d.done_s).fold(0.0, f64::max),
        mean_response_s: response.iter().sum::<f64>() / n,
        p95_response_s: pick(0.95),
        max_response_s: response.last().copied().unwrap_or(0.0),
        mean_wait_s: decisions.iter().map(|d| d.start_s - d.ready_s).sum::<f64>() / n,
        mean_prediction_error: error / n,
        decisions_per_s: if ranking > Duration::ZERO {
            decisions.len() as f64 / ranking.as_secs_f64()
        } else {
            0.0
        },
    }
}
