//! The server's kernel set, built from its config, and the start-up calibration.

use crate::ServerConfig;
use gridwise_kernels::{Kernel, LoadTrace, builtin, calibrate};
use gridwise_proto::NotOffered;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Kernels by service name: built-ins and emulated services, no name twice.
pub type KernelSet = HashMap<String, Arc<dyn Kernel>>;

/// Builds the kernels the config asks for — built-ins, emulated ones under `load` (its time 0
/// at `origin`), the owner's routines from description files — and the `extra` ones an
/// embedding program brings; with them, the described routines it does not offer, each
/// logged as a warning.
pub fn build(
    cfg: &ServerConfig,
    load: Option<Arc<LoadTrace>>,
    origin: Instant,
    extra: &[Arc<dyn Kernel>],
) -> anyhow::Result<(KernelSet, Vec<NotOffered>)> {
    let mut set = KernelSet::new();
    let gridwise_routines::Offered {
        kernels: routines,
        not_offered,
    } = gridwise_routines::kernels(&gridwise_routines::Routines {
        services: &cfg.services,
        library: &cfg.library,
        python: &cfg.python,
        command: &cfg.command,
        worker_program: cfg.worker_program.as_deref(),
        threads: Some(cfg.kernel_threads()),
    })
    .map_err(anyhow::Error::msg)?;
    for n in &not_offered {
        tracing::warn!(service = %n.service, file = %n.file, "described but not offered: {}", n.why);
    }
    for k in routines.into_iter().chain(extra.iter().cloned()) {
        let name = k.desc().name.clone();
        k.desc()
            .validate()
            .map_err(|e| anyhow::anyhow!("service `{name}`: {e}"))?;
        anyhow::ensure!(
            !set.contains_key(&name),
            "service `{name}` is offered twice (by the routines or the embedding program)"
        );
        set.insert(name, k);
    }
    for name in &cfg.builtins {
        let k = builtin(name).ok_or_else(|| {
            anyhow::anyhow!(
                "unknown built-in service `{name}` in `builtins`: choose from {}, {}",
                gridwise_kernels::BUILTIN_NAMES.join(", "),
                gridwise_kernels::TRANSFER_NAMES.join(", ")
            )
        })?;
        anyhow::ensure!(
            !set.contains_key(name),
            "service `{name}` is both a built-in and one of this server's own routines"
        );
        set.insert(name.clone(), k);
    }
    for spec in &cfg.emulated {
        let mut k = spec
            .build()
            .map_err(|e| anyhow::anyhow!("emulated service `{}`: {e}", spec.name))?;
        if let Some(trace) = &load {
            k = k.with_load(trace.clone(), origin);
        }
        anyhow::ensure!(
            !set.contains_key(&spec.name),
            "service `{}` is declared twice (emulated names must differ from built-ins and each other)",
            spec.name
        );
        set.insert(spec.name.clone(), Arc::new(k));
    }
    anyhow::ensure!(
        !set.is_empty(),
        "the server offers no service: set `builtins`, add `[[emulated]]` services or routines of its own (`services` with `[[library]]`, `[[python]]` or `[[command]]`)"
    );
    Ok((set, not_offered))
}

/// Rates measured at start-up.
#[derive(Debug, Default, Clone)]
pub struct Rates {
    /// Operations/s per service that could be calibrated.
    pub rates: Vec<(String, f64)>,
    /// Operations/s of a dgemm run: the server's rate for services without their own.
    pub default_rate: f64,
}

/// Calibrates every kernel that can be (a few short runs each), and dgemm for the default rate.
pub fn calibrate_all(set: &KernelSet) -> Rates {
    const REPEATS: usize = 3;
    let mut rates: Vec<(String, f64)> = set
        .iter()
        .filter_map(|(name, k)| calibrate(k.as_ref(), REPEATS).map(|c| (name.clone(), c.rate)))
        .collect();
    rates.sort_by(|a, b| a.0.cmp(&b.0));
    let default_rate = match rates.iter().find(|(n, _)| n == "dgemm") {
        Some((_, r)) => *r,
        None => builtin("dgemm")
            .and_then(|k| calibrate(k.as_ref(), REPEATS))
            .map(|c| c.rate)
            .unwrap_or(0.0),
    };
    Rates {
        rates,
        default_rate,
    }
}
