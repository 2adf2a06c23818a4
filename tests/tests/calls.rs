//! Calls through a real agent and two real servers: results, sessions, cancellation, errors.

use gridwise_e2e::{Grid, eventually};
use gridwise_proto::{ErrorCode, Value};
use std::time::Duration;

#[test]
fn sync_and_async_calls_return_correct_results() {
    let g = Grid::two_servers();
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    let r = c.call(&add, vec![Value::Int(41)]).unwrap();
    assert_eq!(r.outputs, vec![Value::Int(42)]);
    assert!(g.names.contains(&r.server), "ran on {}", r.server);

    let ids: Vec<_> = (0..20)
        .map(|i| c.call_async(&add, vec![Value::Int(i)]).unwrap())
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let r = c.wait(*id).unwrap();
        assert_eq!(r.outputs, vec![Value::Int(i as i64 + 1)]);
    }

    // A real dgemm: 2x3 · 3x2.
    let dgemm = c.function_handle_default("dgemm").unwrap();
    let a = Value::matrix_f64(2, 3, &[1., 2., 3., 4., 5., 6.]);
    let b = Value::matrix_f64(3, 2, &[7., 8., 9., 10., 11., 12.]);
    let r = c
        .call(
            &dgemm,
            vec![Value::Int(2), Value::Int(2), Value::Int(3), a, b],
        )
        .unwrap();
    let out = r.outputs[0].as_array().unwrap().to_f64().unwrap();
    assert_eq!(out, vec![58., 64., 139., 154.]);
}

#[test]
fn wait_or_and_wait_any_follow_completion_order() {
    let g = Grid::two_servers();
    let c = g.client();
    let sleep = c.function_handle_default("sleep").unwrap();
    let slow = c.call_async(&sleep, vec![Value::Int(2)]).unwrap();
    let fast = c.call_async(&sleep, vec![Value::Int(0)]).unwrap();
    let mid = c.call_async(&sleep, vec![Value::Int(1)]).unwrap();
    let (first, _) = c.wait_or(&[slow, mid, fast]).unwrap();
    assert_eq!(first, fast);
    let (second, _) = c.wait_any().unwrap();
    assert_eq!(second, mid);
    let (third, r) = c.wait_or(&[slow]).unwrap();
    assert_eq!(third, slow);
    assert!(r.outputs[0].as_double().unwrap() >= 2.0);
    assert_eq!(c.wait(slow).unwrap_err().code, ErrorCode::InvalidSessionId);
}

#[test]
fn cancel_stops_a_running_loop_and_the_session_says_so() {
    let g = Grid::two_servers();
    let c = g.client();
    let lp = c.function_handle_default("loop").unwrap();
    let id = c.call_async(&lp, vec![Value::Int(0)]).unwrap();
    // Let it reach the server and start.
    assert!(eventually(Duration::from_secs(10), || c
        .status()
        .map(|s| s.servers.iter().map(|s| s.load.running).sum::<u32>() >= 1)
        .unwrap_or(false)));
    assert_eq!(c.probe(id).unwrap_err().code, ErrorCode::NotCompleted);
    c.cancel(id).unwrap();
    let err = c.wait(id).unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionFailed);
    assert!(err.message.contains("cancel"), "{err}");
    assert!(
        c.get_error(id)
            .is_ok_and(|e| e.is_some_and(|e| e.message.contains("cancel")))
    );
    // The server let go of the kernel: nothing runs any more, and it still serves.
    assert!(eventually(Duration::from_secs(10), || c
        .status()
        .map(|s| s.servers.iter().map(|s| s.load.running).sum::<u32>() == 0)
        .unwrap_or(false)));
    let add = c.function_handle_default("add").unwrap();
    assert_eq!(
        c.call(&add, vec![Value::Int(1)]).unwrap().outputs,
        vec![Value::Int(2)]
    );
}

#[test]
fn unknown_service_is_function_not_found() {
    let g = Grid::two_servers();
    let c = g.client();
    let e = c.function_handle_default("no-such-service").unwrap_err();
    assert_eq!(e.code, ErrorCode::FunctionNotFound);
    assert!(e.message.contains("no-such-service"), "{e}");
}

#[test]
fn bad_arguments_fail_before_anything_is_sent() {
    let g = Grid::two_servers();
    let c = g.client();
    let ranked_before = c.status().unwrap().ranked;
    let add = c.function_handle_default("add").unwrap();
    let e = c.call(&add, vec![Value::Str("41".into())]).unwrap_err();
    assert!(
        e.message.contains("`x`") && e.message.contains("int"),
        "{e}"
    );
    let dgemm = c.function_handle_default("dgemm").unwrap();
    let a = Value::matrix_f64(2, 2, &[0.0; 4]);
    let e = c
        .call_async(
            &dgemm,
            vec![Value::Int(2), Value::Int(2), Value::Int(3), a.clone(), a],
        )
        .unwrap_err();
    assert!(e.message.contains("means 2x3"), "{e}");
    assert_eq!(
        c.status().unwrap().ranked,
        ranked_before,
        "nothing reached the agent"
    );
}

#[test]
fn application_error_is_session_failed_and_not_retried() {
    let g = Grid::two_servers();
    let c = g.client();
    let fail = c.function_handle_default("fail").unwrap();
    let e = c
        .call(&fail, vec![Value::Str("the matrix is singular".into())])
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::SessionFailed);
    assert!(e.message.contains("the matrix is singular"), "{e}");
    // Exactly one server ran it, once: reports reach the agent, and no second attempt follows.
    let done = || {
        c.status()
            .unwrap()
            .servers
            .iter()
            .map(|s| s.completed)
            .sum::<u64>()
    };
    assert!(eventually(Duration::from_secs(10), || done() >= 1));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(done(), 1);
}

#[test]
fn handle_bound_to_a_server_runs_there() {
    let g = Grid::two_servers();
    let c = g.client();
    let h = c.function_handle_init("add", "s2").unwrap();
    for i in 0..5 {
        assert_eq!(c.call(&h, vec![Value::Int(i)]).unwrap().server, "s2");
    }
    assert_eq!(
        c.function_handle_init("add", "s9").unwrap_err().code,
        ErrorCode::ServerNotFound
    );
}
