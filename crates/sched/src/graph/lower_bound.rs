//! The one place that decides which lower bound a makespan is compared with, for the agent's
//! plans (`graph predict`, `graph run`), `gridwise sim` and `gridwise bench schedule` alike.
//!
//! Every candidate holds for any mapping, so the best is their maximum, named by which one it
//! was:
//! - `critical_path`: the longest chain with every task at its best time, transfers free;
//! - `total_work`: every task at its best time, spread perfectly over all slots;
//! - `lp`: the LP relaxation of unrelated-machine makespan ([`lp_lower_bound`]): each server
//!   is `slots` machines of its speed (its load is at most slots × T), precedence ignored;
//! - `lp_window`: the same LP over the tasks that cannot start before `h` nor end later than
//!   `q` before the end (their head and tail: the longest chains before and after them at best
//!   times), plus `h + q`. Those tasks all run inside a window of length makespan − h − q, so
//!   the window must hold their LP load. It charges the ramp-up and ramp-down of a DAG, which
//!   the plain LP misses, and equals it at h = q = 0.
//!
//! The LPs are solved only where they are cheap: `lp` up to [`MAX_LP_BOUND_CELLS`] tasks ×
//! servers, `lp_window` (up to [`WINDOW_STEPS`]² small LPs) up to [`MAX_WINDOW_BOUND_CELLS`]
//! and [`MAX_WINDOW_BOUND_VARS`] exact LP variables (graphs of a few kinds of call, like a
//! tiled factorisation).

use super::bounds::Bounds;
use super::dag::{GraphError, TaskGraph};
use super::platform::EtcMatrix;
use super::policy::lp::{exact_variables, lp_lower_bound};
use std::fmt;

/// Tasks × servers above which the LP bound is skipped (its solve would cost over a second).
pub const MAX_LP_BOUND_CELLS: usize = 2_000_000;

/// Exact LP variables (task classes × feasible servers) above which the window bound is
/// skipped: it solves up to [`WINDOW_STEPS`]² LPs.
pub const MAX_WINDOW_BOUND_VARS: usize = 2_000;

/// Tasks × servers above which the window bound is skipped (each of its LPs copies its tasks'
/// rows): 560 × 16 (the Cholesky of `bench schedule`) takes ~40 ms, release build.
pub const MAX_WINDOW_BOUND_CELLS: usize = 100_000;

/// Head and tail thresholds tried, each, at evenly spaced ranks of the distinct values (fewer
/// miss the thresholds where the window bites: 6 found nothing above the plain LP on the
/// Cholesky scenarios, 24 adds 4–7%).
pub const WINDOW_STEPS: usize = 24;

/// Which bound is the best one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BoundKind {
    CriticalPath,
    TotalWork,
    Lp,
    LpWindow,
}

impl BoundKind {
    /// The name printed and written in JSON.
    pub fn name(self) -> &'static str {
        match self {
            BoundKind::CriticalPath => "critical_path",
            BoundKind::TotalWork => "total_work",
            BoundKind::Lp => "lp",
            BoundKind::LpWindow => "lp_window",
        }
    }
}

impl fmt::Display for BoundKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The best lower bound on any mapping's makespan, and what it was built from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LowerBound {
    /// No mapping's makespan is below it.
    pub seconds: f64,
    /// Which candidate it is.
    pub kind: BoundKind,
    /// Critical path, total work, average parallelism.
    pub bounds: Bounds,
    /// The LP bound, when solved.
    pub lp_s: Option<f64>,
    /// The window LP bound, when solved.
    pub window_s: Option<f64>,
}

impl LowerBound {
    /// The largest of the candidates given (ties go to the simplest).
    pub fn from_parts(bounds: Bounds, lp_s: Option<f64>, window_s: Option<f64>) -> Self {
        let slots_work = bounds.lower_bound_s;
        let mut best = if bounds.critical_path_s >= slots_work {
            (bounds.critical_path_s, BoundKind::CriticalPath)
        } else {
            (slots_work, BoundKind::TotalWork)
        };
        for (v, kind) in [(lp_s, BoundKind::Lp), (window_s, BoundKind::LpWindow)] {
            if let Some(v) = v
                && v > best.0 * (1.0 + 1e-9)
            {
                best = (v, kind);
            }
        }
        LowerBound {
            seconds: best.0,
            kind: best.1,
            bounds,
            lp_s,
            window_s,
        }
    }
}

/// The best lower bound for `graph` on `etc` (see the module). `known_lp` is an LP bound
/// already solved (by the `lp` policy), used instead of solving it again.
pub fn best_lower_bound(
    graph: &TaskGraph,
    etc: &EtcMatrix,
    known_lp: Option<f64>,
) -> Result<LowerBound, GraphError> {
    let bounds = Bounds::of(graph, etc)?;
    let cells = etc.tasks().saturating_mul(etc.servers());
    let lp_s = known_lp.or_else(|| {
        (cells <= MAX_LP_BOUND_CELLS)
            .then(|| lp_lower_bound(etc).ok())
            .flatten()
    });
    let window_s = if lp_s.is_some()
        && !graph.is_bag()
        && cells <= MAX_WINDOW_BOUND_CELLS
        && exact_variables(etc) <= MAX_WINDOW_BOUND_VARS
    {
        window_bound(graph, etc)?
    } else {
        None
    };
    Ok(LowerBound::from_parts(bounds, lp_s, window_s))
}

