//! Tunables of the decision core.

use gridwise_proto::Policy;
use std::time::Duration;

/// How the core decides: default policy, liveness timeouts, network defaults, ticket lifetime.
#[derive(Clone, Debug, PartialEq)]
pub struct CoreConfig {
    /// The policy used when a call does not ask for another one.
    pub policy: Policy,
    /// A server silent for longer than this is marked down.
    pub heartbeat_timeout: Duration,
    /// Bandwidth assumed between client and server until links are measured, bytes/s.
    pub default_bandwidth_bytes_per_s: f64,
    /// One-way latency assumed between client and server until links are measured, seconds.
    pub default_latency_s: f64,
    /// An assignment never reported is forgotten after this long, so lost reports do not
    /// clog a server's queue forever.
    pub ticket_ttl: Duration,
    /// The most servers a ranking returns (the client's fallback list).
    pub max_candidates: usize,
    /// How often servers are asked to send heartbeats.
    pub heartbeat_interval: Duration,
    /// Period of the load history each server's band model is built from (the thesis's Δ).
    pub load_sample: Duration,
    /// Load-average window w of the band model, in samples (the history keeps 2w − 1).
    pub load_window: usize,
    /// Period of the CPU-availability and free-memory series the forecasts are made from.
    pub sensor_sample: Duration,
    /// How load enters the compute term.
    pub load_model: gridwise_predict::LoadModel,
    /// The model family per service name; services not named use FPMs (regression where
    /// they have no point).
    pub families: std::collections::HashMap<String, gridwise_proto::ModelFamily>,
    /// The conservative policy's tuning factor: how many standard deviations above the mean
    /// it ranks by (seed 000 §4).
    pub conservative_tf: f64,
    /// Registrations one source may make per second (on average)…
    pub registrations_per_s: f64,
    /// … and at once.
    pub registration_burst: f64,
    /// Up servers one source may have registered.
    pub max_servers_per_source: usize,
    /// A server down for this long is forgotten, with its models.
    pub server_retention: Duration,
    /// For this long after the agent starts, a call finding no live server waits for the
    /// servers it knew to register again instead of failing.
    pub restore_grace: Duration,
    /// Which of several about equally good servers this agent prefers while other agents are
    /// placing calls too: agents with different salts prefer different ones, so they do not all
    /// send their calls to the same server before any hears of the others'. `None` draws one
    /// when the core is made; the simulator fixes it so its runs repeat.
    pub tie_salt: Option<u64>,
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            policy: Policy::Mct,
            heartbeat_timeout: Duration::from_secs(10),
            default_bandwidth_bytes_per_s: 1e9,
            default_latency_s: 1e-4,
            ticket_ttl: Duration::from_secs(600),
            max_candidates: 8,
            heartbeat_interval: Duration::from_secs(1),
            load_sample: Duration::from_secs(60),
            load_window: 60,
            sensor_sample: Duration::from_secs(1),
            conservative_tf: 1.0,
            load_model: gridwise_predict::LoadModel::Forecast,
            families: Default::default(),
            registrations_per_s: 20.0,
            registration_burst: 100.0,
            max_servers_per_source: 256,
            server_retention: Duration::from_secs(7 * 24 * 3600),
            restore_grace: Duration::from_secs(5),
            tie_salt: None,
        }
    }
}

/// A configuration value the core cannot work with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The bandwidth is zero, negative or not a number.
    #[error("default bandwidth must be a positive number of bytes/s, got {0}")]
    Bandwidth(f64),
    /// The latency is negative or not a number.
    #[error("default latency must be a finite number of seconds >= 0, got {0}")]
    Latency(f64),
    /// No candidates would ever be returned.
    #[error("max candidates must be at least 1")]
    MaxCandidates,
    /// A count or rate that must be positive is not.
    #[error("{0} must be a positive number")]
    NotPositive(&'static str),
    /// Heartbeats would never be asked for, or servers would time out between two of them.
    #[error(
        "heartbeat interval ({interval:?}) must be positive and shorter than the heartbeat timeout ({timeout:?})"
    )]
    Heartbeat {
        interval: Duration,
        timeout: Duration,
    },
}

impl CoreConfig {
    /// What moving data costs where no link was measured.
    pub fn transfers(&self) -> gridwise_predict::Transfers {
        gridwise_predict::Transfers {
            latency_s: self.default_latency_s,
            bandwidth: self.default_bandwidth_bytes_per_s,
        }
    }

    /// How often each kind of load sample enters a server's histories.
    pub fn load_sampling(&self) -> gridwise_predict::LoadSampling {
        gridwise_predict::LoadSampling {
            band_every: self.load_sample,
            band_window: self.load_window,
            sensor_every: self.sensor_sample,
        }
    }

    /// Checks the values, so a bad config file is refused at start-up rather than producing
    /// infinite or NaN estimates later.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bw = self.default_bandwidth_bytes_per_s;
        if !(bw.is_finite() && bw > 0.0) {
            return Err(ConfigError::Bandwidth(bw));
        }
        let lat = self.default_latency_s;
        if !(lat.is_finite() && lat >= 0.0) {
            return Err(ConfigError::Latency(lat));
        }
        if self.max_candidates == 0 {
            return Err(ConfigError::MaxCandidates);
        }
        let positive = |x: f64| x.is_finite() && x > 0.0;
        for (name, ok) in [
            ("registrations_per_s", positive(self.registrations_per_s)),
            (
                "registration_burst",
                self.registration_burst.is_finite() && self.registration_burst >= 1.0,
            ),
            ("max_servers_per_source", self.max_servers_per_source > 0),
            ("load_window", self.load_window > 0),
            ("ticket_ttl_s", !self.ticket_ttl.is_zero()),
            ("load_sample_s", !self.load_sample.is_zero()),
            ("sensor_sample_s", !self.sensor_sample.is_zero()),
            (
                "conservative_tf",
                self.conservative_tf.is_finite() && self.conservative_tf >= 0.0,
            ),
        ] {
            if !ok {
                return Err(ConfigError::NotPositive(name));
            }
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.heartbeat_timeout {
            return Err(ConfigError::Heartbeat {
                interval: self.heartbeat_interval,
                timeout: self.heartbeat_timeout,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = CoreConfig::default();
        c.validate().unwrap();
        assert_eq!(c.default_bandwidth_bytes_per_s, 1e9);
        assert_eq!(c.ticket_ttl, Duration::from_secs(600));
        assert_eq!(c.max_candidates, 8);
    }

    #[test]
    fn bad_values_are_named() {
        let mut c = CoreConfig {
            default_bandwidth_bytes_per_s: 0.0,
            ..CoreConfig::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("bandwidth"));
        c = CoreConfig {
            default_latency_s: f64::NAN,
            ..CoreConfig::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("latency"));
        c = CoreConfig {
            max_candidates: 0,
            ..CoreConfig::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::MaxCandidates));
        c = CoreConfig {
            heartbeat_interval: Duration::from_secs(20),
            ..CoreConfig::default()
        };
        assert!(matches!(c.validate(), Err(ConfigError::Heartbeat { .. })));
    }
}
