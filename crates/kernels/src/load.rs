//! Background load as an availability trace: the fraction of a core a call gets over time, in
//! (0, 1]. An emulated server under a trace stretches its kernels exactly as a time-shared CPU
//! would (the work done is the integral of the availability), and its sensors report the
//! trace; the simulator applies the same traces to its servers.
//!
//! A trace is written out (`[[from_s, fraction], …]`) or generated from a seed, like the two
//! loads of seed 001's evaluation: `random` bursts of 1–3 competing processes switched on and off
//! at random, and a `steady`, slowly drifting availability (an AR(1) series, like its replayed
//! GrADS traces).

use serde::{Deserialize, Serialize};

/// How long a generated trace runs before it repeats, s.
const GENERATED_PERIOD_S: f64 = 4.0 * 3600.0;

/// Piecewise-constant availability: 1 until the first step, each step holding until the next;
/// a generated trace repeats every [`GENERATED_PERIOD_S`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadTrace {
    steps: Vec<(f64, f64)>,
    period: Option<f64>,
}

/// A trace as configured: written out, or generated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "a load trace: [[from_s, fraction], ...] or {kind = \"random\" | \"steady\", ...}"
)]
pub enum LoadSpec {
    /// `[[from_s, fraction], …]` by strictly increasing time.
    Steps(Vec<(f64, f64)>),
    /// A generated trace.
    Generated(Generated),
}

/// A generated trace, by kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Generated {
    /// Idle spells and busy spells of exponential lengths; a busy spell runs 1 to
    /// `max_processes` competing CPU-bound processes, so a call gets 1/(k+1) of the core.
    Random {
        /// Seed of the draws.
        #[serde(default)]
        seed: u64,
        /// Mean idle spell, s.
        #[serde(default = "twenty")]
        mean_idle_s: f64,
        /// Mean busy spell, s.
        #[serde(default = "twenty")]
        mean_busy_s: f64,
        /// Most competing processes in a busy spell.
        #[serde(default = "three")]
        max_processes: u32,
    },
    /// Availability drifting around `mean` as an AR(1) series stepped every `step_s`:
    /// a(t+1) = mean + phi·(a(t) − mean) + noise, clamped to [0.1, 1].
    Steady {
        /// Seed of the noise.
        #[serde(default)]
        seed: u64,
        /// The level it drifts around.
        #[serde(default = "point_six")]
        mean: f64,
        /// Standard deviation of the series around its mean.
        #[serde(default = "point_one")]
        sd: f64,
        /// Lag-one correlation: near 1, slow drift.
        #[serde(default = "point_nine_five")]
        phi: f64,
        /// Seconds between steps.
        #[serde(default = "two")]
        step_s: f64,
    },
}

fn twenty() -> f64 {
    20.0
}
fn three() -> u32 {
    3
}
fn point_six() -> f64 {
    0.6
}
fn point_one() -> f64 {
    0.1
}
fn point_nine_five() -> f64 {
    0.95
}
fn two() -> f64 {
    2.0
}

