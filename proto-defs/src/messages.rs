//! Messages between clients, the agent and servers.

use crate::ids::{CallId, ServerId, Ticket};
use crate::service::ServiceDesc;
use crate::value::Value;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What the agent needs to rank servers for one call: no bulk data, only sizes and byte counts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallProfile {
    pub service: String,
    /// Size parameter values, in the description's order.
    pub sizes: Vec<(String, i64)>,
    /// Bytes the inputs sent by the client take on the wire.
    pub in_bytes: u64,
    /// Bytes the outputs are expected to take.
    pub out_bytes: u64,
    /// Inputs that live on servers: (holder address, bytes). The server that runs the call
    /// pulls them, so where they are weighs in the choice.
    pub remote_in: Vec<(String, u64)>,
    /// Bytes of the inputs that travel inside the request frame (not on a bulk connection,
    /// not pulled): a server whose `max_frame_bytes` is smaller would close the connection
    /// on it, so the agent does not send the call there. 0 from peers that do not say.
    #[serde(default)]
    pub inline_bytes: u64,
}

/// The memory a server needs for a call whose inputs (those sent and those pulled) and
/// outputs come to these bytes: twice their sum — a kernel may hold a working copy of each,
/// and a reply is serialised whole before it is sent. Client, agent and server all judge a
/// call by this one rule.
pub fn footprint_bytes(input_bytes: u64, output_bytes: u64) -> u64 {
    input_bytes.saturating_add(output_bytes).saturating_mul(2)
}

impl CallProfile {
    /// This call's [`footprint_bytes`].
    pub fn footprint_bytes(&self) -> u64 {
        let remote: u64 = self.remote_in.iter().map(|(_, b)| *b).sum();
        footprint_bytes(self.in_bytes.saturating_add(remote), self.out_bytes)
    }
}

/// A measured network link, from one server to another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkSample {
    /// Address of the far end.
    pub to: String,
    /// One-way latency, s (half the round trip).
    pub latency_s: f64,
    /// Throughput, bytes/s.
    pub bandwidth_bytes_per_s: f64,
    /// The data came from the far end to the measuring server (a pull), not the other way (a
    /// probe): a link's two directions can differ, and each is learned for the one it timed.
    pub inbound: bool,
}

/// A link as the agent knows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkInfo {
    /// Address of the measuring server.
    pub from: String,
    /// What `from` measured of its link to `sample.to`.
    pub sample: LinkSample,
    /// Seconds since it was measured.
    pub age_s: f64,
}

/// How the agent orders candidate servers (DESIGN.md §6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Minimum completion time over the ETC (queue + transfers + compute).
    #[default]
    Mct,
    /// Each call to the next server in turn.
    RoundRobin,
    /// Classic GridSolve: the highest calibrated rate, ignoring queues and sizes.
    ConstantSpeed,
    /// Minimum completion time at the agent's tuning factor of standard deviations above
    /// the mean (seed 000): a steady server beats a noisy one that is only faster on average.
    Conservative,
}

impl Policy {
    /// Every policy, for help texts.
    pub const ALL: [Policy; 4] = [
        Policy::Mct,
        Policy::RoundRobin,
        Policy::ConstantSpeed,
        Policy::Conservative,
    ];

    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Mct => "mct",
            Policy::RoundRobin => "round-robin",
            Policy::ConstantSpeed => "constant-speed",
            Policy::Conservative => "conservative",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .iter()
            .copied()
            .find(|p| p.as_str() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown policy `{s}`: use one of {}",
                    Policy::ALL.map(|p| p.as_str()).join(", ")
                )
            })
    }
}

/// Per-call ranking options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankOptions {
    /// Only this server (by name): a function handle bound at init time.
    pub pin_server: Option<String>,
    /// A policy other than the agent's default.
    pub policy: Option<Policy>,
    /// How load enters the estimate, other than the agent's default (for comparing
    /// predictors; the agent's own models are untouched).
    #[serde(default)]
    pub load_model: Option<LoadModel>,
    /// Which model family estimates the quiet-host compute time, other than the service's.
    #[serde(default)]
    pub model_family: Option<ModelFamily>,
}

