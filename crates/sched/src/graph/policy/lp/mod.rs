//! `lp`: for a bag of independent calls, the LP relaxation of unrelated-machine makespan
//! (`solve.rs`), rounded (`round.rs`): within a few percent of the LP bound where list
//! heuristics land 35–40% above it on crossing speed functions.
//!
//! The LP has one variable per (task class, feasible server), where a class is the tasks with
//! identical ETC rows, so a bag of calls drawn from a few sizes is a tiny LP whatever its length.
//! microlp's time grows about quadratically with the variables (2,000 distinct rows × 8 servers
//! = 16,000 variables: 0.15–0.45 s here, the slow end on crossing speed functions, where many
//! servers are proportional and the LP is degenerate). Above [`MAX_LP_VARS`], rows are merged
//! into geometric buckets of relative width 0.5%, doubling the width until the LP fits; the LP
//! then uses each bucket's smallest times, so its optimum stays a valid lower bound, at most a
//! factor (1 + width) loose, and the rounding still places tasks by their true times.

mod classes;
mod round;
mod solve;

use super::GraphPolicy;
use super::schedule::Problem;
use crate::graph::dag::TaskGraph;
use crate::graph::platform::{CommModel, EtcMatrix};
use crate::graph::replay::replay;
use crate::graph::{MapError, Mapping};
use classes::{Classes, group};

/// LP variables above which task rows are merged into buckets.
pub const MAX_LP_VARS: usize = 20_000;

/// Widest bucket tried (a factor of 2 between the smallest and largest time in a bucket).
const MAX_BUCKET_WIDTH: f64 = 1.0;

/// What the `lp` policy found.
#[derive(Clone, Debug, PartialEq)]
pub struct LpOutcome {
    /// The rounded placement (each server runs its tasks longest first).
    pub mapping: Mapping,
    /// The LP optimum T*: no mapping of these tasks has a smaller makespan.
    pub lower_bound_s: f64,
    /// The rounded mapping's makespan (its replay).
    pub makespan_s: f64,
    /// Task classes the LP was solved over.
    pub classes: usize,
    /// Relative bucket width the rows were merged with; 0 when classes are exact.
    pub bucket_width: f64,
}

/// Groups `etc`'s rows exactly, or in the narrowest buckets that keep the LP within
/// [`MAX_LP_VARS`] (the widest tried, if none does).
fn grouping(etc: &EtcMatrix) -> (Classes, f64) {
    let mut width = 0.0;
    loop {
        let classes = group(etc, width);
        if classes.variables() <= MAX_LP_VARS || width >= MAX_BUCKET_WIDTH {
            return (classes, width);
        }
        width = if width == 0.0 {
            0.005
        } else {
            (width * 2.0).min(MAX_BUCKET_WIDTH)
        };
    }
}

/// Maps a bag of independent tasks by LP rounding and returns the LP bound with it.
pub fn solve(graph: &TaskGraph, etc: &EtcMatrix, comm: &CommModel) -> Result<LpOutcome, MapError> {
    let p = Problem::new(graph, etc, comm)?;
    if !graph.is_bag() {
        return Err(MapError::NotABag {
            policy: GraphPolicy::Lp,
            edges: graph.edge_count(),
        });
    }
    let (classes, bucket_width) = grouping(etc);
    let frac = solve::solve(&classes, etc)?;
    let server_of = round::round(&classes, &frac, etc);
    // Longest first on each server: irrelevant with one slot, a good list order with several.
    let key: Vec<f64> = server_of
        .iter()
        .enumerate()
        .map(|(t, &s)| -etc.get(t, s))
        .collect();
    let tiebreak: Vec<usize> = (0..p.tasks()).collect();
    let mapping = Mapping::ordered_by(server_of, p.servers(), &key, &tiebreak);
    let makespan_s = replay(graph, etc, comm, &mapping)
        .map_err(|e| MapError::Lp {
            reason: format!("rounded mapping does not replay: {e}"),
        })?
        .makespan_s;
    Ok(LpOutcome {
        mapping,
        lower_bound_s: frac.t_star,
        makespan_s,
        classes: classes.rows.len(),
        bucket_width,
    })
}

/// Maps a bag of independent tasks by LP rounding.
pub fn map(graph: &TaskGraph, etc: &EtcMatrix, comm: &CommModel) -> Result<Mapping, MapError> {
    solve(graph, etc, comm).map(|o| o.mapping)
}

/// The LP optimum T* for running every task (row) of `etc` independently: a lower bound on any
/// mapping's makespan, dependencies or not.
pub fn lp_lower_bound(etc: &EtcMatrix) -> Result<f64, MapError> {
    if let Some(t) = (0..etc.tasks()).find(|&t| !etc.row(t).iter().any(|v| v.is_finite())) {
        return Err(MapError::Infeasible {
            task: format!("#{t}"),
        });
    }
    let (classes, _) = grouping(etc);
    Ok(solve::solve(&classes, etc)?.t_star)
}

/// LP variables `etc` needs with its rows grouped exactly (one per class and feasible server):
/// what an LP over these tasks costs, before any bucketing.
pub(crate) fn exact_variables(etc: &EtcMatrix) -> usize {
    group(etc, 0.0).variables()
}

#[cfg(test)]
mod tests;