/// xorshift64*: enough randomness for load traces, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        // SplitMix64 first: xorshift's first draws from nearby raw seeds are nearly equal, so
        // traces of seeds 11, 12 and 13 would all start with the same long idle spell.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }

    /// Standard normal, by Box–Muller.
    fn normal(&mut self) -> f64 {
        let (u, v) = (1.0 - self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

impl LoadSpec {
    /// The trace, or what is wrong with the spec.
    pub fn trace(&self) -> Result<LoadTrace, String> {
        match self {
            LoadSpec::Steps(steps) => LoadTrace::new(steps.clone()),
            LoadSpec::Generated(g) => g.trace(),
        }
    }
}

impl Generated {
    fn trace(&self) -> Result<LoadTrace, String> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "{name} is {v}; it must be a positive number of seconds"
                ))
            }
        };
        let mut steps = Vec::new();
        match *self {
            Generated::Random {
                seed,
                mean_idle_s,
                mean_busy_s,
                max_processes,
            } => {
                positive("mean_idle_s", mean_idle_s)?;
                positive("mean_busy_s", mean_busy_s)?;
                if max_processes == 0 {
                    return Err("max_processes is 0; a busy spell has at least one".into());
                }
                let mut rng = Rng::new(seed);
                // Start in a busy spell as often as the trace is busy in the long run, so
                // time 0 is no different from any other moment.
                let mut t = if rng.uniform() < mean_busy_s / (mean_busy_s + mean_idle_s) {
                    0.0
                } else {
                    rng.exponential(mean_idle_s)
                };
                while t < GENERATED_PERIOD_S {
                    let k = 1 + (rng.uniform() * max_processes as f64) as u32;
                    steps.push((t, 1.0 / f64::from(k.min(max_processes) + 1)));
                    t += rng.exponential(mean_busy_s);
                    steps.push((t, 1.0));
                    t += rng.exponential(mean_idle_s);
                }
            }
            Generated::Steady {
                seed,
                mean,
                sd,
                phi,
                step_s,
            } => {
                positive("step_s", step_s)?;
                if !(mean > 0.0 && mean <= 1.0) {
                    return Err(format!("mean is {mean}; an availability is in (0, 1]"));
                }
                if !(sd.is_finite() && sd >= 0.0 && phi.abs() < 1.0) {
                    return Err(format!(
                        "sd {sd} and phi {phi}: sd must be >= 0 and |phi| < 1"
                    ));
                }
                let mut rng = Rng::new(seed);
                let noise = sd * (1.0 - phi * phi).sqrt();
                let mut a = mean;
                let mut t = 0.0;
                while t < GENERATED_PERIOD_S {
                    steps.push((t, a.clamp(0.1, 1.0)));
                    a = mean + phi * (a - mean) + noise * rng.normal();
                    t += step_s;
                }
            }
        }
        steps.retain(|s| s.0 < GENERATED_PERIOD_S);
        let mut trace = LoadTrace::new(steps)?;
        trace.period = Some(GENERATED_PERIOD_S);
        Ok(trace)
    }
}

impl LoadTrace {
    /// Always fully available.
    pub fn always() -> Self {
        Self::default()
    }

    /// Steps `(from_s, fraction)` by strictly increasing time >= 0, fractions in (0, 1].
    pub fn new(steps: Vec<(f64, f64)>) -> Result<Self, String> {
        for (i, &(t, a)) in steps.iter().enumerate() {
            if !(t.is_finite() && t >= 0.0) {
                return Err(format!(
                    "point {i}: time {t} must be a finite number >= 0 (seconds)"
                ));
            }
            if i > 0 && t <= steps[i - 1].0 {
                return Err(format!(
                    "point {i}: time {t} does not come after {}; list points by strictly increasing time",
                    steps[i - 1].0
                ));
            }
            // Written positively so NaN fails too. 0 would stall a call forever.
            if !(a > 0.0 && a <= 1.0) {
                return Err(format!(
                    "point {i} (time {t}): availability {a} must be in (0, 1] (1 = unloaded, 0.5 = half the speed)"
                ));
            }
        }
        Ok(LoadTrace {
            steps,
            period: None,
        })
    }

    /// The steps, by increasing time (one period of a generated trace).
    pub fn steps(&self) -> &[(f64, f64)] {
        &self.steps
    }

    /// Whether it is always fully available.
    pub fn is_idle(&self) -> bool {
        self.steps.iter().all(|s| s.1 == 1.0)
    }

    /// Splits `t` into whole periods (as seconds) and the time within the period.
    fn fold(&self, t: f64) -> (f64, f64) {
        match self.period {
            Some(p) if t >= p => {
                let base = (t / p).floor() * p;
                (base, t - base)
            }
            _ => (0.0, t),
        }
    }

    /// The fraction available at time `t`.
    pub fn at(&self, t: f64) -> f64 {
        let (_, t) = self.fold(t);
        let i = self.steps.partition_point(|p| p.0 <= t);
        if i == 0 { 1.0 } else { self.steps[i - 1].1 }
    }

    /// When a call that needs `full_speed_s` seconds at full speed ends if it starts at `start`:
    /// the work is integrated step by step. With availability 1 it is exactly `start +
    /// full_speed_s` (dividing by 1 is exact), which is what keeps an unloaded simulation equal
    /// to the replay of its plan.
    pub fn finish(&self, start: f64, full_speed_s: f64) -> f64 {
        let (base, local) = self.fold(start);
        let mut i = self.steps.partition_point(|p| p.0 <= local);
        let (mut now, mut left) = (local, full_speed_s);
        let mut offset = base;
        loop {
            let a = if i == 0 {
                match self.period {
                    // Within a later period, before its first step, the last step of the
                    // previous period still holds.
                    Some(_) if offset > 0.0 => self.steps.last().map_or(1.0, |s| s.1),
                    _ => 1.0,
                }
            } else {
                self.steps[i - 1].1
            };
            let next = match (self.steps.get(i), self.period) {
                (Some(&(next, _)), _) => next,
                (None, Some(p)) => p,
                (None, None) => return offset + now + left / a,
            };
            let capacity = (next - now) * a;
            if left <= capacity {
                return offset + now + left / a;
            }
            left -= capacity;
            now = next;
            i += 1;
            if let Some(p) = self.period
                && now >= p
            {
                offset += p;
                now = 0.0;
                i = 0;
            }
        }
    }

