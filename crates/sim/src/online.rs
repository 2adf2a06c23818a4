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
//! kernel, over the scenario's default link. What is left out: link contention, heartbeats
//! after the first (no load history, so no load band), failures.

use crate::platform::Platform;
use crate::scenario::{Gaps, Knowledge, Scenario, ScenarioError, WorkloadSpec};
use crate::workload::draw;
use gridwise_kernels::{EmulatedSpec, Kernel};
use gridwise_proto::{
    CallProfile, CallReport, Heartbeat, LoadSample, ModelPoint, PointSource, PointStats, Policy,
    RankOptions, Registration, ServerId, ServiceDesc, Timing,
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
            Event::Arrive(_) => 2,
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

/// Simulates `scenario`'s online workload with the agent ranking by `policy`.
pub fn simulate_online(scenario: &Scenario, policy: Policy) -> Result<OnlineRun, ScenarioError> {
    let WorkloadSpec::Online {
        calls,
        services,
        sizes,
        mean_gap_s,
        gaps,
        agent_knows,
        seed,
    } = &scenario.workload
    else {
        return Err(ScenarioError::invalid(
            "workload",
            "not an online workload (kind \"online\"); map graphs with a graph policy instead",
        ));
    };
    let platform = scenario.platform()?;
    if policy == Policy::ConstantSpeed && *agent_knows != Knowledge::Rates {
        return Err(ScenarioError::invalid(
            "workload.agent_knows",
            "constant-speed ranks by each server's calibrated rate: set \"agent_knows\": \
             \"rates\" to give the agent one",
        ));
    }
    let mut descs = HashMap::new();
    for name in scenario.services.keys() {
        descs.insert(name.clone(), service_desc(scenario, name)?);
    }
    let (mut core, ids) = agent(&platform, &descs, *agent_knows)?;
    let server_of: HashMap<ServerId, usize> =
        ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();

    // The calls: service round robin, sizes and gaps drawn from the seed.
    let mut rng = SplitMix64::new(*seed);
    let mut arrivals = Vec::with_capacity(*calls);
    let mut t = 0.0;
    for i in 0..*calls {
        let service = services[i % services.len()].clone();
        let size = draw(sizes, &mut rng);
        arrivals.push((t, service, size));
        t += match gaps {
            Gaps::Fixed => *mean_gap_s,
            Gaps::Poisson => -mean_gap_s * (1.0 - rng.uniform(0.0, 1.0)).ln(),
        };
    }

    let link = &scenario.links;
    let opts = RankOptions {
        policy: Some(policy),
        ..RankOptions::default()
    };
    let mut due = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |due: &mut BinaryHeap<Due>, at: f64, event: Event| {
        seq += 1;
        due.push(Due { at, seq, event });
    };
    for (i, a) in arrivals.iter().enumerate() {
        push(&mut due, a.0, Event::Arrive(i));
    }
    let mut stations: Vec<Station> = (0..platform.servers())
        .map(|_| Station::default())
        .collect();
    let mut decisions: Vec<Option<Decision>> = vec![None; *calls];
    let mut tickets = vec![None; *calls];
    let mut ranking = Duration::ZERO;
    let at = |s: f64| Duration::from_secs_f64(s.max(0.0));

    // When a call started at `now` on `server` ends, under the server's availability.
    let end_of = |call: usize, server: usize, now: f64| {
        let (_, service, size) = &arrivals[call];
        let work = work_of(scenario, service, *size);
        let full = platform
            .class_of(server)
            .exec_s(service, work, *size as f64);
        platform.availability(server).finish(now, full)
    };
    while let Some(Due { at: now, event, .. }) = due.pop() {
        match event {
            Event::Arrive(i) => {
                let (arrival_s, service, size) = &arrivals[i];
                let profile = profile_of(&descs[service], *size)?;
                let t0 = Instant::now();
                let ranked = core.rank(&profile, &opts, at(now));
                ranking += t0.elapsed();
                let ranked = ranked.map_err(|e| {
                    ScenarioError::invalid(
                        format!("call {i} ({service}, size {size})"),
                        format!("the agent cannot place it: {}", e.message),
                    )
                })?;
                let first = &ranked.candidates[0];
                let s = server_of[&first.server_id];
                if platform
                    .class_of(s)
                    .exec_s(service, 1.0, *size as f64)
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
                tickets[i] = Some(ranked.ticket);
                let mut d = Decision {
                    call: i,
                    service: service.clone(),
                    size: *size,
                    arrival_s: *arrival_s,
                    server: first.name.clone(),
                    predicted_s: first.etc.total_s(),
                    ready_s: f64::NAN,
                    start_s: f64::NAN,
                    end_s: f64::NAN,
                    done_s: f64::NAN,
                };
                d.ready_s = now + link.latency_s + profile.in_bytes as f64 / link.bandwidth;
                push(&mut due, d.ready_s, Event::Ready { server: s, call: i });
                decisions[i] = Some(d);
            }
            Event::Ready { server, call } => {
                let st = &mut stations[server];
                if st.busy < platform.class_of(server).slots {
                    st.busy += 1;
                    let d = decisions[call]
                        .as_mut()
                        .expect("a call is ready after it arrived");
                    d.start_s = now;
                    d.end_s = end_of(call, server, now);
                    push(&mut due, d.end_s, Event::End { server, call });
                } else {
                    st.waiting.push_back(call);
                }
            }
            Event::End { server, call } => {
                let d = decisions[call]
                    .as_mut()
                    .expect("a call ends after it arrived");
                let out_bytes = profile_of(&descs[&d.service], d.size)?.out_bytes;
                d.done_s = now + link.latency_s + out_bytes as f64 / link.bandwidth;
                let d = &*d;
                let report = CallReport {
                    client_in_bytes: None,
                    cpu_available: None,
                    ticket: tickets[call],
                    service: d.service.clone(),
                    sizes: descs[&d.service]
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
                let _ = core.report(ids[server], &[report], at(now));
                let st = &mut stations[server];
                match st.waiting.pop_front() {
                    Some(next) => {
                        let d = decisions[next].as_mut().expect("queued calls have arrived");
                        d.start_s = now;
                        d.end_s = end_of(next, server, now);
                        push(&mut due, d.end_s, Event::End { server, call: next });
                    }
                    None => st.busy -= 1,
                }
            }
        }
    }
    let decisions: Vec<Decision> = decisions.into_iter().flatten().collect();
    let report = summarise(policy, platform.servers(), &decisions, ranking);
    Ok(OnlineRun { report, decisions })
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
) -> Result<(AgentCore, Vec<ServerId>), ScenarioError> {
    let mut core = AgentCore::new(CoreConfig::default());
    let rates = platform.rates(None);
    let mut ids = Vec::with_capacity(platform.servers());
    for (s, name) in platform.names().iter().enumerate() {
        let class = platform.class_of(s);
        let reg = Registration {
            secret: None,
            instance: format!("sim-{s}"),
            max_frame_bytes: u64::MAX,
            sleeping: Vec::new(),
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
