//! Which servers take a divisible job (seed 004 §3.2): the candidates ordered by desirability —
//! `compute` (seconds per unit at an even share), `connectivity` (seconds per iteration of
//! talking to neighbours) and `both` (the mean of the two ranks) — and every prefix of every
//! ordering balanced; the set whose slowest part is predicted to finish first wins, fewer
//! servers on a tie. More servers is not always faster: each brings its communication, and a
//! slow one can only hold the others back.

use super::balance::balance;
use super::{DivideError, DividePlan, DividePolicy, PlannedPart, Selection, Worker, part_time};

/// The plan for `n` units over `workers` by `policy`, on the set `selection` says.
pub fn plan(
    n: u64,
    workers: &[Worker<'_>],
    policy: DividePolicy,
    selection: Selection,
) -> Result<DividePlan, DivideError> {
    if workers.is_empty() {
        return Err(DivideError::NoServers);
    }
    let probe = (n / workers.len() as u64).max(1);
    let per_unit = |w: &Worker<'_>| {
        let t = (w.time)(probe.min(w.cap.max(1))).mean / probe.min(w.cap.max(1)) as f64;
        if t.is_finite() { t } else { f64::INFINITY }
    };
    let order_by = |key: &dyn Fn(&Worker<'_>) -> f64| -> Vec<usize> {
        let mut idx: Vec<usize> = (0..workers.len()).collect();
        idx.sort_by(|&a, &b| {
            key(&workers[a])
                .total_cmp(&key(&workers[b]))
                .then(a.cmp(&b))
        });
        idx
    };
    let compute = order_by(&per_unit);
    let connectivity = order_by(&|w: &Worker<'_>| w.comm_s);
    let rank_of = |order: &[usize]| {
        let mut r = vec![0usize; order.len()];
        for (pos, &j) in order.iter().enumerate() {
            r[j] = pos;
        }
        r
    };
    let (rc, rn) = (rank_of(&compute), rank_of(&connectivity));
    let mut both: Vec<usize> = (0..workers.len()).collect();
    both.sort_by(|&a, &b| {
        (rc[a] + rn[a])
            .cmp(&(rc[b] + rn[b]))
            .then(rc[a].cmp(&rc[b]))
    });

    let orderings: Vec<(&str, Vec<usize>)> = match selection {
        Selection::All => vec![("all", compute.clone())],
        _ => vec![
            ("compute", compute),
            ("connectivity", connectivity),
            ("both", both),
        ],
    };
    let sizes: Vec<usize> = match selection {
        Selection::Best => (1..=workers.len()).collect(),
        Selection::Count(k) => vec![k.clamp(1, workers.len())],
        Selection::All => vec![workers.len()],
    };
    let mut best: Option<DividePlan> = None;
    let mut last_err = DivideError::NoServerCanRun;
    for (name, order) in &orderings {
        for &k in &sizes {
            let set: Vec<&Worker<'_>> = order[..k].iter().map(|&j| &workers[j]).collect();
            let (units, slack) = match balance(n, &set, policy) {
                Ok(x) => x,
                Err(e) => {
                    last_err = e;
                    continue;
                }
            };
            let used = units.iter().filter(|&&u| u > 0).count();
            let parts: Vec<PlannedPart> = set
                .iter()
                .zip(&units)
                .filter(|(_, u)| **u > 0)
                .map(|(w, &u)| {
                    let t = part_time(w, u, used > 1);
                    PlannedPart {
                        id: w.id,
                        units: u,
                        time: (t.mean, t.sd),
                    }
                })
                .collect();
            let slowest = parts
                .iter()
                .map(|p| p.time)
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .unwrap_or((0.0, 0.0));
            let better = match &best {
                None => true,
                Some(b) => {
                    slowest.0 < b.makespan.0 * (1.0 - 1e-9)
                        || (slowest.0 <= b.makespan.0 * (1.0 + 1e-9) && parts.len() < b.parts.len())
                }
            };
            if better && slowest.0.is_finite() {
                best = Some(DividePlan {
                    parts,
                    makespan: slowest,
                    policy,
                    ordering: name.to_string(),
                    slack,
                });
            }
        }
    }
    best.ok_or(last_err)
}
