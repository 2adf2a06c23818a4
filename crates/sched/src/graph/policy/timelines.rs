//! Server timelines for placement with insertion (HEFT, PEFT and best-of's candidates): every
//! slot's busy intervals, sorted and disjoint, so an idle gap is the space between neighbours.

use crate::graph::platform::EtcMatrix;

/// Every slot's busy intervals, sorted and disjoint, from the queued work on; slots are
/// numbered across servers (`first_lane[s]..first_lane[s + 1]` are server `s`'s).
///
/// Most tasks fit in no idle gap: a search for one would walk into the slot's intervals only to
/// end after the last. So each slot keeps when its last interval ends and a bound on its
/// longest gap: a task longer than the bound starts at the end or when its inputs are in,
/// read from two flat arrays (on 1,000 servers this is most of HEFT's placements).
pub(crate) struct Timelines {
    first_lane: Vec<usize>,
    server_of_lane: Vec<usize>,
    intervals: Vec<Vec<(f64, f64)>>,
    end: Vec<f64>,
    /// Per slot, ≥ every gap's [`gap_bound`]: no task longer fits between two intervals.
    longest_gap: Vec<f64>,
}

impl Timelines {
    pub fn new(etc: &EtcMatrix) -> Self {
        let mut first_lane = Vec::with_capacity(etc.servers() + 1);
        let (mut server_of_lane, mut intervals, mut end) = (Vec::new(), Vec::new(), Vec::new());
        for s in 0..etc.servers() {
            first_lane.push(intervals.len());
            for f in etc.free_at(s) {
                server_of_lane.push(s);
                intervals.push(if f > 0.0 { vec![(0.0, f)] } else { Vec::new() });
                end.push(f);
            }
        }
        first_lane.push(intervals.len());
        let longest_gap = vec![0.0; intervals.len()];
        Timelines {
            first_lane,
            server_of_lane,
            intervals,
            end,
            longest_gap,
        }
    }

    pub fn lanes_of(&self, s: usize) -> std::ops::Range<usize> {
        self.first_lane[s]..self.first_lane[s + 1]
    }

    pub fn server_of(&self, lane: usize) -> usize {
        self.server_of_lane[lane]
    }

    /// The earliest start at or after `ready` where `dur` fits on `lane`.
    #[inline]
    pub fn earliest_start(&self, lane: usize, ready: f64, dur: f64) -> f64 {
        if dur > self.longest_gap[lane] {
            ready.max(self.end[lane])
        } else {
            earliest_gap(&self.intervals[lane], ready, dur)
        }
    }

    /// Books `[start, finish]` on `lane`, which [`Timelines::earliest_start`] found free.
    pub fn occupy(&mut self, lane: usize, start: f64, finish: f64) {
        let intervals = &mut self.intervals[lane];
        let at = intervals.partition_point(|iv| iv.1 <= start);
        intervals.insert(at, (start, finish));
        if at + 1 == intervals.len() {
            if start > self.end[lane] {
                let gap = gap_bound(self.end[lane], start);
                self.longest_gap[lane] = self.longest_gap[lane].max(gap);
            }
            self.end[lane] = finish;
        } else {
            // Filling a gap splits it in two; the longest may be gone, so measure again (the
            // insert already cost a pass over the slot).
            self.longest_gap[lane] = longest_gap(intervals);
        }
    }
}

/// More than the idle time between `from` and `to` by a margin a few ulps wide, so that a
/// task longer than it also fails `earliest_gap`'s rounded `start + dur <= to`.
fn gap_bound(from: f64, to: f64) -> f64 {
    (to - from) + 4.0 * f64::EPSILON * to.abs()
}

fn longest_gap(intervals: &[(f64, f64)]) -> f64 {
    let mut longest = 0.0f64;
    let mut prev_end = 0.0;
    for &(a, b) in intervals {
        if a > prev_end {
            longest = longest.max(gap_bound(prev_end, a));
        }
        prev_end = b;
    }
    longest
}

/// The earliest start at or after `ready` where `dur` fits between the intervals of one slot.
#[inline]
fn earliest_gap(intervals: &[(f64, f64)], ready: f64, dur: f64) -> f64 {
    // Intervals ending by `ready` cannot be in the way; ends are sorted because intervals are.
    let mut i = intervals.partition_point(|iv| iv.1 <= ready);
    let mut start = ready;
    while i < intervals.len() {
        let (a, b) = intervals[i];
        if start + dur <= a {
            break;
        }
        start = start.max(b);
        i += 1;
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn gap_search() {
        let iv = [(0.0, 2.0), (5.0, 6.0), (6.5, 9.0)];
        assert_eq!(earliest_gap(&iv, 0.0, 3.0), 2.0);
        assert_eq!(earliest_gap(&iv, 0.0, 3.5), 9.0);
        assert_eq!(earliest_gap(&iv, 3.0, 0.5), 3.0);
        assert_eq!(earliest_gap(&iv, 5.5, 0.5), 6.0);
        assert_eq!(earliest_gap(&[], 1.0, 1.0), 1.0);
    }

    proptest! {
        /// The shortcut past slots with no gap long enough gives the very start the search
        /// would, to the bit: durations are drawn from the gaps' own lengths (and a hair either
        /// side), where rounding decides whether a task fits.
        #[test]
        fn longest_gap_shortcut_agrees_with_the_search(
            busy_until in prop_oneof![Just(0.0), 0.0f64..5.0],
            steps in proptest::collection::vec((0usize..64, 0usize..64, 0u8..6, 0.0f64..3.0), 1..120),
        ) {
            let etc = EtcMatrix::new(1, 1, vec![1.0])
                .unwrap()
                .with_busy(vec![vec![busy_until]])
                .unwrap();
            let mut tl = Timelines::new(&etc);
            for (pick_ready, pick_gap, kind, x) in steps {
                let iv = tl.intervals[0].clone();
                let points: Vec<f64> = std::iter::once(0.0)
                    .chain(iv.iter().flat_map(|&(a, b)| [a, b]))
                    .collect();
                let ready = match pick_ready % 3 {
                    0 => points[pick_ready % points.len()],
                    _ => x * 10.0,
                };
                let gaps: Vec<f64> = std::iter::once(0.0)
                    .chain(iv.iter().map(|iv| iv.1))
                    .zip(iv.iter().map(|iv| iv.0))
                    .map(|(b, a)| a - b)
                    .filter(|g| *g > 0.0)
                    .collect();
                let g = if gaps.is_empty() { x } else { gaps[pick_gap % gaps.len()] };
                let dur = match kind {
                    0 => g,
                    1 => g.next_up(),
                    2 => g.next_down().max(0.0),
                    3 => 0.0,
                    _ => x,
                };
                let start = tl.earliest_start(0, ready, dur);
                prop_assert_eq!(start.to_bits(), earliest_gap(&iv, ready, dur).to_bits());
                tl.occupy(0, start, start + dur);
                let now = &tl.intervals[0];
                prop_assert!(now.windows(2).all(|w| w[0].1 <= w[1].0), "overlap: {:?}", now);
                prop_assert!(tl.longest_gap[0] >= longest_gap(now));
            }
        }
    }
}
