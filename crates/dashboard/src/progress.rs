//! How far the work the agent planned has got: for each recent graph and divisible job, its
//! calls done, running and waiting, and the time its plan says is left. Computed here, from
//! the plans and the reports the dashboard keeps, so the page only draws it.

use serde::Serialize;

/// One call of a plan, as the progress view follows it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedCall {
    /// When the plan starts and ends it, seconds after the plan was made.
    pub start_s: f64,
    pub end_s: f64,
    /// What its server reported: `None` while it has not, else whether it succeeded.
    pub reported: Option<bool>,
}

/// A plan's progress at one moment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Progress {
    /// What the plan is (`graph (heft), 40 calls`, `divide dgemm_rows 4000 m`).
    pub what: String,
    pub calls: usize,
    /// Reported, failed ones included.
    pub done: usize,
    pub failed: usize,
    /// Not reported, and past their planned start.
    pub running: usize,
    /// Not reported, and not due to start yet.
    pub waiting: usize,
    /// Seconds since the plan was made.
    pub elapsed_s: f64,
    /// What the plan says is left: the latest planned end of a call not yet reported, less
    /// the time gone (0 once every call reported).
    pub left_s: f64,
    /// Seconds the calls not yet reported are behind their plan (0 when on time): a call
    /// still unreported past its planned end.
    pub late_s: f64,
}

/// The progress, `elapsed_s` after it was made, of the plan `calls`.
pub fn progress(what: String, calls: &[PlannedCall], elapsed_s: f64) -> Progress {
    let mut p = Progress {
        what,
        calls: calls.len(),
        done: 0,
        failed: 0,
        running: 0,
        waiting: 0,
        elapsed_s,
        left_s: 0.0,
        late_s: 0.0,
    };
    let mut last_end = f64::NEG_INFINITY;
    for c in calls {
        match c.reported {
            Some(ok) => {
                p.done += 1;
                p.failed += usize::from(!ok);
            }
            None => {
                if elapsed_s >= c.start_s {
                    p.running += 1;
                } else {
                    p.waiting += 1;
                }
                last_end = last_end.max(c.end_s);
            }
        }
    }
    if last_end.is_finite() {
        p.left_s = (last_end - elapsed_s).max(0.0);
        p.late_s = (elapsed_s - last_end).max(0.0);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(start_s: f64, end_s: f64, reported: Option<bool>) -> PlannedCall {
        PlannedCall {
            start_s,
            end_s,
            reported,
        }
    }

    #[test]
    fn calls_are_done_running_or_waiting_and_the_plan_says_what_is_left() {
        let plan = [
            call(0.0, 1.0, Some(true)),
            call(0.0, 1.5, Some(false)),
            call(1.0, 2.0, None),
            call(2.0, 3.5, None),
        ];
        let p = progress("graph".into(), &plan, 1.2);
        assert_eq!(
            (p.calls, p.done, p.failed, p.running, p.waiting),
            (4, 2, 1, 1, 1)
        );
        assert!((p.left_s - 2.3).abs() < 1e-12, "{p:?}");
        assert_eq!(p.late_s, 0.0);
    }

    #[test]
    fn calls_unreported_past_their_planned_end_are_late_not_negative_time_left() {
        let plan = [call(0.0, 1.0, Some(true)), call(0.0, 2.0, None)];
        let p = progress("divide".into(), &plan, 2.5);
        assert_eq!((p.running, p.left_s), (1, 0.0));
        assert!((p.late_s - 0.5).abs() < 1e-12);
        // Everything reported: nothing left, nothing late, whatever the clock says.
        let all = [call(0.0, 1.0, Some(true))];
        let p = progress("graph".into(), &all, 9.0);
        assert_eq!((p.done, p.left_s, p.late_s), (1, 0.0, 0.0));
    }
}
