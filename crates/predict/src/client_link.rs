//! What moving a call's data between its client and one server costs, learnt from that server's
//! recent calls: each tells how long its inputs took from the client's send to the request's
//! arrival, decoding included. A configured bandwidth is a guess about a network nobody
//! measured, and encoding and decoding compete for the CPU like any kernel (on one host, the
//! whole copy does); the calls themselves say what sending n bytes there costs now.
//!
//! The fit is t = c0 + c1·b + c2·b/a by non-negative least squares over the recent calls: a
//! latency, a per-byte cost the host's load leaves alone (the wire) and one that stretches as
//! a time-shared CPU does (a: the fraction of a core the call got). The data decide how the
//! cost splits. The squares are of relative residuals: a 50-byte request and a 2 MB output
//! count alike, so the latency comes from the small transfers, not from what is left of the
//! large ones' noise (in absolute terms, 2 MB outputs that shared a 20 Mbit/s link with
//! other transfers, 0.8–3.4 s, set a latency of 0.13–0.43 s, every call to that server
//! looked that dear, and a slab plan left it out). The spread is that of the relative
//! residuals, set as the models' misfit is
//! ([`crate::misfit`]: 90% of them within the 90% interval). The reply goes
//! the same way back, so the same fit prices the outputs (nobody times that leg on its own).

use crate::stoch::Stoch;
use std::collections::VecDeque;

/// Calls remembered: enough for a steady fit, few enough to follow a link as it changes.
const KEPT: usize = 64;
/// Calls before the fit replaces the configured defaults.
const MIN_CALLS: usize = 4;
/// How far past the largest transfer seen the fit prices one: the per-byte cost fitted from
/// small messages is mostly their timer noise (50-byte requests once priced a 2 MB fetch over a
/// 20 Mbit/s link at 45 s, and at 2 ms).
const REACH: f64 = 16.0;

/// One server's recent client transfers and their fit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientLink {
    /// (bytes, CPU availability, seconds).
    recent: VecDeque<(f64, f64, f64)>,
    fit: Option<Fit>,
    /// The largest of the recent transfers, bytes.
    largest: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Fit {
    /// c0, c1, c2.
    c: [f64; 3],
    /// The spread of the residuals relative to the fitted times.
    relative_sd: f64,
}

fn features(bytes: f64, available: f64) -> [f64; 3] {
    [1.0, bytes, bytes / available]
}

impl Fit {
    fn at(&self, bytes: f64, available: f64) -> f64 {
        dot(&self.c, &features(bytes, available))
    }
}

/// A fraction of a core that can divide: missing or nonsense counts as a quiet host.
fn availability(a: Option<f64>) -> f64 {
    a.filter(|a| a.is_finite() && *a > 0.0)
        .map_or(1.0, |a| a.clamp(0.01, 1.0))
}

impl ClientLink {
    /// A call whose `bytes` of inputs took `seconds` to arrive while the server's host gave
    /// calls `cpu_available` of a core. Nonsense (negative or non-finite) is ignored.
    pub fn record(&mut self, bytes: u64, seconds: f64, cpu_available: Option<f64>) {
        if !(seconds.is_finite() && seconds >= 0.0) {
            return;
        }
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent
            .push_back((bytes as f64, availability(cpu_available), seconds));
        self.fit = fit_without_stalls(self.recent.make_contiguous());
        self.largest = self.recent.iter().map(|r| r.0).fold(0.0, f64::max);
    }

    /// Whether enough calls were seen to fit the link ([`transfer`](Self::transfer) answers).
    pub fn is_fitted(&self) -> bool {
        self.fit.is_some()
    }

    /// Seconds to move `bytes` one way while the host gives `cpu_available` of a core (`None`:
    /// quiet), with the spread of the recent calls about the fit; `None` until enough calls
    /// were seen, and for more than [`REACH`] times the largest of them.
    pub fn transfer(&self, bytes: u64, cpu_available: Option<f64>) -> Option<Stoch> {
        let f = self.fit?;
        if bytes as f64 > REACH * self.largest.max(1.0) {
            return None;
        }
        let t = f.at(bytes as f64, availability(cpu_available)).max(0.0);
        Some(Stoch::new(t, t * f.relative_sd))
    }
}

