//! Fault injection, finding by finding (issue 9): each test is something a hostile or unlucky
//! user did to a real agent and real servers on loopback, which used to lose calls, hang them,
//! hijack a server or take the grid down. Tests in this file run one at a time: several of
//! them measure a daemon's memory or stop a process, which must not overlap.

use gridwise_e2e::{FAST_HEARTBEATS, Grid, eventually, open_fds, raw, rss_bytes, signal};
use gridwise_proto::{
    ArgDesc, ArgMode, CallErrorKind, CallId, ErrorCode, ExecuteRequest, Registration, ServiceDesc,
    Value,
};
use gridwise_runtime::wire::Role;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn ints(v: &[i64]) -> Vec<Value> {
    v.iter().map(|x| Value::Int(*x)).collect()
}

fn ones(rows: u64, cols: u64) -> Value {
    Value::matrix_f64(rows, cols, &vec![1.0; (rows * cols) as usize])
}

fn dgemm_args(m: i64, n: i64, k: i64) -> Vec<Value> {
    let mut v = ints(&[m, n, k]);
    v.push(ones(m as u64, k as u64));
    v.push(ones(k as u64, n as u64));
    v
}

/// A registration for a server that is not there.
fn fake(name: &str, addr: &str) -> Registration {
    Registration {
        name: name.into(),
        instance: format!("fake-{name}"),
        secret: None,
        addr: addr.into(),
        slots: 1,
        services: vec![ServiceDesc {
            memory: None,
            name: "fake".into(),
            doc: String::new(),
            args: vec![ArgDesc::new("x", ArgMode::In, "int")],
            size_params: vec![],
            complexity: None,
            duration: None,
        }],
        rates: vec![],
        default_rate: 1e12,
        memory_bytes: 1 << 40,
        cores: 64,
        memory_budget_bytes: 1 << 40,
        max_frame_bytes: 1 << 30,
        sleeping: Vec::new(),
        not_offered: Vec::new(),
    }
}

fn dead_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap().to_string();
    drop(l);
    a
}

/// Sends a `dgemm` straight to the server at `addr` (no agent), as a client: the server's
/// own answer.
fn dgemm_on(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    (m, n, k): (i64, i64, i64),
    keep_outputs: Vec<u32>,
    reply_limit_bytes: u64,
) -> Result<gridwise_proto::ExecuteReply, gridwise_proto::CallError> {
    dgemm_copying(rt, addr, (m, n, k), keep_outputs, reply_limit_bytes, 0)
}

/// [`dgemm_on`] asking for copies of kept outputs below `copy_below` bytes.
fn dgemm_copying(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    (m, n, k): (i64, i64, i64),
    keep_outputs: Vec<u32>,
    reply_limit_bytes: u64,
    copy_below: u64,
) -> Result<gridwise_proto::ExecuteReply, gridwise_proto::CallError> {
    rt.block_on(async {
        let s = raw::server(addr, &raw::dial(Role::Client, None, "poison"))
            .await
            .unwrap();
        let req = ExecuteRequest {
            call_id: CallId::new_random(),
            ticket: None,
            service: "dgemm".into(),
            inputs: dgemm_args(m, n, k),
            sent_at_unix_ns: 0,
            keep_outputs,
            reply_limit_bytes,
            bulk_outputs: false,
            copy_kept_below_bytes: copy_below,
        };
        s.execute(raw::ctx(), req).await.unwrap()
    })
}

fn three(config: &str) -> Grid {
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    for name in ["s1", "s2", "s3"] {
        g.server(name, config);
    }
    g.wait_up(3);
    g
}

// --- 1. Poison calls ----------------------------------------------------------------------

