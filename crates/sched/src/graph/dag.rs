//! The task graph: remote calls as vertices, data dependencies (bytes) as edges.
//!
//! Built freely with [`TaskGraph::add_task`] and [`TaskGraph::add_edge`]; acyclicity is checked
//! once, when a mapper or the replay asks for the [`Adjacency`], because checking on every edge
//! would cost O(E·(N+E)) on the large generated graphs.

use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use thiserror::Error;

/// Index of a task in its [`TaskGraph`]: the order it was added in (its submission order).
pub type TaskIdx = usize;

/// One remote call.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    /// A name unique enough for error messages and Gantt charts.
    pub name: String,
    /// The service it calls. Mapping never reads it (the ETC matrix already prices the task
    /// per server); simulators and reports do.
    pub service: String,
    /// Operations it performs (what a constant-speed model divides by a rate).
    pub work: f64,
    /// Bytes of memory it needs on the server that runs it; 0 (the default) fits anywhere.
    /// Read only by [`EtcMatrix::exclude_by_memory`](crate::graph::EtcMatrix::exclude_by_memory).
    pub mem_bytes: u64,
}

impl Task {
    /// A task with the given name, service and work, and no stated memory need.
    pub fn new(name: impl Into<String>, service: impl Into<String>, work: f64) -> Self {
        Task {
            name: name.into(),
            service: service.into(),
            work,
            mem_bytes: 0,
        }
    }

    /// The same task with a memory need.
    pub fn with_mem(mut self, mem_bytes: u64) -> Self {
        self.mem_bytes = mem_bytes;
        self
    }
}

/// What was wrong with a task graph.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum GraphError {
    /// An edge names a task that was never added.
    #[error("edge {from} -> {to} names task {missing}, but the graph has only {tasks} tasks")]
    UnknownTask {
        /// Source of the edge.
        from: TaskIdx,
        /// Target of the edge.
        to: TaskIdx,
        /// The index that does not exist.
        missing: TaskIdx,
        /// How many tasks the graph has.
        tasks: usize,
    },
    /// An edge from a task to itself.
    #[error("task {task:?} cannot depend on its own output")]
    SelfLoop { task: String },
    /// The dependencies go round in a circle, so no task on it can ever start.
    #[error("task graph has a cycle: {}", .path.join(" -> "))]
    Cycle {
        /// Task names along the cycle, first name repeated at the end.
        path: Vec<String>,
    },
}

/// A DAG of tasks whose edges carry the bytes the target needs from the source.
#[derive(Clone, Debug, Default)]
pub struct TaskGraph {
    g: DiGraph<Task, u64>,
}

