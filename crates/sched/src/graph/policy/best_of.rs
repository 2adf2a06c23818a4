//! `best-of`: several list schedules, each replayed, the shortest kept, then a bounded local
//! search on its critical chain ([`local_search`](super::local_search)). A candidate replaces
//! the current one only when it replays shorter, and HEFT is the first, so the result is never
//! worse than HEFT's plan, whatever the graph, and is HEFT's where no candidate beats it.
//!
//! The candidates, on graphs of at most [`CANDIDATE_CELLS`] tasks × servers:
//! - PEFT ([`peft`]): HEFT with a lookahead;
//! - HEFT charging each server its waste, `alpha · (ETC − the task's best ETC)`, on top of the
//!   finish time: a task goes to a server slow for it only if that buys more than the capacity
//!   it burns (on a work-bound DAG HEFT's earliest finish hands tasks to idle slow servers);
//! - HEFT with its upward ranks scaled by random factors in [1 − noise, 1 + noise]: other
//!   orders of the same priorities (a fixed seed, so a graph maps the same on every run).
//!
//! Measured (README): the waste penalty wins on examples/sim small.json and layered.json, PEFT
//! offline on `bench schedule`'s Cholesky (1.034 s against HEFT's 1.079 s), HEFT itself plus the
//! local search on examples/sim cholesky.json. The 32 rank restarts won nowhere measured (200
//! did, on small.json: 2.247 s against HEFT's 2.279 s, at 6× the mapping time): the first thing
//! to cut if mapping time matters. LP-guided HEFT (each task only on the servers the LP
//! relaxation uses for its kind) was tried and dropped: 20–35% longer plans.
//!
//! Effort scales down with size, counted in work, never in wall-clock time: the candidates cost
//! about one HEFT each, so they run only up to [`CANDIDATE_CELLS`] cells (the restarts share
//! [`RESTART_WORK`] cells); the search gets [`SEARCH_WORK`] task-and-edge visits of replay, and
//! none at all where that buys fewer than [`MIN_SEARCH_REPLAYS`]. On 10,000 tasks × 100 servers
//! that leaves HEFT and one replay.

use super::local_search::{Scored, improve};
use super::schedule::{Problem, ready_order};
use super::{heft, peft};
use crate::graph::dag::TaskGraph;
use crate::graph::generate::SplitMix64;
use crate::graph::platform::{CommModel, EtcMatrix};
use crate::graph::replay::replay_unchecked;
use crate::graph::{MapError, Mapping};

/// Tasks × servers up to which the other candidates run beside HEFT.
pub const CANDIDATE_CELLS: usize = 250_000;

/// The waste penalties tried (seconds charged per second of ETC above the task's best).
pub const WASTE_ALPHAS: [f64; 3] = [0.25, 0.5, 1.0];

/// Task × server cells of HEFT placement the rank restarts may spend, summed.
pub const RESTART_WORK: usize = 1_000_000;

/// Rank restarts at most.
pub const MAX_RESTARTS: usize = 32;

/// Each restart scales every upward rank by a factor drawn in [1 − noise, 1 + noise].
pub const RANK_NOISE: f64 = 0.2;

/// The restarts' random stream.
const RESTART_SEED: u64 = 0x5eed;

/// Replay work (tasks + edges per replay, summed) the local search may spend.
pub const SEARCH_WORK: usize = 1_000_000;

/// Replays the local search may use at most, whatever the size.
pub const MAX_SEARCH_REPLAYS: usize = 500;

/// Replays below which the local search is not run. Measured on layered graphs over 50–100
/// servers (random ETCs, 2–5% edge density): on 7,000–10,000 tasks, searches of 16–32 replays
/// found nothing shorter in 7 graphs of 7, and at 10,000 tasks took 22–43 ms, more than HEFT
/// itself; on 4,000–5,000 tasks 33–42 replays gained 0–0.12%, on 2,600–3,000 tasks 56–65
/// replays 0.18–0.48%.
pub const MIN_SEARCH_REPLAYS: usize = 40;