/// How a server's load enters an estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadModel {
    /// The quiet-host time divided by the forecast CPU availability (NWS-style forecasts of
    /// the server's sensors), the forecast's error carried into the spread.
    #[default]
    Forecast,
    /// The middle of the load band of one-minute load averages (seed 003 §2.1): what
    /// gridwise did before it had sensors, kept for comparison.
    Band,
    /// Load ignored: the quiet-host time.
    Blind,
}

/// Which model family estimates a service's quiet-host compute time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelFamily {
    /// Functional performance models (seed 003), regression where the FPM has no point.
    #[default]
    Fpm,
    /// Regression models over the call's work (seed 001), the FPM where regression has too
    /// few runs.
    Regression,
    /// Whichever of the two had the smaller recent error on this server.
    Auto,
}

macro_rules! spelled {
    ($ty:ident, $what:literal, $($variant:ident => $name:literal),+) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The configuration spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $ty::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s.trim())
                    .ok_or_else(|| {
                        let names: Vec<&str> = $ty::ALL.iter().map(|v| v.as_str()).collect();
                        format!(concat!("unknown ", $what, " `{}`: use one of {}"), s, names.join(", "))
                    })
            }
        }
    };
}

spelled!(LoadModel, "load model", Forecast => "forecast", Band => "band", Blind => "blind");
spelled!(ModelFamily, "model family", Fpm => "fpm", Regression => "regression", Auto => "auto");

/// Where an ETC's compute term came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ComputeSource {
    /// complexity ÷ the rate (operations/s) the server measured for this service at start-up.
    CalibratedRate {
        /// Operations per second.
        rate: f64,
    },
    /// The mean kernel time of this service's past calls on this server (no complexity).
    History {
        /// How many calls the mean is over.
        calls: u64,
    },
    /// The server's functional performance model of this service: time = complexity ÷ S(x).
    Fpm {
        /// Measured points in the model.
        points: u32,
        /// Whether the speed was adjusted for the server's recent load (band model).
        load_adjusted: bool,
    },
    /// complexity ÷ a rate, because the size lies outside the range the model covers: below a
    /// one-parameter model's bottom, the bottom's speed; past its top, the top's speed where the
    /// speed fell there, else the faster of it and the calibrated rate; with several
    /// parameters, the calibrated rate.
    RateOutsideModel {
        /// Operations per second.
        rate: f64,
        /// Measured points in the model.
        points: u32,
    },
    /// The service declares how long it takes (`duration`, e.g. `sleep`'s seconds), whatever the
    /// server.
    Declared,
    /// The mean kernel time of this service's past calls at exactly these sizes on this server.
    HistoryAtSize {
        /// How many calls the mean is over.
        calls: u64,
    },
    /// The mean kernel time of this service's past calls on the other servers (this one has
    /// run none yet).
    GridHistory {
        /// How many calls the mean is over.
        calls: u64,
    },
    /// A regression model of the service's time on this server (seed 001), or another
    /// server's scaled by the ratio of their calibrated rates when this one has too few runs.
    Regression {
        /// The candidate function that fits best, e.g. `c0 + c1*w`.
        function: String,
        /// Runs it was fitted on.
        runs: u32,
        /// The server whose model was borrowed, when it was.
        scaled_from: Option<String>,
    },
    /// Nothing is known yet (no complexity, no duration, no call finished anywhere): a
    /// nominal time is assumed, so that a burst of such calls still spreads over the servers.
    Assumed {
        /// The time assumed, s (the agent's `unknown_compute_s`).
        seconds: f64,
    },
}

