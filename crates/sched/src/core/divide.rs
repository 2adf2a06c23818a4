//! A divisible job's plan from what the agent knows: for every live server offering the
//! service, the time of a part of x units is the ETC of the call that part is (queue, client
//! transfers, compute under the forecast load, overhead — the same estimate a single call
//! gets), plus the neighbour exchange over the measured links; its cap is the largest part it
//! can hold. [`crate::divide`] then chooses the servers and the split.

use super::{AgentCore, Call, list_or_none, not_offered};
use crate::catalog::ServiceIdx;
use crate::divide::{self, DivideError, DividePolicy, Selection, Worker};
use crate::graph::Sites;
use gridwise_predict::{EtcSpread, Stoch};
use gridwise_proto::{CallProfile, DividePart, DivideReply, DivideRequest, ErrorCode, RpcError};
use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

fn bad(message: String) -> RpcError {
    RpcError::new(ErrorCode::OtherErrorCode, message)
}

/// What a divide request asks, checked: the sizes held fixed in every part (in the service's
/// order, the unit's left out), how to split, and which servers may take parts.
struct Job {
    fixed: Vec<(String, i64)>,
    policy: DividePolicy,
    selection: Selection,
}

impl Job {
    /// Refuses a unit the service has no size parameter for, a fixed size missing, an empty
    /// job and an unknown policy.
    fn of(req: &DivideRequest, params: &[String]) -> Result<Job, RpcError> {
        if !params.contains(&req.unit_param) {
            return Err(bad(format!(
                "`{}` has no size parameter `{}` to divide along (it has: {})",
                req.service,
                req.unit_param,
                list_or_none(params)
            )));
        }
        let mut fixed = Vec::new();
        for p in params.iter().filter(|p| **p != req.unit_param) {
            let v = req
                .sizes
                .iter()
                .find(|(n, _)| n == p)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    bad(format!(
                        "`{}` needs a value for its size parameter `{p}`",
                        req.service
                    ))
                })?;
            fixed.push((p.clone(), v));
        }
        if req.units == 0 {
            return Err(bad("a job of 0 units has nothing to divide".into()));
        }
        let policy: DividePolicy = match &req.policy {
            Some(p) => p.parse().map_err(bad)?,
            None => DividePolicy::default(),
        };
        let selection = match (req.all, req.servers) {
            (true, _) => Selection::All,
            (false, Some(k)) => Selection::Count(k.max(1) as usize),
            (false, None) => Selection::Best,
        };
        Ok(Job {
            fixed,
            policy,
            selection,
        })
    }
}

impl AgentCore {
    /// The plan as the client gets it: each part's server, its first unit and its
    /// predictions. `slots` maps the planner's worker ids to registry slots.
    fn divide_reply(&self, plan: &divide::DividePlan, slots: &[usize]) -> DivideReply {
        let mut first = 0u64;
        let parts = plan
            .parts
            .iter()
            .map(|p| {
                let e = self.registry.entry(slots[p.id]);
                let part = DividePart {
                    server: e.name().to_string(),
                    addr: e.addr().to_string(),
                    first,
                    units: p.units,
                    predicted_s: p.time.0,
                    sd_s: p.time.1,
                    comm_s: p.comm_s,
                };
                first += p.units;
                part
            })
            .collect();
        DivideReply {
            parts,
            makespan_s: plan.makespan.0,
            makespan_sd_s: plan.makespan.1,
            policy: plan.policy.name().to_string(),
            ordering: plan.ordering.clone(),
            slack: plan.slack,
        }
    }

    /// The servers up, reachable and offering the service `svc`, or why none.
    fn live_providers(
        &self,
        svc: ServiceIdx,
        service: &str,
        now: Duration,
    ) -> Result<Vec<usize>, RpcError> {
        let slots: Vec<usize> = self.reachable(
            self.registry
                .providers(svc)
                .iter()
                .copied()
                .filter(|&s| self.registry.entry(s).is_up())
                .collect(),
            now,
        );
        if slots.is_empty() {
            return Err(RpcError::new(
                ErrorCode::ServerNotFound,
                format!("no live server offers `{service}`"),
            ));
        }
        Ok(slots)
    }

    /// For a slab job, what a part on `slots[a]` pays per step to take its rows from the part
    /// on `slots[b]` (`[b][a]`): `bytes` in `messages`, half with each neighbour (a slab's two
    /// boundary rows), pulled from where the neighbour made them; one link's messages in a
    /// step vary together. A pair across two sites is priced as its path. Empty for a job
    /// whose parts do not talk.
    fn slab_pulls(&self, req: &DivideRequest, slots: &[usize]) -> Vec<Vec<Stoch>> {
        let Some(c) = req.comm else {
            return Vec::new();
        };
        let (lat, bw) = (
            self.config.transfers().latency_s,
            self.config.transfers().bandwidth,
        );
        let addrs: Vec<&str> = slots
            .iter()
            .map(|&s| self.registry.entry(s).addr())
            .collect();
        let messages = (c.messages / 2).max(1);
        let per = c.bytes / 2 / u64::from(messages);
        let mut pulls: Vec<Vec<Stoch>> = addrs
            .iter()
            .map(|from| {
                addrs
                    .iter()
                    .map(|to| {
                        let t = self.links.transfer(from, to, per, lat, bw);
                        t.scale(f64::from(messages))
                    })
                    .collect()
            })
            .collect();
        let samples = |a: usize, b: usize| self.links.samples(addrs[a], addrs[b]);
        Sites::learned(&addrs, &self.links).priced_by_path(&mut pulls, &samples);
        pulls
    }

