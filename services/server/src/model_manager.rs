//! The server's model manager (PMM's role, seed 003 ch. 4 and App. A): builds each configured
//! model in the background — highest priority first, only when its policy allows, yielding to
//! real calls — streams every measured point to the agent, and keeps finished models in the
//! model directory so a restarted server does not measure them again.

use crate::build_policy::{BuildPolicy, Conditions};
use crate::handler::ServerHandler;
use gridwise_fpm::build::{Bench, BenchError, BuildReport, Measurement, Observer, Progress, build};
use gridwise_fpm::model::Fpm;
use gridwise_fpm::spec::BuildSpec;
use gridwise_fpm::stats::SpeedStats;
use gridwise_kernels::{Kernel, KernelCtx, KernelError, inputs_for_sizes};
use gridwise_proto::{
    BuildInterval, BuildState, ModelPoint, ModelProgress, PointSource, PointStats,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One `[[models]]` entry of the server config.
#[derive(Clone, Debug, Deserialize)]
pub struct ModelConfig {
    /// A service this server offers, with a complexity ([`validate`] checks both).
    pub service: String,
    /// Higher is built first.
    #[serde(default)]
    pub priority: i32,
    /// When benchmarks may run.
    #[serde(default)]
    pub policy: BuildPolicy,
    /// What to measure and how (method, parameters, sampling, constraint).
    #[serde(flatten)]
    pub spec: BuildSpec,
    // Every key the named fields above did not take (the build settings' keys among them, as
    // a flattened struct does not consume what it reads): serde cannot refuse unknown keys once
    // a struct is flattened, so `unknown_keys` does, by name.
    #[serde(flatten)]
    rest: std::collections::BTreeMap<String, serde_json::Value>,
}

impl ModelConfig {
    /// Keys that are neither the server's nor the build settings' (typos, mostly).
    pub fn unknown_keys(&self) -> Vec<&str> {
        self.rest
            .keys()
            .map(String::as_str)
            .filter(|k| !BuildSpec::KEYS.contains(k))
            .collect()
    }
}

/// A model as kept in the model directory.
#[derive(Debug, Serialize, Deserialize)]
pub struct SavedModel {
    pub service: String,
    /// The build settings it was made with (a changed config means a new build).
    pub spec: BuildSpec,
    pub fpm: Fpm,
    /// `points`, `runs` and `bench_time_s` are the original build's: loading measures nothing.
    pub points: usize,
    pub runs: usize,
    /// Benchmark time, s.
    pub bench_time_s: f64,
}

fn intervals(fpm: &Fpm) -> Vec<BuildInterval> {
    fpm.intervals()
        .iter()
        .cloned()
        .map(BuildInterval::from)
        .collect()
}

/// Checks the configs against the server's services before anything starts.
pub fn validate(configs: &[ModelConfig], handler: &ServerHandler) -> anyhow::Result<()> {
    for c in configs {
        let keys = c.unknown_keys();
        if !keys.is_empty() {
            anyhow::bail!(
                "[[models]] `{}`: unknown key(s) {}; known keys: service, priority, policy, {}",
                c.service,
                keys.join(", "),
                BuildSpec::KEYS.join(", ")
            );
        }
        let k = handler.kernel(&c.service).ok_or_else(|| {
            anyhow::anyhow!(
                "[[models]] names `{}`, which this server does not offer",
                c.service
            )
        })?;
        let desc = k.desc();
        anyhow::ensure!(
            desc.complexity.is_some(),
            "[[models]] `{}`: the service has no complexity, so speed cannot be measured",
            c.service
        );
        let names: Vec<&str> = c.spec.params.iter().map(|p| p.name.as_str()).collect();
        let want: Vec<&str> = desc.size_params.iter().map(String::as_str).collect();
        anyhow::ensure!(
            names == want,
            "[[models]] `{}`: params must be the service's size parameters in order ({}), not ({})",
            c.service,
            want.join(", "),
            names.join(", ")
        );
        c.spec
            .validate()
            .map_err(|e| anyhow::anyhow!("[[models]] `{}`: {e}", c.service))?;
    }
    Ok(())
}

/// Builds (or loads) every configured model, in priority order, on the calling thread.
/// `foreground` ignores the policies (the build-only mode) and reports progress to `on_progress`.
pub fn run(
    mut configs: Vec<ModelConfig>,
    handler: ServerHandler,
    model_dir: Option<PathBuf>,
    foreground: bool,
    on_progress: &mut dyn FnMut(&ModelProgress),
) -> Vec<anyhow::Result<SavedModel>> {
    configs.sort_by_key(|c| std::cmp::Reverse(c.priority));
    for c in &configs {
        handler.set_progress(progress(c, BuildState::Queued, None));
    }
    let mut out = Vec::new();
    for c in configs {
        let r = build_one(&c, &handler, model_dir.as_deref(), foreground, on_progress);
        if let Err(e) = &r {
            tracing::warn!(service = %c.service, "model build failed: {e:#}");
            let p = progress(&c, BuildState::Failed(format!("{e:#}")), None);
            on_progress(&p);
            handler.set_progress(p);
        }
        out.push(r);
    }
    out
}

fn progress(c: &ModelConfig, state: BuildState, p: Option<&Progress>) -> ModelProgress {
    ModelProgress {
        service: c.service.clone(),
        method: c.spec.method.to_string(),
        state,
        points: p.map(|p| p.points as u32).unwrap_or(0),
        runs: p.map(|p| p.runs as u32).unwrap_or(0),
        bench_time_s: p.map(|p| p.bench_time_s).unwrap_or(0.0),
        intervals: Vec::new(),
    }
}

fn model_path(dir: &Path, service: &str) -> PathBuf {
    dir.join(format!("{service}.model.json"))
}

fn load_saved(dir: &Path, c: &ModelConfig) -> Option<SavedModel> {
    let text = std::fs::read_to_string(model_path(dir, &c.service)).ok()?;
    match serde_json::from_str::<SavedModel>(&text) {
        Ok(m) if m.spec == c.spec => Some(m),
        Ok(_) => {
            tracing::info!(service = %c.service, "build settings changed: building the model again");
            None
        }
        Err(e) => {
            tracing::warn!(service = %c.service, "ignoring an unreadable saved model ({e}); building again");
            None
        }
    }
}

fn save(dir: &Path, m: &SavedModel) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create model_dir {}: {e}", dir.display()))?;
    let path = model_path(dir, &m.service);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(m)?)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tmp.display()))?;
    // Renamed into place so a crash never leaves half a model behind.
    std::fs::rename(&tmp, &path)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

