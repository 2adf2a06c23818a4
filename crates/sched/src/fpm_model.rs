//! The compute term from functional performance models (seed 003): time = C(x) / S(x) with
//! S the (server, service) model's interpolated speed at the call's sizes. Outside the sizes a
//! model covers, the calibrated rate stands in, and the ETC breakdown says so.

use crate::catalog::CatalogEntry;
use crate::etc::{ComputeModel, RateModel};
use crate::registry::ServerEntry;
use gridwise_fpm::band;
use gridwise_proto::{CallProfile, ComputeSource};

/// FPM first, then [`RateModel`].
#[derive(Clone, Copy, Debug, Default)]
pub struct FpmModel;

/// The call's size vector in the model's parameter order (the profile's sizes are in the
/// service's declared order, which the core has already checked).
fn size_vector(profile: &CallProfile) -> Vec<i64> {
    profile.sizes.iter().map(|(_, v)| *v).collect()
}

impl ComputeModel for FpmModel {
    fn compute(
        &self,
        server: &ServerEntry,
        service: &CatalogEntry,
        work: Option<f64>,
        profile: &CallProfile,
    ) -> (f64, ComputeSource) {
        if let Some(t) = crate::etc::declared(service, profile) {
            return (t, ComputeSource::Declared);
        }
        let model = server.offer(service.idx).map(|o| &o.model);
        if let (Some(work), Some(m)) = (work, model)
            && !m.is_empty()
        {
            let x = size_vector(profile);
            let points = m.len() as u32;
            if m.covers(&x) {
                if let Some(t) = m.time(&x, work) {
                    // The model's speeds are those of a quiet host; a server with a load
                    // history gets the middle of its band (seed 003 §2.1.2): the fixed points
                    // of t = t_ideal·(1 + l(t)) under l_min and l_max. The detailed band's mean
                    // is O(w²) per estimate, too dear on the ranking path.
                    return match server.load_track().functions() {
                        Some(lf) if t.is_finite() => {
                            let (lo, hi) = band::time_band(t, lf);
                            (
                                (lo + hi) / 2.0,
                                ComputeSource::Fpm {
                                    points,
                                    load_adjusted: true,
                                },
                            )
                        }
                        _ => (
                            t,
                            ComputeSource::Fpm {
                                points,
                                load_adjusted: false,
                            },
                        ),
                    };
                }
            } else if let Some(rate) = server.rate(service.idx) {
                return (
                    work / rate,
                    ComputeSource::RateOutsideModel { rate, points },
                );
            }
        }
        RateModel.compute(server, service, work, profile)
    }

    fn feasible(
        &self,
        server: &ServerEntry,
        service: &CatalogEntry,
        profile: &CallProfile,
    ) -> bool {
        let Some(m) = server.offer(service.idx).map(|o| &o.model) else {
            return true;
        };
        if m.is_empty() {
            return true;
        }
        let x = size_vector(profile);
        // Only a model that covers the size may rule it out: outside, nothing is known.
        !(m.covers(&x) && m.speed(&x).is_some_and(|s| s <= 0.0))
    }
}
