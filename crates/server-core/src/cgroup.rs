//! What the kernel's control groups say of the CPU a server may use, read from the texts of
//! `/proc/self/cgroup`, the cgroup files and `/proc/pressure/cpu` (the daemon reads them).
//!
//! A quota (`cpu.max` in cgroup v2, `cpu.cfs_quota_us` over `cpu.cfs_period_us` in v1) is a
//! hard ceiling on the cores the whole group may use, whatever the host's load: a server
//! under `systemd-run -p CPUQuota=50%` or a Kubernetes CPU limit of 500m gets half a core on
//! an idle host, where the host's counters would say a whole one. The ceiling of the nearest
//! group and of every group above it holds, so the least of them is the one that binds.
//!
//! Pressure stall information (`some` in `/proc/pressure/cpu`, or a v2 group's `cpu.pressure`)
//! is the fraction of time at least one runnable task waited for a core. It says the host is
//! contended, not by how much: with three busy processes on two cores or thirty it reads 1.
//! So it is reported (the server's metrics) beside the share, not used to estimate it.

/// Where this process's groups are, from `/proc/self/cgroup`: the v2 group's path (the
/// `0::` line) and the v1 `cpu` controller's, each relative to its hierarchy's mount.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnGroups {
    pub v2: Option<String>,
    pub v1_cpu: Option<String>,
}

/// Reads `/proc/self/cgroup`'s lines (`id:controllers:path`).
pub fn own_groups(proc_self_cgroup: &str) -> OwnGroups {
    let mut g = OwnGroups::default();
    for line in proc_self_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            g.v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "cpu") {
            g.v1_cpu = Some(path.to_string());
        }
    }
    g
}

/// The groups from `path` up to the hierarchy's root, nearest first (`/a/b` gives `/a/b`,
/// `/a`, `/`): each may hold a ceiling.
pub fn path_and_ancestors(path: &str) -> Vec<String> {
    let mut out = vec![];
    let mut p = path.trim_end_matches('/').to_string();
    while !p.is_empty() {
        out.push(p.clone());
        p.truncate(p.rfind('/').unwrap_or(0));
    }
    out.push("/".to_string());
    out
}

/// The cores a v2 group may use, from its `cpu.max` (`$MAX $PERIOD`, `max` for none).
pub fn quota_v2(cpu_max: &str) -> Option<f64> {
    let mut f = cpu_max.split_whitespace();
    let max = f.next()?;
    let period: f64 = f.next().map_or(Some(100_000.0), |p| p.parse().ok())?;
    let max: f64 = max.parse().ok()?;
    (max > 0.0 && period > 0.0).then(|| max / period)
}

/// The cores a v1 group may use, from `cpu.cfs_quota_us` (`-1` for none) and
/// `cpu.cfs_period_us`.
pub fn quota_v1(quota_us: &str, period_us: &str) -> Option<f64> {
    let q: f64 = quota_us.trim().parse().ok()?;
    let p: f64 = period_us.trim().parse().ok()?;
    (q > 0.0 && p > 0.0).then(|| q / p)
}

/// The ceiling that binds: the least of the groups' quotas, `None` when none has one.
pub fn binding_quota(quotas: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    quotas.into_iter().flatten().reduce(f64::min)
}

/// The `some` line's `total` (µs stalled since boot) from a PSI file's text.
pub fn pressure_some_total_us(psi: &str) -> Option<u64> {
    psi.lines()
        .find(|l| l.starts_with("some "))?
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The fraction of a span of `span_us` in which some task waited for a core, from two
/// readings of the `some` total.
pub fn pressure_over(total_before_us: u64, total_after_us: u64, span_us: u64) -> Option<f64> {
    (span_us > 0)
        .then(|| (total_after_us.saturating_sub(total_before_us) as f64 / span_us as f64).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_finds_its_groups_in_either_hierarchy() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/d7\n2:cpuacct:/\n\
                      1:cpu:/gridwise/server\n0::/system.slice/gridwise.service\n";
        assert_eq!(
            own_groups(hybrid),
            OwnGroups {
                v2: Some("/system.slice/gridwise.service".into()),
                v1_cpu: Some("/gridwise/server".into()),
            }
        );
        // Debian's v1 mounts cpu and cpuacct together.
        assert_eq!(
            own_groups("3:cpu,cpuacct:/user.slice\n").v1_cpu.as_deref(),
            Some("/user.slice")
        );
        assert_eq!(own_groups("garbage\n"), OwnGroups::default());
    }

    #[test]
    fn every_group_up_to_the_root_may_hold_the_ceiling() {
        assert_eq!(
            path_and_ancestors("/system.slice/gridwise.service"),
            vec!["/system.slice/gridwise.service", "/system.slice", "/"]
        );
        assert_eq!(path_and_ancestors("/"), vec!["/"]);
    }

    #[test]
    fn quotas_read_in_cores_and_the_least_binds() {
        assert_eq!(quota_v2("50000 100000\n"), Some(0.5));
        assert_eq!(quota_v2("max 100000\n"), None);
        assert_eq!(quota_v2("150000\n"), Some(1.5));
        assert_eq!(quota_v1("-1\n", "100000\n"), None);
        assert_eq!(quota_v1("200000\n", "100000\n"), Some(2.0));
        assert_eq!(binding_quota([None, Some(2.0), Some(0.5), None]), Some(0.5));
        assert_eq!(binding_quota([None, None]), None);
    }

    #[test]
    fn pressure_is_the_stalled_fraction_between_two_readings() {
        let psi = "some avg10=0.14 avg60=0.03 avg300=0.17 total=1310164517\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(pressure_some_total_us(psi), Some(1_310_164_517));
        assert_eq!(pressure_some_total_us("full total=3\n"), None);
        assert_eq!(pressure_over(1_000, 126_000, 250_000), Some(0.5));
        // A counter read a little late never makes more than all of the span.
        assert_eq!(pressure_over(0, 260_000, 250_000), Some(1.0));
        assert_eq!(pressure_over(5, 5, 0), None);
    }
}