/// Sends a whole model to the agent (a model loaded from disk).
fn send_model(handler: &ServerHandler, service: &str, fpm: &Fpm) {
    for (x, s) in fpm.points() {
        handler.send_point(ModelPoint {
            service: service.to_string(),
            x,
            stats: PointStats::from(s),
            source: PointSource::Benchmark,
        });
    }
    if let Some(z) = fpm.assumed_zero() {
        handler.send_point(ModelPoint {
            service: service.to_string(),
            x: z.to_vec(),
            stats: PointStats::default(),
            source: PointSource::AssumedZero,
        });
    }
}

fn build_one(
    c: &ModelConfig,
    handler: &ServerHandler,
    model_dir: Option<&Path>,
    foreground: bool,
    on_progress: &mut dyn FnMut(&ModelProgress),
) -> anyhow::Result<SavedModel> {
    if let Some(saved) = model_dir.and_then(|d| load_saved(d, c)) {
        tracing::info!(service = %c.service, points = saved.points, "model loaded from the model directory");
        send_model(handler, &c.service, &saved.fpm);
        let p = ModelProgress {
            service: c.service.clone(),
            method: c.spec.method.to_string(),
            state: BuildState::Done,
            points: saved.points as u32,
            runs: saved.runs as u32,
            bench_time_s: saved.bench_time_s,
            intervals: intervals(&saved.fpm),
        };
        on_progress(&p);
        handler.set_progress(p);
        return Ok(saved);
    }
    let kernel = handler
        .kernel(&c.service)
        .ok_or_else(|| anyhow::anyhow!("this server does not offer `{}`", c.service))?;
    let mut bench = ServerBench {
        handler,
        kernel,
        policy: &c.policy,
        foreground,
        config: c,
        waiting_since: None,
    };
    let mut obs = StreamToAgent {
        handler,
        config: c,
        on_progress,
    };
    let started = Instant::now();
    let BuildReport {
        fpm,
        points,
        runs,
        bench_time_s,
    } = build(&c.spec, &mut bench, &mut obs)
        .map_err(|e| anyhow::anyhow!("building the `{}` model: {e}", c.service))?;
    if let Some(z) = fpm.assumed_zero() {
        handler.send_point(ModelPoint {
            service: c.service.clone(),
            x: z.to_vec(),
            stats: PointStats::default(),
            source: PointSource::AssumedZero,
        });
    }
    tracing::info!(
        service = %c.service, points, runs,
        "model built: {bench_time_s:.2} s of benchmarks in {:.1} s", started.elapsed().as_secs_f64()
    );
    let p = ModelProgress {
        service: c.service.clone(),
        method: c.spec.method.to_string(),
        state: BuildState::Done,
        points: points as u32,
        runs: runs as u32,
        bench_time_s,
        intervals: intervals(&fpm),
    };
    (obs.on_progress)(&p);
    handler.set_progress(p);
    let saved = SavedModel {
        service: c.service.clone(),
        spec: c.spec.clone(),
        fpm,
        points,
        runs,
        bench_time_s,
    };
    if let Some(d) = model_dir {
        save(d, &saved)?;
    }
    Ok(saved)
}

