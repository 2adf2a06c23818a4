//! The share of a core a call gets, as the kernel's scheduler hands it out (seed 004's NWS
//! hybrid CPU sensor: a passive reading corrected by what processes actually obtain).
//!
//! A server run as a daemon has a session (and often a cgroup) of its own, and the scheduler
//! then shares the cores between groups before processes: the fair-share reading of the host
//! (`c / (b + 1)` on `c` cores with `b` busy processes) is wrong both ways. On two cores, a
//! dgemm server in its own session got 0.62 of a core beside three busy processes of another
//! session, where the reading said 0.48, and 0.80 on a host the reading called nearly quiet
//! (0.94). So what each call obtains is measured (its thread's CPU time over its wall time),
//! the models learn from that, and the share a new call would get is whichever of three
//! readings has lately been nearest what calls and short probes obtained:
//! - [`Reading::FairShare`], the passive reading as it is;
//! - [`Reading::Calibrated`], what calls and probes obtained at the same background load
//!   before (the busy processes the host's counters show, rounded): the scheduler's answer
//!   to a load, learned, whatever its groups;
//! - [`Reading::Recent`], what they obtained lately at the background load the counters show
//!   now: a load the counters cannot see (a quota, another group's weight) is followed as it
//!   is obtained, and a change they do see starts it again from the calibration, rather than
//!   dragging the last level's share along for a dozen calls.
//!
//! A kernel may run several threads (a BLAS with `threads = 2`): each is one of the host's
//! runnable threads, so beside `b` busy processes each of its `k` threads gets `c / (b + k)`
//! of a core, and what it obtained is its threads' CPU time over `k` times its wall time. The
//! share is per thread, and is the kernel's speed relative to a quiet host as long as `k` is
//! at most the cores (the sensor counts no more threads than cores). A CPU quota on the
//! server's control group ([`crate::cgroup`]) caps every reading at `quota / k`.

/// The most background processes told apart by [`Reading::Calibrated`]; more count as this.
const MOST_BUSY: usize = 16;
/// How fast the calibration and the recent shares follow what is obtained.
const GAIN: f64 = 0.25;
/// How fast a reading's error score follows its latest errors.
const ERROR_GAIN: f64 = 1.0 / 8.0;

/// The fraction of its wall time a kernel's threads ran on a core: `cpu_s / (wall_s ×
/// threads)`, at most 1. `None` when there is nothing to divide by.
pub fn obtained(cpu_s: f64, wall_s: f64, threads: u32) -> Option<f64> {
    let denom = wall_s * f64::from(threads.max(1));
    (cpu_s.is_finite() && cpu_s >= 0.0 && denom.is_finite() && denom > 0.0)
        .then(|| (cpu_s / denom).min(1.0))
}

/// Whether a kernel that obtained `obtained` of a core while the host offered `offered` was
/// held back by the CPU alone. One that waited for something else (a disk, a network, a
/// sleep, a lock) used far less than it was offered, and its time says nothing of the share:
/// its models learn its time as it was, not normalised by a share.
pub fn cpu_bound(obtained: f64, offered: f64) -> bool {
    obtained >= offered.clamp(0.0, 1.0) / 3.0
}

/// One of the ways the sensor reads the share a new call would get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    FairShare,
    Calibrated,
    Recent,
}

impl Reading {
    const ALL: [Reading; 3] = [Reading::FairShare, Reading::Calibrated, Reading::Recent];

    pub fn name(self) -> &'static str {
        match self {
            Reading::FairShare => "fair-share",
            Reading::Calibrated => "calibrated",
            Reading::Recent => "recent",
        }
    }
}

/// The share a new call would get, from the passive reading and what calls obtained.
#[derive(Clone, Debug)]
pub struct ShareSensor {
    cores: f64,
    /// The threads of one of the server's CPU-bound kernels.
    threads: f64,
    /// The cores the server's control group may use, if it has a quota.
    quota: Option<f64>,
    /// Per background load (busy processes, as the passive reading counts them), the share
    /// obtained there, smoothed.
    calibration: [Option<f64>; MOST_BUSY + 1],
    /// The share obtained lately, and the background load (bucket) it was obtained at.
    recent: Option<(f64, usize)>,
    /// Per reading, its squared error smoothed over the latest truths.
    errors: [Option<f64>; 3],
}

