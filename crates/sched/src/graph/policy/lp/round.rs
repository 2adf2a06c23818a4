//! From LP fractions to a placement (Lenstra–Shmoys–Tardos style), then local improvement.
//!
//! 1. Integral parts: class c puts ⌊n_c·x_cj⌋ of its tasks on server j; these alone load every
//!    server by at most slots_j·T*.
//! 2. The leftover tasks (at a vertex of the LP there are at most about one per server) are
//!    matched to servers on the LP's fractional support, at most one per server (Kuhn's
//!    augmenting paths), so each server gains at most one task: makespan ≤ T* + max ETC on the
//!    support. A leftover the matching cannot place goes where it raises the load least.
//! 3. Local improvement: while some single task can leave the most loaded server for another
//!    server and both end below the old maximum, move the best such task.

use super::classes::Classes;
use super::solve::Fractional;
use crate::graph::dag::TaskIdx;
use crate::graph::platform::EtcMatrix;

/// Fractional parts below this count as zero (solver noise).
const EPS: f64 = 1e-6;

/// Places every task; returns each task's server.
pub(crate) fn round(classes: &Classes, frac: &Fractional, etc: &EtcMatrix) -> Vec<usize> {
    let (n, m) = (etc.tasks(), etc.servers());
    let mut server_of = vec![usize::MAX; n];
    // Work already queued on a server counts as load, so leftovers avoid busy servers.
    let mut load: Vec<f64> = (0..m).map(|j| etc.free_at(j).iter().sum()).collect();
    let mut leftovers: Vec<(TaskIdx, Vec<usize>)> = Vec::new();
    for (c, members) in classes.members.iter().enumerate() {
        let n_c = members.len() as f64;
        let mut next = members.iter().copied();
        let mut support = Vec::new();
        for &(j, x) in &frac.x[c] {
            let y = x * n_c;
            let whole = (y + EPS).floor();
            for t in next.by_ref().take(whole as usize) {
                server_of[t] = j;
                load[j] += etc.get(t, j);
            }
            if y - whole > EPS {
                support.push(j);
            }
        }
        let rest: Vec<TaskIdx> = next.collect();
        if support.is_empty() && !rest.is_empty() {
            support = frac.x[c].iter().map(|&(j, _)| j).collect();
        }
        leftovers.extend(rest.into_iter().map(|t| (t, support.clone())));
    }

    let matched = match_leftovers(&leftovers, m);
    let mut unmatched = Vec::new();
    for (u, (t, _)) in leftovers.iter().enumerate() {
        match matched[u] {
            Some(j) => {
                server_of[*t] = j;
                load[j] += etc.get(*t, j);
            }
            None => unmatched.push(u),
        }
    }
    for u in unmatched {
        let (t, support) = &leftovers[u];
        let cost = |j: usize| (load[j] + etc.get(*t, j)) / etc.slots(j) as f64;
        let j = support
            .iter()
            .copied()
            .filter(|&j| etc.feasible(*t, j))
            .chain((0..m).filter(|&j| etc.feasible(*t, j)))
            .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
            .unwrap_or(0);
        server_of[*t] = j;
        load[j] += etc.get(*t, j);
    }
    improve(&mut server_of, &mut load, etc);
    server_of
}

/// A matching of leftover tasks to distinct servers on their supports (`None` = unmatched).
fn match_leftovers(leftovers: &[(TaskIdx, Vec<usize>)], servers: usize) -> Vec<Option<usize>> {
    let mut owner: Vec<Option<usize>> = vec![None; servers];
    let mut seen = vec![usize::MAX; servers];
    for u in 0..leftovers.len() {
        augment(u, u, leftovers, &mut owner, &mut seen);
    }
    let mut matched = vec![None; leftovers.len()];
    for (j, o) in owner.iter().enumerate() {
        if let Some(u) = *o {
            matched[u] = Some(j);
        }
    }
    matched
}

/// Kuhn's augmenting path from leftover `u`; `round` marks servers visited in this search.
fn augment(
    u: usize,
    round: usize,
    leftovers: &[(TaskIdx, Vec<usize>)],
    owner: &mut [Option<usize>],
    seen: &mut [usize],
) -> bool {
    for &j in &leftovers[u].1 {
        if seen[j] == round {
            continue;
        }
        seen[j] = round;
        if owner[j].is_none_or(|v| augment(v, round, leftovers, owner, seen)) {
            owner[j] = Some(u);
            return true;
        }
    }
    false
}

/// Moves single tasks off the most loaded server while that lowers the maximum there without
/// raising another server to it. Each move lowers the sorted load vector lexicographically, so
/// it ends; the cap bounds the time on huge bags.
fn improve(server_of: &mut [usize], load: &mut [f64], etc: &EtcMatrix) {
    let m = etc.servers();
    let slots: Vec<f64> = (0..m).map(|j| etc.slots(j) as f64).collect();
    let mut on: Vec<Vec<TaskIdx>> = vec![Vec::new(); m];
    for (t, &j) in server_of.iter().enumerate() {
        on[j].push(t);
    }
    let cap = 10 * server_of.len() + 100;
    for _ in 0..cap {
        let Some(c) = (0..m).max_by(|&a, &b| (load[a] / slots[a]).total_cmp(&(load[b] / slots[b])))
        else {
            return;
        };
        let top = load[c] / slots[c];
        // (resulting max of the two servers, index in on[c], destination)
        let mut best: Option<(f64, usize, usize)> = None;
        for (i, &t) in on[c].iter().enumerate() {
            let left = (load[c] - etc.get(t, c)) / slots[c];
            for j in (0..m).filter(|&j| j != c) {
                let d = etc.get(t, j);
                if !d.is_finite() {
                    continue;
                }
                let worst = left.max((load[j] + d) / slots[j]);
                if worst < top * (1.0 - 1e-12) && best.is_none_or(|b| worst < b.0) {
                    best = Some((worst, i, j));
                }
            }
        }
        let Some((_, i, j)) = best else {
            return;
        };
        let t = on[c].swap_remove(i);
        load[c] -= etc.get(t, c);
        load[j] += etc.get(t, j);
        on[j].push(t);
        server_of[t] = j;
    }
}
