//! Which servers take a divisible job (seed 004 §3.2): the candidates ordered by desirability —
//! `compute` (seconds per unit at an even share), `connectivity` (seconds per iteration of
//! talking to neighbours; for a slab with pairwise exchanges, grown from the fastest by the
//! cheapest link to those in) and `both` (the mean of the two ranks) — and every prefix of
//! every ordering balanced (a slab's set laid out as a chain of cheap links); the set whose slowest part is predicted to finish first wins, fewer
//! servers on a tie. More servers is not always faster: each brings its communication, and a
//! slow one can only hold the others back.

use super::balance::balance;
use super::{DivideError, DividePlan, DividePolicy, PlannedPart, Selection, Worker, part_time};
use gridwise_predict::Stoch;
use gridwise_predict::stoch::latest;

/// Seconds per step that the part on worker `a` spends taking its boundary rows from its
/// neighbour on worker `b` (indices into the workers), in a slab job, with their spread.
pub type Exchange<'a> = &'a dyn Fn(usize, usize) -> Stoch;

/// The plan for `n` units over `workers` by `policy`, on the set `selection` says; each
/// worker's `comm_s` is what its part pays per step whatever its neighbours.
pub fn plan(
    n: u64,
    workers: &[Worker<'_>],
    policy: DividePolicy,
    selection: Selection,
) -> Result<DividePlan, DivideError> {
    plan_slab(n, workers, None, policy, selection)
}

/// [`plan`] for a slab job whose parts pay `exchange` with their neighbours: every candidate
/// set is laid out as a chain (neighbours on cheap links: a site's servers side by side, one
/// slow link crossed once), and each part pays the dearer of its two exchanges, which run at
/// once. Its `comm_s` then depends on the set, as it does: a server on a slow link costs its
/// neighbours nothing unless it is used.
pub fn plan_slab(
    n: u64,
    workers: &[Worker<'_>],
    exchange: Option<Exchange<'_>>,
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
    let connectivity = match exchange {
        Some(ex) => grown(&compute, ex),
        None => order_by(&|w: &Worker<'_>| w.comm_s),
    };
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
            let Laid {
                set: laid_out,
                units,
                slack,
            } = match balanced(n, workers, &order[..k], exchange, policy) {
                Ok(x) => x,
                Err(e) => {
                    last_err = e;
                    continue;
                }
            };
            let set: Vec<&Worker<'_>> = laid_out.iter().collect();
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
                        comm_s: if used > 1 { w.comm_s } else { 0.0 },
                    }
                })
                .collect();
            let slowest = makespan(&parts, &set, used > 1);
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

/// When the slowest of `parts` (laid out on `set`) ends. A step of a slab job waits for its
/// latest part, and each part's exchange varies from step to step: the mean is the expected
/// maximum (Clark), later than the slowest mean when parts finish close together, as a
/// balanced plan's do. Each part's pull is a draw of its own, the two at a crossing too: they
/// run at once in opposite directions, and on the test bed they were never slow together (a
/// trace of 28 crossing steps at 800 rows: one of the two 0.116–0.126 s in 7, the other then
/// 0.088–0.096 s), so one draw per crossing understated the step by 3–7%.
/// The model's own spread (the same every step: a model off for one server is off for the
/// whole run) is not redrawn per step; it joins the result's spread. Without neighbours, the
/// slowest part as predicted.
fn makespan(parts: &[PlannedPart], set: &[&Worker<'_>], neighbours: bool) -> (f64, f64) {
    let slowest = parts
        .iter()
        .map(|p| p.time)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((0.0, 0.0));
    if !neighbours {
        return slowest;
    }
    let jitter = |p: &PlannedPart| {
        set.iter()
            .find(|w| w.id == p.id)
            .map_or(0.0, |w| w.comm_sd_s)
    };
    let step = latest(parts.iter().map(|p| Stoch::new(p.time.0, jitter(p))));
    // The slowest part's own spread without its jitter.
    let model_sd = parts
        .iter()
        .max_by(|a, b| a.time.0.total_cmp(&b.time.0))
        .map_or(0.0, |p| {
            (p.time.1.powi(2) - jitter(p).powi(2)).max(0.0).sqrt()
        });
    (step.mean, step.sd.hypot(model_sd))
}

/// A candidate set laid out and balanced.
struct Laid<'a> {
    /// In chain order.
    set: Vec<Worker<'a>>,
    units: Vec<u64>,
    slack: Option<f64>,
}

/// The workers `subset` (indices into `workers`) laid out and balanced: with `exchange`, as a
/// chain whose parts pay the dearer of their neighbours' exchanges; a worker the balance
/// leaves without units is taken out and the rest laid out again, since its neighbours then
/// meet each other.
fn balanced<'a>(
    n: u64,
    workers: &[Worker<'a>],
    subset: &[usize],
    exchange: Option<Exchange<'_>>,
    policy: DividePolicy,
) -> Result<Laid<'a>, DivideError> {
    let Some(ex) = exchange else {
        let set: Vec<Worker<'a>> = subset.iter().map(|&j| workers[j]).collect();
        let (units, slack) = balance(n, &set.iter().collect::<Vec<_>>(), policy)?;
        return Ok(Laid { set, units, slack });
    };
    let mut subset = subset.to_vec();
    loop {
        let chain = chain(&subset, ex);
        // Both neighbours' rows are pulled at once: the part waits for the later.
        let paid = |i: usize| {
            let before = (i > 0).then(|| ex(chain[i], chain[i - 1]));
            let after = (i + 1 < chain.len()).then(|| ex(chain[i], chain[i + 1]));
            latest(before.into_iter().chain(after))
        };
        let set: Vec<Worker<'a>> = (0..chain.len())
            .map(|i| {
                let c = paid(i);
                Worker {
                    comm_s: c.mean,
                    comm_sd_s: c.sd,
                    ..workers[chain[i]]
                }
            })
            .collect();
        let (units, slack) = balance(n, &set.iter().collect::<Vec<_>>(), policy)?;
        if units.iter().all(|&u| u > 0) || units.iter().all(|&u| u == 0) {
            return Ok(Laid { set, units, slack });
        }
        subset = chain
            .iter()
            .zip(&units)
            .filter(|(_, u)| **u > 0)
            .map(|(&j, _)| j)
            .collect();
    }
}