impl TaskGraph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a task and returns its index (the number of tasks added before it).
    pub fn add_task(&mut self, task: Task) -> TaskIdx {
        self.g.add_node(task).index()
    }

    /// Declares that `to` needs `bytes` of `from`'s output. A second edge between the same pair
    /// adds its bytes to the first (two outputs of one call feeding another are one transfer).
    pub fn add_edge(&mut self, from: TaskIdx, to: TaskIdx, bytes: u64) -> Result<(), GraphError> {
        let tasks = self.len();
        for missing in [from, to] {
            if missing >= tasks {
                return Err(GraphError::UnknownTask {
                    from,
                    to,
                    missing,
                    tasks,
                });
            }
        }
        if from == to {
            return Err(GraphError::SelfLoop {
                task: self.g[NodeIndex::new(from)].name.clone(),
            });
        }
        let (a, b) = (NodeIndex::new(from), NodeIndex::new(to));
        match self.g.find_edge(a, b) {
            Some(e) => self.g[e] = self.g[e].saturating_add(bytes),
            None => {
                self.g.add_edge(a, b, bytes);
            }
        }
        Ok(())
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.g.node_count()
    }

    pub fn is_empty(&self) -> bool {
        self.g.node_count() == 0
    }

    /// Number of (merged) edges.
    pub fn edge_count(&self) -> usize {
        self.g.edge_count()
    }

    /// Whether the tasks are independent (a bag: no edges at all).
    pub fn is_bag(&self) -> bool {
        self.g.edge_count() == 0
    }

    /// The task at `idx`. Panics on an index the graph never returned.
    pub fn task(&self, idx: TaskIdx) -> &Task {
        &self.g[NodeIndex::new(idx)]
    }

    /// All tasks, in index order.
    pub fn tasks(&self) -> impl Iterator<Item = &Task> + '_ {
        self.g.node_weights()
    }

    /// All edges as `(from, to, bytes)`.
    pub fn edges(&self) -> impl Iterator<Item = (TaskIdx, TaskIdx, u64)> + '_ {
        self.g
            .raw_edges()
            .iter()
            .map(|e| (e.source().index(), e.target().index(), e.weight))
    }

    /// The underlying petgraph graph (node and edge indices equal task indices and edge order).
    pub fn inner(&self) -> &DiGraph<Task, u64> {
        &self.g
    }

    /// A topological order that keeps submission order wherever the edges allow it (so a graph
    /// recorded call by call is ordered exactly as recorded), or the cycle that prevents one.
    pub fn topo_order(&self) -> Result<Vec<TaskIdx>, GraphError> {
        Ok(self.adjacency()?.topo)
    }

    /// Checks the graph is acyclic and returns its adjacency in flat arrays, which is what the
    /// mappers and the replay walk (petgraph's linked edge lists are slower to scan repeatedly).
    pub fn adjacency(&self) -> Result<Adjacency, GraphError> {
        let n = self.len();
        let mut pred_start = vec![0usize; n + 1];
        let mut succ_start = vec![0usize; n + 1];
        for e in self.g.raw_edges() {
            pred_start[e.target().index() + 1] += 1;
            succ_start[e.source().index() + 1] += 1;
        }
        for i in 0..n {
            pred_start[i + 1] += pred_start[i];
            succ_start[i + 1] += succ_start[i];
        }
        let m = self.g.edge_count();
        let mut preds = vec![(0usize, 0u64); m];
        let mut succs = vec![(0usize, 0u64); m];
        let mut pf = pred_start.clone();
        let mut sf = succ_start.clone();
        for e in self.g.raw_edges() {
            let (s, t) = (e.source().index(), e.target().index());
            preds[pf[t]] = (s, e.weight);
            pf[t] += 1;
            succs[sf[s]] = (t, e.weight);
            sf[s] += 1;
        }
        let mut adj = Adjacency {
            pred_start,
            preds,
            succ_start,
            succs,
            topo: Vec::with_capacity(n),
        };
        // Kahn's algorithm with the smallest ready index first: deterministic, and the identity
        // order whenever the submission order is already topological.
        let mut indeg: Vec<usize> = (0..n).map(|t| adj.preds(t).len()).collect();
        let mut heap: BinaryHeap<Reverse<TaskIdx>> =
            (0..n).filter(|&t| indeg[t] == 0).map(Reverse).collect();
        while let Some(Reverse(t)) = heap.pop() {
            adj.topo.push(t);
            for &(s, _) in adj.succs(t) {
                indeg[s] -= 1;
                if indeg[s] == 0 {
                    heap.push(Reverse(s));
                }
            }
        }
        if adj.topo.len() < n {
            return Err(GraphError::Cycle {
                path: self.find_cycle(&indeg),
            });
        }
        Ok(adj)
    }

    /// Names along one cycle among the tasks Kahn's algorithm could not order. Every such task
    /// has an unordered predecessor, so walking predecessors must revisit a task: that is a cycle.
    fn find_cycle(&self, indeg: &[usize]) -> Vec<String> {
        let Some(start) = indeg.iter().position(|&d| d > 0) else {
            return Vec::new();
        };
        let mut seen_at = vec![usize::MAX; indeg.len()];
        let mut walk = Vec::new();
        let mut cur = start;
        while seen_at[cur] == usize::MAX {
            seen_at[cur] = walk.len();
            walk.push(cur);
            cur = self
                .g
                .neighbors_directed(NodeIndex::new(cur), Direction::Incoming)
                .map(|p| p.index())
                .find(|&p| indeg[p] > 0)
                .unwrap_or(cur);
        }
        // walk[seen_at[cur]..] is the cycle traversed backwards; print it along the edges,
        // starting from its earliest-submitted task so the message does not depend on the walk.
        let mut cycle: Vec<TaskIdx> = walk[seen_at[cur]..].iter().rev().copied().collect();
        if let Some(lowest) = (0..cycle.len()).min_by_key(|&i| cycle[i]) {
            cycle.rotate_left(lowest);
        }
        if let Some(&first) = cycle.first() {
            cycle.push(first);
        }
        cycle.iter().map(|&t| self.task(t).name.clone()).collect()
    }
}

