//! Round robin: tasks in submission order, servers in turn, skipping servers that cannot run
//! the task. Blind to speed; the baseline the benchmarks must beat.

use super::schedule::{Lanes, Plan, Problem};
use crate::graph::dag::TaskGraph;
use crate::graph::platform::{CommModel, EtcMatrix};
use crate::graph::{MapError, Mapping};

/// Maps `graph` round robin.
pub fn map(graph: &TaskGraph, etc: &EtcMatrix, comm: &CommModel) -> Result<Mapping, MapError> {
    let p = Problem::new(graph, etc, comm)?;
    let (n, m) = (p.tasks(), p.servers());
    let mut plan = Plan::new(n, m);
    let mut lanes = Lanes::new(etc);
    let mut next = 0usize;
    for &t in &p.adj.topo {
        // Problem::new guarantees some server can run t.
        let Some(s) = (0..m).map(|k| (next + k) % m).find(|&s| etc.feasible(t, s)) else {
            unreachable!("task {t} has a feasible server")
        };
        next = (s + 1) % m;
        let start = plan.data_ready(&p, t, s).max(lanes.available(s));
        let finish = start + etc.get(t, s);
        lanes.occupy(s, finish);
        plan.place(t, s, start, finish);
    }
    Ok(plan.into_mapping())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;

    #[test]
    fn rotates_and_skips_infeasible_servers() {
        let mut g = TaskGraph::new();
        for i in 0..5 {
            g.add_task(Task::new(format!("t{i}"), "x", 1.0));
        }
        let inf = f64::INFINITY;
        #[rustfmt::skip]
        let etc = EtcMatrix::new(5, 3, vec![
            1.0, 1.0, 1.0,
            1.0, 1.0, 1.0,
            1.0, 1.0, inf,  // would be s2's turn: skipped to s0
            1.0, 1.0, 1.0,
            1.0, 1.0, 1.0,
        ]).unwrap();
        let m = map(&g, &etc, &CommModel::free(3)).unwrap();
        assert_eq!(m.server_of, [0, 1, 0, 1, 2]);
    }
}
