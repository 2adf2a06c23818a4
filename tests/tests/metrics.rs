//! The Prometheus endpoints of a real agent and server: what a scrape shows after calls ran.

use gridwise_e2e::{FAST_HEARTBEATS, Grid, eventually, http_get};
use gridwise_proto::Value;
use std::time::Duration;

fn scrape(addr: &str) -> String {
    let text = http_get(addr, "/metrics").expect("the metrics endpoint answers");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("openmetrics-text"), "{text}");
    text
}

#[test]
fn agent_and_server_metrics_count_the_calls_they_saw() {
    let mut args = FAST_HEARTBEATS.to_vec();
    args.extend(["--metrics", "127.0.0.1:0"]);
    let mut g = Grid::agent(&args);
    g.server(
        "s1",
        "slots = 2\ncalibrate = false\nmetrics = \"127.0.0.1:0\"\n",
    );
    g.wait_up(1);
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    for i in 0..5 {
        c.call(&add, vec![Value::Int(i)]).unwrap();
    }
    let fail = c.function_handle_default("fail").unwrap();
    assert!(c.call(&fail, vec![Value::Str("boom".into())]).is_err());

    let agent = g
        .logged_addr("agent.log", "metrics at /metrics")
        .expect("the agent logs it");
    let server = g
        .logged_addr("s1.log", "metrics at /metrics")
        .expect("the server logs it");

    // Reports reach the agent in batches, and the failed call's may come in a later one than
    // the others': wait for all of them.
    let mut text = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            text = scrape(&agent);
            text.contains(
                "gridwise_agent_calls_total{service=\"add\",server=\"s1\",outcome=\"ok\"} 5",
            ) && text.contains(
                "gridwise_agent_calls_total{service=\"fail\",server=\"s1\",outcome=\"failed\"} 1",
            )
        }),
        "{text}"
    );
    for want in [
        "gridwise_agent_calls_ranked_total{service=\"add\"} 5",
        "gridwise_agent_rank_seconds_count",
        "gridwise_agent_prediction_error_ratio_count{service=\"add\"} 5",
        "gridwise_agent_servers{state=\"up\"} 1",
        "gridwise_agent_queue_length{server=\"s1\"} 0",
    ] {
        assert!(
            text.contains(want),
            "missing {want} in\n{text}\n{}",
            g.logs()
        );
    }
    let text = scrape(&server);
    for want in [
        "gridwise_server_calls_total{service=\"add\",outcome=\"ok\"} 5",
        "gridwise_server_calls_total{service=\"fail\",outcome=\"failed\"}",
        "gridwise_server_call_seconds_count{service=\"add\"} 5",
        "gridwise_server_calls_running 0",
        "gridwise_server_input_bytes_total",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    let missing = http_get(&agent, "/nothing").unwrap();
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
}