impl fmt::Display for ComputeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ComputeSource::CalibratedRate { rate } => {
                write!(f, "complexity / calibrated rate {:.3} Gop/s", rate / 1e9)
            }
            ComputeSource::History { calls } => write!(f, "mean of {calls} past call(s)"),
            ComputeSource::Fpm {
                points,
                load_adjusted,
            } => write!(
                f,
                "performance model ({points} points{})",
                if *load_adjusted {
                    ", load-adjusted"
                } else {
                    ""
                }
            ),
            ComputeSource::RateOutsideModel { rate, points } => write!(
                f,
                "complexity / {:.3} Gop/s, the speed at the model's nearer end or the calibrated rate (size outside the model's {points} points)",
                rate / 1e9
            ),
            ComputeSource::Declared => f.write_str("the service's declared duration"),
            ComputeSource::HistoryAtSize { calls } => {
                write!(f, "mean of {calls} past call(s) at these sizes")
            }
            ComputeSource::GridHistory { calls } => {
                write!(f, "mean of {calls} past call(s) on other servers")
            }
            ComputeSource::Assumed { seconds } => write!(
                f,
                "unknown (no complexity, duration or history): {seconds} s assumed"
            ),
            ComputeSource::Regression {
                function,
                runs,
                scaled_from,
            } => match scaled_from {
                Some(s) => write!(
                    f,
                    "regression {function} of {s}, scaled by calibrated rates"
                ),
                None => write!(f, "regression {function} over {runs} run(s)"),
            },
        }
    }
}

/// Estimated time to compute for one call on one server, term by term (seconds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Etc {
    /// Wait for a free slot behind the calls already assigned to the server.
    pub queue_wait_s: f64,
    /// Sending the inputs: latency + in_bytes ÷ bandwidth.
    pub transfer_in_s: f64,
    /// Running the kernel, estimated as `compute_source` says.
    pub compute_s: f64,
    /// Returning the outputs: latency + out_bytes ÷ bandwidth.
    pub transfer_out_s: f64,
    /// Where the compute term came from.
    pub compute_source: ComputeSource,
    /// The standard deviation of the queue wait: the spreads of the predicted finishes
    /// ahead. 0 from older agents and where nothing is known of the spread.
    #[serde(default)]
    pub queue_wait_sd_s: f64,
    /// The standard deviation of both transfers together (link forecasts' errors).
    #[serde(default)]
    pub transfer_sd_s: f64,
    /// The standard deviation of the compute term: the model's misfit on this server and the
    /// error of the CPU availability forecast.
    #[serde(default)]
    pub compute_sd_s: f64,
    /// The fraction of a core the compute term expects the kernel to get (forecast from the
    /// server's sensors); `None` when the estimate did not adjust for load.
    #[serde(default)]
    pub cpu_available: Option<f64>,
    /// What the server spends on a call besides queue and kernel (decoding, encoding, handing
    /// between threads), as its recent calls showed.
    #[serde(default)]
    pub overhead_s: f64,
    #[serde(default)]
    pub overhead_sd_s: f64,
}

impl Etc {
    /// The sum of the terms: the expected completion time from now. (How sure it is, and its
    /// interval, are `gridwise_predict::EtcSpread`'s: every rule that combines spreads lives
    /// there.)
    pub fn total_s(&self) -> f64 {
        self.queue_wait_s
            + self.transfer_in_s
            + self.compute_s
            + self.transfer_out_s
            + self.overhead_s
    }
}

/// One server the call may go to, with its estimate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub server_id: ServerId,
    /// Its unique registration name, the one [`RankOptions::pin_server`] takes.
    pub name: String,
    /// Where clients reach it (host:port).
    pub addr: String,
    /// Candidates are in `etc.total_s()` order only under MCT; the other policies order
    /// without it.
    pub etc: Etc,
}

/// The agent's answer to a rank request: servers in order of preference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    /// The assignment record for the first candidate; pass it on to the server that runs the call.
    pub ticket: Ticket,
    /// Candidates, best first. Never empty.
    pub candidates: Vec<Candidate>,
    /// The policy that ordered them.
    pub policy: Policy,
}

