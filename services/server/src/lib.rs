//! The gridwise server daemon: offers kernels, runs calls in a bounded number of slots,
//! and keeps the agent informed (registration, heartbeats with load, call timings).

pub mod agent_link;
pub mod bench_gate;
pub mod build_policy;
pub mod bulk;
pub mod cli;
pub mod config;
pub mod cpu_groups;
pub mod data;
pub mod handler;
pub mod host;
pub mod kernels;
pub mod link_probe;
pub mod model_manager;
pub mod peers;
pub mod sensors;
pub mod slots;

pub use config::ServerConfig;
pub use handler::ServerHandler;

use anyhow::Context as _;
use gridwise_proto::{Registration, ServerApi};
use gridwise_runtime::wire;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// The services whose times the load `sensors` report does not stretch
/// (`Registration::sleeping`), sorted: those whose kernels sleep, unless a configured trace
/// slows them.
fn sleeping_services(set: &kernels::KernelSet, sensors: &sensors::Sensors) -> Vec<String> {
    if sensors.slows_sleeping_kernels() {
        return Vec::new();
    }
    let mut names: Vec<String> = set
        .values()
        .filter(|k| k.sleeps())
        .map(|k| k.desc().name.clone())
        .collect();
    names.sort();
    names
}

/// The kernels, under the configured load from now on, the sensors that report it, and the
/// described routines not offered.
fn kernels_and_sensors(
    cfg: &ServerConfig,
    extra: &[std::sync::Arc<dyn gridwise_kernels::Kernel>],
) -> anyhow::Result<(
    kernels::KernelSet,
    std::sync::Arc<sensors::Sensors>,
    Vec<gridwise_proto::NotOffered>,
)> {
    let origin = std::time::Instant::now();
    let trace = match &cfg.load {
        Some(l) => Some(std::sync::Arc::new(
            l.trace().map_err(|e| anyhow::anyhow!("load: {e}"))?,
        )),
        None => None,
    };
    let (set, not_offered) = kernels::build(cfg, trace.clone(), origin, extra)?;
    // The share is read for the most threads one of the server's CPU-bound kernels runs.
    let threads = set
        .values()
        .filter(|k| !k.sleeps())
        .map(|k| k.threads())
        .max();
    let sensors = sensors::Sensors::start(trace, origin, threads);
    Ok((set, sensors, not_offered))
}

/// Builds the kernels, calibrates, binds, announces `listening <addr>` on stdout, registers
/// with the agent and serves until the process ends.
pub async fn run(cfg: ServerConfig) -> anyhow::Result<()> {
    run_with(cfg, Vec::new()).await
}