/// Streams measured points to the agent and progress to the server's heartbeat.
struct StreamToAgent<'a> {
    handler: &'a ServerHandler,
    config: &'a ModelConfig,
    on_progress: &'a mut dyn FnMut(&ModelProgress),
}

impl Observer for StreamToAgent<'_> {
    fn on_point(&mut self, x: &[i64], stats: &SpeedStats) {
        self.handler.send_point(ModelPoint {
            service: self.config.service.clone(),
            x: x.to_vec(),
            stats: PointStats::from(*stats),
            source: PointSource::Benchmark,
        });
    }

    fn on_progress(&mut self, p: &Progress) {
        let state = if p.done {
            BuildState::Done
        } else {
            BuildState::Building
        };
        let mp = progress(self.config, state, Some(p));
        (self.on_progress)(&mp);
        self.handler.set_progress(mp);
    }
}

/// Runs the service's own kernel at a size, when the policy allows and no real call runs.
struct ServerBench<'a> {
    handler: &'a ServerHandler,
    kernel: Arc<dyn Kernel>,
    policy: &'a BuildPolicy,
    foreground: bool,
    config: &'a ModelConfig,
    waiting_since: Option<Instant>,
}

impl ServerBench<'_> {
    /// Blocks until a benchmark may run, publishing why it waits.
    fn wait_until_allowed(&mut self) {
        if self.foreground {
            return;
        }
        loop {
            let now_s = gridwise_proto::clock::unix_s() as u64;
            let cond = Conditions {
                minute_of_day: ((now_s / 60) % (24 * 60)) as u32,
                loadavg_1m: if self.handler.gate().recently_active(Duration::from_secs(60)) {
                    // Our own benchmarks are in the load average; do not wait on ourselves.
                    0.0
                } else {
                    crate::host::loadavg_1m()
                },
                busy_calls: self.handler.busy_calls(),
                halt_file_exists: self.policy.halt_file.as_ref().is_some_and(|p| p.exists()),
            };
            match self.policy.check(&cond) {
                Ok(()) => {
                    self.waiting_since = None;
                    return;
                }
                Err(why) => {
                    // Short waits behind real calls are routine; say so only when it lasts.
                    let since = *self.waiting_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(1) {
                        self.handler.set_progress(progress(
                            self.config,
                            BuildState::Waiting(why),
                            None,
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(if cond.busy_calls > 0 {
                        5
                    } else {
                        500
                    }));
                }
            }
        }
    }
}

impl Bench for ServerBench<'_> {
    fn run(&mut self, x: &[i64]) -> Result<Measurement, BenchError> {
        let desc = self.kernel.desc();
        let inputs = inputs_for_sizes(desc, x).map_err(BenchError::Failed)?;
        let sizes = desc.sizes(&inputs);
        let work = desc
            .compiled_complexity()
            .ok()
            .flatten()
            .and_then(|c| c.eval(&sizes).ok())
            .ok_or_else(|| {
                BenchError::Failed(format!(
                    "complexity of `{}` cannot be evaluated at {x:?}",
                    desc.name
                ))
            })?;
        loop {
            self.wait_until_allowed();
            let cancel = self.handler.gate().start();
            let ctx = KernelCtx::with_cancel(cancel.clone());
            let timed = self.handler.sensors().timed(
                self.kernel.sleeps(),
                self.kernel.threads(),
                &ctx,
                || self.kernel.run(&inputs, &ctx),
            );
            let (r, seconds) = (timed.value, (timed.ended - timed.started).as_secs_f64());
            // Models are of a quiet host: a run slowed by background load is measured at the
            // speed it would have had alone (the load enters the prediction once, later).
            let seconds = seconds * timed.share.filter(|a| *a > 0.0 && *a <= 1.0).unwrap_or(1.0);
            self.handler.gate().finish();
            // A real call arrived during the run: its timing is disturbed, so measure again.
            if cancel.is_cancelled() {
                continue;
            }
            return match r {
                Ok(_) if seconds > 0.0 => Ok(Measurement {
                    seconds,
                    speed: work / seconds,
                }),
                Ok(_) => Err(BenchError::Failed("the run took no measurable time".into())),
                Err(KernelError::Cancelled) => continue,
                Err(KernelError::Application(m)) => Err(BenchError::Infeasible(m)),
                Err(KernelError::Internal(m)) => Err(BenchError::Failed(m)),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_key_is_caught() {
        let c: ModelConfig = toml::from_str(
            "service = \"solve\"\nmethod = \"gbbp\"\nmin_sampel_num = 3\nparams = [{ name = \"n\", min = 1, max = 9 }]\n",
        )
        .unwrap();
        assert_eq!(c.unknown_keys(), vec!["min_sampel_num"]);
        let ok: ModelConfig = toml::from_str(
            "service = \"solve\"\nparams = [{ name = \"n\", min = 1, max = 9 }]\npriority = 1\n",
        )
        .unwrap();
        assert!(ok.unknown_keys().is_empty(), "{:?}", ok.unknown_keys());
    }
}