/// Flat predecessor/successor lists of an acyclic [`TaskGraph`], plus a topological order.
#[derive(Clone, Debug)]
pub struct Adjacency {
    pred_start: Vec<usize>,
    preds: Vec<(TaskIdx, u64)>,
    succ_start: Vec<usize>,
    succs: Vec<(TaskIdx, u64)>,
    /// Tasks in topological order, submission order where the edges allow it.
    pub topo: Vec<TaskIdx>,
}

impl Adjacency {
    /// `(predecessor, bytes)` of task `t`.
    pub fn preds(&self, t: TaskIdx) -> &[(TaskIdx, u64)] {
        &self.preds[self.pred_start[t]..self.pred_start[t + 1]]
    }

    /// `(successor, bytes)` of task `t`.
    pub fn succs(&self, t: TaskIdx) -> &[(TaskIdx, u64)] {
        &self.succs[self.succ_start[t]..self.succ_start[t + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(names: &[&str]) -> TaskGraph {
        let mut g = TaskGraph::new();
        for n in names {
            g.add_task(Task::new(*n, "svc", 1.0));
        }
        g
    }

    #[test]
    fn topo_order_keeps_submission_order_when_possible() {
        let mut g = chain(&["a", "b", "c", "d"]);
        g.add_edge(0, 2, 10).unwrap();
        g.add_edge(1, 2, 10).unwrap();
        g.add_edge(2, 3, 10).unwrap();
        assert_eq!(g.topo_order().unwrap(), [0, 1, 2, 3]);
        assert!(!g.is_bag());
        // An edge against submission order moves only what it must.
        let mut g = chain(&["a", "b", "c"]);
        g.add_edge(2, 0, 1).unwrap();
        assert_eq!(g.topo_order().unwrap(), [1, 2, 0]);
    }

    #[test]
    fn cycle_is_rejected_and_named() {
        let mut g = chain(&["a", "b", "c", "d"]);
        g.add_edge(0, 1, 1).unwrap();
        g.add_edge(1, 2, 1).unwrap();
        g.add_edge(2, 3, 1).unwrap();
        g.add_edge(3, 1, 1).unwrap();
        let err = g.topo_order().unwrap_err();
        assert_eq!(
            err,
            GraphError::Cycle {
                path: vec!["b".into(), "c".into(), "d".into(), "b".into()]
            }
        );
        assert_eq!(err.to_string(), "task graph has a cycle: b -> c -> d -> b");
    }

    #[test]
    fn bad_edges_are_rejected() {
        let mut g = chain(&["a", "b"]);
        assert_eq!(
            g.add_edge(0, 0, 1),
            Err(GraphError::SelfLoop { task: "a".into() })
        );
        let err = g.add_edge(0, 5, 1).unwrap_err();
        assert!(err.to_string().contains("only 2 tasks"), "{err}");
    }

    #[test]
    fn duplicate_edges_merge_bytes_and_bag_has_none() {
        let mut g = chain(&["a", "b"]);
        assert!(g.is_bag());
        g.add_edge(0, 1, 3).unwrap();
        g.add_edge(0, 1, 4).unwrap();
        assert_eq!(g.edges().collect::<Vec<_>>(), [(0, 1, 7)]);
        let adj = g.adjacency().unwrap();
        assert_eq!(adj.preds(1), [(0, 7)]);
        assert_eq!(adj.succs(0), [(1, 7)]);
        assert!(adj.preds(0).is_empty());
    }
}
