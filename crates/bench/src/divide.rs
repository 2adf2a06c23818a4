//! `gridwise bench divide`: divisible jobs on a real agent and 16 emulated servers in 4 classes
//! (one class pages past 500 units; one server of each class carries a steady background load),
//! models learned by gridwise. N is swept over five sizes; per (N, policy) the measured makespan,
//! the prediction, the servers used, and what an offline search over host counts with the true
//! speed functions finds (`oracle_s`, `oracle_servers`). Then a slab job (neighbour exchange per
//! part) at the largest size.

use gridwise_client::{Client, DivideRun, DivideSpec, NeighbourComm};
use gridwise_fpm::partition::fpm_split;
use gridwise_kernels::SpeedFunction;
use gridwise_localgrid::{LocalGrid, wait_for_models, wait_for_servers};
use gridwise_proto::{DividePart, DivideReply, Value};
use serde_json::{Value as Json, json};
use std::time::Duration;

/// A class of servers: name, units/s below the knee, the knee (units), units/s past it.
const CLASSES: [(&str, f64, f64, f64); 4] = [
    ("a", 4000.0, 1e9, 4000.0),
    ("b", 2000.0, 1e9, 2000.0),
    ("c", 1000.0, 1e9, 1000.0),
    ("pager", 3000.0, 500.0, 300.0),
];
/// Servers per class; the last of each class is loaded.
const PER_CLASS: usize = 4;
/// The loaded servers' mean CPU availability.
const LOADED: f64 = 0.7;
/// Job sizes, units.
const SIZES: [u64; 5] = [2000, 4000, 8000, 16000, 32000];
/// A unit is this many operations.
const UNIT_OPS: f64 = 1e6;

/// (policy, selection, whether gridwise picks it by itself).
const POLICIES: [(&str, &str, bool); 4] = [
    ("fpm", "best", true),
    ("lp", "best", false),
    ("constant-speed", "all", false),
    ("even", "all", false),
];

fn speed_table(c: &(&str, f64, f64, f64)) -> Vec<(f64, f64)> {
    let (_, s, knee, after) = *c;
    if knee > 1e8 {
        vec![(1.0, s * UNIT_OPS), (100_000.0, s * UNIT_OPS)]
    } else {
        vec![
            (1.0, s * UNIT_OPS),
            (knee, s * UNIT_OPS),
            (knee + 10.0, after * UNIT_OPS),
            (100_000.0, after * UNIT_OPS),
        ]
    }
}

fn server_toml(c: &(&str, f64, f64, f64), loaded: bool) -> String {
    let speed: Vec<String> = speed_table(c)
        .iter()
        .map(|(x, s)| format!("[{x}, {s:e}]"))
        .collect();
    let load = if loaded {
        format!(
            "load = {{ kind = \"steady\", seed = 3, mean = {LOADED}, sd = 0.03, phi = 0.9, step_s = 2.0 }}\n"
        )
    } else {
        String::new()
    };
    format!(
        "builtins = []\ncalibrate = true\nslots = 1\n{load}[[emulated]]\nname = \"rows\"\nparam = \"n\"\n\
         complexity = \"n*{UNIT_OPS:e}\"\nspeed = [{}]\ncalibration_size = 10\ninputs = 0\noutput = false\n\
         [[models]]\nservice = \"rows\"\nmethod = \"gbbp\"\nparams = [{{ name = \"n\", min = 10, max = 4000, stride = 50 }}]\nfuzzy_max = true\n",
        speed.join(", ")
    )
}

/// The oracle's cut: its makespan with the true speed functions, and per part the server
/// (index in class order, as `server_name` numbers them) and its units.
struct OracleCut {
    makespan_s: f64,
    parts: Vec<(usize, u64)>,
}

/// The server `j` of the grid: class by class, `PER_CLASS` each.
fn server_name(j: usize) -> String {
    format!("{}{}", CLASSES[j / PER_CLASS].0, j % PER_CLASS)
}