#[test]
fn a_call_too_large_for_any_server_is_refused_before_it_runs_and_no_server_dies() {
    let _one = serial();
    let mut g = three("calibrate = false\nslots = 2\nmemory_budget_bytes = 1073741824\n");
    let c = g.client();
    let dgemm = c.function_handle_default("dgemm").unwrap();
    // 256 KB of inputs, a 2 GB result: 4 GB with its working copy and reply, over every
    // server's 1 GiB budget. Kept on the server, so only memory (not the frame) is in the way.
    let e = c
        .call_keep(&dgemm, dgemm_args(16_000, 16_000, 1), &[0])
        .unwrap_err();
    // A resource limit: refused, as the server itself would refuse it.
    assert_eq!(e.code, ErrorCode::RpcRefused, "{e}");
    assert!(e.message.contains("memory budget"), "{e}");
    // Sent straight to a server, bypassing the agent: the server refuses it the same way.
    let rt = raw::runtime();
    let reply = dgemm_on(&rt, &g.servers[0].addr, (16_000, 16_000, 1), vec![0], 0);
    let err = reply.unwrap_err();
    assert_eq!(err.kind, CallErrorKind::ResourceLimit);
    assert!(err.message.contains("memory_budget_bytes"), "{err}");
    // A result larger than one frame (128 MB, for a client whose limit is 64 MiB) comes back
    // on a bulk connection to a client that collects outputs so; a request that does not is
    // refused by the server before the result is computed.
    let mut small = g.client_config();
    small.max_frame_bytes = 64 << 20;
    let small = gridwise_client::Client::connect(small).unwrap();
    let on_small = small.function_handle_default("dgemm").unwrap();
    let r = small.call(&on_small, dgemm_args(4_000, 4_000, 1)).unwrap();
    assert_eq!(r.outputs[0].payload_bytes(), 4_000 * 4_000 * 8);
    drop(r);
    let before = rss_bytes(g.servers[1].pid());
    let reply = dgemm_on(&rt, &g.servers[1].addr, (4_000, 4_000, 1), vec![], 64 << 20);
    let err = reply.unwrap_err();
    assert_eq!(err.kind, CallErrorKind::ResourceLimit, "{err}");
    assert!(err.message.contains("max_frame_bytes"), "{err}");
    assert!(
        rss_bytes(g.servers[1].pid()) < before + (100 << 20),
        "the refused result was computed anyway"
    );
    // Nobody died, and the grid works.
    assert!(g.servers.iter_mut().all(|s| s.is_running()), "{}", g.logs());
    let add = c.function_handle_default("add").unwrap();
    assert_eq!(c.call(&add, ints(&[1])).unwrap().outputs, ints(&[2]));
}

#[test]
fn kept_outputs_come_back_copied_when_small_and_within_the_reply_limit() {
    let _one = serial();
    let g = three("calibrate = false\n");
    let rt = raw::runtime();
    let addr = &g.servers[0].addr;
    let whole = dgemm_on(&rt, addr, (2, 2, 3), vec![], 0).unwrap().outputs;
    let copied = dgemm_copying(&rt, addr, (2, 2, 3), vec![0], 0, 1 << 20).unwrap();
    assert!(matches!(copied.outputs[0], Value::Ref(_)), "{copied:?}");
    assert_eq!(copied.copies, vec![(0, whole[0].clone())]);
    // Not asked for, or not smaller than asked: kept only.
    let plain = dgemm_copying(&rt, addr, (2, 2, 3), vec![0], 0, 0).unwrap();
    assert!(plain.copies.is_empty() && matches!(plain.outputs[0], Value::Ref(_)));
    let at_limit = dgemm_copying(&rt, addr, (2, 2, 3), vec![0], 0, 32).unwrap();
    assert!(at_limit.copies.is_empty(), "{at_limit:?}");
    // 80 KB kept: copied only if the reply may carry it beside its 64 KiB of overhead.
    let room = |extra: u64| {
        dgemm_copying(
            &rt,
            addr,
            (100, 100, 1),
            vec![0],
            (64 << 10) + extra,
            1 << 20,
        )
        .unwrap()
        .copies
        .len()
    };
    assert_eq!((room(50_000), room(100_000)), (0, 1));
}

#[test]
fn a_call_whose_servers_die_under_it_is_not_walked_across_the_grid() {
    let _one = serial();
    let mut g = three("calibrate = false\nslots = 2\n");
    let c = g.client();
    let sleep = c.function_handle_default("sleep").unwrap();
    let id = c.call_async(&sleep, ints(&[60])).unwrap();
    let rt = raw::runtime();
    let running_on = |g: &Grid| -> Option<usize> {
        rt.block_on(async {
            for (i, s) in g.servers.iter().enumerate() {
                let Ok(cl) = raw::server(&s.addr, &raw::dial(Role::Client, None, "probe")).await
                else {
                    continue;
                };
                if let Ok(p) = cl.ping(raw::ctx()).await
                    && p.load.running > 0
                {
                    return Some(i);
                }
            }
            None
        })
    };
    let mut killed = Vec::new();
    for _ in 0..2 {
        let mut at = None;
        assert!(
            eventually(Duration::from_secs(30), || {
                at = running_on(&g).filter(|i| !killed.contains(i));
                at.is_some()
            }),
            "the call never started on a live server:\n{}",
            g.logs()
        );
        let i = at.unwrap();
        g.servers[i].kill();
        killed.push(i);
    }
    // Two servers died running it: the client stops there instead of killing the third.
    let e = c.wait(id).unwrap_err();
    assert!(e.message.contains("not retried further"), "{e}");
    let third = (0..3).find(|i| !killed.contains(i)).unwrap();
    let pong = rt.block_on(async {
        let cl = raw::server(
            &g.servers[third].addr,
            &raw::dial(Role::Client, None, "probe"),
        )
        .await
        .unwrap();
        cl.ping(raw::ctx()).await.unwrap()
    });
    assert_eq!((pong.executed, pong.load.running), (0, 0), "{pong:?}");
}

