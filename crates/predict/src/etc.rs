//! The estimated time to compute (ETC) of one call on one server: queue wait + transfer in +
//! compute + transfer out, and the lower bound ranking prunes with.

use crate::compute::ComputeModel;
use crate::knowledge::{ServerView, ServiceFacts};
use crate::links::Links;
use crate::stoch::Stoch;
use gridwise_proto::{CallProfile, Etc};

/// How sure an [`Etc`] is (seed 000 §2): the spread of its total, its 90% interval, the
/// conservative total, and the spread of the finish on the server, for whoever reads one
/// (agent, client, command line).
pub trait EtcSpread {
    /// The standard deviation of the total: the queue and the compute term are driven by the
    /// same server's load, so their spreads add; the transfers depend on the network, not the
    /// server, and the overhead's jitter on neither, so their variances add.
    fn total_sd_s(&self) -> f64;
    /// The interval the total falls in 9 times out of 10, if the estimate's spread is right.
    fn interval90_s(&self) -> (f64, f64);
    /// The total at `tf` standard deviations above the mean: what the conservative policy
    /// ranks by.
    fn conservative_s(&self, tf: f64) -> f64;
    /// The spread of when the call ends on its server: the queue and the compute term
    /// (related, both on that server); the transfers are the client's business.
    fn finish_sd_s(&self) -> f64;
}

/// No estimate is surer than the clocks and schedulers that time the call: a timer tick, a
/// thread woken late, a sleep overshooting by a fraction of a millisecond. A model that fits
/// its points exactly (an emulated kernel on a dedicated host) would otherwise give an
/// interval of no width, which the time taken then misses every time.
const LEAST_SD_S: f64 = 1e-4;
const LEAST_RELATIVE_SD: f64 = 0.01;

impl EtcSpread for Etc {
    fn total_sd_s(&self) -> f64 {
        (self.queue_wait_sd_s + self.compute_sd_s)
            .hypot(self.transfer_sd_s)
            .hypot(self.overhead_sd_s)
            .max(LEAST_SD_S)
            .max(LEAST_RELATIVE_SD * self.total_s())
    }

    fn interval90_s(&self) -> (f64, f64) {
        crate::stoch::interval90(self.total_s(), self.total_sd_s())
    }

    fn conservative_s(&self, tf: f64) -> f64 {
        self.total_s() + tf * self.total_sd_s()
    }

    fn finish_sd_s(&self) -> f64 {
        self.queue_wait_sd_s + self.compute_sd_s
    }
}

/// What moving data costs where no link was measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transfers {
    /// One-way latency, s.
    pub latency_s: f64,
    /// Bandwidth, bytes/s.
    pub bandwidth: f64,
}

/// A term that cannot be negative or NaN, whatever a model returns.
fn term(x: f64) -> f64 {
    if x > 0.0 { x } else { 0.0 }
}

/// The client's inputs in, before any remote pull.
fn sent_in_s(t: &Transfers, profile: &CallProfile) -> f64 {
    t.latency_s + profile.in_bytes as f64 / t.bandwidth
}

/// The outputs back to the client.
fn sent_out_s(t: &Transfers, profile: &CallProfile) -> f64 {
    t.latency_s + profile.out_bytes as f64 / t.bandwidth
}

/// The client's inputs to the server and its outputs back: as the server's recent calls showed
/// at the CPU share the compute term expects (one fit both ways, so their spreads are related),
/// else the configured defaults, known to within their own size.
fn client_transfers(
    transfers: &Transfers,
    server: ServerView<'_>,
    profile: &CallProfile,
    cpu_available: Option<f64>,
) -> (Stoch, Stoch) {
    let link = &server.host.client_link;
    match (
        link.transfer(profile.in_bytes, cpu_available),
        link.transfer(profile.out_bytes, cpu_available),
    ) {
        (Some(i), Some(o)) => (i, o),
        _ => {
            let (i, o) = (
                sent_in_s(transfers, profile),
                sent_out_s(transfers, profile),
            );
            (Stoch::new(i, i), Stoch::new(o, o))
        }
    }
}

