//! `gridwise call SERVICE ARGS…`: one remote call from the command line.

use gridwise_client::{CallResult, Client};
use gridwise_graphfile::{parse_inputs, render};
use gridwise_predict::EtcSpread;
use serde_json::json;
use std::io::IsTerminal;

/// Calls `service` with arguments given as words; prints outputs (or one JSON object).
pub fn run(
    client: &Client,
    service: &str,
    words: &[String],
    server: Option<&str>,
    as_json: bool,
) -> anyhow::Result<()> {
    let handle = match server {
        Some(s) => client.function_handle_init(service, s)?,
        None => client.function_handle_default(service)?,
    };
    let inputs = parse_inputs(&handle.desc, words)?;
    let r = client.call(&handle, inputs)?;
    if as_json {
        println!("{}", result_json(&r));
    } else {
        for v in &r.outputs {
            println!("{}", render(v));
        }
        // How the prediction held, for a person at a terminal; scripts read stdout or --json.
        if std::io::stderr().is_terminal()
            && let Some(e) = &r.predicted
        {
            let (lo, hi) = e.interval90_s();
            eprintln!(
                "{}: {:.4} s; predicted {:.4} s, 90% interval {lo:.4} to {hi:.4} s ({})",
                r.server,
                r.round_trip_s,
                e.total_s(),
                e.compute_source
            );
        }
    }
    Ok(())
}

/// One call's outputs, server and timing as JSON.
pub fn result_json(r: &CallResult) -> serde_json::Value {
    json!({
        "outputs": r.outputs.iter().map(|v| v.to_json()).collect::<Vec<_>>(),
        "server": r.server,
        "attempts": r.attempts,
        "timing": {
            "rank_s": r.rank_s,
            "round_trip_s": r.round_trip_s,
            "queue_wait_s": r.timing.queue_wait_s,
            "input_transfer_s": r.timing.input_transfer_s,
            "kernel_s": r.timing.kernel_s,
            "server_s": r.timing.server_s,
        },
        "predicted_s": r.predicted.as_ref().map(|e| e.total_s()),
        "predicted_sd_s": r.predicted.as_ref().map(|e| e.total_sd_s()),
        "predicted_interval90_s": r.predicted.as_ref().map(|e| {
            let (lo, hi) = e.interval90_s();
            [lo, hi]
        }),
        "predicted_cpu_available": r.predicted.as_ref().and_then(|e| e.cpu_available),
    })
}
