//! Remote data: outputs kept on the server that made them, used by a call on another server
//! (which pulls them straight from the holder), fetched by the client, and freed.

use gridwise_e2e::Grid;
use gridwise_proto::{ErrorCode, Value};

fn m(rows: u64, cols: u64, v: &[f64]) -> Value {
    Value::matrix_f64(rows, cols, v)
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
        .call_keep(
            &on_s1,
            vec![Value::Int(2), Value::Int(2), Value::Int(2), a, b],
            &[0],
        )
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
        .call(
            &on_s2,
            vec![
                Value::Int(2),
                Value::Int(2),
                Value::Int(2),
                Value::Ref(c_ref.clone()),
                a2,
            ],
        )
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
            vec![
                Value::Int(2),
                Value::Int(2),
                Value::Int(2),
                Value::Ref(c_ref),
                m(2, 2, &[0.; 4]),
            ],
        )
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::SessionFailed);
    assert!(e.message.contains("freed"), "{e}");

    // Keeping an output the service does not have is refused before anything is sent.
    let e = c
        .call_keep(
            &on_s1,
            vec![
                Value::Int(1),
                Value::Int(1),
                Value::Int(1),
                m(1, 1, &[1.]),
                m(1, 1, &[1.]),
            ],
            &[3],
        )
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::OtherErrorCode);
}
