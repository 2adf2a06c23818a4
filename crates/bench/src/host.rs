//! What the machine's CPUs did over a run, from `/proc/stat`: how busy they were, and how much
//! of their time the hypervisor gave to other guests (steal). On a shared VM a neighbour can
//! take a tenth of the CPUs for minutes: a figure taken then is not a figure of this code, and
//! the rows that say how much was stolen let a reader set such runs apart.

/// The CPU time counters of all cores at one moment, in jiffies.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostCpu {
    busy: f64,
    total: f64,
    steal: f64,
}

impl HostCpu {
    pub(crate) fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let f: Vec<f64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        let at = |i: usize| f.get(i).copied().unwrap_or(0.0);
        let total: f64 = f.iter().sum();
        // user nice system idle iowait irq softirq steal …: idle and iowait are not busy.
        HostCpu {
            busy: total - at(3) - at(4),
            total,
            steal: at(7),
        }
    }

    /// The share of all cores' time since `before` that was busy (stolen time included).
    pub(crate) fn busy_since(&self, before: &HostCpu) -> f64 {
        (self.busy - before.busy) / (self.total - before.total).max(1.0)
    }

    /// The share of all cores' time since `before` that the hypervisor gave to other guests.
    pub(crate) fn stolen_since(&self, before: &HostCpu) -> f64 {
        (self.steal - before.steal) / (self.total - before.total).max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_of_the_time_between_two_readings() {
        let before = HostCpu {
            busy: 100.0,
            total: 1000.0,
            steal: 10.0,
        };
        let after = HostCpu {
            busy: 150.0,
            total: 1200.0,
            steal: 30.0,
        };
        assert_eq!(after.busy_since(&before), 0.25);
        assert_eq!(after.stolen_since(&before), 0.1);
        // This machine's counters only grow.
        let a = HostCpu::now();
        let b = HostCpu::now();
        assert!(b.total >= a.total && b.steal >= a.steal && b.busy >= a.busy);
    }
}
