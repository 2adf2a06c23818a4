//! Splitting divisible work across servers (Higgins 2010 §2.2, ref. \[67\]; digest 003 §1.5 a, b).
//!
//! - [`constant_split`]: the constant performance model, `w_j ∝ S_j`, with integer rounding.
//! - [`fpm_split`]: the functional-model split in its *time-bisection* form (digest §1.5 b,
//!   "equivalent and simpler"): find the common finishing time T at which the servers together
//!   can just absorb the work, `Σ_j x_j(T) ≥ total` with `x_j(T) = max{x : time_j(x) ≤ T}`, then
//!   round to integers and hand out the remainder. With `time_j(x) = C_j(x)/S_j(x)` this is the
//!   "line through the origin" of the thesis whenever C is linear in x, and it stays correct when
//!   it is not.
//!
//! # Decisions where the thesis is silent (\[gap\])
//! - **Zero units cost nothing**: `time_j(0)` is never evaluated and taken as 0.
//! - **Exact threshold by bisection on the float line.** T is bisected over the *bit patterns* of
//!   non-negative `f64`s (which order like the numbers), so it ends on two adjacent floats
//!   `T⁻ < T*` with `Σx_j(T⁻) < total ≤ Σx_j(T*)`, in at most 64 steps and without a tolerance
//!   to tune. Cost: O(p · log₂(total) · 64) time evaluations.
//! - **Remainder.** The base is `x_j(T⁻)`; the `d = total − Σx_j(T⁻)` leftover units go one at a
//!   time to the server with the smallest `time_j(x_j + 1)`, never past `x_j(T*)`. For
//!   non-decreasing times every such unit costs exactly `T*`, so all candidates tie; ties go to
//!   the server with the fewest units, then the smallest `time_j(x_j+1)`, then the lowest index.
//!   This is computed in bulk (water-filling), so time functions with long flat stretches (where
//!   `d` can be huge) cost O(p · log total), not O(d · p).
//! - **Non-monotone times** (allowed, not intended): `x_j(T)` is found by integer bisection as if
//!   `time_j` were non-decreasing. Bisection still makes `x_j(T)` non-decreasing in T (two runs
//!   only part ways at a midpoint that one accepts and the other rejects), so the outer
//!   bisection stays sound and the split still sums to the total; it may just not be optimal.
//!   The reported makespan is always measured, `max_j time_j(x_j)`, never assumed.
//! - **Cannot run**: a NaN or `+∞` time counts as "cannot run that many units". Servers that
//!   cannot run one unit get 0. If nobody can run a unit, or all together cannot hold the total
//!   (e.g. a memory limit modelled as `+∞`), the split is an error.
//! - **Constant split with no usable speed** (all ≤ 0, NaN or infinite): every server gets 0
//!   (the result then does not sum to `total`; it is the only split that gives no work to a
//!   zero-speed server). The remainder rule is the same as above — smallest `(x_j+1)/S_j` —
//!   which is the makespan-optimal (D'Hondt) rounding, rather than largest-remainder.

use serde::{Deserialize, Serialize};

/// A divisible-work split: units per server and the measured common finishing time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Partition {
    /// Units given to each server, in the order of the input.
    pub units: Vec<u64>,
    /// `max_j time_j(units_j)` over servers with work, seconds (0 when no work).
    pub makespan_s: f64,
}

/// Why a functional-model split cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// No servers were given.
    #[error("no servers to partition over")]
    NoServers,
    /// Every server has infinite (or NaN) time for a single unit.
    #[error("no server can run a single unit")]
    NoServerCanRun,
    /// All servers together can run fewer units (with finite time) than the total.
    #[error("servers can run at most {capacity} units in total, {total} requested")]
    InsufficientCapacity {
        total: u64,
        /// Units the servers can run together (saturated at `u64::MAX`).
        capacity: u64,
    },
}

