//! The test bed on this machine's kernel: needs root and iproute2, and fails (never skips)
//! without them, with the reason.

use gridwise_testbed::bed::{clear, namespaces_with_prefix};
use gridwise_testbed::plan::{Cmd, prefix};
use gridwise_testbed::{Cut, LinkRef, Rate, Testbed, Topology};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn topo(name: &str) -> Topology {
    Topology::parse(&format!(
        r#"
name = "{name}"
[[site]]
name = "a"
uplink = "1gbit"
[[site]]
name = "b"
uplink = "40mbit"
[[host]]
name = "x"
site = "a"
link = "1gbit"
[[host]]
name = "y"
site = "a"
link = "1gbit"
[[host]]
name = "z"
site = "b"
link = "1gbit"
"#
    ))
    .expect("the test topology parses")
}

fn up(t: Topology) -> Testbed {
    Testbed::up(t).unwrap_or_else(|e| panic!("cannot build the test bed: {e:#}"))
}

/// Runs `f` on a thread inside `host`'s namespace.
fn on<T: Send + 'static>(
    bed: &Arc<Testbed>,
    host: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (bed, host) = (bed.clone(), host.to_string());
    std::thread::spawn(move || {
        bed.enter(&host).expect("enter the host");
        f()
    })
    .join()
    .expect("the thread on the host panicked")
}

/// Sends `bytes` from `from` to a listener on `to`; returns the goodput, bits/s, or the
/// error (a cut link times out).
fn send(bed: &Arc<Testbed>, from: &str, to: &str, bytes: usize) -> Result<f64, String> {
    let addr = format!("{}:0", bed.addr(to).unwrap());
    let listener = on(bed, to, move || {
        TcpListener::bind(addr).expect("bind on the host")
    });
    let at = listener.local_addr().unwrap();
    let sink = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().ok()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0usize;
        while let Ok(k) = c.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k;
        }
        Some(n)
    });
    let result = on(bed, from, move || {
        let mut s = TcpStream::connect_timeout(&at, Duration::from_secs(2))
            .map_err(|e| format!("connect: {e}"))?;
        s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
        let t = Instant::now();
        s.write_all(&vec![7u8; bytes])
            .map_err(|e| format!("send: {e}"))?;
        s.shutdown(std::net::Shutdown::Write).ok();
        let mut b = [0u8; 1];
        let _ = s.read(&mut b);
        Ok(bytes as f64 * 8.0 / t.elapsed().as_secs_f64())
    });
    if result.is_err() {
        // Unblock the accept so the sink thread ends: from the listener's own host, which
        // the cut does not separate from itself.
        on(bed, to, move || {
            TcpStream::connect_timeout(&at, Duration::from_secs(1)).ok()
        });
    }
    let _ = sink.join();
    result
}

#[test]
fn links_run_at_their_shaped_rates_and_partitions_cut_and_heal() {
    let bed = Arc::new(up(topo("bedrates")));
    assert_eq!(namespaces_with_prefix(&prefix("bedrates")).len(), 6);
    // Across sites: b's 40 Mbit/s uplink is the slowest link on the way.
    let r = send(&bed, "x", "z", 4 << 20).expect("x reaches z");
    assert!(
        (0.85 * 40e6..=1.02 * 40e6).contains(&r),
        "x→z ran at {:.1} Mbit/s, shaped at 40",
        r / 1e6
    );
    // Inside a site the 40 Mbit/s uplink is not on the way.
    let r = send(&bed, "x", "y", 16 << 20).expect("x reaches y");
    assert!(r > 100e6, "x→y ran at {:.1} Mbit/s", r / 1e6);

    bed.partition(&Cut::Host("z".into())).unwrap();
    let e = send(&bed, "x", "z", 1 << 20).unwrap_err();
    assert!(e.contains("connect"), "{e}");
    bed.heal(&Cut::Host("z".into())).unwrap();
    send(&bed, "x", "z", 1 << 20).expect("healed, x reaches z again");

    // The link between the sites only: inside site a all is well.
    bed.partition(&Cut::Between("a".into(), "b".into()))
        .unwrap();
    assert!(send(&bed, "x", "z", 1 << 20).is_err());
    send(&bed, "x", "y", 1 << 20).expect("the cut is between the sites only");
    bed.heal(&Cut::Between("a".into(), "b".into())).unwrap();

    // A slower uplink mid-run.
    bed.set_rate(&LinkRef::Site("b".into()), Rate::parse("10mbit").unwrap())
        .unwrap();
    let r = send(&bed, "z", "x", 2 << 20).expect("z reaches x");
    assert!(
        (0.85 * 10e6..=1.02 * 10e6).contains(&r),
        "z→x ran at {:.1} Mbit/s after slowing b's uplink to 10",
        r / 1e6
    );
    drop(bed);
    assert!(namespaces_with_prefix(&prefix("bedrates")).is_empty());
}

#[test]
fn a_build_that_fails_half_way_removes_what_it_made() {
    let failing = Cmd {
        program: "ip",
        netns: Some("gw.bedfail.h.x".into()),
        args: ["link", "set", "no-such-device", "up"]
            .map(String::from)
            .to_vec(),
    };
    let e = Testbed::up_then(topo("bedfail"), &[failing])
        .err()
        .expect("it fails");
    assert!(format!("{e:#}").contains("no-such-device"), "{e:#}");
    assert!(namespaces_with_prefix(&prefix("bedfail")).is_empty());
}

#[test]
fn a_panic_with_a_bed_up_removes_it() {
    let r = std::panic::catch_unwind(|| {
        let _bed = up(topo("bedpanic"));
        assert_eq!(namespaces_with_prefix(&prefix("bedpanic")).len(), 6);
        panic!("on purpose");
    });
    assert!(r.is_err());
    assert!(namespaces_with_prefix(&prefix("bedpanic")).is_empty());
}

#[test]
fn leftovers_of_a_killed_run_are_cleared() {
    let t = topo("bedleft");
    for n in ["gw.bedleft.h.x", "gw.bedleft.core"] {
        let ok = std::process::Command::new("ip")
            .args(["netns", "add", n])
            .status()
            .unwrap()
            .success();
        assert!(ok, "ip netns add {n} failed: the test needs root");
    }
    let removed = clear(&t);
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert!(namespaces_with_prefix(&prefix("bedleft")).is_empty());
}

/// The body of the signal test, run in a child process of this test binary.
#[test]
fn signal_child_body() {
    if std::env::var_os("GW_TESTBED_SIGNAL_CHILD").is_none() {
        return;
    }
    let _bed = up(topo("bedsig"));
    println!("bed up");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn sigint_and_sigterm_remove_the_bed() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "signal_child_body",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("GW_TESTBED_SIGNAL_CHILD", "1")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        use std::io::BufRead;
        let said_up = out
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("bed up"));
        assert!(said_up, "the child never built its bed");
        assert_eq!(namespaces_with_prefix(&prefix("bedsig")).len(), 6);
        // SAFETY: kill(2) on our own child.
        unsafe {
            libc::kill(child.id() as i32, sig);
        }
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert!(
            namespaces_with_prefix(&prefix("bedsig")).is_empty(),
            "signal {sig} left {:?}",
            namespaces_with_prefix(&prefix("bedsig"))
        );
    }
}
