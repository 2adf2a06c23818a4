//! Remote data: outputs kept on the server that made them, used by a call on another server
//! (which pulls them straight from the holder), fetched by the client, and freed.

use gridwise_e2e::Grid;
use gridwise_proto::{ErrorCode, Value};

fn m(rows: u64, cols: u64, v: &[f64]) -> Value {
    Value::matrix_f64(rows, cols, v)
}

/// dgemm's inputs: m, n, k, A, B.
fn dgemm_args(m: i64, n: i64, k: i64, a: Value, b: Value) -> Vec<Value> {
    vec![Value::Int(m), Value::Int(n), Value::Int(k), a, b]
}

#[test]
fn kept_outputs_move_server_to_server_and_can_be_fetched_and_freed() {
    let g = Grid::two_servers();
    let c = g.client();
    let on_s1 = c.function_handle_init("dgemm", "s1").unwrap();
    let on_s2 = c.function_handle_init("dgemm", "s2").unwrap();
    let (a, b) = (m(2, 2, &[1., 2., 3., 4.]), m(2, 2, &[0., 1., 1., 0.]));

    // C = A·B stays on s1.
    let r = c
        .call_keep(&on_s1, dgemm_args(2, 2, 2, a, b), &[0])
        .unwrap();
    let Value::Ref(c_ref) = r.outputs[0].clone() else {
        panic!(
            "a kept output comes back as a reference, not {:?}",
            r.outputs[0]
        )
    };
    assert_eq!(c_ref.holder, g.servers[0].addr);
    assert_eq!(c_ref.bytes, 32);

    // D = C·A on s2: s2 pulls C from s1.
    let a2 = m(2, 2, &[1., 2., 3., 4.]);
    let d = c
        .call(&on_s2, dgemm_args(2, 2, 2, Value::Ref(c_ref.clone()), a2))
        .unwrap();
    assert_eq!(d.server, "s2");
    // A·B = [[2,1],[4,3]]; (A·B)·A = [[5,8],[13,20]].
    assert_eq!(
        d.outputs[0].as_array().unwrap().to_f64().unwrap(),
        vec![5., 8., 13., 20.]
    );

    assert_eq!(c.fetch(&c_ref).unwrap(), m(2, 2, &[2., 1., 4., 3.]));
    assert_eq!(c.free(std::slice::from_ref(&c_ref)).unwrap(), 1);
    let e = c.fetch(&c_ref).unwrap_err();
    assert!(e.message.contains("freed"), "{e}");
    let e = c
        .call(
            &on_s2,
            dgemm_args(2, 2, 2, Value::Ref(c_ref), m(2, 2, &[0.; 4])),
        )
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::SessionFailed);
    assert!(e.message.contains("freed"), "{e}");

    // Keeping an output the service does not have is refused before anything is sent.
    let e = c
        .call_keep(
            &on_s1,
            dgemm_args(1, 1, 1, m(1, 1, &[1.]), m(1, 1, &[1.])),
            &[3],
        )
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::OtherErrorCode);
}