// --- 2. Identities and roles ------------------------------------------------------------------

#[test]
fn a_client_credential_cannot_register_a_server() {
    let _one = serial();
    let mut extra: Vec<&str> = FAST_HEARTBEATS.to_vec();
    extra.extend([
        "--client-token",
        "for-clients",
        "--server-token",
        "for-servers",
    ]);
    let mut g = Grid::agent(&extra);
    g.server("s1", "calibrate = false\n");
    g.wait_up(1);
    let rt = raw::runtime();
    let agent = g.agent.addr.clone();
    rt.block_on(async {
        // A client token in the server role is refused at the hello.
        let as_server = raw::dial(Role::Server, Some("for-clients"), "x");
        let e = raw::agent(&agent, &as_server).await.unwrap_err();
        assert!(e.to_string().contains("server_token"), "{e}");
        // In the client role it connects, but cannot register.
        let cl = raw::agent(&agent, &raw::dial(Role::Client, Some("for-clients"), "x"))
            .await
            .unwrap();
        let reg = fake("s1", &dead_addr());
        let e = cl.register(raw::ctx(), reg).await.unwrap().unwrap_err();
        assert_eq!(e.code, ErrorCode::RpcRefused);
        assert!(e.message.contains("only servers may register"), "{e}");
    });
    let st = g.client().status().unwrap();
    assert_eq!(st.servers.len(), 1);
    assert_ne!(st.servers[0].addr, "");
}

#[test]
fn a_live_servers_name_cannot_be_taken_over() {
    let _one = serial();
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    g.server("s1", "calibrate = false\nslots = 4\n");
    g.server("s2", "calibrate = false\nslots = 4\n");
    g.wait_up(2);
    let real_s1 = g.servers[0].addr.clone();
    // A second server process under the same name, with the same credentials.
    g.server("s1", "calibrate = false\nslots = 4\n");
    let impostor = g.servers[2].addr.clone();
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    for i in 0..300 {
        let r = c.call(&add, ints(&[i])).unwrap();
        assert_eq!(r.outputs, ints(&[i + 1]));
    }
    let st = c.status().unwrap();
    assert_eq!(st.servers.len(), 2);
    let s1 = st.servers.iter().find(|s| s.name == "s1").unwrap();
    assert_eq!(s1.addr, real_s1);
    // The impostor got nothing: no call, no input.
    let rt = raw::runtime();
    let pong = rt.block_on(async {
        let cl = raw::server(&impostor, &raw::dial(Role::Client, None, "probe"))
            .await
            .unwrap();
        cl.ping(raw::ctx()).await.unwrap()
    });
    assert_eq!(pong.executed, 0);
    assert!(
        eventually(Duration::from_secs(10), || g
            .logs()
            .contains("held by a live server")),
        "{}",
        g.logs()
    );
}

/// Calls `executed` so far on the server at `addr`, as its own ping says.
fn executed_at(rt: &tokio::runtime::Runtime, addr: &str) -> Option<u64> {
    rt.block_on(async {
        let cl = raw::server(addr, &raw::dial(Role::Client, None, "probe"))
            .await
            .ok()?;
        Some(cl.ping(raw::ctx()).await.ok()?.executed)
    })
}

