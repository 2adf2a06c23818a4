//! MCT (minimum completion time), online: tasks in submission order (topological where the
//! edges require it), each to the server where it would finish soonest given what is already
//! placed. What the agent does for calls arriving one at a time.

use super::schedule::{Lanes, Plan, Problem, append_finish};
use crate::graph::dag::TaskGraph;
use crate::graph::platform::{CommModel, EtcMatrix};
use crate::graph::{MapError, Mapping};

/// Maps `graph` by MCT in submission order.
pub fn map(graph: &TaskGraph, etc: &EtcMatrix, comm: &CommModel) -> Result<Mapping, MapError> {
    let p = Problem::new(graph, etc, comm)?;
    Ok(online(&p))
}

/// MCT over an already checked problem (also what constant-speed runs on its own estimates).
pub(crate) fn online(p: &Problem) -> Mapping {
    let (n, m) = (p.tasks(), p.servers());
    let mut plan = Plan::new(n, m);
    let mut lanes = Lanes::new(p.etc);
    let mut ready = vec![0.0; m];
    for &t in &p.adj.topo {
        plan.data_ready_all(p, t, &mut ready);
        let mut best: Option<(f64, f64, usize)> = None;
        for (s, &r) in ready.iter().enumerate() {
            if let Some((finish, start)) = append_finish(p.etc, &lanes, t, s, r)
                && best.is_none_or(|b| finish < b.0)
            {
                best = Some((finish, start, s));
            }
        }
        // Problem::new guarantees a feasible server for every task.
        let Some((finish, start, s)) = best else {
            unreachable!("task {t} has a feasible server")
        };
        lanes.occupy(s, finish);
        plan.place(t, s, start, finish);
    }
    plan.into_mapping()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;

    #[test]
    fn each_task_in_turn_to_its_earliest_finish_including_transfers() {
        let mut g = TaskGraph::new();
        let a = g.add_task(Task::new("a", "x", 1.0));
        let b = g.add_task(Task::new("b", "x", 1.0));
        g.add_edge(a, b, 2_000_000).unwrap();
        // b is a bit faster on s1, but a's 2 MB would take 2 s to get there.
        let etc = EtcMatrix::new(2, 2, vec![1.0, 3.0, 2.0, 1.5]).unwrap();
        let comm = CommModel::uniform(2, 0.0, 1e6).unwrap();
        let m = map(&g, &etc, &comm).unwrap();
        assert_eq!(m.server_of, [0, 0]);
        // With free transfers it moves.
        let m = map(&g, &etc, &CommModel::free(2)).unwrap();
        assert_eq!(m.server_of, [0, 1]);
    }
}
