//! A service's providers by speed tier, each tier in the order its servers free a slot.
//!
//! MCT spreads work until completion times level out, so neither a server's queue wait nor its
//! rate alone rules many servers out. Within a tier the rates differ by at most an eighth of an
//! octave (by the rate the server registered with; its model may differ, which costs pruning,
//! never exactness), so the tier's best rate at the call's sizes and its earliest free slot
//! bound every total in it, and the tier can be walked from that slot on until the bound passes
//! the k-th best total found. When a slot frees does not depend on the time of the decision
//! ([`frees_at_s`](crate::queue::ServerQueue::frees_at_s)), so the order holds between decisions
//! and changes only where a queue does.

/// Tiers per octave of registered rate.
const PER_OCTAVE: f64 = 8.0;

#[derive(Clone, Debug, Default)]
pub(super) struct Tiers {
    /// Per provider position: its tier.
    tier_of: Vec<u32>,
    /// Per provider position: the [`order_key`] of when it frees a slot.
    key_of: Vec<i64>,
    /// Per tier: its providers as (key, position), sorted, earliest free slot first. A
    /// sorted vector rather than a tree: tiers are a few dozen servers, and walking them is
    /// what every decision does.
    by_free: Vec<Vec<(i64, u32)>>,
    /// Per registry slot: its provider position, `u32::MAX` for a server not providing.
    pos_of: Vec<u32>,
}

impl Tiers {
    /// Providers at positions `0..` with these registry slots, registered rates and
    /// [`frees_at_s`](crate::queue::ServerQueue::frees_at_s).
    pub(super) fn build(providers: impl Iterator<Item = (usize, f64, f64)>) -> Self {
        let mut t = Tiers::default();
        let mut names: Vec<i64> = Vec::new();
        for (pos, (slot, rate, frees_at)) in providers.enumerate() {
            let name = tier_name(rate);
            let tier = names.iter().position(|&n| n == name).unwrap_or_else(|| {
                names.push(name);
                t.by_free.push(Vec::new());
                names.len() - 1
            });
            let pos = u32::try_from(pos).expect("fewer than 2^32 providers");
            t.tier_of.push(tier as u32);
            let key = order_key(frees_at);
            t.key_of.push(key);
            t.by_free[tier].push((key, pos));
            if t.pos_of.len() <= slot {
                t.pos_of.resize(slot + 1, u32::MAX);
            }
            t.pos_of[slot] = pos;
        }
        for tier in &mut t.by_free {
            tier.sort_unstable();
        }
        t
    }

    /// The provider position of registry slot `slot`, if it provides.
    pub(super) fn position(&self, slot: usize) -> Option<usize> {
        self.pos_of
            .get(slot)
            .filter(|&&p| p != u32::MAX)
            .map(|&p| p as usize)
    }

    /// The server at `pos` now frees a slot at `frees_at`.
    pub(super) fn update(&mut self, pos: usize, frees_at: f64) {
        let key = order_key(frees_at);
        let old = std::mem::replace(&mut self.key_of[pos], key);
        if old != key {
            let tier = &mut self.by_free[self.tier_of[pos] as usize];
            if let Ok(at) = tier.binary_search(&(old, pos as u32)) {
                tier.remove(at);
            }
            let at = tier.partition_point(|&e| e < (key, pos as u32));
            tier.insert(at, (key, pos as u32));
        }
    }

    pub(super) fn count(&self) -> usize {
        self.by_free.len()
    }

    pub(super) fn tier_of(&self, pos: usize) -> usize {
        self.tier_of[pos] as usize
    }

    /// When the `at`-th server of tier `tier` (in free order) frees a slot, and its position.
    pub(super) fn nth_in_free_order(&self, tier: usize, at: usize) -> Option<(f64, usize)> {
        self.by_free[tier]
            .get(at)
            .map(|&(key, pos)| (from_order_key(key), pos as usize))
    }
}

/// The tier of a registered rate; one tier for every rate with no logarithm.
fn tier_name(rate: f64) -> i64 {
    if rate.is_finite() && rate > 0.0 {
        (rate.log2() * PER_OCTAVE).floor() as i64
    } else {
        i64::MIN
    }
}

/// An integer in the order of [`f64::total_cmp`]; [`from_order_key`] gives the float back.
fn order_key(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

fn from_order_key(key: i64) -> f64 {
    f64::from_bits((key ^ (((key >> 63) as u64) >> 1) as i64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_keys_sort_as_floats_and_round_trip() {
        let xs = [
            f64::NEG_INFINITY,
            -1e300,
            -1.0,
            -0.0,
            0.0,
            1e-300,
            1.0,
            2.5,
            1e300,
            f64::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(order_key(w[0]) < order_key(w[1]), "{} < {}", w[0], w[1]);
        }
        for x in xs {
            assert_eq!(from_order_key(order_key(x)).to_bits(), x.to_bits());
        }
    }

    #[test]
    fn a_tier_walks_in_free_order_after_updates() {
        // Slots 5, 7, 9 at positions 0, 1, 2; the first two in one tier.
        let mut t = Tiers::build(
            [(5, 1e9, 3.0), (7, 1.02e9, f64::NEG_INFINITY), (9, 4e9, 1.0)].into_iter(),
        );
        assert_eq!(t.count(), 2);
        assert_eq!(t.tier_of(0), t.tier_of(1));
        assert_eq!(t.position(7), Some(1));
        assert_eq!(t.position(6), None);
        let order = |t: &Tiers| {
            (0..)
                .map_while(|i| t.nth_in_free_order(t.tier_of(0), i))
                .collect::<Vec<_>>()
        };
        assert_eq!(order(&t), [(f64::NEG_INFINITY, 1), (3.0, 0)]);
        t.update(1, 4.0);
        assert_eq!(order(&t), [(3.0, 0), (4.0, 1)]);
    }
}
