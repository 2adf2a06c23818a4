//! HEFT (Topcuoglu, Hariri & Wu 2002): tasks in decreasing upward rank, each to the server
//! where it finishes earliest, allowed to slip into an idle gap left earlier on a server.
//!
//! Cost: ranks O(N·M + E); placement O(E·M) for input arrival plus, per (task, slot), two
//! reads where no idle gap on the slot is long enough for the task, else a binary search and a
//! short forward scan over its busy intervals ([`Timelines`]).

use super::schedule::{Plan, Problem};
use super::timelines::Timelines;
use crate::graph::dag::{TaskGraph, TaskIdx};
use crate::graph::platform::{CommModel, EtcMatrix};
use crate::graph::{MapError, Mapping};

/// Maps `graph` by HEFT with insertion.
pub fn map(graph: &TaskGraph, etc: &EtcMatrix, comm: &CommModel) -> Result<Mapping, MapError> {
    let p = Problem::new(graph, etc, comm)?;
    let order = priority_order(&p);
    Ok(place_with_insertion(&p, &order, None).into_mapping())
}

/// Places tasks in `order` (each after its predecessors) on the server that minimises
/// finish time + `lookahead[t * servers + s]` (0 without one: HEFT; PEFT's optimistic cost
/// table otherwise), each task allowed into an idle gap left earlier on a slot.
pub(crate) fn place_with_insertion(
    p: &Problem,
    order: &[TaskIdx],
    lookahead: Option<&[f64]>,
) -> Plan {
    let (n, m, etc) = (p.tasks(), p.servers(), p.etc);
    let mut busy = Timelines::new(etc);
    let mut plan = Plan::new(n, m);
    let mut ready = vec![0.0; m];
    for &t in order {
        plan.data_ready_all(p, t, &mut ready);
        // (score, finish, start, lane)
        let mut best: Option<(f64, f64, f64, usize)> = None;
        let row = etc.row(t);
        for s in 0..m {
            let d = row[s];
            if !d.is_finite() {
                continue;
            }
            let ahead = lookahead.map_or(0.0, |o| o[t * m + s]);
            // No slot here starts before the inputs are in, so none scores below
            // `ready + d + ahead` nor finishes before `ready + d` (floating-point addition is
            // monotone): a server that cannot beat the best so far is skipped (a tie keeps the
            // earlier one).
            let (floor_finish, floor_score) = (ready[s] + d, ready[s] + d + ahead);
            if best
                .is_some_and(|b| floor_score > b.0 || (floor_score == b.0 && floor_finish >= b.1))
            {
                continue;
            }
            for lane in busy.lanes_of(s) {
                let start = busy.earliest_start(lane, ready[s], d);
                let finish = start + d;
                let score = finish + ahead;
                if best.is_none_or(|b| score < b.0 || (score == b.0 && finish < b.1)) {
                    best = Some((score, finish, start, lane));
                }
            }
        }
        // Problem::new guarantees a feasible server for every task.
        let Some((_, finish, start, lane)) = best else {
            unreachable!("task {t} has a feasible server")
        };
        busy.occupy(lane, start, finish);
        plan.place(t, busy.server_of(lane), start, finish);
    }
    plan
}

/// Tasks by decreasing upward rank; ties by topological position, so (ranks never increasing
/// along an edge) every task comes after its predecessors.
pub(crate) fn priority_order(p: &Problem) -> Vec<TaskIdx> {
    let rank = upward_ranks(p);
    let mut topo_pos = vec![0usize; p.tasks()];
    for (i, &t) in p.adj.topo.iter().enumerate() {
        topo_pos[t] = i;
    }
    let mut order = p.adj.topo.clone();
    order.sort_by(|&a, &b| {
        rank[b]
            .total_cmp(&rank[a])
            .then(topo_pos[a].cmp(&topo_pos[b]))
    });
    order
}

/// rank_u(t) = mean ETC of t over the servers that can run it + max over successors of
/// (mean transfer of the edge + rank_u(successor)).
pub(crate) fn upward_ranks(p: &Problem) -> Vec<f64> {
    let (lat, spb) = p.comm.mean_link();
    let lat = lat + p.comm.dispatch_s();
    let mean_etc = p.etc.per_task(|row| {
        let (sum, count) = row
            .iter()
            .filter(|v| v.is_finite())
            .fold((0.0, 0usize), |(s, c), v| (s + v, c + 1));
        if count > 0 { sum / count as f64 } else { 0.0 }
    });
    let mut rank = vec![0.0; p.tasks()];
    for &t in p.adj.topo.iter().rev() {
        let tail = p
            .adj
            .succs(t)
            .iter()
            .map(|&(c, bytes)| lat + bytes as f64 * spb + rank[c])
            .fold(0.0, f64::max);
        rank[t] = mean_etc[t] + tail;
    }
    rank
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;
    use crate::graph::replay::replay;

    #[test]
    fn insertion_fills_a_gap_before_an_already_placed_task() {
        // a -> b across servers forces b late on s0; c ranks below b, so it is placed after b,
        // and goes into the idle time before it rather than after it.
        let mut g = TaskGraph::new();
        let a = g.add_task(Task::new("a", "x", 1.0));
        let b = g.add_task(Task::new("b", "x", 1.0));
        let c = g.add_task(Task::new("c", "x", 1.0));
        g.add_edge(a, b, 0).unwrap();
        let inf = f64::INFINITY;
        #[rustfmt::skip]
        let etc = EtcMatrix::new(3, 2, vec![
            inf, 10.0, // a only on s1: 0..10
            5.0, inf,  // b only on s0: after a's output arrives at 10 + 1
            3.0, inf,  // c only on s0, rank 3 < b's 5: placed after b, inserted before it
        ]).unwrap();
        let comm = CommModel::uniform(2, 1.0, f64::INFINITY).unwrap();
        let map = map(&g, &etc, &comm).unwrap();
        assert_eq!(map.order[0], [c, b]);
        let r = replay(&g, &etc, &comm, &map).unwrap();
        assert_eq!(r.task_finish, [10.0, 16.0, 3.0]);
    }

    #[test]
    fn never_picks_an_infeasible_server_even_if_fastest_elsewhere() {
        let mut g = TaskGraph::new();
        g.add_task(Task::new("dark", "darkmatter", 1.0));
        let etc = EtcMatrix::new(1, 3, vec![f64::INFINITY, 9.0, 5.0]).unwrap();
        let m = map(&g, &etc, &CommModel::free(3)).unwrap();
        assert_eq!(m.server_of, [2]);
        let etc = EtcMatrix::new(1, 2, vec![f64::INFINITY; 2]).unwrap();
        assert_eq!(
            map(&g, &etc, &CommModel::free(2)),
            Err(MapError::Infeasible {
                task: "dark".into()
            })
        );
    }
}