#[test]
fn a_frozen_servers_name_is_not_taken_and_a_replaced_server_gets_it_back() {
    let _one = serial();
    let mut g = Grid::agent(&[
        "--heartbeat-interval-ms",
        "200",
        "--heartbeat-timeout-ms",
        "5000",
    ]);
    g.server("s1", "calibrate = false\nslots = 4\n");
    g.server("s2", "calibrate = false\nslots = 4\n");
    g.wait_up(2);
    let real = g.servers[0].addr.clone();
    let real_pid = g.servers[0].pid();
    let c = g.client();
    let s1_add = || c.function_handle_init("add", "s1").unwrap();
    let rt = raw::runtime();
    let s1_addr = |c: &gridwise_client::Client| {
        let st = c.status().unwrap();
        st.servers
            .iter()
            .find(|s| s.name == "s1")
            .unwrap()
            .addr
            .clone()
    };

    // 1. Frozen for less than the heartbeat timeout: a second process under the name (same
    // server token, its own address) is refused, however silent the holder is.
    signal(real_pid, libc::SIGSTOP);
    g.server("s1", "calibrate = false\nslots = 4\n");
    let impostor = g.servers[2].addr.clone();
    let refused = eventually(Duration::from_secs(10), || {
        g.logs().contains("held by a live server")
    });
    signal(real_pid, libc::SIGCONT);
    assert!(refused, "{}", g.logs());
    assert_eq!(s1_addr(&c), real);
    for i in 0..20 {
        let r = c.call(&s1_add(), ints(&[i])).unwrap();
        assert_eq!(r.outputs, ints(&[i + 1]));
    }
    assert_eq!(
        executed_at(&rt, &impostor),
        Some(0),
        "the impostor ran nothing"
    );
    assert!(executed_at(&rt, &real).unwrap() >= 20);

    // 2. Frozen past the timeout: declared down and silent at its address, its name passes
    // to the waiting process; resumed, it is told so and says it.
    signal(real_pid, libc::SIGSTOP);
    let taken = eventually(Duration::from_secs(30), || s1_addr(&c) == impostor);
    signal(real_pid, libc::SIGCONT);
    assert!(taken, "{}", g.logs());
    assert!(
        eventually(Duration::from_secs(10), || g
            .logs()
            .contains("another process registered as `s1`")),
        "{}",
        g.logs()
    );
    // It cannot take the name back while the new holder lives.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(s1_addr(&c), impostor);

    // 3. Once that process is gone, the first one registers again and calls pinned to `s1`
    // reach it, without a restart.
    g.servers[2].kill();
    assert!(
        eventually(Duration::from_secs(30), || s1_addr(&c) == real
            && c.status().unwrap().servers.iter().any(
                |s| s.name == "s1" && s.state == gridwise_proto::ServerState::Up
            )),
        "{}",
        g.logs()
    );
    let before = executed_at(&rt, &real).unwrap();
    for i in 0..5 {
        let r = c.call(&s1_add(), ints(&[i])).unwrap();
        assert_eq!(r.outputs, ints(&[i + 1]));
    }
    assert_eq!(executed_at(&rt, &real).unwrap(), before + 5);
}

#[test]
fn ghost_servers_claiming_huge_rates_cannot_empty_the_grid() {
    let _one = serial();
    let mut extra: Vec<&str> = vec!["--heartbeat-interval-ms", "200"];
    extra.extend(["--server-token", "for-servers"]);
    let mut g = Grid::agent(&extra);
    for name in ["s1", "s2", "s3"] {
        g.server(name, "calibrate = false\nslots = 4\n");
    }
    g.wait_up(3);
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    // The real servers are confirmed by the calls they run.
    for i in 0..30 {
        c.call(&add, ints(&[i])).unwrap();
    }
    let rt = raw::runtime();
    let agent = g.agent.addr.clone();
    let ghosts = rt.block_on(async {
        let dial = raw::dial(Role::Server, Some("for-servers"), "ghost");
        let cl = raw::agent(&agent, &dial).await.unwrap();
        let add = cl
            .describe(raw::ctx(), "add".into())
            .await
            .unwrap()
            .unwrap();
        gridwise_localgrid::ghost::raise(&agent, &dial, "ghost", 40, &[add], 1e15).await
    });
    assert_eq!(ghosts.accepted, 40, "{:?}", ghosts.refusals);
    assert_eq!(c.status().unwrap().servers.len(), 43);
    // Every call is answered, and by a real server; each ghost costs at most one try before
    // the agent hears from the client that nobody reaches it.
    let mut tries = 0;
    for i in 0..200 {
        let r = c
            .call(&add, ints(&[i]))
            .unwrap_or_else(|e| panic!("call {i}: {e}\n{}", g.logs()));
        assert_eq!(r.outputs, ints(&[i + 1]));
        assert!(r.server.starts_with('s'), "{}", r.server);
        tries += r.attempts;
    }
    assert!(tries <= 200 + 40, "{tries} tries for 200 calls");
    drop(ghosts);
}

