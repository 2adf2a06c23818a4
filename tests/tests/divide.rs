//! Divisible jobs on a real agent and emulated servers: the plan gives every unit out once,
//! a paging server less than its speed alone would, and iterating on a steady platform settles.

use gridwise_client::DivideSpec;
use gridwise_e2e::{FAST_HEARTBEATS, Grid};
use gridwise_proto::Value;

/// An emulated `rows` service: `speed` units/s (a unit is 1e6 operations), at a tenth of it
/// past `knee` units.
fn server(speed: u64, knee: u64) -> String {
    format!(
        "builtins = []\ncalibrate = true\nslots = 1\n[[emulated]]\nname = \"rows\"\nparam = \"n\"\ncomplexity = \"n*1e6\"\n\
         speed = [[1, {speed}e6], [{knee}, {speed}e6], [{k2}, {speed}e5]]\ncalibration_size = 10\ninputs = 0\noutput = false\n\
         [[models]]\nservice = \"rows\"\nmethod = \"gbbp\"\nparams = [{{ name = \"n\", min = 10, max = 2000, stride = 50 }}]\nfuzzy_max = true\n",
        k2 = knee + 10
    )
}

#[test]
fn a_job_is_cut_by_speed_the_pager_spared_and_iterations_settle() {
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    // Units/s 4000, 2000, 1000; the fastest pages past 600 units.
    g.server("fast", &server(4000, 600));
    g.server("mid", &server(2000, 100_000));
    g.server("slow", &server(1000, 100_000));
    g.wait_up(3);
    let c = g.client();
    // Models first, as a grid that has been up a while has them.
    gridwise_localgrid::wait_for_models(&c, 3, std::time::Duration::from_secs(120)).unwrap();
    let h = c.function_handle_default("rows").unwrap();
    let spec = |policy: &str| DivideSpec {
        unit_param: "n".into(),
        policy: Some(policy.into()),
        all: true,
        ..DivideSpec::default()
    };
    let inputs = |_: u64, units: u64| vec![Value::Int(units as i64)];
    let units = 2100u64;
    let units_of = |r: &gridwise_client::DivideRun, s: &str| {
        r.parts
            .iter()
            .filter(|p| p.server == s)
            .map(|p| p.units)
            .sum::<u64>()
    };
    let cs = c
        .divide(&h, units, &spec("constant-speed"), &inputs)
        .unwrap();
    assert_eq!(cs.parts.iter().map(|p| p.units).sum::<u64>(), units);
    // Constant speeds (the rates each measured) give the pager about 1200 units, deep in its
    // paging.
    assert!(units_of(&cs, "fast") > 1000, "{:?}", cs.plan);
    let runs = c.divide_iter(&h, units, &spec("lp"), 3, &inputs).unwrap();
    for r in &runs {
        assert_eq!(r.parts.iter().map(|p| p.units).sum::<u64>(), units);
        // Contiguous, in order.
        let mut next = 0;
        for p in &r.parts {
            assert_eq!(p.first, next);
            next += p.units;
        }
        // Short of its cliff (the model knows it between measured sizes: within a few units).
        assert!(units_of(r, "fast") <= 620, "{:?}", r.plan);
        assert!(
            r.makespan_s < cs.makespan_s / 2.0,
            "lp {} vs constant-speed {}",
            r.makespan_s,
            cs.makespan_s
        );
    }
    // A steady platform: the later iterations cut the job (almost) the same way.
    let (a, b) = (&runs[1], &runs[2]);
    for s in ["fast", "mid", "slow"] {
        let (x, y) = (units_of(a, s) as i64, units_of(b, s) as i64);
        assert!((x - y).abs() <= units as i64 / 50, "{s}: {x} then {y}");
    }
    // Predictions hold on dedicated servers.
    let last = &runs[2];
    let err = (last.plan.makespan_s - last.makespan_s).abs() / last.makespan_s;
    assert!(
        err < 0.2,
        "predicted {} vs {}",
        last.plan.makespan_s,
        last.makespan_s
    );
}

/// A slab job: three servers, each step every part takes its neighbours' 64 KiB boundary rows
/// of the step before straight from their servers (as references the client never fetches).
#[test]
fn a_slab_swaps_boundary_rows_between_neighbours_every_step() {
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    let slab = "builtins = []\ncalibrate = true\nslots = 1\n[[emulated]]\nname = \"slab\"\n\
                complexity = \"n*1e6\"\nhalo_bytes = 65536\nspeed = [[1, 2e9], [100000, 2e9]]\n\
                calibration_size = 10\n";
    for name in ["s1", "s2", "s3"] {
        g.server(name, slab);
    }
    g.wait_up(3);
    let c = g.client();
    let h = c.function_handle_default("slab").unwrap();
    let spec = DivideSpec {
        unit_param: "n".into(),
        all: true,
        ..DivideSpec::default()
    };
    let inputs = |_: u64, units: u64| vec![Value::Int(units as i64)];
    let run = c.divide_slab(&h, 300, &spec, 65536, 3, &inputs).unwrap();
    assert_eq!(run.plan.parts.len(), 3, "{:?}", run.plan);
    assert_eq!(run.steps.len(), 3);
    // The plan counts an exchange for every part, the ends' with one neighbour.
    assert!(
        run.plan.parts.iter().all(|p| p.comm_s > 0.0),
        "{:?}",
        run.plan
    );
    // Nothing to take in the first step; then one row from each neighbour.
    assert!(run.steps[0].parts.iter().all(|p| p.exchanged_bytes == 0));
    for step in &run.steps[1..] {
        let taken: Vec<u64> = step.parts.iter().map(|p| p.exchanged_bytes).collect();
        assert_eq!(taken, vec![65536, 2 * 65536, 65536]);
        for p in &step.parts {
            assert_eq!(
                p.units,
                run.plan
                    .parts
                    .iter()
                    .find(|q| q.server == p.server)
                    .unwrap()
                    .units
            );
            // The rows it made stayed where it ran.
            for out in &p.result.outputs[..2] {
                let Value::Ref(r) = out else {
                    panic!("a boundary row came back to the client: {out:?}")
                };
                assert!(
                    r.bytes == 65536
                        && r.holder
                            == run
                                .plan
                                .parts
                                .iter()
                                .find(|q| q.server == p.server)
                                .unwrap()
                                .addr,
                    "{r:?}"
                );
            }
        }
    }
    // A job of no steps is refused with the reason.
    let e = c
        .divide_slab(
            &c.function_handle_default("slab").unwrap(),
            300,
            &spec,
            0,
            0,
            &inputs,
        )
        .unwrap_err();
    assert!(e.message.contains("0 steps"), "{e}");
}
