//! Estimated time to compute (ETC) of one call on one server.
//!
//! The compute term sits behind [`ComputeModel`] so that richer models (functional performance
//! models) replace [`RateModel`] without touching the rest of the core.

use crate::catalog::CatalogEntry;
use crate::config::CoreConfig;
use crate::links::Links;
use crate::registry::ServerEntry;
use gridwise_proto::{CallProfile, ComputeSource, Etc};

/// Predicts kernel time.
pub trait ComputeModel: Send + Sync {
    /// Seconds the kernel will take for this profile on this server, and where that number came from.
    fn compute(
        &self,
        server: &ServerEntry,
        service: &CatalogEntry,
        work: Option<f64>,
        profile: &CallProfile,
    ) -> (f64, ComputeSource);

    /// Whether the server can run the call at all (a model may know a size does not fit).
    fn feasible(
        &self,
        _server: &ServerEntry,
        _service: &CatalogEntry,
        _profile: &CallProfile,
    ) -> bool {
        true
    }
}

/// The time assumed for a call nothing is known about (no complexity, no duration, no call of
/// its service finished anywhere), s: not zero, so that a burst of such calls queues up in the
/// estimates and spreads over the servers instead of piling onto one; replaced by measured
/// times as soon as one call finishes.
pub const ASSUMED_UNKNOWN_S: f64 = 1.0;

/// GridSolve's stock estimate, extended to services no formula describes: the declared
/// duration, else complexity ÷ the server's calibrated rate, else the mean of past kernel times
/// (at these sizes, else at any size; on this server, else on the others), else
/// [`ASSUMED_UNKNOWN_S`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RateModel;

/// The service's declared duration at the call's sizes, if it declares one.
pub fn declared(service: &CatalogEntry, profile: &CallProfile) -> Option<f64> {
    service
        .duration
        .as_ref()
        .and_then(|d| d.eval(&profile.sizes).ok())
}

impl ComputeModel for RateModel {
    fn compute(
        &self,
        server: &ServerEntry,
        service: &CatalogEntry,
        work: Option<f64>,
        profile: &CallProfile,
    ) -> (f64, ComputeSource) {
        if let Some(t) = declared(service, profile) {
            return (t, ComputeSource::Declared);
        }
        if let (Some(work), Some(rate)) = (work, server.rate(service.idx)) {
            return (work / rate, ComputeSource::CalibratedRate { rate });
        }
        if let Some(o) = server.offer(service.idx) {
            let x: Vec<i64> = profile.sizes.iter().map(|(_, v)| *v).collect();
            if let Some(h) = o.by_size.get(&x).filter(|h| h.calls > 0) {
                return (h.mean_s, ComputeSource::HistoryAtSize { calls: h.calls });
            }
            if o.history.calls > 0 {
                let h = o.history;
                return (h.mean_s, ComputeSource::History { calls: h.calls });
            }
        }
        let g = service.grid_history;
        if g.calls > 0 {
            return (g.mean_s, ComputeSource::GridHistory { calls: g.calls });
        }
        (
            ASSUMED_UNKNOWN_S,
            ComputeSource::Assumed {
                seconds: ASSUMED_UNKNOWN_S,
            },
        )
    }
}

/// The operations a call performs: its service's complexity at the profile's sizes, or `None`
/// when the service has no complexity or it cannot be evaluated at these sizes (the call is
/// still rankable from history, and the server will judge the arguments).
pub fn work(service: &CatalogEntry, profile: &CallProfile) -> Option<f64> {
    service
        .complexity
        .as_ref()
        .and_then(|c| c.eval(&profile.sizes).ok())
}

/// A term that cannot be negative or NaN, whatever a model returns.
fn term(x: f64) -> f64 {
    if x > 0.0 { x } else { 0.0 }
}

