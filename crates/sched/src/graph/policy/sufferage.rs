//! Sufferage: of the ready tasks, place the one that would suffer most if denied its best server
//! (second-best minus best completion time), on that best server; repeat. Tasks only one server
//! can run suffer infinitely and go first.
//!
//! This is the one-task-per-step variant; the original commits a whole round of non-conflicting
//! picks at once, which differs only in tie-breaking between rounds.

use super::batch::{self, Rule};
use super::schedule::Problem;
use crate::graph::dag::TaskGraph;
use crate::graph::platform::{CommModel, EtcMatrix};
use crate::graph::{MapError, Mapping};

/// Maps `graph` by sufferage over the ready set.
pub fn map(graph: &TaskGraph, etc: &EtcMatrix, comm: &CommModel) -> Result<Mapping, MapError> {
    batch::map(&Problem::new(graph, etc, comm)?, Rule::Sufferage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;
    use crate::graph::replay::replay;

    #[test]
    fn the_task_that_suffers_most_gets_its_server() {
        let mut g = TaskGraph::new();
        for n in ["flexible", "picky"] {
            g.add_task(Task::new(n, "x", 1.0));
        }
        #[rustfmt::skip]
        let etc = EtcMatrix::new(2, 2, vec![
            2.0, 2.5,  // flexible: suffers 0.5
            3.0, 9.0,  // picky: suffers 6
        ]).unwrap();
        let comm = CommModel::free(2);
        let m = map(&g, &etc, &comm).unwrap();
        assert_eq!(m.server_of, [1, 0]);
        assert_eq!(replay(&g, &etc, &comm, &m).unwrap().makespan_s, 3.0);
        // Min-min takes the flexible task first and pushes the picky one to 5.
        let mm = super::super::min_min::map(&g, &etc, &comm).unwrap();
        assert_eq!(replay(&g, &etc, &comm, &mm).unwrap().makespan_s, 5.0);
    }
}
