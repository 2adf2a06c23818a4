//! Tests of the store and the writer.

use crate::*;
use gridwise_proto::{
    ArgDesc, ArgMode, CallReport, Registration, ServerId, ServiceDesc, Ticket, Timing,
};
use proptest::prelude::*;
use std::path::Path;
use std::time::Duration;

fn service(name: &str, complexity: &str) -> ServiceDesc {
    ServiceDesc {
        memory: None,
        duration: None,
        name: name.into(),
        doc: format!("{name} for tests"),
        args: vec![
            ArgDesc::new("n", ArgMode::In, "int"),
            ArgDesc::new("x", ArgMode::InOut, "vector<f64>[n]"),
        ],
        size_params: vec!["n".into()],
        complexity: Some(complexity.into()),
    }
}

fn registration(name: &str, port: u16) -> Registration {
    Registration {
        secret: None,
        instance: String::new(),
        max_frame_bytes: u64::MAX,
        sleeping: Vec::new(),
        not_offered: Vec::new(),
        memory_budget_bytes: u64::MAX,
        name: name.into(),
        addr: format!("127.0.0.1:{port}"),
        slots: 2,
        services: vec![service("scale", "n")],
        rates: vec![("scale".into(), 1.5e9)],
        default_rate: 2.5e9,
        memory_bytes: 16 << 30,
        cores: 8,
    }
}

fn point(server: &str, service: &str, x: &[i64], mean: f64, source: PointSource) -> PointRow {
    PointRow {
        server: server.into(),
        service: service.into(),
        x: x.to_vec(),
        count: 3,
        min: mean * 0.9,
        mean,
        max: mean * 1.2,
        source,
        sd: mean * 0.1,
    }
}

fn load(server: &str, at_unix_s: f64, loadavg: f64) -> LoadRow {
    LoadRow {
        server: server.into(),
        at_unix_s,
        loadavg_1m: Some(loadavg),
        cpu_available: Some(1.0 / (1.0 + loadavg)),
        free_memory_bytes: None,
    }
}

fn report(service: &str, n: i64, kernel_s: f64, ticket: Option<u64>) -> CallReport {
    CallReport {
        client_in_bytes: None,
        cpu_available: None,
        ticket: ticket.map(Ticket),
        service: service.into(),
        sizes: vec![("n".into(), n)],
        timing: Timing {
            queue_wait_s: 0.001,
            input_transfer_s: 0.002,
            kernel_s,
            server_s: kernel_s + 0.004,
        },
        ok: ticket.is_some(),
    }
}

/// Which database a test's store is on.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

/// Where a test's store lives: a fresh SQLite data directory, or a fresh database on the test
/// binary's own PostgreSQL server (a real one, started from the system's packages).
struct Place {
    location: String,
    _dir: Option<tempfile::TempDir>,
}

impl Place {
    fn new(backend: Backend) -> Place {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                Place {
                    location: dir.path().join("data").display().to_string(),
                    _dir: Some(dir),
                }
            }
            Backend::Postgres => {
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let name = format!("store_test_{}_{n}", std::process::id());
                let server = gridwise_pgtemp::TempPostgres::shared()
                    .unwrap_or_else(|e| panic!("no PostgreSQL for the store's tests: {e}"));
                let location = server.lock().unwrap().create_database(&name).unwrap();
                Place {
                    location,
                    _dir: None,
                }
            }
        }
    }

    fn open(&self) -> Store {
        Store::open_location(&self.location)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.location))
    }
}