/// max over head threshold h and tail threshold q of h + q + LP(tasks with head ≥ h and tail
/// ≥ q); `None` if an LP fails.
fn window_bound(graph: &TaskGraph, etc: &EtcMatrix) -> Result<Option<f64>, GraphError> {
    let adj = graph.adjacency()?;
    let best = etc.min_per_task();
    let n = graph.len();
    let (mut head, mut tail) = (vec![0.0f64; n], vec![0.0f64; n]);
    for &t in &adj.topo {
        for &(c, _) in adj.succs(t) {
            head[c] = head[c].max(head[t] + best[t]);
        }
    }
    for &t in adj.topo.iter().rev() {
        for &(p, _) in adj.preds(t) {
            tail[p] = tail[p].max(tail[t] + best[t]);
        }
    }
    let steps = |v: &[f64]| -> Vec<f64> {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        s.dedup();
        let k = WINDOW_STEPS.min(s.len());
        // Thresholds at evenly spaced ranks, from the smallest (0: every task) up.
        (0..k)
            .map(|i| {
                s[if k > 1 {
                    i * (s.len() - 1) / (k - 1)
                } else {
                    0
                }]
            })
            .collect()
    };
    let mut out: Option<f64> = None;
    for &h in &steps(&head) {
        for &q in &steps(&tail) {
            let rows: Vec<usize> = (0..n).filter(|&t| head[t] >= h && tail[t] >= q).collect();
            if rows.is_empty() {
                continue;
            }
            let sub = EtcMatrix::from_fn(rows.len(), etc.servers(), |i, s| etc.get(rows[i], s))
                .and_then(|e| e.with_slots(etc.all_slots().to_vec()));
            let Ok(sub) = sub else { return Ok(None) };
            let Ok(lp) = lp_lower_bound(&sub) else {
                return Ok(None);
            };
            let v = h + q + lp;
            out = Some(out.map_or(v, |o: f64| o.max(v)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;

    #[test]
    fn a_chain_is_bounded_by_its_length_and_named_so() {
        let mut g = TaskGraph::new();
        for i in 0..3 {
            g.add_task(Task::new(format!("t{i}"), "x", 1.0));
        }
        g.add_edge(0, 1, 0).unwrap();
        g.add_edge(1, 2, 0).unwrap();
        let etc = EtcMatrix::new(3, 3, vec![1.0; 9]).unwrap();
        let b = best_lower_bound(&g, &etc, None).unwrap();
        assert_eq!(b.seconds, 3.0);
        assert_eq!(b.kind, BoundKind::CriticalPath);
        assert_eq!(b.lp_s, Some(1.0));
    }

    #[test]
    fn the_window_charges_a_ramp_the_plain_lp_misses() {
        // a (2 s) feeds four 1 s tasks on two identical servers: the LP spreads 6 s of work
        // over 2 servers (3 s), but nothing else can run while a does, so the makespan is at
        // least 2 + 4/2 = 4, which the window with h = 2 finds.
        let mut g = TaskGraph::new();
        let a = g.add_task(Task::new("a", "x", 1.0));
        for i in 0..4 {
            let t = g.add_task(Task::new(format!("b{i}"), "x", 1.0));
            g.add_edge(a, t, 0).unwrap();
        }
        let etc = EtcMatrix::from_fn(5, 2, |t, _| if t == 0 { 2.0 } else { 1.0 }).unwrap();
        let b = best_lower_bound(&g, &etc, None).unwrap();
        assert!((b.lp_s.unwrap() - 3.0).abs() < 1e-9);
        assert!((b.seconds - 4.0).abs() < 1e-9, "{b:?}");
        assert_eq!(b.kind, BoundKind::LpWindow);
        // With two slots per server, the window holds 4 tasks on 4 slots: 2 + 1 = 3 = critical
        // path, and the LP's load term halves.
        let etc = etc.with_slots(vec![2, 2]).unwrap();
        let b = best_lower_bound(&g, &etc, None).unwrap();
        assert!((b.seconds - 3.0).abs() < 1e-9, "{b:?}");
        assert_eq!(b.kind, BoundKind::CriticalPath);
    }

    #[test]
    fn a_server_with_k_slots_is_k_machines_of_its_speed() {
        // Six independent 1 s tasks, one server with 3 slots and one slow server (3 s each,
        // 1 slot). Exhaustively: the best makespan is 2 (all on the fast server, 2 rounds of
        // 3); the LP bound must not exceed it (a bound that took the server as one machine
        // would say 6 / (1 + 1/3) = 4.5) and here equals it: 6 s of work over 3 slots plus
        // a third of a slot = T·(3 + 1/3) ≥ 6 gives 1.8, and the single-task cut gives 1.
        let mut g = TaskGraph::new();
        for i in 0..6 {
            g.add_task(Task::new(format!("t{i}"), "x", 1.0));
        }
        let etc = EtcMatrix::from_fn(6, 2, |_, s| if s == 0 { 1.0 } else { 3.0 })
            .unwrap()
            .with_slots(vec![3, 1])
            .unwrap();
        let b = best_lower_bound(&g, &etc, None).unwrap();
        assert!((b.lp_s.unwrap() - 1.8).abs() < 1e-9, "{b:?}");
        assert!(b.seconds <= 2.0);
    }
}