    /// The mean availability over `[from, to]` (the value at `from` for an empty span).
    pub fn mean(&self, from: f64, to: f64) -> f64 {
        if to <= from {
            return self.at(from);
        }
        // Integrate by walking the steps: the work a full-speed second gets is the
        // availability, so the mean is the work done over the span ÷ its length.
        let mut t = from;
        let mut work = 0.0;
        while t < to {
            let a = self.at(t);
            let (base, local) = self.fold(t);
            let i = self.steps.partition_point(|p| p.0 <= local);
            let next = match (self.steps.get(i), self.period) {
                (Some(&(n, _)), _) => base + n,
                (None, Some(p)) => base + p,
                (None, None) => f64::INFINITY,
            };
            let end = next.min(to);
            work += (end - t) * a;
            t = end;
        }
        work / (to - from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_traces_stretch_calls_by_their_availability() {
        let t = LoadTrace::new(vec![(1.0, 0.4), (4.0, 1.0)]).unwrap();
        assert_eq!((t.at(0.5), t.at(1.0), t.at(10.0)), (1.0, 0.4, 1.0));
        // 2 s of work from 0: 1 s at full speed, then 1 s of work at 40% = 2.5 s: ends at 3.5.
        assert!((t.finish(0.0, 2.0) - 3.5).abs() < 1e-12);
        assert_eq!(LoadTrace::always().finish(3.0, 2.0), 5.0);
        // The mean over a call is its work ÷ its length.
        assert!((t.mean(0.0, 3.5) - 2.0 / 3.5).abs() < 1e-12);
        assert!(LoadTrace::new(vec![(1.0, 0.0)]).is_err());
        assert!(LoadTrace::new(vec![(2.0, 0.5), (1.0, 0.5)]).is_err());
    }

    #[test]
    fn generated_traces_are_deterministic_and_in_range() {
        let random: LoadSpec = serde_json::from_str(r#"{"kind": "random", "seed": 3}"#).unwrap();
        let a = random.trace().unwrap();
        assert_eq!(a, random.trace().unwrap());
        assert!(
            a.steps()
                .iter()
                .all(|s| [1.0, 0.5, 1.0 / 3.0, 0.25].contains(&s.1))
        );
        assert!(a.steps().len() > 100, "four hours of 20 s spells");
        let steady: LoadSpec =
            toml::from_str::<toml::Value>("load = { kind = \"steady\", seed = 1, mean = 0.5 }")
                .unwrap()["load"]
                .clone()
                .try_into()
                .unwrap();
        let s = steady.trace().unwrap();
        let mean = s.steps().iter().map(|x| x.1).sum::<f64>() / s.steps().len() as f64;
        assert!((mean - 0.5).abs() < 0.05, "{mean}");
        assert!(s.steps().iter().all(|x| x.1 >= 0.1 && x.1 <= 1.0));
        let steps: LoadSpec = serde_json::from_str("[[0, 0.5]]").unwrap();
        assert_eq!(steps.trace().unwrap().at(7.0), 0.5);
        let bad: LoadSpec =
            serde_json::from_str(r#"{"kind": "random", "max_processes": 0}"#).unwrap();
        assert!(bad.trace().is_err());
    }

    #[test]
    fn generated_traces_repeat_and_calls_run_across_the_seam() {
        let g = Generated::Steady {
            seed: 2,
            mean: 0.5,
            sd: 0.0,
            phi: 0.0,
            step_s: 1.0,
        }
        .trace()
        .unwrap();
        let p = GENERATED_PERIOD_S;
        assert_eq!(g.at(p + 0.5), g.at(0.5));
        // A call spanning the end of a period keeps integrating at 0.5.
        let end = g.finish(p - 1.0, 1.0);
        assert!((end - (p + 1.0)).abs() < 1e-9, "{end}");
        assert!((g.mean(p - 1.0, p + 1.0) - 0.5).abs() < 1e-12);
    }
}
