//! The gridwise agent daemon: a thin tarpc shell around the pure decision core
//! (`gridwise-sched`). It knows every server, ranks calls, and hears back how they went.

pub mod cli;
pub mod config;
pub mod handler;
pub mod persist;

pub use config::AgentConfig;
pub use handler::AgentHandler;

use gridwise_proto::AgentApi;
use gridwise_runtime::wire;
use gridwise_runtime::wire::DialConfig;
use gridwise_sched::AgentCore;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Opens the data directory and restores what earlier runs learned, binds, announces
/// `listening <addr>` on stdout (tools that start the agent read it to learn an ephemeral
/// port), and serves until the process ends. Nothing is announced unless the agent can serve.
pub async fn run(cfg: AgentConfig) -> anyhow::Result<()> {
    let core_cfg = cfg.core()?;
    let tls = cfg.tls()?;
    let mut accept = cfg.accept()?;
    accept.tls = tls.clone();
    let mut core = AgentCore::new(core_cfg.clone());
    // Opening and reading the store blocks (a PostgreSQL client runs a runtime of its own,
    // which cannot start inside this one): on a thread of its own, before anything is served.
    let (store, stale) = std::thread::scope(|s| {
        s.spawn(|| {
            let store = cfg.open_store()?;
            let stale = persist::restore(&mut core, &store, core_cfg.server_retention)?;
            anyhow::Ok((store, stale))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("opening the store panicked"))?
    })?;
    let store_path = store.path().to_path_buf();
    let writer = gridwise_store::Writer::spawn(store);
    for name in stale {
        writer.send(gridwise_store::Op::Forget(name));
    }
    let listener = TcpListener::bind(&cfg.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
    let addr = listener.local_addr()?;
    let dial = cfg.dial().map(|d| DialConfig { tls, ..d });
    let metrics = match &cfg.metrics {
        None => None,
        Some(at) => {
            let listener = gridwise_metrics::bind(at).await?;
            tracing::info!(addr = %listener.local_addr()?, "metrics at /metrics");
            Some((listener, gridwise_metrics::AgentMetrics::new()))
        }
    };
    let dashboard = match &cfg.dashboard {
        None => None,
        Some(at) => {
            let listener = gridwise_dashboard::bind(at).await?;
            tracing::info!(addr = %listener.local_addr()?, "dashboard at /");
            Some((listener, gridwise_dashboard::Dashboard::new()))
        }
    };
    let handler = AgentHandler::with_observers(
        core,
        Some(writer),
        dial,
        handler::Observers {
            metrics: metrics.as_ref().map(|(_, m)| m.clone()),
            dashboard: dashboard.as_ref().map(|(_, d)| d.clone()),
        },
    );
    if let Some((listener, d)) = dashboard {
        let h = handler.clone();
        tokio::spawn(async move {
            let snapshot = Arc::new(move || h.dashboard_view());
            if let Err(e) = gridwise_dashboard::serve(listener, d, snapshot).await {
                tracing::error!("the dashboard stopped: {e}");
            }
        });
    }
    if let Some((listener, m)) = metrics {
        let h = handler.clone();
        let encode = move || {
            h.gauge_servers(&m);
            m.encode()
        };
        tokio::spawn(async move {
            if let Err(e) = gridwise_metrics::serve(listener, Arc::new(encode)).await {
                tracing::error!("the metrics endpoint stopped: {e}");
            }
        });
    }
    gridwise_runtime::settings::announce(&addr.to_string());
    tracing::info!(%addr, policy = %core_cfg.policy, "agent listening");
    let sweeper = handler.clone();
    let period = (core_cfg.heartbeat_timeout / 4).max(Duration::from_millis(20));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            sweeper.sweep();
        }
    });

    let flusher = handler.clone();
    tokio::select! {
        _ = gridwise_runtime::serve_forever!(listener, accept, cfg.name.clone(), move |peer: &wire::Peer| handler.for_peer(peer)) => {}
        _ = shutdown_signal() => {
            tracing::info!("shutting down: writing what was learned to {}", store_path.display());
            flusher.flush();
        }
    }
    Ok(())
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