#[test]
fn servers_measure_links_and_calls_follow_their_data() {
    let mut g = Grid::agent(&gridwise_e2e::FAST_HEARTBEATS);
    for name in ["s1", "s2"] {
        g.server(name, "link_probe_s = 0.3\n");
    }
    g.wait_up(2);
    let c = g.client();
    assert!(
        gridwise_e2e::eventually(std::time::Duration::from_secs(20), || c
            .link_matrix()
            .map(|l| l.len() >= 2)
            .unwrap_or(false)),
        "no links measured:\n{}",
        g.logs()
    );
    // Each server also measures its link to the agent.
    let agent = g.agent.addr.clone();
    assert!(
        gridwise_e2e::eventually(std::time::Duration::from_secs(20), || c
            .link_matrix()
            .map(|l| l.iter().filter(|x| x.sample.to == agent).count() == 2)
            .unwrap_or(false)),
        "no links to the agent {agent}: {:?}",
        c.link_matrix()
    );
    for l in c.link_matrix().unwrap() {
        assert!(
            l.sample.latency_s > 0.0 && l.sample.bandwidth_bytes_per_s > 1e6,
            "{l:?}"
        );
    }

    // An 8 MB vector (1×K) kept on s2; a dot product with it (m = n = 1, k = K) is a few
    // microseconds of compute but an 8 MB pull anywhere else: it goes to s2, which holds it.
    let k = 1_000_000u64;
    let on_s2 = c.function_handle_init("dgemm", "s2").unwrap();
    let ones = vec![1.0; k as usize];
    let kept = c
        .call_keep(
            &on_s2,
            dgemm_args(1, k as i64, 1, m(1, 1, &[2.0]), m(1, k, &ones)),
            &[0],
        )
        .unwrap();
    let anywhere = c.function_handle_default("dgemm").unwrap();
    let inputs = dgemm_args(1, 1, k as i64, kept.outputs[0].clone(), m(k, 1, &ones));
    // The ranking charges the pull to every server but the holder…
    let profile = anywhere.desc.profile(&inputs).unwrap();
    assert_eq!(profile.remote_in.len(), 1);
    let cands = c
        .explain(profile, gridwise_proto::RankOptions::default())
        .unwrap();
    let (s1, s2) = (
        cands.iter().find(|x| x.name == "s1").unwrap(),
        cands.iter().find(|x| x.name == "s2").unwrap(),
    );
    // Whichever direction was measured, the pull takes at least 8 MB at the faster one.
    let fastest = c
        .link_matrix()
        .unwrap()
        .iter()
        .map(|l| l.sample.bandwidth_bytes_per_s)
        .fold(0.0, f64::max);
    let pull = 8e6 / fastest;
    assert!(
        s1.etc.transfer_in_s - s2.etc.transfer_in_s > 0.5 * pull,
        "s1 {} s2 {} pull {pull}",
        s1.etc.transfer_in_s,
        s2.etc.transfer_in_s
    );
    // …so the call, with nothing learned yet at this size, goes to the holder.
    let r = c.call(&anywhere, inputs).unwrap();
    assert_eq!(r.server, "s2", "the data's holder should win");
    assert_eq!(
        r.outputs[0].as_array().unwrap().to_f64().unwrap(),
        vec![2.0 * k as f64]
    );
}

/// A kept value its client never frees (the client died mid-graph) is freed by its server once
/// nobody has read or renewed it for `data_idle_ttl_s`; renewing it keeps it alive meanwhile.
#[test]
fn kept_values_nobody_uses_are_freed_after_the_idle_limit() {
    let mut g = Grid::agent(&gridwise_e2e::FAST_HEARTBEATS);
    g.server("s1", "data_idle_ttl_s = 1.0\n");
    g.wait_up(1);
    let c = g.client();
    let on_s1 = c.function_handle_init("dgemm", "s1").unwrap();
    let r = c
        .call_keep(
            &on_s1,
            dgemm_args(1, 1, 1, m(1, 1, &[2.]), m(1, 1, &[3.])),
            &[0],
        )
        .unwrap();
    let Value::Ref(kept) = r.outputs[0].clone() else {
        panic!("expected a reference, got {:?}", r.outputs[0])
    };
    let addr = g.servers[0].addr.clone();
    assert_eq!(kept.idle_ttl_ms, 1000);
    // Renew it every 0.3 s for 2 s, past the limit: it stays.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < until {
        assert_eq!(c.renew(std::slice::from_ref(&kept)).unwrap(), 1);
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    assert_eq!(c.fetch(&kept).unwrap(), m(1, 1, &[6.]), "{}", g.logs());
    // Left alone, it goes.
    assert!(
        gridwise_e2e::eventually(std::time::Duration::from_secs(15), || c
            .ping(&addr)
            .map(|p| p.held_values == 0 && p.held_bytes == 0)
            .unwrap_or(false)),
        "{}",
        g.logs()
    );
    let e = c.fetch(&kept).unwrap_err();
    assert!(e.message.contains("data_idle_ttl_s"), "{e}");
}
