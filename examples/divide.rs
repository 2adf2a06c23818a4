//! Divides one job over the grid: a million-element vector sent to `echo` in parts, the agent
//! choosing the servers and each one's share.
//!
//! `cargo run -p gridwise-examples --example divide -- 127.0.0.1:7000`

use gridwise_client::{Client, ClientConfig, DivideSpec, Value};

fn main() -> anyhow::Result<()> {
    let agent = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7000".into());
    let client = Client::connect(ClientConfig::with_agent(agent))?;
    let echo = client.function_handle_default("echo")?; // echo(n, x: vector<f64>[n]) -> y
    let x: Vec<f64> = (0..1_000_000).map(|i| i as f64).collect();
    let spec = DivideSpec {
        unit_param: "n".into(),
        ..DivideSpec::default()
    };
    // The inputs of the part covering units [first, first + n).
    let part = |first: u64, n: u64| {
        let s = &x[first as usize..(first + n) as usize];
        vec![Value::Int(n as i64), Value::vector_f64(s)]
    };
    let run = client.divide(&echo, x.len() as u64, &spec, &part)?;
    for p in &run.parts {
        println!(
            "{} took units {}..{} in {:.3} s (predicted {:.3})",
            p.server,
            p.first,
            p.first + p.units,
            p.actual_s,
            p.predicted_s
        );
    }
    // The parts come back in the order of the units.
    let back: Vec<f64> = run
        .parts
        .iter()
        .flat_map(|p| {
            p.result.outputs[0]
                .as_array()
                .and_then(|a| a.to_f64())
                .unwrap_or_default()
        })
        .collect();
    anyhow::ensure!(back == x, "the parts did not come back whole");
    println!(
        "makespan {:.3} s (predicted {:.3})",
        run.makespan_s, run.plan.makespan_s
    );
    Ok(())
}