/// [`run`], offering `extra` Rust kernels beside what the config asks for: a program that
/// embeds a server brings its own routines this way.
pub async fn run_with(
    cfg: ServerConfig,
    extra: Vec<std::sync::Arc<dyn gridwise_kernels::Kernel>>,
) -> anyhow::Result<()> {
    cfg.check()?;
    let tls = cfg.tls()?;
    let (set, sensors, not_offered) = kernels_and_sensors(&cfg, &extra)?;
    let listener = TcpListener::bind(&cfg.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
    let bound = listener.local_addr()?;
    let addr = match &cfg.advertise {
        Some(a) => a.clone(),
        None if bound.ip().is_unspecified() => anyhow::bail!(
            "listening on {bound} needs `advertise = \"host:port\"` so that clients can reach this server"
        ),
        None => bound.to_string(),
    };
    // Over TLS a server is who its certificate says: the agent accepts no other name from it.
    let name = match (&cfg.name, &tls) {
        (Some(n), Some(t)) if *n != t.identity.name => anyhow::bail!(
            "name = \"{n}\" but the [tls] certificate is for `{}`: the agent registers a server only under its certificate's name; remove `name` or issue a certificate for `{n}`",
            t.identity.name
        ),
        (Some(n), _) => n.clone(),
        (None, Some(t)) => t.identity.name.clone(),
        (None, None) => format!("server-{}", bound.port()),
    };
    let slots = cfg.slot_count();

    let calibration = if cfg.calibrate {
        let s = set.clone();
        tokio::task::spawn_blocking(move || kernels::calibrate_all(&s)).await?
    } else {
        kernels::Rates::default()
    };
    for (svc, rate) in &calibration.rates {
        tracing::info!(service = %svc, "calibrated at {:.3} Gop/s", rate / 1e9);
    }

    let mut services: Vec<_> = set.values().map(|k| k.desc().clone()).collect();
    services.sort_by(|a, b| a.name.cmp(&b.name));
    let budget = cfg.memory_budget();
    gridwise_proto::value::limit_spare(
        usize::try_from(gridwise_server_core::admission::spare_bytes(budget)).unwrap_or(usize::MAX),
    );

    let (to_agent, inbox) = mpsc::unbounded_channel();
    let dial = wire::DialConfig {
        tls: tls.clone(),
        ..cfg.dial()
    };
    let idle_ttl = Duration::from_secs_f64(cfg.data_idle_ttl_s);
    let remote = handler::RemoteData {
        addr: addr.clone(),
        max_bytes: cfg
            .data_max_bytes
            .unwrap_or_else(|| (host::memory_bytes() / 4).max(1 << 30)),
        idle_ttl,
        wire: dial.clone(),
    };
    let limits = handler::CallLimits {
        budget: wire::MemoryBudget::new(budget),
        max_frame_bytes: cfg.max_frame_bytes as u64,
    };
    let sleeping = sleeping_services(&set, &sensors);
    // Frames still arriving get their own budget: sharing the calls' would let busy calls
    // make every new request fail to arrive. At least one frame of the largest size fits.
    let mut accept = wire::AcceptConfig::new(
        cfg.max_frame_bytes,
        (budget / 4).max(cfg.max_frame_bytes as u64),
    );
    accept.credentials = cfg.credentials();
    accept.tls = tls;
    accept.limits = cfg.limits()?;
    let handler = ServerHandler::new(name.clone(), set, slots, to_agent, remote, limits, sensors)
        .context("starting the slots' threads")?;
    let reg = Registration {
        name: name.clone(),
        instance: handler.instance().to_string(),
        secret: None,
        addr: addr.clone(),
        slots,
        services,
        rates: calibration.rates,
        default_rate: calibration.default_rate,
        memory_bytes: host::memory_bytes(),
        cores: host::cores(),
        memory_budget_bytes: budget,
        max_frame_bytes: cfg.max_frame_bytes as u64,
        sleeping,
        not_offered,
    };
    model_manager::validate(&cfg.models, &handler)?;
    if !cfg.models.is_empty() {
        let (configs, h, dir) = (cfg.models.clone(), handler.clone(), cfg.model_dir.clone());
        std::thread::Builder::new()
            .name("model-builder".into())
            .spawn(move || {
                model_manager::run(configs, h, dir, false, &mut |_| {});
            })?;
    }
    gridwise_runtime::settings::announce(&addr);
    let agents = cfg.agent_addrs();
    tracing::info!(%name, %addr, slots, agents = %agents.join(","), memory_budget_bytes = budget, "server listening");

    handler.set_several_agents(agents.len() > 1);
    let probe = (cfg.link_probe_s > 0.0).then(|| Duration::from_secs_f64(cfg.link_probe_s));
    for (i, (agent, inbox)) in agent_link::fan_out(agents, inbox).into_iter().enumerate() {
        tokio::spawn(agent_link::run(
            agent,
            dial.clone(),
            reg.clone(),
            handler.clone(),
            inbox,
            cfg.report_batch_max,
            // One agent's link runs the probe rounds; what they measure goes to every agent.
            probe.filter(|_| i == 0),
        ));
    }
    tokio::spawn(expire_idle_data(handler.clone(), idle_ttl));
    if let Some(at) = &cfg.metrics {
        let listener = gridwise_metrics::bind(at).await?;
        tracing::info!(addr = %listener.local_addr()?, "metrics at /metrics");
        let m = gridwise_metrics::ServerMetrics::new();
        handler.set_metrics(m.clone());
        let h = handler.clone();
        tokio::spawn(async move {
            let encode = move || {
                let (running, waiting) = h.occupancy();
                m.occupancy(running, waiting);
                let s = h.sensors();
                m.cpu(s.availability_now(), s.cpu_pressure(), s.cpu_quota());
                m.encode()
            };
            if let Err(e) = gridwise_metrics::serve(listener, std::sync::Arc::new(encode)).await {
                tracing::error!("the metrics endpoint stopped: {e}");
            }
        });
    }
    let bulk_handler = handler.clone();
    gridwise_runtime::serve_forever!(
        listener,
        accept,
        name,
        move |peer: &wire::Peer| handler.for_peer(peer),
        bulk: move |conn: wire::Accepted| bulk::serve(bulk_handler.clone(), conn)
    )
    .await;
    Ok(())
}

/// Frees kept values left idle for longer than `idle` (zero: kept values never expire),
/// staged values nobody collected and spare array buffers no call took, checking a few times per limit (at most a minute apart), so
/// a value outlives its last use by at most about 1.25 × its limit.
async fn expire_idle_data(handler: ServerHandler, idle: Duration) {
    let shortest = if idle.is_zero() {
        data::STAGED_IDLE
    } else {
        idle.min(data::STAGED_IDLE)
    };
    let every = (shortest / 4).clamp(Duration::from_millis(50), Duration::from_secs(60));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        gridwise_proto::value::release_idle_spare();
        let (n, bytes) = handler.expire_idle_data(idle);
        if n > 0 {
            tracing::info!(
                values = n,
                bytes,
                idle_s = idle.as_secs_f64(),
                "freed kept values nobody used for data_idle_ttl_s (or staged values nobody collected)"
            );
        }
    }
}

