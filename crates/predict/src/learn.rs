//! The one way knowledge changes: what a finished call, a benchmark point or a heartbeat's load
//! teaches. Each returns what it changed, so the agent persists exactly that.

use crate::knowledge::{HostKnowledge, OfferKnowledge, SIZES_REMEMBERED, ServiceFacts};
use gridwise_fpm::stats::SpeedStats;
use gridwise_proto::{LoadSample, PointSource, PointStats, Timing};
use std::time::Duration;

/// The kernel time a call would have taken on a quiet host: `kernel_s` × the fraction of a
/// core it got (a time-shared CPU stretches a CPU-bound kernel by exactly that). A server that
/// does not measure availability is taken as quiet. Every model learns quiet times only, so
/// load enters an estimate once, when it is made.
pub fn quiet_time(kernel_s: f64, cpu_available: Option<f64>) -> f64 {
    let a = cpu_available
        .filter(|a| a.is_finite() && *a > 0.0)
        .map_or(1.0, |a| a.min(1.0));
    kernel_s * a
}

impl OfferKnowledge {
    /// A successful call of the service here took `kernel_s` at `sizes` (given in the
    /// service's declared order when `sizes_in_order`), getting `cpu_available` of a core.
    /// Scores the quiet-host estimate it would have had, then feeds the histories and, when
    /// the complexity gives the call's work, the model: every real call is a sample of it at
    /// its size. Returns the model point that changed, if one did.
    pub fn learn_call(
        &mut self,
        facts: &ServiceFacts,
        sizes: &[(String, i64)],
        sizes_in_order: bool,
        kernel_s: f64,
        cpu_available: Option<f64>,
    ) -> Option<Vec<i64>> {
        let quiet_s = quiet_time(kernel_s, cpu_available);
        let x: Vec<i64> = sizes.iter().map(|(_, v)| *v).collect();
        let work = facts.complexity.as_ref().and_then(|c| c.eval(sizes).ok());
        if let Some(predicted) = self.quiet_estimate(sizes_in_order.then_some(&x[..]), work) {
            self.misfit.record(predicted, quiet_s);
        }
        if sizes_in_order {
            if let Some(p) = self.regression.predict(work, &x) {
                self.regression_misfit.record(p.mean, quiet_s);
            }
            self.regression.observe(work, &x, quiet_s);
        }
        self.history.record(quiet_s);
        if !sizes_in_order {
            return None;
        }
        if let Some(h) = self.by_size.get_mut(&x) {
            h.record(quiet_s);
        } else if self.by_size.len() < SIZES_REMEMBERED {
            self.by_size.entry(x.clone()).or_default().record(quiet_s);
        }
        let work = work?;
        if quiet_s > 0.0 {
            self.model.add_sample(&x, work / quiet_s);
            self.refresh_point_spread();
            return Some(x);
        }
        None
    }

    /// What the model (else the history at this size, else the overall history) said a call
    /// would take on a quiet host, before the call taught it anything.
    fn quiet_estimate(&self, x: Option<&[i64]>, work: Option<f64>) -> Option<f64> {
        if let (Some(x), Some(work)) = (x, work)
            && self.model.covers(x)
            && let Some(t) = self.model.time(x, work)
        {
            return Some(t);
        }
        x.and_then(|x| self.by_size.get(x))
            .filter(|h| h.calls > 0)
            .or(Some(&self.history).filter(|h| h.calls > 0))
            .map(|h| h.mean_s)
    }

    /// A model point measured by the server's model builder (or restored from the store).
    pub fn learn_point(&mut self, x: &[i64], stats: PointStats, source: PointSource) {
        match source {
            PointSource::AssumedZero => self.model.set_assumed_zero(x),
            PointSource::Benchmark | PointSource::Online => {
                self.model.insert(x, SpeedStats::from(stats));
                self.refresh_point_spread();
            }
        }
    }
}

impl ServiceFacts {
    /// A successful call of the service took `quiet_s` somewhere (as on a quiet host).
    pub fn learn_call(&mut self, quiet_s: f64) {
        self.grid_history.record(quiet_s);
    }
}

/// What one heartbeat taught about a server's load: the samples worth persisting.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadRecord {
    /// The one-minute load average, when it entered the band's history (once per band period,
    /// never while the server benchmarked its models).
    pub loadavg_1m: Option<f64>,
    /// The fraction of a core a new call would get, when it entered the forecast series.
    pub cpu_available: Option<f64>,
    /// Free memory, bytes, when it entered the forecast series.
    pub free_memory_bytes: Option<f64>,
}

/// How often each kind of load sample is kept.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadSampling {
    /// One load average per this period enters the band's history…
    pub band_every: Duration,
    /// … whose load-average window is this many samples.
    pub band_window: usize,
    /// One availability and free-memory sample per this period enters the forecasts.
    pub sensor_every: Duration,
}

impl HostKnowledge {
    /// A heartbeat at `now` reported `sample`. Load measured while the server's own model
    /// benchmarks ran is not background load and stays out of the band's history; the
    /// availability sensor already leaves the server's own work out, so it is always kept.
    /// Returns what entered a history, if anything did.
    pub fn learn_load(
        &mut self,
        now: Duration,
        sample: &LoadSample,
        sampling: &LoadSampling,
    ) -> Option<LoadRecord> {
        let loadavg_1m = (!sample.benchmarking
            && self.load.observe(
                now,
                sample.loadavg_1m,
                sampling.band_every,
                sampling.band_window,
            ))
        .then_some(sample.loadavg_1m);
        let (cpu, mem) = (
            sample.cpu_available,
            sample.free_memory_bytes.map(|m| m as f64),
        );
        let sensed = self
            .sensed
            .observe(now, sampling.sensor_every, cpu, mem)
            .then_some((cpu, mem));
        if loadavg_1m.is_none() && sensed.is_none() {
            return None;
        }
        let (cpu_available, free_memory_bytes) = sensed.unwrap_or_default();
        Some(LoadRecord {
            loadavg_1m,
            cpu_available,
            free_memory_bytes,
        })
    }

