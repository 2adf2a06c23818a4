//! Times every phase of a simulation run, for measuring scale:
//! `cargo run --release -p gridwise-sim --example simrun -- examples/sim/large.json heft mct`
//! (run it under `/usr/bin/time -v` for the peak memory).

use gridwise_sim::{GraphPolicy, Scenario, Simulation};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: simrun SCENARIO [POLICY...]")?;
    let t = Instant::now();
    let scenario = Scenario::load(&path)?;
    let platform = scenario.platform()?;
    let workload = scenario.workload()?;
    eprintln!(
        "scenario: {} tasks, {} edges, {} servers in {:.2} s",
        workload.len(),
        workload.graph.edge_count(),
        platform.servers(),
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let sim = Simulation::new(&platform, &workload)?;
    eprintln!(
        "ETC matrix and bounds in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let mut policies: Vec<GraphPolicy> = args.map(|a| a.parse()).collect::<Result<_, _>>()?;
    if policies.is_empty() {
        policies.push(sim.default_policy());
    }
    for p in policies {
        let t = Instant::now();
        let (mapping, ms) = sim.map(p)?;
        let t_eval = Instant::now();
        let out = sim.evaluate(p, mapping, ms)?;
        eprintln!(
            "{p}: mapping {:.2} s, replay + simulation {:.2} s, total {:.2} s",
            ms / 1e3,
            t_eval.elapsed().as_secs_f64(),
            t.elapsed().as_secs_f64()
        );
        println!("{}", serde_json::to_string(&out.report)?);
    }
    Ok(())
}