/// The ETC of `profile` on the server at `addr` (seen as `server`) behind `queue_wait` of
/// work reserved there (a mean and the spread of the finishes ahead). `work` is the call's
/// operations ([`ServiceFacts::work`]), evaluated once per call rather than once per server.
/// The transfer in covers the client's inputs and the pull of every remote input from its
/// holder over the measured `links` (nothing when the server holds it); pulls from different
/// holders are unrelated, so their variances add.
#[allow(clippy::too_many_arguments)]
pub fn estimate(
    model: &dyn ComputeModel,
    transfers: &Transfers,
    links: &Links,
    server: ServerView<'_>,
    addr: &str,
    queue_wait: Stoch,
    service: &ServiceFacts,
    work: Option<f64>,
    profile: &CallProfile,
) -> Etc {
    let compute = model.compute(server, service, work, profile);
    let (lat, bw) = (transfers.latency_s, transfers.bandwidth);
    let pulls = profile
        .remote_in
        .iter()
        .map(|(holder, bytes)| links.transfer(holder, addr, *bytes, lat, bw))
        .fold(Stoch::point(0.0), Stoch::plus_unrelated);
    let sd = |x: f64| if x.is_finite() { term(x) } else { 0.0 };
    let client_side = client_transfers(transfers, server, profile, compute.cpu_available);
    let (sent_in, sent_out) = (client_side.0.mean, client_side.1.mean);
    let client_side = client_side.0.plus_related(client_side.1);
    Etc {
        queue_wait_s: term(queue_wait.mean),
        transfer_in_s: term(sent_in + pulls.mean),
        compute_s: term(compute.seconds),
        transfer_out_s: term(sent_out),
        compute_source: compute.source,
        queue_wait_sd_s: sd(queue_wait.sd),
        transfer_sd_s: sd(pulls.plus_unrelated(client_side).sd),
        compute_sd_s: sd(compute.sd_s),
        cpu_available: compute.cpu_available,
        overhead_s: sd(server.host.overhead.estimate().mean),
        overhead_sd_s: sd(server.host.overhead.estimate().sd),
    }
}

/// A total no server whose model's compute term is exactly `work / rate`
/// ([`ComputeModel::rate_bound`]) can beat: its queue wait, transfers and overhead are each
/// ≥ 0 (client transfers are learnt per server, so no common value of them is a bound).
/// Floating-point division is monotone, so the bound never exceeds the real [`estimate`]
/// total, and it does not decrease as `rate` does.
pub fn lower_bound_s(rate: f64, work: f64) -> f64 {
    term(work / rate)
}

/// Whether [`estimate`] charges `server` the configured client transfers
/// ([`default_client_transfers_s`]): until it has learnt its client link. Once it has, they
/// are the link's fit, which nothing cheaper bounds than 0.
pub fn charges_default_transfers(server: ServerView<'_>) -> bool {
    !server.host.client_link.is_fitted()
}

/// The configured client transfers of `profile`, in and out, s.
pub fn default_client_transfers_s(transfers: &Transfers, profile: &CallProfile) -> (f64, f64) {
    (
        sent_in_s(transfers, profile),
        sent_out_s(transfers, profile),
    )
}

