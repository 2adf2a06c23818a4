//! The graph experiment's yardstick that counts transfers: the best schedule found offline
//! over a family of placements, simulated with the true speeds and the shaped links.
//!
//! The family: `make` on any server, each branch's three `step`s together on any server, each
//! `join` on any server (4⁸ = 65,536 placements on four servers). Each placement is list-
//! scheduled (of the calls whose inputs are done, the one that can start first goes next; one
//! call at a time per server, as the bench's servers run): a call starts once its server is
//! free and every input has crossed its path at the shaped rate, plus a call's own cost seen
//! from the client (its dispatch); the last output then crosses the client's link. Transfers
//! never share a link in it, and no call runs slower than its configured speed, so it is
//! optimistic for its family; a mapping that splits a branch could only beat it by moving more
//! data.

use super::graph::{BRANCHES, N, SPEEDS, STEPS};
use gridwise_testbed::Topology;

/// The best placement's makespan, s, and per call (in the graph's order) its server.
pub struct GraphOracle {
    pub makespan_s: f64,
    pub servers: Vec<&'static str>,
}

/// One call of the graph: its inputs (earlier calls) and its family group.
struct Task {
    inputs: Vec<usize>,
    group: usize,
}

/// The graph in recording order, as `graph::mapped` builds it: make, then each branch's steps,
/// then the joins pairwise, the last join fetched. Groups: 0 make, 1..=BRANCHES the branches,
/// then one per join.
fn tasks() -> Vec<Task> {
    let mut t = vec![Task {
        inputs: vec![],
        group: 0,
    }];
    let mut tips = Vec::new();
    for b in 0..BRANCHES {
        let mut last = 0;
        for _ in 0..STEPS {
            t.push(Task {
                inputs: vec![last],
                group: 1 + b,
            });
            last = t.len() - 1;
        }
        tips.push(last);
    }
    let mut group = 1 + BRANCHES;
    while tips.len() > 1 {
        let mut next = Vec::new();
        for pair in tips.chunks(2) {
            t.push(Task {
                inputs: pair.to_vec(),
                group,
            });
            group += 1;
            next.push(t.len() - 1);
        }
        tips = next;
    }
    t
}

/// Seconds to move one edge (N f64) from host `a` to host `b`.
fn edge_s(topo: &Topology, a: &str, b: &str) -> anyhow::Result<f64> {
    if a == b {
        return Ok(0.0);
    }
    Ok((N * 8) as f64 / topo.path_rate(a, b)?.bytes_per_s())
}

/// The makespan of one placement (`at[group]` = server index), list-scheduled.
fn simulate(
    tasks: &[Task],
    at: &[usize],
    compute_s: &[f64],
    moves: &[Vec<f64>],
    fetch_s: &[f64],
    dispatch_s: f64,
) -> f64 {
    let n = tasks.len();
    let mut end = vec![f64::NAN; n];
    let mut free = vec![0.0f64; compute_s.len()];
    for _ in 0..n {
        let mut best: Option<(f64, usize)> = None;
        for (i, t) in tasks.iter().enumerate() {
            if !end[i].is_nan() || t.inputs.iter().any(|&p| end[p].is_nan()) {
                continue;
            }
            let s = at[t.group];
            let ready = t
                .inputs
                .iter()
                .map(|&p| end[p] + moves[at[tasks[p].group]][s])
                .fold(0.0, f64::max)
                + dispatch_s;
            let start = ready.max(free[s]);
            if best.is_none_or(|(b, _)| start < b) {
                best = Some((start, i));
            }
        }
        let (start, i) = best.expect("a graph without cycles always has a ready call");
        let s = at[tasks[i].group];
        end[i] = start + compute_s[s];
        free[s] = end[i];
    }
    end[n - 1] + fetch_s[at[tasks[n - 1].group]]
}

/// The best placement of the family over the bench's servers, with the client on `client`.
pub fn best(topo: &Topology, client: &str, dispatch_s: f64) -> anyhow::Result<GraphOracle> {
    let tasks = tasks();
    let groups = tasks.iter().map(|t| t.group).max().unwrap_or(0) + 1;
    let k = SPEEDS.len();
    let compute_s: Vec<f64> = SPEEDS.iter().map(|s| N as f64 / s.1).collect();
    let mut moves = vec![vec![0.0; k]; k];
    for (a, row) in moves.iter_mut().enumerate() {
        for (b, m) in row.iter_mut().enumerate() {
            *m = edge_s(topo, SPEEDS[a].0, SPEEDS[b].0)?;
        }
    }
    let fetch_s = SPEEDS
        .iter()
        .map(|s| edge_s(topo, s.0, client))
        .collect::<anyhow::Result<Vec<f64>>>()?;
    let mut best = (f64::INFINITY, vec![0; groups]);
    let mut at = vec![0usize; groups];
    for code in 0..k.pow(groups as u32) {
        let mut c = code;
        for g in at.iter_mut() {
            *g = c % k;
            c /= k;
        }
        let m = simulate(&tasks, &at, &compute_s, &moves, &fetch_s, dispatch_s);
        if m < best.0 {
            best = (m, at.clone());
        }
    }
    Ok(GraphOracle {
        makespan_s: best.0,
        servers: tasks.iter().map(|t| SPEEDS[best.1[t.group]].0).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_graph_is_make_branches_and_a_tree_of_joins() {
        let t = tasks();
        assert_eq!(t.len(), 1 + BRANCHES * STEPS + BRANCHES - 1);
        assert_eq!(t.last().unwrap().inputs.len(), 2);
        assert!(
            t.iter()
                .enumerate()
                .all(|(i, x)| x.inputs.iter().all(|&p| p < i))
        );
    }

    #[test]
    fn with_free_moves_the_best_placement_meets_the_chain_or_the_work() {
        let tasks = tasks();
        // Two servers of 1 s a call, nothing costs to move or fetch: the chain is 6 calls, and
        // 16 calls over 2 servers take 8 s, but the second waits 1 s for `make` and one
        // server runs the last join alone: 9 s.
        let compute_s = [1.0, 1.0];
        let moves = vec![vec![0.0; 2]; 2];
        let groups = tasks.iter().map(|t| t.group).max().unwrap() + 1;
        let mut best = f64::INFINITY;
        for code in 0..2usize.pow(groups as u32) {
            let at: Vec<usize> = (0..groups).map(|g| (code >> g) & 1).collect();
            best = best.min(simulate(&tasks, &at, &compute_s, &moves, &[0.0, 0.0], 0.0));
        }
        assert_eq!(best, 9.0);
        // Every call on one server: 16 s. A dispatch of 0.5 s delays a call only where the
        // server has nothing else ready: before `make`, after it, and before each join (the
        // last branch step is the last call ready), 0.5 s each.
        let one = vec![0; groups];
        assert_eq!(
            simulate(&tasks, &one, &compute_s, &moves, &[0.0, 0.0], 0.0),
            16.0
        );
        let fetch = [3.0, 0.0];
        assert_eq!(
            simulate(&tasks, &one, &compute_s, &moves, &fetch, 0.0),
            19.0
        );
        let with_dispatch = simulate(&tasks, &one, &compute_s, &moves, &[0.0, 0.0], 0.5);
        assert!(
            with_dispatch > 16.0 && with_dispatch < 24.0,
            "{with_dispatch}"
        );
    }
}