/// What a server tells the agent when it registers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    /// Unique server name. A name held by a live server cannot be taken: re-registering under
    /// it needs the secret the agent gave that server, or proof that its process is gone.
    pub name: String,
    /// Random per server process: the agent dials `addr` and checks that the server there is
    /// this one (`ServerInfo::instance`), so nobody registers an address they do not serve.
    #[serde(default)]
    pub instance: String,
    /// The secret the agent issued at this server's last registration, if it has one.
    #[serde(default)]
    pub secret: Option<String>,
    /// Where clients reach it (host:port).
    pub addr: String,
    /// Calls it runs at once; the rest wait in its queue.
    pub slots: u32,
    pub services: Vec<ServiceDesc>,
    /// Operations per second measured at start-up, per service that has a complexity.
    pub rates: Vec<(String, f64)>,
    /// The rate for services without one of their own (from the dgemm calibration).
    pub default_rate: f64,
    /// Physical memory, bytes.
    pub memory_bytes: u64,
    /// CPU cores of the host; stored for operators, not used in ranking (`slots` is).
    pub cores: u32,
    /// Bytes the server lets one call's inputs and outputs (and their working copies) take:
    /// calls that need more are not sent there.
    #[serde(default = "unlimited")]
    pub memory_budget_bytes: u64,
    /// The largest frame the server sends or receives: calls whose inputs or returned outputs
    /// are larger are not sent there.
    #[serde(default = "unlimited")]
    pub max_frame_bytes: u64,
    /// Services whose times the load this server reports does not stretch: kernels that sleep
    /// rather than compute (emulated ones) on a server that reports its host's load, so the
    /// agent predicts them as on a quiet host. Four servers sharing two cores sensed 50–95% of
    /// a core each, and a prediction divided by that split a slab of equal servers 646 rows to
    /// 941. Under a configured load trace the trace is what slows them, and the server reports
    /// it: none are listed.
    #[serde(default)]
    pub sleeping: Vec<String>,
    /// Routines its description files describe that it does not offer, and why: the agent
    /// shows them (`status`, `services --describe`) where the server's log is out of sight.
    #[serde(default)]
    pub not_offered: Vec<NotOffered>,
}

/// A routine a server's description files describe that the server does not offer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NotOffered {
    pub service: String,
    /// The description file it is in, as the server's config names it.
    pub file: String,
    /// Why it is not offered, and what to do about it.
    pub why: String,
}

// Registrations saved by an earlier release say nothing of limits.
fn unlimited() -> u64 {
    u64::MAX
}

/// The agent's answer to a registration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegisterReply {
    /// The server's id from now on.
    pub server_id: ServerId,
    /// How often the agent wants heartbeats, ms.
    pub heartbeat_interval_ms: u64,
    /// Proof of identity for later registrations under this name (after an agent restart or a
    /// missed-heartbeat verdict); kept by the server, never shown.
    pub secret: String,
}

/// A server's load at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadSample {
    /// Calls running now (their kernel, or waiting in their slot for memory): at most the
    /// server's slots.
    pub running: u32,
    /// Calls waiting for a slot, or holding one while their inputs arrive.
    pub queued: u32,
    /// One-minute load average of the host (0 where unknown).
    pub loadavg_1m: f64,
    /// Whether the server's own model benchmarks ran during the last minute (such samples are
    /// kept out of the load history: they are not load the calls will meet).
    pub benchmarking: bool,
    /// The fraction of a core a new call would get now, in (0, 1] (NWS's CPU availability):
    /// background load only, the server's own calls left out. `None` from a server that does
    /// not measure it.
    #[serde(default)]
    pub cpu_available: Option<f64>,
    /// Memory free for new work (the kernel's `MemAvailable`), bytes; `None` where unknown.
    #[serde(default)]
    pub free_memory_bytes: Option<u64>,
}

/// What a server sends the agent every `heartbeat_interval_ms` ([`RegisterReply`]); a server
/// silent past the agent's timeout is marked [`ServerState::Down`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// From the server's [`RegisterReply`]; an id the agent does not know (or a server it
    /// marked down) is answered [`Ack::Reregister`].
    pub server_id: ServerId,
    /// Replaces the load the agent shows for the server; its `loadavg_1m` also feeds the load
    /// history unless `benchmarking` is set.
    pub load: LoadSample,
    /// Progress of its model builds.
    pub models: Vec<ModelProgress>,
    /// The calls on the server now that an agent ranked (those with a ticket): where several
    /// agents share the servers, each learns from it what the others placed there.
    pub in_flight: Vec<InFlight>,
}

