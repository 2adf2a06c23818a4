//! What a server tells the agent, and when: the load a heartbeat carries, when a change of
//! the host's availability is worth a heartbeat at once, how long one may go unanswered, and
//! whether finished calls' reports wait a moment for the rest of a burst. The daemon's
//! `agent_link.rs` sends what these say.

use gridwise_proto::LoadSample;
use std::time::Duration;

/// The least a heartbeat waits for its answer: a busy agent on a loaded host must not be
/// taken for a cut.
pub const ANSWER_WAIT_MIN: Duration = Duration::from_secs(2);
/// The most any message to the agent waits for its answer.
pub const ANSWER_WAIT_MAX: Duration = Duration::from_secs(5);
/// A change of the host's CPU availability at least this large is told at once: a call
/// ranked in the second before the next heartbeat would be estimated for a host that is gone.
pub const AVAILABILITY_STEP: f64 = 0.1;

/// What the server knows of itself when a heartbeat goes out.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostNow {
    /// Calls running, and calls waiting (for a slot, or holding one for their inputs).
    pub occupancy: (usize, usize),
    pub loadavg_1m: f64,
    /// Whether the server's own model benchmarks ran lately.
    pub benchmarking: bool,
    pub cpu_available: Option<f64>,
    pub free_memory_bytes: Option<u64>,
}

/// The load a heartbeat carries.
pub fn load(host: &HostNow) -> LoadSample {
    let (running, queued) = host.occupancy;
    LoadSample {
        running: u32::try_from(running).unwrap_or(u32::MAX),
        queued: u32::try_from(queued).unwrap_or(u32::MAX),
        loadavg_1m: host.loadavg_1m,
        benchmarking: host.benchmarking,
        cpu_available: host.cpu_available,
        free_memory_bytes: host.free_memory_bytes,
    }
}

/// Whether the availability measured `now` is worth a heartbeat before the next one is due,
/// the agent having last been told `told`: a process more or less on the host, not the
/// jitter of a sampler.
pub fn worth_telling_now(told: Option<f64>, now: Option<f64>) -> bool {
    match (told, now) {
        (Some(a), Some(b)) => (a - b).abs() >= AVAILABILITY_STEP,
        (None, Some(_)) => true,
        _ => false,
    }
}

/// How long a heartbeat, or a batch of what waits for the agent, may go unanswered at
/// heartbeat `interval`: a few intervals mean the path to the agent is cut or the connection
/// is stuck in TCP's back-off, and a new connection finds the agent as soon as the path
/// heals, the old one only at its next retransmit. Reports wait behind the heartbeat on the
/// same loop: with a 5 s deadline a batch sent into a partition held the next heartbeat 5 s
/// past the heal.
pub fn answer_deadline(interval: Duration) -> Duration {
    (interval * 3).clamp(ANSWER_WAIT_MIN, ANSWER_WAIT_MAX)
}

/// Whether the first report of a burst waits a moment for the others: unless a full batch is
/// already in (`waiting` reports with it) or no other call is running or waiting here (no
/// burst is coming). Sent at once, each report cost the agent a message and an answer in the
/// middle of ranking the next call; an idle server does not wait, or a client that asks for a
/// plan the moment its last calls came back sees their queue still on the servers.
pub fn linger_for_burst(waiting: usize, batch_max: usize, busy_calls: usize) -> bool {
    waiting + 1 < batch_max && busy_calls > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_carries_the_occupancy_and_the_host() {
        let l = load(&HostNow {
            occupancy: (2, 5),
            loadavg_1m: 1.5,
            benchmarking: true,
            cpu_available: Some(0.5),
            free_memory_bytes: Some(1 << 30),
        });
        assert_eq!((l.running, l.queued), (2, 5));
        assert!(l.benchmarking && l.loadavg_1m == 1.5);
        assert_eq!(
            (l.cpu_available, l.free_memory_bytes),
            (Some(0.5), Some(1 << 30))
        );
    }

    #[test]
    fn only_a_step_of_a_tenth_of_a_core_is_told_at_once() {
        assert!(!worth_telling_now(Some(0.9), Some(0.85)));
        assert!(worth_telling_now(Some(0.9), Some(0.75)));
        assert!(worth_telling_now(Some(0.5), Some(0.95)));
        assert!(worth_telling_now(None, Some(1.0)), "first measure");
        assert!(!worth_telling_now(Some(1.0), None), "nothing measured now");
    }

    #[test]
    fn answers_are_awaited_three_intervals_within_two_to_five_seconds() {
        assert_eq!(
            answer_deadline(Duration::from_secs(1)),
            Duration::from_secs(3)
        );
        assert_eq!(answer_deadline(Duration::from_millis(200)), ANSWER_WAIT_MIN);
        assert_eq!(answer_deadline(Duration::from_secs(10)), ANSWER_WAIT_MAX);
    }

    #[test]
    fn a_report_waits_for_its_burst_only_while_calls_are_coming_and_the_batch_has_room() {
        assert!(linger_for_burst(0, 64, 3));
        assert!(!linger_for_burst(0, 64, 0), "idle: no burst is coming");
        assert!(!linger_for_burst(63, 64, 3), "a full batch is in");
        assert!(!linger_for_burst(0, 1, 3));
    }
}
