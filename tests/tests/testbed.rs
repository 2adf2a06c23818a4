//! A grid on a test bed of three hosts in two sites (network namespaces joined through
//! routers, links shaped with tc): a graph whose data crosses hosts runs while one server's
//! host is cut off and healed. Needs root and iproute2; fails with the reason without them.

use gridwise_client::{Client, GraphArg};
use gridwise_e2e::{FAST_HEARTBEATS, bin, eventually};
use gridwise_localgrid::{Launcher, LocalGrid, wait_for_servers};
use gridwise_proto::{ServerState, Value};
use gridwise_testbed::bed::namespaces_with_prefix;
use gridwise_testbed::plan::prefix;
use gridwise_testbed::{Cut, Testbed, Topology};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOPOLOGY: &str = r#"
name = "e2egraph"
[[site]]
name = "a"
uplink = "200mbit"
[[site]]
name = "b"
uplink = "100mbit"
[[host]]
name = "front"
site = "a"
link = "1gbit"
role = "agent"
[[host]]
name = "s1"
site = "a"
link = "1gbit"
role = "server"
[[host]]
name = "s2"
site = "b"
link = "1gbit"
role = "server"
"#;

const N: usize = 192;
const STEPS: usize = 24;

/// The cyclic shift: (A·P)[i][j] = A[i][(j − 1) mod n].
fn shift() -> Value {
    let mut p = vec![0.0; N * N];
    for k in 0..N {
        p[k * N + (k + 1) % N] = 1.0;
    }
    Value::matrix_f64(N as u64, N as u64, &p)
}

fn start() -> Value {
    let a: Vec<f64> = (0..N * N).map(|x| x as f64).collect();
    Value::matrix_f64(N as u64, N as u64, &a)
}

/// A·P^s, worked out without multiplying.
fn shifted(s: usize) -> Value {
    let mut a = vec![0.0; N * N];
    for i in 0..N {
        for j in 0..N {
            a[i * N + j] = (i * N + (j + N - s % N) % N) as f64;
        }
    }
    Value::matrix_f64(N as u64, N as u64, &a)
}

/// Runs `f` on a thread in `host`'s namespace, as a program on that host would.
fn on_host<T: Send + 'static>(
    bed: &Arc<Testbed>,
    host: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let (bed, host) = (bed.clone(), host.to_string());
    std::thread::spawn(move || {
        bed.enter(&host)
            .unwrap_or_else(|e| panic!("cannot enter {host}: {e:#}"));
        f()
    })
}

/// A chain of `STEPS` multiplications, round-robin over the servers so that every edge
/// crosses from one site to the other; returns the last output and where each call ran.
fn chain(c: &Client) -> (Value, Vec<gridwise_client::CallRecord>) {
    let mut graph = c.graph();
    let p = shift();
    let mut last: GraphArg = start().into();
    let mut call = None;
    for s in 0..STEPS {
        let r = graph.call_named(
            &format!("step{s}"),
            "dgemm",
            vec![
                (N as i64).into(),
                (N as i64).into(),
                (N as i64).into(),
                last,
                p.clone().into(),
            ],
        );
        last = r.output(0);
        call = Some(r);
    }
    let call = call.expect("a chain has calls");
    graph.fetch(call);
    graph.policy("round-robin");
    let run = graph
        .run()
        .unwrap_or_else(|e| panic!("the graph failed: {e}"));
    let out = run.outputs(call).expect("the last call's output")[0].clone();
    (out, run.calls)
}

