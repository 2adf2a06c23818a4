//! Deterministic replay of a mapping (seed 002 §1.4, Fig. 4.1): with known task times and a
//! fixed per-server order there is exactly one execution, and walking it predicts the makespan
//! and every server's timeline.
//!
//! Adve's event loop advances time from completion to completion; with a fixed order per server
//! the same execution falls out of one pass in dependency order, because a task's start depends
//! only on its inputs' arrival and on the tasks before it on its server:
//! `start = max(inputs arrived, a slot free, previous task on the server started)`. That is
//! O(N + E) (plus O(log slots) per task), and an order that cannot run shows up as tasks the
//! pass never reaches: a deadlock.
//!
//! Where transfers between sites share a path ([`CommModel::with_sites`]), each books the path
//! in turn, so tasks are taken in the order they are released (O(log N) more each) and a
//! transfer waits for the ones on its path before it.

use super::Mapping;
use super::dag::{GraphError, TaskGraph, TaskIdx};
use super::platform::{CommModel, EtcMatrix, ShapeMismatch, check_shapes};
use super::sites::book;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use thiserror::Error;

/// One task on a server's timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slot {
    pub task: TaskIdx,
    /// Which of the server's concurrent slots ran it (always 0 on a one-slot server).
    pub lane: usize,
    /// When it starts, seconds from the start of the graph.
    pub start_s: f64,
    /// `start_s` plus the task's ETC on this server, on the same clock.
    pub end_s: f64,
}

/// The predicted execution of a mapping.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// When the last task ends (0 for an empty graph).
    pub makespan_s: f64,
    /// Every server's tasks in the order it runs them.
    pub per_server: Vec<Vec<Slot>>,
    /// When each task ends, by task index.
    pub task_finish: Vec<f64>,
}

/// The lane that frees up first (lowest index on ties) and when, given each lane's free time:
/// the lane the replay (and anything that must agree with it) runs the next task in.
pub fn earliest_lane(lanes: &[f64]) -> (usize, f64) {
    lanes.iter().copied().enumerate().fold(
        (0, f64::INFINITY),
        |b, (i, f)| if f < b.1 { (i, f) } else { b },
    )
}

/// Why a mapping cannot be replayed.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ReplayError {
    /// The graph itself is invalid.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The inputs disagree on how many tasks or servers there are.
    #[error(transparent)]
    Shape(#[from] ShapeMismatch),
    /// The mapping does not place every task exactly once, on the server its order lists it.
    #[error("invalid mapping: {reason}")]
    Mapping { reason: String },
    /// A task placed on a server that cannot run it.
    #[error("task {task:?} is mapped to server {server}, which cannot run it (infinite ETC)")]
    Infeasible { task: String, server: usize },
    /// The per-server orders wait on each other in a circle.
    #[error(
        "deadlock: server {server} runs {task:?} next, but it needs {waits_for:?}, which can never finish under these server orders"
    )]
    Deadlock {
        /// Server whose next task cannot start.
        server: usize,
        /// That task.
        task: String,
        /// A predecessor it waits for.
        waits_for: String,
    },
}

/// Checks that `mapping` is a placement of every task of `graph` on `servers` servers.
pub(crate) fn validate_mapping(
    graph: &TaskGraph,
    mapping: &Mapping,
    servers: usize,
) -> Result<(), ReplayError> {
    let n = graph.len();
    let bad = |reason: String| Err(ReplayError::Mapping { reason });
    if mapping.server_of.len() != n {
        return bad(format!(
            "server_of has {} entries for {n} tasks",
            mapping.server_of.len()
        ));
    }
    if mapping.order.len() != servers {
        return bad(format!(
            "order has {} server lists for {servers} servers",
            mapping.order.len()
        ));
    }
    let mut listed = vec![false; n];
    for (s, list) in mapping.order.iter().enumerate() {
        for &t in list {
            if t >= n {
                return bad(format!("server {s} lists task {t}; there are {n} tasks"));
            }
            if mapping.server_of[t] != s {
                return bad(format!(
                    "task {:?} is listed on server {s} but server_of says {}",
                    graph.task(t).name,
                    mapping.server_of[t]
                ));
            }
            if std::mem::replace(&mut listed[t], true) {
                return bad(format!("task {:?} is listed twice", graph.task(t).name));
            }
        }
    }
    if let Some(t) = listed.iter().position(|l| !l) {
        return bad(format!(
            "task {:?} is on no server's order",
            graph.task(t).name
        ));
    }
    Ok(())
}