/// A test run once on each database: `name::sqlite` and `name::postgres`.
macro_rules! on_both {
    ($($(#[$meta:meta])* fn $name:ident($place:ident: Place) $body:block)*) => {$(
        $(#[$meta])*
        mod $name {
            use super::*;
            fn run($place: Place) $body
            #[test]
            fn sqlite() {
                run(Place::new(Backend::Sqlite))
            }
            #[test]
            fn postgres() {
                run(Place::new(Backend::Postgres))
            }
        }
    )*};
}

/// A store holding one of everything.
fn fill(store: &Store) -> ServerId {
    let id = ServerId::new_random();
    store.save_service(&service("scale", "n")).unwrap();
    store.save_service(&service("dgemm", "2*n^3")).unwrap();
    store
        .save_server(id, &registration("alpha", 7001), 1_700_000_000.5)
        .unwrap();
    store
        .upsert_points(&[
            point("alpha", "scale", &[100], 0.5, PointSource::Benchmark),
            point("alpha", "scale", &[200], 1.0, PointSource::Online),
            point("alpha", "dgemm", &[10, 20, 30], 2.0, PointSource::Online),
        ])
        .unwrap();
    store
        .add_timings(
            "alpha",
            1_700_000_001.0,
            &[
                report("scale", 100, 0.5, Some(7)),
                report("scale", 200, 1.0, None),
            ],
        )
        .unwrap();
    store
        .add_load(&load("alpha", 1_700_000_002.0, 0.25))
        .unwrap();
    store
        .add_load(&LoadRow {
            loadavg_1m: None,
            free_memory_bytes: Some(3e9),
            ..load("alpha", 1_700_000_003.0, 0.75)
        })
        .unwrap();
    id
}

#[test]
fn the_data_directory_is_made_and_holds_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("nested/data");
    let store = Store::open(&data).unwrap();
    assert_eq!(store.path(), data.join(DB_FILE));
    assert!(data.join(DB_FILE).exists());
    assert!(!store.is_shared());
}

#[test]
fn wal_mode_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.journal_mode().unwrap(), "wal");
    // WAL is a property of the file: a plain connection sees it too.
    let other = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
    let mode: String = other
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let sync: i64 = store
        .conn_for_tests()
        .pragma_query_value(None, "synchronous", |r| r.get(0))
        .unwrap();
    assert_eq!(sync, 1, "synchronous=NORMAL");
    assert_eq!(
        Store::open_in_memory().unwrap().journal_mode().unwrap(),
        "memory"
    );
}

fn set_user_version(path: &Path, v: i64) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.pragma_update(None, "user_version", v).unwrap();
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path()).unwrap());
    set_user_version(&dir.path().join(DB_FILE), SCHEMA_VERSION + 1);
    let e = Store::open(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::NewerSchema { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("upgrade gridwise"), "{msg}");
    assert!(
        msg.contains(&dir.path().join(DB_FILE).display().to_string()),
        "{msg}"
    );
    assert!(msg.contains(&format!("{}", SCHEMA_VERSION + 1)), "{msg}");
}

#[test]
fn a_corrupt_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    std::fs::write(
        &path,
        b"this is not an SQLite database, just some text; ".repeat(200),
    )
    .unwrap();
    let e = Store::open(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("move it"), "{msg}");
}

#[test]
fn a_damaged_database_does_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        for i in 0..200 {
            store
                .add_timings("a", i as f64, &[report("s", i, 0.1, None)])
                .unwrap();
        }
    }
    // Checkpointed on close; scribble over everything after the header page.
    let path = dir.path().join(DB_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 8192, "{}", bytes.len());
    for b in &mut bytes[4096..] {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let result = Store::open(dir.path()).and_then(|s| s.snapshot());
    let e = result.expect_err("a scribbled-over database cannot read cleanly");
    eprintln!("{e}");
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
}

#[test]
fn a_foreign_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch("CREATE TABLE recipes (name TEXT)").unwrap();
    drop(c);
    let e = Store::open(dir.path()).unwrap_err();
    assert!(matches!(e, StoreError::Foreign { .. }), "{e}");
    assert!(e.to_string().contains("recipes"), "{e}");
}

#[test]
fn an_unusable_directory_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let e = Store::open(&file.join("sub")).unwrap_err();
    assert!(matches!(e, StoreError::CreateDir { .. }), "{e}");
    assert!(e.to_string().contains("a-file"), "{e}");
}

