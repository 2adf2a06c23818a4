//! The critical chain of a replayed schedule: the tasks that, one after the other, decided when
//! the last task ended. Walking back from the last task, each task waited either for an input
//! (its producer, plus the transfer) or for its server (the task before it on the same slot,
//! or the task before it in the server's order, whose start it may not pass). Only moving a
//! task of this chain can make the makespan shorter, so the local search tries those first.

use crate::graph::Mapping;
use crate::graph::dag::{Adjacency, TaskIdx};
use crate::graph::platform::CommModel;
use crate::graph::replay::Replay;

/// Tasks of the chain that ends last, from the last task back to the first.
pub(crate) fn critical_chain(
    adj: &Adjacency,
    comm: &CommModel,
    mapping: &Mapping,
    r: &Replay,
) -> Vec<TaskIdx> {
    let n = mapping.server_of.len();
    if n == 0 {
        return Vec::new();
    }
    // Start, and the task that ran before on the same slot and in the same server's order.
    let mut start = vec![0.0; n];
    let mut prev_lane: Vec<Option<TaskIdx>> = vec![None; n];
    let mut prev_order: Vec<Option<TaskIdx>> = vec![None; n];
    for slots in &r.per_server {
        let mut last_in_lane: Vec<Option<TaskIdx>> = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            start[slot.task] = slot.start_s;
            if last_in_lane.len() <= slot.lane {
                last_in_lane.resize(slot.lane + 1, None);
            }
            prev_lane[slot.task] = last_in_lane[slot.lane];
            last_in_lane[slot.lane] = Some(slot.task);
            prev_order[slot.task] = i.checked_sub(1).map(|j| slots[j].task);
        }
    }
    let mut t = (0..n)
        .max_by(|&a, &b| r.task_finish[a].total_cmp(&r.task_finish[b]))
        .unwrap_or(0);
    let mut chain = vec![t];
    let mut seen = vec![false; n];
    seen[t] = true;
    loop {
        let s = mapping.server_of[t];
        // Whatever released t last is what it waited for.
        let mut why: Option<(f64, TaskIdx)> = None;
        let mut consider = |release: f64, by: TaskIdx| {
            if why.is_none_or(|w| release > w.0) {
                why = Some((release, by));
            }
        };
        for &(q, bytes) in adj.preds(t) {
            let release = r.task_finish[q] + comm.transfer_s(mapping.server_of[q], s, bytes);
            consider(release, q);
        }
        if let Some(q) = prev_lane[t] {
            consider(r.task_finish[q], q);
        }
        if let Some(q) = prev_order[t] {
            consider(start[q], q);
        }
        // A release well before the start means t waited for nothing but queued work.
        match why {
            Some((release, q)) if release >= start[t] - 1e-9 * start[t].max(1.0) && !seen[q] => {
                seen[q] = true;
                chain.push(q);
                t = q;
            }
            _ => break,
        }
    }
    chain
}
