//! The discrete-event execution of a mapping on virtual time.
//!
//! Two kinds of event drive it: a task's inputs have all arrived (`Ready`), and a task ends
//! (`Finish`). On either, the server concerned starts as many tasks as it can, in its order: the
//! next task starts when its inputs are there, a slot ("lane") is free and the task before it in
//! the order has started — the rule `gridwise_sched::replay` applies, so with availability 1
//! everywhere both give the same times to the bit. What the replay cannot do is availability:
//! a started task's full-speed time is stretched over the server's trace
//! ([`LoadTrace::finish`](crate::LoadTrace::finish)), which fixes its end event.
//!
//! Transfers are not events of their own: links do not contend here, so an input arrives at
//! producer end + transfer time, and a task's last input fixes its `Ready` time.

use crate::platform::Platform;
use crate::workload::Workload;
use gridwise_sched::graph::{Slot, earliest_lane};
use gridwise_sched::{GraphError, Mapping, TaskIdx};
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use thiserror::Error;

/// What a simulated execution did.
#[derive(Clone, Debug, PartialEq)]
pub struct SimRun {
    /// When the last task ended (0 for no tasks).
    pub makespan_s: f64,
    /// Every server's tasks in the order they started.
    pub per_server: Vec<Vec<Slot>>,
    /// When each task ended, by task index.
    pub task_finish: Vec<f64>,
    /// Per server, seconds its slots were busy ÷ its slots (so at most the makespan).
    pub busy_s: Vec<f64>,
    /// Events processed: two per task (its inputs ready, its end).
    pub events: usize,
}

/// Why a mapping cannot be simulated.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum EngineError {
    /// The graph is invalid (a cycle).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The mapping does not place every task once on a server of this platform.
    #[error("invalid mapping: {reason}")]
    Mapping { reason: String },
    /// A task placed on a server that cannot run it.
    #[error(
        "task {task:?} is mapped to server {server}, which cannot run it (no speed for its service, or its size does not fit)"
    )]
    Infeasible {
        task: String,
        /// The server's name.
        server: String,
    },
    /// The server orders wait on each other in a circle.
    #[error(
        "deadlock: server {server} runs {task:?} next, but it needs {waits_for:?}, which never finishes under these server orders"
    )]
    Deadlock {
        /// The server's name.
        server: String,
        /// Its next task.
        task: String,
        /// A predecessor that never ends.
        waits_for: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ready,
    Finish,
}

/// An event at `time`; `seq` keeps the order of simultaneous events deterministic.
#[derive(Clone, Copy, Debug)]
struct Event {
    time: f64,
    seq: u64,
    kind: Kind,
    task: TaskIdx,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Event {}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        self.time
            .total_cmp(&other.time)
            .then(self.seq.cmp(&other.seq))
    }
}

/// Checks `mapping` places every task of `w` exactly once, on the server whose order lists it.
fn validate(p: &Platform, w: &Workload, mapping: &Mapping) -> Result<(), EngineError> {
    let (n, m) = (w.len(), p.servers());
    let bad = |reason: String| Err(EngineError::Mapping { reason });
    if mapping.server_of.len() != n || mapping.order.len() != m {
        return bad(format!(
            "{} placements and {} server orders for {n} tasks on {m} servers",
            mapping.server_of.len(),
            mapping.order.len()
        ));
    }
    let mut listed = vec![false; n];
    for (s, list) in mapping.order.iter().enumerate() {
        for &t in list {
            if t >= n || mapping.server_of[t] != s || std::mem::replace(&mut listed[t], true) {
                return bad(format!(
                    "server {} lists task #{t}, which is out of range, placed elsewhere or listed twice",
                    p.names()[s]
                ));
            }
        }
    }
    if let Some(t) = listed.iter().position(|l| !l) {
        return bad(format!(
            "task {:?} is on no server's order",
            w.graph.task(t).name
        ));
    }
    Ok(())
}

