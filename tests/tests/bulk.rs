//! Large values on bulk connections: arrays far larger than any frame a daemon or the client
//! accepts still move client → server, server → server and server → client, arrive whole, and
//! leave nothing staged behind.

use gridwise_e2e::{FAST_HEARTBEATS, Grid};
use gridwise_proto::Value;
use gridwise_runtime::wire::bulk::BULK_MIN_BYTES;

/// Frames of 2 MiB at most, everywhere: every array below is many times larger.
const FRAME: usize = 2 << 20;
const N: usize = 3 << 20; // 24 MiB of f64

fn grid() -> Grid {
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    let toml = format!(
        "builtins = [\"echo\", \"sink\", \"source\", \"add\"]\ncalibrate = false\nmax_frame_bytes = {FRAME}\n"
    );
    g.server("s1", &toml);
    g.server("s2", &toml);
    g.wait_up(2);
    g
}

fn client(g: &Grid) -> gridwise_client::Client {
    let mut cfg = g.client_config();
    cfg.max_frame_bytes = FRAME;
    gridwise_client::Client::connect(cfg).expect("client connects")
}

fn ramp(n: usize) -> Value {
    Value::vector_f64(&(0..n).map(|i| i as f64 * 0.5 - 7.0).collect::<Vec<_>>())
}

/// Values held on a server (kept or staged), from its ping.
fn held(c: &gridwise_client::Client, addr: &str) -> u64 {
    c.ping(addr).expect("ping").held_values
}

#[test]
fn arrays_larger_than_any_frame_move_every_way_and_nothing_stays_staged() {
    let g = grid();
    let c = client(&g);
    let (s1, s2) = (g.servers[0].addr.clone(), g.servers[1].addr.clone());
    assert!((N * 8) as u64 > 10 * BULK_MIN_BYTES && N * 8 > 10 * FRAME);
    let x = ramp(N);

    // Client → server → client: the same 24 MiB back, element for element.
    let echo = c.function_handle_init("echo", "s1").unwrap();
    let r = c
        .call(&echo, vec![Value::Int(N as i64), x.clone()])
        .unwrap();
    assert_eq!(r.outputs, vec![x.clone()]);
    assert!(
        r.timing.input_transfer_s > 0.0,
        "the staging counts as the input transfer"
    );

    // Client → server only.
    let sink = c.function_handle_init("sink", "s2").unwrap();
    let r = c
        .call(&sink, vec![Value::Int(N as i64), x.clone()])
        .unwrap();
    assert_eq!(r.outputs, vec![Value::Int((N * 8) as i64)]);

    // Server → server: kept on s1, pulled by s2, and fetched by the client.
    let source = c.function_handle_init("source", "s1").unwrap();
    let kept = c
        .call_keep(&source, vec![Value::Int(N as i64)], &[0])
        .unwrap();
    let Value::Ref(r1) = kept.outputs[0].clone() else {
        panic!("a kept output is a reference: {:?}", kept.outputs[0]);
    };
    assert_eq!(r1.holder, s1);
    let pulled = c
        .call(&sink, vec![Value::Int(N as i64), Value::Ref(r1.clone())])
        .unwrap();
    assert_eq!(pulled.outputs, vec![Value::Int((N * 8) as i64)]);
    let fetched = c.fetch(&r1).unwrap();
    let ramp_n = Value::vector_f64(&(0..N).map(|i| i as f64).collect::<Vec<_>>());
    assert_eq!(fetched, ramp_n);
    assert_eq!(c.free(std::slice::from_ref(&r1)).unwrap(), 1);

    // Server → client: the output comes back whole, not as a reference.
    let r = c.call(&source, vec![Value::Int(N as i64)]).unwrap();
    assert_eq!(r.outputs, vec![ramp_n]);

    // Everything staged was taken by its call or collected by its client.
    assert_eq!(held(&c, &s1), 0, "s1 still holds values");
    assert_eq!(held(&c, &s2), 0, "s2 still holds values");

    // Small calls still travel inside the RPC, on the same connections.
    let add = c.function_handle_default("add").unwrap();
    assert_eq!(
        c.call(&add, vec![Value::Int(1)]).unwrap().outputs,
        vec![Value::Int(2)]
    );
}

#[test]
fn another_client_cannot_read_a_value_kept_for_someone_else() {
    let g = grid();
    let (alice, mallory) = (client(&g), client(&g));
    let source = alice.function_handle_init("source", "s1").unwrap();
    let kept = alice
        .call_keep(&source, vec![Value::Int(N as i64)], &[0])
        .unwrap();
    let Value::Ref(r) = kept.outputs[0].clone() else {
        panic!("a kept output is a reference");
    };
    let e = mallory.fetch(&r).unwrap_err();
    assert!(e.message.contains("is not on"), "{e}");
    // Its owner still can.
    assert_eq!(
        alice.fetch(&r).unwrap().as_array().unwrap().data.len(),
        N * 8
    );
}

#[test]
fn servers_and_the_agent_read_and_drop_probes_and_keep_no_values_from_them() {
    use gridwise_e2e::raw;
    use gridwise_runtime::wire::Role;
    use gridwise_runtime::wire::bulk::{BulkError, BulkPool, PROBE_MAX_BYTES};
    let g = grid();
    let c = client(&g);
    let (s1, agent) = (g.servers[0].addr.clone(), g.agent.addr.clone());
    let token = g.client_token.clone();
    let rt = raw::runtime();
    rt.block_on(async {
        let pool = BulkPool::new(raw::dial(Role::Client, token.as_deref(), "prober"), "test");
        // Larger than any frame either daemon takes: a probe is not a frame.
        for addr in [&s1, &agent] {
            pool.probe(addr, 5 * FRAME as u64)
                .await
                .unwrap_or_else(|e| panic!("probing {addr}: {e}"));
        }
        let e = pool.probe(&s1, PROBE_MAX_BYTES + 1).await.unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
        pool.probe(&s1, 1).await.expect("a probe after a refusal");
        // The agent stages nothing.
        match pool.put(&agent, &ramp(N / 8)).await {
            Err(BulkError::Refused(e)) => assert!(e.message.contains("keeps no values"), "{e}"),
            other => panic!("the agent took a value: {:?}", other.err()),
        }
    });
    assert_eq!(held(&c, &s1), 0, "a probe left something held");
}
