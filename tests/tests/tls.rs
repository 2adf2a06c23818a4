//! Mutual TLS between real daemons: calls work when every certificate comes from the grid's
//! CA, and each way of getting it wrong is refused with a reason, to the peer and in the log.

use gridwise_client::{Client, ClientConfig};
use gridwise_e2e::{FAST_HEARTBEATS, Grid, bin, raw};
use gridwise_proto::Value;
use gridwise_runtime::wire::{self, CertRole, Role, Tls, TlsFiles};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn files(dir: &Path, name: &str) -> TlsFiles {
    TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    }
}

fn client_with(grid: &Grid, tls: Option<TlsFiles>) -> Result<Client, String> {
    let mut cfg: ClientConfig = grid.client_config();
    cfg.tls = tls;
    cfg.agent_retry_s = 0;
    cfg.connect_timeout_ms = 3000;
    Client::connect(cfg).map_err(|e| e.to_string())
}

#[test]
fn a_tls_grid_runs_calls_and_refuses_every_wrong_certificate() {
    let mut g = Grid::agent_tls(&FAST_HEARTBEATS);
    g.server("s1", "slots = 2\ncalibrate = false\n");
    g.server("s2", "slots = 2\ncalibrate = false\n");
    g.wait_up(2);
    let certs = g.tls_dir.clone().expect("a TLS grid has certificates");

    // The grid's own client: calls run, data moves between servers over TLS too.
    let c = g.client();
    let h = c.function_handle_default("add").unwrap();
    let r = c.call(&h, vec![Value::Int(41)]).unwrap();
    assert_eq!(r.outputs, vec![Value::Int(42)]);
    // A graph over both servers: the second call's server pulls its input from the first's.
    let x = Value::vector_f64(&[1.0, 2.0, 3.0]);
    let mut graph = c.graph();
    let first = graph.call_named(
        "first",
        "echo",
        vec![Value::Int(3).into(), x.clone().into()],
    );
    let second = graph.call_named(
        "second",
        "echo",
        vec![Value::Int(3).into(), first.output(0)],
    );
    graph.policy("round-robin");
    let run = graph.run().unwrap();
    assert_eq!(run.outputs(second).unwrap()[0], x);
    let used: std::collections::HashSet<&str> =
        run.calls.iter().map(|r| r.server.as_str()).collect();
    assert_eq!(
        used.len(),
        2,
        "the value moved between servers: {:?}",
        run.calls
    );

    // A plaintext client is told what to configure.
    let Err(err) = client_with(&g, None) else {
        panic!("a plaintext client was accepted by a TLS grid")
    };
    assert!(err.contains("TLS connections only"), "{err}");

    // A certificate from another CA fails the handshake, as an unknown issuer even when that
    // CA has the same grid name.
    let other = tempfile::tempdir().unwrap();
    gridwise_certs::init(other.path(), "local", 30).unwrap();
    gridwise_certs::issue(other.path(), CertRole::Client, "mallory", &[], 30).unwrap();
    let Err(err) = client_with(&g, Some(files(other.path(), "mallory"))) else {
        panic!("a certificate from another CA was accepted")
    };
    assert!(err.contains("TLS"), "{err}");
    assert!(
        gridwise_e2e::eventually(Duration::from_secs(5), || g
            .logs()
            .contains("TLS handshake refused")),
        "the agent logs the refused handshake:\n{}",
        g.logs()
    );
    // The client finds the agent's certificate from an unknown issuer, and tells the agent
    // so; nobody sees a bad signature or a decrypt error (what two CAs of one name gave).
    assert!(err.contains("UnknownIssuer"), "{err}");
    let logs = g.logs();
    assert!(logs.contains("UnknownCA"), "{logs}");
    assert!(
        !logs.contains("BadSignature") && !logs.contains("DecryptError"),
        "{logs}"
    );

    // A client certificate cannot act as a server, whatever its hello claims.
    let rt = raw::runtime();
    let client_tls = Tls::load(&files(&certs, "client")).unwrap();
    let dial = wire::DialConfig {
        tls: Some(client_tls),
        ..raw::dial(Role::Server, None, "x")
    };
    let Err(err) = rt.block_on(raw::agent(&g.agent.addr, &dial)) else {
        panic!("a client certificate was accepted in the server role")
    };
    assert!(
        err.to_string()
            .contains("client certificate and cannot act as a server"),
        "{err}"
    );

    // A server may not take another name than its certificate's: it says so and stops.
    let out = Command::new(bin("gridwise-server"))
        .args(["--name", "impostor", "--listen", "127.0.0.1:0", "--agent"])
        .arg(&g.agent.addr)
        .arg("--tls-ca")
        .arg(certs.join("ca.pem"))
        .arg("--tls-cert")
        .arg(certs.join("s1.pem"))
        .arg("--tls-key")
        .arg(certs.join("s1.key"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("certificate is for `s1`"), "{stderr}");

    // `gridwise certs` writes what the daemons load.
    let dir = tempfile::tempdir().unwrap();
    let cli = gridwise_e2e::cargo_build(&["-p", "gridwise", "--bin", "gridwise"]).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(cli.join("gridwise"))
            .arg("certs")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let d = dir.path().display().to_string();
    run(&["init", &d]);
    let printed = run(&[
        "issue",
        &d,
        "--role",
        "server",
        "--name",
        "n1",
        "--host",
        "127.0.0.1",
    ]);
    assert!(printed.contains("[tls]"), "{printed}");
    let t = Tls::load(&files(dir.path(), "n1")).unwrap();
    assert_eq!(
        (t.identity.role, t.identity.name.as_str()),
        (CertRole::Server, "n1")
    );
}
