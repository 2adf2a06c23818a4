//! What a server's sensors say about the host, forecast NWS-style: the fraction of a core a
//! new call would get and the memory free for it. One sample per period enters each series;
//! the forecasts are kept ready, because ranking reads them for every server on every call.

use crate::forecast::Series;
use crate::stoch::Stoch;
use std::time::Duration;

/// A server's CPU availability and free memory, with their forecasts.
#[derive(Clone, Debug, Default)]
pub struct Sensed {
    availability: Series,
    free_memory: Series,
    last_sample: Option<Duration>,
    availability_next: Option<Stoch>,
    free_memory_next: Option<Stoch>,
}

/// A change of availability taken at once, whatever the period.
const JUMP: f64 = 0.1;

/// The smallest availability a forecast may give: a host so busy that a call would get less
/// than 1% of a core is as good as unusable, and dividing by less would predict eternity.
const MIN_AVAILABILITY: f64 = 0.01;

impl Sensed {
    /// Takes the sample at `now` if a period has passed since the last one taken; returns
    /// whether it did. Either value may be missing (a server that does not measure it).
    pub fn observe(
        &mut self,
        now: Duration,
        every: Duration,
        cpu_available: Option<f64>,
        free_memory_bytes: Option<f64>,
    ) -> bool {
        if cpu_available.is_none() && free_memory_bytes.is_none() {
            return false;
        }
        // A new level of availability (a process more or less on the host) enters at once:
        // waiting for the period would leave calls estimated for a host that is gone.
        let jumped = self.jumps(cpu_available);
        if !jumped
            && self
                .last_sample
                .is_some_and(|t| now.saturating_sub(t) < every)
        {
            return false;
        }
        self.last_sample = Some(now);
        let level = self.new_level(cpu_available);
        self.take(cpu_available, free_memory_bytes, level);
        true
    }

    /// Adds a sample without a time (restoring the history a store kept).
    pub fn push(&mut self, cpu_available: Option<f64>, free_memory_bytes: Option<f64>) {
        let level = self.new_level(cpu_available);
        self.take(cpu_available, free_memory_bytes, level);
    }

    /// Whether `cpu_available` is a new level rather than the next sample of this one.
    fn jumps(&self, cpu_available: Option<f64>) -> bool {
        match (cpu_available, self.availability.last()) {
            (Some(a), Some(last)) => (a - last).abs() >= JUMP,
            _ => false,
        }
    }

    /// Whether a jump to `cpu_available` leaves a level that held: only then is it a change
    /// the forecasts could not have seen coming. A series that jumps about all the time is
    /// noisy, and its jumps are its forecast error.
    fn new_level(&self, cpu_available: Option<f64>) -> bool {
        let held = match self.availability.last_two() {
            Some((before, last)) => (last - before).abs() < JUMP,
            None => false,
        };
        held && self.jumps(cpu_available)
    }

    /// A sample; a new level of availability is not an error of the forecasts (servers
    /// report one within a quarter of a second, so no call is estimated across it).
    fn take(&mut self, cpu_available: Option<f64>, free_memory_bytes: Option<f64>, level: bool) {
        if let Some(a) = cpu_available.filter(|a| a.is_finite()) {
            let a = a.clamp(0.0, 1.0);
            if level {
                self.availability.push_level_change(a);
            } else {
                self.availability.push(a);
            }
            self.availability_next = self
                .availability
                .forecast()
                .map(|f| Stoch::new(f.value.mean.clamp(MIN_AVAILABILITY, 1.0), f.value.sd));
        }
        if let Some(m) = free_memory_bytes.filter(|m| m.is_finite() && *m >= 0.0) {
            self.free_memory.push(m);
            self.free_memory_next = self
                .free_memory
                .forecast()
                .map(|f| Stoch::new(f.value.mean.max(0.0), f.value.sd));
        }
    }

    /// The forecast fraction of a core a new call will get, and its expected error; `None`
    /// before the first sample.
    pub fn availability(&self) -> Option<Stoch> {
        self.availability_next
    }

    /// The forecast memory free for new work, bytes, and its expected error.
    pub fn free_memory(&self) -> Option<Stoch> {
        self.free_memory_next
    }

    /// The availability series (for `explain`: which forecaster won, how many samples).
    pub fn availability_series(&self) -> &Series {
        &self.availability
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_per_period_and_forecasts_ready() {
        let mut s = Sensed::default();
        let every = Duration::from_secs(5);
        assert!(s.availability().is_none());
        assert!(!s.observe(Duration::ZERO, every, None, None));
        assert!(s.observe(Duration::ZERO, every, Some(0.5), Some(1e9)));
        assert!(!s.observe(Duration::from_secs(1), every, Some(0.45), None));
        // A jump enters within the period.
        assert!(s.observe(Duration::from_secs(2), every, Some(0.1), None));
        assert!(s.observe(Duration::from_secs(7), every, Some(0.5), None));
        assert_eq!(s.availability_series().last(), Some(0.5));
        assert!(s.availability().is_some());
        assert_eq!(s.free_memory().unwrap().mean, 1e9);
        assert_eq!(s.availability_series().len(), 3);
    }

    #[test]
    fn a_new_level_moves_the_forecast_but_is_not_an_error() {
        let mut s = Sensed::default();
        for _ in 0..10 {
            s.push(Some(1.0), None);
        }
        s.push(Some(0.25), None);
        let after = s.availability().unwrap();
        assert_eq!((after.mean, after.sd), (0.25, 0.0), "{after:?}");
        // A series that jumps about all the time is noisy: its jumps are errors.
        let mut n = Sensed::default();
        for a in [1.0, 0.5, 0.9, 0.4, 1.0, 0.5, 0.8, 0.4, 0.9, 0.5] {
            n.push(Some(a), None);
        }
        assert!(n.availability().unwrap().sd > 0.1, "{:?}", n.availability());
        // The same change in small steps is forecast error.
        let mut t = Sensed::default();
        for a in [1.0, 1.0, 0.95, 0.9, 0.95, 1.0, 0.92] {
            t.push(Some(a), None);
        }
        assert!(t.availability().unwrap().sd > 0.0);
    }

    #[test]
    fn availability_stays_in_its_range() {
        let mut s = Sensed::default();
        s.push(Some(7.0), None);
        assert_eq!(s.availability().unwrap().mean, 1.0);
        let mut s = Sensed::default();
        s.push(Some(0.0), Some(f64::NAN));
        assert_eq!(s.availability().unwrap().mean, MIN_AVAILABILITY);
        assert!(s.free_memory().is_none());
    }
}
