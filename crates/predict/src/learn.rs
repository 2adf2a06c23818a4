//! The one way knowledge changes: what a finished call, a benchmark point or a heartbeat's load
//! teaches. Each returns what it changed, so the agent persists exactly that.

use crate::knowledge::{HostKnowledge, OfferKnowledge, SIZES_REMEMBERED, ServiceFacts};
use gridwise_fpm::stats::SpeedStats;
use gridwise_proto::{LoadSample, PointSource, PointStats};
use std::time::Duration;

impl OfferKnowledge {
    /// A successful call of the service here took `kernel_s` at `sizes` (given in the
    /// service's declared order when `sizes_in_order`). Feeds the histories and, when the
    /// complexity gives the call's work, the model: every real call is a sample of it at its
    /// size. Returns the model point that changed, if one did.
    pub fn learn_call(
        &mut self,
        facts: &ServiceFacts,
        sizes: &[(String, i64)],
        sizes_in_order: bool,
        kernel_s: f64,
    ) -> Option<Vec<i64>> {
        self.history.record(kernel_s);
        if !sizes_in_order {
            return None;
        }
        let x: Vec<i64> = sizes.iter().map(|(_, v)| *v).collect();
        if let Some(h) = self.by_size.get_mut(&x) {
            h.record(kernel_s);
        } else if self.by_size.len() < SIZES_REMEMBERED {
            self.by_size.entry(x.clone()).or_default().record(kernel_s);
        }
        let work = facts.complexity.as_ref()?.eval(sizes).ok()?;
        if kernel_s > 0.0 {
            self.model.add_sample(&x, work / kernel_s);
            return Some(x);
        }
        None
    }

    /// A model point measured by the server's model builder (or restored from the store).
    pub fn learn_point(&mut self, x: &[i64], stats: PointStats, source: PointSource) {
        match source {
            PointSource::AssumedZero => self.model.set_assumed_zero(x),
            PointSource::Benchmark | PointSource::Online => {
                self.model.insert(x, SpeedStats::from(stats))
            }
        }
    }
}

impl ServiceFacts {
    /// A successful call of the service took `kernel_s` somewhere.
    pub fn learn_call(&mut self, kernel_s: f64) {
        self.grid_history.record(kernel_s);
    }
}

impl HostKnowledge {
    /// A heartbeat at `now` reported `sample`. Load measured while the server's own model
    /// benchmarks ran is not background load and is not kept; otherwise one sample per
    /// `every` enters the history (`window` samples make the band). Returns the load average
    /// kept, if one was: the only samples worth persisting.
    pub fn learn_load(
        &mut self,
        now: Duration,
        sample: &LoadSample,
        every: Duration,
        window: usize,
    ) -> Option<f64> {
        if sample.benchmarking {
            return None;
        }
        self.load
            .observe(now, sample.loadavg_1m, every, window)
            .then_some(sample.loadavg_1m)
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
        assert_eq!(o.learn_call(&facts, &n(100), true, 0.5), Some(vec![100]));
        assert_eq!(o.model.len(), 1);
        assert_eq!(o.by_size[&vec![100]].calls, 1);
        // Out of order sizes teach the overall history only; a zero time teaches no speed.
        assert_eq!(o.learn_call(&facts, &n(7), false, 1.0), None);
        assert_eq!(o.learn_call(&facts, &n(100), true, 0.0), None);
        assert_eq!((o.history.calls, o.model.len()), (3, 1));
        let no_formula = ServiceFacts::default();
        assert_eq!(o.learn_call(&no_formula, &n(5), true, 1.0), None);
        assert_eq!(o.by_size[&vec![5]].mean_s, 1.0);
    }

    #[test]
    fn benchmark_load_is_not_background_load() {
        let mut h = HostKnowledge::default();
        let every = Duration::from_secs(60);
        let busy = LoadSample {
            loadavg_1m: 3.0,
            benchmarking: true,
            ..LoadSample::default()
        };
        assert_eq!(h.learn_load(Duration::ZERO, &busy, every, 60), None);
        let quiet = LoadSample {
            benchmarking: false,
            ..busy
        };
        assert_eq!(h.learn_load(Duration::ZERO, &quiet, every, 60), Some(3.0));
        assert_eq!(
            h.learn_load(Duration::from_secs(1), &quiet, every, 60),
            None
        );
        assert_eq!(h.load.samples(), 1);
    }
}
