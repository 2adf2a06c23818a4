//! Slab jobs (seed 004's PMHD3D): N rows cut once by the agent's plan, then stepped again and
//! again; each step every part needs its neighbours' boundary rows of the step before. Those
//! rows stay on the servers that made them ([`GridClient::call_keep`]) and each part's call
//! takes them as references, so they move server to server as a task graph's data does, never
//! through the client. The plan's exchange term (`comm_s` of each part) is then checked
//! against what each part spent pulling its rows.

use crate::client::{CallResult, GridClient};
use crate::divide::{DivideSpec, part_failed};
use crate::error::GrpcError;
use crate::handle::FunctionHandle;
use gridwise_proto::{DivideReply, ErrorCode, NeighbourComm, RemoteRef, Value};
use std::time::Instant;

/// One part in one step.
#[derive(Clone, Debug)]
pub struct SlabPart {
    /// Where it ran (every step of a job runs its part on the same server).
    pub server: String,
    /// Its rows.
    pub units: u64,
    /// The call's round trip, s.
    pub actual_s: f64,
    /// Pulling its neighbours' rows (the server's input transfer time), s.
    pub exchange_s: f64,
    /// The bytes of the rows it took from its neighbours.
    pub exchanged_bytes: u64,
    /// Its outputs (`top` and `bottom` as references, freed when the job goes on or ends)
    /// and timing.
    pub result: CallResult,
}

/// One step of a slab job.
#[derive(Clone, Debug)]
pub struct SlabStep {
    /// From the first part sent to the last one back, s.
    pub makespan_s: f64,
    /// In the order of the units.
    pub parts: Vec<SlabPart>,
}

/// A slab job as it ran.
#[derive(Clone, Debug)]
pub struct SlabRun {
    /// How the agent cut it (every step uses this cut).
    pub plan: DivideReply,
    /// In the order they ran.
    pub steps: Vec<SlabStep>,
}

impl SlabRun {
    /// The makespans of the steps that exchanged rows (all but the first); the first step's
    /// alone when it is the only one.
    fn exchanging_steps(&self) -> Vec<f64> {
        match self.steps.split_first() {
            Some((first, [])) => vec![first.makespan_s],
            Some((_, later)) => later.iter().map(|s| s.makespan_s).collect(),
            None => Vec::new(),
        }
    }

    /// The steps that exchanged rows (all but the first), their mean makespan: what the plan's
    /// expected step (`DivideReply::makespan_s`, its latest part's expected end) predicts, as
    /// the job's time is the sum of its steps, slow ones included.
    pub fn exchanging_mean_s(&self) -> f64 {
        let later = self.exchanging_steps();
        if later.is_empty() {
            return 0.0;
        }
        later.iter().sum::<f64>() / later.len() as f64
    }

    /// The steps that exchanged rows (all but the first), their median makespan: a step that
    /// waited for a core on a shared host says nothing of the cut.
    pub fn exchanging_makespan_s(&self) -> f64 {
        let mut later = self.exchanging_steps();
        if later.is_empty() {
            return 0.0;
        }
        later.sort_by(f64::total_cmp);
        let mid = later.len() / 2;
        if later.len() % 2 == 1 {
            later[mid]
        } else {
            (later[mid - 1] + later[mid]) / 2.0
        }
    }
}

/// Where a slab service takes and returns its boundary rows: the inputs `up` and `down` (its
/// last two), the outputs `top` and `bottom`.
struct HaloArgs {
    top: usize,
    bottom: usize,
}

fn halo_args(h: &FunctionHandle) -> Result<HaloArgs, GrpcError> {
    let ins: Vec<&str> = h.desc.inputs().map(|a| a.name.as_str()).collect();
    let outs: Vec<&str> = h.desc.outputs().map(|a| a.name.as_str()).collect();
    let bad = |what: &str| {
        GrpcError::new(
            ErrorCode::OtherErrorCode,
            format!(
                "`{}` is no slab service: {what} (its inputs: {}; outputs: {})",
                h.service,
                ins.join(", "),
                outs.join(", ")
            ),
        )
    };
    if ins.len() < 2 || ins[ins.len() - 2..] != ["up", "down"] {
        return Err(bad("its last two inputs must be `up` and `down`"));
    }
    let at = |name: &str| outs.iter().position(|o| *o == name);
    match (at("top"), at("bottom")) {
        (Some(top), Some(bottom)) => Ok(HaloArgs { top, bottom }),
        _ => Err(bad("it must return `top` and `bottom`")),
    }
}

fn size_of(v: &Value) -> u64 {
    match v {
        Value::Ref(r) => r.bytes,
        Value::Bytes(b) => b.len() as u64,
        _ => 0,
    }
}

