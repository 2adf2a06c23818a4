//! Sites: groups of servers joined by fast links. Every transfer from one site to another
//! crosses the same narrow path (the sites' uplinks, a WAN link), so transfers between two
//! sites in one direction take turns on it, where a transfer inside a site has its link to
//! itself.
//!
//! The agent learns links pair by pair, each measured alone, and a pair's rate says nothing of
//! what it shares. On the two-site test bed (1 Gbit/s inside a site, 100 Mbit/s between) two
//! 2 MB inputs pulled across the uplink at once each took 0.23–0.37 s where 0.17 s was planned,
//! and graph predictions fell 6–9% short. The sites are read off the learned matrix instead:
//! a link at least [`SAME_SITE`] as fast as the fastest its sender has joins its two ends,
//! when both directions were measured and both are.

use gridwise_predict::{Links, Stoch};
use std::collections::HashMap;

/// A link joins its ends into one site when, in both directions, it is at least this fraction
/// of the fastest link measured out of its sender. Learned rates are within 10% of the truth
/// (`bench testbed`), and a site's links are several times faster than the paths between
/// sites (10× on the test bed), so a factor of 2 separates them with room on both sides.
pub const SAME_SITE: f64 = 0.5;

/// Which site each server is in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sites {
    site_of: Vec<u32>,
    count: usize,
}

impl Sites {
    /// Every server in one site: no transfer shares a path with another.
    pub fn one(servers: usize) -> Self {
        Sites {
            site_of: vec![0; servers],
            count: usize::from(servers > 0),
        }
    }

    /// Server `s` in site `site_of[s]`; sites are renumbered in order of first appearance.
    pub fn new(site_of: &[usize]) -> Self {
        let mut renumber = std::collections::HashMap::new();
        let site_of = site_of
            .iter()
            .map(|&x| {
                let next = renumber.len() as u32;
                *renumber.entry(x).or_insert(next)
            })
            .collect();
        Sites {
            site_of,
            count: renumber.len(),
        }
    }

    /// The sites `measured` links imply among `servers` servers: `(from, to, bandwidth B/s)`,
    /// one per measured direction. A server with no fast link measured both ways is a site of
    /// its own; unmeasured pairs join nothing.
    pub fn infer(servers: usize, measured: &[(usize, usize, f64)]) -> Self {
        let mut fastest = vec![0.0f64; servers];
        let mut bw = std::collections::HashMap::new();
        for &(a, b, rate) in measured {
            if a < servers && b < servers && a != b && rate > 0.0 {
                fastest[a] = fastest[a].max(rate);
                bw.insert((a, b), rate);
            }
        }
        let fast = |a: usize, b: usize| {
            bw.get(&(a, b))
                .is_some_and(|&r| r >= SAME_SITE * fastest[a])
        };
        let mut parent: Vec<usize> = (0..servers).collect();
        fn root(parent: &mut [usize], mut x: usize) -> usize {
            while parent[x] != x {
                parent[x] = parent[parent[x]];
                x = parent[x];
            }
            x
        }
        for &(a, b) in bw.keys() {
            if a < b && fast(a, b) && fast(b, a) {
                let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
                parent[ra.max(rb)] = ra.min(rb);
            }
        }
        let roots: Vec<usize> = (0..servers).map(|s| root(&mut parent, s)).collect();
        Sites::new(&roots)
    }

    /// The sites among the servers at `addrs` by what the agent learned of their links: each
    /// pair's latest sample, one measured direction standing for both as [`Links::get`] reads
    /// them.
    pub fn learned(addrs: &[&str], links: &Links) -> Self {
        let mut measured = Vec::new();
        for (a, from) in addrs.iter().enumerate() {
            for (b, to) in addrs.iter().enumerate() {
                if let Some(l) = links.get(from, to).filter(|_| a != b) {
                    measured.push((a, b, l.bandwidth_bytes_per_s));
                }
            }
        }
        Sites::infer(addrs.len(), &measured)
    }

    /// `cost[from][to]` with each pair across sites priced as the pair on its path learned
    /// from the most samples (the dearer on a tie): every pair between two sites crosses the
    /// same path, and the pair whose data crossed it step after step saw its queues where a
    /// probe of another pair, now and then, did not. `samples(from, to)` is 0 for a pair never
    /// measured; pairs inside a site, and paths with nothing measured, keep their own price.
    pub fn priced_by_path(&self, cost: &mut [Vec<Stoch>], samples: &dyn Fn(usize, usize) -> usize) {
        let n = cost.len().min(self.servers());
        let mut best: HashMap<usize, (usize, Stoch)> = HashMap::new();
        for (from, row) in cost.iter().enumerate().take(n) {
            for (to, &c) in row.iter().enumerate().take(n) {
                let k = samples(from, to);
                if let Some(p) = self.path(from, to).filter(|_| k > 0) {
                    let b = best.entry(p).or_insert((k, c));
                    if (k, c.mean) > (b.0, b.1.mean) {
                        *b = (k, c);
                    }
                }
            }
        }
        for (from, row) in cost.iter_mut().enumerate().take(n) {
            for (to, c) in row.iter_mut().enumerate().take(n) {
                if let Some((_, d)) = self.path(from, to).and_then(|p| best.get(&p)) {
                    *c = *d;
                }
            }
        }
    }

    pub fn servers(&self) -> usize {
        self.site_of.len()
    }

    /// How many sites there are.
    pub fn count(&self) -> usize {
        self.count
    }

    pub fn site(&self, server: usize) -> usize {
        self.site_of[server] as usize
    }

    /// The shared path a transfer from `from` to `to` crosses, numbered below `count()²`;
    /// None inside a site.
    #[inline]
    pub fn path(&self, from: usize, to: usize) -> Option<usize> {
        let (a, b) = (self.site(from), self.site(to));
        (a != b).then_some(a * self.count + b)
    }
}