/// The ETC of `profile` on `server` at `now`, behind `queue_wait_s` of calls reserved there:
/// queue wait + transfer in + compute + transfer out.
/// `work` is [`work`] for the call, evaluated once per call rather than once per server. The
/// transfer in covers the client's inputs and the pull of every remote input from its holder
/// over the measured `links` (nothing when `server` holds it).
#[allow(clippy::too_many_arguments)]
pub fn estimate(
    model: &dyn ComputeModel,
    config: &CoreConfig,
    links: &Links,
    server: &ServerEntry,
    queue_wait_s: f64,
    service: &CatalogEntry,
    work: Option<f64>,
    profile: &CallProfile,
) -> Etc {
    let (compute_s, compute_source) = model.compute(server, service, work, profile);
    let bw = config.default_bandwidth_bytes_per_s;
    let lat = config.default_latency_s;
    Etc {
        queue_wait_s: term(queue_wait_s),
        transfer_in_s: term(
            lat + profile.in_bytes as f64 / bw
                + profile
                    .remote_in
                    .iter()
                    .map(|(holder, bytes)| links.transfer_s(holder, server.addr(), *bytes, lat, bw))
                    .sum::<f64>(),
        ),
        compute_s: term(compute_s),
        transfer_out_s: term(lat + profile.out_bytes as f64 / bw),
        compute_source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::registry::Registry;
    use crate::testutil::{dgemm, dgemm_profile, echo, registration};
    use std::time::Duration;

    fn setup(rate: f64) -> (Catalog, Registry, usize) {
        let mut cat = Catalog::new();
        let d = dgemm();
        let (i, _) = cat.upsert(&d, d.compiled_complexity().unwrap());
        let (j, _) = cat.upsert(&echo(), None);
        let mut reg = registration("s", &[dgemm(), echo()]);
        reg.default_rate = rate;
        let mut r = Registry::new();
        let (slot, _) = r.register(reg, &[(i, false), (j, false)], Duration::ZERO);
        (cat, r, slot)
    }

    #[test]
    fn rate_model_divides_work_by_rate() {
        let (cat, r, slot) = setup(1e9);
        let svc = cat.get("dgemm").unwrap();
        let p = dgemm_profile(100, 100, 100);
        let w = work(svc, &p);
        assert_eq!(w, Some(2e6));
        let (t, src) = RateModel.compute(r.entry(slot), svc, w, &p);
        assert_eq!(t, 2e-3);
        assert_eq!(src, ComputeSource::CalibratedRate { rate: 1e9 });
    }

    #[test]
    fn rate_model_falls_back_to_history_then_unknown() {
        let (cat, mut r, slot) = setup(1e9);
        let svc = cat.get("echo").unwrap();
        let p = CallProfile {
            service: "echo".into(),
            sizes: vec![],
            in_bytes: 0,
            out_bytes: 0,
            remote_in: Vec::new(),
        };
        assert_eq!(work(svc, &p), None);
        let (t, src) = RateModel.compute(r.entry(slot), svc, None, &p);
        assert_eq!(
            (t, src),
            (
                ASSUMED_UNKNOWN_S,
                ComputeSource::Assumed {
                    seconds: ASSUMED_UNKNOWN_S
                }
            )
        );
        let h = &mut r.entry_mut(slot).offer_mut(svc.idx).unwrap().history;
        h.record(0.5);
        h.record(1.5);
        let (t, src) = RateModel.compute(r.entry(slot), svc, None, &p);
        assert_eq!((t, src), (1.0, ComputeSource::History { calls: 2 }));
    }

    #[test]
    fn unusable_rate_falls_through_to_history() {
        for rate in [0.0, f64::NAN, f64::INFINITY, -1.0] {
            let (cat, mut r, slot) = setup(rate);
            let svc = cat.get("dgemm").unwrap();
            let p = dgemm_profile(10, 10, 10);
            let (_, src) = RateModel.compute(r.entry(slot), svc, work(svc, &p), &p);
            assert!(matches!(src, ComputeSource::Assumed { .. }), "{src:?}");
            r.entry_mut(slot)
                .offer_mut(svc.idx)
                .unwrap()
                .history
                .record(2.0);
            let (t, src) = RateModel.compute(r.entry(slot), svc, work(svc, &p), &p);
            assert_eq!((t, src), (2.0, ComputeSource::History { calls: 1 }));
        }
    }

    #[test]
    fn estimate_sums_queue_transfers_and_compute() {
        let (cat, r, slot) = setup(1e9);
        let svc = cat.get("dgemm").unwrap();
        let cfg = CoreConfig::default();
        let mut p = dgemm_profile(100, 100, 100);
        p.in_bytes = 1_000_000;
        p.out_bytes = 2_000_000;
        let e = estimate(
            &RateModel,
            &cfg,
            &Links::default(),
            r.entry(slot),
            2.0,
            svc,
            work(svc, &p),
            &p,
        );
        assert_eq!(e.queue_wait_s, 2.0);
        assert!((e.transfer_in_s - (1e-4 + 1e-3)).abs() < 1e-15);
        assert!((e.transfer_out_s - (1e-4 + 2e-3)).abs() < 1e-15);
        assert_eq!(e.compute_s, 2e-3);
        assert!((e.total_s() - (2.0 + 1.1e-3 + 2e-3 + 2.1e-3)).abs() < 1e-12);
    }

    #[test]
    fn a_broken_model_cannot_make_terms_negative_or_nan() {
        struct Broken;
        impl ComputeModel for Broken {
            fn compute(
                &self,
                _: &ServerEntry,
                _: &CatalogEntry,
                _: Option<f64>,
                _: &CallProfile,
            ) -> (f64, ComputeSource) {
                (f64::NAN, ComputeSource::Declared)
            }
        }
        let (cat, r, slot) = setup(1e9);
        let svc = cat.get("dgemm").unwrap();
        let p = dgemm_profile(1, 1, 1);
        let e = estimate(
            &Broken,
            &CoreConfig::default(),
            &Links::default(),
            r.entry(slot),
            0.0,
            svc,
            None,
            &p,
        );
        assert_eq!(e.compute_s, 0.0);
    }
}
