//! What `best-of` tried on a scenario and how each start replayed, beside the bounds:
//! `cargo run --release -p gridwise-sim --example bestof -- examples/sim/cholesky.json`.

use gridwise_sched::graph::policy::best_of;
use gridwise_sim::{Scenario, Simulation};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: bestof SCENARIO")?;
    let scenario = Scenario::load(&path)?;
    let platform = scenario.platform()?;
    let workload = scenario.workload()?;
    let sim = Simulation::new(&platform, &workload)?;
    let lower = sim.lower();
    let bound = lower.seconds;
    let t = Instant::now();
    let b = best_of::solve(&workload.graph, sim.etc(), platform.comm_model())?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "{}: {} tasks, bound {bound:.4} s = {} (critical path {:.4} s, LP {:?}, window LP {:?})",
        scenario.name.as_deref().unwrap_or(&path),
        workload.len(),
        lower.kind,
        sim.bounds().critical_path_s,
        lower.lp_s,
        lower.window_s
    );
    for (name, s) in &b.starts {
        println!("  start {name:>10}: {s:.4} s = {:.3} x bound", s / bound);
    }
    println!(
        "  best-of ({} start, {}/{} search replays, {ms:.1} ms): {:.4} s = {:.3} x bound, {:.3} x heft",
        b.start,
        b.search_replays,
        b.search_budget,
        b.makespan_s,
        b.makespan_s / bound,
        b.makespan_s / b.heft_makespan_s
    );
    Ok(())
}