/// Executes `mapping` of `w` on `p` in virtual time.
pub fn simulate(p: &Platform, w: &Workload, mapping: &Mapping) -> Result<SimRun, EngineError> {
    validate(p, w, mapping)?;
    let (n, m) = (w.len(), p.servers());
    let adj = w.graph.adjacency()?;
    let comm = p.comm_model();
    let mut full_s = vec![0.0; n];
    for (t, &s) in mapping.server_of.iter().enumerate() {
        full_s[t] = p.exec_s(w, t, s);
        if !full_s[t].is_finite() {
            return Err(EngineError::Infeasible {
                task: w.graph.task(t).name.clone(),
                server: p.names()[s].clone(),
            });
        }
    }

    let mut missing: Vec<usize> = (0..n).map(|t| adj.preds(t).len()).collect();
    let mut ready_at = vec![0.0f64; n];
    let mut arrived = vec![false; n];
    let mut finish = vec![f64::NAN; n];
    let mut next = vec![0usize; m];
    let mut lanes: Vec<Vec<f64>> = p.slots().into_iter().map(|k| vec![0.0; k]).collect();
    let mut per_server: Vec<Vec<Slot>> = mapping
        .order
        .iter()
        .map(|l| Vec::with_capacity(l.len()))
        .collect();
    let mut busy = vec![0.0; m];
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |heap: &mut BinaryHeap<Reverse<Event>>, time, kind, task| {
        heap.push(Reverse(Event {
            time,
            seq,
            kind,
            task,
        }));
        seq += 1;
    };
    for t in (0..n).filter(|&t| missing[t] == 0) {
        push(&mut heap, 0.0, Kind::Ready, t);
    }

    let mut events = 0usize;
    let mut started = 0usize;
    while let Some(Reverse(ev)) = heap.pop() {
        events += 1;
        let now = ev.time;
        let t = ev.task;
        match ev.kind {
            Kind::Ready => arrived[t] = true,
            Kind::Finish => {
                let from = mapping.server_of[t];
                for &(c, bytes) in adj.succs(t) {
                    let at = finish[t] + comm.transfer_s(from, mapping.server_of[c], bytes);
                    ready_at[c] = ready_at[c].max(at);
                    missing[c] -= 1;
                    if missing[c] == 0 {
                        push(&mut heap, ready_at[c], Kind::Ready, c);
                    }
                }
            }
        }
        // Start what the server of `t` can start now, in its order.
        let s = mapping.server_of[t];
        while let Some(&u) = mapping.order[s].get(next[s]) {
            if !arrived[u] {
                break;
            }
            // The earliest-free lane, lowest index on ties: the replay's choice.
            let (lane, free) = earliest_lane(&lanes[s]);
            if free > now {
                break;
            }
            let end = p.availability(s).finish(now, full_s[u]);
            lanes[s][lane] = end;
            finish[u] = end;
            busy[s] += end - now;
            per_server[s].push(Slot {
                task: u,
                lane,
                start_s: now,
                end_s: end,
            });
            next[s] += 1;
            started += 1;
            push(&mut heap, end, Kind::Finish, u);
        }
    }
    if started < n {
        return Err(deadlock(p, w, &adj, mapping, &next, &finish));
    }
    let slots = p.slots();
    Ok(SimRun {
        makespan_s: finish.iter().copied().fold(0.0, f64::max),
        per_server,
        task_finish: finish,
        busy_s: busy
            .iter()
            .zip(&slots)
            .map(|(b, &k)| b / k as f64)
            .collect(),
        events,
    })
}

/// Names a server whose next task waits for an input that never comes.
fn deadlock(
    p: &Platform,
    w: &Workload,
    adj: &gridwise_sched::graph::Adjacency,
    mapping: &Mapping,
    next: &[usize],
    finish: &[f64],
) -> EngineError {
    for (s, list) in mapping.order.iter().enumerate() {
        let Some(&u) = list.get(next[s]) else {
            continue;
        };
        if let Some(&(q, _)) = adj.preds(u).iter().find(|(q, _)| finish[*q].is_nan()) {
            return EngineError::Deadlock {
                server: p.names()[s].clone(),
                task: w.graph.task(u).name.clone(),
                waits_for: w.graph.task(q).name.clone(),
            };
        }
    }
    EngineError::Mapping {
        reason: "the server orders never let some task start".into(),
    }
}
