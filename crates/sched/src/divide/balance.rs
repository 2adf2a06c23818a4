//! N units over a set of servers, by a [`DividePolicy`].
//!
//! `lp` is seed 004's time balancing: with each server's time linearised around its part as
//! t_j(x) ≈ a_j·x + b_j (b_j: communication and the fixed cost of a call), minimise T subject
//! to Σ x_j = N, 0 ≤ x_j ≤ cap_j, a_j·x_j + b_j ≤ T and, for balance, a_j·x_j + b_j ≥ (1 − s)·T
//! with slack s = 5%; an infeasible balance (a capped server cannot keep up) doubles s until it
//! holds (at s = 1 there is no lower bound: always feasible when the caps hold N). The
//! linearisation is refreshed at the new parts three times, so a speed function that falls
//! (paging) is seen where the part lands. Fractions are rounded down and the remaining units go,
//! one at a time, where they finish first: Σ x_j = N exactly.

use super::{DivideError, DividePolicy, Worker, part_time};
use good_lp::{Expression, ProblemVariables, Solution, SolverModel, microlp, variable};
use gridwise_fpm::partition::{constant_split, fpm_split};

/// The balance tolerance seed 004 starts from.
const SLACK: f64 = 0.05;
/// Linearisations refreshed at the new parts.
const REFRESHES: usize = 3;

/// How much slower per unit than half its size a part must get, there and at twice its size,
/// for a cliff (paging) to be seen: a model knows a cliff only as a fall between two measured
/// sizes (e.g. 3 Gop/s at 500, 0.3 at 550), and a cliff's fall is several times, where a
/// model's noise is a few percent and a cache's decline is gentle.
const KNEE: f64 = 1.1;
/// Within a bracket that holds a cliff, how far above the level before it a part's time per
/// unit may be before the fall is taken to have begun.
const FALL_START: f64 = 1.02;
/// A second, steeper crossing of the fall: the line through the two is extended back to the
/// level, to where the model's fall begins.
const FALL_SLOPE: f64 = 1.05;
/// The least time a cliff must add to a part for it to be told from a model's noise: the
/// smallest parts' points carry a call's sub-millisecond overheads and timer slack (on the test
/// bed a 1-row part measured 1.0 ms, a 2-row one 1.2 ms, of 0.5 ms and 1 ms of compute), which
/// skews the fixed cost taken from them and makes 4 rows look twice as dear per unit as 2. A
/// paging cliff adds far more than this: it makes a part several times slower.
const CLIFF_MIN_S: f64 = 0.005;

/// The largest part `w` takes before its time per unit falls off its first cliff (paging).
///
/// A model knows a cliff only as a line from its last fast point to its first slow one, and
/// the real fall may begin anywhere between them, at once for all the model can tell: the part
/// stops where that line leaves the level before it, at the last size measured fast, not part
/// way down the line. Found at doubling sizes (the first one slower than [`KNEE`] × the one
/// before it), then by bisection, then by extending the fall's line back to the level.
///
/// Only what grows with the part counts: a fixed cost (a queue to wait in, a call's overhead,
/// a neighbour exchange) makes larger parts look cheaper per unit and would hide a cliff.
pub fn knee(w: &Worker<'_>, n: u64) -> u64 {
    let hi = w.cap.min(n);
    if hi <= 2 {
        return hi;
    }
    let time = |x: u64| (w.time)(x).mean;
    let fixed = (2.0 * time(1) - time(2)).max(0.0);
    // A NaN or infinite time is past the knee too.
    let per_unit = |x: u64| (time(x) - fixed) / x as f64;
    let fallen = |t: f64, level: f64| t.is_nan() || t > level;
    let mut xs = Vec::new();
    let mut x = 1u64;
    while x < hi {
        xs.push(x);
        x = x.saturating_mul(2);
    }
    xs.push(hi);
    let pu: Vec<f64> = xs.iter().map(|&x| per_unit(x)).collect();
    if !pu[0].is_finite() {
        return 0;
    }
    // A cliff stays: paging does not stop at a larger size. A single slow point of a model
    // learned from a few short calls on a busy host (a 12 ms part that waited 3 ms for a core)
    // makes a bump that the next doubling is over again.
    let cliff = |i: usize| {
        let added = xs[i] as f64 * (pu[i] - pu[i - 1]);
        fallen(pu[i], KNEE * pu[i - 1])
            && (added.is_nan() || added >= CLIFF_MIN_S)
            && pu
                .get(i + 1)
                .is_none_or(|&next| fallen(next, KNEE * pu[i - 1]))
    };
    let Some(i) = (1..pu.len()).find(|&i| cliff(i)) else {
        return hi;
    };
    let (lo, up) = (xs[i - 1], xs[i]);
    let level = pu[i - 1];
    // The largest x in [from, up) whose time per unit is still within `rise` of the level.
    let last_within = |from: u64, rise: f64| {
        let (mut a, mut b) = (from, up);
        while b - a > 1 {
            let mid = a + (b - a) / 2;
            if fallen(per_unit(mid), level * rise) {
                b = mid;
            } else {
                a = mid;
            }
        }
        a
    };
    let start = last_within(lo, FALL_START);
    let (x1, x2) = (
        start + 1,
        (last_within(start, FALL_SLOPE) + 1).max(start + 2),
    );
    let (p1, p2) = (per_unit(x1), per_unit(x2));
    let slope = (p2 - p1) / (x2 - x1) as f64;
    if slope.is_nan() || slope <= 0.0 || !p1.is_finite() {
        return start;
    }
    let back = x1 as f64 - (p1 - level) / slope;
    (back.floor().max(lo as f64) as u64).min(start)
}