    /// A finished call's timing: what it cost the server besides queue and kernel, and, when
    /// the client sent all its inputs (`client_in_bytes`), what sending them cost at the CPU
    /// share the call got.
    pub fn learn_timing(
        &mut self,
        timing: &Timing,
        client_in_bytes: Option<u64>,
        cpu_available: Option<f64>,
    ) {
        // Inputs not all from the client: some were pulled, inside the server's time.
        self.overhead.record(timing, client_in_bytes.is_none());
        if let Some(bytes) = client_in_bytes {
            self.client_link
                .record(bytes, timing.input_transfer_s, cpu_available);
        }
    }

    /// Replays a record a store kept, oldest first: the histories an agent restart would
    /// otherwise lose.
    pub fn restore_load(&mut self, record: &LoadRecord, sampling: &LoadSampling) {
        if let Some(l) = record.loadavg_1m {
            self.load
                .restore(l, sampling.band_every, sampling.band_window);
        }
        self.sensed
            .push(record.cpu_available, record.free_memory_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_feed_histories_and_the_model_at_their_size() {
        let facts = ServiceFacts {
            complexity: Some(gridwise_proto::Complexity::parse("2*n", &["n".to_string()]).unwrap()),
            ..ServiceFacts::default()
        };
        let mut o = OfferKnowledge::new(vec!["n".into()], None);
        let n = |v| vec![("n".to_string(), v)];
        assert_eq!(
            o.learn_call(&facts, &n(100), true, 0.5, None),
            Some(vec![100])
        );
        assert_eq!(o.model.len(), 1);
        assert_eq!(o.by_size[&vec![100]].calls, 1);
        // Out of order sizes teach the overall history only; a zero time teaches no speed.
        assert_eq!(o.learn_call(&facts, &n(7), false, 1.0, None), None);
        assert_eq!(o.learn_call(&facts, &n(100), true, 0.0, None), None);
        assert_eq!((o.history.calls, o.model.len()), (3, 1));
        let no_formula = ServiceFacts::default();
        assert_eq!(o.learn_call(&no_formula, &n(5), true, 1.0, None), None);
        assert_eq!(o.by_size[&vec![5]].mean_s, 1.0);
    }

    #[test]
    fn benchmark_load_is_not_background_load() {
        let mut h = HostKnowledge::default();
        let sampling = LoadSampling {
            band_every: Duration::from_secs(60),
            band_window: 60,
            sensor_every: Duration::from_secs(5),
        };
        let busy = LoadSample {
            loadavg_1m: 3.0,
            benchmarking: true,
            ..LoadSample::default()
        };
        assert_eq!(h.learn_load(Duration::ZERO, &busy, &sampling), None);
        let quiet = LoadSample {
            benchmarking: false,
            ..busy
        };
        let got = h.learn_load(Duration::ZERO, &quiet, &sampling).unwrap();
        assert_eq!((got.loadavg_1m, got.cpu_available), (Some(3.0), None));
        assert_eq!(
            h.learn_load(Duration::from_secs(1), &quiet, &sampling),
            None
        );
        assert_eq!(h.load.samples(), 1);
        // Availability leaves the server's own work out: kept while it benchmarks too, once
        // per sensor period.
        let sensed = LoadSample {
            cpu_available: Some(0.5),
            free_memory_bytes: Some(1 << 30),
            ..busy
        };
        let got = h
            .learn_load(Duration::from_secs(2), &sensed, &sampling)
            .unwrap();
        assert_eq!(got.loadavg_1m, None);
        assert_eq!(got.cpu_available, Some(0.5));
        assert_eq!(
            h.learn_load(Duration::from_secs(3), &sensed, &sampling),
            None
        );
        assert_eq!(h.sensed.availability().unwrap().mean, 0.5);
    }

    #[test]
    fn calls_under_load_teach_quiet_times_and_score_the_model() {
        let facts = ServiceFacts {
            complexity: Some(gridwise_proto::Complexity::parse("n", &["n".to_string()]).unwrap()),
            ..ServiceFacts::default()
        };
        let mut o = OfferKnowledge::new(vec!["n".into()], None);
        let n = |v| vec![("n".to_string(), v)];
        // 1 s at half a core is 0.5 s on a quiet host: a speed of 200 at n = 100.
        o.learn_call(&facts, &n(100), true, 1.0, Some(0.5));
        assert_eq!(o.model.speed(&[100]), Some(200.0));
        assert_eq!(o.history.mean_s, 0.5);
        assert_eq!(quiet_time(2.0, None), 2.0);
        assert_eq!(quiet_time(2.0, Some(7.0)), 2.0);
        // Each later call is scored against what the model said before it.
        for k in [0.55, 0.45, 0.5] {
            o.learn_call(&facts, &n(100), true, k, None);
        }
        let sd = o.misfit.relative_sd().unwrap();
        assert!(sd > 0.05 && sd < 0.2, "{sd}");
        assert!(o.point_spread > 0.0);
    }
}
