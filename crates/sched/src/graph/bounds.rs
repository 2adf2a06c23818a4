//! Bounds on any mapping's makespan (seed 002 §1.4 and the Eager–Zahorjan–Lazowska average-
//! parallelism bounds): no mapping beats the critical path with every task at its best time,
//! nor the total best-case work spread perfectly over every slot.

use super::dag::{GraphError, TaskGraph};
use super::platform::EtcMatrix;

/// The longest path through `graph` when task `t` takes `task_s[t]` seconds and transfers are
/// free: what the graph takes on unlimited servers (Adve's T∞).
pub fn critical_path_s(graph: &TaskGraph, task_s: &[f64]) -> Result<f64, GraphError> {
    let adj = graph.adjacency()?;
    let mut finish = vec![0.0f64; graph.len()];
    let mut longest = 0.0f64;
    for &t in &adj.topo {
        let ready = adj
            .preds(t)
            .iter()
            .map(|&(p, _)| finish[p])
            .fold(0.0, f64::max);
        finish[t] = ready + task_s[t];
        longest = longest.max(finish[t]);
    }
    Ok(longest)
}

/// Total work over the critical path (EZL's average parallelism A = T1 / T∞): how many servers
/// the graph can keep busy on average; 0 when the critical path is 0.
pub fn average_parallelism(graph: &TaskGraph, task_s: &[f64]) -> Result<f64, GraphError> {
    let cp = critical_path_s(graph, task_s)?;
    let total: f64 = task_s.iter().sum();
    Ok(if cp > 0.0 { total / cp } else { 0.0 })
}

/// Lower bounds and shape figures for a graph on a platform, with each task at its best time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    /// Critical path with best-case task times and free transfers.
    pub critical_path_s: f64,
    /// Sum of best-case task times.
    pub total_work_s: f64,
    /// `total_work_s / critical_path_s`.
    pub average_parallelism: f64,
    /// `max(critical path, total work ÷ slots)`: no mapping's makespan is below it.
    pub lower_bound_s: f64,
}

impl Bounds {
    /// Bounds for `graph` with times from `etc` (infinite for a task no server can run).
    pub fn of(graph: &TaskGraph, etc: &EtcMatrix) -> Result<Bounds, GraphError> {
        let best = etc.min_per_task();
        let critical_path_s = critical_path_s(graph, &best)?;
        let total_work_s: f64 = best.iter().sum();
        let slots = etc.total_slots().max(1) as f64;
        Ok(Bounds {
            critical_path_s,
            total_work_s,
            average_parallelism: if critical_path_s > 0.0 {
                total_work_s / critical_path_s
            } else {
                0.0
            },
            lower_bound_s: critical_path_s.max(total_work_s / slots),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;

    #[test]
    fn diamond_critical_path_and_parallelism() {
        let mut g = TaskGraph::new();
        for n in ["a", "b", "c", "d"] {
            g.add_task(Task::new(n, "svc", 1.0));
        }
        for (a, b) in [(0, 1), (0, 2), (1, 3), (2, 3)] {
            g.add_edge(a, b, 1).unwrap();
        }
        let t = [1.0, 5.0, 2.0, 1.0];
        assert_eq!(critical_path_s(&g, &t).unwrap(), 7.0);
        assert_eq!(average_parallelism(&g, &t).unwrap(), 9.0 / 7.0);
        let etc = EtcMatrix::new(4, 2, vec![1.0, 9.0, 5.0, 6.0, 3.0, 2.0, 1.0, 1.0]).unwrap();
        let b = Bounds::of(&g, &etc).unwrap();
        assert_eq!(b.critical_path_s, 7.0);
        assert_eq!(b.total_work_s, 9.0);
        assert_eq!(b.lower_bound_s, 7.0);
    }
}