#[test]
fn a_graph_across_hosts_rides_out_a_host_cut_off_and_healed() {
    let started = Instant::now();
    let topo = Topology::parse(TOPOLOGY).unwrap();
    let bed = Arc::new(Testbed::up(topo).unwrap_or_else(|e| {
        panic!("cannot build the test bed (it needs root and iproute2): {e:#}")
    }));
    let hb: Vec<String> = FAST_HEARTBEATS.iter().map(|s| s.to_string()).collect();
    let mut grid = LocalGrid::start_on(
        bed.clone(),
        &Launcher::program(bin("gridwise-agent")),
        Launcher::program(bin("gridwise-server")),
        &hb,
        false,
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    for s in ["s1", "s2"] {
        let d = grid
            .add_server(s, "slots = 1\ncalibrate = false\nbuiltins = [\"dgemm\"]\n")
            .unwrap_or_else(|e| panic!("{e:#}"));
        assert!(
            d.addr.starts_with(&bed.addr(s).unwrap()),
            "{s} listens on {}, not on its host's address",
            d.addr
        );
    }
    // Each daemon leads a session of its own, as systemd would start it on its host.
    for d in std::iter::once(&grid.agent).chain(&grid.servers) {
        // SAFETY: getsid(2) only reads.
        let (sid, ours) = unsafe { (libc::getsid(d.pid() as i32), libc::getsid(0)) };
        assert!(
            sid == d.pid() as i32 && sid != ours,
            "{} (pid {}) is in session {sid}, the test's is {ours}",
            d.label,
            d.pid()
        );
    }
    let cfg = grid.client_config();
    let s2_addr = grid.servers[1].addr.clone();

    // The graph, from the agent's host.
    let graph = on_host(&bed, "front", {
        let cfg = cfg.clone();
        move || {
            let c = Client::connect(cfg).expect("the client connects from its host");
            wait_for_servers(&c, 2, Duration::from_secs(30)).expect("both servers up");
            let ran = chain(&c);
            (ran, Instant::now())
        }
    });
    // Cut s2's host as soon as it works on the chain, heal it 3 s later.
    let watcher = on_host(&bed, "front", {
        let cfg = cfg.clone();
        let bed = bed.clone();
        move || {
            let c = Client::connect(cfg).expect("the watcher connects");
            let busy = eventually(Duration::from_secs(60), || {
                c.ping(&s2_addr).map(|p| p.held_values > 0).unwrap_or(false)
            });
            assert!(busy, "s2 never held a value of the chain");
            bed.partition(&Cut::Host("s2".into())).unwrap();
            let cut_at = Instant::now();
            std::thread::sleep(Duration::from_secs(3));
            bed.heal(&Cut::Host("s2".into())).unwrap();
            cut_at
        }
    });
    let ((out, calls), done_at) = graph
        .join()
        .unwrap_or_else(|_| panic!("the graph's thread panicked; logs:\n{}", grid.logs()));
    let cut_at = watcher.join().expect("the watcher cut and healed s2");
    assert!(done_at > cut_at, "the chain was over before the cut");
    assert_eq!(out, shifted(STEPS), "the chain's product is wrong");
    assert_eq!(calls.len(), STEPS);
    let moved: Vec<&str> = calls
        .iter()
        .filter(|r| r.fell_back)
        .map(|r| r.name.as_str())
        .collect();
    // Either way is right: a call whose server is cut off moves to the other one, and a
    // pull across the cut waits for TCP to get through once it heals.
    eprintln!("calls moved off their planned server by the cut: {moved:?}");
    assert!(
        calls.iter().any(|r| r.server == "s2"),
        "the chain never ran on s2: {calls:?}"
    );

    // s2 is back: up at the agent, and the next chain uses it again.
    let again = on_host(&bed, "front", move || {
        let c = Client::connect(cfg).unwrap();
        let back = eventually(Duration::from_secs(20), || {
            c.status()
                .map(|s| {
                    s.servers
                        .iter()
                        .any(|x| x.name == "s2" && x.state == ServerState::Up)
                })
                .unwrap_or(false)
        });
        (back, back.then(|| chain(&c)))
    })
    .join()
    .expect("the second chain's thread");
    assert!(
        again.0,
        "s2 did not rejoin after the heal; logs:\n{}",
        grid.logs()
    );
    let (out, calls) = again.1.expect("the second chain ran");
    assert_eq!(out, shifted(STEPS));
    assert!(
        calls.iter().any(|r| r.server == "s2"),
        "the healed s2 was not used again: {calls:?}"
    );

    drop(grid);
    drop(bed);
    assert!(
        namespaces_with_prefix(&prefix("e2egraph")).is_empty(),
        "namespaces left behind: {:?}",
        namespaces_with_prefix(&prefix("e2egraph"))
    );
    eprintln!("test bed e2e took {:.1} s", started.elapsed().as_secs_f64());
}

/// `gridwise testbed up` on a shipped topology: the daemons start on their hosts, a client
/// on the client's host reaches the agent with the command `up` prints, `status` sees the
/// hosts, and Ctrl-C takes everything down.
#[test]
fn testbed_up_runs_a_shipped_topology_and_ctrl_c_takes_it_down() {
    use std::io::{BufRead, BufReader};
    let cli = gridwise_e2e::cargo_build(&["-p", "gridwise", "--bin", "gridwise"])
        .unwrap_or_else(|e| panic!("{e}"))
        .join("gridwise");
    let star = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/testbeds/star.toml"
    );
    let mut up = std::process::Command::new(&cli)
        .args(["testbed", "up", star, "--name", "e2ecli"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(up.stdout.take().unwrap()).lines();
    let mut said = Vec::new();
    let client_cmd = loop {
        let l = lines
            .next()
            .unwrap_or_else(|| panic!("`testbed up` ended early:\n{}", said.join("\n")))
            .unwrap();
        said.push(l.clone());
        if l.trim_start()
            .starts_with("ip netns exec gw.e2ecli.h.client")
        {
            break l;
        }
    };
    for l in lines.by_ref() {
        let l = l.unwrap();
        said.push(l.clone());
        if l.starts_with("up;") {
            break;
        }
    }
    // The printed command, as a user would paste it (with a bounded wait for 3 servers).
    let words: Vec<&str> = client_cmd.split_whitespace().collect();
    let status = std::process::Command::new(words[0])
        .args(&words[1..])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(text.contains("3 server(s)"), "{text}\n{}", said.join("\n"));
    for s in ["fast1", "fast2", "far"] {
        assert!(text.contains(s), "{s} missing from the status:\n{text}");
    }
    let st = std::process::Command::new(&cli)
        .args(["testbed", "status", star, "--name", "e2ecli"])
        .output()
        .unwrap();
    let st = String::from_utf8_lossy(&st.stdout);
    assert!(
        st.contains("host client") && st.contains("rate 20Mbit"),
        "{st}"
    );

    gridwise_e2e::signal(up.id(), libc::SIGINT);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let code = up.wait().unwrap();
    assert!(
        code.success(),
        "`testbed up` after Ctrl-C: {code}\n{rest:?}"
    );
    assert!(rest.iter().any(|l| l.contains("taken down")), "{rest:?}");
    assert!(namespaces_with_prefix(&prefix("e2ecli")).is_empty());
}