/// When a transfer ready at `ready` that holds a path for `busy` s can start, given the spells
/// already booked on the path (sorted, not overlapping); books it. The earliest gap long enough
/// is taken, so a transfer booked late but ready early still goes first where it fits.
pub fn book(spells: &mut Vec<(f64, f64)>, ready: f64, busy: f64) -> f64 {
    let mut start = ready;
    let mut at = spells.len();
    for (i, &(s, e)) in spells.iter().enumerate() {
        if e <= start {
            continue;
        }
        if s >= start + busy {
            at = i;
            break;
        }
        start = start.max(e);
    }
    spells.insert(at, (start, start + busy));
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBIT: f64 = 125e6;
    const MBIT100: f64 = 12.5e6;

    /// lab1, lab2 | node1, node2: 1 Gbit/s inside, 100 Mbit/s across, every direction measured
    /// (with the few percent of noise a learned link has).
    fn two_sites() -> Vec<(usize, usize, f64)> {
        let mut v = Vec::new();
        for a in 0..4 {
            for b in 0..4 {
                if a != b {
                    let same = (a < 2) == (b < 2);
                    let noise = 1.0 - 0.01 * ((a * 4 + b) % 7) as f64;
                    v.push((a, b, if same { GBIT } else { MBIT100 } * noise));
                }
            }
        }
        v
    }

    #[test]
    fn fast_links_make_sites_and_slow_ones_separate_them() {
        let s = Sites::infer(4, &two_sites());
        assert_eq!(s.count(), 2);
        assert_eq!((s.site(0), s.site(1), s.site(2), s.site(3)), (0, 0, 1, 1));
        assert_eq!(s.path(0, 1), None);
        assert_eq!(s.path(0, 2), s.path(1, 3));
        assert_ne!(s.path(0, 2), s.path(2, 0));
    }

    #[test]
    fn equal_links_are_one_site_and_unmeasured_pairs_join_nothing() {
        let uniform: Vec<_> = (0..3)
            .flat_map(|a| (0..3).filter(move |&b| b != a).map(move |b| (a, b, GBIT)))
            .collect();
        assert_eq!(Sites::infer(3, &uniform).count(), 1);
        // Only one direction measured: no evidence the other is fast.
        assert_eq!(Sites::infer(2, &[(0, 1, GBIT)]).count(), 2);
        assert_eq!(Sites::infer(3, &[]).count(), 3);
    }

    #[test]
    fn pairs_across_two_sites_are_priced_as_the_pair_learned_best_on_their_path() {
        let s = Sites::infer(4, &two_sites());
        let probe = Stoch::point(0.087);
        let pulled = Stoch::new(0.095, 0.012);
        let inside = Stoch::point(0.009);
        let mut cost: Vec<Vec<Stoch>> = (0..4)
            .map(|a| {
                (0..4)
                    .map(|b| {
                        if s.path(a, b).is_some() {
                            probe
                        } else {
                            inside
                        }
                    })
                    .collect()
            })
            .collect();
        // node1 → lab2 was pulled over every step (lab2's part takes node1's rows), the
        // others only probed; a single dear sample of node2 → lab1 is outweighed. The way back
        // was probed, but lab2 → node1 never measured.
        cost[2][1] = pulled;
        cost[3][0] = Stoch::point(0.2);
        let unmeasured = Stoch::point(5.0);
        cost[1][2] = unmeasured;
        let samples = |a: usize, b: usize| match (a, b) {
            (2, 1) => 40,
            (1, 2) => 0,
            _ => 3,
        };
        s.priced_by_path(&mut cost, &samples);
        for (a, b) in [(2, 0), (2, 1), (3, 0), (3, 1)] {
            assert_eq!(cost[a][b], pulled, "{a} → {b}");
        }
        // The other direction is its own path: the probes' price, also for the pair never
        // measured (whose default was dearer than anything learned).
        for (a, b) in [(0, 2), (0, 3), (1, 2), (1, 3)] {
            assert_eq!(cost[a][b], probe, "{a} → {b}");
        }
        assert_eq!(cost[0][1], inside);
    }

    #[test]
    fn a_host_behind_its_own_slow_link_is_a_site_alone() {
        // Server 2's every link is 20 Mbit/s: fast by its own measure, slow by the others'.
        let mut v = Vec::new();
        for a in 0..3 {
            for b in 0..3 {
                if a != b {
                    v.push((a, b, if a == 2 || b == 2 { 2.5e6 } else { GBIT }));
                }
            }
        }
        let s = Sites::infer(3, &v);
        assert_eq!(s.count(), 2);
        assert_eq!(s.site(0), s.site(1));
        assert_ne!(s.site(0), s.site(2));
    }

    #[test]
    fn transfers_on_one_path_take_turns_and_early_ones_fill_gaps() {
        let mut p = Vec::new();
        assert_eq!(book(&mut p, 1.0, 0.5), 1.0);
        assert_eq!(book(&mut p, 1.0, 0.5), 1.5);
        assert_eq!(book(&mut p, 3.0, 1.0), 3.0);
        // Ready at 2.2 for 0.5 s: fits before 3.0.
        assert_eq!(book(&mut p, 2.2, 0.5), 2.2);
        // Ready at 2.0 for 0.5 s: 2.0..2.5 overlaps 2.2..2.7; next gap after 4.0.
        assert_eq!(book(&mut p, 2.0, 0.5), 4.0);
        // A short one fits in 2.0..2.2.
        assert_eq!(book(&mut p, 2.0, 0.2), 2.0);
        let sorted = p.windows(2).all(|w| w[0].1 <= w[1].0 + 1e-12);
        assert!(sorted, "{p:?}");
    }
}
