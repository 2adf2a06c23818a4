//! Hostile or confused peers: random bytes, oversized frames, wrong tokens. The daemons must
//! close such connections and keep serving everyone else.

use gridwise_e2e::{FAST_HEARTBEATS, Grid};
use gridwise_proto::{ErrorCode, Value};
use gridwise_runtime::wire;
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn hello_frame() -> Vec<u8> {
    // A well-formed client hello without a token, so the frame that follows is read by the RPC
    // layer itself.
    let dial = wire::DialConfig::new(wire::Role::Client, None);
    wire::hello_frame(&dial, "fuzzer")
}

fn abuse(addr: &str, rng: &mut impl Rng) {
    let send = |bytes: &[u8], after_hello: bool| {
        let Ok(mut s) = TcpStream::connect(addr) else {
            return;
        };
        s.set_read_timeout(Some(Duration::from_millis(500))).ok();
        if after_hello {
            let _ = s.write_all(&hello_frame());
            let mut reply = [0u8; 256];
            let _ = s.read(&mut reply);
        }
        let _ = s.write_all(bytes);
        let mut sink = [0u8; 64];
        let _ = s.read(&mut sink);
    };
    for _ in 0..20 {
        let n = rng.random_range(1..4096);
        let junk: Vec<u8> = (0..n).map(|_| rng.random()).collect();
        send(&junk, false);
        send(&junk, true);
    }
    // A frame header announcing 2 GiB, before and after the hello.
    send(&[0x7f, 0xff, 0xff, 0xff, 1, 2, 3], false);
    send(&[0x7f, 0xff, 0xff, 0xff, 1, 2, 3], true);
    // An actual oversized frame after the hello (beyond the agent's 16 MiB limit).
    let mut big = (20u32 * 1024 * 1024).to_be_bytes().to_vec();
    big.extend(std::iter::repeat_n(0u8, 1024 * 1024));
    send(&big, true);
    // A stalled peer that never says anything.
    let idle = TcpStream::connect(addr);
    drop(idle);
}

#[test]
fn random_bytes_and_oversized_frames_leave_daemons_serving() {
    let mut g = Grid::two_servers();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let targets = vec![
        g.agent.addr.clone(),
        g.servers[0].addr.clone(),
        g.servers[1].addr.clone(),
    ];
    for t in &targets {
        abuse(t, &mut rng);
    }
    assert!(g.agent.is_running(), "agent died:\n{}", g.logs());
    assert!(
        g.servers.iter_mut().all(|s| s.is_running()),
        "a server died:\n{}",
        g.logs()
    );
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    for name in ["s1", "s2"] {
        let h = c.function_handle_init("add", name).unwrap();
        assert_eq!(
            c.call(&h, vec![Value::Int(1)]).unwrap().outputs,
            vec![Value::Int(2)]
        );
    }
    assert_eq!(
        c.call(&add, vec![Value::Int(9)]).unwrap().outputs,
        vec![Value::Int(10)]
    );
    let logs = g.logs();
    assert!(
        logs.contains("closing connection"),
        "no connection was logged as closed:\n{logs}"
    );
}

#[test]
fn a_grid_with_a_token_refuses_strangers() {
    let mut extra: Vec<&str> = FAST_HEARTBEATS.to_vec();
    extra.extend(["--client-token", "s3cret", "--server-token", "s3rver"]);
    let mut g = Grid::agent(&extra);
    g.server("guarded", "calibrate = false\n");
    g.wait_up(1);
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    assert_eq!(
        c.call(&add, vec![Value::Int(1)]).unwrap().outputs,
        vec![Value::Int(2)]
    );

    let stranger = gridwise_client::Client::connect(gridwise_client::ClientConfig::with_agent(
        g.agent.addr.clone(),
    ));
    let Err(e) = stranger else {
        panic!("a client without the token must be refused")
    };
    assert_eq!(e.code, ErrorCode::RpcRefused);
    assert!(e.message.contains("token"), "{e}");
}

#[test]
fn a_request_whose_decoding_panics_closes_only_its_connection() {
    // tarpc turns a request's relative deadline into an instant with a plain `+`: a deadline
    // of u64::MAX seconds panics while decoding. The daemons must treat it as a bad message.
    let mut g = Grid::two_servers();
    let mut body = vec![0u8]; // ClientMessage::Request
    body.extend_from_slice(
        &wire::messages::encode(&(Duration::new(u64::MAX, 0), 0u128, 0u64, 0u8)).unwrap(),
    );
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let targets = vec![g.agent.addr.clone(), g.servers[0].addr.clone()];
    for t in &targets {
        let mut s = TcpStream::connect(t).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&hello_frame()).unwrap();
        let mut reply = [0u8; 256];
        let _ = s.read(&mut reply);
        s.write_all(&frame).unwrap();
        // The connection is closed…
        let mut rest = [0u8; 64];
        assert!(matches!(s.read(&mut rest), Ok(0) | Err(_)));
    }
    // …and the daemons serve on.
    assert!(g.agent.is_running() && g.servers[0].is_running());
    let c = g.client();
    let h = c.function_handle_init("add", "s1").unwrap();
    assert_eq!(
        c.call(&h, vec![Value::Int(1)]).unwrap().outputs,
        vec![Value::Int(2)]
    );
}