/// Units per server of `set` (in its order), and for `lp` the slack it needed.
pub fn balance(
    n: u64,
    set: &[&Worker<'_>],
    policy: DividePolicy,
) -> Result<(Vec<u64>, Option<f64>), DivideError> {
    if set.is_empty() {
        return Err(DivideError::NoServers);
    }
    let neighbours = set.len() > 1;
    // The model-driven policies keep parts short of a server's cliff; the others are blind
    // to it by design.
    let model_driven = matches!(policy, DividePolicy::Fpm | DividePolicy::Lp);
    let kneed: Vec<Worker<'_>> = set
        .iter()
        .map(|w| Worker {
            cap: if model_driven { knee(w, n) } else { w.cap },
            ..**w
        })
        .collect();
    let within_knees: u64 = kneed.iter().map(|w| w.cap).fold(0u64, u64::saturating_add);
    // When the job does not fit short of every cliff, some part must page: no knee caps then.
    let set: &[&Worker<'_>] = if model_driven && within_knees >= n {
        &kneed.iter().collect::<Vec<_>>()
    } else {
        set
    };
    let capacity: u64 = set.iter().map(|w| w.cap).fold(0u64, u64::saturating_add);
    let units = match policy {
        DividePolicy::Even => {
            let k = set.len() as u64;
            (0..k).map(|j| n / k + u64::from(j < n % k)).collect()
        }
        DividePolicy::ConstantSpeed => {
            let rates: Vec<f64> = set.iter().map(|w| w.rate).collect();
            let x = constant_split(n, &rates);
            if x.iter().sum::<u64>() != n {
                // No usable rate anywhere: even, rather than nothing.
                return balance(n, set, DividePolicy::Even);
            }
            x
        }
        DividePolicy::Fpm => {
            if capacity < n {
                return Err(DivideError::TooLarge { units: n, capacity });
            }
            let times: Vec<Box<dyn Fn(u64) -> f64 + '_>> = set
                .iter()
                .map(|w| -> Box<dyn Fn(u64) -> f64 + '_> {
                    Box::new(move |x: u64| {
                        if x > w.cap {
                            f64::INFINITY
                        } else {
                            part_time(w, x, neighbours).mean
                        }
                    })
                })
                .collect();
            let refs: Vec<&dyn Fn(u64) -> f64> = times.iter().map(|b| b.as_ref()).collect();
            fpm_split(n, &refs)
                .map_err(|e| match e {
                    gridwise_fpm::partition::PartitionError::InsufficientCapacity {
                        capacity,
                        ..
                    } => DivideError::TooLarge { units: n, capacity },
                    _ => DivideError::NoServerCanRun,
                })?
                .units
        }
        DividePolicy::Lp => {
            if capacity < n {
                return Err(DivideError::TooLarge { units: n, capacity });
            }
            return lp(n, set, neighbours).map(|(x, s)| (x, Some(s)));
        }
    };
    Ok((units, None))
}

/// The linear model of one server around `x` units: (a, b) with t(x) ≈ a·x + b.
fn linearise(w: &Worker<'_>, x: u64, neighbours: bool) -> (f64, f64) {
    let fixed = if neighbours { w.comm_s } else { 0.0 };
    let x = x.clamp(1, w.cap.max(1));
    let t = (w.time)(x).mean;
    let a = ((t / x as f64).max(0.0)).max(1e-12);
    if a.is_finite() {
        (a, fixed)
    } else {
        (f64::INFINITY, fixed)
    }
}