/// Seconds to move `bytes` over `own` link or, where it cannot price them (not fitted yet, or
/// far past what it carried), over the slowest of `others` that can; `None` when none can. A
/// client's own access link is most often the narrowest on its path to every server, so the
/// narrowest one measured is a better guess for an untaught server than a configured default:
/// on the test bed a graph's 2 MB output from a server no fetch had taught was priced at the
/// default gigabit, and the makespan predicted 30% short.
pub fn transfer_or_narrowest<'a>(
    own: &ClientLink,
    others: impl IntoIterator<Item = &'a ClientLink>,
    bytes: u64,
    cpu_available: Option<f64>,
) -> Option<Stoch> {
    own.transfer(bytes, cpu_available).or_else(|| {
        others
            .into_iter()
            .filter_map(|l| l.transfer(bytes, cpu_available))
            .filter(|t| t.mean.is_finite())
            .max_by(|a, b| a.mean.total_cmp(&b.mean))
    })
}

/// A transfer's weight in the fit: one over its time, so the squares are of relative errors.
/// A microsecond floor keeps a zero time finite.
fn weight(seconds: f64) -> f64 {
    1.0 / seconds.max(1e-6)
}

/// The normal equations of the three terms over the recent calls (weighted), built once per
/// refit: every subset's system is a part of them.
struct Normal {
    n: f64,
    /// XᵀX.
    gram: [[f64; 3]; 3],
    /// Xᵀt.
    xt: [f64; 3],
}

impl Normal {
    fn of(calls: &[([f64; 3], f64, f64)]) -> Normal {
        let mut nm = Normal {
            n: calls.len() as f64,
            gram: [[0.0; 3]; 3],
            xt: [0.0; 3],
        };
        for (x, t, w) in calls {
            let w2 = w * w;
            for i in 0..3 {
                for j in i..3 {
                    nm.gram[i][j] += w2 * x[i] * x[j];
                }
                nm.xt[i] += w2 * x[i] * t;
            }
        }
        for i in 0..3 {
            for j in 0..i {
                nm.gram[i][j] = nm.gram[j][i];
            }
        }
        nm
    }

    /// Least squares over the terms in `use_terms`, the others held at 0; `None` when the
    /// normal equations are singular (the calls do not tell those terms apart).
    fn solve(&self, use_terms: &[usize]) -> Option<[f64; 3]> {
        let k = use_terms.len();
        // Columns scaled to unit RMS, so bytes (1e7) and the constant (1) condition alike.
        let mut scale = [0.0; 3];
        for &j in use_terms {
            let ms = self.gram[j][j] / self.n;
            scale[j] = if ms > 0.0 { ms.sqrt() } else { return None };
        }
        let mut m = [[0.0f64; 4]; 3];
        for (r, &i) in use_terms.iter().enumerate() {
            for (c, &j) in use_terms.iter().enumerate() {
                m[r][c] = self.gram[i][j] / (scale[i] * scale[j]);
            }
            m[r][3] = self.xt[i] / scale[i];
        }
        // Gaussian elimination with partial pivoting on the k×k system.
        for col in 0..k {
            let piv = (col..k).max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))?;
            if m[piv][col].abs() < 1e-9 * self.n {
                return None;
            }
            m.swap(col, piv);
            let pivot = m[col];
            // Entries past the k used columns are zero in every row and stay so; the last is
            // the right-hand side.
            for (r, row) in m.iter_mut().enumerate().take(k) {
                if r != col {
                    let f = row[col] / pivot[col];
                    for (v, p) in row.iter_mut().zip(pivot.iter()).skip(col) {
                        *v -= f * p;
                    }
                }
            }
        }
        let mut c = [0.0; 3];
        for (r, &j) in use_terms.iter().enumerate() {
            c[j] = m[r][3] / m[r][r] / scale[j];
        }
        Some(c)
    }
}