    /// Plans `req` (records nothing: the parts are ranked and reserved when they are called).
    pub fn divide(&self, req: &DivideRequest, now: Duration) -> Result<DivideReply, RpcError> {
        let svc = self
            .catalog
            .get(&req.service)
            .ok_or_else(|| not_offered(&req.service))?;
        let params = &svc.desc.size_params;
        let Job {
            fixed,
            policy,
            selection,
        } = Job::of(req, params)?;
        let profile_of = |x: u64| -> CallProfile {
            let mut p = req.profile(x);
            p.sizes = params
                .iter()
                .map(|n| {
                    let v = if *n == req.unit_param {
                        x as i64
                    } else {
                        fixed.iter().find(|(f, _)| f == n).map_or(0, |(_, v)| *v)
                    };
                    (n.clone(), v)
                })
                .collect();
            p
        };
        let slots = self.live_providers(svc.idx, &req.service, now)?;
        // Every (server, x) once: bisections ask again and again.
        let memo: RefCell<HashMap<(usize, u64), Stoch>> = RefCell::new(HashMap::new());
        let time = |slot: usize, x: u64| -> Stoch {
            if let Some(t) = memo.borrow().get(&(slot, x)) {
                return *t;
            }
            let profile = profile_of(x);
            let call = Call {
                svc,
                work: svc.facts.work(&profile),
                footprint: profile.footprint_bytes(),
                profile: &profile,
                now,
                predictor: None,
            };
            let t = if self.eligible(self.registry.entry(slot), &call) {
                let e = self.estimate(slot, &call);
                Stoch::new(e.total_s(), e.total_sd_s())
            } else {
                Stoch::point(f64::INFINITY)
            };
            memo.borrow_mut().insert((slot, x), t);
            t
        };
        let closures: Vec<Box<dyn Fn(u64) -> Stoch + '_>> = slots
            .iter()
            .map(|&s| -> Box<dyn Fn(u64) -> Stoch + '_> { Box::new(move |x| time(s, x)) })
            .collect();
        // The largest part a server can run at all (memory, frame, a model that says it
        // cannot): every finite time is at most f64::MAX.
        let cap_of = |slot: usize| -> u64 {
            let limit = req.max_part.unwrap_or(req.units).min(req.units);
            gridwise_fpm::partition::max_units_within(&|x| time(slot, x).mean, f64::MAX, limit)
        };
        let pulls = self.slab_pulls(req, &slots);
        let exchange = |a: usize, b: usize| -> Stoch {
            pulls
                .get(b)
                .and_then(|row| row.get(a))
                .copied()
                .unwrap_or_default()
        };
        // Before a set is chosen, a part's neighbours are any of the others: the mean over
        // them ranks the servers by connectivity.
        let comm_of = |i: usize| -> Stoch {
            if req.comm.is_none() || slots.len() < 2 {
                return Stoch::point(0.0);
            }
            let others = (0..slots.len()).filter(|&o| o != i);
            let k = (slots.len() - 1) as f64;
            let (mean, sd) = others
                .map(|o| exchange(i, o))
                .fold((0.0, 0.0), |(m, s), x| (m + x.mean, s + x.sd));
            Stoch::new(mean / k, sd / k)
        };
        let unit_work = svc.facts.work(&profile_of(1)).filter(|w| *w > 0.0);
        let workers: Vec<Worker<'_>> = slots
            .iter()
            .zip(&closures)
            .enumerate()
            .map(|(i, (&slot, f))| {
                let rate = self
                    .registry
                    .entry(slot)
                    .view(svc.idx)
                    .rate()
                    .zip(unit_work)
                    .map_or(0.0, |(r, w)| r / w);
                let comm = comm_of(i);
                Worker {
                    id: i,
                    time: f.as_ref(),
                    cap: cap_of(slot),
                    rate,
                    comm_s: comm.mean,
                    comm_sd_s: comm.sd,
                }
            })
            .collect();
        let slab: Option<divide::Exchange<'_>> =
            req.comm.map(|_| &exchange as divide::Exchange<'_>);
        let plan = divide::plan_slab(req.units, &workers, slab, policy, selection).map_err(
            |e| match e {
                DivideError::NoServers => RpcError::new(ErrorCode::ServerNotFound, e.to_string()),
                other => bad(format!(
                    "`{}` over {} units: {other}",
                    req.service, req.units
                )),
            },
        )?;
        Ok(self.divide_reply(&plan, &slots))
    }
}
