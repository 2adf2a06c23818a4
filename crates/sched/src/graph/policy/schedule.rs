//! What every list-scheduling policy shares: input checks, the partial schedule being built,
//! when a task's inputs can arrive on each server, and append-only server timelines for the
//! batch and online heuristics (HEFT's, with insertion into idle gaps, are in `timelines`).

use crate::graph::dag::{Adjacency, TaskGraph, TaskIdx};
use crate::graph::platform::{CommModel, EtcMatrix, check_shapes};
use crate::graph::{MapError, Mapping};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Checked inputs of one mapping.
pub(crate) struct Problem<'a> {
    pub graph: &'a TaskGraph,
    pub etc: &'a EtcMatrix,
    pub comm: &'a CommModel,
    pub adj: Adjacency,
}

impl<'a> Problem<'a> {
    /// Checks shapes and acyclicity, and that every task has a server that can run it.
    pub fn new(
        graph: &'a TaskGraph,
        etc: &'a EtcMatrix,
        comm: &'a CommModel,
    ) -> Result<Self, MapError> {
        check_shapes(graph, etc, comm)?;
        let adj = graph.adjacency()?;
        if let Some(t) = (0..graph.len()).find(|&t| !etc.row(t).iter().any(|v| v.is_finite())) {
            return Err(MapError::Infeasible {
                task: graph.task(t).name.clone(),
            });
        }
        Ok(Problem {
            graph,
            etc,
            comm,
            adj,
        })
    }

    pub fn servers(&self) -> usize {
        self.etc.servers()
    }

    pub fn tasks(&self) -> usize {
        self.graph.len()
    }
}

/// A schedule under construction: where and when each placed task runs.
pub(crate) struct Plan {
    pub server_of: Vec<usize>,
    pub start: Vec<f64>,
    pub finish: Vec<f64>,
    /// Placement sequence: policies place a task only after its predecessors, so this is a
    /// topological order and breaks start-time ties safely.
    pub seq: Vec<usize>,
    placed: usize,
    servers: usize,
}

impl Plan {
    /// Nothing placed yet.
    pub fn new(tasks: usize, servers: usize) -> Self {
        Plan {
            server_of: vec![usize::MAX; tasks],
            start: vec![0.0; tasks],
            finish: vec![0.0; tasks],
            seq: vec![usize::MAX; tasks],
            placed: 0,
            servers,
        }
    }

    /// Records `t` on server `s` over `[start, end]`.
    pub fn place(&mut self, t: TaskIdx, s: usize, start: f64, end: f64) {
        self.server_of[t] = s;
        self.start[t] = start;
        self.finish[t] = end;
        self.seq[t] = self.placed;
        self.placed += 1;
    }

    /// When all of `t`'s inputs can be on server `s`, given where and when its (placed)
    /// predecessors finish.
    #[inline]
    pub fn data_ready(&self, p: &Problem, t: TaskIdx, s: usize) -> f64 {
        p.adj
            .preds(t)
            .iter()
            .map(|&(q, bytes)| self.finish[q] + p.comm.transfer_s(self.server_of[q], s, bytes))
            .fold(0.0, f64::max)
    }

    /// [`Plan::data_ready`] for every server at once, into `out` (one entry per server).
    /// Each predecessor's row of links is walked as two slices, without `transfer_s`'s index
    /// and same-server test per server (on a large platform this pass is much of HEFT's time);
    /// the sums are the same, term for term, and the predecessor's own server is set apart
    /// after.
    pub fn data_ready_all(&self, p: &Problem, t: TaskIdx, out: &mut [f64]) {
        out.fill(0.0);
        let dispatch = p.comm.dispatch_s();
        for &(q, bytes) in p.adj.preds(t) {
            let (sq, fq) = (self.server_of[q], self.finish[q]);
            let (latency, s_per_byte) = p.comm.links_from(sq);
            let b = bytes as f64;
            let here = out[sq];
            for ((r, &l), &spb) in out.iter_mut().zip(latency).zip(s_per_byte) {
                *r = r.max(fq + (dispatch + l + b * spb));
            }
            out[sq] = here.max(fq + dispatch);
        }
    }