fn lp(n: u64, set: &[&Worker<'_>], neighbours: bool) -> Result<(Vec<u64>, f64), DivideError> {
    let k = set.len();
    // A first guess: the equal-finish split, else even.
    let mut x: Vec<u64> = balance(n, set, DividePolicy::Fpm)
        .map(|(x, _)| x)
        .unwrap_or_else(|_| {
            (0..k as u64)
                .map(|j| n / k as u64 + u64::from(j < n % k as u64))
                .collect()
        });
    let mut slack = SLACK;
    for _ in 0..REFRESHES {
        let lin: Vec<(f64, f64)> = set
            .iter()
            .zip(&x)
            .map(|(w, &xj)| linearise(w, xj.max(n / k as u64).max(1), neighbours))
            .collect();
        let (frac, s) = solve(n, set, &lin, slack)?;
        slack = s;
        x = round(n, set, &lin, &frac);
    }
    Ok((x, slack))
}

/// The LP at the given linearisation, relaxing the slack until it is feasible; returns the
/// fractional parts and the slack used.
fn solve(
    n: u64,
    set: &[&Worker<'_>],
    lin: &[(f64, f64)],
    mut slack: f64,
) -> Result<(Vec<f64>, f64), DivideError> {
    // Times near 1 for the solver: scale by what one server would take for everything.
    let scale = lin
        .iter()
        .filter(|(a, _)| a.is_finite())
        .map(|(a, b)| a * n as f64 + b)
        .fold(f64::INFINITY, f64::min);
    if !scale.is_finite() || scale <= 0.0 {
        return Err(DivideError::NoServerCanRun);
    }
    loop {
        let mut vars = ProblemVariables::new();
        let t = vars.add(variable().min(0.0));
        let xs: Vec<_> = set
            .iter()
            .zip(lin)
            .map(|(w, (a, _))| {
                let cap = if a.is_finite() {
                    w.cap.min(n) as f64
                } else {
                    0.0
                };
                vars.add(variable().min(0.0).max(cap))
            })
            .collect();
        let mut model = vars.minimise(t).using(microlp);
        let mut sum = Expression::with_capacity(xs.len());
        for (j, &xv) in xs.iter().enumerate() {
            sum.add_mul(1.0, xv);
            let (a, b) = lin[j];
            if !a.is_finite() {
                continue;
            }
            let time = a / scale * xv + b / scale;
            model = model.with((time.clone() - t).leq(0.0));
            if slack < 1.0 {
                model = model.with((time - (1.0 - slack) * t).geq(0.0));
            }
        }
        model = model.with(sum.eq(n as f64));
        match model.solve() {
            Ok(sol) => return Ok((xs.iter().map(|&v| sol.value(v).max(0.0)).collect(), slack)),
            Err(_) if slack < 1.0 => slack = (slack * 2.0).min(1.0),
            Err(_) => return Err(DivideError::NoServerCanRun),
        }
    }
}

/// Integer parts summing to `n`: the fractions rounded down, the rest one unit at a time to
/// the server that would finish it first, never past a cap.
fn round(n: u64, set: &[&Worker<'_>], lin: &[(f64, f64)], frac: &[f64]) -> Vec<u64> {
    let mut x: Vec<u64> = frac
        .iter()
        .zip(set)
        .map(|(f, w)| (f.floor() as u64).min(w.cap))
        .collect();
    let mut total: u64 = x.iter().sum();
    while total > n {
        // Rounding never overshoots by much; take from the one that finishes last.
        let j = (0..x.len())
            .filter(|&j| x[j] > 0)
            .max_by(|&p, &q| {
                let tp = lin[p].0 * x[p] as f64 + lin[p].1;
                let tq = lin[q].0 * x[q] as f64 + lin[q].1;
                tp.total_cmp(&tq)
            })
            .unwrap_or(0);
        x[j] -= 1;
        total -= 1;
    }
    while total < n {
        let Some(j) = (0..x.len())
            .filter(|&j| x[j] < set[j].cap && lin[j].0.is_finite())
            .min_by(|&p, &q| {
                let tp = lin[p].0 * (x[p] + 1) as f64 + lin[p].1;
                let tq = lin[q].0 * (x[q] + 1) as f64 + lin[q].1;
                tp.total_cmp(&tq)
            })
        else {
            break;
        };
        x[j] += 1;
        total += 1;
    }
    x
}
