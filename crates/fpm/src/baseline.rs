//! Baseline construction methods (digest 003 §1.10): PMM's `naive`, `naive_bisect` and `rand`,
//! and the thesis's n-point uniform comparison (Table 3.2 uses 20 points).
//!
//! - `naive`: every stride grid size from min to max, in increasing order.
//! - `naive-bisect`: the same sizes in bisection order: min, max, the middle, then the middles of
//!   the halves, and so on. An interrupted build then still spans the range.
//! - `random`: the same sizes in a random order drawn from `seed`. PMM does not say how many
//!   random points `rand` takes. Taking the naive count makes the final model identical to
//!   naive's, so `random` differs only in the order of measurement, which is what matters when
//!   builds are interrupted or watched live.
//! - `uniform-N`: N equally spaced sizes `min + i·(max − min)/(N − 1)`, each snapped to the
//!   nearest grid size, duplicates dropped.
//!
//! With several parameters each method takes the cartesian product of its per-axis sizes.
//! `naive-bisect` visits the product by the coarsest bisection level first: the largest
//! per-axis rank, then the ranks in order. Sizes outside the constraint are skipped.
//! `fuzzy_max` does not apply here: baselines measure their whole point set, including the top
//! size, as the thesis's naive procedure did, so their cost includes it.

use crate::build::{BuildError, Ctx};
use crate::spec::{AxisGrid, BuildSpec, Method};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// The size vectors a baseline method visits, in visiting order, before the constraint is
/// applied. Empty for the GBBP methods (their points depend on the measurements).
pub fn points(spec: &BuildSpec) -> Result<Vec<Vec<i64>>, BuildError> {
    spec.validate()?;
    let grids: Vec<AxisGrid> = spec.params.iter().filter_map(|p| p.grid()).collect();
    let axis_indices =
        |f: &dyn Fn(&AxisGrid) -> Vec<usize>| -> Vec<Vec<usize>> { grids.iter().map(f).collect() };
    let idx: Vec<Vec<usize>> = match spec.method {
        Method::Gbbp | Method::GbbpBoundary => return Ok(Vec::new()),
        Method::Naive => product(&axis_indices(&|g| (0..g.count).collect())),
        Method::Random => {
            let mut all = product(&axis_indices(&|g| (0..g.count).collect()));
            let mut rng = StdRng::seed_from_u64(spec.seed);
            all.shuffle(&mut rng);
            all
        }
        Method::NaiveBisect => {
            let orders = axis_indices(&|g| bisection_order(g.count));
            // rank[k][i] = position of grid index i in axis k's bisection order.
            let ranks: Vec<Vec<usize>> = orders
                .iter()
                .map(|o| {
                    let mut r = vec![0; o.len()];
                    for (pos, &i) in o.iter().enumerate() {
                        r[i] = pos;
                    }
                    r
                })
                .collect();
            let mut all = product(&axis_indices(&|g| (0..g.count).collect()));
            all.sort_by_key(|p| {
                let rk: Vec<usize> = p.iter().enumerate().map(|(k, &i)| ranks[k][i]).collect();
                (rk.iter().copied().max().unwrap_or(0), rk)
            });
            all
        }
        Method::Uniform(n) => {
            let per_axis: Vec<Vec<usize>> = spec
                .params
                .iter()
                .zip(&grids)
                .map(|(p, g)| uniform_indices(p.min, p.max, g, n))
                .collect();
            product(&per_axis)
        }
    };
    Ok(idx
        .into_iter()
        .map(|p| p.iter().zip(&grids).map(|(&i, g)| g.value(i)).collect())
        .collect())
}

/// Runs a baseline: measures its admitted sizes in order.
pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), BuildError> {
    for x in points(ctx.spec)? {
        if ctx.admits(&x) {
            ctx.measure(&x)?;
        }
    }
    Ok(())
}

/// Grid indices 0..count in bisection order: both ends, then midpoints level by level.
fn bisection_order(count: usize) -> Vec<usize> {
    let mut out = vec![0];
    if count > 1 {
        out.push(count - 1);
    }
    let mut queue = std::collections::VecDeque::from([(0usize, count.saturating_sub(1))]);
    while let Some((l, r)) = queue.pop_front() {
        if r > l + 1 {
            let m = l + (r - l) / 2;
            out.push(m);
            queue.push_back((l, m));
            queue.push_back((m, r));
        }
    }
    out
}

/// n equally spaced sizes from min to max inclusive, snapped to the grid, without duplicates.
fn uniform_indices(min: i64, max: i64, g: &AxisGrid, n: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(n);
    for i in 0..n {
        let v = if n == 1 {
            min as f64
        } else {
            min as f64 + i as f64 * (max - min) as f64 / (n - 1) as f64
        };
        let j = g.nearest(v);
        if !out.contains(&j) {
            out.push(j);
        }
    }
    out
}

