//! A server that dies: the agent notices, and calls go elsewhere.

use gridwise_e2e::{Grid, eventually};
use gridwise_proto::{ServerState, Value};
use std::time::{Duration, Instant};

#[test]
fn killed_server_is_marked_down_and_calls_move_to_the_other() {
    let mut g = Grid::two_servers();
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    let victim = g.names[0].clone();
    let survivor = g.names[1].clone();

    g.servers[0].kill(); // SIGKILL: no goodbye to the agent
    let killed_at = Instant::now();

    // Before the agent notices, a call ranked to the dead server falls back to the next.
    for i in 0..10 {
        let r = c.call(&add, vec![Value::Int(i)]).unwrap();
        assert_eq!(r.outputs, vec![Value::Int(i + 1)]);
        assert_eq!(r.server, survivor);
    }

    let down = || {
        c.status()
            .unwrap()
            .servers
            .iter()
            .any(|s| s.name == victim && s.state == ServerState::Down)
    };
    // Heartbeat timeout 1 s, swept every 250 ms; the bound leaves room for a loaded machine.
    assert!(
        eventually(Duration::from_secs(10), down),
        "never marked down"
    );
    let took = killed_at.elapsed();
    eprintln!(
        "marked down {:.2} s after SIGKILL (timeout 1 s)",
        took.as_secs_f64()
    );

    let ranked = c.status().unwrap().ranked;
    for i in 0..10 {
        assert_eq!(c.call(&add, vec![Value::Int(i)]).unwrap().server, survivor);
    }
    assert_eq!(c.status().unwrap().ranked, ranked + 10);
}
