//! The schema and its forward migrations.

/// Migrations in order: `MIGRATIONS[i]` takes a database from version `i` to `i + 1`.
/// Never edit a released entry; append a new one.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "
    CREATE TABLE services (
        name        TEXT PRIMARY KEY NOT NULL,
        description TEXT NOT NULL
    );
    CREATE TABLE servers (
        name             TEXT PRIMARY KEY NOT NULL,
        id               TEXT NOT NULL,
        addr             TEXT NOT NULL,
        slots            INTEGER NOT NULL,
        cores            INTEGER NOT NULL,
        memory_bytes     INTEGER NOT NULL,
        default_rate     REAL,
        last_seen_unix_s REAL NOT NULL,
        registration     TEXT NOT NULL
    );
    CREATE TABLE model_points (
        server  TEXT NOT NULL,
        service TEXT NOT NULL,
        x       TEXT NOT NULL,
        count   INTEGER NOT NULL,
        min     REAL,
        mean    REAL,
        max     REAL,
        source  TEXT NOT NULL,
        PRIMARY KEY (server, service, x)
    );
    CREATE TABLE timings (
        id               INTEGER PRIMARY KEY,
        server           TEXT NOT NULL,
        service          TEXT NOT NULL,
        at_unix_s        REAL NOT NULL,
        sizes            TEXT NOT NULL,
        queue_wait_s     REAL,
        input_transfer_s REAL,
        kernel_s         REAL,
        server_s         REAL,
        ok               INTEGER NOT NULL,
        ticket           INTEGER
    );
    CREATE INDEX timings_by_pair ON timings (server, service, id);
    CREATE TABLE load_history (
        id         INTEGER PRIMARY KEY,
        server     TEXT NOT NULL,
        at_unix_s  REAL NOT NULL,
        loadavg_1m REAL
    );
    CREATE INDEX load_by_server ON load_history (server, id);
    ",
    // 2: spreads of model points; CPU availability and free memory beside the load average.
    "
    ALTER TABLE model_points ADD COLUMN sd REAL;
    ALTER TABLE load_history ADD COLUMN cpu_available REAL;
    ALTER TABLE load_history ADD COLUMN free_memory REAL;
    ",
];

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;
