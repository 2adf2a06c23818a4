//! What the server can tell about its host: cores, memory, load average.

/// CPU cores available to this process.
pub fn cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

/// Physical memory in bytes (0 where unknown).
pub fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// The memory this process may use: physical memory, or its address-space limit
/// (`ulimit -v`) if that is lower.
pub fn usable_memory_bytes() -> u64 {
    let physical = memory_bytes();
    match address_space_limit() {
        Some(limit) if physical == 0 || limit < physical => limit,
        _ => physical,
    }
}

/// The process's address-space limit, if it has one.
fn address_space_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } == 0;
    (ok && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// The one-minute load average (0 where unknown).
pub fn loadavg_1m() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_facts_are_sane() {
        assert!(super::cores() >= 1);
        assert!(super::loadavg_1m() >= 0.0);
        assert!(
            super::usable_memory_bytes() <= super::memory_bytes().max(1)
                || super::memory_bytes() == 0
        );
    }
}