impl ShareSensor {
    /// A sensor for a host of `cores` cores whose kernels each run `threads` threads.
    pub fn new(cores: usize, threads: usize) -> Self {
        let cores = cores.max(1);
        Self {
            cores: cores as f64,
            threads: threads.clamp(1, cores) as f64,
            quota: None,
            calibration: [None; MOST_BUSY + 1],
            recent: None,
            errors: [None; 3],
        }
    }

    /// The threads a kernel's share is counted over.
    pub fn threads(&self) -> u32 {
        self.threads as u32
    }

    /// The server's control group may use at most `quota` cores from now on (`None`: no
    /// ceiling).
    pub fn set_quota(&mut self, quota: Option<f64>) {
        self.quota = quota.filter(|q| q.is_finite() && *q > 0.0);
    }

    /// The cores the server's control group may use, as last set.
    pub fn quota(&self) -> Option<f64> {
        self.quota
    }

    /// The most a kernel's thread can get under the group's quota.
    fn ceiling(&self) -> f64 {
        self.quota.map_or(1.0, |q| (q / self.threads).min(1.0))
    }

    /// Under fair sharing, what each thread of a new CPU-bound kernel gets beside
    /// `background` busy processes.
    pub fn fair_share(&self, background: f64) -> f64 {
        (self.cores / (background.max(0.0) + self.threads)).min(1.0)
    }

    fn bucket(background: f64) -> usize {
        (background.max(0.0).round() as usize).min(MOST_BUSY)
    }

    fn reading(&self, r: Reading, background: f64) -> f64 {
        let passive = self.fair_share(background);
        let b = Self::bucket(background);
        let calibrated = self.calibration[b].unwrap_or(passive);
        let read = match r {
            Reading::FairShare => passive,
            Reading::Calibrated => calibrated,
            Reading::Recent => match self.recent {
                Some((share, at)) if at == b => share,
                _ => calibrated,
            },
        };
        read.min(self.ceiling())
    }

    /// The reading with the least recent error (the passive one until something was
    /// obtained, and on a tie).
    pub fn chosen(&self) -> Reading {
        let score = |r: Reading| self.errors[r as usize].unwrap_or(f64::INFINITY);
        Reading::ALL
            .into_iter()
            .fold(Reading::FairShare, |best, r| {
                if score(r) < score(best) { r } else { best }
            })
    }

    /// The share a new call would get beside `background` busy processes (the host's
    /// counters' count, this server's own work left out).
    pub fn estimate(&self, background: f64) -> f64 {
        self.reading(self.chosen(), background)
    }

