//! Min-min: of the ready tasks, place the one that can finish soonest, at its minimum
//! completion time; repeat. Favours short tasks on their best servers.

use super::batch::{self, Rule};
use super::schedule::Problem;
use crate::graph::dag::TaskGraph;
use crate::graph::platform::{CommModel, EtcMatrix};
use crate::graph::{MapError, Mapping};

/// Maps `graph` by min-min over the ready set.
pub fn map(graph: &TaskGraph, etc: &EtcMatrix, comm: &CommModel) -> Result<Mapping, MapError> {
    batch::map(&Problem::new(graph, etc, comm)?, Rule::MinMin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;

    #[test]
    fn shortest_first_on_its_best_server() {
        let mut g = TaskGraph::new();
        for n in ["long", "short", "mid"] {
            g.add_task(Task::new(n, "x", 1.0));
        }
        #[rustfmt::skip]
        let etc = EtcMatrix::new(3, 2, vec![
            6.0, 7.0,
            1.0, 2.0,
            3.0, 3.5,
        ]).unwrap();
        let m = map(&g, &etc, &CommModel::free(2)).unwrap();
        // short -> s0 (1); mid -> s0 would end 4, s1 3.5 -> s1; long: s0 7, s1 10.5 -> s0.
        assert_eq!(m.server_of, [0, 0, 1]);
        assert_eq!(m.order, [vec![1, 0], vec![2]]);
    }
}