/// [`lower_bound_s`] behind a queue and the client's transfers: a total no server can beat
/// whose queue wait (the mean given to [`estimate`]) is `queue_wait_s`, whose client transfers
/// are `client` ([`default_client_transfers_s`] where it [`charges_default_transfers`], else
/// `None`: 0) and whose compute term is no
/// less than `work / rate` ([`ComputeModel::rate_bound_at`]). The estimate's total adds the
/// same terms, in the same order, each no smaller (the transfer in also pulls remote inputs),
/// and non-negative others (the overhead); floating-point addition is monotone, so the bound
/// never exceeds it.
pub fn lower_bound_behind_s(
    queue_wait_s: f64,
    client: Option<(f64, f64)>,
    rate: f64,
    work: f64,
) -> f64 {
    let (sent_in, sent_out) = client.unwrap_or((0.0, 0.0));
    term(queue_wait_s) + term(sent_in) + lower_bound_s(rate, work) + term(sent_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::{ASSUMED_UNKNOWN_S, RateModel};
    use crate::knowledge::{HostKnowledge, OfferKnowledge};
    use gridwise_proto::{Complexity, ComputeSource};

    #[test]
    fn no_interval_is_narrower_than_the_clocks_that_time_the_call() {
        let exact = Etc {
            queue_wait_s: 0.0,
            transfer_in_s: 0.0,
            compute_s: 0.5,
            transfer_out_s: 0.0,
            compute_source: ComputeSource::Declared,
            queue_wait_sd_s: 0.0,
            transfer_sd_s: 0.0,
            compute_sd_s: 0.0,
            cpu_available: None,
            overhead_s: 0.0,
            overhead_sd_s: 0.0,
        };
        let (lo, hi) = exact.interval90_s();
        assert!(lo < 0.5 && hi > 0.5 && hi - lo > 0.01, "{lo}..{hi}");
        // A wide spread stays as it is.
        let unsure = Etc {
            compute_sd_s: 0.1,
            ..exact.clone()
        };
        assert_eq!(unsure.total_sd_s(), 0.1);
        let tiny = Etc {
            compute_s: 0.001,
            ..exact
        };
        assert_eq!(tiny.total_sd_s(), 1e-4);
    }

    fn dgemm_facts() -> ServiceFacts {
        let params: Vec<String> = ["m", "n", "k"].map(String::from).to_vec();
        ServiceFacts {
            complexity: Some(Complexity::parse("2*m*n*k", &params).unwrap()),
            ..ServiceFacts::default()
        }
    }

    fn profile(n: i64) -> CallProfile {
        CallProfile {
            service: "dgemm".into(),
            sizes: vec![("m".into(), n), ("n".into(), n), ("k".into(), n)],
            in_bytes: 1_000_000,
            out_bytes: 2_000_000,
            remote_in: Vec::new(),
            inline_bytes: 0,
        }
    }

    const LAN: Transfers = Transfers {
        latency_s: 1e-4,
        bandwidth: 1e9,
    };

    fn host(rate: f64) -> HostKnowledge {
        HostKnowledge {
            default_rate: rate,
            ..HostKnowledge::default()
        }
    }

    #[test]
    fn estimate_sums_queue_transfers_and_compute() {
        let (h, facts, p) = (host(1e9), dgemm_facts(), profile(100));
        let view = ServerView {
            host: &h,
            offer: None,
        };
        let w = facts.work(&p);
        assert_eq!(w, Some(2e6));
        let e = estimate(
            &RateModel,
            &LAN,
            &Links::default(),
            view,
            "s:1",
            Stoch::point(2.0),
            &facts,
            w,
            &p,
        );
        assert_eq!(e.queue_wait_s, 2.0);
        assert!((e.transfer_in_s - (1e-4 + 1e-3)).abs() < 1e-15);
        assert!((e.transfer_out_s - (1e-4 + 2e-3)).abs() < 1e-15);
        assert_eq!(e.compute_s, 2e-3);
        assert_eq!(
            e.compute_source,
            ComputeSource::CalibratedRate { rate: 1e9 }
        );
        // The bound is the compute term alone.
        assert_eq!(lower_bound_s(1e9, 2e6), e.compute_s);
    }

    #[test]
    fn history_stands_in_for_a_formula_then_the_unknown_is_assumed() {
        let h = host(1e9);
        let mut o = OfferKnowledge::new(vec![], None);
        let facts = ServiceFacts::default();
        let p = CallProfile {
            service: "echo".into(),
            sizes: vec![],
            in_bytes: 0,
            out_bytes: 0,
            remote_in: Vec::new(),
            inline_bytes: 0,
        };
        fn view<'a>(h: &'a HostKnowledge, o: &'a OfferKnowledge) -> ServerView<'a> {
            ServerView {
                host: h,
                offer: Some(o),
            }
        }
        assert_eq!(facts.work(&p), None);
        let c = RateModel.compute(view(&h, &o), &facts, None, &p);
        assert_eq!(
            (c.seconds, c.source),
            (
                ASSUMED_UNKNOWN_S,
                ComputeSource::Assumed {
                    seconds: ASSUMED_UNKNOWN_S
                }
            )
        );
        o.history.record(0.5);
        o.history.record(1.5);
        let c = RateModel.compute(view(&h, &o), &facts, None, &p);
        assert_eq!(
            (c.seconds, c.source),
            (1.0, ComputeSource::History { calls: 2 })
        );
    }

    #[test]
    fn unusable_rates_fall_through_to_history() {
        for rate in [0.0, f64::NAN, f64::INFINITY, -1.0] {
            let h = host(rate);
            let mut o = OfferKnowledge::new(vec!["m".into(), "n".into(), "k".into()], None);
            let (facts, p) = (dgemm_facts(), profile(10));
            let c = RateModel.compute(
                ServerView {
                    host: &h,
                    offer: Some(&o),
                },
                &facts,
                facts.work(&p),
                &p,
            );
            assert!(matches!(c.source, ComputeSource::Assumed { .. }), "{c:?}");
            assert_eq!(
                RateModel.rate_bound(
                    ServerView {
                        host: &h,
                        offer: Some(&o)
                    },
                    &facts
                ),
                None
            );
            o.history.record(2.0);
            let c = RateModel.compute(
                ServerView {
                    host: &h,
                    offer: Some(&o),
                },
                &facts,
                facts.work(&p),
                &p,
            );
            assert_eq!(
                (c.seconds, c.source),
                (2.0, ComputeSource::History { calls: 1 })
            );
        }
    }

    #[test]
    fn a_broken_model_cannot_make_terms_negative_or_nan() {
        struct Broken;
        impl ComputeModel for Broken {
            fn compute(
                &self,
                _: ServerView<'_>,
                _: &ServiceFacts,
                _: Option<f64>,
                _: &CallProfile,
            ) -> crate::compute::Compute {
                crate::compute::Compute::point(f64::NAN, ComputeSource::Declared)
            }
        }
        let h = host(1e9);
        let view = ServerView {
            host: &h,
            offer: None,
        };
        let p = profile(1);
        let e = estimate(
            &Broken,
            &LAN,
            &Links::default(),
            view,
            "s:1",
            Stoch::new(-3.0, f64::NAN),
            &ServiceFacts::default(),
            None,
            &p,
        );
        assert_eq!((e.compute_s, e.queue_wait_s), (0.0, 0.0));
    }
}
