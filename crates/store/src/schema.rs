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
    // 3: one row per ticket: where several agents share a store, each hears every report.
    "
    DELETE FROM timings WHERE ticket IS NOT NULL AND id NOT IN
        (SELECT min(id) FROM timings WHERE ticket IS NOT NULL GROUP BY ticket);
    CREATE UNIQUE INDEX timings_by_ticket ON timings (ticket) WHERE ticket IS NOT NULL;
    ",
];

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The same schema for PostgreSQL, one migration for each of [`MIGRATIONS`] (so a schema
/// version means the same on both), named for refinery. Never edit a released entry.
pub(crate) const POSTGRES_MIGRATIONS: &[(&str, &str)] = &[
    (
        "first_schema",
        "
    CREATE TABLE services (
        name        TEXT PRIMARY KEY NOT NULL,
        description TEXT NOT NULL
    );
    CREATE TABLE servers (
        name             TEXT PRIMARY KEY NOT NULL,
        id               TEXT NOT NULL,
        addr             TEXT NOT NULL,
        slots            BIGINT NOT NULL,
        cores            BIGINT NOT NULL,
        memory_bytes     BIGINT NOT NULL,
        default_rate     DOUBLE PRECISION,
        last_seen_unix_s DOUBLE PRECISION NOT NULL,
        registration     TEXT NOT NULL
    );
    CREATE TABLE model_points (
        server  TEXT NOT NULL,
        service TEXT NOT NULL,
        x       TEXT NOT NULL,
        count   BIGINT NOT NULL,
        min     DOUBLE PRECISION,
        mean    DOUBLE PRECISION,
        max     DOUBLE PRECISION,
        source  TEXT NOT NULL,
        PRIMARY KEY (server, service, x)
    );
    CREATE TABLE timings (
        id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        server           TEXT NOT NULL,
        service          TEXT NOT NULL,
        at_unix_s        DOUBLE PRECISION NOT NULL,
        sizes            TEXT NOT NULL,
        queue_wait_s     DOUBLE PRECISION,
        input_transfer_s DOUBLE PRECISION,
        kernel_s         DOUBLE PRECISION,
        server_s         DOUBLE PRECISION,
        ok               BOOLEAN NOT NULL,
        ticket           BIGINT
    );
    CREATE INDEX timings_by_pair ON timings (server, service, id);
    CREATE TABLE load_history (
        id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        server     TEXT NOT NULL,
        at_unix_s  DOUBLE PRECISION NOT NULL,
        loadavg_1m DOUBLE PRECISION
    );
    CREATE INDEX load_by_server ON load_history (server, id);
    ",
    ),
    (
        "spreads_and_cpu",
        "
    ALTER TABLE model_points ADD COLUMN sd DOUBLE PRECISION;
    ALTER TABLE load_history ADD COLUMN cpu_available DOUBLE PRECISION,
                             ADD COLUMN free_memory DOUBLE PRECISION;
    ",
    ),
    (
        "one_row_per_ticket",
        "
    DELETE FROM timings WHERE ticket IS NOT NULL AND id NOT IN
        (SELECT min(id) FROM timings WHERE ticket IS NOT NULL GROUP BY ticket);
    CREATE UNIQUE INDEX timings_by_ticket ON timings (ticket) WHERE ticket IS NOT NULL;
    ",
    ),
];