#[test]
fn a_call_pinned_to_a_server_whose_frames_are_too_small_is_refused_with_the_sizes() {
    let _one = serial();
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    g.server("small", "calibrate = false\nmax_frame_bytes = 65536\n");
    g.server("big", "calibrate = false\n");
    g.wait_up(2);
    let c = g.client();
    // Two 200 × 200 matrices: 0.64 MB inside the request (each below the bulk threshold).
    let pinned = c.function_handle_init("dgemm", "small").unwrap();
    let e = c.call(&pinned, dgemm_args(200, 200, 200)).unwrap_err();
    assert_eq!(e.code, ErrorCode::RpcRefused, "{e}");
    assert!(
        e.message.contains("resource limit")
            && e.message.contains("0.64 MB")
            && e.message.contains("max_frame_bytes is 0.07 MB"),
        "{e}"
    );
    // Unpinned, it goes where it fits.
    let any = c.function_handle_default("dgemm").unwrap();
    let r = c.call(&any, dgemm_args(200, 200, 200)).unwrap();
    assert_eq!(r.server, "big");
}

#[test]
fn tickets_and_kept_values_belong_to_the_client_that_made_them() {
    let _one = serial();
    let g = Grid::two_servers();
    let rt = raw::runtime();
    let agent = g.agent.addr.clone();
    let c = g.client();
    let dgemm = c.function_handle_default("dgemm").unwrap();
    let profile = dgemm.desc.profile(&dgemm_args(50, 50, 50)).unwrap();
    rt.block_on(async {
        let alice = raw::agent(&agent, &raw::dial(Role::Client, None, "alice"))
            .await
            .unwrap();
        let mallory = raw::agent(&agent, &raw::dial(Role::Client, None, "mallory"))
            .await
            .unwrap();
        let r = alice
            .rank(raw::ctx(), profile.clone(), Default::default())
            .await
            .unwrap()
            .unwrap();
        let pending = |st: &gridwise_proto::AgentStatus| -> u32 {
            st.servers.iter().map(|s| s.pending).sum()
        };
        mallory.release(raw::ctx(), r.ticket).await.unwrap();
        assert_eq!(pending(&alice.status(raw::ctx()).await.unwrap()), 1);
        alice.release(raw::ctx(), r.ticket).await.unwrap();
        assert_eq!(pending(&alice.status(raw::ctx()).await.unwrap()), 0);
    });
    // A kept value: only its maker fetches, renews or frees it.
    let kept = c.call_keep(&dgemm, dgemm_args(4, 4, 4), &[0]).unwrap();
    let Value::Ref(r) = kept.outputs[0].clone() else {
        panic!("not kept: {:?}", kept.outputs)
    };
    let other = g.client();
    let e = other.fetch(&r).unwrap_err();
    assert!(e.message.contains("not on"), "{e}");
    assert_eq!(other.free(std::slice::from_ref(&r)).unwrap(), 0);
    assert_eq!(other.renew(std::slice::from_ref(&r)).unwrap(), 0);
    assert_eq!(c.fetch(&r).unwrap(), Value::matrix_f64(4, 4, &[4.0; 16]));
    assert_eq!(c.free(&[r]).unwrap(), 1);
}

// --- 3. Fake registrations ----------------------------------------------------------------

