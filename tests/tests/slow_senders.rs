//! Peers that trickle their frames a byte at a time: a daemon must close such a frame once it
//! falls behind the pace its settings allow, and a flood of them, from several addresses of one
//! network, must neither lock clients out nor grow the daemon's connections past its caps.

use gridwise_e2e::{FAST_HEARTBEATS, Grid, eventually, open_fds, raw};
use gridwise_localgrid::flood::{self, hello_from, trickle};
use gridwise_proto::Value;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[test]
fn a_trickled_frame_is_closed_once_it_falls_behind_the_pace() {
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    // The stall timeout (60 s) never comes into it: a byte arrives every 100 ms.
    g.server("s1", "calibrate = false\nframe_grace_s = 1.0\n");
    g.wait_up(1);
    let server: SocketAddr = g.servers[0].addr.parse().unwrap();
    let rt = raw::runtime();
    let stop = AtomicBool::new(false);
    let closed = rt.block_on(async {
        let mut s = hello_from(Ipv4Addr::new(127, 0, 0, 2), server)
            .await
            .expect("the trickler is welcomed");
        tokio::time::timeout(
            Duration::from_secs(30),
            trickle(&mut s, Duration::from_millis(100), &stop),
        )
        .await
    });
    assert_eq!(
        closed,
        Ok(true),
        "the trickled frame was never closed:\n{}",
        g.logs()
    );
    let logs = g.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("a frame arrived too slowly"))
        .unwrap_or_else(|| panic!("no reason logged:\n{logs}"));
    assert!(
        line.contains("127.0.0.2") && line.contains("of 1048580 bytes"),
        "{line}"
    );
    // The server serves on.
    let c = g.client();
    let h = c.function_handle_init("add", "s1").unwrap();
    assert_eq!(
        c.call(&h, vec![Value::Int(1)]).unwrap().outputs,
        vec![Value::Int(2)]
    );
}

const MAX_CONNECTIONS: usize = 64;
const PER_NETWORK: usize = 24;
/// Trickling connections from each of 127.0.0.2..=127.0.0.5: more than `MAX_CONNECTIONS` in
/// all, so without eviction of slow frames they would fill the table by themselves.
const PER_ADDRESS: usize = 20;

#[test]
fn a_flood_of_trickling_connections_from_one_network_does_not_lock_clients_out() {
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    // A grace longer than the test: only making room for newcomers can let a client in.
    g.server(
        "s1",
        &format!(
            "calibrate = false\nmax_connections = {MAX_CONNECTIONS}\n\
             max_connections_per_network = {PER_NETWORK}\nframe_grace_s = 600.0\n"
        ),
    );
    g.wait_up(1);
    let server: SocketAddr = g.servers[0].addr.parse().unwrap();
    let pid = g.servers[0].pid();
    let c = g.client();
    let h = c.function_handle_init("add", "s1").unwrap();
    let baseline = open_fds(pid);

    let rt = raw::runtime();
    let sources: Vec<Ipv4Addr> = (2..6).map(|i| Ipv4Addr::new(127, 0, 0, i)).collect();
    let flood = flood::start(
        rt.handle(),
        server,
        &sources,
        PER_ADDRESS,
        Duration::from_millis(250),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (welcomed, cut) = (flood.welcomed.clone(), flood.cut.clone());
    // The server's open files, sampled while the flood lasts.
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(open_fds(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // The flood holds every place its network may have before the client comes.
    assert!(
        eventually(Duration::from_secs(20), || welcomed.load(Ordering::Relaxed)
            >= 2 * PER_NETWORK),
        "the flood did not get going:\n{}",
        g.logs()
    );

    // A client (from 127.0.0.1, the flood's network) gets its calls through. An attempt may
    // lose its connection to the churn (closed between two steps, if it idled long enough to
    // count as idle), so it tries again, a bounded number of times: a lockout fails them all.
    const CALLS: usize = 10;
    let started = Instant::now();
    let mut answers = Vec::new();
    let mut failures = Vec::new();
    while answers.len() < CALLS
        && failures.len() < 20
        && started.elapsed() < Duration::from_secs(30)
    {
        let i = answers.len() as i64;
        match c.call(&h, vec![Value::Int(i)]) {
            Ok(r) => answers.push((i, r.outputs)),
            Err(e) => {
                failures.push(e.to_string());
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    flood.stop();
    sampler.join().unwrap();
    rt.shutdown_timeout(Duration::from_secs(2));

    assert_eq!(
        answers.len(),
        CALLS,
        "the client was locked out ({} failed attempts: {failures:?}):\n{}",
        failures.len(),
        g.logs()
    );
    for (i, out) in &answers {
        assert_eq!(out, &vec![Value::Int(i + 1)]);
    }
    let peak = peak.load(Ordering::Relaxed);
    eprintln!(
        "{CALLS} calls went through with {} failed attempt(s); {} trickling connections welcomed, {} closed by the server; at most {peak} files open ({baseline} before)",
        failures.len(),
        welcomed.load(Ordering::Relaxed),
        cut.load(Ordering::Relaxed),
    );
    // Room was made by closing the slowest frames, and the server's connections stayed within
    // the network's cap (the slack: the client's connection and those being closed).
    let logs = g.logs();
    assert!(
        logs.contains("closing the connection whose frame arrives slowest to make room"),
        "no trickling connection was closed to make room:\n{logs}"
    );
    assert!(cut.load(Ordering::Relaxed) > 0);
    assert!(
        peak <= baseline + PER_NETWORK + 16,
        "the server held {peak} files open (before the flood: {baseline})"
    );
    assert!(g.servers[0].is_running(), "the server died:\n{logs}");
}