impl GridClient {
    /// Runs `steps` steps of a slab job of `units` rows of `h`'s service, whose parts swap
    /// boundary rows of `halo_bytes` each with their neighbours every step. The agent cuts the
    /// rows once, counting the exchange over the links it measured (`spec.comm` is set from
    /// `halo_bytes`); `inputs(first, units)` makes a part's inputs but `up` and `down`, which
    /// the job fills: empty in the first step and at the ends, else the neighbours' rows of
    /// the step before, as references to where they were made.
    pub async fn divide_slab(
        &self,
        h: &FunctionHandle,
        units: u64,
        spec: &DivideSpec,
        halo_bytes: u64,
        steps: usize,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<SlabRun, GrpcError> {
        halo_args(h)?;
        if steps == 0 {
            return Err(GrpcError::new(
                ErrorCode::OtherErrorCode,
                "0 steps: nothing to run",
            ));
        }
        let spec = DivideSpec {
            comm: Some(NeighbourComm {
                bytes: 2 * halo_bytes,
                messages: 2,
            }),
            ..spec.clone()
        };
        let with_rows = |first: u64, n: u64| {
            let mut v = inputs(first, n);
            v.extend([Value::Bytes(Vec::new()), Value::Bytes(Vec::new())]);
            v
        };
        let plan = self.divide_plan(h, units, &spec, &with_rows).await?;
        self.run_slab(h, plan, steps, inputs).await
    }

    /// Runs `steps` steps of a slab job cut as `plan` says (the agent's, or one made
    /// elsewhere: an offline oracle's, a replayed one), as [`divide_slab`](Self::divide_slab)
    /// does.
    pub async fn run_slab(
        &self,
        h: &FunctionHandle,
        plan: DivideReply,
        steps: usize,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<SlabRun, GrpcError> {
        let halo = halo_args(h)?;
        if steps == 0 {
            return Err(GrpcError::new(
                ErrorCode::OtherErrorCode,
                "0 steps: nothing to run",
            ));
        }
        let mut bound = Vec::with_capacity(plan.parts.len());
        for p in &plan.parts {
            bound.push(self.function_handle_init(&h.service, &p.server).await?);
        }
        let keep = [halo.top, halo.bottom];
        let mut rows: Vec<(Value, Value)> = Vec::new();
        let mut done = Vec::with_capacity(steps);
        for _ in 0..steps {
            let calls = plan.parts.iter().enumerate().map(|(j, p)| {
                let mut args = inputs(p.first, p.units);
                let up = if j > 0 && !rows.is_empty() {
                    rows[j - 1].1.clone()
                } else {
                    Value::Bytes(Vec::new())
                };
                let down = rows
                    .get(j + 1)
                    .map_or(Value::Bytes(Vec::new()), |r| r.0.clone());
                let exchanged = size_of(&up) + size_of(&down);
                args.extend([up, down]);
                let h = &bound[j];
                async move {
                    let r = self.call_keep(h, args, &keep).await;
                    (r, exchanged)
                }
            });
            let start = Instant::now();
            let results = futures::future::join_all(calls).await;
            let makespan_s = start.elapsed().as_secs_f64();
            let old: Vec<RemoteRef> = refs(&rows);
            let mut parts = Vec::with_capacity(results.len());
            let mut next = Vec::with_capacity(results.len());
            let mut failed = None;
            for (p, (r, exchanged)) in plan.parts.iter().zip(results) {
                match r {
                    Ok(result) => {
                        next.push((
                            result.outputs[halo.top].clone(),
                            result.outputs[halo.bottom].clone(),
                        ));
                        parts.push(SlabPart {
                            server: p.server.clone(),
                            units: p.units,
                            actual_s: result.round_trip_s,
                            exchange_s: result.timing.input_transfer_s,
                            exchanged_bytes: exchanged,
                            result,
                        });
                    }
                    Err(e) => {
                        failed.get_or_insert(part_failed(p, "slab of rows", e));
                    }
                }
            }
            // Rows of the step before are spent (and, after a failure, so is the job).
            let _ = self.free(&old).await;
            if let Some(e) = failed {
                let _ = self.free(&refs(&next)).await;
                return Err(e);
            }
            rows = next;
            done.push(SlabStep { makespan_s, parts });
        }
        let _ = self.free(&refs(&rows)).await;
        Ok(SlabRun { plan, steps: done })
    }
}

fn refs(rows: &[(Value, Value)]) -> Vec<RemoteRef> {
    rows.iter()
        .flat_map(|(a, b)| [a, b])
        .filter_map(|v| match v {
            Value::Ref(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}
