//! Classic GridSolve: a task's time on a server is its work ÷ one benchmark rate per server,
//! whatever the task's size or memory pressure, and tasks go greedily (MCT, submission order)
//! to the minimum completion time under that estimate. The real ETC is consulted only to never
//! place a task where it cannot run; to model a GridSolve blind to memory too, pass an ETC
//! matrix without infinite entries.

use super::mct;
use super::schedule::Problem;
use crate::graph::dag::TaskGraph;
use crate::graph::platform::{CommModel, EtcMatrix};
use crate::graph::{MapError, Mapping};

/// Maps `graph` by MCT over `task.work / rates[server]`, one rate (operations/s) per server.
pub fn map(
    graph: &TaskGraph,
    etc: &EtcMatrix,
    comm: &CommModel,
    rates: &[f64],
) -> Result<Mapping, MapError> {
    Problem::new(graph, etc, comm)?;
    if rates.len() != etc.servers() {
        return Err(MapError::ConstantSpeed {
            reason: format!("{} rates given for {} servers", rates.len(), etc.servers()),
        });
    }
    if let Some(s) = rates.iter().position(|r| !(r.is_finite() && *r > 0.0)) {
        return Err(MapError::ConstantSpeed {
            reason: format!(
                "server {s} has rate {}; rates must be positive and finite",
                rates[s]
            ),
        });
    }
    if let Some(task) = graph
        .tasks()
        .find(|t| !(t.work.is_finite() && t.work >= 0.0))
    {
        return Err(MapError::ConstantSpeed {
            reason: format!(
                "task {:?} has work {}; work must be finite and >= 0",
                task.name, task.work
            ),
        });
    }
    let est = EtcMatrix::from_fn(graph.len(), etc.servers(), |t, s| {
        if etc.feasible(t, s) {
            gridwise_predict::constant_speed_s(graph.task(t).work, rates[s])
        } else {
            f64::INFINITY
        }
    })
    .and_then(|e| e.with_slots(etc.all_slots().to_vec()))
    .map_err(|e| MapError::ConstantSpeed {
        reason: e.to_string(),
    })?;
    Ok(mct::online(&Problem::new(graph, &est, comm)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;

    #[test]
    fn ignores_the_real_etc_except_feasibility() {
        let mut g = TaskGraph::new();
        g.add_task(Task::new("big", "barmatter", 100.0));
        // The real ETC says s1 is far better (s0 pages), but s0 has the higher benchmark rate.
        let etc = EtcMatrix::new(1, 2, vec![1000.0, 2.0]).unwrap();
        let m = map(&g, &etc, &CommModel::free(2), &[10.0, 5.0]).unwrap();
        assert_eq!(m.server_of, [0]);
        // ... unless s0 cannot run it at all.
        let etc = EtcMatrix::new(1, 2, vec![f64::INFINITY, 2.0]).unwrap();
        let m = map(&g, &etc, &CommModel::free(2), &[10.0, 5.0]).unwrap();
        assert_eq!(m.server_of, [1]);
    }

    #[test]
    fn bad_rates_are_rejected() {
        let mut g = TaskGraph::new();
        g.add_task(Task::new("t", "x", 1.0));
        let etc = EtcMatrix::new(1, 2, vec![1.0, 1.0]).unwrap();
        let comm = CommModel::free(2);
        assert!(map(&g, &etc, &comm, &[1.0]).is_err());
        let err = map(&g, &etc, &comm, &[1.0, 0.0]).unwrap_err();
        assert!(err.to_string().contains("server 1 has rate 0"), "{err}");
    }
}
