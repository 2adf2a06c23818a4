//! What the server measures of its host for the agent's forecasts (seed 004's NWS sensors): the
//! fraction of a core each thread of a new call would get, and the memory free for new work.
//!
//! CPU availability starts from `/proc/stat` every 250 ms: the background load `b` is the
//! cores busy over the last period, or the processes runnable at the sample (`procs_running`,
//! less this process's runnable threads) when that is more, as it is once the cores are
//! saturated; either way less what this process and its workers used (its own calls are the
//! agent's queue, not background load). Fair sharing would give each of a new kernel's `k`
//! threads `min(1, c / (b + k))` of a core on `c` cores, but a daemon in a session or cgroup
//! of its own is shared out by group: what calls obtain (their threads' CPU time over their
//! wall time) and a short spin of `k` threads every few seconds while no call runs correct
//! that reading (`gridwise_server_core::share`), and a CPU quota on the server's control
//! group caps it. The host's CPU pressure (PSI) is sampled too, for the metrics. A server
//! whose kernels all sleep (emulated ones) reports its configured load trace instead (host
//! load does not slow them), or full availability without one.

use crate::cpu_groups::{self, PressureSampler};
use gridwise_kernels::{KernelCtx, LoadTrace};
use gridwise_server_core::share::{self, ShareSensor};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the host is sampled.
pub(crate) const PERIOD: Duration = Duration::from_millis(250);
/// Samples kept for the calls' means (a minute).
const KEPT: usize = 240;
/// How often the share a new thread gets is probed while no call runs, and for how long: a
/// duty cycle of 0.5%. A kernel of several threads is probed with as many, for longer and
/// less often (1% of the cores for two threads): on a two-core VM two threads spinning
/// together lost one 4 ms tick at their start, so a 20 ms spin read 0.80 of a core, 40 ms
/// 0.90, 80 ms 0.95-1.00, on an idle host.
const PROBE_EVERY: Duration = Duration::from_secs(4);
const PROBE_SPIN: Duration = Duration::from_millis(20);
const PROBE_EVERY_THREADS: Duration = Duration::from_secs(8);
const PROBE_SPIN_THREADS: Duration = Duration::from_millis(80);

/// How long a probe of `threads` threads spins, and how often one is made.
fn probe_plan(threads: u32) -> (Duration, Duration) {
    if threads > 1 {
        (PROBE_SPIN_THREADS, PROBE_EVERY_THREADS)
    } else {
        (PROBE_SPIN, PROBE_EVERY)
    }
}

/// Runs shorter than this teach the sensor nothing: a scheduler's time slice is a few ms, and
/// a run of a few slices either got its core or did not.
const LEARN_FROM: Duration = Duration::from_millis(10);

/// Where availability comes from.
enum Source {
    /// The configured trace, from the server's start.
    Trace(Arc<LoadTrace>, Instant),
    /// Nothing slows the server's kernels.
    Idle,
    /// The host, sampled in the background: the busy processes beside this server's work.
    Host(Mutex<VecDeque<(Instant, f64)>>, Box<Mutex<ShareSensor>>),
}

/// The server's sensors.
pub struct Sensors {
    source: Source,
    /// Kernel runs begun on this server (calls and model benchmarks): a probe that saw one
    /// start is thrown away.
    runs_started: AtomicU64,
    runs_ended: AtomicU64,
    /// The host's CPU pressure over the last period (an `f64`'s bits; NaN until read).
    pressure: AtomicU64,
}

/// What a probe's spin obtained of a core.
struct Probed {
    from: Instant,
    to: Instant,
    obtained: f64,
}

/// A kernel's run on the calling thread, timed: its result, its span, and the share of a core
/// to normalise its time by.
pub struct TimedRun<T> {
    pub value: T,
    pub started: Instant,
    pub ended: Instant,
    /// What the run got of a core: for a kernel that sleeps, the configured trace's load; for
    /// one bound by the CPU on a sampled host, what its threads obtained (CPU time over wall
    /// time); `None` for a run that waited on something else (taken as it was).
    pub share: Option<f64>,
}

