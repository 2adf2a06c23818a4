//! The GridRPC End-User API in its GFD.52 shape: initialize, a function handle, a synchronous
//! call, an asynchronous one, wait, finalize.
//!
//! Start a grid first (see README), then:
//!   cargo run -p gridwise-examples --example hello -- 127.0.0.1:7000

use gridwise_client::{ClientConfig, grpc};
use gridwise_proto::Value;

fn main() -> anyhow::Result<()> {
    let agent = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7000".into());
    grpc::initialize_with(ClientConfig::with_agent(agent))?;

    let add = grpc::function_handle_default("add")?;
    let r = grpc::call(&add, vec![Value::Int(41)])?;
    println!(
        "add(41) = {} (ran on {})",
        r.outputs[0].as_int().unwrap_or_default(),
        r.server
    );

    let dgemm = grpc::function_handle_default("dgemm")?;
    let a = Value::matrix_f64(2, 2, &[1.0, 2.0, 3.0, 4.0]);
    let id = grpc::call_async(
        &dgemm,
        vec![Value::Int(2), Value::Int(2), Value::Int(2), a.clone(), a],
    )?;
    let r = grpc::wait(id)?;
    println!(
        "A·A = {} (ran on {}, kernel {:.6} s)",
        r.outputs[0].to_json(),
        r.server,
        r.timing.kernel_s
    );

    grpc::finalize()?;
    Ok(())
}
