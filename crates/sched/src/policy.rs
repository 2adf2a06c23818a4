//! Ordering candidates by policy (DESIGN.md §6).
//!
//! Policies see candidates as sort keys plus their position in the name-sorted candidate list,
//! so ties break by name and the ordering itself never touches server data.

use gridwise_predict::EtcSpread;
use gridwise_proto::{Etc, Policy};
use std::cmp::Ordering;

/// A candidate under ordering.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Keyed {
    /// What the policy sorts by, ascending (see [`key`]).
    pub key: f64,
    /// Position in the candidate list, which is sorted by server name.
    pub pos: usize,
}

/// The sort key of a candidate: `Mct` sorts by the ETC total, `Conservative` by the total
/// `tf` standard deviations up, `ConstantSpeed` by the negated rate (fastest first; no usable
/// rate sorts last), `RoundRobin` by nothing.
pub fn key(
    policy: Policy,
    tf: f64,
    etc: impl FnOnce() -> Etc,
    rate: impl FnOnce() -> Option<f64>,
) -> f64 {
    match policy {
        Policy::Mct => etc().total_s(),
        Policy::Conservative => etc().conservative_s(tf),
        Policy::ConstantSpeed => rate().map_or(0.0, |r| -r),
        Policy::RoundRobin => 0.0,
    }
}

fn by_key_then_name(a: &Keyed, b: &Keyed) -> Ordering {
    a.key.total_cmp(&b.key).then(a.pos.cmp(&b.pos))
}

/// Orders `items` (given in name order) by `policy` and keeps the first `limit` (at least one).
/// `turn` is how many calls this round-robin rotation has served so far.
pub fn order(policy: Policy, items: &mut Vec<Keyed>, limit: usize, turn: u64) {
    let limit = limit.max(1);
    match policy {
        Policy::Mct | Policy::Conservative | Policy::ConstantSpeed => {
            // Only the best few are returned: select them in linear time, then sort just those.
            if items.len() > limit {
                items.select_nth_unstable_by(limit - 1, by_key_then_name);
                items.truncate(limit);
            }
            items.sort_unstable_by(by_key_then_name);
        }
        Policy::RoundRobin => {
            if !items.is_empty() {
                let start = (turn % items.len() as u64) as usize;
                items.rotate_left(start);
            }
            items.truncate(limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keyed(keys: &[f64]) -> Vec<Keyed> {
        keys.iter()
            .enumerate()
            .map(|(pos, &key)| Keyed { key, pos })
            .collect()
    }

    fn positions(v: &[Keyed]) -> Vec<usize> {
        v.iter().map(|k| k.pos).collect()
    }

    #[test]
    fn mct_sorts_ascending_with_ties_by_name() {
        let mut v = keyed(&[3.0, 1.0, 2.0, 1.0]);
        order(Policy::Mct, &mut v, 8, 0);
        assert_eq!(positions(&v), [1, 3, 2, 0]);
        let mut v = keyed(&[3.0, 1.0, 2.0, 1.0, 0.5]);
        order(Policy::Mct, &mut v, 2, 0);
        assert_eq!(positions(&v), [4, 1]);
    }

    #[test]
    fn constant_speed_puts_fastest_first_and_unrated_last() {
        let rates = [Some(1.0), None, Some(5.0), Some(5.0)];
        let mut v: Vec<Keyed> = rates
            .iter()
            .enumerate()
            .map(|(pos, r)| Keyed {
                key: key(Policy::ConstantSpeed, 1.0, || unreachable!(), || *r),
                pos,
            })
            .collect();
        order(Policy::ConstantSpeed, &mut v, 8, 0);
        assert_eq!(positions(&v), [2, 3, 0, 1]);
    }

    #[test]
    fn round_robin_rotates_by_turn() {
        for (turn, first) in [(0, 0), (1, 1), (2, 2), (3, 0), (7, 1)] {
            let mut v = keyed(&[0.0; 3]);
            order(Policy::RoundRobin, &mut v, 2, turn);
            assert_eq!(v.len(), 2);
            assert_eq!(v[0].pos, first);
            assert_eq!(v[1].pos, (first + 1) % 3);
        }
        let mut empty = Vec::new();
        order(Policy::RoundRobin, &mut empty, 2, 5);
        assert!(empty.is_empty());
    }

    proptest! {
        #[test]
        fn keeping_the_best_few_equals_sorting_everything(
            keys in prop::collection::vec(0u8..20, 0..80),
            limit in 1usize..50,
        ) {
            let keys: Vec<f64> = keys.into_iter().map(f64::from).collect();
            let mut full = keyed(&keys);
            full.sort_by(by_key_then_name);
            full.truncate(limit);
            let mut best = keyed(&keys);
            order(Policy::Mct, &mut best, limit, 0);
            prop_assert_eq!(best, full);
        }
    }

    #[test]
    fn limit_is_at_least_one() {
        let mut v = keyed(&[2.0, 1.0]);
        order(Policy::Mct, &mut v, 0, 0);
        assert_eq!(positions(&v), [1]);
    }
}