/// How many times its fit's time a transfer may take before it is taken for a stall rather than
/// the link: a request sent into a partition arrives when the cut heals, seconds after it was
/// sent. On the test bed four such 50-byte requests among sixty of 2 ms priced every call to
/// the server at a third of a second, the agent sent it nothing more, and nothing newer ever
/// replaced them.
const STALL: f64 = 5.0;

/// [`fit`] without the transfers that took more than [`STALL`] times what the recent calls
/// make typical (and a millisecond): stalls are not the link. Typical is the fit weighted by the
/// measured times (which the fast calls lead) scaled by the median of the calls' times over
/// it: the stalls, a few, move neither; a link that really slowed down for most of the recent
/// calls moves the median, and the fit follows it.
fn fit_without_stalls(calls: &[(f64, f64, f64)]) -> Option<Fit> {
    if calls.len() < MIN_CALLS {
        return None;
    }
    let rows = rows_of(calls);
    let rough = best_fit(&rows)?;
    let mut ratios: Vec<f64> = rows
        .iter()
        .filter_map(|(x, t, _)| {
            let p = dot(&rough, x);
            (p > 0.0).then(|| t / p)
        })
        .collect();
    let scale = if ratios.is_empty() {
        1.0
    } else {
        let mid = ratios.len() / 2;
        *ratios.select_nth_unstable_by(mid, f64::total_cmp).1
    };
    let kept: Vec<(f64, f64, f64)> = calls
        .iter()
        .copied()
        .filter(|&(b, a, t)| t <= STALL * scale * dot(&rough, &features(b, a)) + 1e-3)
        .collect();
    if kept.len() < MIN_CALLS {
        return fit(calls);
    }
    fit(&kept)
}

/// The calls as the fit's rows: terms, time, and a weight of one over the time.
fn rows_of(calls: &[(f64, f64, f64)]) -> Vec<([f64; 3], f64, f64)> {
    calls
        .iter()
        .map(|(b, a, t)| (features(*b, *a), *t, weight(*t)))
        .collect()
}

/// The non-negative fit with the smallest relative residual: every subset of the terms is tried
/// (there are seven), and those that would need a negative coefficient are refused (a link
/// neither gives time back nor pays for receiving less).
fn fit(calls: &[(f64, f64, f64)]) -> Option<Fit> {
    if calls.len() < MIN_CALLS {
        return None;
    }
    let mut rows = rows_of(calls);
    // Weighted by the measured times first, then by that fit's own times: weights from the
    // readings alone favour the fast ones (a link that became ten times slower for most of
    // the recent calls would still be fitted at its old speed).
    let first = best_fit(&rows)?;
    for r in &mut rows {
        r.2 = weight(dot(&first, &r.0));
    }
    let c = best_fit(&rows)?;
    let relative_sd = crate::misfit::sd_of_errors(rows.iter().filter_map(|(x, t, _)| {
        let p = dot(&c, x);
        (p > 0.0).then(|| (t - p) / p)
    }));
    Some(Fit { c, relative_sd })
}

fn dot(c: &[f64; 3], x: &[f64; 3]) -> f64 {
    (0..3).map(|i| c[i] * x[i]).sum()
}