/// Every combination of one index per axis (last axis fastest).
fn product(axes: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::with_capacity(axes.len())];
    for axis in axes {
        out = out
            .into_iter()
            .flat_map(|p| {
                axis.iter().map(move |&i| {
                    let mut q = p.clone();
                    q.push(i);
                    q
                })
            })
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{NoObserver, build};
    use crate::eval::VirtualBench;
    use crate::spec::{Constraint, ParamSpec};
    use std::collections::BTreeSet;

    fn spec(method: Method) -> BuildSpec {
        BuildSpec::new(vec![ParamSpec::new("n", 64, 4096, 64)], method)
    }

    fn flat(pts: &[Vec<i64>]) -> Vec<i64> {
        pts.iter().map(|p| p[0]).collect()
    }

    #[test]
    fn naive_is_every_stride_point_in_order() {
        let p = flat(&points(&spec(Method::Naive)).unwrap());
        assert_eq!(p, (64..=4096).step_by(64).collect::<Vec<_>>());
    }

    #[test]
    fn naive_bisect_is_the_same_set_coarse_first() {
        let p = flat(&points(&spec(Method::NaiveBisect)).unwrap());
        assert_eq!(&p[..5], &[64, 4096, 2048, 1024, 3072]);
        let set: BTreeSet<i64> = p.iter().copied().collect();
        assert_eq!(set.len(), p.len());
        assert_eq!(set, (64..=4096).step_by(64).collect());
    }

    #[test]
    fn random_is_a_seeded_permutation() {
        let mut s = spec(Method::Random);
        s.seed = 42;
        let a = flat(&points(&s).unwrap());
        let b = flat(&points(&s).unwrap());
        assert_eq!(a, b);
        s.seed = 43;
        let c = flat(&points(&s).unwrap());
        assert_ne!(a, c);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (64..=4096).step_by(64).collect::<Vec<_>>());
    }

    #[test]
    fn uniform_is_n_points_end_to_end_on_the_grid() {
        let p = flat(&points(&spec(Method::Uniform(20))).unwrap());
        assert_eq!(p.len(), 20);
        assert_eq!((p[0], p[19]), (64, 4096));
        assert!(p.iter().all(|v| v % 64 == 0));
        assert!(p.windows(2).all(|w| w[0] < w[1]));
        // More points than the grid has: each grid size once.
        let mut s = BuildSpec::new(vec![ParamSpec::new("n", 0, 10, 5)], Method::Uniform(20));
        assert_eq!(flat(&points(&s).unwrap()), vec![0, 5, 10]);
        s.method = Method::Uniform(1);
        assert_eq!(flat(&points(&s).unwrap()), vec![0]);
    }

    #[test]
    fn multi_d_is_the_cartesian_grid() {
        let s = BuildSpec::new(
            vec![
                ParamSpec::new("m", 1, 3, 1),
                ParamSpec::new("n", 10, 20, 10),
            ],
            Method::Naive,
        );
        assert_eq!(
            points(&s).unwrap(),
            vec![
                vec![1, 10],
                vec![1, 20],
                vec![2, 10],
                vec![2, 20],
                vec![3, 10],
                vec![3, 20]
            ]
        );
        let mut s = s;
        s.method = Method::NaiveBisect;
        let p = points(&s).unwrap();
        assert_eq!(p.len(), 6);
        assert_eq!(
            &p[..4],
            &[vec![1, 10], vec![1, 20], vec![3, 10], vec![3, 20]]
        );
    }

    #[test]
    fn constraint_excludes_points() {
        let mut s = BuildSpec::new(
            vec![ParamSpec::new("m", 1, 10, 1), ParamSpec::new("n", 1, 10, 1)],
            Method::Naive,
        );
        s.constraint = Some(Constraint {
            formula: "m*n".into(),
            min: Some(5.0),
            max: Some(20.0),
        });
        let truth = |_: &[i64]| 1e9;
        let work = |x: &[i64]| (x[0] * x[1]) as f64;
        let mut b = VirtualBench::new(&truth, &work);
        let r = build(&s, &mut b, &mut NoObserver).unwrap();
        let expected = (1..=10)
            .flat_map(|m| (1..=10).map(move |n| m * n))
            .filter(|p| (5..=20).contains(p))
            .count();
        assert_eq!(r.points, expected);
        assert!(
            r.fpm
                .points()
                .iter()
                .all(|(x, _)| (5..=20).contains(&(x[0] * x[1])))
        );
    }
}
