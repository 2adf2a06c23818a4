//! `gridwise`: talk to a grid (status, call), run the demo and benchmarks, or run a daemon.

use clap::{Parser, Subcommand};
use gridwise_agent::cli::AgentArgs;
use gridwise_bench as bench;
use gridwise_cli::{call, demo, graph, model, status};
use gridwise_client::{Client, ClientConfig};
use gridwise_proto::RankOptions;
use gridwise_server::cli::ServerArgs;
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "gridwise",
    version,
    about = "gridwise: remote calls placed by functional performance models"
)]
struct Cli {
    /// Config file: a client's (TOML, see the README) for the commands that talk to a grid,
    /// the daemon's for `agent` and `server`. Also taken after the command's name.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// How a client command reaches the grid.
#[derive(clap::Args, Clone)]
struct Conn {
    /// The agent's address [default: 127.0.0.1:7000; `bench` starts its own grid without it].
    #[arg(long, env = gridwise_client::AGENT_ENV)]
    agent: Option<String>,
    /// Shared token, if the grid has one (its value never shown in help).
    #[arg(long, env = gridwise_client::TOKEN_ENV, hide_env_values = true)]
    token: Option<String>,
    /// Client config file (TOML, see the README; replaces --agent and --token).
    #[arg(long)]
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Servers, their state, services and queues; with --service and --size, every
    /// candidate's ETC breakdown for such a call.
    Status {
        /// A service to explain a ranking for.
        #[arg(long)]
        service: Option<String>,
        /// Size parameters for --service, e.g. m=1000,n=1000,k=1000.
        #[arg(long, requires = "service")]
        size: Option<String>,
        /// Ranking policy to explain (default: the agent's).
        #[arg(long)]
        policy: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Network links the servers measured to each other (latency, bandwidth).
    Links {
        /// One JSON array, an object per link.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Services offered on the grid, with their signatures.
    Services {
        /// Every argument, size, work and memory formula too, and a warning for each routine
        /// a server describes but does not offer.
        #[arg(long)]
        describe: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// One remote call: `gridwise call add 41` prints 42. Arrays as JSON or `rand`.
    Call {
        /// The service to call (`gridwise services` lists them).
        service: String,
        /// Its IN and INOUT arguments in order: numbers, strings, JSON arrays or `rand`.
        #[arg(allow_negative_numbers = true)]
        args: Vec<String>,
        /// Run on this server (by name) instead of the agent's choice.
        #[arg(long)]
        server: Option<String>,
        /// One JSON object with outputs, server and timing.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// One service over N units cut into parts by the agent — which servers, how many units
    /// each — then run (generated data) and set beside the plan: `gridwise divide solve 4000
    /// --unit n`.
    Divide {
        /// The service (its size parameter --unit counts units).
        service: String,
        /// Units in the whole job.
        units: u64,
        /// The size parameter a part's units go in.
        #[arg(long, value_name = "PARAM")]
        unit: String,
        /// The other size parameters, e.g. cols=1000.
        #[arg(long)]
        size: Option<String>,
        /// How to split: fpm (default), lp, constant-speed, even.
        #[arg(long)]
        policy: Option<String>,
        /// Exactly this many servers (the best ones).
        #[arg(long, conflicts_with = "all")]
        servers: Option<u32>,
        /// Every server offering the service.
        #[arg(long)]
        all: bool,
        /// Run the job this many times, planning each from what the others taught.
        #[arg(long, default_value_t = 1)]
        iterations: usize,
        /// Bytes each part exchanges with its neighbours per iteration (a slab job).
        #[arg(long)]
        comm_bytes: Option<u64>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        /// Also draw the last iteration, predicted above actual (.svg or .png).
        #[arg(long, value_name = "OUT")]
        gantt: Option<PathBuf>,
        #[command(flatten)]
        conn: Conn,
    },
    /// The main job: an agent and emulated heterogeneous servers on loopback, a mixed batch.
    Demo,
    /// Benchmarks (JSON with --json).
    Bench {
        #[command(subcommand)]
        which: BenchCmd,
    },
    /// Groups of calls with data dependencies, from a JSON graph file.
    Graph {
        #[command(subcommand)]
        which: GraphCmd,
    },
    /// Charts of benchmark output.
    Plot {
        #[command(subcommand)]
        which: PlotCmd,
    },
    /// Performance models: build progress, points, export, plots.
    Model {
        #[command(subcommand)]
        which: ModelCmd,
    },
    /// Simulates a platform far larger than this machine (servers with speed functions, links,
    /// load traces; see examples/sim/README.md) under the mapping policies, in virtual time.
    Sim(gridwise_cli::sim::SimArgs),
    /// A grid CA and certificates for mutual TLS (see "Securing a grid" in the README).
    Certs {
        #[command(subcommand)]
        which: CertsCmd,
    },
    /// A grid of many hosts on this machine: network namespaces, links shaped with tc,
    /// partitions on a schedule (needs root and iproute2; see examples/testbeds/).
    Testbed {
        #[command(subcommand)]
        what: TestbedCmd,
    },
    /// Run the agent daemon (same as gridwise-agent).
    Agent(AgentArgs),
    /// Run a server daemon (same as gridwise-server).
    Server(ServerArgs),
}

#[derive(Subcommand)]
enum TestbedCmd {
    /// Builds the hosts, starts the agent and servers on theirs, plays the faults; Ctrl-C
    /// (or --for) takes it all down.
    Up {
        file: PathBuf,
        /// Seconds to stay up, then take everything down.
        #[arg(long = "for")]
        for_s: Option<f64>,
        /// Another name than the file's (namespaces are named after it).
        #[arg(long)]
        name: Option<String>,
    },
    /// Removes what a bed of this topology left behind.
    Down {
        file: PathBuf,
        #[arg(long)]
        name: Option<String>,
    },
    /// Which of its hosts exist, what runs on them, each host link's rate or cut.
    Status {
        file: PathBuf,
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(Subcommand)]
enum CertsCmd {
    /// Creates the grid's CA (ca.pem, ca.key) in DIR.
    Init {
        dir: PathBuf,
        /// The grid's name, in the CA's common name.
        #[arg(long, default_value = "gridwise")]
        grid: String,
        /// Days the CA stays valid.
        #[arg(long, default_value_t = 3650)]
        days: u32,
    },
    /// Issues NAME.pem and NAME.key, signed by the CA in DIR.
    Issue {
        dir: PathBuf,
        /// client, server or agent: what the holder may do.
        #[arg(long)]
        role: String,
        /// The holder's name (a server registers under it; a client owns its work by it).
        #[arg(long)]
        name: String,
        /// A name or IP address the holder is dialled at (agent and servers; repeat for more).
        #[arg(long = "host")]
        hosts: Vec<String>,
        /// Days the certificate stays valid.
        #[arg(long, default_value_t = 365)]
        days: u32,
    },
}

#[derive(Subcommand)]
enum PlotCmd {
    /// Every call `bench predict --csv` timed: the predictor's 90% interval, its mean and the
    /// actual time, one panel per load.
    Predictions {
        /// The CSV file `gridwise bench predict --csv FILE` wrote.
        csv: PathBuf,
        /// Output image (.svg or .png).
        #[arg(long, default_value = "predictions.svg")]
        out: PathBuf,
        /// Which predictor's estimates to draw: band, forecast, regression, auto.
        #[arg(long, default_value = "forecast")]
        predictor: String,
    },
}

#[derive(Subcommand)]
enum GraphCmd {
    /// Predicts a graph file's makespan on the live grid: maps it with the agent's estimates,
    /// replays the mapping, prints the makespan, bounds and per-server timeline.
    ///
    /// The file: {"policy": "heft", "tasks": [{"name": "a", "service": "dgemm", "args": [500,
    /// 500, 500, "rand", "rand"]}, {"name": "b", "service": "dgemm", "args": [500, 500, 500,
    /// {"from": "a", "output": 0}, "rand"]}], "outputs": ["b"]}. Arguments are the words
    /// `gridwise call` takes; {"from": TASK, "output": K} is the K-th output of an earlier task.
    Predict(GraphFileArgs),
    /// Runs a graph file on the live grid: the agent maps the whole graph, outputs move server
    /// to server, only the file's `outputs` (else the calls nothing uses) come back; prints
    /// them with the predicted and actual timelines (`--gantt`: predicted above actual). Same
    /// file format as `graph predict`.
    Run(GraphRunArgs),
}

/// What `graph run` takes.
#[derive(clap::Args)]
struct GraphRunArgs {
    #[command(flatten)]
    graph: GraphFileArgs,
    /// Also write every output that came back into this folder, as TASK.K.npy (arrays, NumPy's
    /// format) or TASK.K.txt (numbers and strings).
    #[arg(long, value_name = "DIR")]
    save: Option<PathBuf>,
}

/// What `graph predict` and `graph run` take.
#[derive(clap::Args)]
struct GraphFileArgs {
    /// The graph file (JSON).
    file: PathBuf,
    /// Mapping policy: best-of, heft, peft, min-min, mct, sufferage, lp, round-robin, constant-speed
    /// [default: the file's, else lp for independent calls and heft otherwise].
    #[arg(long)]
    policy: Option<String>,
    /// One JSON object.
    #[arg(long)]
    json: bool,
    /// Also draw the timeline as a Gantt chart (.svg or .png).
    #[arg(long, value_name = "OUT")]
    gantt: Option<PathBuf>,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Subcommand)]
enum ModelCmd {
    /// Every model the agent holds, with its build progress on the server.
    Status {
        /// One JSON array, an object per model.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// One model's points.
    Show {
        /// The server, by the name `gridwise status` lists.
        #[arg(long)]
        server: String,
        /// A service that server has a model of.
        #[arg(long)]
        service: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Draws models (speed against size, band, samples, construction intervals) to SVG or PNG.
    Plot {
        /// Server(s); repeat to overlay several (default: every server modelling the service).
        #[arg(long)]
        server: Vec<String>,
        /// Service(s): one for all servers, or one per --server.
        #[arg(long, required = true)]
        service: Vec<String>,
        /// Output file: .svg or .png.
        #[arg(short, long)]
        output: PathBuf,
        /// Fix size parameters of multi-parameter models, e.g. --slice n=3000 (repeatable).
        #[arg(long)]
        slice: Vec<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// One model (or, without --server/--service, every model) as JSON.
    Export {
        /// With --service, that server's model only (give both or neither).
        #[arg(long)]
        server: Option<String>,
        /// With --server, that service's model only.
        #[arg(long)]
        service: Option<String>,
        /// JSON (the only format; accepted for symmetry with other commands).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Decision speed in-process: HEFT on 10,000 tasks × 100 servers, MCT ranking over 1,000.
    Mapping {
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Each kind of kernel (built-in, library routine in a worker, command, Python function):
    /// the overhead of a call that does nothing and the speed of a dgemm against the system
    /// BLAS called in this process.
    Kernels {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Side of the dgemm.
        #[arg(long, default_value_t = 1000)]
        n: usize,
        /// No-op calls timed per kind (a tenth of them for commands).
        #[arg(long, default_value_t = 2000)]
        calls: usize,
        /// The Python for the Python kernels (numpy must be importable there).
        #[arg(long, default_value = "python3")]
        python: String,
        /// The system BLAS the library kernels call.
        #[arg(long, default_value = "libblas.so.3")]
        blas: String,
    },
    /// Divisible jobs over 16 emulated servers in 4 classes (one pages, some loaded): every
    /// policy at five sizes against an offline oracle with the true speeds (a few minutes).
    Divide {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Three sizes instead of five.
        #[arg(long)]
        quick: bool,
    },
    /// Link-dependent features over a test bed of namespaces with shaped links (needs root).
    Testbed {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Experiments to run, comma-separated (default: all): links, bulk, graph, slab,
        /// partitions.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
    /// Large arrays client → server, server → server and server → client (16, 64, 256 MiB)
    /// against a raw loopback TCP copy in the same run, with both ends' peak RSS.
    Transfer {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Sizes in MiB, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = bench::transfer::SIZES_MIB)]
        sizes_mib: Vec<u64>,
    },
    /// Model construction: cost and accuracy of GBBP, uniform-20 and naive builds.
    Models {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Leave out the real dgemm (timed on this machine; takes tens of seconds).
        #[arg(long)]
        no_dgemm: bool,
    },
    /// Scheduling quality for real: emulated servers on loopback learn their models, then
    /// each scenario's graph runs three times per policy, the median reported (hydropad,
    /// crossing, cholesky; takes minutes).
    Schedule {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Run only this scenario (repeatable): hydropad, crossing, cholesky.
        #[arg(long)]
        scenario: Vec<String>,
        /// Small versions of the scenarios (a smoke test, not the benchmark).
        #[arg(long)]
        quick: bool,
        /// Runs of each policy per size, in rounds of changing order; each line reports the
        /// median run (one run's makespan varies by 0.5-1% on a quiet 2-core VM, more than
        /// equal plans differ). Default: 3, or 1 with --quick.
        #[arg(long)]
        repeat: Option<usize>,
    },
    /// More than one agent: bags of calls and task graphs from clients spread over 1, 2 and 3
    /// agents sharing a PostgreSQL store (started by the bench from the system's packages), the
    /// agents' CPU per call on SQLite and PostgreSQL, and an agent SIGKILLed mid-batch with 2
    /// and 3 agents (about ten minutes).
    Agents {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Clients running at once.
        #[arg(long, default_value_t = 6)]
        clients: usize,
        /// Calls per client in each bag.
        #[arg(long, default_value_t = 400)]
        calls: usize,
        /// Graphs of 12 calls per client in each DAG run.
        #[arg(long, default_value_t = 20)]
        graphs: usize,
        /// Calls per client in each kill run.
        #[arg(long, default_value_t = 500)]
        kill_calls: usize,
        /// Rows to run, comma-separated (default: all): bag (with the DAG rows), kill, cut,
        /// sim.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// The servers' heartbeat intervals the sim rows are run at, s, comma-separated (each
        /// adds about five minutes).
        #[arg(long, value_delimiter = ',', default_value = "1")]
        heartbeats: Vec<f64>,
    },
    /// Fault tolerance: 10,000 mixed calls on 3 servers while one server is killed and
    /// restarted, one is stopped for 20 s and the agent is killed and restarted; then an
    /// adversarial phase on a fresh grid: 100 ghost servers claiming 10¹⁵ op/s and a second
    /// process under a frozen server's name (about two minutes).
    Faults {
        /// One JSON object.
        #[arg(long)]
        json: bool,
        /// Calls in the batch.
        #[arg(long, default_value_t = 10_000)]
        calls: usize,
        /// Calls in flight at once.
        #[arg(long, default_value_t = 32)]
        window: usize,
        /// How long the frozen server stays stopped, s.
        #[arg(long, default_value_t = 20.0)]
        freeze_s: f64,
        /// Calls in the adversarial phase (0 skips it).
        #[arg(long, default_value_t = 5_000)]
        adversarial_calls: usize,
    },
    /// Predictions on shared machines: every predictor's error and interval coverage on
    /// emulated servers under load traces and on real dgemm servers (built-in and system
    /// BLAS) beside busy processes, in the bench's session, as daemons in their own, and in a
    /// cgroup of their own, then bag and DAG makespans under mct-blind, mct and conservative (about 15
    /// minutes; --csv also writes every call's prediction and actual time for `gridwise plot
    /// predictions`).
    Predict {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Calls timed per load.
        #[arg(long, default_value_t = 60)]
        calls: usize,
        /// Runs of each scheduling workload (each with other traces).
        #[arg(long, default_value_t = 8)]
        runs: usize,
        /// Also write every timed call (load, predictor, predicted mean, 90% interval, actual)
        /// to this CSV file.
        #[arg(long, value_name = "FILE")]
        csv: Option<PathBuf>,
        /// Run only these parts (comma-separated): dedicated, random, steady, real, real-daemon,
        /// real-cgroup, schedule.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
    /// Call overhead of the full path for the no-op `add`.
    Rpc {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Synchronous calls to time.
        #[arg(long, default_value_t = 5000)]
        calls: usize,
        /// Asynchronous calls for the throughput.
        #[arg(long, default_value_t = 50_000)]
        async_calls: usize,
        /// Asynchronous sessions in flight.
        #[arg(long, default_value_t = 512)]
        window: usize,
        /// Clients to measure, comma-separated: rust, c (builds examples/c against
        /// libgridwise), python (needs `pip install ./python`).
        #[arg(long, value_delimiter = ',', default_value = "rust")]
        client: Vec<String>,
        /// The Python interpreter for `--client python`.
        #[arg(long, default_value = "python3")]
        python: String,
        /// The Rust client on a plaintext grid, a second plaintext one (the control) and a
        /// mutual-TLS grid in the same run, calls alternating, and the ratios (`rpc_tls`,
        /// `rpc_plain_again`).
        #[arg(long)]
        tls: bool,
        /// The Rust client on a plain grid, on one whose agent serves the dashboard with no page
        /// open, and on one with this browser (e.g. chromium) showing it, with the ratios.
        #[arg(long, value_name = "BROWSER")]
        dashboard: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
}

/// One benchmark line: as is for `--json`, else pretty-printed.
fn print_line(json: bool, line: &serde_json::Value) {
    if json {
        println!("{line}");
    } else {
        println!("{}", serde_json::to_string_pretty(line).unwrap_or_default());
    }
}

/// A client as `conn` says, or as the config file given before the command (`top`) does.
fn client(conn: &Conn, top: Option<&Path>) -> anyhow::Result<Client> {
    let cfg = match conn.config.as_deref().or(top) {
        Some(p) => ClientConfig::from_file(p)?,
        None => {
            let addr = conn
                .agent
                .clone()
                .unwrap_or_else(|| "127.0.0.1:7000".into());
            let mut c = ClientConfig::with_agent(addr);
            c.token = conn.token.clone();
            c
        }
    };
    Ok(Client::connect(cfg)?)
}

fn main() {
    // `gridwise server` starts library workers as this program.
    gridwise_routines::run_if_worker();
    let cli = Cli::parse();
    quiet_when_stdout_closes();
    // Daemons always log; any other command only when asked (`RUST_LOG=gridwise_client=debug
    // gridwise bench …` shows where each of a benchmark's calls went, and why).
    if std::env::var_os("RUST_LOG").is_some() {
        gridwise_runtime::settings::init_logging();
    }
    if let Err(e) = run(&cli) {
        // One readable line (with its causes), not a backtrace: these are user-facing errors.
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// A command whose output is piped into `head` stops quietly when the pipe closes, like any
/// Unix tool. SIGPIPE itself stays ignored (Rust's default), in every command: a client's
/// agent or server that goes away mid-write must fail the call over, not kill the process
/// (with SIGPIPE restored, `bench faults` died when it killed the agent, 1 run in 6). What
/// ends the command instead is the print that met the closed pipe.
fn quiet_when_stdout_closes() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let top = cli.config.as_deref();
    if top.is_some() && !takes_config(&cli.command) {
        anyhow::bail!(
            "--config names a client's or a daemon's config file; this command takes none \
             (it starts what it needs itself, or works on files)"
        );
    }
    match &cli.command {
        Command::Testbed { what } => match what {
            TestbedCmd::Up { file, for_s, name } => {
                gridwise_cli::testbed::up(file, name.as_deref(), *for_s)
            }
            TestbedCmd::Down { file, name } => gridwise_cli::testbed::down(file, name.as_deref()),
            TestbedCmd::Status { file, name } => {
                gridwise_cli::testbed::status(file, name.as_deref())
            }
        },
        Command::Agent(a) => {
            gridwise_runtime::settings::init_logging();
            let mut a = a.clone();
            a.config = a.config.or(top.map(Path::to_path_buf));
            a.run_blocking()
        }
        Command::Server(s) => {
            gridwise_runtime::settings::init_logging();
            let mut s = s.clone();
            s.config = s.config.or(top.map(Path::to_path_buf));
            s.run_blocking()
        }
        Command::Status {
            service,
            size,
            policy,
            json,
            conn,
        } => run_status(
            service.as_deref(),
            size.as_deref(),
            policy.as_deref(),
            *json,
            conn,
            top,
        ),
        Command::Services { describe, conn } => {
            status::print_services(&client(conn, top)?, *describe)
        }
        Command::Call {
            service,
            args,
            server,
            json,
            conn,
        } => {
            let c = client(conn, top)?;
            call::run(&c, service, args, server.as_deref(), *json)
        }
        Command::Graph { which } => match which {
            GraphCmd::Predict(a) => graph::predict::run(
                &a.file,
                a.policy.as_deref(),
                a.json,
                a.gantt.as_deref(),
                || client(&a.conn, top),
            ),
            GraphCmd::Run(a) => graph::run::run(
                &a.graph.file,
                a.graph.policy.as_deref(),
                a.graph.json,
                a.graph.gantt.as_deref(),
                a.save.as_deref(),
                || client(&a.graph.conn, top),
            ),
        },
        Command::Divide {
            service,
            units,
            unit,
            size,
            policy,
            servers,
            all,
            iterations,
            comm_bytes,
            json,
            gantt,
            conn,
        } => gridwise_cli::divide::run(
            &gridwise_cli::divide::DivideArgs {
                service,
                units: *units,
                unit_param: unit,
                sizes: size.as_deref(),
                policy: policy.as_deref(),
                servers: *servers,
                all: *all,
                iterations: *iterations,
                comm_bytes: *comm_bytes,
                json: *json,
                gantt: gantt.as_deref(),
            },
            client(conn, top)?,
        ),
        Command::Sim(args) => gridwise_cli::sim::run(args.clone()),
        Command::Plot { which } => match which {
            PlotCmd::Predictions {
                csv,
                out,
                predictor,
            } => {
                let calls = gridwise_charts::predictions::read_csv(csv)?;
                gridwise_charts::predictions::plot_predictions(&calls, predictor, out)?;
                println!("wrote {}", out.display());
                Ok(())
            }
        },
        Command::Model { which } => run_model(which, top),
        Command::Links { json, conn } => status::print_links(&client(conn, top)?, *json),
        Command::Demo => demo::run(),
        Command::Certs { which } => match which {
            CertsCmd::Init { dir, grid, days } => gridwise_cli::certs::init(dir, grid, *days),
            CertsCmd::Issue {
                dir,
                role,
                name,
                hosts,
                days,
            } => gridwise_cli::certs::issue(dir, role, name, hosts, *days),
        },
        Command::Bench { which } => run_bench(which),
    }
}

/// Whether `--config` before the command means anything to it: the commands that talk to a
/// grid, and the daemons.
fn takes_config(command: &Command) -> bool {
    !matches!(
        command,
        Command::Demo
            | Command::Bench { .. }
            | Command::Plot { .. }
            | Command::Sim(_)
            | Command::Certs { .. }
            | Command::Testbed { .. }
    )
}

/// `gridwise status`: the grid, or with a service how the agent would rank a call of it.
fn run_status(
    service: Option<&str>,
    size: Option<&str>,
    policy: Option<&str>,
    json: bool,
    conn: &Conn,
    top: Option<&Path>,
) -> anyhow::Result<()> {
    let c = client(conn, top)?;
    let Some(svc) = service else {
        return status::print_status(&c, json);
    };
    let sizes = gridwise_graphfile::parse_sizes(size.unwrap_or(""))?;
    let policy = policy
        .map(str::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let opts = RankOptions {
        load_model: None,
        model_family: None,
        pin_server: None,
        policy,
    };
    status::print_explain(&c, svc, &sizes, opts, json)
}

/// `gridwise model …`: the servers' performance models.
fn run_model(which: &ModelCmd, top: Option<&Path>) -> anyhow::Result<()> {
    match which {
        ModelCmd::Status { json, conn } => model::print_status(&client(conn, top)?, *json),
        ModelCmd::Show {
            server,
            service,
            conn,
        } => model::print_show(&client(conn, top)?, server, service),
        ModelCmd::Plot {
            server,
            service,
            output,
            slice,
            conn,
        } => model::plot(&client(conn, top)?, server, service, output, slice),
        ModelCmd::Export {
            server,
            service,
            json: _,
            conn,
        } => model::export(&client(conn, top)?, server.as_deref(), service.as_deref()),
    }
}

/// `gridwise bench …`: each benchmark prints its JSON lines (pretty without `--json`).
fn run_bench(which: &BenchCmd) -> anyhow::Result<()> {
    match which {
        BenchCmd::Mapping { json } => {
            print_line(*json, &bench::mapping::run()?);
            Ok(())
        }
        BenchCmd::Schedule {
            json,
            scenario,
            quick,
            repeat,
        } => bench::schedule::run(
            scenario,
            *quick,
            repeat.unwrap_or(if *quick { 1 } else { 3 }),
            &mut |line| print_line(*json, &line),
        ),
        BenchCmd::Kernels {
            json,
            n,
            calls,
            python,
            blas,
        } => bench::kernels::run(
            &bench::kernels::KernelsBench {
                n: *n,
                calls: *calls,
                python: python.clone(),
                blas: blas.clone(),
            },
            &mut |line| print_line(*json, &line),
        ),
        BenchCmd::Divide { json, quick } => {
            bench::divide::run(&bench::divide::DivideBench { quick: *quick }, &mut |line| {
                print_line(*json, &line)
            })
        }
        BenchCmd::Testbed { json, only } => bench::testbed::run(
            &bench::testbed::TestbedBench { only: only.clone() },
            &mut |line| print_line(*json, &line),
        ),
        BenchCmd::Transfer { json, sizes_mib } => bench::transfer::run(
            &bench::transfer::TransferBench {
                sizes_mib: sizes_mib.clone(),
            },
            &mut |line| print_line(*json, &line),
        ),
        BenchCmd::Models { json, no_dgemm } => {
            bench::models::run(!*no_dgemm, &mut |line| print_line(*json, &line))
        }
        BenchCmd::Predict {
            json,
            calls,
            runs,
            csv,
            only,
        } => bench::predict::run(
            &bench::predict::PredictBench {
                calls: *calls,
                runs: *runs,
                csv: csv.clone(),
                only: only.clone(),
            },
            &mut |line| print_line(*json, &line),
        ),
        BenchCmd::Agents {
            json,
            clients,
            calls,
            graphs,
            kill_calls,
            only,
            heartbeats,
        } => bench::agents::run(
            &bench::agents::AgentsBench {
                clients: *clients,
                calls: *calls,
                graphs: *graphs,
                kill_calls: *kill_calls,
                only: only.clone(),
                heartbeats: heartbeats.clone(),
            },
            &mut |line| print_line(*json, &line),
        ),
        BenchCmd::Faults {
            json,
            calls,
            window,
            freeze_s,
            adversarial_calls,
        } => {
            let out = bench::faults::run_faults(&bench::faults::FaultsBench {
                calls: *calls,
                window: *window,
                adversarial_calls: *adversarial_calls,
                freeze: std::time::Duration::try_from_secs_f64(*freeze_s)
                    .map_err(|_| anyhow::anyhow!("--freeze-s must be a number of seconds ≥ 0"))?,
            })?;
            print_line(*json, &out);
            Ok(())
        }
        BenchCmd::Rpc {
            json,
            calls,
            async_calls,
            window,
            client,
            python,
            tls,
            dashboard,
            conn,
        } => {
            let lines = bench::rpc::run_rpc(&bench::rpc::RpcBench {
                tls: *tls,
                dashboard_browser: dashboard.clone(),
                agent: conn.agent.clone(),
                token: conn.token.clone(),
                sync_calls: *calls,
                async_calls: *async_calls,
                window: *window,
                clients: client.clone(),
                python: python.clone(),
            })?;
            for out in lines {
                print_line(*json, &out);
            }
            Ok(())
        }
    }
}