/// The coefficients of the subset of terms with the smallest weighted residual among those
/// that need none negative.
fn best_fit(rows: &[([f64; 3], f64, f64)]) -> Option<[f64; 3]> {
    const SUBSETS: [&[usize]; 7] = [&[0, 1, 2], &[0, 1], &[0, 2], &[1, 2], &[1], &[2], &[0]];
    let normal = Normal::of(rows);
    let rss = |c: &[f64; 3]| -> f64 {
        rows.iter()
            .map(|(x, t, w)| (w * (t - dot(c, x))).powi(2))
            .sum()
    };
    Some(
        SUBSETS
            .iter()
            .filter_map(|s| normal.solve(s))
            .filter(|c| c.iter().all(|v| *v >= 0.0 && v.is_finite()))
            .map(|c| (rss(&c), c))
            .min_by(|x, y| x.0.total_cmp(&y.0))?
            .1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_and_bandwidth_are_recovered_from_calls() {
        let mut l = ClientLink::default();
        assert_eq!(l.transfer(1_000, None), None);
        // 100 µs latency, 1 GB/s.
        for k in 0..20u64 {
            let b = (k % 5 + 1) * 10_000_000;
            l.record(b, 1e-4 + b as f64 * 1e-9, None);
        }
        let t = l.transfer(50_000_000, None).unwrap();
        assert!((t.mean - 0.0501).abs() < 1e-6, "{t:?}");
        assert!(t.sd < 1e-9, "{t:?}");
        let small = l.transfer(0, None).unwrap();
        assert!((small.mean - 1e-4).abs() < 1e-9, "{small:?}");
    }

    #[test]
    fn noisy_calls_give_a_spread_and_one_size_a_rate() {
        let mut l = ClientLink::default();
        for k in 0..10 {
            let jitter = if k % 2 == 0 { 1.1 } else { 0.9 };
            l.record(1_000_000, 1e-3 * jitter, Some(1.0));
        }
        let t = l.transfer(2_000_000, None).unwrap();
        // One size cannot split latency from bandwidth: the fit's time at twice the size is
        // between the two readings, and the spread is that of the calls about the fit.
        assert!(t.mean >= 0.9e-3 && t.mean <= 2.2e-3, "{t:?}");
        // Weighted by relative error, the fit sits a little below the plain mean (1 ms).
        let at_one = l.transfer(1_000_000, None).unwrap();
        assert!((at_one.mean - 1e-3).abs() < 3e-5, "{at_one:?}");
        let reach = at_one.sd / at_one.mean * crate::stoch::Z90;
        assert!((0.08..0.13).contains(&reach), "{at_one:?}");
    }

    #[test]
    fn large_transfers_that_shared_the_link_do_not_make_small_ones_dear() {
        // A server's recent calls on the test bed's 20 Mbit/s client link (from the agent's
        // log): 8-byte requests, and 2 and 4 MB inputs and fetches that ran alone (0.83 s for
        // 2 MB) or beside other transfers of the same graph (up to 3.4 s). Unweighted, the
        // line through them set a latency of 0.13 s.
        let small = [
            58e-6, 68e-6, 70e-6, 152e-6, 157e-6, 148e-6, 113e-6, 175e-6, 172e-6,
        ];
        let two_mb = [
            0.830, 0.986, 2.223, 2.009, 0.991, 2.934, 1.165, 0.830, 2.017, 2.509, 0.933, 2.583,
            1.499, 2.177, 1.550, 1.502, 0.830, 3.377, 1.548, 1.382, 0.957, 0.831,
        ];
        let four_mb = [3.056, 1.691, 3.085, 1.667, 3.039, 1.667];
        let mut l = ClientLink::default();
        for (k, t) in two_mb.iter().enumerate() {
            l.record(2_000_008, *t, None);
            l.record(8, small[k % small.len()], None);
            if let Some(t) = four_mb.get(k / 4).filter(|_| k % 4 == 0) {
                l.record(4_000_008, *t, None);
            }
        }
        let tiny = l.transfer(8, None).unwrap().mean;
        assert!(tiny < 1e-3, "an 8-byte request priced at {tiny} s");
        let two = l.transfer(2_000_000, None).unwrap().mean;
        assert!((0.8..2.5).contains(&two), "2 MB priced at {two} s");
    }

    #[test]
    fn the_fit_follows_the_link_as_it_changes_and_ignores_nonsense() {
        let mut l = ClientLink::default();
        for k in 0..KEPT as u64 {
            l.record(k * 1000, k as f64 * 1e-6, None);
        }
        // The link gets ten times slower: after a window of calls, only that is remembered.
        for k in 0..KEPT as u64 {
            l.record(k * 1000, k as f64 * 1e-5, None);
        }
        l.record(5, f64::NAN, None);
        l.record(5, -1.0, None);
        let t = l.transfer(1_000_000, None).unwrap();
        assert!((t.mean - 0.01).abs() < 1e-6, "{t:?}");
    }

    #[test]
    fn requests_held_up_by_a_partition_are_not_the_link() {
        let mut l = ClientLink::default();
        for k in 0..60u32 {
            l.record(50 + u64::from(k), 2e-3 + f64::from(k % 3) * 1e-4, None);
            if k % 15 == 0 {
                // Sent into a cut, arrived at the heal.
                l.record(50, 5.0, None);
            }
        }
        let t = l.transfer(60, None).unwrap();
        assert!(t.mean < 3e-3, "{t:?}");
        // A link that became ten times slower for most of the recent calls is followed.
        for _ in 0..40 {
            l.record(60, 2e-2, None);
        }
        let t = l.transfer(60, None).unwrap();
        assert!(t.mean > 1e-2, "{t:?}");
    }

    #[test]
    fn a_few_stalls_among_a_few_calls_are_dropped_too() {
        // A server just back from a partition: a handful of quick requests, and the three
        // that were sent into the cut and arrived at the heal.
        let mut l = ClientLink::default();
        for k in 0..8u32 {
            l.record(64, 2e-3 + f64::from(k) * 1e-5, None);
        }
        for _ in 0..3 {
            l.record(64, 5.0, None);
        }
        let t = l.transfer(64, None).unwrap();
        assert!(t.mean < 3e-3, "{t:?}");
    }

    #[test]
    fn a_size_far_past_every_transfer_seen_is_not_priced() {
        let mut l = ClientLink::default();
        // 50-byte requests whose times are the timer's: the per-byte fit is noise.
        for k in 0..10 {
            l.record(50, 2e-3 + f64::from(k) * 1e-4, None);
        }
        assert!(l.transfer(800, None).is_some());
        assert_eq!(l.transfer(2_000_000, None), None);
        // Once a 2 MB transfer was seen, sizes up to 16 times that are priced.
        l.record(2_000_000, 0.8, None);
        assert!(l.transfer(2_000_000, None).is_some());
        assert_eq!(l.transfer(40_000_000, None), None);
    }

    #[test]
    fn an_untaught_link_borrows_the_narrowest_that_can_price_the_size() {
        let link = |seconds_per_mb: f64, largest: u64| {
            let mut l = ClientLink::default();
            for k in 1..=8u64 {
                let b = largest * k / 8;
                l.record(b, 1e-4 + b as f64 * seconds_per_mb / 1e6, None);
            }
            l
        };
        let (fast, slow, small_only) =
            (link(0.01, 4_000_000), link(0.4, 4_000_000), link(5.0, 100));
        let untaught = ClientLink::default();
        let others = [&fast, &slow, &small_only];
        let t = transfer_or_narrowest(&untaught, others, 2_000_000, None).unwrap();
        // The slow link, not the one that never carried more than 100 bytes.
        assert!((t.mean - 0.8001).abs() < 1e-6, "{t:?}");
        // A link that can price the size itself is used as it is.
        let own = transfer_or_narrowest(&fast, others, 2_000_000, None).unwrap();
        assert!((own.mean - 0.0201).abs() < 1e-6, "{own:?}");
        assert_eq!(
            transfer_or_narrowest(&untaught, [&small_only], 2_000_000, None),
            None
        );
    }

    #[test]
    fn the_share_that_competes_for_the_cpu_is_found_and_stretched_by_load() {
        let mut l = ClientLink::default();
        // 1 ms latency, 0.5 ns/byte on the wire, 1 ns/byte of CPU work stretched by load.
        for k in 0..40u64 {
            let b = (k % 4 + 1) * 5_000_000;
            let a = [1.0, 0.5, 0.67, 0.33][(k / 4 % 4) as usize];
            l.record(b, 1e-3 + b as f64 * 0.5e-9 + b as f64 * 1e-9 / a, Some(a));
        }
        let quiet = l.transfer(10_000_000, None).unwrap().mean;
        let loaded = l.transfer(10_000_000, Some(0.5)).unwrap().mean;
        assert!((quiet - 0.016).abs() < 1e-6, "{quiet}");
        assert!((loaded - 0.026).abs() < 1e-6, "{loaded}");
    }
}