/// What best-of tried and kept.
#[derive(Clone, Debug, PartialEq)]
pub struct BestOf {
    pub mapping: Mapping,
    /// Replayed makespan of `mapping`.
    pub makespan_s: f64,
    /// Replayed makespan of HEFT's plan (the ceiling this policy never goes above).
    pub heft_makespan_s: f64,
    /// Every candidate tried and its replayed makespan, HEFT first.
    pub starts: Vec<(&'static str, f64)>,
    /// The candidate the local search started from.
    pub start: &'static str,
    /// Replays the local search used, and its budget.
    pub search_replays: usize,
    pub search_budget: usize,
}

/// Rank restarts for `tasks` × `servers`: each costs about one HEFT.
pub fn restarts(tasks: usize, servers: usize) -> usize {
    let cells = tasks.saturating_mul(servers);
    if cells > CANDIDATE_CELLS {
        return 0;
    }
    (RESTART_WORK / cells.max(1)).min(MAX_RESTARTS)
}

/// How many replays the local search gets for a graph of `tasks` tasks and `edges` edges: 0
/// where its work would buy fewer than [`MIN_SEARCH_REPLAYS`].
pub fn search_budget(tasks: usize, edges: usize) -> usize {
    let replays = (SEARCH_WORK / (tasks + edges).max(1)).min(MAX_SEARCH_REPLAYS);
    if replays < MIN_SEARCH_REPLAYS {
        0
    } else {
        replays
    }
}

/// Maps `graph` by best-of.
pub fn map(graph: &TaskGraph, etc: &EtcMatrix, comm: &CommModel) -> Result<Mapping, MapError> {
    solve(graph, etc, comm).map(|b| b.mapping)
}

/// Maps `graph` by best-of and says how.
pub fn solve(graph: &TaskGraph, etc: &EtcMatrix, comm: &CommModel) -> Result<BestOf, MapError> {
    let p = Problem::new(graph, etc, comm)?;
    let score = |m: Mapping| {
        replay_unchecked(graph, &p.adj, etc, comm, &m)
            .ok()
            .map(|r| Scored::new(m, r))
    };
    let heft_order = heft::priority_order(&p);
    let heft_mapping = heft::place_with_insertion(&p, &heft_order, None).into_mapping();
    // HEFT's own plan always replays (its orders follow planned starts); if it ever did not,
    // it is still the answer, unimproved.
    let Some(heft) = score(heft_mapping.clone()) else {
        return Ok(BestOf {
            mapping: heft_mapping,
            makespan_s: f64::NAN,
            heft_makespan_s: f64::NAN,
            starts: Vec::new(),
            start: "heft",
            search_replays: 0,
            search_budget: 0,
        });
    };
    let heft_makespan_s = heft.replay.makespan_s;
    let mut starts = vec![("heft", heft_makespan_s)];
    let mut best = heft;
    let mut start = "heft";
    let mut offer = |name: &'static str, m: Mapping, best: &mut Scored, start: &mut &str| {
        if let Some(cand) = score(m) {
            starts.push((name, cand.replay.makespan_s));
            // Only a shorter plan displaces the one kept: an equal one with earlier finishes
            // (what the local search walks plateaus by) is no reason to run anything but
            // HEFT's plan, and on hydropad such an order measured 0.3% slower in 5 runs of 5.
            if cand.shorter_than(best) {
                *best = cand;
                *start = name;
            }
        }
    };
    let (n, m) = (p.tasks(), p.servers());
    if n.saturating_mul(m) <= CANDIDATE_CELLS {
        offer("peft", peft::map(graph, etc, comm)?, &mut best, &mut start);
        let best_time = etc.min_per_task();
        for alpha in WASTE_ALPHAS {
            let waste: Vec<f64> = (0..n * m)
                .map(|i| {
                    let (t, s) = (i / m, i % m);
                    let d = etc.get(t, s);
                    if d.is_finite() {
                        alpha * (d - best_time[t])
                    } else {
                        0.0
                    }
                })
                .collect();
            let plan = heft::place_with_insertion(&p, &heft_order, Some(&waste));
            offer("heft-waste", plan.into_mapping(), &mut best, &mut start);
        }
        let rank = heft::upward_ranks(&p);
        let mut rng = SplitMix64::new(RESTART_SEED);
        for _ in 0..restarts(n, m) {
            let noisy: Vec<f64> = rank
                .iter()
                .map(|r| r * (1.0 + RANK_NOISE * (2.0 * rng.unit() - 1.0)))
                .collect();
            let plan = heft::place_with_insertion(&p, &ready_order(&p, &noisy), None);
            offer("heft-restart", plan.into_mapping(), &mut best, &mut start);
        }
    }
    let budget = search_budget(n, graph.edge_count());
    // The search walks plateaus by earlier finishes; only a shorter plan replaces its start.
    let (found, used) = improve(&p, best.clone(), budget);
    let best = if found.shorter_than(&best) {
        found
    } else {
        best
    };
    Ok(BestOf {
        makespan_s: best.replay.makespan_s,
        mapping: best.mapping,
        heft_makespan_s,
        starts,
        start,
        search_replays: used,
        search_budget: budget,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::generate;
    use crate::graph::replay::replay;

    #[test]
    fn effort_shrinks_with_size() {
        assert_eq!(restarts(560, 16), MAX_RESTARTS);
        assert_eq!(restarts(10_000, 100), 0);
        assert_eq!(search_budget(10, 10), MAX_SEARCH_REPLAYS);
        assert_eq!(search_budget(4_000, 20_000), SEARCH_WORK / 24_000);
        const { assert!(SEARCH_WORK / 24_000 >= MIN_SEARCH_REPLAYS) };
        // 16 replays would be too few to find anything: none are run.
        assert_eq!(search_budget(10_000, 50_000), 0);
    }

    #[test]
    fn a_candidate_only_as_short_as_heft_does_not_displace_it() {
        // root → (a: 1 s, b: 2 s), all on s0 (s1 cannot run them): every order ends at 4 s.
        // HEFT runs b first (higher rank); PEFT a (its table is 0 for both leaves, ties go by
        // position), which finishes earlier overall but no sooner.
        let mut g = TaskGraph::new();
        let root = g.add_task(crate::graph::dag::Task::new("root", "x", 1.0));
        let a = g.add_task(crate::graph::dag::Task::new("a", "x", 1.0));
        let b = g.add_task(crate::graph::dag::Task::new("b", "x", 1.0));
        g.add_edge(root, a, 0).unwrap();
        g.add_edge(root, b, 0).unwrap();
        let inf = f64::INFINITY;
        let etc = EtcMatrix::new(3, 2, vec![1.0, inf, 1.0, inf, 2.0, inf]).unwrap();
        let comm = CommModel::free(2);
        let heft = heft::map(&g, &etc, &comm).unwrap();
        let peft = peft::map(&g, &etc, &comm).unwrap();
        assert_eq!(heft.order[0], [root, b, a]);
        assert_eq!(peft.order[0], [root, a, b]);
        let best = solve(&g, &etc, &comm).unwrap();
        assert_eq!(best.starts[1], ("peft", 4.0));
        assert_eq!((best.start, best.makespan_s), ("heft", 4.0));
        assert_eq!(best.mapping, heft);
    }

    #[test]
    fn keeps_a_candidate_only_if_it_replays_shorter_than_heft() {
        let g = generate::cholesky(6, 128);
        let etc = generate::random_etc(&g, 5, 6.0, 3);
        let comm = CommModel::uniform(5, 0.01, 1e8).unwrap();
        let b = solve(&g, &etc, &comm).unwrap();
        let heft = heft::map(&g, &etc, &comm).unwrap();
        let heft_s = replay(&g, &etc, &comm, &heft).unwrap().makespan_s;
        assert_eq!(b.heft_makespan_s, heft_s);
        assert_eq!(b.starts[0], ("heft", heft_s));
        // PEFT, three waste penalties and the restarts were all tried on this small graph.
        assert_eq!(b.starts.len(), 1 + 1 + WASTE_ALPHAS.len() + MAX_RESTARTS);
        let mine = replay(&g, &etc, &comm, &b.mapping).unwrap().makespan_s;
        assert_eq!(mine, b.makespan_s);
        let best_start = b.starts.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
        assert!(mine <= best_start);
    }
}
