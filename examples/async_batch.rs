//! The async API under tokio: many calls in flight at once, each placed by the agent.
//!
//!   cargo run -p gridwise-examples --example async_batch -- 127.0.0.1:7000

use gridwise_client::{ClientConfig, GridClient};
use gridwise_proto::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let agent = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7000".into());
    let client = GridClient::connect(ClientConfig::with_agent(agent)).await?;
    let add = client.function_handle_default("add").await?;

    let calls = (0..1000).map(|i| client.call(&add, vec![Value::Int(i)]));
    let results = futures::future::join_all(calls).await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    println!("{ok} of {} calls succeeded", results.len());
    for (server, n) in
        results
            .iter()
            .flatten()
            .fold(std::collections::BTreeMap::new(), |mut m, r| {
                *m.entry(r.server.clone()).or_insert(0) += 1;
                m
            })
    {
        println!("  {server}: {n} calls");
    }
    Ok(())
}
