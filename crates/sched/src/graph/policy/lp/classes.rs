//! Task classes: tasks whose ETC rows are identical (or, when that leaves too many, fall in the
//! same geometric bucket on every server) share one set of LP variables.
//!
//! Exact classes lose nothing: by symmetry the LP over classes (class c's n_c tasks spread as
//! counts) has the same optimum as the LP over tasks. Buckets of relative width w take each
//! server's smallest member ETC, so the LP stays a valid lower bound, at most a factor (1 + w)
//! below the exact one.

use crate::graph::dag::TaskIdx;
use crate::graph::platform::EtcMatrix;
use std::collections::HashMap;

/// Tasks grouped for the LP.
pub(crate) struct Classes {
    /// Per class, each server's ETC (the smallest among members; infinite = infeasible).
    pub rows: Vec<Vec<f64>>,
    /// Per class, its tasks.
    pub members: Vec<Vec<TaskIdx>>,
}

impl Classes {
    /// LP variables this grouping needs: one per (class, feasible server).
    pub fn variables(&self) -> usize {
        self.rows
            .iter()
            .map(|r| r.iter().filter(|v| v.is_finite()).count())
            .sum()
    }
}

/// Groups the tasks of `etc`: identical rows when `width` is 0, otherwise rows whose every
/// entry falls in the same bucket `[(1+width)^k, (1+width)^(k+1))` (feasibility must match).
pub(crate) fn group(etc: &EtcMatrix, width: f64) -> Classes {
    let m = etc.servers();
    let log_base = (1.0 + width).ln();
    let key_of = |v: f64| -> u64 {
        if width <= 0.0 {
            // +0.0 folds -0.0 into 0.0 so equal times share a key.
            (v + 0.0).to_bits()
        } else if v.is_infinite() {
            u64::MAX
        } else if v <= 0.0 {
            u64::MAX - 1
        } else {
            (v.ln() / log_base).floor() as i64 as u64
        }
    };
    let mut index: HashMap<Vec<u64>, usize> = HashMap::new();
    let mut classes = Classes {
        rows: Vec::new(),
        members: Vec::new(),
    };
    let mut key = Vec::with_capacity(m);
    for t in 0..etc.tasks() {
        let row = etc.row(t);
        key.clear();
        key.extend(row.iter().map(|&v| key_of(v)));
        match index.get(&key) {
            Some(&c) => {
                classes.members[c].push(t);
                for (r, &v) in classes.rows[c].iter_mut().zip(row) {
                    *r = r.min(v);
                }
            }
            None => {
                index.insert(key.clone(), classes.rows.len());
                classes.rows.push(row.to_vec());
                classes.members.push(vec![t]);
            }
        }
    }
    classes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_rows_share_a_class_and_buckets_keep_the_minimum() {
        #[rustfmt::skip]
        let etc = EtcMatrix::new(4, 2, vec![
            1.0, 2.0,
            1.0, 2.0,
            1.001, 2.0,
            1.0, f64::INFINITY,
        ]).unwrap();
        let exact = group(&etc, 0.0);
        assert_eq!(exact.members, [vec![0, 1], vec![2], vec![3]]);
        assert_eq!(exact.variables(), 5);
        let coarse = group(&etc, 0.01);
        assert_eq!(coarse.members.len(), 2);
        assert_eq!(coarse.rows[0], [1.0, 2.0]);
    }
}