#[test]
fn unreadable_rows_are_skipped_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        fill(&store);
    }
    let c = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
    c.execute_batch(
        "INSERT INTO services (name, description) VALUES ('broken', '{not json');
         INSERT INTO model_points (server, service, x, count, min, mean, max, source)
             VALUES ('alpha', 'scale', '[5]', 1, 1.0, 1.0, 1.0, 'guessed');
         INSERT INTO model_points (server, service, x, count, min, mean, max, source)
             VALUES ('alpha', 'scale', '[6]', 'many', 1.0, 1.0, 1.0, 'online');
         UPDATE servers SET id = 'not-a-uuid';",
    )
    .unwrap();
    drop(c);
    let snap = Store::open(dir.path()).unwrap().snapshot().unwrap();
    assert_eq!(snap.services.len(), 2);
    assert_eq!(snap.points.len(), 3);
    assert!(snap.servers.is_empty());
}

#[test]
fn errors_say_which_database() {
    let store = Store::open_in_memory().unwrap();
    store
        .conn_for_tests()
        .execute_batch("DROP TABLE load_history")
        .unwrap();
    let e = store.add_load(&load("a", 1.0, 1.0)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(":memory:") && msg.contains("saving a load sample"),
        "{msg}"
    );
}

fn small_config() -> WriterConfig {
    WriterConfig {
        max_batch_wait: Duration::from_millis(2),
        ..WriterConfig::default()
    }
}

fn send_everything(w: &Writer, id: ServerId) {
    w.send(Op::Service(service("scale", "n")));
    w.send(Op::Server(id, registration("alpha", 7001), 5.0));
    w.send(Op::Seen("alpha".into(), 6.0));
    w.send(Op::Points(vec![point(
        "alpha",
        "scale",
        &[100],
        0.5,
        PointSource::Online,
    )]));
    w.send(Op::Timings(
        "alpha".into(),
        7.0,
        vec![report("scale", 100, 0.5, Some(1))],
    ));
    w.send(Op::Load(load("alpha", 8.0, 0.5)));
}

fn expected_snapshot(id: ServerId) -> Snapshot {
    Snapshot {
        services: vec![service("scale", "n")],
        servers: vec![(id, registration("alpha", 7001), 6.0)],
        points: vec![point("alpha", "scale", &[100], 0.5, PointSource::Online)],
        load: vec![load("alpha", 8.0, 0.5)],
        timings: 1,
    }
}

#[test]
fn error_messages_render() {
    let e = StoreError::NewerSchema {
        path: "/var/lib/gridwise/gridwise.db".into(),
        found: 9,
        supported: 1,
    };
    assert_eq!(
        e.to_string(),
        "/var/lib/gridwise/gridwise.db was written by a newer gridwise (schema version 9; this \
         build understands versions up to 1): upgrade gridwise, or point the agent at another \
         data directory"
    );
    assert_eq!("online".parse::<PointSource>(), Ok(PointSource::Online));
    assert_eq!(PointSource::Benchmark.to_string(), "benchmark");
    for p in [
        PointSource::Benchmark,
        PointSource::Online,
        PointSource::AssumedZero,
    ] {
        assert_eq!(p.as_str().parse::<PointSource>(), Ok(p));
    }
    assert!(
        "guess"
            .parse::<PointSource>()
            .unwrap_err()
            .contains("benchmark")
    );
}

/// What a snapshot holds after upserting `rows` in order: the last row per key, sorted.
fn last_per_key(rows: &[PointRow]) -> Vec<PointRow> {
    let mut want: Vec<PointRow> = Vec::new();
    for r in rows {
        let key = |w: &PointRow| (w.server.clone(), w.service.clone(), w.x.clone());
        match want.iter_mut().find(|w| key(w) == key(r)) {
            Some(w) => *w = r.clone(),
            None => want.push(r.clone()),
        }
    }
    want.sort_by(|a, b| (&a.server, &a.service, &a.x).cmp(&(&b.server, &b.service, &b.x)));
    want
}

