//! Divisible jobs planned from learned models, as the agent holds them.

use super::*;
use crate::testutil::registration;
use gridwise_proto::{
    DivideRequest, ModelPoint, PointSource, PointStats, Registration, ServiceDesc,
};

/// `rows(n)`: a million operations a unit.
fn rows() -> ServiceDesc {
    ServiceDesc {
        args: vec![gridwise_proto::ArgDesc::new(
            "n",
            gridwise_proto::ArgMode::In,
            "int",
        )],
        size_params: vec!["n".into()],
        complexity: Some("n*1e6".into()),
        ..crate::testutil::named("rows")
    }
}

fn point(n: i64, ops_per_s: f64) -> ModelPoint {
    ModelPoint {
        service: "rows".into(),
        x: vec![n],
        stats: PointStats {
            sd: 0.0,
            count: 1,
            min: ops_per_s,
            mean: ops_per_s,
            max: ops_per_s,
        },
        source: PointSource::Benchmark,
    }
}

/// `bench divide`'s grid: 4 classes of 3 servers, one pager class fast to 500 units and ten
/// times slower from 550, at the sizes GBBP measured there. Past the models' largest size
/// (4000) the pager was once estimated at its calibrated rate, fast again: its cliff went
/// unseen and it got 514 units (predicted 0.23 s, took 1.71 s).
#[test]
fn a_pager_gets_no_more_than_its_last_fast_point_from_a_learned_model() {
    let mut c = AgentCore::new(CoreConfig::default());
    for (class, fast, after) in [
        ("a", 4e9, 4e9),
        ("b", 2e9, 2e9),
        ("c", 1e9, 1e9),
        ("pager", 3e9, 3e8),
    ] {
        for i in 0..3 {
            let id = c
                .register(
                    Registration {
                        default_rate: fast,
                        ..registration(&format!("{class}{i}"), &[rows()])
                    },
                    Duration::ZERO,
                )
                .unwrap()
                .server_id;
            // Where GBBP measured the bench's models.
            let points: Vec<ModelPoint> = [50, 100, 300, 400, 450, 500, 550, 1050, 2050, 4000]
                .into_iter()
                .map(|n| point(n, if n <= 500 { fast } else { after }))
                .collect();
            c.model_points(id, &points);
        }
    }
    for n in [2000u64, 4000, 8000, 16000, 32000] {
        let req = DivideRequest {
            service: "rows".into(),
            units: n,
            unit_param: "n".into(),
            sizes: vec![],
            in_bytes: (0, 0),
            out_bytes: (0, 0),
            comm: None,
            policy: None,
            servers: None,
            all: false,
            max_part: None,
        };
        let plan = c.divide(&req, Duration::ZERO).unwrap();
        for p in &plan.parts {
            if p.server.starts_with("pager") {
                assert!(
                    p.units <= 500,
                    "N = {n}: {} got {} units",
                    p.server,
                    p.units
                );
            }
        }
    }
}
