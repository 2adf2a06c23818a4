//! The gridwise agent daemon: a thin tarpc shell around the pure decision core
//! (`gridwise-sched`). It knows every server, ranks calls, and hears back how they went.

pub mod cli;
pub mod config;
pub mod handler;
pub mod persist;

pub use config::AgentConfig;
pub use handler::AgentHandler;

use gridwise_proto::{AgentApi, wire};
use gridwise_sched::AgentCore;
use std::time::Duration;
use tokio::net::TcpListener;

/// Binds, announces `listening <addr>` on stdout (tools that start the agent read it to learn an
/// ephemeral port), and serves until the process ends.
pub async fn run(cfg: AgentConfig) -> anyhow::Result<()> {
    let core_cfg = cfg.core()?;
    let listener = TcpListener::bind(&cfg.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
    let addr = listener.local_addr()?;
    gridwise_proto::settings::announce(&addr.to_string());
    tracing::info!(%addr, policy = %core_cfg.policy, "agent listening");

    let mut core = AgentCore::new(core_cfg.clone());
    let store = gridwise_store::Store::open(&cfg.data_dir)
        .map_err(|e| anyhow::anyhow!("cannot open the agent's data directory: {e}"))?;
    persist::restore(&mut core, &store)?;
    let handler = AgentHandler::new(core, Some(gridwise_store::Writer::spawn(store)));
    let sweeper = handler.clone();
    let period = (core_cfg.heartbeat_timeout / 4).max(Duration::from_millis(20));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            sweeper.sweep();
        }
    });

    let wire_cfg = wire::WireConfig {
        token: cfg.token.clone(),
        max_frame_bytes: cfg.max_frame_bytes,
        ..wire::WireConfig::default()
    };
    let flusher = handler.clone();
    tokio::select! {
        _ = gridwise_proto::serve_forever!(listener, wire_cfg, cfg.name.clone(), handler) => {}
        _ = shutdown_signal() => {
            tracing::info!("shutting down: writing what was learned to {}", cfg.data_dir.display());
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