#[test]
fn registrations_at_addresses_nobody_serves_are_refused_and_never_come_back() {
    let _one = serial();
    let mut extra: Vec<&str> = FAST_HEARTBEATS.to_vec();
    extra.extend(["--server-token", "for-servers"]);
    let mut g = Grid::agent(&extra);
    g.server("s1", "calibrate = false\nslots = 4\n");
    g.server("s2", "calibrate = false\nslots = 4\n");
    g.wait_up(2);
    let rt = raw::runtime();
    let agent = g.agent.addr.clone();
    let flood_started = Instant::now();
    let accepted = rt.block_on(async {
        let cl = raw::agent(
            &agent,
            &raw::dial(Role::Server, Some("for-servers"), "faker"),
        )
        .await
        .unwrap();
        let mut accepted = 0;
        // Eight at dead addresses would fill every candidate slot; then a flood.
        for i in 0..2000 {
            if let Ok(Ok(_)) = cl
                .register(raw::ctx(), fake(&format!("fake{i}"), &dead_addr()))
                .await
            {
                accepted += 1;
            }
        }
        accepted
    });
    assert_eq!(accepted, 0);
    // The rate limit comes before the dial: the agent dialled at most its burst (100) and 20
    // a second after it, not 2,000 dead addresses.
    let dials = g.logs().matches("the agent cannot reach it").count();
    let allowed = 100.0 + 20.0 * flood_started.elapsed().as_secs_f64() + 5.0;
    assert!(
        dials > 0 && (dials as f64) <= allowed,
        "{dials} dials for 2,000 registrations (at most {allowed:.0})"
    );
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    for i in 0..200 {
        assert_eq!(c.call(&add, ints(&[i])).unwrap().outputs, ints(&[i + 1]));
    }
    g.restart_agent().unwrap();
    g.wait_up(2);
    assert_eq!(c.status().unwrap().servers.len(), 2);
}

#[test]
fn a_registration_that_never_beats_is_forgotten_and_not_restored() {
    let _one = serial();
    // Without the address check, fakes get in; but they never send a heartbeat.
    let mut g = Grid::agent_with_config("verify_servers = false\n", &FAST_HEARTBEATS);
    g.server("s1", "calibrate = false\n");
    g.wait_up(1);
    let rt = raw::runtime();
    let agent = g.agent.addr.clone();
    rt.block_on(async {
        let cl = raw::agent(&agent, &raw::dial(Role::Server, None, "faker"))
            .await
            .unwrap();
        for i in 0..8 {
            cl.register(raw::ctx(), fake(&format!("fake{i}"), &dead_addr()))
                .await
                .unwrap()
                .unwrap();
        }
    });
    let c = g.client();
    assert_eq!(c.status().unwrap().servers.len(), 9);
    // Gone one heartbeat timeout (1 s) later, from memory and from disk.
    assert!(
        eventually(Duration::from_secs(15), || c
            .status()
            .unwrap()
            .servers
            .len()
            == 1),
        "{:?}",
        c.status().unwrap().servers
    );
    g.restart_agent().unwrap();
    g.wait_up(1);
    let st = c.status().unwrap();
    assert_eq!(st.servers.len(), 1, "{:?}", st.servers);
}

// --- 4. A frozen server -----------------------------------------------------------------------

#[test]
fn calls_on_a_frozen_server_move_to_the_others() {
    let _one = serial();
    let g = three("calibrate = false\nslots = 4\n");
    let mut cfg = g.client_config();
    cfg.liveness_interval_ms = 300;
    let c = gridwise_client::Client::connect(cfg).unwrap();
    let sleep = c.function_handle_default("sleep").unwrap();
    let ids: Vec<_> = (0..24)
        .map(|_| c.call_async(&sleep, ints(&[2])).unwrap())
        .collect();
    // Stop a server that has calls running.
    let rt = raw::runtime();
    let mut victim = None;
    assert!(eventually(Duration::from_secs(20), || {
        victim = rt.block_on(async {
            for (i, s) in g.servers.iter().enumerate() {
                let cl = raw::server(&s.addr, &raw::dial(Role::Client, None, "probe"))
                    .await
                    .ok()?;
                if cl.ping(raw::ctx()).await.ok()?.load.running > 0 {
                    return Some(i);
                }
            }
            None
        });
        victim.is_some()
    }));
    let pid = g.servers[victim.unwrap()].pid();
    signal(pid, libc::SIGSTOP);
    let frozen_at = Instant::now();
    // Every call completes while it is still stopped.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r: Vec<_> = ids.into_iter().map(|id| c.wait(id)).collect();
        let _ = tx.send(r);
    });
    let results = rx.recv_timeout(Duration::from_secs(60));
    let took = frozen_at.elapsed();
    signal(pid, libc::SIGCONT);
    let results = results.expect("calls hung on the frozen server");
    for r in results {
        let r = r.unwrap();
        assert!(r.outputs[0].as_double().unwrap() >= 2.0);
    }
    eprintln!(
        "all 24 calls done {:.1} s after the freeze",
        took.as_secs_f64()
    );
}

// --- 5. Connection limits -------------------------------------------------------------------