/// Builds every configured model in the foreground — policies ignored, progress on stderr —
/// saves them to `model_dir` and returns (PMM's build-only mode). A later start of the server
/// loads them and sends them to the agent.
pub fn build_models_and_exit(cfg: ServerConfig) -> anyhow::Result<()> {
    let dir = cfg.model_dir.clone().ok_or_else(|| {
        anyhow::anyhow!("--build-models-and-exit needs `model_dir` in the config, so the models outlive this run")
    })?;
    anyhow::ensure!(
        !cfg.models.is_empty(),
        "the config has no [[models]] to build"
    );
    let (set, sensors, _) = kernels_and_sensors(&cfg, &[])?;
    let (to_agent, _inbox) = mpsc::unbounded_channel();
    let remote = handler::RemoteData {
        addr: "build-only".into(),
        max_bytes: 0,
        idle_ttl: Duration::ZERO,
        wire: cfg.dial(),
    };
    let handler = ServerHandler::new(
        "build-only".into(),
        set,
        1,
        to_agent,
        remote,
        handler::CallLimits::unlimited(),
        sensors,
    )
    .context("starting the slots' threads")?;
    model_manager::validate(&cfg.models, &handler)?;
    let bar = indicatif::ProgressBar::new_spinner();
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let results = model_manager::run(
        cfg.models.clone(),
        handler,
        Some(dir.clone()),
        true,
        &mut |p| {
            bar.set_message(format!(
                "{}: {:?}, {} points, {} runs, {:.2} s benchmarked",
                p.service, p.state, p.points, p.runs, p.bench_time_s
            ));
        },
    );
    bar.finish_and_clear();
    let mut failed = 0;
    for r in &results {
        match r {
            Ok(m) => eprintln!(
                "{}: {} points, {} runs, {:.2} s of benchmarks → {}",
                m.service,
                m.points,
                m.runs,
                m.bench_time_s,
                dir.display()
            ),
            Err(e) => {
                failed += 1;
                eprintln!("error: {e:#}");
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} model build(s) failed");
    Ok(())
}