fn arb_point() -> impl Strategy<Value = PointRow> {
    (
        "[a-z]{1,6}",
        "[a-z]{1,6}",
        proptest::collection::vec(any::<i64>(), 0..4),
        any::<u64>().prop_map(|c| c >> 1),
        -1e12f64..1e12,
        -1e12f64..1e12,
        -1e12f64..1e12,
        0f64..1e12,
        prop_oneof![
            Just(PointSource::Benchmark),
            Just(PointSource::Online),
            Just(PointSource::AssumedZero)
        ],
    )
        .prop_map(
            |(server, service, x, count, min, mean, max, sd, source)| PointRow {
                server,
                service,
                x,
                count,
                min,
                mean,
                max,
                source,
                sd,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any points, upserted in any order: the snapshot holds the last row per key.
    #[test]
    fn points_round_trip(rows in proptest::collection::vec(arb_point(), 0..20)) {
        let store = Store::open_in_memory().unwrap();
        store.upsert_points(&rows).unwrap();
        prop_assert_eq!(store.snapshot().unwrap().points, last_per_key(&rows));
    }
}

#[test]
fn writes_that_fail_while_the_database_is_held_are_retried_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.set_busy_timeout(Duration::from_millis(20));
    let w = Writer::spawn_with(
        store,
        WriterConfig {
            retry_every: Duration::from_millis(50),
            ..small_config()
        },
    );
    // Another process takes the database and holds it.
    let holder = rusqlite::Connection::open(dir.path().join(crate::DB_FILE)).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let id = ServerId::new_random();
    send_everything(&w, id);
    w.flush();
    let h = w.health();
    assert!(!h.ok, "{h:?}");
    assert!(h.pending > 0, "{h:?}");
    assert!(
        h.last_error.as_deref().unwrap_or("").contains("lock"),
        "{h:?}"
    );
    // Released: the kept writes land, in order, and health says so.
    holder.execute_batch("COMMIT").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !w.health().ok && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let h = w.health();
    assert!(h.ok && h.pending == 0 && h.dropped == 0, "{h:?}");
    drop(w);
    let snap = Store::open(dir.path()).unwrap().snapshot().unwrap();
    assert_eq!(snap, expected_snapshot(id));
}

#[test]
fn a_first_version_database_is_migrated_keeping_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        c.execute_batch(crate::schema::MIGRATIONS[0]).unwrap();
        c.execute_batch(
            "INSERT INTO model_points VALUES ('a', 's', '[10]', 2, 1.0, 1.5, 2.0, 'online');
             INSERT INTO load_history (server, at_unix_s, loadavg_1m) VALUES ('a', 5.0, 0.5);",
        )
        .unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    let snap = store.snapshot().unwrap();
    assert_eq!((snap.points[0].mean, snap.points[0].sd), (1.5, 0.0));
    assert_eq!(
        snap.load,
        vec![LoadRow {
            server: "a".into(),
            at_unix_s: 5.0,
            loadavg_1m: Some(0.5),
            cpu_available: None,
            free_memory_bytes: None,
        }]
    );
}

