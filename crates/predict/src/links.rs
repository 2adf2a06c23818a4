//! Measured network links between servers, by address: what pulling a remote input from its
//! holder costs (and, for task graphs, what an edge between two servers costs). A link not
//! measured yet costs the configured defaults.

use crate::forecast::Series;
use crate::stoch::Stoch;
use gridwise_proto::{LinkInfo, LinkSample};
use std::collections::HashMap;
use std::time::Duration;

/// One measured link: its latest probe, and forecasts of its latency and of the time a byte
/// takes from every probe so far. The time, not the bandwidth: a transfer's expected time is
/// the expected time per byte, while bytes over the expected bandwidth comes out short when
/// the rate varies (Jensen). A slab's 1 MiB rows across a 100 Mbit/s path took 87–95 ms most
/// steps and up to 170 ms in some; planned from the bandwidth, the exchange came out 2–10%
/// under the rows' mean.
#[derive(Clone, Debug)]
struct Link {
    latest: LinkSample,
    at: Duration,
    latency: Series,
    secs_per_byte: Series,
    latency_next: Stoch,
    secs_per_byte_next: Stoch,
}

/// Per (measuring server, peer) address pair, the link's probes and forecasts; probes with a
/// negative or non-finite latency or a bandwidth that is not a positive finite number are
/// dropped.
#[derive(Clone, Debug, Default)]
pub struct Links {
    map: HashMap<(String, String), Link>,
}

impl Links {
    /// Records a measurement made by the server at `from`, under the direction its data went:
    /// a pull's is from the far end to `from`. The latest sample is kept as seen from the
    /// sender.
    pub fn record(&mut self, from: &str, s: &LinkSample, now: Duration) {
        let ok = s.latency_s.is_finite()
            && s.latency_s >= 0.0
            && s.bandwidth_bytes_per_s.is_finite()
            && s.bandwidth_bytes_per_s > 0.0;
        if !ok {
            return;
        }
        let (sender, receiver) = if s.inbound {
            (s.to.clone(), from.to_string())
        } else {
            (from.to_string(), s.to.clone())
        };
        let s = &LinkSample {
            to: receiver.clone(),
            inbound: false,
            ..s.clone()
        };
        let link = self.map.entry((sender, receiver)).or_insert_with(|| Link {
            latest: s.clone(),
            at: now,
            latency: Series::new(),
            secs_per_byte: Series::new(),
            latency_next: Stoch::point(s.latency_s),
            secs_per_byte_next: Stoch::point(1.0 / s.bandwidth_bytes_per_s),
        });
        link.latest = s.clone();
        link.at = now;
        link.latency.push(s.latency_s);
        link.secs_per_byte.push(1.0 / s.bandwidth_bytes_per_s);
        if let Some(f) = link.latency.forecast() {
            link.latency_next = Stoch::new(f.value.mean.max(0.0), f.value.sd);
        }
        if let Some(f) = link.secs_per_byte.forecast().filter(|f| f.value.mean > 0.0) {
            link.secs_per_byte_next = f.value;
        }
    }

    fn link(&self, from: &str, to: &str) -> Option<&Link> {
        self.map
            .get(&(from.to_string(), to.to_string()))
            .or_else(|| self.map.get(&(to.to_string(), from.to_string())))
    }

    /// The latest probe of the link from `from` to `to`, or of the reverse one (links are
    /// close to symmetric).
    pub fn get(&self, from: &str, to: &str) -> Option<&LinkSample> {
        self.link(from, to).map(|l| &l.latest)
    }

    /// How many samples the link from `from` to `to` (or the reverse one, as [`Links::get`]
    /// reads it) was learned from, up to the forecasts' window; 0 when never measured.
    pub fn samples(&self, from: &str, to: &str) -> usize {
        self.link(from, to).map_or(0, |l| l.secs_per_byte.len())
    }

    /// Seconds to move `bytes` from `from` to `to`, with the spread of the link's forecasts:
    /// nothing on the same server, the forecast link where one was measured, else the
    /// defaults (known exactly, for want of anything better).
    pub fn transfer(
        &self,
        from: &str,
        to: &str,
        bytes: u64,
        default_latency_s: f64,
        default_bandwidth: f64,
    ) -> Stoch {
        if from == to {
            return Stoch::point(0.0);
        }
        match self.link(from, to) {
            Some(l) => l
                .latency_next
                .plus_unrelated(l.secs_per_byte_next.scale(bytes as f64)),
            None => Stoch::point(default_latency_s + bytes as f64 / default_bandwidth),
        }
    }