/// Replays `mapping` of `graph` with task times from `etc` and transfer times from `comm`.
pub fn replay(
    graph: &TaskGraph,
    etc: &EtcMatrix,
    comm: &CommModel,
    mapping: &Mapping,
) -> Result<Replay, ReplayError> {
    let m = etc.servers();
    check_shapes(graph, etc, comm)?;
    validate_mapping(graph, mapping, m)?;
    let adj = graph.adjacency()?;
    for (t, &s) in mapping.server_of.iter().enumerate() {
        if !etc.feasible(t, s) {
            return Err(ReplayError::Infeasible {
                task: graph.task(t).name.clone(),
                server: s,
            });
        }
    }
    replay_unchecked(graph, &adj, etc, comm, mapping)
}

/// [`replay`] without the input checks, for callers that replay many mappings of one graph
/// (the local search): `adj` is `graph`'s adjacency, and `mapping` places every task once on a
/// feasible server. Server orders that wait on each other are still a [`ReplayError::Deadlock`].
pub(crate) fn replay_unchecked(
    graph: &TaskGraph,
    adj: &super::dag::Adjacency,
    etc: &EtcMatrix,
    comm: &CommModel,
    mapping: &Mapping,
) -> Result<Replay, ReplayError> {
    let n = graph.len();
    let m = etc.servers();

    // A task can start once its inputs are done and the task before it on its server started.
    let mut waiting: Vec<usize> = (0..n).map(|t| adj.preds(t).len()).collect();
    let mut pos = vec![0usize; n];
    for list in &mapping.order {
        for (i, &t) in list.iter().enumerate() {
            pos[t] = i;
            if i > 0 {
                waiting[t] += 1;
            }
        }
    }
    let mut lanes: Vec<Vec<f64>> = (0..m).map(|s| etc.free_at(s)).collect();
    let mut last_start = vec![0.0f64; m];
    let mut per_server: Vec<Vec<Slot>> = mapping
        .order
        .iter()
        .map(|l| Vec::with_capacity(l.len()))
        .collect();
    let mut finish = vec![f64::NAN; n];
    // Transfers that share a path book it in turn, so tasks must come in the order their
    // inputs are ready; without shared paths any order gives the same replay, and a stack is
    // cheapest.
    let sites = comm.sites();
    let mut spells: Vec<Vec<(f64, f64)>> = vec![Vec::new(); sites.map_or(0, |x| x.count().pow(2))];
    let mut ready = Ready::new(sites.is_some());
    for t in (0..n).filter(|&t| waiting[t] == 0) {
        ready.push(t, 0.0);
    }
    let mut done = 0usize;
    // Released once every predecessor has finished and the task before it on its server has
    // started: when all that it waits for is known.
    let release = |t: TaskIdx,
                   waiting: &mut Vec<usize>,
                   ready: &mut Ready,
                   finish: &[f64],
                   last_start: &[f64]| {
        waiting[t] -= 1;
        if waiting[t] == 0 {
            // Only the heap orders by it: the stack's replay (the local search's) skips it.
            let released = if ready.in_time_order() {
                adj.preds(t)
                    .iter()
                    .map(|&(p, _)| finish[p])
                    .fold(last_start[mapping.server_of[t]], f64::max)
            } else {
                0.0
            };
            ready.push(t, released);
        }
    };
    while let Some(t) = ready.pop() {
        let s = mapping.server_of[t];
        let mut start = last_start[s];
        // When the task is sent, if its inputs wait for that: once its last producer is done.
        let sent = comm.is_pulled_when_sent().then(|| {
            adj.preds(t)
                .iter()
                .map(|&(p, _)| finish[p])
                .fold(f64::NEG_INFINITY, f64::max)
                + comm.dispatch_s()
        });
        for &(p, bytes) in adj.preds(t) {
            let from = mapping.server_of[p];
            let arrives = match (sites.and_then(|x| x.path(from, s)), sent) {
                (Some(path), _) => {
                    let (latency_s, busy_s) = comm.link_parts(from, s, bytes);
                    let moves_at = sent.unwrap_or(finish[p] + comm.dispatch_s());
                    book(&mut spells[path], moves_at, busy_s) + busy_s + latency_s
                }
                // Summed in this order, the textbook replay is the simulator's to the bit.
                (None, None) => finish[p] + comm.transfer_s(from, s, bytes),
                (None, Some(at)) if from == s => at,
                (None, Some(at)) => {
                    let (latency_s, busy_s) = comm.link_parts(from, s, bytes);
                    at + latency_s + busy_s
                }
            };
            start = start.max(arrives);
        }
        // Slots are identical and starts on a server never decrease, so the earliest-free slot
        // is as good as any free one.
        let (lane, free) = earliest_lane(&lanes[s]);
        start = start.max(free);
        let end = start + etc.get(t, s);
        lanes[s][lane] = end;
        last_start[s] = start;
        finish[t] = end;
        per_server[s].push(Slot {
            task: t,
            lane,
            start_s: start,
            end_s: end,
        });
        done += 1;
        for &(c, _) in adj.succs(t) {
            release(c, &mut waiting, &mut ready, &finish, &last_start);
        }
        if let Some(&next) = mapping.order[s].get(pos[t] + 1) {
            release(next, &mut waiting, &mut ready, &finish, &last_start);
        }
    }
    if done < n {
        return Err(deadlock(graph, adj, mapping, &per_server, &finish));
    }
    let makespan_s = finish.iter().copied().fold(0.0, f64::max);
    Ok(Replay {
        makespan_s,
        per_server,
        task_finish: finish,
    })
}