impl Sensors {
    /// Sensors for a server whose emulated kernels run under `trace` (time 0 at `origin`), or
    /// else the host's for its CPU-bound kernels, the most threads one runs being
    /// `cpu_threads` (`None`: every kernel sleeps, and nothing slows them).
    pub fn start(
        trace: Option<Arc<LoadTrace>>,
        origin: Instant,
        cpu_threads: Option<u32>,
    ) -> Arc<Sensors> {
        let source = match (trace, cpu_threads) {
            (Some(t), _) => Source::Trace(t, origin),
            (None, None) => Source::Idle,
            (None, Some(k)) => Source::Host(
                Mutex::new(VecDeque::with_capacity(KEPT)),
                Box::new(Mutex::new(ShareSensor::new(
                    crate::host::cores() as usize,
                    k as usize,
                ))),
            ),
        };
        let sensors = Arc::new(Sensors {
            source,
            runs_started: AtomicU64::new(0),
            runs_ended: AtomicU64::new(0),
            pressure: AtomicU64::new(f64::NAN.to_bits()),
        });
        if matches!(sensors.source, Source::Host(..)) {
            let weak = Arc::downgrade(&sensors);
            std::thread::Builder::new()
                .name("sensors".into())
                .spawn(move || {
                    let mut cpu = CpuSampler::default();
                    let mut pressure = PressureSampler::default();
                    let mut next_probe = Instant::now();
                    let mut probed: Option<Probed> = None;
                    // Ends with the server (when the last handle goes).
                    while let Some(s) = weak.upgrade() {
                        if let Some(p) = pressure.sample() {
                            s.pressure.store(p.to_bits(), Ordering::Relaxed);
                        }
                        if let (Some(b), Source::Host(samples, _)) = (cpu.sample(), &s.source) {
                            let mut q = samples.lock().unwrap_or_else(|p| p.into_inner());
                            if q.len() == KEPT {
                                q.pop_front();
                            }
                            q.push_back((Instant::now(), b));
                        }
                        // The sample just taken covers the last probe's spin.
                        if let Some(p) = probed.take() {
                            s.learn_probe(p);
                        }
                        if Instant::now() >= next_probe {
                            // A quota can be set or changed while the server runs
                            // (`systemctl set-property`, a pod resized).
                            if let Some(mut sensor) = s.share_sensor() {
                                sensor.set_quota(cpu_groups::quota_cores());
                            }
                            probed = s.probe();
                            let threads = s.share_sensor().map_or(1, |x| x.threads());
                            next_probe = Instant::now() + probe_plan(threads).1;
                        }
                        drop(s);
                        std::thread::sleep(PERIOD);
                    }
                })
                .ok();
        }
        sensors
    }

