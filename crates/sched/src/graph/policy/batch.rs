//! The batch heuristics of Maheswaran et al. (1999), min-min and sufferage, run over the ready
//! set of a DAG: repeatedly pick one ready task by the rule, place it at its minimum completion
//! time (appending to the server), and add the tasks that became ready.
//!
//! Each ready task caches its best and second-best completion times; placing a task on server s
//! only delays s, so only the entries whose best or second-best server is s are re-evaluated.

use super::schedule::{Lanes, Plan, Problem, append_finish};
use crate::graph::dag::TaskIdx;
use crate::graph::{MapError, Mapping};

/// Which ready task goes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// The one with the smallest minimum completion time.
    MinMin,
    /// The one that would lose most by not getting its best server (second-best minus best
    /// completion; infinite when only one server can run it).
    Sufferage,
}

struct Entry {
    task: TaskIdx,
    /// Input arrival per server; empty when the task has no inputs (arrival 0 everywhere), so
    /// a large bag does not cost tasks × servers memory.
    ready: Vec<f64>,
    best: f64,
    best_server: usize,
    second: f64,
    second_server: usize,
}

impl Entry {
    fn ready_on(&self, s: usize) -> f64 {
        self.ready.get(s).copied().unwrap_or(0.0)
    }

    fn evaluate(&mut self, p: &Problem, lanes: &Lanes) {
        let (mut best, mut bs, mut second, mut ss) =
            (f64::INFINITY, usize::MAX, f64::INFINITY, usize::MAX);
        for s in 0..p.servers() {
            if let Some((f, _)) = append_finish(p.etc, lanes, self.task, s, self.ready_on(s)) {
                if f < best {
                    (second, ss) = (best, bs);
                    (best, bs) = (f, s);
                } else if f < second {
                    (second, ss) = (f, s);
                }
            }
        }
        (self.best, self.best_server, self.second, self.second_server) = (best, bs, second, ss);
    }
}

/// Maps the problem by `rule`.
pub(crate) fn map(p: &Problem, rule: Rule) -> Result<Mapping, MapError> {
    let (n, m) = (p.tasks(), p.servers());
    let mut topo_pos = vec![0usize; n];
    for (i, &t) in p.adj.topo.iter().enumerate() {
        topo_pos[t] = i;
    }
    let mut plan = Plan::new(n, m);
    let mut lanes = Lanes::new(p.etc);
    let mut missing: Vec<usize> = (0..n).map(|t| p.adj.preds(t).len()).collect();
    let new_entry = |t: TaskIdx, plan: &Plan, lanes: &Lanes| {
        let mut ready = Vec::new();
        if !p.adj.preds(t).is_empty() {
            ready = vec![0.0; m];
            plan.data_ready_all(p, t, &mut ready);
        }
        let mut e = Entry {
            task: t,
            ready,
            best: 0.0,
            best_server: 0,
            second: 0.0,
            second_server: 0,
        };
        e.evaluate(p, lanes);
        e
    };
    let mut pool: Vec<Entry> = p
        .adj
        .topo
        .iter()
        .filter(|&&t| missing[t] == 0)
        .map(|&t| new_entry(t, &plan, &lanes))
        .collect();

    while !pool.is_empty() {
        let pick = (0..pool.len())
            .min_by(|&a, &b| {
                let (ea, eb) = (&pool[a], &pool[b]);
                let primary = match rule {
                    Rule::MinMin => ea.best.total_cmp(&eb.best),
                    Rule::Sufferage => (eb.second - eb.best).total_cmp(&(ea.second - ea.best)),
                };
                primary
                    .then(ea.best.total_cmp(&eb.best))
                    .then(topo_pos[ea.task].cmp(&topo_pos[eb.task]))
            })
            .unwrap_or(0);
        let e = pool.swap_remove(pick);
        let s = e.best_server;
        let start = e.ready_on(s).max(lanes.available(s));
        lanes.occupy(s, e.best);
        plan.place(e.task, s, start, e.best);

        for other in pool.iter_mut() {
            if other.best_server == s || (rule == Rule::Sufferage && other.second_server == s) {
                other.evaluate(p, &lanes);
            }
        }
        for &(c, _) in p.adj.succs(e.task) {
            missing[c] -= 1;
            if missing[c] == 0 {
                pool.push(new_entry(c, &plan, &lanes));
            }
        }
    }
    Ok(plan.into_mapping())
}
