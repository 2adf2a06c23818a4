//! How sure a plan's makespan is. Task times are not independent of the order they finish in,
//! so no closed rule adds their spreads up through a DAG's max-plus algebra; instead the plan's
//! own mapping is replayed with every call's time drawn from its estimate (a normal with the
//! estimate's mean and standard deviation, cut at 0), and the makespans drawn give the mean,
//! spread and 90% interval. The mapping and order stay fixed: this is the spread of this plan,
//! not of re-planning.

use super::Mapping;
use super::dag::TaskGraph;
use super::platform::{CommModel, EtcMatrix};
use super::replay::{ReplayError, replay};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The spread of a plan's makespan.
#[derive(Clone, Debug, PartialEq)]
pub struct MakespanSpread {
    pub mean_s: f64,
    pub sd_s: f64,
    /// The 5th and 95th percentiles of the makespans drawn.
    pub interval90_s: (f64, f64),
    pub samples: usize,
}

/// Replays drawn per plan: a percentile at 5% from 200 draws is good to a few percent.
pub const SAMPLES: usize = 200;

/// Draws at most this many task times per plan in all, so a 10⁵-call graph costs no more than
/// a handful of replays (its interval is then drawn from fewer samples, at least 20).
const BUDGET: usize = 2_000_000;

/// Replays `mapping` with task `t`'s time on its server drawn from N(`mean[t]`, `sd[t]`) (row-
/// major per (task, server) like the ETC matrix), `samples` times; `None` when no task has a
/// spread (every replay would be the same). Deterministic for a given `seed`.
pub fn makespan_spread(
    graph: &TaskGraph,
    etc: &EtcMatrix,
    sd: &[f64],
    comm: &CommModel,
    mapping: &Mapping,
    seed: u64,
) -> Result<Option<MakespanSpread>, ReplayError> {
    let (n, m) = (graph.len(), etc.servers());
    if n == 0 || sd.len() != n * m {
        return Ok(None);
    }
    let on = |t: usize| mapping.server_of[t];
    if (0..n).all(|t| sd[t * m + on(t)] <= 0.0) {
        return Ok(None);
    }
    let samples = SAMPLES.min(BUDGET / n).max(20);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut drawn = etc.clone();
    let mut makespans = Vec::with_capacity(samples);
    for _ in 0..samples {
        for t in 0..n {
            let s = on(t);
            let (mu, sigma) = (etc.get(t, s), sd[t * m + s]);
            if sigma > 0.0 && mu.is_finite() {
                drawn.set(t, s, (mu + sigma * standard_normal(&mut rng)).max(0.0));
            }
        }
        makespans.push(replay(graph, &drawn, comm, mapping)?.makespan_s);
    }
    makespans.sort_by(f64::total_cmp);
    let k = makespans.len() as f64;
    let mean = makespans.iter().sum::<f64>() / k;
    let var = makespans.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1.0).max(1.0);
    let at = |q: f64| makespans[((q * (k - 1.0)).round() as usize).min(makespans.len() - 1)];
    Ok(Some(MakespanSpread {
        mean_s: mean,
        sd_s: var.sqrt(),
        interval90_s: (at(0.05), at(0.95)),
        samples: makespans.len(),
    }))
}

/// A standard normal draw (Box–Muller).
fn standard_normal(rng: &mut impl Rng) -> f64 {
    let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let v: f64 = rng.random();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::Task;

    fn chain(k: usize) -> TaskGraph {
        let mut g = TaskGraph::new();
        for i in 0..k {
            g.add_task(Task::new(format!("t{i}"), "s", 1.0));
            if i > 0 {
                g.add_edge(i - 1, i, 0).unwrap();
            }
        }
        g
    }

    #[test]
    fn a_chain_of_independent_times_spreads_like_their_sum() {
        let g = chain(4);
        let etc = EtcMatrix::new(4, 1, vec![1.0; 4]).unwrap();
        let mapping = Mapping {
            server_of: vec![0; 4],
            order: vec![vec![0, 1, 2, 3]],
        };
        let comm = CommModel::free(1);
        let s = makespan_spread(&g, &etc, &[0.1; 4], &comm, &mapping, 7)
            .unwrap()
            .unwrap();
        // Four unrelated terms of sd 0.1: the sum has sd 0.2.
        assert!((s.mean_s - 4.0).abs() < 0.05, "{s:?}");
        assert!((s.sd_s - 0.2).abs() < 0.04, "{s:?}");
        assert!(s.interval90_s.0 < 4.0 && 4.0 < s.interval90_s.1);
        assert!(
            makespan_spread(&g, &etc, &[0.0; 4], &comm, &mapping, 7)
                .unwrap()
                .is_none()
        );
    }
}