    fn share_sensor(&self) -> Option<std::sync::MutexGuard<'_, ShareSensor>> {
        match &self.source {
            Source::Host(_, s) => Some(s.lock().unwrap_or_else(|p| p.into_inner())),
            _ => None,
        }
    }

    /// Spins as many threads as a kernel runs (for [`probe_plan`]'s time) and measures what
    /// share of a core each got, unless a kernel ran meanwhile (its own share is the better
    /// truth, and the spin would take from it).
    fn probe(&self) -> Option<Probed> {
        let busy = || {
            let started = self.runs_started.load(Ordering::SeqCst);
            (started, started != self.runs_ended.load(Ordering::SeqCst))
        };
        let threads = self.share_sensor()?.threads();
        let length = probe_plan(threads).0;
        let (before, running) = busy();
        if running {
            return None;
        }
        let from = Instant::now();
        // Each thread times its own spin: a thread woken on an idle core of a virtual machine
        // can start milliseconds late, which says nothing of the share it then gets.
        let spin = || {
            let (start, c0) = (Instant::now(), thread_cpu_time());
            while start.elapsed() < length {
                std::hint::spin_loop();
            }
            (thread_cpu_time().saturating_sub(c0), start.elapsed())
        };
        let spins: Vec<(Duration, Duration)> = std::thread::scope(|s| {
            let others: Vec<_> = (1..threads).map(|_| s.spawn(spin)).collect();
            let mine = spin();
            std::iter::once(mine)
                .chain(others.into_iter().filter_map(|h| h.join().ok()))
                .collect()
        });
        let to = Instant::now();
        if busy() != (before, false) {
            return None;
        }
        let cpu: Duration = spins.iter().map(|s| s.0).sum();
        let wall: Duration = spins.iter().map(|s| s.1).sum();
        let obtained = share::obtained(cpu.as_secs_f64(), wall.as_secs_f64(), 1)?;
        Some(Probed { from, to, obtained })
    }

    /// Teaches the sensor what a probe obtained, once a sample covers its spin.
    fn learn_probe(&self, p: Probed) {
        if let (Some(b), Some(mut s)) = (self.background_over(p.from, p.to), self.share_sensor()) {
            s.learn(b, p.obtained);
        }
    }

    /// Runs `run` (a kernel of `threads` threads, started on this one, with `ctx`) and times
    /// it: for a kernel that does not sleep, on a sampled host, the share of a core each of
    /// its threads obtained is its CPU time (this thread's and what `ctx` counted elsewhere)
    /// over its wall time and threads, and teaches the sensor.
    pub fn timed<T>(
        &self,
        sleeps: bool,
        threads: u32,
        ctx: &KernelCtx,
        run: impl FnOnce() -> T,
    ) -> TimedRun<T> {
        self.runs_started.fetch_add(1, Ordering::SeqCst);
        let (started, cpu0) = (Instant::now(), thread_cpu_time());
        let value = run();
        let (ended, cpu1) = (Instant::now(), thread_cpu_time());
        self.runs_ended.fetch_add(1, Ordering::SeqCst);
        let cpu = cpu1.saturating_sub(cpu0) + ctx.cpu_elsewhere();
        let share = if sleeps {
            self.sleeping_over(started, ended)
        } else {
            self.cpu_share(started, ended, cpu, threads)
        };
        TimedRun {
            value,
            started,
            ended,
            share,
        }
    }

    /// What a run from `from` to `to` that used `cpu` got of a core (see [`TimedRun::share`]).
    fn cpu_share(&self, from: Instant, to: Instant, cpu: Duration, threads: u32) -> Option<f64> {
        let Source::Host(..) = &self.source else {
            return self.availability_over(from, to);
        };
        let wall = to.saturating_duration_since(from);
        let threads = threads.clamp(1, crate::host::cores());
        let obtained = share::obtained(cpu.as_secs_f64(), wall.as_secs_f64(), threads)?;
        let background = self.background_over(from, to);
        let mut sensor = self.share_sensor()?;
        let offered = background.map_or(1.0, |b| sensor.estimate(b));
        if !share::cpu_bound(obtained, offered) {
            return None;
        }
        // The sensor is calibrated for its kernels' threads: a run of another count says
        // what that count got, not what they would.
        if let Some(b) = background.filter(|_| wall >= LEARN_FROM && threads == sensor.threads()) {
            sensor.learn(b, obtained);
        }
        Some(obtained)
    }

    /// The mean background load between `from` and `to`: the samples taken over the span and
    /// the one just after it (each covers the period before it), else the latest.
    fn background_over(&self, from: Instant, to: Instant) -> Option<f64> {
        let Source::Host(q, _) = &self.source else {
            return None;
        };
        let q = q.lock().unwrap_or_else(|p| p.into_inner());
        let within: Vec<f64> = q
            .iter()
            .filter(|s| s.0 > from && s.0 <= to + PERIOD)
            .map(|s| s.1)
            .collect();
        if within.is_empty() {
            q.back().map(|s| s.1)
        } else {
            Some(within.iter().sum::<f64>() / within.len() as f64)
        }
    }

    /// The fraction of a core a new call would get now; `None` until the host was sampled.
    pub fn availability_now(&self) -> Option<f64> {
        match &self.source {
            Source::Trace(t, origin) => Some(t.at(origin.elapsed().as_secs_f64())),
            Source::Idle => Some(1.0),
            Source::Host(q, sensor) => {
                let q = q.lock().unwrap_or_else(|p| p.into_inner());
                let background = settled(q.iter().rev().take(SETTLE).map(|s| s.1))?;
                let sensor = sensor.lock().unwrap_or_else(|p| p.into_inner());
                Some(sensor.estimate(background))
            }
        }
    }

    /// The mean fraction of a core a new call would have got between `from` and `to`: exact
    /// under a trace; from the host, the sensor's estimate at the mean background load.
    pub fn availability_over(&self, from: Instant, to: Instant) -> Option<f64> {
        match &self.source {
            Source::Trace(t, origin) => {
                let at = |i: Instant| i.saturating_duration_since(*origin).as_secs_f64();
                Some(t.mean(at(from), at(to)))
            }
            Source::Idle => Some(1.0),
            Source::Host(..) => {
                let b = self.background_over(from, to)?;
                self.share_sensor().map(|s| s.estimate(b))
            }
        }
    }

    /// [`availability_over`](Self::availability_over) for a kernel that sleeps (an emulated
    /// one): only the configured trace slows it, never the host's other processes. On a server
    /// that also runs real kernels the host's load was a third of the way to doubling the
    /// speeds its emulated models learned (2,400–4,200 rows/s for a true 2,000).
    pub fn sleeping_over(&self, from: Instant, to: Instant) -> Option<f64> {
        match &self.source {
            Source::Trace(..) => self.availability_over(from, to),
            Source::Idle | Source::Host(..) => Some(1.0),
        }
    }

    /// Whether what these sensors report slows a kernel that sleeps: a configured trace does
    /// (it is the emulated load), the host's own load does not.
    pub fn slows_sleeping_kernels(&self) -> bool {
        matches!(self.source, Source::Trace(..))
    }

    /// The fraction of the last sampling period in which some task on the host waited for a
    /// core (PSI's `some`), where the kernel counts it.
    pub fn cpu_pressure(&self) -> Option<f64> {
        Some(f64::from_bits(self.pressure.load(Ordering::Relaxed))).filter(|p| !p.is_nan())
    }

    /// The cores the server's control group may use, as the sampler last read them.
    pub fn cpu_quota(&self) -> Option<f64> {
        self.share_sensor()?.quota()
    }

    /// Memory free for new work, bytes (`MemAvailable`).
    pub fn free_memory_bytes(&self) -> Option<u64> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kb: u64 = text
            .lines()
            .find(|l| l.starts_with("MemAvailable:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kb * 1024)
    }
}