    /// A call or probe obtained `obtained` of a core beside `background` busy processes (the
    /// mean over its run): each reading is scored on it, then learns it.
    pub fn learn(&mut self, background: f64, obtained: f64) {
        if !(background.is_finite() && obtained.is_finite()) {
            return;
        }
        let obtained = obtained.clamp(0.0, 1.0);
        for r in Reading::ALL {
            let e = (self.reading(r, background) - obtained).powi(2);
            let slot = &mut self.errors[r as usize];
            *slot = Some(slot.map_or(e, |s| s + ERROR_GAIN * (e - s)));
        }
        let smooth = |old: Option<f64>| old.map_or(obtained, |o| o + GAIN * (obtained - o));
        let b = Self::bucket(background);
        self.calibration[b] = Some(smooth(self.calibration[b]));
        let recent = self.recent.filter(|(_, at)| *at == b).map(|(s, _)| s);
        self.recent = Some((smooth(recent), b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_call_obtained_is_its_cpu_time_over_its_wall_time_and_threads() {
        assert_eq!(obtained(0.125, 0.25, 1), Some(0.5));
        assert_eq!(obtained(0.375, 0.25, 2), Some(0.75));
        // A clock's rounding never makes more than a core a thread.
        assert_eq!(obtained(0.101, 0.1, 1), Some(1.0));
        assert_eq!(obtained(0.1, 0.0, 1), None);
        assert_eq!(obtained(f64::NAN, 0.1, 1), None);
    }

    #[test]
    fn a_kernel_that_waited_for_something_else_is_not_cpu_bound() {
        assert!(cpu_bound(0.62, 0.48));
        assert!(cpu_bound(0.3, 0.8));
        // A sleeping kernel uses next to nothing of what it was offered.
        assert!(!cpu_bound(0.01, 1.0));
        assert!(!cpu_bound(0.2, 0.9));
    }

    #[test]
    fn the_passive_reading_holds_until_calls_obtain_otherwise() {
        let s = ShareSensor::new(2, 1);
        assert_eq!(s.chosen(), Reading::FairShare);
        assert_eq!(s.estimate(3.0), 0.5);
        assert_eq!(s.estimate(0.5), 1.0);
    }

    #[test]
    fn group_scheduling_is_learned_per_background_load() {
        // Two cores; as a daemon in its own session the server obtains 0.8 on a host with
        // one stray busy process (fair share: 1) and 0.62 beside three (fair share: 0.5), the
        // loads coming and going.
        let mut s = ShareSensor::new(2, 1);
        for _ in 0..20 {
            for _ in 0..3 {
                s.learn(1.1, 0.8);
            }
            for _ in 0..3 {
                s.learn(2.9, 0.62);
            }
        }
        assert_eq!(s.chosen(), Reading::Calibrated);
        assert!((s.estimate(1.0) - 0.8).abs() < 0.01, "{}", s.estimate(1.0));
        assert!((s.estimate(3.0) - 0.62).abs() < 0.01, "{}", s.estimate(3.0));
        // A load never met yet is read as it is.
        assert_eq!(s.estimate(6.0), 2.0 / 7.0);
    }

    #[test]
    fn a_share_the_counters_cannot_see_is_followed_as_it_is_obtained() {
        // The host looks quiet (the load is in a cgroup whose quota the counters do not show,
        // say) and calls get 0.4 of a core: the recent shares win.
        let mut s = ShareSensor::new(4, 1);
        for i in 0..30 {
            s.learn(0.0, if i < 10 { 1.0 } else { 0.4 });
        }
        assert!((s.estimate(0.0) - 0.4).abs() < 0.02, "{}", s.estimate(0.0));
        assert_ne!(s.chosen(), Reading::FairShare);
    }

    #[test]
    fn a_change_of_load_the_counters_see_is_not_dragged_behind() {
        // A blind load halves what calls get at a background of three (the recent shares
        // follow it); the load leaves, the counters show it, and the next estimate is the
        // quiet host's calibration, not the last level's share smoothed towards it.
        let mut s = ShareSensor::new(2, 1);
        for _ in 0..10 {
            s.learn(0.0, 1.0);
            s.learn(3.0, 0.5);
        }
        for _ in 0..20 {
            s.learn(3.0, 0.3);
        }
        let recent = |b: f64| s.reading(Reading::Recent, b);
        assert!((recent(3.0) - 0.3).abs() < 0.01, "{}", recent(3.0));
        assert!((recent(0.0) - 1.0).abs() < 0.01, "{}", recent(0.0));
        assert!((s.estimate(0.0) - 1.0).abs() < 0.01, "{}", s.estimate(0.0));
    }

    #[test]
    fn a_kernels_threads_each_take_a_share() {
        // Two cores, a BLAS of two threads: alone it has both cores; beside one busy process
        // each of its threads gets two thirds of one, beside two half.
        let s = ShareSensor::new(2, 2);
        assert_eq!(s.estimate(0.0), 1.0);
        assert!((s.estimate(1.0) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.estimate(2.0), 0.5);
        // More threads than cores are counted as the cores.
        assert_eq!(ShareSensor::new(2, 8).threads(), 2);
    }

    #[test]
    fn a_quota_caps_every_reading() {
        // Half a core for the group on an idle four-core host: whatever the counters say.
        let mut s = ShareSensor::new(4, 1);
        s.set_quota(Some(0.5));
        assert_eq!(s.estimate(0.0), 0.5);
        // Two threads share the quota.
        let mut blas = ShareSensor::new(4, 2);
        blas.set_quota(Some(1.0));
        assert_eq!(blas.estimate(0.0), 0.5);
        // A quota larger than the kernel can use binds nothing.
        s.set_quota(Some(3.0));
        assert_eq!(s.estimate(0.0), 1.0);
        s.set_quota(None);
        assert_eq!(s.estimate(7.0), 0.5);
    }
}
