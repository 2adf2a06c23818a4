//! Divisible jobs: one service over N units, cut into parts by the agent
//! ([`GridClient::divide_plan`]), each part run as a call bound to its server, the outputs
//! returned in the order of the units ([`GridClient::divide`]). Iterative jobs run again and
//! again, each iteration planned anew from what the previous ones taught the models
//! ([`GridClient::divide_iter`]).

use crate::client::{CallResult, GridClient};
use crate::error::GrpcError;
use crate::handle::FunctionHandle;
use gridwise_proto::{DividePart, DivideReply, DivideRequest, ErrorCode, NeighbourComm, Value};
use std::time::Instant;

/// How to divide: along which size parameter, with what else, by which policy over which
/// servers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DivideSpec {
    /// The size parameter that counts a part's units (the others are in `sizes`).
    pub unit_param: String,
    /// The other size parameters.
    pub sizes: Vec<(String, i64)>,
    /// `fpm` (default), `lp`, `constant-speed`, `even`.
    pub policy: Option<String>,
    /// Exactly this many servers; `None`: as many as are predicted fastest.
    pub servers: Option<u32>,
    /// Every server offering the service.
    pub all: bool,
    /// Most units one part may take.
    pub max_part: Option<u64>,
    /// What neighbours exchange per part and iteration (1-D slabs).
    pub comm: Option<NeighbourComm>,
}

/// One part as it ran.
#[derive(Clone, Debug)]
pub struct PartRun {
    /// Where it ran.
    pub server: String,
    /// Its units are [first, first + units).
    pub first: u64,
    /// How many units it took.
    pub units: u64,
    /// What the agent expected it to take, s.
    pub predicted_s: f64,
    /// The call's round trip, s.
    pub actual_s: f64,
    /// From the start of the job to the part's end, s.
    pub end_s: f64,
    /// Its outputs and timing.
    pub result: CallResult,
}

/// A divisible job as it ran.
#[derive(Clone, Debug)]
pub struct DivideRun {
    /// How the agent cut it.
    pub plan: DivideReply,
    /// In the order of the units.
    pub parts: Vec<PartRun>,
    /// From the first part sent to the last one back, s.
    pub makespan_s: f64,
}

/// A part's failure, named by the units it covered and where it ran (`what`: "part of
/// units", "slab of rows").
pub(crate) fn part_failed(p: &DividePart, what: &str, e: GrpcError) -> GrpcError {
    GrpcError::new(
        e.code,
        format!(
            "the {what} {}..{} on {}: {}",
            p.first,
            p.first + p.units,
            p.server,
            e.message
        ),
    )
}

impl GridClient {
    /// The request for `units` of `h`'s service, its byte counts taken from `inputs` at one and
    /// two units (a part's bytes grow linearly with its units).
    fn divide_request(
        h: &FunctionHandle,
        units: u64,
        spec: &DivideSpec,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<DivideRequest, GrpcError> {
        let bytes = |x: u64| -> Result<(u64, u64), GrpcError> {
            let p = h.desc.profile(&inputs(0, x))?;
            Ok((p.in_bytes, p.out_bytes))
        };
        let (one, two) = (bytes(1)?, bytes(2)?);
        let line = |a: u64, b: u64| (a.saturating_sub(b.saturating_sub(a)), b.saturating_sub(a));
        Ok(DivideRequest {
            service: h.service.clone(),
            units,
            unit_param: spec.unit_param.clone(),
            sizes: spec.sizes.clone(),
            in_bytes: line(one.0, two.0),
            out_bytes: line(one.1, two.1),
            comm: spec.comm,
            policy: spec.policy.clone(),
            servers: spec.servers,
            all: spec.all,
            max_part: spec.max_part,
        })
    }

    /// How the agent would cut `units` of `h`'s service (records nothing).
    pub async fn divide_plan(
        &self,
        h: &FunctionHandle,
        units: u64,
        spec: &DivideSpec,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<DivideReply, GrpcError> {
        let req = Self::divide_request(h, units, spec, inputs)?;
        self.inner.conn.divide(&req).await
    }

    /// Runs `units` of `h`'s service cut as the agent plans: `inputs(first, units)` makes the
    /// inputs of the part covering [first, first + units). The parts run at once, each on its
    /// server; their results come back in the order of the units.
    pub async fn divide(
        &self,
        h: &FunctionHandle,
        units: u64,
        spec: &DivideSpec,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<DivideRun, GrpcError> {
        let plan = self.divide_plan(h, units, spec, inputs).await?;
        self.run_divide(h, plan, inputs).await
    }

    /// Runs `h`'s service cut as `plan` says: the agent's (see [`GridClient::divide_plan`]),
    /// or a cut made elsewhere, such as a benchmark's oracle, run the same way to compare.
    pub async fn run_divide(
        &self,
        h: &FunctionHandle,
        plan: DivideReply,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<DivideRun, GrpcError> {
        // Bound handles and inputs first: the parts then leave back to back, as the plan has it.
        let mut ready = Vec::with_capacity(plan.parts.len());
        for p in &plan.parts {
            let bound = self.function_handle_init(&h.service, &p.server).await?;
            ready.push((bound, inputs(p.first, p.units)));
        }
        let start = Instant::now();
        let mut sessions = Vec::with_capacity(plan.parts.len());
        for (bound, args) in ready {
            sessions.push(self.call_async(&bound, args)?);
        }
        let mut parts = Vec::with_capacity(sessions.len());
        let mut failed: Option<GrpcError> = None;
        for (p, id) in plan.parts.iter().zip(sessions) {
            match self.wait(id).await {
                Ok(result) => parts.push(PartRun {
                    server: p.server.clone(),
                    first: p.first,
                    units: p.units,
                    predicted_s: p.predicted_s,
                    actual_s: result.round_trip_s,
                    end_s: start.elapsed().as_secs_f64(),
                    result,
                }),
                Err(e) => {
                    failed.get_or_insert(part_failed(p, "part of units", e));
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        // Waited in order: a part's end is when it came back, at the latest.
        let makespan_s = start.elapsed().as_secs_f64();
        Ok(DivideRun {
            plan,
            parts,
            makespan_s,
        })
    }

    /// Runs the job `iterations` times, each planned anew: the models learn from every part,
    /// so the cut follows the servers as they are measured (and as their load changes).
    pub async fn divide_iter(
        &self,
        h: &FunctionHandle,
        units: u64,
        spec: &DivideSpec,
        iterations: usize,
        inputs: &dyn Fn(u64, u64) -> Vec<Value>,
    ) -> Result<Vec<DivideRun>, GrpcError> {
        if iterations == 0 {
            return Err(GrpcError::new(
                ErrorCode::OtherErrorCode,
                "0 iterations: nothing to run",
            ));
        }
        let mut runs = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            runs.push(self.divide(h, units, spec, inputs).await?);
            // The parts' reports reach the agent a moment after their replies: give them the
            // time before planning the next iteration from them.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        Ok(runs)
    }
}