/// The samples a load must hold for before a new call is estimated under it.
const SETTLE: usize = 5;

/// The background load a new call would meet, from the latest samples: their median. The
/// runnable count is a snapshot, and a process that runs for a fraction of a second (a client
/// on the same host encoding its next call's inputs) is gone before the call runs; a mean of
/// the last half second passed it on as load, and a two-thread kernel's share then dipped to
/// two thirds between calls, on an idle host, so its quiet calls were forecast 10-15% too
/// slow. A load that stays is followed within three samples (0.75 s).
fn settled(latest: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = latest.filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Consecutive readings of `/proc/stat` and of this process's CPU time.
#[derive(Default)]
struct CpuSampler {
    last: Option<(u64, u64, u64)>,
}

impl CpuSampler {
    /// The background load over the period since the last call, in busy processes; `None` at
    /// the first.
    fn sample(&mut self) -> Option<f64> {
        let (total, idle, runnable) = host_jiffies()?;
        let own = own_jiffies()?;
        let own_runnable = own_runnable_threads();
        let prev = self.last.replace((total, idle, own));
        let (t0, i0, o0) = prev?;
        let dt = total.saturating_sub(t0);
        if dt == 0 {
            return None;
        }
        let cores = crate::host::cores() as f64;
        // /proc/stat sums every core; this process's ticks count once per core-tick used.
        let busy = dt.saturating_sub(idle.saturating_sub(i0)) as f64 / dt as f64 * cores;
        let own_cores = own.saturating_sub(o0) as f64 / dt as f64 * cores;
        Some(background(busy, own_cores, runnable, own_runnable))
    }
}

/// The busy processes besides this server: the cores busy less the cores this process used,
/// or, once the cores are saturated (busy cores cannot exceed them; runnable threads can, and
/// each takes a share), the threads runnable less this process's (its kernels' threads and
/// the sampler itself, running while it reads). A kernel's runnable thread once counted only
/// as the fraction of a core it used: beside three busy processes on two cores a running
/// dgemm (half a core) left 2.5, a fair share of 0.57 where calls got 0.50, and 2.5 falls
/// between the calibrations of two and three busy processes; `bench predict` (same session)
/// saw calls at three busy expected to get 0.60–0.71.
fn background(busy_cores: f64, own_cores: f64, runnable: u64, own_runnable: u64) -> f64 {
    let others_runnable = runnable.saturating_sub(own_runnable.max(1)) as f64;
    (busy_cores - own_cores).max(others_runnable).max(0.0)
}

/// This process's threads that are runnable now (`R` in `/proc/PID/task/*/stat`), the
/// calling one included, and its library workers' (child processes, whose kernels are this
/// server's work: a BLAS worker's two threads once passed for two busy processes beside it).
fn own_runnable_threads() -> u64 {
    let own = std::process::id();
    std::iter::once(own)
        .chain(gridwise_kernels::child_pids(own))
        .map(|pid| {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                return 0;
            };
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
                .filter(|stat| {
                    // The state follows the command name, which may hold spaces and
                    // parentheses.
                    stat.rfind(')')
                        .and_then(|i| stat[i + 1..].split_whitespace().next())
                        == Some("R")
                })
                .count() as u64
        })
        .sum::<u64>()
        .max(1)
}

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which lives on this stack.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    if r != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// All cores' jiffies, their idle and iowait jiffies, and the processes runnable now, from
/// `/proc/stat`.
fn host_jiffies() -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let runnable = text
        .lines()
        .find_map(|l| l.strip_prefix("procs_running "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let line = text.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((total, idle, runnable))
}

/// This process's user and system jiffies and its running children's (library workers,
/// commands), from `/proc/PID/stat`.
fn own_jiffies() -> Option<u64> {
    let own = std::process::id();
    let mine = jiffies_of(own)?;
    Some(
        mine + gridwise_kernels::child_pids(own)
            .into_iter()
            .filter_map(jiffies_of)
            .sum::<u64>(),
    )
}

/// A process's user and system jiffies.
fn jiffies_of(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_reported_as_it_is_and_averaged_over_a_call() {
        let origin = Instant::now() - Duration::from_secs(10);
        let trace = Arc::new(LoadTrace::new(vec![(0.0, 0.5), (20.0, 1.0)]).unwrap());
        let s = Sensors::start(Some(trace), origin, None);
        assert_eq!(s.availability_now(), Some(0.5));
        // From 18 s to 22 s after the origin: half the time at 0.5, half at 1.
        let mean = s
            .availability_over(
                origin + Duration::from_secs(18),
                origin + Duration::from_secs(22),
            )
            .unwrap();
        assert!((mean - 0.75).abs() < 1e-9, "{mean}");
        let idle = Sensors::start(None, origin, None);
        assert_eq!(idle.availability_now(), Some(1.0));
        // A sleeping kernel follows the trace, and on a host of real kernels is never slowed.
        let (from, to) = (
            origin + Duration::from_secs(18),
            origin + Duration::from_secs(22),
        );
        assert_eq!(s.sleeping_over(from, to), s.availability_over(from, to));
        let host = Sensors::start(None, origin, Some(1));
        assert_eq!(host.sleeping_over(from, to), Some(1.0));
        // So the agent hears of the trace's load for sleeping kernels, and of no host's.
        assert!(s.slows_sleeping_kernels());
        assert!(!host.slows_sleeping_kernels() && !idle.slows_sleeping_kernels());
    }

    #[test]
    fn a_run_is_normalised_by_what_it_obtained_and_only_when_the_cpu_held_it_back() {
        let s = Sensors::start(None, Instant::now(), Some(1));
        let ctx = KernelCtx::new();
        let spin = |d: Duration| {
            let t = Instant::now();
            while t.elapsed() < d {
                std::hint::spin_loop();
            }
        };
        let busy = s.timed(false, 1, &ctx, || spin(Duration::from_millis(30)));
        assert!(
            busy.share.is_none_or(|a| a > 0.0 && a <= 1.0),
            "{:?}",
            busy.share
        );
        // A kernel that waits on something else used next to none of the core it was offered.
        let waiting = s.timed(false, 1, &ctx, || {
            std::thread::sleep(Duration::from_millis(30))
        });
        assert_eq!(waiting.share, None);
        // CPU used in another process counts as the kernel's.
        let elsewhere = KernelCtx::new();
        let worker = s.timed(false, 1, &elsewhere, || {
            std::thread::sleep(Duration::from_millis(30));
            elsewhere.add_cpu_elsewhere(Duration::from_millis(29));
        });
        let wall = (worker.ended - worker.started).as_secs_f64();
        let share = worker.share.expect("CPU-bound: 29 ms of about 30");
        assert!(
            (share - (0.029 / wall).min(1.0)).abs() < 0.02,
            "{share} over {wall} s"
        );
        // A sleeping kernel on a host of real ones is never slowed by the host's load.
        let sleeping = s.timed(true, 1, &ctx, || {
            std::thread::sleep(Duration::from_millis(5))
        });
        assert_eq!(sleeping.share, Some(1.0));
    }

    #[test]
    fn a_process_that_runs_for_a_moment_is_not_a_load() {
        // Newest first: a burst of two samples on an idle host, then a load that stays.
        assert_eq!(settled([1.0, 1.0, 0.0, 0.0, 0.0].into_iter()), Some(0.0));
        assert_eq!(settled([2.0, 2.0, 2.0, 0.0, 0.0].into_iter()), Some(2.0));
        assert_eq!(settled([0.5].into_iter()), Some(0.5));
        assert_eq!(settled(std::iter::empty()), None);
    }

    #[test]
    fn this_servers_running_kernels_are_not_background_load() {
        // Two cores saturated by three busy processes and a kernel of this server (half a
        // core), read while the sampler runs: three busy processes besides it.
        assert_eq!(background(2.0, 0.5, 5, 2), 3.0);
        // The same host between calls.
        assert_eq!(background(2.0, 0.0, 4, 1), 3.0);
        // A quiet host with a kernel running: nothing besides it.
        assert_eq!(background(1.0, 1.0, 2, 2), 0.0);
        // Cores not saturated: the busy cores tell, less this server's.
        assert_eq!(background(1.5, 1.0, 2, 2), 0.5);
        // A count read before the process's threads were: never below zero.
        assert_eq!(background(0.0, 0.0, 1, 3), 0.0);
    }

    #[test]
    fn the_host_is_sampled_into_a_fraction_of_a_core() {
        let s = Sensors::start(None, Instant::now(), Some(1));
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.availability_now().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let a = s.availability_now().expect("sampled within 5 s");
        assert!(a > 0.0 && a <= 1.0, "{a}");
        assert!(s.free_memory_bytes().is_some_and(|m| m > 0));
        let over = s.availability_over(Instant::now() - Duration::from_secs(1), Instant::now());
        assert!(over.is_some_and(|x| x > 0.0 && x <= 1.0));
    }
}