/// Proportional split of `total` units by constant speeds, summing to `total` (see module docs).
///
/// Servers with a speed that is not a positive finite number get 0.
pub fn constant_split(total: u64, speeds: &[f64]) -> Vec<u64> {
    let p = speeds.len();
    let mut x = vec![0u64; p];
    let speed = |j: usize| {
        let s = speeds[j];
        if s.is_finite() && s > 0.0 { s } else { 0.0 }
    };
    let s_max = (0..p).map(speed).fold(0.0, f64::max);
    if total == 0 || s_max <= 0.0 {
        return x;
    }
    // Normalise by the fastest speed so the sum cannot overflow to ∞.
    let norm_sum: f64 = (0..p).map(|j| speed(j) / s_max).sum();
    let mut assigned: u128 = 0;
    for (j, xj) in x.iter_mut().enumerate() {
        let q = total as f64 * (speed(j) / s_max) / norm_sum;
        // `as` saturates; the floor keeps us at or under the quota (up to rounding).
        *xj = (q.floor() as u64).min(total);
        assigned += u128::from(*xj);
    }
    let total128 = u128::from(total);
    // Rounding of huge totals can overshoot: take back from the server that finishes last.
    while assigned > total128 {
        let Some(j) = (0..p)
            .filter(|&j| x[j] > 0)
            .max_by(|&a, &b| (x[a] as f64 / speed(a)).total_cmp(&(x[b] as f64 / speed(b))))
        else {
            break;
        };
        x[j] -= 1;
        assigned -= 1;
    }
    // Remainder: one unit at a time to the server that would finish earliest with it.
    while assigned < total128 {
        let mut best: Option<(usize, f64)> = None;
        for j in (0..p).filter(|&j| speed(j) > 0.0) {
            let key = (x[j] as f64 + 1.0) / speed(j);
            if best.is_none_or(|(_, k)| key < k) {
                best = Some((j, key));
            }
        }
        let Some((j, _)) = best else { break };
        x[j] += 1;
        assigned += 1;
    }
    x
}

/// `max{x ≤ total : time(x) ≤ t}` by integer bisection (0 units always fit; see module docs).
pub fn max_units_within(time: &dyn Fn(u64) -> f64, t: f64, total: u64) -> u64 {
    // NaN ≤ t is false, so a NaN time reads as "does not fit".
    let fits = |x: u64| time(x) <= t;
    if total == 0 {
        return 0;
    }
    if fits(total) {
        return total;
    }
    let (mut lo, mut hi) = (0u64, total); // fits(lo) (by convention for 0), !fits(hi)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Measured makespan `max_j time_j(units_j)` over servers with work (NaN counts as `+∞`).
pub fn makespan(units: &[u64], times: &[&dyn Fn(u64) -> f64]) -> f64 {
    units
        .iter()
        .zip(times)
        .filter(|(u, _)| **u > 0)
        .map(|(&u, t)| {
            let v = t(u);
            if v.is_nan() { f64::INFINITY } else { v }
        })
        .fold(0.0, f64::max)
}

/// Functional-model split of `total` units: common finishing time by bisection, then remainder.
///
/// `times[j](x)` is server j's time in seconds for x units (intended non-decreasing in x).
pub fn fpm_split(total: u64, times: &[&dyn Fn(u64) -> f64]) -> Result<Partition, PartitionError> {
    let p = times.len();
    if p == 0 {
        return Err(PartitionError::NoServers);
    }
    if total == 0 {
        return Ok(Partition {
            units: vec![0; p],
            makespan_s: 0.0,
        });
    }
    let units_at = |t: f64| -> Vec<u64> {
        times
            .iter()
            .map(|f| max_units_within(*f, t, total))
            .collect()
    };
    let sum = |xs: &[u64]| xs.iter().map(|&x| u128::from(x)).sum::<u128>();
    let total128 = u128::from(total);

    let caps = units_at(f64::MAX);
    let capacity = sum(&caps);
    if capacity == 0 {
        return Err(PartitionError::NoServerCanRun);
    }
    if capacity < total128 {
        return Err(PartitionError::InsufficientCapacity {
            total,
            capacity: u64::try_from(capacity).unwrap_or(u64::MAX),
        });
    }

    // T* = the smallest float T with Σ x_j(T) ≥ total; `lower` is x at the float just below.
    let at_zero = units_at(0.0);
    let (lower, upper) = if sum(&at_zero) >= total128 {
        (vec![0; p], at_zero)
    } else {
        let (mut lo, mut hi) = (0.0f64.to_bits(), f64::MAX.to_bits());
        let mut hi_units = caps;
        let mut lo_units = at_zero;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let xs = units_at(f64::from_bits(mid));
            if sum(&xs) >= total128 {
                hi = mid;
                hi_units = xs;
            } else {
                lo = mid;
                lo_units = xs;
            }
        }
        (lo_units, hi_units)
    };

    let units = assign_remainder(total, &lower, &upper, times);
    let makespan_s = makespan(&units, times);
    Ok(Partition { units, makespan_s })
}