on_both! {
fn a_report_heard_by_two_agents_is_kept_once(place: Place) {
    let (one, two) = (place.open(), place.open());
    let reports = [report("scale", 1, 0.5, Some(11)), report("scale", 2, 0.5, None)];
    one.add_timings("alpha", 1.0, &reports).unwrap();
    two.add_timings("alpha", 1.5, &reports).unwrap();
    let kept = one.timings("alpha", "scale", 10).unwrap();
    let tickets: Vec<_> = kept.iter().map(|t| t.ticket).collect();
    // The ticketed call once (as the first agent heard it); calls without one each time.
    assert_eq!(tickets, [None, None, Some(Ticket(11))]);
    assert_eq!(kept[2].at_unix_s, 1.0);
}

fn every_kind_round_trips(place: Place) {
    let store = place.open();
    let id = fill(&store);
    let snap = store.snapshot().unwrap();
    assert_eq!(
        snap.services,
        vec![service("dgemm", "2*n^3"), service("scale", "n")]
    );
    assert_eq!(
        snap.servers,
        vec![(id, registration("alpha", 7001), 1_700_000_000.5)]
    );
    assert_eq!(
        snap.points,
        vec![
            point("alpha", "dgemm", &[10, 20, 30], 2.0, PointSource::Online),
            point("alpha", "scale", &[100], 0.5, PointSource::Benchmark),
            point("alpha", "scale", &[200], 1.0, PointSource::Online),
        ]
    );
    assert_eq!(
        snap.load,
        vec![
            load("alpha", 1_700_000_002.0, 0.25),
            LoadRow {
                loadavg_1m: None,
                free_memory_bytes: Some(3e9),
                ..load("alpha", 1_700_000_003.0, 0.75)
            }
        ]
    );
    assert_eq!(snap.timings, 2);
    let t = store.timings("alpha", "scale", 10).unwrap();
    assert_eq!(t.len(), 2);
    // Newest first.
    assert_eq!(t[0].sizes, vec![("n".to_string(), 200)]);
    assert_eq!(t[0].ticket, None);
    assert!(!t[0].ok);
    assert_eq!(
        t[1],
        StoredTiming {
            server: "alpha".into(),
            service: "scale".into(),
            at_unix_s: 1_700_000_001.0,
            sizes: vec![("n".into(), 100)],
            timing: report("scale", 100, 0.5, None).timing,
            ok: true,
            ticket: Some(Ticket(7)),
        }
    );
    assert_eq!(store.timings("alpha", "scale", 1).unwrap().len(), 1);
    assert!(store.timings("alpha", "dgemm", 10).unwrap().is_empty());
    assert!(store.timings("beta", "scale", 10).unwrap().is_empty());
}

fn empty_store_has_an_empty_snapshot(place: Place) {
    let store = place.open();
    assert_eq!(store.snapshot().unwrap(), Snapshot::default());
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
}

fn upserts_replace(place: Place) {
    let store = place.open();
    fill(&store);
    // Service by name.
    let mut d = service("scale", "n");
    d.doc = "changed".into();
    store.save_service(&d).unwrap();
    // Server by name, with a new id and address.
    let id2 = ServerId::new_random();
    store
        .save_server(id2, &registration("alpha", 9999), 1_800_000_000.0)
        .unwrap();
    // Point by (server, service, x).
    let mut p = point("alpha", "scale", &[100], 0.7, PointSource::Online);
    p.count = 42;
    store.upsert_points(std::slice::from_ref(&p)).unwrap();
    store.touch_server("alpha", 1_800_000_010.0).unwrap();
    store.touch_server("nobody", 1.0).unwrap();

    let snap = store.snapshot().unwrap();
    assert_eq!(snap.services.len(), 2);
    assert_eq!(snap.services[1], d);
    assert_eq!(
        snap.servers,
        vec![(id2, registration("alpha", 9999), 1_800_000_010.0)]
    );
    assert_eq!(snap.points.len(), 3);
    assert_eq!(snap.points[1], p);
}

fn nan_statistics_survive(place: Place) {
    let store = place.open();
    let mut p = point("a", "s", &[1], 1.0, PointSource::Online);
    p.min = f64::NAN;
    p.max = f64::INFINITY;
    store.upsert_points(&[p]).unwrap();
    let got = &store.snapshot().unwrap().points[0];
    assert!(got.min.is_nan());
    assert_eq!(got.max, f64::INFINITY);
    assert_eq!(got.mean, 1.0);
}

fn a_registration_that_cannot_be_read_back_is_refused(place: Place) {
    let store = place.open();
    let mut reg = registration("alpha", 1);
    reg.default_rate = f64::NAN;
    let e = store
        .save_server(ServerId::new_random(), &reg, 0.0)
        .unwrap_err();
    assert!(matches!(e, StoreError::Encode { .. }), "{e}");
    assert!(e.to_string().contains("alpha"), "{e}");
    assert!(store.snapshot().unwrap().servers.is_empty());
}

fn prune_keeps_the_newest(place: Place) {
    let store = place.open();
    for i in 0..50 {
        let at = 1000.0 + i as f64;
        store
            .add_timings("a", at, &[report("s", i, 0.1, Some(i as u64))])
            .unwrap();
        store
            .add_timings("a", at, &[report("t", i, 0.1, None)])
            .unwrap();
        store
            .add_timings("b", at, &[report("s", i, 0.1, None)])
            .unwrap();
        store.add_load(&load("a", at, i as f64)).unwrap();
        store.add_load(&load("b", at, i as f64)).unwrap();
    }
    assert_eq!(store.snapshot().unwrap().timings, 150);
    store.prune(10, 5).unwrap();
    let snap = store.snapshot().unwrap();
    assert_eq!(snap.timings, 30);
    for (server, svc) in [("a", "s"), ("a", "t"), ("b", "s")] {
        let t = store.timings(server, svc, 100).unwrap();
        let ns: Vec<i64> = t.iter().map(|t| t.sizes[0].1).collect();
        assert_eq!(ns, (40..50).rev().collect::<Vec<_>>(), "{server}/{svc}");
    }
    let loads: Vec<(&str, f64)> = snap
        .load
        .iter()
        .map(|l| (l.server.as_str(), l.loadavg_1m.unwrap()))
        .collect();
    let mut want = Vec::new();
    for i in 45..50 {
        want.push(("a", i as f64));
        want.push(("b", i as f64));
    }
    assert_eq!(loads, want);
    // Pruning within the bounds changes nothing; zero empties.
    store.prune(10, 5).unwrap();
    assert_eq!(store.snapshot().unwrap().timings, 30);
    store.prune(0, 0).unwrap();
    let snap = store.snapshot().unwrap();
    assert_eq!((snap.timings, snap.load.len()), (0, 0));
    // New rows after an empty prune still come out newest first.
    store
        .add_timings(
            "a",
            1.0,
            &[report("s", 1, 0.1, None), report("s", 2, 0.1, None)],
        )
        .unwrap();
    let t = store.timings("a", "s", 10).unwrap();
    assert_eq!(t[0].sizes[0].1, 2);
}

fn a_forgotten_server_leaves_nothing_behind(place: Place) {
    let store = place.open();
    let id = fill(&store);
    let before = store.snapshot().unwrap();
    assert!(!before.servers.is_empty());
    let name = before.servers[0].1.name.clone();
    store.forget_server(&name).unwrap();
    let after = store.snapshot().unwrap();
    assert!(
        after
            .servers
            .iter()
            .all(|(i, r, _)| *i != id && r.name != name)
    );
    assert!(after.points.iter().all(|p| p.server != name));
    assert!(after.load.iter().all(|l| l.server != name));
    assert!(store.timings(&name, "scale", 100).unwrap().is_empty());
}

fn reopened_store_returns_the_same_snapshot(place: Place) {
    let before = {
        let store = place.open();
        fill(&store);
        store.snapshot().unwrap()
    };
    let store = place.open();
    assert_eq!(store.snapshot().unwrap(), before);
    assert_eq!(store.timings("alpha", "scale", 10).unwrap().len(), 2);
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
}

fn writer_persists_everything_after_flush(place: Place) {
    let w = Writer::spawn_with(place.open(), small_config());
    let id = ServerId::new_random();
    send_everything(&w, id);
    w.flush();
    // A second connection sees it while the writer still runs (WAL: readers do not block).
    let reader = place.open();
    assert_eq!(reader.snapshot().unwrap(), expected_snapshot(id));
    assert_eq!(w.dropped(), 0);
    w.flush();
    drop(w);
}

fn writer_persists_everything_after_drop(place: Place) {
    let id = ServerId::new_random();
    {
        let w = Writer::spawn(place.open());
        send_everything(&w, id);
        for i in 0..5000 {
            w.send(Op::Timings(
                "beta".into(),
                i as f64,
                vec![report("scale", i, 0.1, None)],
            ));
        }
    }
    let store = place.open();
    let snap = store.snapshot().unwrap();
    assert_eq!(snap.timings, 5001);
    let mut want = expected_snapshot(id);
    want.timings = 5001;
    assert_eq!(snap, want);
    let newest = store.timings("beta", "scale", 1).unwrap();
    assert_eq!(newest[0].sizes[0].1, 4999);
}

fn writer_survives_a_failing_operation(place: Place) {
    let w = Writer::spawn_with(place.open(), small_config());
    let mut bad = registration("bad", 1);
    bad.rates[0].1 = f64::INFINITY;
    w.send(Op::Service(service("before", "n")));
    w.send(Op::Server(ServerId::new_random(), bad, 1.0));
    w.send(Op::Service(service("after", "n")));
    w.flush();
    let snap = place.open().snapshot().unwrap();
    let names: Vec<&str> = snap.services.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["after", "before"]);
    assert!(snap.servers.is_empty());
}

