//! Reads what the kernel's control groups say of this server's CPU: the quota that caps its
//! group and the host's CPU pressure (`gridwise_server_core::cgroup` reads the texts).

use gridwise_server_core::cgroup;
use std::path::Path;
use std::time::Instant;

/// Where the hierarchies are mounted on Debian, systemd and Kubernetes hosts: v2 alone at
/// `/sys/fs/cgroup`, or beside v1 at `/sys/fs/cgroup/unified`; v1's `cpu` controller alone
/// or with `cpuacct`.
const V2_MOUNTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];
const V1_CPU_MOUNTS: [&str; 3] = [
    "/sys/fs/cgroup/cpu",
    "/sys/fs/cgroup/cpu,cpuacct",
    "/sys/fs/cgroup/cpuacct,cpu",
];

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The cores this process's control groups let it use, if any of them has a quota.
pub fn quota_cores() -> Option<f64> {
    let groups = cgroup::own_groups(&read(Path::new("/proc/self/cgroup"))?);
    let joined = |mount: &str, group: &str| Path::new(mount).join(group.trim_start_matches('/'));
    let mut quotas = Vec::new();
    if let Some(g) = &groups.v2
        && let Some(mount) = V2_MOUNTS
            .into_iter()
            .find(|m| Path::new(m).join("cgroup.controllers").exists())
    {
        for p in cgroup::path_and_ancestors(g) {
            quotas
                .push(read(&joined(mount, &p).join("cpu.max")).and_then(|t| cgroup::quota_v2(&t)));
        }
    }
    if let Some(g) = &groups.v1_cpu
        && let Some(mount) = V1_CPU_MOUNTS
            .into_iter()
            .find(|m| Path::new(m).join("cpu.cfs_quota_us").exists())
    {
        for p in cgroup::path_and_ancestors(g) {
            let dir = joined(mount, &p);
            quotas.push(
                read(&dir.join("cpu.cfs_quota_us"))
                    .zip(read(&dir.join("cpu.cfs_period_us")))
                    .and_then(|(q, p)| cgroup::quota_v1(&q, &p)),
            );
        }
    }
    cgroup::binding_quota(quotas)
}

/// Consecutive readings of the host's CPU pressure (`/proc/pressure/cpu`, kernels from 4.20
/// with PSI on).
#[derive(Default)]
pub struct PressureSampler {
    last: Option<(Instant, u64)>,
}

impl PressureSampler {
    /// The fraction of the time since the last call in which some runnable task waited for
    /// a core; `None` at the first call or where the kernel keeps no such count.
    pub fn sample(&mut self) -> Option<f64> {
        let total = cgroup::pressure_some_total_us(&read(Path::new("/proc/pressure/cpu"))?)?;
        let now = Instant::now();
        let (then, before) = self.last.replace((now, total))?;
        cgroup::pressure_over(before, total, (now - then).as_micros() as u64)
    }
}