/// A call on a server as its heartbeat saw it: enough for an agent that did not place it to
/// predict when it frees its slot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    /// The ticket of the agent that placed it (tickets are unique across agents: keyed
    /// hashes with a key of each agent's own).
    pub ticket: Ticket,
    pub service: String,
    /// Size-parameter values, as the call's report will give them.
    pub sizes: Vec<(String, i64)>,
    /// How long its kernel has run, s; `None` while it waits for a slot.
    pub ran_s: Option<f64>,
}

/// Summary statistics of the speeds measured at one size (operations/s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PointStats {
    /// Runs merged into the point, benchmarks and real calls alike; 0 for an assumed-zero point
    /// (whose speeds are all 0).
    pub count: u64,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// Sample standard deviation of the runs (0 for one run, and from older peers).
    #[serde(default)]
    pub sd: f64,
}

/// Where a model point came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PointSource {
    /// A benchmark run by the server's model builder.
    Benchmark,
    /// A real call's kernel time.
    Online,
    /// Not measured: the builder assumes speed 0 at the top of the range (GBBP's b endpoint).
    AssumedZero,
}

impl PointSource {
    /// Its spelling in the agent's store and in JSON for people.
    pub fn as_str(self) -> &'static str {
        match self {
            PointSource::Benchmark => "benchmark",
            PointSource::Online => "online",
            PointSource::AssumedZero => "assumed-zero",
        }
    }
}

impl std::fmt::Display for PointSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PointSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "benchmark" => Ok(PointSource::Benchmark),
            "online" => Ok(PointSource::Online),
            "assumed-zero" => Ok(PointSource::AssumedZero),
            other => Err(format!(
                "unknown point source `{other}` (expected `benchmark`, `online` or `assumed-zero`)"
            )),
        }
    }
}

/// One point of a (server, service) performance model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelPoint {
    pub service: String,
    /// Size parameter values, in the description's order.
    pub x: Vec<i64>,
    /// Speeds measured there.
    pub stats: PointStats,
    /// With [`PointSource::AssumedZero`], `stats` is all zeros and only `x` means anything.
    pub source: PointSource,
}

/// A construction interval of a model build (for plots).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuildInterval {
    /// The end at the smaller size.
    pub lo: Vec<i64>,
    /// The end at the larger size.
    pub hi: Vec<i64>,
    /// Whether the builder is done with it.
    pub finalised: bool,
}

/// Where a model build stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum BuildState {
    /// Behind higher-priority builds.
    Queued,
    /// Its policy does not allow benchmarks now (the reason).
    Waiting(String),
    /// Measuring points.
    Building,
    /// Every construction interval is finalised.
    Done,
    /// The build stopped with an error.
    Failed(String),
}

/// Progress of one model build on a server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelProgress {
    pub service: String,
    /// Construction method (gbbp, naive, …).
    pub method: String,
    pub state: BuildState,
    /// Points the build has measured so far (an assumed zero is not one).
    pub points: u32,
    /// Kernel runs over all points: a point may take several.
    pub runs: u32,
    /// Time spent benchmarking, s.
    pub bench_time_s: f64,
    /// Construction intervals, for plots: only GBBP builds make them.
    pub intervals: Vec<BuildInterval>,
}

/// A (server, service) model as the agent holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelExport {
    pub server: String,
    pub service: String,
    /// Size parameter names, in the order of every point's sizes.
    pub params: Vec<String>,
    /// The service's complexity expression.
    pub complexity: Option<String>,
    /// Measured points (benchmarks and real calls merged per size).
    pub points: Vec<(Vec<i64>, PointStats)>,
    /// The assumed zero-speed point, if the build set one.
    pub assumed_zero: Option<Vec<i64>>,
    /// The server's build progress, if it builds this model.
    pub progress: Option<ModelProgress>,
}

/// One line of the agent's model list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSummary {
    pub server: String,
    pub service: String,
    /// Points of the agent's model, from benchmarks and real calls alike.
    pub points: u32,
    /// Build progress on the server, if any.
    pub progress: Option<ModelProgress>,
}