/// Hand `total − Σlower` units out within `[lower_j, upper_j]`, fewest-units first (module docs).
fn assign_remainder(
    total: u64,
    lower: &[u64],
    upper: &[u64],
    times: &[&dyn Fn(u64) -> f64],
) -> Vec<u64> {
    let base: u128 = lower.iter().map(|&x| u128::from(x)).sum();
    let d = u128::from(total).saturating_sub(base);
    // Units needed to lift every server with room up to `level` (capped by its upper bound).
    let need = |level: u64| -> u128 {
        lower
            .iter()
            .zip(upper)
            .map(|(&lo, &up)| u128::from(level.clamp(lo, up.max(lo)) - lo))
            .sum()
    };
    // Largest level with need(level) ≤ d (need is non-decreasing in level).
    let top = upper.iter().copied().max().unwrap_or(0);
    let (mut lo, mut hi) = (0u64, top);
    if need(hi) <= d {
        lo = hi;
    } else {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if need(mid) <= d {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    let level = lo;
    let mut x: Vec<u64> = lower
        .iter()
        .zip(upper)
        .map(|(&l, &u)| level.clamp(l, u.max(l)))
        .collect();
    let mut left = d - need(level);
    if left > 0 {
        // Servers sitting at `level` with room for one more: best next-unit time first.
        let mut cands: Vec<(f64, usize)> = (0..x.len())
            .filter(|&j| x[j] == level && upper[j] > level)
            .map(|j| {
                let t = times[j](level + 1);
                (if t.is_nan() { f64::INFINITY } else { t }, j)
            })
            .collect();
        cands.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, j) in cands {
            if left == 0 {
                break;
            }
            x[j] += 1;
            left -= 1;
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Boxed = Box<dyn Fn(u64) -> f64>;

    fn refs(fs: &[Boxed]) -> Vec<&dyn Fn(u64) -> f64> {
        fs.iter().map(|f| f.as_ref()).collect()
    }

    fn linear(s: f64) -> Boxed {
        Box::new(move |u| u as f64 / s)
    }

    #[test]
    fn constant_split_basics() {
        assert_eq!(constant_split(10, &[1.0, 1.0]), vec![5, 5]);
        assert_eq!(constant_split(10, &[3.0, 1.0, 1.0]), vec![6, 2, 2]);
        assert_eq!(
            constant_split(7, &[1.0, 0.0, f64::NAN, -2.0]),
            vec![7, 0, 0, 0]
        );
        assert_eq!(constant_split(7, &[0.0, 0.0]), vec![0, 0]);
        assert_eq!(constant_split(0, &[1.0, 2.0]), vec![0, 0]);
        assert!(constant_split(5, &[]).is_empty());
        // Huge values neither overflow nor lose units.
        let x = constant_split(u64::MAX, &[f64::MAX, f64::MAX, 1.0]);
        assert_eq!(
            x.iter().map(|&v| u128::from(v)).sum::<u128>(),
            u128::from(u64::MAX)
        );
        assert_eq!(x[2], 0);
    }

    #[test]
    fn fpm_split_errors_and_trivial_cases() {
        assert_eq!(fpm_split(5, &[]).unwrap_err(), PartitionError::NoServers);
        let never: Boxed = Box::new(|_| f64::INFINITY);
        let nan: Boxed = Box::new(|_| f64::NAN);
        let fs = vec![never, nan];
        assert_eq!(
            fpm_split(5, &refs(&fs)).unwrap_err(),
            PartitionError::NoServerCanRun
        );
        let zero = fpm_split(0, &refs(&fs)).unwrap();
        assert_eq!(zero.units, vec![0, 0]);
        assert_eq!(zero.makespan_s, 0.0);
        // A memory cap: each server can hold at most 100 units.
        let capped = |s: f64| -> Boxed {
            Box::new(move |u| if u > 100 { f64::INFINITY } else { u as f64 / s })
        };
        let fs = vec![capped(1.0), capped(2.0)];
        assert_eq!(
            fpm_split(201, &refs(&fs)).unwrap_err(),
            PartitionError::InsufficientCapacity {
                total: 201,
                capacity: 200
            }
        );
        let part = fpm_split(200, &refs(&fs)).unwrap();
        assert_eq!(part.units, vec![100, 100]);
        let part = fpm_split(150, &refs(&fs)).unwrap();
        assert_eq!(part.units, vec![50, 100]);
    }

    #[test]
    fn fpm_split_skips_servers_that_cannot_run() {
        let never: Boxed = Box::new(|_| f64::INFINITY);
        let fs = vec![linear(1.0), never, linear(3.0)];
        let part = fpm_split(8, &refs(&fs)).unwrap();
        assert_eq!(part.units, vec![2, 0, 6]);
        assert_eq!(part.makespan_s, 2.0);
    }

    #[test]
    fn fpm_split_flat_times_do_not_iterate_per_unit() {
        // Every amount costs the same: d = total at the threshold; water-filling balances it.
        let flat: Boxed = Box::new(|_| 1.0);
        let flat2: Boxed = Box::new(|_| 1.0);
        let flat3: Boxed = Box::new(|_| 1.0);
        let fs = vec![flat, flat2, flat3];
        let total = 1_000_000_000_001;
        let part = fpm_split(total, &refs(&fs)).unwrap();
        assert_eq!(part.units.iter().sum::<u64>(), total);
        let (mn, mx) = (
            part.units.iter().min().copied().unwrap_or(0),
            part.units.iter().max().copied().unwrap_or(0),
        );
        assert!(mx - mn <= 1);
        assert_eq!(part.makespan_s, 1.0);
    }

    #[test]
    fn fpm_split_huge_total() {
        let fs = vec![linear(1.0), linear(3.0)];
        let part = fpm_split(u64::MAX, &refs(&fs)).unwrap();
        let sum: u128 = part.units.iter().map(|&u| u128::from(u)).sum();
        assert_eq!(sum, u128::from(u64::MAX));
        // Within float resolution of the 1:3 split.
        let share = part.units[1] as f64 / u64::MAX as f64;
        assert!((share - 0.75).abs() < 1e-12);
    }

    #[test]
    fn fpm_split_zero_time_servers() {
        // time 0 for everything: the threshold is T* = 0.
        let free: Boxed = Box::new(|_| 0.0);
        let fs = vec![free, linear(1.0)];
        let part = fpm_split(10, &refs(&fs)).unwrap();
        assert_eq!(part.units, vec![10, 0]);
        assert_eq!(part.makespan_s, 0.0);
    }

    #[test]
    fn fpm_split_nonlinear_times() {
        // A paging cliff: server 0 is fast up to 50 units then 10× slower per unit.
        let cliff: Boxed = Box::new(|u| {
            let u = u as f64;
            if u <= 50.0 {
                u / 10.0
            } else {
                5.0 + (u - 50.0)
            }
        });
        let fs = vec![cliff, linear(2.0)];
        let part = fpm_split(100, &refs(&fs)).unwrap();
        assert_eq!(part.units.iter().sum::<u64>(), 100);
        // Optimal here: 0 takes 50 (5 s) + k more, 1 takes 50−k at 2/s.
        // 5 + k = (50 − k)/2 ⇒ k = 40/3 → k = 13 (18 s vs 18.5 s) or 14 (19 s vs 18 s).
        assert_eq!(part.units, vec![63, 37]);
        assert_eq!(part.makespan_s, 18.5);
    }

    /// Monotone time functions: `u/s + q·u² + c` for u ≥ 1 (a start-up cost c).
    fn monotone_fn(s: f64, q: f64, c: f64) -> Boxed {
        Box::new(move |u| {
            let x = u as f64;
            x / s + q * x * x + c
        })
    }

    fn server_params() -> impl Strategy<Value = Vec<(f64, f64, f64)>> {
        prop::collection::vec((0.1f64..100.0, 0.0f64..0.01, 0.0f64..5.0), 1..7)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn splits_sum_to_total(params in server_params(), total in 0u64..20_000) {
            let fs: Vec<Boxed> = params.iter().map(|&(s, q, c)| monotone_fn(s, q, c)).collect();
            let part = fpm_split(total, &refs(&fs)).unwrap();
            prop_assert_eq!(part.units.iter().sum::<u64>(), total);
            let speeds: Vec<f64> = params.iter().map(|p| p.0).collect();
            prop_assert_eq!(constant_split(total, &speeds).iter().sum::<u64>(), total);
        }

        #[test]
        fn partition_sums_monotone_in_t(
            params in server_params(),
            wiggle in 0.0f64..3.0,
            total in 1u64..50_000,
            t1 in 0.0f64..500.0,
            dt in 0.0f64..500.0,
        ) {
            // Non-monotone times too: the bisection still gives sums non-decreasing in T.
            let fs: Vec<Boxed> = params
                .iter()
                .map(|&(s, _, c)| -> Boxed {
                    Box::new(move |u| { let x = u as f64; x / s + c + wiggle * (x * 0.7).sin() })
                })
                .collect();
            let f = refs(&fs);
            let sum_at = |t: f64| f.iter().map(|g| u128::from(max_units_within(*g, t, total))).sum::<u128>();
            prop_assert!(sum_at(t1) <= sum_at(t1 + dt));
            // And the split itself is still valid and honestly measured.
            let part = fpm_split(total, &f).unwrap();
            prop_assert_eq!(part.units.iter().sum::<u64>(), total);
            prop_assert_eq!(part.makespan_s, makespan(&part.units, &f));
        }

        #[test]
        fn identical_servers_balanced(
            (s, q, c) in (0.1f64..100.0, 0.0f64..0.01, 0.0f64..5.0),
            p in 1usize..9,
            total in 0u64..100_000,
        ) {
            let fs: Vec<Boxed> = (0..p).map(|_| monotone_fn(s, q, c)).collect();
            let part = fpm_split(total, &refs(&fs)).unwrap();
            let mn = part.units.iter().copied().min().unwrap_or(0);
            let mx = part.units.iter().copied().max().unwrap_or(0);
            prop_assert!(mx - mn <= 1, "{:?}", part.units);
            let cs = constant_split(total, &vec![s; p]);
            let mn = cs.iter().copied().min().unwrap_or(0);
            let mx = cs.iter().copied().max().unwrap_or(0);
            prop_assert!(mx - mn <= 1, "{:?}", cs);
        }

        #[test]
        fn linear_times_match_constant_split(
            speeds in prop::collection::vec(0.1f64..100.0, 1..8),
            total in 0u64..100_000,
        ) {
            let fs: Vec<Boxed> = speeds.iter().map(|&s| linear(s)).collect();
            let f = refs(&fs);
            let part = fpm_split(total, &f).unwrap();
            let cs = constant_split(total, &speeds);
            for (a, b) in part.units.iter().zip(&cs) {
                prop_assert!(a.abs_diff(*b) <= 1, "{:?} vs {:?}", part.units, cs);
            }
            let m_const = makespan(&cs, &f);
            prop_assert!(part.makespan_s <= m_const, "{} > {}", part.makespan_s, m_const);
            prop_assert!(m_const <= part.makespan_s * (1.0 + 1e-12), "{} vs {}", m_const, part.makespan_s);
        }

        #[test]
        fn fpm_makespan_no_worse_than_constant(
            params in server_params(),
            guess in prop::collection::vec(0.01f64..100.0, 7),
            total in 0u64..20_000,
        ) {
            let fs: Vec<Boxed> = params.iter().map(|&(s, q, c)| monotone_fn(s, q, c)).collect();
            let f = refs(&fs);
            let part = fpm_split(total, &f).unwrap();
            // Any constant split is feasible, so the optimum cannot be worse: try the true
            // asymptotic speeds and an arbitrary guess.
            let speeds: Vec<f64> = params.iter().map(|p| p.0).collect();
            let guessed: Vec<f64> = guess[..params.len()].to_vec();
            for sp in [speeds, guessed] {
                let cs = constant_split(total, &sp);
                prop_assert!(part.makespan_s <= makespan(&cs, &f));
            }
        }

        #[test]
        fn faster_server_never_gets_fewer_units(
            params in server_params(),
            factor in 1.001f64..5.0,
            total in 0u64..20_000,
        ) {
            let (s, q, c) = params[0];
            let fast = monotone_fn(s, q, c);
            let slow: Boxed = {
                let base = monotone_fn(s, q, c);
                Box::new(move |u| base(u) * factor)
            };
            let mut fs: Vec<Boxed> = vec![slow, fast];
            fs.extend(params[1..].iter().map(|&(s, q, c)| monotone_fn(s, q, c)));
            let part = fpm_split(total, &refs(&fs)).unwrap();
            prop_assert!(part.units[1] >= part.units[0], "{:?}", part.units);
        }

        #[test]
        fn constant_split_zero_speed_gets_nothing(
            speeds in prop::collection::vec(prop_oneof![Just(0.0f64), 0.1f64..100.0], 1..8),
            total in 0u64..100_000,
        ) {
            let cs = constant_split(total, &speeds);
            let any_positive = speeds.iter().any(|&s| s > 0.0);
            let expect = if any_positive { total } else { 0 };
            prop_assert_eq!(cs.iter().sum::<u64>(), expect);
            for (s, x) in speeds.iter().zip(&cs) {
                if *s == 0.0 {
                    prop_assert_eq!(*x, 0);
                }
            }
        }
    }
}