fn writer_prunes(place: Place) {
    {
        let store = place.open();
        for i in 0..100 {
            store
                .add_timings("a", i as f64, &[report("s", i, 0.1, None)])
                .unwrap();
            store.add_load(&load("a", i as f64, 0.0)).unwrap();
        }
    }
    let config = WriterConfig {
        keep_timings_per_pair: 10,
        keep_load_per_server: 20,
        prune_every: Duration::ZERO,
        ..small_config()
    };
    let w = Writer::spawn_with(place.open(), config);
    // At start-up.
    w.flush();
    let reader = place.open();
    let snap = reader.snapshot().unwrap();
    assert_eq!((snap.timings, snap.load.len()), (10, 20));
    // And after writes (the prune follows the batch; the second flush waits for it).
    for i in 100..150 {
        w.send(Op::Timings(
            "a".into(),
            i as f64,
            vec![report("s", i, 0.1, None)],
        ));
    }
    w.flush();
    w.flush();
    assert_eq!(reader.snapshot().unwrap().timings, 10);
    let newest = reader.timings("a", "s", 1).unwrap();
    assert_eq!(newest[0].sizes[0].1, 149);
}
}

/// A fresh database on the shared test server, and a plain client to poke at it.
fn postgres_place() -> (Place, postgres::Client) {
    let place = Place::new(Backend::Postgres);
    let client = postgres::Client::connect(&place.location, postgres::NoTls).unwrap();
    (place, client)
}