    /// Every measured link's latest probe with its age at `now`, sorted by (from, to) address.
    pub fn export(&self, now: Duration) -> Vec<LinkInfo> {
        let mut out: Vec<LinkInfo> = self
            .map
            .iter()
            .map(|((from, _), l)| LinkInfo {
                from: from.clone(),
                sample: l.latest.clone(),
                age_s: now.saturating_sub(l.at).as_secs_f64(),
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
            inbound: false,
        }
    }

    #[test]
    fn measured_links_beat_defaults_and_local_is_free() {
        let mut l = Links::default();
        l.record("a:1", &sample("b:1", 1e-3, 1e6), Duration::ZERO);
        assert_eq!(l.transfer("a:1", "a:1", 1 << 30, 1.0, 1.0).mean, 0.0);
        assert!((l.transfer("a:1", "b:1", 1_000_000, 9.0, 9.0).mean - 1.001).abs() < 1e-12);
        // The reverse direction falls back to the measured one.
        assert!((l.transfer("b:1", "a:1", 1_000_000, 9.0, 9.0).mean - 1.001).abs() < 1e-12);
        assert_eq!(l.transfer("a:1", "c:1", 0, 0.5, 1e9).mean, 0.5);
        l.record("a:1", &sample("c:1", f64::NAN, 1e6), Duration::ZERO);
        assert!(l.get("a:1", "c:1").is_none(), "nonsense is not recorded");
        // Later probes are forecast: a varying bandwidth gives the transfer a spread.
        for bw in [2e6, 1e6, 2e6, 1e6] {
            l.record("a:1", &sample("b:1", 1e-3, bw), Duration::ZERO);
        }
        let t = l.transfer("a:1", "b:1", 1_000_000, 9.0, 9.0);
        assert!(t.sd > 0.0 && t.mean > 0.5 && t.mean < 1.1, "{t:?}");
        assert_eq!(l.export(Duration::from_secs(2))[0].age_s, 2.0);
    }

    #[test]
    fn a_transfer_is_planned_at_the_mean_time_its_bytes_took() {
        // Two rows in three at 11.1 MB/s, one at 6.7: 0.09 s and 0.15 s for 1 MB, 0.11 s on
        // average, where 1 MB over the mean rate (9.6 MB/s) gives 0.104.
        // Which rows are slow follows no pattern a forecaster could learn.
        let mut l = Links::default();
        let mut rng = 12345u64;
        let (mut sum, mut n) = (0.0, 0);
        for _ in 0..64 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let secs = if (rng >> 33) % 3 == 0 { 0.15 } else { 0.09 };
            (sum, n) = (sum + secs, n + 1);
            l.record("a:1", &sample("b:1", 0.0, 1e6 / secs), Duration::ZERO);
        }
        let mean = sum / n as f64;
        let t = l.transfer("a:1", "b:1", 1_000_000, 9.0, 9.0).mean;
        assert!((t / mean - 1.0).abs() < 0.04, "{t} for a mean of {mean}");
    }

    #[test]
    fn a_pull_is_learned_for_the_direction_its_data_came() {
        let mut l = Links::default();
        // `a` probes `b` (a → b at 10 MB/s) and pulls from `b` (b → a at 1 MB/s).
        l.record("a:1", &sample("b:1", 0.0, 1e7), Duration::ZERO);
        let pulled = LinkSample {
            inbound: true,
            ..sample("b:1", 0.0, 1e6)
        };
        l.record("a:1", &pulled, Duration::ZERO);
        assert!((l.transfer("a:1", "b:1", 1_000_000, 9.0, 9.0).mean - 0.1).abs() < 1e-9);
        assert!((l.transfer("b:1", "a:1", 1_000_000, 9.0, 9.0).mean - 1.0).abs() < 1e-9);
        let seen: Vec<(String, String)> = l
            .export(Duration::ZERO)
            .into_iter()
            .map(|i| (i.from, i.sample.to))
            .collect();
        assert_eq!(
            seen,
            [("a:1".into(), "b:1".into()), ("b:1".into(), "a:1".into())]
        );
    }
}