/// The agent's answer to a heartbeat or a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ack {
    /// Noted: the agent knows the server and holds it up.
    Ok,
    /// The agent does not know this server (it restarted, or marked it down): register again.
    Reregister,
    /// Another process registered under this server's name while this one was silent past
    /// the heartbeat timeout and did not answer at its address: it holds the name now
    /// (`gridwise status` shows where). This server may register again, and gets the name
    /// back only once that one is gone in turn.
    Replaced,
}

/// Time spent on one call, as the server saw it (seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Waiting for a free slot.
    pub queue_wait_s: f64,
    /// From the client's send to the request's arrival (needs synchronised clocks across hosts;
    /// exact on one host).
    pub input_transfer_s: f64,
    /// Running the kernel: the one term the agent learns speeds from.
    pub kernel_s: f64,
    /// From arrival to reply, all included.
    pub server_s: f64,
}

/// A finished call, reported by the server to the agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallReport {
    /// The assignment it came with, if any.
    pub ticket: Option<Ticket>,
    pub service: String,
    /// Size parameter values; the model learns the kernel time at these sizes only when they
    /// match the service's size parameters (else only the service's history does).
    pub sizes: Vec<(String, i64)>,
    /// Only `kernel_s`, and only of a call with `ok`, feeds the agent's history and models.
    pub timing: Timing,
    /// Whether the kernel returned outputs.
    pub ok: bool,
    /// The mean fraction of a core the kernel got while it ran: its time on a quiet host is
    /// `kernel_s` × this. `None` from a server that does not measure it (taken as 1).
    #[serde(default)]
    pub cpu_available: Option<f64>,
    /// The bytes the client sent for it, when no input came from a peer: with the timing's
    /// `input_transfer_s`, what the client's link to this server costs now.
    #[serde(default)]
    pub client_in_bytes: Option<u64>,
}

/// One call sent to a server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    /// The client's id for the call (for cancel).
    pub call_id: CallId,
    /// The agent's assignment, if the agent chose this server.
    pub ticket: Option<Ticket>,
    pub service: String,
    /// IN and INOUT values, in order.
    pub inputs: Vec<Value>,
    /// Client wall clock at send, ns since the Unix epoch.
    pub sent_at_unix_ns: u64,
    /// Outputs (by position among the outputs) to keep on the server and return as
    /// [`Value::Ref`] instead of sending them back.
    pub keep_outputs: Vec<u32>,
    /// The largest reply the client accepts (its frame limit), bytes; 0: the server's own
    /// limit. A call whose returned outputs would be larger is refused before it runs.
    pub reply_limit_bytes: u64,
    /// Whether the client collects large outputs on a bulk connection: outputs of at least
    /// [`crate::value::BULK_MIN_BYTES`] that are not kept then come back as a
    /// [`Value::Ref`] staged for one read, outside the reply (and its frame limit).
    pub bulk_outputs: bool,
    /// Kept outputs smaller than this (bytes) also come back whole in
    /// [`ExecuteReply::copies`], within the reply limit; 0: none. A task graph sends such a
    /// copy to a consumer on another server instead of a reference it would pull: one
    /// message instead of a round trip between servers on the way to its kernel.
    pub copy_kept_below_bytes: u64,
}

/// A server's answer to a successful call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecuteReply {
    /// OUT and INOUT values, in order.
    pub outputs: Vec<Value>,
    pub timing: Timing,
    pub server: String,
    /// Copies of kept outputs (by position among the outputs) the request asked for with
    /// [`ExecuteRequest::copy_kept_below_bytes`]; the originals stay kept, referenced in
    /// `outputs`.
    pub copies: Vec<(u32, Value)>,
}

/// What a server says about itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// The name it registers under.
    pub name: String,
    /// Random per process (see [`Registration::instance`]).
    pub instance: String,
    pub services: Vec<ServiceDesc>,
    /// Calls run at once.
    pub slots: u32,
    pub load: LoadSample,
}

/// Whether a server may get calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerState {
    /// Heartbeats arrive.
    Up,
    /// No heartbeat within the timeout: no new calls until it registers again.
    Down,
}