/// Opens `n` connections that say hello and then nothing.
fn idle_connections(addr: &str, n: usize) -> Vec<TcpStream> {
    let hello = gridwise_runtime::wire::hello_frame(
        &gridwise_runtime::wire::DialConfig::new(Role::Client, None),
        "idler",
    );
    (0..n)
        .filter_map(|_| {
            let mut s = TcpStream::connect(addr).ok()?;
            s.write_all(&hello).ok()?;
            Some(s)
        })
        .collect()
}

#[test]
fn idle_connections_cannot_lock_clients_out() {
    let _one = serial();
    let mut g = Grid::agent_with_config("max_connections = 300\n", &FAST_HEARTBEATS);
    g.server("s1", "calibrate = false\nmax_connections = 300\n");
    g.wait_up(1);
    let held_agent = idle_connections(&g.agent.addr, 1100);
    let held_server = idle_connections(&g.servers[0].addr.clone(), 1100);
    std::thread::sleep(Duration::from_millis(500));
    // A client still gets in, and its calls run.
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    for i in 0..20 {
        assert_eq!(c.call(&add, ints(&[i])).unwrap().outputs, ints(&[i + 1]));
    }
    for (who, pid) in [("agent", g.agent.pid()), ("server", g.servers[0].pid())] {
        let fds = open_fds(pid);
        assert!(fds < 400, "the {who} holds {fds} descriptors");
    }
    drop((held_agent, held_server));
}

/// Opens `n` connections, each announcing a frame of `announce` bytes after the hello and
/// sending `send` of them.
fn partial_frames(addr: &str, n: usize, announce: u32, send: usize) -> Vec<TcpStream> {
    let hello = gridwise_runtime::wire::hello_frame(
        &gridwise_runtime::wire::DialConfig::new(Role::Client, None),
        "hog",
    );
    let chunk = vec![0u8; 1 << 20];
    (0..n)
        .filter_map(|_| {
            let mut s = TcpStream::connect(addr).ok()?;
            s.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
            s.write_all(&hello).ok()?;
            let mut reply = [0u8; 64];
            s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            let _ = s.read(&mut reply);
            s.write_all(&announce.to_be_bytes()).ok()?;
            let mut sent = 0;
            while sent < send {
                let n = chunk.len().min(send - sent);
                if s.write_all(&chunk[..n]).is_err() {
                    break;
                }
                sent += n;
            }
            Some(s)
        })
        .collect()
}

#[test]
fn frames_that_never_finish_cannot_grow_a_daemon() {
    let _one = serial();
    let mut g = Grid::agent_with_config("memory_budget_bytes = 67108864\n", &FAST_HEARTBEATS);
    g.server(
        "s1",
        "calibrate = false\nmax_frame_bytes = 134217728\nmemory_budget_bytes = 268435456\n",
    );
    g.wait_up(1);
    let agent_before = rss_bytes(g.agent.pid());
    // 24 frames of 15 MB, each 14 MB in, at the agent (16 MiB frames, 64 MiB budget)…
    let a = partial_frames(&g.agent.addr, 24, 15 << 20, 14 << 20);
    let agent_growth = rss_bytes(g.agent.pid()).saturating_sub(agent_before);
    // …and 4 frames of 120 MB, 100 MB in, at the server (128 MiB frames, 256 MiB budget).
    let server_before = rss_bytes(g.servers[0].pid());
    let s = partial_frames(&g.servers[0].addr.clone(), 4, 120 << 20, 100 << 20);
    let server_growth = rss_bytes(g.servers[0].pid()).saturating_sub(server_before);
    eprintln!(
        "agent grew {} MB, server {} MB",
        agent_growth >> 20,
        server_growth >> 20
    );
    assert!(
        agent_growth < 180 << 20,
        "agent grew {} MB",
        agent_growth >> 20
    );
    assert!(
        server_growth < 300 << 20,
        "server grew {} MB",
        server_growth >> 20
    );
    assert!(g.logs().contains("memory budget"), "{}", g.logs());
    let c = g.client();
    let add = c.function_handle_default("add").unwrap();
    assert_eq!(c.call(&add, ints(&[1])).unwrap().outputs, ints(&[2]));
    drop((a, s));
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let _one = serial();
    let g = Grid::agent_with_config("idle_timeout_s = 1.0\n", &FAST_HEARTBEATS);
    let mut held = idle_connections(&g.agent.addr, 1);
    let mut s = held.pop().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The hello's answer, then the end of the stream.
    let mut buf = [0u8; 256];
    let mut closed = false;
    for _ in 0..4 {
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => continue,
            Err(e) => panic!("no close, but {e}"),
        }
    }
    assert!(closed, "the idle connection stayed open");
}

