//! The LP relaxation of unrelated-machine makespan over task classes, solved with good_lp's
//! pure-Rust microlp backend:
//!
//! minimise T subject to, with x_cj the fraction of class c's n_c tasks on server j (only for
//! servers that can run the class),
//!   Σ_j x_cj = 1                         for every class c,
//!   Σ_c n_c · etc_cj · x_cj ≤ slots_j · T  for every server j,
//!   T ≥ max_c min_j etc_cj                (a task runs whole on one slot; a valid cut).
//!
//! Times are divided by a scale near the answer first, so the solver sees numbers near 1
//! whatever the unit.

use super::classes::Classes;
use crate::graph::MapError;
use crate::graph::platform::EtcMatrix;
use good_lp::{Expression, ProblemVariables, Solution, SolverModel, Variable, microlp, variable};

/// The LP optimum and each class's fractions.
pub(crate) struct Fractional {
    /// T*, seconds.
    pub t_star: f64,
    /// Per class, `(server, fraction)` for every server the class may use.
    pub x: Vec<Vec<(usize, f64)>>,
}

/// Solves the LP for `classes` on the servers (and slots) of `etc`.
pub(crate) fn solve(classes: &Classes, etc: &EtcMatrix) -> Result<Fractional, MapError> {
    let m = etc.servers();
    let best: Vec<f64> = classes
        .rows
        .iter()
        .map(|r| r.iter().copied().fold(f64::INFINITY, f64::min))
        .collect();
    let single = best.iter().copied().fold(0.0, f64::max);
    let spread: f64 = best
        .iter()
        .zip(&classes.members)
        .map(|(b, mem)| b * mem.len() as f64)
        .sum::<f64>()
        / etc.total_slots().max(1) as f64;
    let scale = single.max(spread);
    if classes.rows.is_empty() || scale <= 0.0 {
        // Every task has a zero-time server: put each class there, T* = 0.
        let x = classes
            .rows
            .iter()
            .map(|r| {
                let j = (0..m).find(|&j| r[j] == 0.0).unwrap_or(0);
                vec![(j, 1.0)]
            })
            .collect();
        return Ok(Fractional { t_star: 0.0, x });
    }

    let mut vars = ProblemVariables::new();
    let t = vars.add(variable().min(single / scale));
    let xv: Vec<Vec<(usize, Variable)>> = classes
        .rows
        .iter()
        .map(|r| {
            (0..m)
                .filter(|&j| r[j].is_finite())
                .map(|j| (j, vars.add(variable().min(0.0))))
                .collect()
        })
        .collect();
    let mut model = vars.minimise(t).using(microlp);
    let mut load: Vec<Expression> = (0..m)
        .map(|_| Expression::with_capacity(xv.len()))
        .collect();
    for (c, row) in xv.iter().enumerate() {
        let mut one = Expression::with_capacity(row.len());
        let n_c = classes.members[c].len() as f64;
        for &(j, v) in row {
            one.add_mul(1.0, v);
            load[j].add_mul(n_c * classes.rows[c][j] / scale, v);
        }
        model = model.with(one.eq(1.0));
    }
    for (j, mut e) in load.into_iter().enumerate() {
        e.add_mul(-(etc.slots(j) as f64), t);
        model = model.with(e.leq(0.0));
    }
    let sol = model.solve().map_err(|e| MapError::Lp {
        reason: e.to_string(),
    })?;
    Ok(Fractional {
        t_star: sol.value(t) * scale,
        x: xv
            .iter()
            .map(|row| {
                row.iter()
                    .map(|&(j, v)| (j, sol.value(v).clamp(0.0, 1.0)))
                    .collect()
            })
            .collect(),
    })
}