/// `set` in the order its parts should take the units: a path through every worker whose
/// dearest link is as cheap as can be found (then the cheapest in all), by growing it from
/// each worker in turn to the nearest one left. Two sites joined by a slow link come out as
/// one site, then the other.
fn chain(set: &[usize], ex: Exchange<'_>) -> Vec<usize> {
    if set.len() <= 2 {
        return set.to_vec();
    }
    let cost = |a: usize, b: usize| link_cost(ex, a, b);
    let mut best: Option<(f64, f64, Vec<usize>)> = None;
    for &start in set {
        let mut path = vec![start];
        let mut left: Vec<usize> = set.iter().copied().filter(|&j| j != start).collect();
        let (mut dearest, mut total) = (0.0f64, 0.0);
        while !left.is_empty() {
            let last = path[path.len() - 1];
            let (i, c) = left
                .iter()
                .enumerate()
                .map(|(i, &j)| (i, cost(last, j)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .expect("some worker left");
            dearest = dearest.max(c);
            total += c;
            path.push(left.swap_remove(i));
        }
        let better = best.as_ref().is_none_or(|(d, t, _)| {
            dearest < *d * (1.0 - 1e-9) || (dearest <= *d * (1.0 + 1e-9) && total < *t)
        });
        if better {
            best = Some((dearest, total, path));
        }
    }
    best.map(|b| b.2).unwrap_or_default()
}

/// The workers in the order a set grows by connectivity when exchanges depend on the pair:
/// from the fastest, each next one the one whose cheapest exchange with those already in is
/// the cheapest (the faster on a tie, `by_compute` giving the order). Every prefix is then a
/// well-connected set, a site before the servers behind a slow link, which a mean over all
/// pairs cannot tell apart when the sites are alike.
fn grown(by_compute: &[usize], ex: Exchange<'_>) -> Vec<usize> {
    let Some(&first) = by_compute.first() else {
        return Vec::new();
    };
    let cost = |a: usize, b: usize| link_cost(ex, a, b);
    let mut order = vec![first];
    let mut left: Vec<usize> = by_compute[1..].to_vec();
    while !left.is_empty() {
        let (i, _) = left
            .iter()
            .enumerate()
            .map(|(i, &j)| {
                let c = order
                    .iter()
                    .map(|&o| cost(o, j))
                    .fold(f64::INFINITY, f64::min);
                (i, c)
            })
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .expect("some worker left");
        order.push(left.remove(i));
    }
    order
}

/// What a link between two workers costs a layout: the slower of its two directions (each
/// neighbour pulls the other's row).
fn link_cost(ex: Exchange<'_>, a: usize, b: usize) -> f64 {
    ex(a, b).mean.max(ex(b, a).mean)
}
