//! Wall-clock time since the Unix epoch, for timestamps that leave the process (stored rows,
//! call timings compared across hosts). Decisions use monotonic time instead; a clock set
//! before 1970 reads as 0.

use std::time::{SystemTime, UNIX_EPOCH};

fn since_epoch() -> std::time::Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Nanoseconds since the epoch (saturating in the year 2554).
pub fn unix_ns() -> u64 {
    u64::try_from(since_epoch().as_nanos()).unwrap_or(u64::MAX)
}

/// Seconds since the epoch with the fraction kept: the unit of the agent's stored timestamps.
pub fn unix_s() -> f64 {
    since_epoch().as_secs_f64()
}