/// Tasks whose predecessors are all placed: a stack, or, where transfers share paths, a heap
/// that yields the one released earliest.
enum Ready {
    Stack(Vec<TaskIdx>),
    Heap(BinaryHeap<Reverse<(Released, TaskIdx)>>),
}

/// A release time ordered by `total_cmp` (replay times are never NaN).
#[derive(Clone, Copy)]
struct Released(f64);

impl PartialEq for Released {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Released {}

impl PartialOrd for Released {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Released {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Ready {
    fn new(in_time_order: bool) -> Self {
        if in_time_order {
            Ready::Heap(BinaryHeap::new())
        } else {
            Ready::Stack(Vec::new())
        }
    }

    fn in_time_order(&self) -> bool {
        matches!(self, Ready::Heap(_))
    }

    fn push(&mut self, t: TaskIdx, released_s: f64) {
        match self {
            Ready::Stack(v) => v.push(t),
            Ready::Heap(h) => h.push(Reverse((Released(released_s), t))),
        }
    }

    fn pop(&mut self) -> Option<TaskIdx> {
        match self {
            Ready::Stack(v) => v.pop(),
            Ready::Heap(h) => h.pop().map(|Reverse((_, t))| t),
        }
    }
}

/// Names a server whose next task waits for an input that never comes.
fn deadlock(
    graph: &TaskGraph,
    adj: &super::dag::Adjacency,
    mapping: &Mapping,
    per_server: &[Vec<Slot>],
    finish: &[f64],
) -> ReplayError {
    for (s, list) in mapping.order.iter().enumerate() {
        let Some(&next) = list.get(per_server[s].len()) else {
            continue;
        };
        if let Some(&(p, _)) = adj.preds(next).iter().find(|(p, _)| finish[*p].is_nan()) {
            return ReplayError::Deadlock {
                server: s,
                task: graph.task(next).name.clone(),
                waits_for: graph.task(p).name.clone(),
            };
        }
    }
    ReplayError::Mapping {
        reason: "the server orders never let some task start".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;
    use crate::graph::sites::Sites;

    /// a -> c, b -> c with 1e6 bytes each.
    fn join() -> TaskGraph {
        let mut g = TaskGraph::new();
        for n in ["a", "b", "c"] {
            g.add_task(Task::new(n, "svc", 1.0));
        }
        g.add_edge(0, 2, 1_000_000).unwrap();
        g.add_edge(1, 2, 1_000_000).unwrap();
        g
    }

    #[test]
    fn join_waits_for_remote_input_transfer() {
        let g = join();
        let etc = EtcMatrix::new(3, 2, vec![2.0, 3.0, 4.0, 1.0, 1.0, 1.0]).unwrap();
        let comm = CommModel::uniform(2, 0.5, 1e6).unwrap();
        let map = Mapping {
            server_of: vec![0, 1, 0],
            order: vec![vec![0, 2], vec![1]],
        };
        let r = replay(&g, &etc, &comm, &map).unwrap();
        // a: 0..2 on s0; b: 0..1 on s1; c waits for b's 1 MB (0.5 + 1 s) => starts 2.5.
        assert_eq!(r.task_finish, [2.0, 1.0, 3.5]);
        assert_eq!(r.makespan_s, 3.5);
        assert_eq!(
            r.per_server[0][1],
            Slot {
                task: 2,
                lane: 0,
                start_s: 2.5,
                end_s: 3.5
            }
        );
    }

    #[test]
    fn inputs_pulled_when_sent_wait_for_the_last_producer() {
        // a (1 s) on s0 and b (3 s) on s1 feed c on s1; a's 1 MB takes 1.5 s to cross.
        let g = join();
        let etc = EtcMatrix::new(3, 2, vec![1.0, 1.0, 3.0, 3.0, 1.0, 1.0]).unwrap();
        let map = Mapping {
            server_of: vec![0, 1, 1],
            order: vec![vec![0], vec![1, 2]],
        };
        let comm = CommModel::uniform(2, 0.5, 1e6).unwrap();
        // Moving as it is made, a's output is on s1 at 2.5, before b ends: c starts at 3.
        assert_eq!(replay(&g, &etc, &comm, &map).unwrap().makespan_s, 4.0);
        // Pulled once c is sent, after b: 3 + 1.5, so c starts at 4.5.
        let sent = comm.pulled_when_sent();
        assert_eq!(replay(&g, &etc, &sent, &map).unwrap().makespan_s, 5.5);
    }

    #[test]
    fn transfers_between_two_sites_take_turns_on_their_path() {
        // a on s0 feeds b on s1 and c on s2; s1 and s2 form the other site, 1 MB at 1 MB/s.
        let mut g = TaskGraph::new();
        for n in ["a", "b", "c"] {
            g.add_task(Task::new(n, "svc", 1.0));
        }
        g.add_edge(0, 1, 1_000_000).unwrap();
        g.add_edge(0, 2, 1_000_000).unwrap();
        let etc = EtcMatrix::new(3, 3, vec![1.0; 9]).unwrap();
        let map = Mapping {
            server_of: vec![0, 1, 2],
            order: vec![vec![0], vec![1], vec![2]],
        };
        let comm = CommModel::uniform(3, 0.0, 1e6).unwrap();
        let apart = replay(&g, &etc, &comm, &map).unwrap();
        assert_eq!(apart.task_finish, [1.0, 3.0, 3.0]);
        let sites = Sites::new(&[0, 1, 1]);
        let shared = comm.clone().with_sites(sites).unwrap();
        let r = replay(&g, &etc, &shared, &map).unwrap();
        let mut later = r.task_finish[1..].to_vec();
        later.sort_by(f64::total_cmp);
        assert_eq!(later, [3.0, 4.0]);
        // Inside one site nothing is shared.
        let one = comm.with_sites(Sites::one(3)).unwrap();
        assert_eq!(replay(&g, &etc, &one, &map).unwrap(), apart);
    }

    #[test]
    fn slots_run_tasks_side_by_side_in_order() {
        let mut g = TaskGraph::new();
        for n in ["a", "b", "c"] {
            g.add_task(Task::new(n, "svc", 1.0));
        }
        let etc = EtcMatrix::new(3, 1, vec![3.0, 1.0, 1.0])
            .unwrap()
            .with_slots(vec![2])
            .unwrap();
        let map = Mapping {
            server_of: vec![0; 3],
            order: vec![vec![0, 1, 2]],
        };
        let r = replay(&g, &etc, &CommModel::free(1), &map).unwrap();
        assert_eq!(r.task_finish, [3.0, 1.0, 2.0]);
        assert_eq!(r.per_server[0][2].lane, 1);
    }

    #[test]
    fn order_against_dependencies_is_a_deadlock() {
        let g = join();
        let etc = EtcMatrix::new(3, 1, vec![1.0; 3]).unwrap();
        let map = Mapping {
            server_of: vec![0; 3],
            order: vec![vec![2, 0, 1]],
        };
        let err = replay(&g, &etc, &CommModel::free(1), &map).unwrap_err();
        assert_eq!(
            err,
            ReplayError::Deadlock {
                server: 0,
                task: "c".into(),
                waits_for: "a".into()
            }
        );
    }

    #[test]
    fn malformed_mappings_are_rejected() {
        let g = join();
        let etc = EtcMatrix::new(3, 2, vec![1.0, f64::INFINITY, 1.0, 1.0, 1.0, 1.0]).unwrap();
        let comm = CommModel::free(2);
        let cases = [
            (vec![0, 0], vec![vec![0, 1], vec![]], "server_of has 2"),
            (vec![0, 0, 0], vec![vec![0, 1], vec![]], "on no server"),
            (vec![0, 0, 0], vec![vec![0, 1, 2, 2], vec![]], "twice"),
            (
                vec![0, 0, 1],
                vec![vec![0, 1, 2], vec![]],
                "server_of says 1",
            ),
            (vec![1, 0, 0], vec![vec![1, 2], vec![0]], "cannot run"),
        ];
        for (server_of, order, msg) in cases {
            let err = replay(&g, &etc, &comm, &Mapping { server_of, order }).unwrap_err();
            assert!(err.to_string().contains(msg), "{err} / {msg}");
        }
    }
}
