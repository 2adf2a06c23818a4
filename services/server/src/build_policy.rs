//! When a server may run model benchmarks (PMM's policies, seed 003 §4 / App. A): `now`, or
//! `idle` (host load below a threshold); optionally only inside time windows; never while a
//! halt file exists; and never while real calls are running — benchmarks must not disturb them.
//! A pure decision over conditions the caller gathers, so it is tested without clocks or files.

use serde::Deserialize;
use std::path::PathBuf;

/// The base condition; windows, the halt file and real calls restrict either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// Whenever the other conditions allow, whatever the host's load.
    #[default]
    Now,
    /// Only while the host's one-minute load average is below `idle_load`.
    Idle,
}

/// A daily window `HH:MM-HH:MM` in UTC; it may wrap midnight (`22:00-06:00`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeWindow {
    start_min: u32,
    end_min: u32,
}

impl std::str::FromStr for TimeWindow {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("time window `{s}` must look like 22:00-06:00 (UTC)");
        let (a, b) = s.split_once('-').ok_or_else(bad)?;
        let minutes = |t: &str| -> Result<u32, String> {
            let (h, m) = t.trim().split_once(':').ok_or_else(bad)?;
            let (h, m): (u32, u32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
            if h > 23 || m > 59 {
                return Err(bad());
            }
            Ok(h * 60 + m)
        };
        Ok(TimeWindow {
            start_min: minutes(a)?,
            end_min: minutes(b)?,
        })
    }
}

impl<'de> Deserialize<'de> for TimeWindow {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl TimeWindow {
    /// Whether the minute of the day lies inside.
    pub fn contains(&self, minute: u32) -> bool {
        if self.start_min <= self.end_min {
            (self.start_min..self.end_min).contains(&minute)
        } else {
            minute >= self.start_min || minute < self.end_min
        }
    }
}

/// A model's build policy, as written in the server config.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BuildPolicy {
    /// `now` or `idle`.
    pub when: When,
    /// Load average below which the host counts as idle.
    pub idle_load: f64,
    /// Daily UTC windows benchmarks may run in (none: any time).
    pub windows: Vec<TimeWindow>,
    /// Benchmarks halt while this file exists (lets any external script decide).
    pub halt_file: Option<PathBuf>,
}

impl Default for BuildPolicy {
    fn default() -> Self {
        Self {
            when: When::Now,
            idle_load: 0.1,
            windows: Vec::new(),
            halt_file: None,
        }
    }
}

/// What the server sees now.
#[derive(Clone, Copy, Debug, Default)]
pub struct Conditions {
    /// Minutes since midnight, UTC.
    pub minute_of_day: u32,
    /// Host one-minute load average, without the server's own benchmarks.
    pub loadavg_1m: f64,
    /// Real calls running or queued.
    pub busy_calls: u32,
    /// Whether the halt file exists.
    pub halt_file_exists: bool,
}

impl BuildPolicy {
    /// `Ok` when a benchmark may run now, else why not.
    pub fn check(&self, c: &Conditions) -> Result<(), String> {
        if c.busy_calls > 0 {
            return Err(format!("{} real call(s) running", c.busy_calls));
        }
        if c.halt_file_exists {
            let path = self
                .halt_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            return Err(format!("halt file {path} exists"));
        }
        if !self.windows.is_empty() && !self.windows.iter().any(|w| w.contains(c.minute_of_day)) {
            return Err("outside the benchmark time windows".into());
        }
        if self.when == When::Idle && c.loadavg_1m >= self.idle_load {
            return Err(format!(
                "host load {:.2} is not below the idle threshold {:.2}",
                c.loadavg_1m, self.idle_load
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_and_wrap_midnight() {
        let w: TimeWindow = "22:00-06:00".parse().unwrap();
        assert!(w.contains(23 * 60));
        assert!(w.contains(5 * 60 + 59));
        assert!(!w.contains(6 * 60));
        assert!(!w.contains(12 * 60));
        let d: TimeWindow = "09:30-17:00".parse().unwrap();
        assert!(d.contains(9 * 60 + 30) && !d.contains(17 * 60));
        assert!("25:00-01:00".parse::<TimeWindow>().is_err());
        assert!("nine-five".parse::<TimeWindow>().is_err());
    }

    #[test]
    fn each_condition_can_hold_a_build_back() {
        let idle = Conditions::default();
        let p = BuildPolicy::default();
        assert!(p.check(&idle).is_ok());
        assert!(
            p.check(&Conditions {
                busy_calls: 1,
                ..idle
            })
            .unwrap_err()
            .contains("real call")
        );
        assert!(
            p.check(&Conditions {
                halt_file_exists: true,
                ..idle
            })
            .is_err()
        );
        let p = BuildPolicy {
            when: When::Idle,
            ..BuildPolicy::default()
        };
        assert!(
            p.check(&Conditions {
                loadavg_1m: 0.5,
                ..idle
            })
            .unwrap_err()
            .contains("idle")
        );
        assert!(
            p.check(&Conditions {
                loadavg_1m: 0.05,
                ..idle
            })
            .is_ok()
        );
        let p = BuildPolicy {
            windows: vec!["22:00-06:00".parse().unwrap()],
            ..BuildPolicy::default()
        };
        assert!(
            p.check(&Conditions {
                minute_of_day: 12 * 60,
                ..idle
            })
            .is_err()
        );
        assert!(
            p.check(&Conditions {
                minute_of_day: 23 * 60,
                ..idle
            })
            .is_ok()
        );
    }
}