/// A server as the agent sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerStatus {
    /// Kept when the server re-registers under its name.
    pub id: ServerId,
    pub name: String,
    /// Where clients reach it (host:port).
    pub addr: String,
    pub state: ServerState,
    /// Names of the services it offers.
    pub services: Vec<String>,
    /// Calls it runs at once, as it registered.
    pub slots: u32,
    /// Calls assigned by the agent and not yet reported.
    pub pending: u32,
    /// Calls it reported finished, failed ones included; a re-registration keeps the count, an
    /// agent restart starts it again at 0.
    pub completed: u64,
    /// The load in the last heartbeat.
    pub load: LoadSample,
    /// Seconds since the last heartbeat.
    pub last_heard_s: f64,
    /// Calibrated default rate, operations/s.
    pub default_rate: f64,
    /// Routines it describes but does not offer ([`Registration::not_offered`]).
    #[serde(default)]
    pub not_offered: Vec<NotOffered>,
}

/// A service and how many live servers offer it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceSummary {
    pub desc: ServiceDesc,
    /// Live servers offering it.
    pub servers_up: u32,
}

/// The agent's view of the grid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    /// The agent's default policy; a call's [`RankOptions::policy`] overrides it.
    pub policy: Policy,
    /// Seconds since the agent started.
    pub uptime_s: f64,
    /// Every known server, down ones included, sorted by name.
    pub servers: Vec<ServerStatus>,
    /// Assignments made since the agent started, each call of a reserved graph included
    /// (`explain` makes none).
    pub ranked: u64,
    /// Whether what the agent learns reaches its disk.
    pub storage: StorageHealth,
    /// How this agent sees the calls other agents place: `None` for an agent that hears of
    /// none (one agent alone, or servers of one agent each).
    #[serde(default)]
    pub others: Option<OthersView>,
}

/// The calls other agents place, as one agent sees them: how many reach the servers, and how
/// long a call goes unseen by the others (the agent's own calls, from its ranking to the
/// server's notice of their arrival: the others' calls take about as long to be seen here).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OthersView {
    /// The others' calls reaching servers, per second (over about the last second).
    pub arrivals_per_s: f64,
    /// Seconds from ranking to the arrival notice (a running mean); `None` until one came.
    pub unseen_for_s: Option<f64>,
}

impl OthersView {
    /// How many of the others' calls are on their way, unseen here, on average (0 until the
    /// time unseen is known).
    pub fn unseen_calls(&self) -> f64 {
        self.unseen_for_s.map_or(0.0, |t| self.arrivals_per_s * t)
    }
}

/// The state of the agent's persistence.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageHealth {
    /// False while writes fail; what is learned meanwhile is kept and retried.
    pub ok: bool,
    /// The last write error, if the last attempt failed.
    pub last_error: Option<String>,
    /// Writes waiting to be retried.
    pub pending_writes: u64,
    /// Writes given up (the retry queue overflowed), since start.
    pub dropped_writes: u64,
}

/// A server's answer to a ping.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pong {
    pub name: String,
    pub load: LoadSample,
    /// Values kept on the server (outputs not sent back) and not freed yet.
    pub held_values: u64,
    /// Their payload bytes.
    pub held_bytes: u64,
    /// Kernels that ran to completion since the server started (successful or not).
    pub executed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip() {
        for p in Policy::ALL {
            assert_eq!(p.as_str().parse::<Policy>().unwrap(), p);
        }
        assert!("heft".parse::<Policy>().unwrap_err().contains("mct"));
    }

    #[test]
    fn etc_total_is_the_sum() {
        let e = Etc {
            overhead_s: 0.0,
            overhead_sd_s: 0.0,
            compute_sd_s: 0.0,
            queue_wait_sd_s: 0.0,
            transfer_sd_s: 0.0,
            cpu_available: None,
            queue_wait_s: 1.0,
            transfer_in_s: 0.5,
            compute_s: 2.0,
            transfer_out_s: 0.25,
            compute_source: ComputeSource::Declared,
        };
        assert_eq!(e.total_s(), 3.75);
    }
}
