//! PEFT (Arabnejad & Barbosa 2014): HEFT with a one-table lookahead. The optimistic cost table
//! OCT(t, s) is how long the rest of the graph below `t` takes at best if `t` runs on `s`
//! (each successor on its best server, paying the mean transfer when that server is another);
//! tasks go by decreasing mean OCT, each to the server minimising finish + OCT. HEFT picks the
//! earliest finish now; PEFT declines a fast server whose successors would then have to run
//! far away or on servers that are slow for them — what crossing speed functions punish.
//!
//! Cost: the table is O(E·M) (per edge, the successor's best server once, then one pass over
//! the servers), N·M floats; placement is HEFT's (`heft::place_with_insertion`).

use super::heft::place_with_insertion;
use super::schedule::{Problem, ready_order};
use crate::graph::dag::{TaskGraph, TaskIdx};
use crate::graph::platform::{CommModel, EtcMatrix};
use crate::graph::{MapError, Mapping};

/// Maps `graph` by PEFT with insertion.
pub fn map(graph: &TaskGraph, etc: &EtcMatrix, comm: &CommModel) -> Result<Mapping, MapError> {
    let p = Problem::new(graph, etc, comm)?;
    let oct = optimistic_cost_table(&p);
    let order = priority_order(&p, &oct);
    Ok(place_with_insertion(&p, &order, Some(&oct)).into_mapping())
}

/// OCT(t, s), row-major (`t * servers + s`); 0 for tasks without successors.
pub(crate) fn optimistic_cost_table(p: &Problem) -> Vec<f64> {
    let m = p.servers();
    let (lat, spb) = p.comm.mean_link();
    let dispatch = p.comm.dispatch_s();
    let mut oct = vec![0.0; p.tasks() * m];
    // Per successor c: OCT(c, w) + ETC(c, w), and its minimum over w.
    let mut via = vec![0.0; m];
    for &t in p.adj.topo.iter().rev() {
        for &(c, bytes) in p.adj.succs(t) {
            let mut best = f64::INFINITY;
            for (w, v) in via.iter_mut().enumerate() {
                *v = oct[c * m + w] + p.etc.get(c, w);
                best = best.min(*v);
            }
            let moved = best + lat + bytes as f64 * spb;
            for (s, v) in via.iter().enumerate() {
                // Staying on s costs no transfer; any other server costs the mean one. Either
                // way the edge costs its dispatch.
                let cost = dispatch + v.min(moved);
                let cell = &mut oct[t * m + s];
                *cell = cell.max(cost);
            }
        }
    }
    oct
}

/// Ready tasks by decreasing rank_oct (mean OCT over the servers that can run the task). The
/// mean OCT may rise along an edge, so unlike HEFT's rank it is not a topological order by
/// itself: the ready list keeps every task after its predecessors.
fn priority_order(p: &Problem, oct: &[f64]) -> Vec<TaskIdx> {
    let (n, m) = (p.tasks(), p.servers());
    let rank: Vec<f64> = (0..n)
        .map(|t| {
            let (sum, count) = (0..m)
                .filter(|&s| p.etc.feasible(t, s))
                .fold((0.0, 0usize), |(a, c), s| (a + oct[t * m + s], c + 1));
            if count > 0 { sum / count as f64 } else { 0.0 }
        })
        .collect();
    ready_order(p, &rank)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;
    use crate::graph::replay::replay;

    #[test]
    fn oct_is_the_best_remaining_path_with_mean_transfers() {
        // a -> b; b takes 1 s on s0, 5 s on s1; the transfer costs 2 s.
        let mut g = TaskGraph::new();
        let a = g.add_task(Task::new("a", "x", 1.0));
        let b = g.add_task(Task::new("b", "x", 1.0));
        g.add_edge(a, b, 0).unwrap();
        let etc = EtcMatrix::new(2, 2, vec![1.0, 1.0, 1.0, 5.0]).unwrap();
        let comm = CommModel::uniform(2, 2.0, f64::INFINITY).unwrap();
        let p = Problem::new(&g, &etc, &comm).unwrap();
        let oct = optimistic_cost_table(&p);
        // On s0, b stays: 1. On s1, b moves to s0 (2 + 1 = 3) rather than stay (5).
        assert_eq!(oct, [1.0, 3.0, 0.0, 0.0]);
    }

    #[test]
    fn looks_ahead_past_a_server_fast_now_but_slow_next() {
        // a is a bit faster on s1, but its successor b is much faster on s0 and the transfer
        // is costly: HEFT puts a on s1 and pays; PEFT keeps the chain on s0.
        let mut g = TaskGraph::new();
        let a = g.add_task(Task::new("a", "x", 1.0));
        let b = g.add_task(Task::new("b", "x", 1.0));
        g.add_edge(a, b, 0).unwrap();
        let etc = EtcMatrix::new(2, 2, vec![2.0, 1.5, 1.0, 9.0]).unwrap();
        let comm = CommModel::uniform(2, 3.0, f64::INFINITY).unwrap();
        let peft = map(&g, &etc, &comm).unwrap();
        assert_eq!(peft.server_of, [0, 0]);
        assert_eq!(replay(&g, &etc, &comm, &peft).unwrap().makespan_s, 3.0);
        let heft = super::super::heft::map(&g, &etc, &comm).unwrap();
        assert_eq!(heft.server_of, [1, 0]);
        assert_eq!(replay(&g, &etc, &comm, &heft).unwrap().makespan_s, 5.5);
    }
}