/// The best makespan over host counts and hosts with the true speed functions: for every k,
/// the k servers that compute a (N/k)-unit part fastest, split equal-finish.
fn oracle(n: u64, overhead_s: f64) -> OracleCut {
    let mut servers: Vec<(SpeedFunction, f64)> = Vec::new();
    for c in &CLASSES {
        for i in 0..PER_CLASS {
            let avail = if i == PER_CLASS - 1 { LOADED } else { 1.0 };
            servers.push((
                SpeedFunction::new(speed_table(c)).expect("a valid table"),
                avail,
            ));
        }
    }
    let time = |j: usize, x: u64| -> f64 {
        if x == 0 {
            return 0.0;
        }
        let (s, a) = &servers[j];
        overhead_s + x as f64 * UNIT_OPS / s.speed(x as f64) / a
    };
    let mut best = OracleCut {
        makespan_s: f64::INFINITY,
        parts: Vec::new(),
    };
    for k in 1..=servers.len() {
        let probe = (n / k as u64).max(1);
        let mut order: Vec<usize> = (0..servers.len()).collect();
        order.sort_by(|&a, &b| time(a, probe).total_cmp(&time(b, probe)));
        let fns: Vec<Box<dyn Fn(u64) -> f64>> = order[..k]
            .iter()
            .map(|&j| -> Box<dyn Fn(u64) -> f64> { Box::new(move |x| time(j, x)) })
            .collect();
        let refs: Vec<&dyn Fn(u64) -> f64> = fns.iter().map(|f| f.as_ref()).collect();
        if let Ok(p) = fpm_split(n, &refs)
            && p.makespan_s < best.makespan_s
        {
            best = OracleCut {
                makespan_s: p.makespan_s,
                parts: order[..k]
                    .iter()
                    .zip(&p.units)
                    .filter(|(_, u)| **u > 0)
                    .map(|(&j, &u)| (j, u))
                    .collect(),
            };
        }
    }
    best
}

/// The oracle's cut as a plan the client runs as it runs the agent's.
fn oracle_plan(client: &Client, cut: &OracleCut) -> anyhow::Result<DivideReply> {
    let status = client.status()?;
    let mut first = 0;
    let mut parts = Vec::with_capacity(cut.parts.len());
    for &(j, units) in &cut.parts {
        let name = server_name(j);
        let addr = status
            .servers
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.addr.clone())
            .ok_or_else(|| anyhow::anyhow!("the agent does not know server {name}"))?;
        parts.push(DividePart {
            server: name,
            addr,
            first,
            units,
            predicted_s: cut.makespan_s,
            sd_s: 0.0,
            comm_s: 0.0,
        });
        first += units;
    }
    Ok(DivideReply {
        parts,
        makespan_s: cut.makespan_s,
        makespan_sd_s: 0.0,
        policy: "oracle".into(),
        ordering: "oracle".into(),
        slack: None,
    })
}

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct DivideBench {
    /// Smaller: three sizes (for a quick look).
    pub quick: bool,
}

