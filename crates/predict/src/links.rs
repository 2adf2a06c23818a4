//! Measured network links between servers, by address: what pulling a remote input from its
//! holder costs (and, for task graphs, what an edge between two servers costs). A link not
//! measured yet costs the configured defaults.

use gridwise_proto::{LinkInfo, LinkSample};
use std::collections::HashMap;
use std::time::Duration;

/// The latest sample per (measuring server, peer) address pair; samples with a negative or
/// non-finite latency or a bandwidth that is not a positive finite number are dropped.
#[derive(Clone, Debug, Default)]
pub struct Links {
    map: HashMap<(String, String), (LinkSample, Duration)>,
}

impl Links {
    /// Records a measurement made by the server at `from`.
    pub fn record(&mut self, from: &str, s: &LinkSample, now: Duration) {
        let ok = s.latency_s.is_finite()
            && s.latency_s >= 0.0
            && s.bandwidth_bytes_per_s.is_finite()
            && s.bandwidth_bytes_per_s > 0.0;
        if ok {
            self.map
                .insert((from.to_string(), s.to.clone()), (s.clone(), now));
        }
    }

    /// The link from `from` to `to`, or the reverse one (links are close to symmetric).
    pub fn get(&self, from: &str, to: &str) -> Option<&LinkSample> {
        self.map
            .get(&(from.to_string(), to.to_string()))
            .or_else(|| self.map.get(&(to.to_string(), from.to_string())))
            .map(|(s, _)| s)
    }

    /// Seconds to move `bytes` from `from` to `to`: nothing on the same server, the measured
    /// link where there is one, else the defaults.
    pub fn transfer_s(
        &self,
        from: &str,
        to: &str,
        bytes: u64,
        default_latency_s: f64,
        default_bandwidth: f64,
    ) -> f64 {
        if from == to {
            return 0.0;
        }
        let (lat, bw) = self
            .get(from, to)
            .map(|s| (s.latency_s, s.bandwidth_bytes_per_s))
            .unwrap_or((default_latency_s, default_bandwidth));
        lat + bytes as f64 / bw
    }

    /// Every measured link with its age at `now`, sorted by (from, to) address.
    pub fn export(&self, now: Duration) -> Vec<LinkInfo> {
        let mut out: Vec<LinkInfo> = self
            .map
            .iter()
            .map(|((from, _), (s, at))| LinkInfo {
                from: from.clone(),
                sample: s.clone(),
                age_s: now.saturating_sub(*at).as_secs_f64(),
            })
            .collect();
        out.sort_by(|a, b| (&a.from, &a.sample.to).cmp(&(&b.from, &b.sample.to)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(to: &str, lat: f64, bw: f64) -> LinkSample {
        LinkSample {
            to: to.into(),
            latency_s: lat,
            bandwidth_bytes_per_s: bw,
        }
    }

    #[test]
    fn measured_links_beat_defaults_and_local_is_free() {
        let mut l = Links::default();
        l.record("a:1", &sample("b:1", 1e-3, 1e6), Duration::ZERO);
        assert_eq!(l.transfer_s("a:1", "a:1", 1 << 30, 1.0, 1.0), 0.0);
        assert!((l.transfer_s("a:1", "b:1", 1_000_000, 9.0, 9.0) - 1.001).abs() < 1e-12);
        // The reverse direction falls back to the measured one.
        assert!((l.transfer_s("b:1", "a:1", 1_000_000, 9.0, 9.0) - 1.001).abs() < 1e-12);
        assert_eq!(l.transfer_s("a:1", "c:1", 0, 0.5, 1e9), 0.5);
        l.record("a:1", &sample("c:1", f64::NAN, 1e6), Duration::ZERO);
        assert!(l.get("a:1", "c:1").is_none(), "nonsense is not recorded");
        assert_eq!(l.export(Duration::from_secs(2))[0].age_s, 2.0);
    }
}