// --- 6. Queue estimates for calls without a complexity ------------------------------------------

#[test]
fn pending_sleeps_count_in_the_queue_and_other_calls_go_elsewhere() {
    let _one = serial();
    let mut g = Grid::agent(&FAST_HEARTBEATS);
    g.server("s1", "calibrate = false\nslots = 1\n");
    g.server("s2", "calibrate = false\nslots = 1\n");
    g.wait_up(2);
    let c = g.client();
    let on_s1 = c.function_handle_init("sleep", "s1").unwrap();
    let ids: Vec<_> = (0..10)
        .map(|_| c.call_async(&on_s1, ints(&[1])).unwrap())
        .collect();
    assert!(eventually(Duration::from_secs(10), || c
        .status()
        .unwrap()
        .servers
        .iter()
        .any(|s| s.name == "s1" && s.pending >= 9)));
    let sleep = c.function_handle_default("sleep").unwrap();
    let profile = sleep.desc.profile(&ints(&[0])).unwrap();
    let cands = c.explain(profile, Default::default()).unwrap();
    let s1 = cands.iter().find(|x| x.name == "s1").unwrap();
    assert!(s1.etc.queue_wait_s > 5.0, "{:?}", s1.etc);
    // An unpinned call does not wait behind them.
    let add = c.function_handle_default("add").unwrap();
    let started = Instant::now();
    assert_eq!(c.call(&add, ints(&[1])).unwrap().server, "s2");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Unpinned sleeps go to the idle server.
    let more: Vec<_> = (0..4)
        .map(|_| c.call_async(&sleep, ints(&[1])).unwrap())
        .collect();
    for id in more {
        assert_eq!(c.wait(id).unwrap().server, "s2");
    }
    for id in ids {
        c.wait(id).unwrap();
    }
}

// --- 7. Smaller findings ----------------------------------------------------------------------

#[test]
fn an_agent_that_cannot_serve_refuses_to_start_and_says_why() {
    let _one = serial();
    let exe = gridwise_e2e::bin("gridwise-agent");
    let dir = tempfile::tempdir().unwrap();
    let start = |args: &[String]| {
        gridwise_localgrid::Daemon::spawn(&exe, args, &dir.path().join("a.log"), "agent")
            .err()
            .map(|e| format!("{e:#}"))
    };
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "max_frame_bytes = 0\n").unwrap();
    let e = start(&[
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--config".into(),
        cfg.display().to_string(),
    ])
    .expect("an agent with max_frame_bytes = 0 started");
    assert!(e.contains("max_frame_bytes = 0"), "{e}");
    // A data directory it cannot open: it never announces `listening`.
    let e = start(&[
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        "/proc/gridwise-cannot-be-here".into(),
    ])
    .expect("an agent without a data directory started");
    assert!(e.contains("data directory"), "{e}");
}

#[test]
fn failing_disk_writes_show_in_status_and_are_retried() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("agent-data");
    let data_s = data.display().to_string();
    let mut extra: Vec<&str> = FAST_HEARTBEATS.to_vec();
    extra.extend(["--data-dir", &data_s]);
    let mut g = Grid::agent(&extra);
    // Another process holds the database while the servers join.
    let db = data.join(gridwise_store::DB_FILE);
    let holder = rusqlite::Connection::open(&db).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    g.server("s1", "calibrate = false\n");
    g.server("s2", "calibrate = false\n");
    g.wait_up(2);
    let c = g.client();
    assert!(
        eventually(Duration::from_secs(30), || !c.status().unwrap().storage.ok),
        "storage never reported failing"
    );
    let st = c.status().unwrap();
    assert!(st.storage.pending_writes > 0, "{:?}", st.storage);
    holder.execute_batch("COMMIT").unwrap();
    drop(holder);
    assert!(
        eventually(Duration::from_secs(30), || {
            let s = c.status().unwrap().storage;
            s.ok && s.pending_writes == 0
        }),
        "{:?}",
        c.status().unwrap().storage
    );
    // What was learned while the disk failed is there after a restart: both servers.
    g.restart_agent().unwrap();
    let after = g.client().status().unwrap();
    assert_eq!(after.servers.len(), 2, "{:?}", after.servers);
}