    /// The mapping, each server's tasks ordered by planned start.
    pub fn into_mapping(self) -> Mapping {
        Mapping::ordered_by(self.server_of, self.servers, &self.start, &self.seq)
    }
}

/// Append-only server timelines: each slot is free from the end of its last task on.
pub(crate) struct Lanes {
    free: Vec<Vec<f64>>,
}

impl Lanes {
    /// Every slot of every server free once its queued work is done.
    pub fn new(etc: &EtcMatrix) -> Self {
        Lanes {
            free: (0..etc.servers()).map(|s| etc.free_at(s)).collect(),
        }
    }

    /// When server `s` can next start a task.
    #[inline]
    pub fn available(&self, s: usize) -> f64 {
        self.free[s].iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// Occupies `s`'s earliest-free slot until `end`.
    pub fn occupy(&mut self, s: usize, end: f64) {
        let lanes = &mut self.free[s];
        let mut best = 0;
        for i in 1..lanes.len() {
            if lanes[i] < lanes[best] {
                best = i;
            }
        }
        lanes[best] = end;
    }
}

/// The completion time of `t` on every feasible server under append-only timelines:
/// `(finish, start)` per server, `None` where `t` cannot run.
#[inline]
pub(crate) fn append_finish(
    etc: &EtcMatrix,
    lanes: &Lanes,
    t: TaskIdx,
    s: usize,
    data_ready: f64,
) -> Option<(f64, f64)> {
    let d = etc.get(t, s);
    if !d.is_finite() {
        return None;
    }
    let start = data_ready.max(lanes.available(s));
    Some((start + d, start))
}

/// A ready task and its rank, ordered by rank then earliest topological position.
#[derive(PartialEq)]
struct Ready {
    rank: f64,
    topo: usize,
    task: TaskIdx,
}

impl Eq for Ready {}

impl Ord for Ready {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank
            .total_cmp(&other.rank)
            .then(other.topo.cmp(&self.topo))
    }
}

impl PartialOrd for Ready {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Tasks by decreasing `rank`, each only once its predecessors are listed (a ready list; ties
/// by topological position): an order list schedulers can place in, whatever the rank.
pub(crate) fn ready_order(p: &Problem, rank: &[f64]) -> Vec<TaskIdx> {
    let n = p.tasks();
    let mut topo_pos = vec![0usize; n];
    for (i, &t) in p.adj.topo.iter().enumerate() {
        topo_pos[t] = i;
    }
    let mut waiting: Vec<usize> = (0..n).map(|t| p.adj.preds(t).len()).collect();
    let mut heap: BinaryHeap<Ready> = (0..n)
        .filter(|&t| waiting[t] == 0)
        .map(|t| Ready {
            rank: rank[t],
            topo: topo_pos[t],
            task: t,
        })
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Ready { task, .. }) = heap.pop() {
        order.push(task);
        for &(c, _) in p.adj.succs(task) {
            waiting[c] -= 1;
            if waiting[c] == 0 {
                heap.push(Ready {
                    rank: rank[c],
                    topo: topo_pos[c],
                    task: c,
                });
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::generate;

    #[test]
    fn inputs_arrive_on_every_server_when_each_server_alone_says_with_a_dispatch() {
        let g = generate::cholesky(4, 64);
        let m = 3;
        let etc = generate::random_etc(&g, m, 4.0, 1);
        let mut comm = CommModel::uniform(m, 0.01, 1e6)
            .unwrap()
            .with_dispatch(0.003)
            .unwrap();
        comm.set_link(2, 0, 0.2, 1e5).unwrap();
        let p = Problem::new(&g, &etc, &comm).unwrap();
        let mut plan = Plan::new(p.tasks(), m);
        for t in 0..p.tasks() {
            plan.place(t, (t * 7) % m, t as f64, t as f64 + 0.5 + (t % 3) as f64);
        }
        let mut all = vec![0.0; m];
        for t in 0..p.tasks() {
            plan.data_ready_all(&p, t, &mut all);
            let one: Vec<f64> = (0..m).map(|s| plan.data_ready(&p, t, s)).collect();
            assert_eq!(all, one, "task {t}");
        }
    }
}