#[test]
fn a_newer_schema_is_refused_by_postgres_too() {
    let (place, mut c) = postgres_place();
    drop(place.open());
    c.execute(
        "INSERT INTO gridwise_schema_history (version, name, applied_on, checksum)
         VALUES ($1, 'from_the_future', '', '0')",
        &[&(SCHEMA_VERSION as i32 + 1)],
    )
    .unwrap();
    let e = Store::open_location(&place.location).unwrap_err();
    assert!(matches!(e, StoreError::NewerSchema { .. }), "{e}");
    assert!(e.to_string().contains("upgrade gridwise"), "{e}");
}

#[test]
fn a_foreign_postgres_database_is_refused() {
    let (place, mut c) = postgres_place();
    c.batch_execute("CREATE TABLE recipes (name TEXT)").unwrap();
    let e = Store::open_location(&place.location).unwrap_err();
    assert!(matches!(e, StoreError::Foreign { .. }), "{e}");
    assert!(e.to_string().contains("recipes"), "{e}");
}

#[test]
fn an_unreachable_postgres_is_a_clear_error_without_the_password() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://agent:s3cret@127.0.0.1:{port}/grid");
    let e = Store::open_location(&url).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, StoreError::Connect { .. }), "{msg}");
    assert!(
        msg.contains(&format!("postgres://agent@127.0.0.1:{port}/grid")),
        "{msg}"
    );
    assert!(!msg.contains("s3cret"), "{msg}");
    let e = Store::open_location("postgres://a@127.0.0.1:notaport/x").unwrap_err();
    assert!(matches!(e, StoreError::BadUrl { .. }), "{e}");
}

