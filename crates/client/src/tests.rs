//! Client behaviour against the in-process test agent and servers.

use crate::testutil::{Grid, Proxy, dead_addr};
use crate::*;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn ints(a: i64, b: i64) -> Vec<Value> {
    vec![Value::Int(a), Value::Int(b)]
}

async fn client(grid: &Grid) -> GridClient {
    GridClient::connect(grid.config()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_runs_on_the_first_candidate() {
    let grid = Grid::start(&["s1", "s2"]).await;
    let c = client(&grid).await;
    let add = c.function_handle_default("add").await.unwrap();
    let r = c.call(&add, ints(2, 3)).await.unwrap();
    assert_eq!(r.outputs, vec![Value::Int(5)]);
    assert_eq!(r.server, "s1");
    assert_eq!(r.attempts, 1);
    assert!(r.predicted.is_some());
    assert!(r.rank_s > 0.0 && r.round_trip_s > 0.0);
    assert_eq!(grid.server("s1").executes.load(Ordering::SeqCst), 1);
    // The pooled connection is reused.
    let r = c.call(&add, ints(1, 1)).await.unwrap();
    assert_eq!(r.outputs, vec![Value::Int(2)]);
    assert_eq!(grid.agent.ranks.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_falls_back_to_the_next_server() {
    let grid = Grid::start(&["dead1", "s2"]).await;
    let c = client(&grid).await;
    let add = c.function_handle_default("add").await.unwrap();
    let r = c.call(&add, ints(4, 5)).await.unwrap();
    assert_eq!(r.server, "s2");
    assert_eq!(r.attempts, 2);
    assert_eq!(r.outputs, vec![Value::Int(9)]);
    assert!(grid.agent.released.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_error_is_not_retried() {
    let grid = Grid::start(&["s1", "s2"]).await;
    let c = client(&grid).await;
    let fail = c.function_handle_default("fail").await.unwrap();
    let e = c.call(&fail, ints(1, 2)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::SessionFailed);
    assert!(e.message.contains("the kernel says no"), "{e}");
    assert_eq!(grid.server("s1").executes.load(Ordering::SeqCst), 1);
    assert_eq!(grid.server("s2").executes.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_server_fails_each_is_named_and_the_ticket_released() {
    let grid = Grid::start(&["s1", "dead2", "s3"]).await;
    let c = client(&grid).await;
    let busy = c.function_handle_default("busy").await.unwrap();
    let e = c.call(&busy, ints(1, 2)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::CommunicationFailed);
    for name in ["s1", "dead2", "s3", "shutting down"] {
        assert!(e.message.contains(name), "{e}");
    }
    assert_eq!(grid.server("s3").executes.load(Ordering::SeqCst), 1);
    wait_until(|| grid.agent.released.lock().unwrap().len() == 1).await;
    // Only the server nobody could connect to is reported unreachable (the others answered
    // and refused), with the ticket of the ranking that named it.
    wait_until(|| !grid.agent.unreachable.lock().unwrap().is_empty()).await;
    let told = grid.agent.unreachable.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].0, grid.agent.released.lock().unwrap()[0]);
}

/// `dead1` (ranked first, not listening) and `s2`; a client that pings every 100 ms, whose
/// first call found `dead1` unreachable and ran on `s2`.
async fn with_dead1_passed_over() -> (Grid, GridClient) {
    let grid = Grid::start(&["dead1", "s2"]).await;
    let c = GridClient::connect(crate::ClientConfig {
        liveness_interval_ms: 100,
        ..grid.config()
    })
    .await
    .unwrap();
    let add = c.function_handle_default("add").await.unwrap();
    assert_eq!(c.call(&add, ints(1, 2)).await.unwrap().server, "s2");
    (grid, c)
}

/// A call the client sends anywhere but where its ranking reserved it is told to the agent,
/// whose queues would otherwise hold it on a server that never sees it: after a failover, and
/// when the reserved server is passed over because the client holds it unresponsive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_hears_where_a_call_went_instead_of_its_reserved_server() {
    let (grid, c) = with_dead1_passed_over().await;
    wait_until(|| !grid.agent.placed.lock().unwrap().is_empty()).await;
    let unreachable = grid.agent.unreachable.lock().unwrap()[0].0;
    let placed = grid.agent.placed.lock().unwrap().clone();
    assert_eq!(placed.len(), 1, "{placed:?}");
    assert_eq!(
        placed[0].0, unreachable,
        "the failed-over call's own ticket"
    );
    // dead1 is still ranked first; the client goes straight to s2 and says so.
    assert!(c.unresponsive_servers().contains(&grid.addr_of("dead1")));
    let add = c.function_handle_default("add").await.unwrap();
    let r = c.call(&add, ints(2, 2)).await.unwrap();
    assert_eq!((r.server.as_str(), r.attempts), ("s2", 1));
    wait_until(|| grid.agent.placed.lock().unwrap().len() == 2).await;
    // A call run where it was reserved tells nothing.
    let fine = Grid::start(&["s1"]).await;
    let c = client(&fine).await;
    let add = c.function_handle_default("add").await.unwrap();
    c.call(&add, ints(1, 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(fine.agent.placed.lock().unwrap().is_empty());
}

/// A server the client could not reach comes up again (its partition healed): the client,
/// pinging it meanwhile, tells the agent, which ends the suspicion its report set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reported_unreachable_is_reported_reachable_once_it_answers() {
    let (mut grid, c) = with_dead1_passed_over().await;
    wait_until(|| !grid.agent.unreachable.lock().unwrap().is_empty()).await;
    let dead = grid.agent.unreachable.lock().unwrap()[0].1;
    assert!(c.unresponsive_servers().contains(&grid.addr_of("dead1")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(grid.agent.reachable.lock().unwrap().is_empty());
    grid.revive("dead1").await;
    wait_until(|| grid.agent.reachable.lock().unwrap().as_slice() == [dead]).await;
    assert!(c.unresponsive_servers().is_empty());
}

/// A call queued on a lower-ranked server, because the first was not answering, moves to the
/// first once it answers again, if it has not started: the queued one is taken back (never run
/// there) and the call runs once, where the agent ranked it first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_call_moves_to_a_server_ranked_above_that_answers_again() {
    let (mut grid, c) = with_dead1_passed_over().await;
    assert!(c.unresponsive_servers().contains(&grid.addr_of("dead1")));
    // The test server treats a `sleep` as waiting for a slot: it can be taken back.
    let sleep = c.function_handle_default("sleep").await.unwrap();
    let id = c.call_async(&sleep, ints(3_000, 0)).unwrap();
    wait_until(|| grid.server("s2").executes.load(Ordering::SeqCst) == 1).await;
    let started = Instant::now();
    let revived = grid.revive("dead1").await;
    let r = c.wait(id).await.unwrap();
    assert_eq!(r.server, "dead1");
    assert_eq!(r.attempts, 2);
    assert_eq!(grid.server("s2").withdrawals.lock().unwrap().len(), 1);
    assert_eq!(revived.executes.load(Ordering::SeqCst), 1);
    // It slept its 3 s once, on the revived server, not first on s2.
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
}

/// A call sent where the agent ranked it first is never taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_its_first_ranked_server_stays_there() {
    let grid = Grid::start(&["s1", "s2"]).await;
    let c = client(&grid).await;
    let sleep = c.function_handle_default("sleep").await.unwrap();
    let r = c.call(&sleep, ints(200, 0)).await.unwrap();
    assert_eq!((r.server.as_str(), r.attempts), ("s1", 1));
    assert!(grid.server("s1").withdrawals.lock().unwrap().is_empty());
}

async fn wait_until(mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "condition not met in time"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_or_and_wait_any_follow_completion_order() {
    let grid = Grid::start(&["s1"]).await;
    let c = client(&grid).await;
    let sleep = c.function_handle_default("sleep").await.unwrap();
    let slow = c.call_async(&sleep, ints(400, 0)).unwrap();
    let fast = c.call_async(&sleep, ints(20, 0)).unwrap();
    let mid = c.call_async(&sleep, ints(200, 0)).unwrap();
    let (first, r) = c.wait_or(&[slow, fast, mid]).await.unwrap();
    assert_eq!(first, fast);
    assert_eq!(r.outputs, vec![Value::Int(20)]);
    // Once all are done, the order they finished in still decides.
    c.probe(slow).unwrap_err();
    for id in [slow, mid] {
        while c.probe(id).is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert_eq!(c.probe_or(&[slow, mid]).unwrap(), mid);
    let (id, _) = c.wait_or(&[slow, mid]).await.unwrap();
    assert_eq!(id, mid);
    let (id, r) = c.wait_any().await.unwrap();
    assert_eq!(id, slow);
    assert_eq!(r.outputs, vec![Value::Int(400)]);
    assert_eq!(
        c.wait_any().await.unwrap_err().code,
        ErrorCode::InvalidSessionId
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_reports_progress() {
    let grid = Grid::start(&["s1"]).await;
    let c = client(&grid).await;
    let sleep = c.function_handle_default("sleep").await.unwrap();
    let id = c.call_async(&sleep, ints(200, 0)).unwrap();
    assert_eq!(c.probe(id).unwrap_err().code, ErrorCode::NotCompleted);
    assert_eq!(
        c.probe_or(&[id]).unwrap_err().code,
        ErrorCode::NoneCompleted
    );
    assert_eq!(c.get_handle(id).unwrap(), sleep);
    c.wait_and(&[id]).await.unwrap();
    assert_eq!(c.probe(id).unwrap_err().code, ErrorCode::InvalidSessionId);
    assert_eq!(
        c.probe(SessionId(999)).unwrap_err().code,
        ErrorCode::InvalidSessionId
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_call_on_the_server() {
    let grid = Grid::start(&["s1"]).await;
    let c = client(&grid).await;
    let sleep = c.function_handle_default("sleep").await.unwrap();
    let id = c.call_async(&sleep, ints(30_000, 0)).unwrap();
    wait_until(|| grid.server("s1").executes.load(Ordering::SeqCst) == 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    c.cancel(id).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    let cancels = grid.server("s1").cancels.lock().unwrap().clone();
    assert_eq!(cancels.len(), 1);
    assert!(
        cancels[0].1,
        "the server was running the call it was told to cancel"
    );
    let e = c.wait(id).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::SessionFailed);
    assert!(e.message.contains("cancelled"), "{e}");
    assert_eq!(c.get_error(id).unwrap(), Some(e));
    // A finished session: no effect. An unknown one: invalid.
    let add = c.function_handle_default("add").await.unwrap();
    let done = c.call_async(&add, ints(1, 1)).unwrap();
    while c.probe(done).is_err() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    c.cancel(done).await.unwrap();
    assert_eq!(c.wait(done).await.unwrap().outputs, vec![Value::Int(2)]);
    assert_eq!(
        c.cancel(SessionId(12345)).await.unwrap_err().code,
        ErrorCode::InvalidSessionId
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_ranking_releases_the_ticket() {
    let grid = Grid::start(&["s1"]).await;
    let c = client(&grid).await;
    let add = c.function_handle_default("add").await.unwrap();
    grid.agent.rank_delay_ms.store(200, Ordering::SeqCst);
    let a = c.call_async(&add, ints(1, 1)).unwrap();
    let b = c.call_async(&add, ints(1, 1)).unwrap();
    wait_until(|| grid.agent.ranks.load(Ordering::SeqCst) == 2).await;
    c.cancel_all().await.unwrap();
    for id in [a, b] {
        let e = c.wait(id).await.unwrap_err();
        assert!(e.message.contains("cancelled"), "{e}");
    }
    wait_until(|| grid.agent.released.lock().unwrap().len() == 2).await;
    assert_eq!(grid.server("s1").executes.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_arguments_fail_before_anything_is_sent() {
    let grid = Grid::start(&["s1"]).await;
    let c = client(&grid).await;
    let add = c.function_handle_default("add").await.unwrap();
    let e = c
        .call_async(&add, vec![Value::Double(1.0), Value::Int(2)])
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::OtherErrorCode);
    assert!(e.message.contains("must be int"), "{e}");
    let e = c.call(&add, vec![Value::Int(1)]).await.unwrap_err();
    assert!(e.message.contains("takes 2 input"), "{e}");
    assert_eq!(grid.agent.ranks.load(Ordering::SeqCst), 0);
    assert_eq!(grid.server("s1").executes.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_wait_is_an_invalid_session() {
    let grid = Grid::start(&["s1"]).await;
    let c = client(&grid).await;
    let add = c.function_handle_default("add").await.unwrap();
    let id = c.call_async(&add, ints(3, 4)).unwrap();
    assert_eq!(c.wait(id).await.unwrap().outputs, vec![Value::Int(7)]);
    let e = c.wait(id).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidSessionId);
    // Succeeded: no error. Never issued: an invalid id (GFD.52), not "no error".
    assert_eq!(c.get_error(id), Ok(None));
    for never in [SessionId(0), SessionId(id.0 + 1), SessionId(u64::MAX)] {
        assert_eq!(
            c.get_error(never).unwrap_err().code,
            ErrorCode::InvalidSessionId
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_or_and_wait_any_name_a_failed_session() {
    let grid = Grid::start(&["s1"]).await;
    let c = client(&grid).await;
    let fail = c.function_handle_default("fail").await.unwrap();
    let a = c.call_async(&fail, ints(0, 0)).unwrap();
    let e = c.wait_or(&[a]).await.unwrap_err();
    assert_eq!((e.code, e.session), (ErrorCode::SessionFailed, Some(a)));
    let b = c.call_async(&fail, ints(0, 0)).unwrap();
    let e = c.wait_any().await.unwrap_err();
    assert_eq!((e.code, e.session), (ErrorCode::SessionFailed, Some(b)));
    // Errors that belong to no session name none.
    let e = c.wait_any().await.unwrap_err();
    assert_eq!((e.code, e.session), (ErrorCode::InvalidSessionId, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_all_names_the_failed_session() {
    let grid = Grid::start(&["s1"]).await;
    let c = client(&grid).await;
    let add = c.function_handle_default("add").await.unwrap();
    let fail = c.function_handle_default("fail").await.unwrap();
    let ok1 = c.call_async(&add, ints(1, 2)).unwrap();
    let bad = c.call_async(&fail, ints(0, 0)).unwrap();
    let ok2 = c.call_async(&add, ints(3, 4)).unwrap();
    let e = c.wait_all().await.unwrap_err();
    assert_eq!(e.code, ErrorCode::SessionFailed);
    assert!(e.message.contains(&bad.to_string()), "{e}");
    assert_eq!(c.get_failed_session_id(), Some(bad));
    assert_eq!(c.get_failed_session_id(), None);
    assert_eq!(
        c.get_error(bad).unwrap().unwrap().code,
        ErrorCode::SessionFailed
    );
    assert_eq!(c.get_error(ok1), Ok(None));
    // The successful sessions are not lost.
    let all = c.wait_all().await.unwrap();
    let ids: Vec<SessionId> = all.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![ok1, ok2]);
    assert_eq!(all[1].1.outputs, vec![Value::Int(7)]);

    let ok3 = c.call_async(&add, ints(5, 5)).unwrap();
    let bad2 = c.call_async(&fail, ints(0, 0)).unwrap();
    let e = c.wait_and(&[ok3, bad2]).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::SessionFailed);
    assert_eq!(c.get_failed_session_id(), Some(bad2));
    assert_eq!(
        c.wait_and(&[ok3]).await.unwrap()[0].outputs,
        vec![Value::Int(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_async_calls_all_complete() {
    let grid = Grid::start(&["s1", "s2"]).await;
    let c = client(&grid).await;
    let add = c.function_handle_default("add").await.unwrap();
    let ids: Vec<SessionId> = (0..2000)
        .map(|i| c.call_async(&add, ints(i, 1)).unwrap())
        .collect();
    let results = c.wait_and(&ids).await.unwrap();
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.outputs, vec![Value::Int(i as i64 + 1)]);
    }
    assert!(c.wait_all().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_check_services_and_servers() {
    let grid = Grid::start(&["s1", "s2"]).await;
    let c = client(&grid).await;
    let e = c.function_handle_default("nope").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::FunctionNotFound);
    let e = c.function_handle_init("add", "s9").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::ServerNotFound);
    assert!(e.message.contains("s1"), "{e}");
    let e = c.function_handle_init("busy", "s1").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::FunctionNotFound);
    let pinned = c.function_handle_init("add", "s2").await.unwrap();
    assert_eq!(pinned.binding, Binding::Server("s2".into()));
    // GridRPC programs name a server by host:port; `localhost` resolves to the same socket.
    let addr = grid.addr_of("s2");
    let by_addr = c.function_handle_init("add", &addr).await.unwrap();
    assert_eq!(by_addr.binding, Binding::Server("s2".into()));
    let port = addr.rsplit_once(':').unwrap().1;
    let by_host = c
        .function_handle_init("add", &format!("localhost:{port}"))
        .await
        .unwrap();
    assert_eq!(by_host.binding, Binding::Server("s2".into()));
    let e = c
        .function_handle_init("add", "127.0.0.1:1")
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::ServerNotFound);
    let r = c.call(&pinned, ints(1, 2)).await.unwrap();
    assert_eq!(r.server, "s2");
    let id = c.call_async(&pinned, ints(1, 2)).unwrap();
    assert_eq!(
        c.get_handle(id).unwrap().binding,
        Binding::Server("s2".into())
    );
    c.function_handle_destruct(&pinned).unwrap();
    assert_eq!(
        c.function_handle_destruct(&pinned).unwrap_err().code,
        ErrorCode::InvalidFunctionHandle
    );
    let e = c.call(&pinned, ints(1, 2)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidFunctionHandle);
    // The session started before the destruct still completes.
    assert_eq!(c.wait(id).await.unwrap().server, "s2");
    // Passthroughs.
    assert_eq!(c.status().await.unwrap().servers.len(), 2);
    assert_eq!(c.list_services().await.unwrap().len(), 4);
    assert_eq!(c.describe("sleep").await.unwrap().name, "sleep");
    let profile = c
        .describe("add")
        .await
        .unwrap()
        .profile(&ints(1, 2))
        .unwrap();
    assert_eq!(
        c.explain(profile, RankOptions::default())
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn connecting_to_nothing_fails_readably() {
    let addr = dead_addr();
    let e = GridClient::connect(ClientConfig::with_agent(&addr))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::CommunicationFailed);
    assert!(e.message.contains(&addr), "{e}");
    assert!(e.message.contains("agent"), "{e}");
    // The blocking client refuses to run inside a runtime instead of panicking.
    let e = Client::connect(ClientConfig::with_agent(&addr)).unwrap_err();
    assert_eq!(e.code, ErrorCode::OtherErrorCode);
}

/// Test servers on their own runtime, for the blocking API (which must not run inside one).
fn background_grid(names: &[&str]) -> (tokio::runtime::Runtime, Grid) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let grid = rt.block_on(Grid::start(names));
    (rt, grid)
}

#[test]
fn the_blocking_client_works_from_plain_threads() {
    let (_rt, grid) = background_grid(&["s1"]);
    let c = std::sync::Arc::new(Client::connect(grid.config()).unwrap());
    let add = c.function_handle_default("add").unwrap();
    assert_eq!(
        c.call(&add, ints(20, 22)).unwrap().outputs,
        vec![Value::Int(42)]
    );
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (c, add) = (c.clone(), add.clone());
            std::thread::spawn(move || {
                for i in 0..50 {
                    let r = c.call(&add, ints(t, i)).unwrap();
                    assert_eq!(r.outputs, vec![Value::Int(t + i)]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let sleep = c.function_handle_default("sleep").unwrap();
    let a = c.call_async(&sleep, ints(100, 0)).unwrap();
    let b = c.call_async(&sleep, ints(10, 0)).unwrap();
    assert_eq!(c.wait_or(&[a, b]).unwrap().0, b);
    let long = c.call_async(&sleep, ints(30_000, 0)).unwrap();
    c.cancel(long).unwrap();
    assert!(c.wait(long).unwrap_err().message.contains("cancelled"));
    assert_eq!(c.wait(a).unwrap().outputs, vec![Value::Int(100)]);
    drop(c);
}

#[test]
fn the_global_api_follows_gfd52() {
    use crate::grpc;
    let (_rt, grid) = background_grid(&["s1"]);
    let e = grpc::function_handle_default("add").unwrap_err();
    assert_eq!(e.code, ErrorCode::NotInitialized);
    assert_eq!(
        grpc::finalize().unwrap_err().code,
        ErrorCode::NotInitialized
    );
    assert_eq!(
        grpc::wait(SessionId(1)).unwrap_err().code,
        ErrorCode::NotInitialized
    );
    assert_eq!(
        grpc::initialize("/definitely/not/here.toml")
            .unwrap_err()
            .code,
        ErrorCode::ConfigfileNotFound
    );

    grpc::initialize_with(grid.config()).unwrap();
    assert!(grpc::is_initialized());
    assert_eq!(
        grpc::initialize_with(grid.config()).unwrap_err().code,
        ErrorCode::AlreadyInitialized
    );
    assert_eq!(
        grpc::initialize("/definitely/not/here.toml")
            .unwrap_err()
            .code,
        ErrorCode::AlreadyInitialized
    );
    let add = grpc::function_handle_default("add").unwrap();
    assert_eq!(
        grpc::call(&add, ints(1, 2)).unwrap().outputs,
        vec![Value::Int(3)]
    );
    let id = grpc::call_async(&add, ints(2, 2)).unwrap();
    assert_eq!(grpc::get_handle(id).unwrap(), add);
    assert_eq!(grpc::wait(id).unwrap().outputs, vec![Value::Int(4)]);
    assert_eq!(
        grpc::wait(id).unwrap_err().code,
        ErrorCode::InvalidSessionId
    );
    let fail = grpc::function_handle_default("fail").unwrap();
    let bad = grpc::call_async(&fail, ints(0, 0)).unwrap();
    assert_eq!(grpc::wait_all().unwrap_err().code, ErrorCode::SessionFailed);
    assert_eq!(grpc::get_failed_session_id().unwrap(), Some(bad));
    assert!(grpc::get_error(bad).unwrap().is_some());
    assert_eq!(
        grpc::get_error(SessionId(9_999)).unwrap_err().code,
        ErrorCode::InvalidSessionId
    );
    // The argument stack: the same call, its arguments pushed at run time.
    let mut stack = grpc::ArgStack::new(2);
    stack.push_arg(Value::Int(5)).unwrap();
    stack.push_arg(Value::Int(9)).unwrap();
    assert_eq!(
        stack.push_arg(Value::Int(0)).unwrap_err().code,
        ErrorCode::OtherErrorCode
    );
    assert_eq!(
        grpc::call_argstack(&add, &stack).unwrap().outputs,
        vec![Value::Int(14)]
    );
    let id = grpc::call_argstack_async(&add, &stack).unwrap();
    assert_eq!(grpc::wait(id).unwrap().outputs, vec![Value::Int(14)]);
    assert_eq!(stack.pop_arg(), Some(Value::Int(9)));
    assert_eq!(stack.args(), &[Value::Int(5)]);
    assert_eq!(
        grpc::error_string_of(99),
        ErrorCode::UnknownErrorCode.message()
    );
    assert_eq!(
        grpc::error_string_of(10),
        ErrorCode::SessionFailed.message()
    );
    grpc::function_handle_destruct(&add).unwrap();
    grpc::finalize().unwrap();
    assert!(!grpc::is_initialized());
    assert_eq!(
        grpc::call(&fail, ints(1, 2)).unwrap_err().code,
        ErrorCode::NotInitialized
    );

    // Again, from a configuration file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("client.toml");
    std::fs::write(&path, format!("agent = \"{}\"\n", grid.agent_addr)).unwrap();
    grpc::initialize(&path).unwrap();
    let add = grpc::function_handle_default("add").unwrap();
    let ids = [
        grpc::call_async(&add, ints(1, 0)).unwrap(),
        grpc::call_async(&add, ints(2, 0)).unwrap(),
    ];
    let done = grpc::wait_and(&ids).unwrap();
    assert_eq!(done.len(), 2);
    grpc::finalize().unwrap();
    assert_eq!(
        grpc::error_string(ErrorCode::NotInitialized),
        ErrorCode::NotInitialized.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_agent_connection_is_reopened() {
    let grid = Grid::start(&["s1"]).await;
    let proxy = Proxy::start(grid.agent_addr.clone()).await;
    let c = GridClient::connect(ClientConfig::with_agent(&proxy.addr))
        .await
        .unwrap();
    let add = c.function_handle_default("add").await.unwrap();
    c.call(&add, ints(1, 1)).await.unwrap();
    for round in 0..3 {
        proxy.cut();
        // Straight away (the failure is seen by the request) and after the close is noticed.
        c.call(&add, ints(round, 1)).await.unwrap();
        proxy.cut();
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.call(&add, ints(round, 2)).await.unwrap();
    }
    assert!(proxy.accepted.load(Ordering::SeqCst) >= 4);
}

/// A client of several agents whose calls all run on servers asks its agent nothing, so it
/// nudges it, and moves to the next agent as soon as that connection closes: by the time it
/// needs an agent again it has one. Idle, it sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_client_of_several_agents_moves_before_it_needs_one_again() {
    let grid = Grid::start(&["s1"]).await;
    let proxies = [
        Proxy::start(grid.agent_addr.clone()).await,
        Proxy::start(grid.agent_addr.clone()).await,
    ];
    let mut cfg = ClientConfig::with_agent(&proxies[0].addr);
    cfg.agents = proxies.iter().map(|p| p.addr.clone()).collect();
    let c = GridClient::connect(cfg).await.unwrap();
    let sleep = c.function_handle_default("sleep").await.unwrap();
    let sinks = || grid.agent.sinks.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(sinks(), 0, "an idle client nudges nobody");
    let (used, other) = if c.agent_addr() == proxies[0].addr {
        (&proxies[0], &proxies[1])
    } else {
        (&proxies[1], &proxies[0])
    };
    let id = c.call_async(&sleep, ints(3000, 0)).unwrap();
    let running = || !grid.server("s1").running.lock().unwrap().is_empty();
    wait_until(running).await;
    wait_until(|| sinks() >= 2).await;
    used.cut();
    wait_until(|| c.agent_addr() == other.addr).await;
    assert!(running(), "moved while the call still ran");
    assert_eq!(other.accepted.load(Ordering::SeqCst), 1);
    let r = c.wait(id).await.unwrap();
    assert_eq!((r.server.as_str(), r.attempts), ("s1", 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_server_connection_is_reopened() {
    let grid = Grid::start(&["s1", "s2"]).await;
    let proxy = grid.proxy_server("s1").await;
    let c = client(&grid).await;
    let add = c.function_handle_default("add").await.unwrap();
    assert_eq!(c.call(&add, ints(1, 1)).await.unwrap().server, "s1");
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The closed pooled connection is replaced, not used.
    let r = c.call(&add, ints(1, 1)).await.unwrap();
    assert_eq!((r.server.as_str(), r.attempts), ("s1", 1));
    assert_eq!(proxy.accepted.load(Ordering::SeqCst), 2);
    // A connection lost under a running call: the call moves to the next server, and the
    // next call reconnects to the first.
    let sleep = c.function_handle_default("sleep").await.unwrap();
    let id = c.call_async(&sleep, ints(500, 0)).unwrap();
    wait_until(|| grid.server("s1").executes.load(Ordering::SeqCst) == 3).await;
    proxy.cut();
    let r = c.wait(id).await.unwrap();
    assert_eq!((r.server.as_str(), r.attempts), ("s2", 2));
    assert_eq!(c.call(&add, ints(2, 2)).await.unwrap().server, "s1");
    assert_eq!(proxy.accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_agent_listening_says_where_the_client_took_its_address_from() {
    let dead = dead_addr();
    let e = match GridClient::connect(ClientConfig::with_agent(&dead)).await {
        Err(e) => e,
        Ok(_) => panic!("a client connected to {dead}, where nothing listens"),
    };
    assert_eq!(e.code, gridwise_proto::ErrorCode::CommunicationFailed);
    assert!(e.message.contains(&dead), "{}", e.message);
    for hint in ["is an agent running", "GRIDWISE_AGENT", "--agent"] {
        assert!(e.message.contains(hint), "no `{hint}` in: {}", e.message);
    }
}