/// Runs everything; one JSON object per (N, policy), the slab job, and a summary.
pub fn run(opts: &DivideBench, emit: &mut dyn FnMut(Json)) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut grid = LocalGrid::start_gridwise(&exe, &[])?;
    let mut loaded_names = Vec::new();
    for (ci, c) in CLASSES.iter().enumerate() {
        for i in 0..PER_CLASS {
            let name = server_name(ci * PER_CLASS + i);
            let loaded = i == PER_CLASS - 1;
            if loaded {
                loaded_names.push(name.clone());
            }
            grid.add_server(&name, &server_toml(c, loaded))?;
        }
    }
    let client = Client::connect(grid.client_config())?;
    let total = CLASSES.len() * PER_CLASS;
    wait_for_servers(&client, total, Duration::from_secs(60))?;
    eprintln!("bench divide: {total} servers learn their models …");
    wait_for_models(&client, total, Duration::from_secs(600))?;
    let h = client.function_handle_default("rows")?;
    let inputs = |_: u64, units: u64| vec![Value::Int(units as i64)];
    // A call's own cost on an emulated server (one call of one unit, less its compute).
    let overhead_s = {
        let r = client.call(&h, vec![Value::Int(1)])?;
        (r.round_trip_s - 1.0 / 4000.0).max(0.0)
    };
    let sizes: Vec<u64> = if opts.quick {
        SIZES[..3].to_vec()
    } else {
        SIZES.to_vec()
    };
    // The client's first call to a server opens its connection (about 3 ms for 16 servers on
    // this kind of host); one job first, not recorded, so the sweep measures the splits.
    client.divide(
        &h,
        sizes[0],
        &DivideSpec {
            unit_param: "n".into(),
            ..DivideSpec::default()
        },
        &inputs,
    )?;
    let mut summary: Vec<(u64, String, DivideRun, f64, usize)> = Vec::new();
    // Per size, the oracle's cut run as the client runs any: at 2,000 units a job takes 55 ms
    // over 16 servers, and the few ms that 16 calls at once lose on two shared cores are lost
    // by any cut; the goal compares the default with this run.
    let mut oracle_runs: Vec<(u64, f64)> = Vec::new();
    for &n in &sizes {
        let cut = oracle(n, overhead_s);
        let (oracle_s, oracle_k) = (cut.makespan_s, cut.parts.len());
        for (policy, selection, default) in POLICIES {
            let spec = DivideSpec {
                unit_param: "n".into(),
                policy: Some(policy.into()),
                all: selection == "all",
                ..DivideSpec::default()
            };
            let r = client.divide(&h, n, &spec, &inputs)?;
            eprintln!(
                "bench divide: N = {n}, {policy}: {:.3} s on {} servers",
                r.makespan_s,
                r.parts.len()
            );
            for p in &r.parts {
                if (p.actual_s - p.predicted_s).abs() > 0.1 * p.predicted_s.max(1e-3) {
                    eprintln!(
                        "bench divide:   its part on {} ({} units) took {:.4} s, predicted {:.4} s",
                        p.server, p.units, p.actual_s, p.predicted_s
                    );
                    report_points_near(&client, &p.server, p.units);
                }
            }
            let on_loaded = r.parts.iter().any(|p| loaded_names.contains(&p.server));
            emit(json!({
                "bench": "divide",
                "n": n,
                "policy": policy,
                "selection": selection,
                "default": default,
                "makespan_s": round(r.makespan_s),
                "predicted_s": round(r.plan.makespan_s),
                "prediction_error": round((r.plan.makespan_s - r.makespan_s).abs() / r.makespan_s),
                "servers_used": r.parts.len(),
                "uses_loaded_servers": on_loaded,
                "oracle_s": round(oracle_s),
                "oracle_servers": oracle_k,
                "vs_oracle": round(r.makespan_s / oracle_s),
            }));
            summary.push((n, policy.to_string(), r, oracle_s, oracle_k));
        }
        // After the policies, so no plan learned from the oracle's parts.
        let by_oracle = client.run_divide(&h, oracle_plan(&client, &cut)?, &inputs)?;
        eprintln!(
            "bench divide: N = {n}, the oracle's cut: {:.3} s on {} servers (computed {:.3} s)",
            by_oracle.makespan_s,
            by_oracle.parts.len(),
            oracle_s
        );
        emit(json!({
            "bench": "divide_oracle_run",
            "n": n,
            "makespan_s": round(by_oracle.makespan_s),
            "oracle_s": round(oracle_s),
            "servers_used": oracle_k,
        }));
        oracle_runs.push((n, by_oracle.makespan_s));
    }
    // A slab job: each part exchanges two halo rows of 8 kB with its neighbours.
    let n = *sizes.last().unwrap_or(&SIZES[0]);
    let spec = DivideSpec {
        unit_param: "n".into(),
        comm: Some(NeighbourComm {
            bytes: 16_384,
            messages: 2,
        }),
        ..DivideSpec::default()
    };
    let r = client.divide(&h, n, &spec, &inputs)?;
    emit(json!({
        "bench": "divide_slab",
        "n": n,
        "comm_bytes": 16_384,
        "makespan_s": round(r.makespan_s),
        "predicted_s": round(r.plan.makespan_s),
        "servers_used": r.parts.len(),
        "ordering": r.plan.ordering,
    }));

    let by = |n: u64, p: &str| summary.iter().find(|s| s.0 == n && s.1 == p);
    let mut within5 = 0;
    let mut within5_of_run = 0;
    let mut vs_oracle_run = Vec::new();
    let mut same_k = 0;
    let mut vs_even = Vec::new();
    let mut vs_cs = Vec::new();
    let mut errors = Vec::new();
    let mut dedicated_errors = Vec::new();
    for &n in &sizes {
        let (Some(d), Some(e), Some(c)) = (by(n, "fpm"), by(n, "even"), by(n, "constant-speed"))
        else {
            continue;
        };
        let oracle_run = oracle_runs
            .iter()
            .find(|o| o.0 == n)
            .map_or(f64::NAN, |o| o.1);
        within5 += usize::from(d.2.makespan_s <= 1.05 * d.3);
        within5_of_run += usize::from(d.2.makespan_s <= 1.05 * oracle_run);
        vs_oracle_run.push(d.2.makespan_s / oracle_run);
        same_k += usize::from(d.2.parts.len() == d.4);
        vs_even.push(e.2.makespan_s / d.2.makespan_s);
        if constant_speed_pages(n) {
            vs_cs.push(c.2.makespan_s / d.2.makespan_s);
        }
        let err = (d.2.plan.makespan_s - d.2.makespan_s).abs() / d.2.makespan_s;
        errors.push(err);
        if !d.2.parts.iter().any(|p| loaded_names.contains(&p.server)) {
            dedicated_errors.push(err);
        }
    }
    let mean = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    emit(json!({
        "bench": "divide_summary",
        "sizes": sizes.len(),
        "default_within_5pct_of_oracle": within5,
        "default_within_5pct_of_oracle_run": within5_of_run,
        "default_vs_oracle_run_max": round(vs_oracle_run.iter().copied().fold(0.0, f64::max)),
        "default_host_count_as_oracle": same_k,
        "speedup_vs_even_all_mean": round(mean(&vs_even)),
        "speedup_vs_even_all_min": round(min(&vs_even)),
        "speedup_vs_constant_speed_where_it_pages_mean": round(mean(&vs_cs)),
        "speedup_vs_constant_speed_where_it_pages_min": round(min(&vs_cs)),
        "sizes_where_constant_speed_pages": vs_cs.len(),
        "prediction_error_mean": round(mean(&errors)),
        "prediction_error_without_loaded_servers_mean": round(mean(&dedicated_errors)),
        "runs_without_loaded_servers": dedicated_errors.len(),
    }));
    drop(client);
    drop(grid);
    Ok(())
}

/// The model points of `server` around `units`, for a part that ran far from its prediction:
/// what the agent believed there is what the plan was made from.
fn report_points_near(client: &Client, server: &str, units: u64) {
    let Ok(m) = client.model(server, "rows") else {
        return;
    };
    let near: Vec<String> = m
        .points
        .iter()
        .filter(|(x, _)| x.first().is_some_and(|&x| x.abs_diff(units as i64) <= 150))
        .map(|(x, s)| format!("{}: {:.3e} op/s ({} runs)", x[0], s.mean, s.count))
        .collect();
    eprintln!(
        "bench divide:     model points near it: {}",
        near.join(", ")
    );
}

/// Whether a split by speed alone gives a pager more than its knee at `n` units.
fn constant_speed_pages(n: u64) -> bool {
    let total: f64 = CLASSES.iter().map(|c| c.1).sum::<f64>() * PER_CLASS as f64;
    CLASSES
        .iter()
        .any(|c| c.2 < 1e8 && n as f64 * c.1 / total > c.2)
}

fn round(x: f64) -> Json {
    if x.is_finite() {
        json!((x * 10_000.0).round() / 10_000.0)
    } else {
        Json::Null
    }
}