#[test]
fn agents_on_one_database_see_each_others_writes_and_migrate_once() {
    let (place, mut c) = postgres_place();
    // Four agents start together on an empty database: one migrates, none fails.
    let stores: Vec<Store> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(|| place.open())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(stores.iter().all(Store::is_shared));
    let id = fill(&stores[0]);
    let seen = stores[3].snapshot().unwrap();
    assert_eq!(seen, stores[0].snapshot().unwrap());
    assert_eq!(seen.servers[0].0, id);
    // Two writers at once on the same rows, in opposite orders: both land.
    let a = Writer::spawn_with(stores.into_iter().next().unwrap(), small_config());
    let b = Writer::spawn_with(place.open(), small_config());
    let row = |k: i64, i: i64| point("alpha", "scale", &[k], i as f64, PointSource::Online);
    for i in 0..100 {
        a.send(Op::Points((0..50).map(|k| row(k, i)).collect()));
        b.send(Op::Points((0..50).rev().map(|k| row(k, i)).collect()));
        for w in [&a, &b] {
            w.send(Op::Timings(
                "alpha".into(),
                i as f64,
                vec![report("scale", i, 0.1, None)],
            ));
        }
    }
    a.flush();
    b.flush();
    assert_eq!((a.dropped(), b.dropped()), (0, 0));
    let snap = place.open().snapshot().unwrap();
    assert_eq!(snap.timings, 202);
    assert_eq!(
        snap.points.iter().filter(|p| p.service == "scale").count(),
        2 + 50
    );
    // The two writers waited for each other; they never deadlocked (PostgreSQL breaks a
    // deadlock after a second, once per conflict: a minute for a few dozen).
    drop((a, b));
    std::thread::sleep(Duration::from_millis(1200)); // backends report their statistics
    let deadlocks: i64 = c
        .query_one(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(deadlocks, 0);
}

#[test]
fn writes_made_while_postgres_is_down_land_when_it_is_back() {
    let mut server = gridwise_pgtemp::TempPostgres::start().unwrap();
    let url = server.create_database("grid").unwrap();
    let w = Writer::spawn_with(
        Store::open_location(&url).unwrap(),
        WriterConfig {
            retry_every: Duration::from_millis(50),
            ..small_config()
        },
    );
    w.send(Op::Service(service("before", "n")));
    w.flush();
    // The database server dies (as a crash would: no shutdown) and the agent goes on.
    server.kill();
    let id = ServerId::new_random();
    send_everything(&w, id);
    w.flush();
    let h = w.health();
    assert!(!h.ok && h.pending > 0, "{h:?}");
    // Back on the same port: the writer reconnects and the kept writes land, in order.
    server.run_server().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !w.health().ok && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let h = w.health();
    assert!(h.ok && h.pending == 0 && h.dropped == 0, "{h:?}");
    drop(w);
    let mut want = expected_snapshot(id);
    want.services.insert(0, service("before", "n"));
    assert_eq!(
        Store::open_location(&url).unwrap().snapshot().unwrap(),
        want
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// As `points_round_trip`, on PostgreSQL: its types (BIGINT, DOUBLE PRECISION) keep every
    /// value SQLite keeps.
    #[test]
    fn points_round_trip_on_postgres(rows in proptest::collection::vec(arb_point(), 0..20)) {
        let store = Place::new(Backend::Postgres).open();
        store.upsert_points(&rows).unwrap();
        prop_assert_eq!(store.snapshot().unwrap().points, last_per_key(&rows));
    }
}

#[test]
fn a_history_with_a_ticket_twice_is_migrated_keeping_the_first() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        for sql in &crate::schema::MIGRATIONS[..2] {
            c.execute_batch(sql).unwrap();
        }
        c.execute_batch(
            "INSERT INTO timings (server, service, at_unix_s, sizes, ok, ticket)
                 VALUES ('a', 's', 1.0, '[]', 1, 5), ('a', 's', 2.0, '[]', 1, 5),
                        ('a', 's', 3.0, '[]', 1, NULL), ('a', 's', 4.0, '[]', 1, NULL);",
        )
        .unwrap();
        c.pragma_update(None, "user_version", 2).unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    let at: Vec<f64> = store
        .timings("a", "s", 10)
        .unwrap()
        .iter()
        .map(|t| t.at_unix_s)
        .collect();
    assert_eq!(at, [4.0, 3.0, 1.0]);
}
