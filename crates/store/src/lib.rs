//! Persistence for the gridwise agent (DESIGN.md §7): what it learns — services, servers,
//! performance-model points, timing history and load history — lives in an SQLite database
//! (WAL mode) in the agent's data directory, so that a restarted agent resumes with every model;
//! or, for several agents sharing what they learn, in one PostgreSQL database
//! ([`Store::connect`]), with the same tables.
//!
//! * [`Store`] is the database: open it with [`Store::open`], read everything back at start-up
//!   with [`Store::snapshot`].
//! * [`Writer`] owns a [`Store`] on a thread of its own: the agent [`Writer::send`]s [`Op`]s and
//!   never waits for the disk. The thread batches queued operations into one transaction and
//!   prunes the history periodically; [`Writer::flush`] (and dropping the writer) waits until
//!   everything sent so far is on disk.
//!
//! # The database
//!
//! Both databases run the same statements (`sql.rs`); their schemas differ only in types
//! (PostgreSQL's `BIGINT`, `DOUBLE PRECISION`, `BOOLEAN` and identity columns), and a schema
//! version means the same on both (PostgreSQL's migrations are refinery's, recorded in
//! `gridwise_schema_history`). What follows is SQLite's.
//!
//! The file is `<data dir>/gridwise.db` (see [`DB_FILE`]), with `gridwise.db-wal` and
//! `gridwise.db-shm` beside it while it is open. `PRAGMA user_version` holds the schema version
//! ([`SCHEMA_VERSION`]); older databases are migrated forward on open, and a database written by
//! a newer gridwise is refused. The tables are plain, so the `sqlite3` shell can read them (open
//! it read-only, `sqlite3 -readonly gridwise.db`, while the agent runs):
//!
//! ```sql
//! -- Service descriptions, by name.
//! CREATE TABLE services (
//!     name        TEXT PRIMARY KEY NOT NULL,
//!     description TEXT NOT NULL              -- the ServiceDesc as JSON
//! );
//! -- Registered servers, by name (re-registering replaces the row, id included).
//! CREATE TABLE servers (
//!     name             TEXT PRIMARY KEY NOT NULL,
//!     id               TEXT NOT NULL,        -- ServerId, a hyphenated UUID
//!     addr             TEXT NOT NULL,        -- host:port
//!     slots            INTEGER NOT NULL,
//!     cores            INTEGER NOT NULL,
//!     memory_bytes     INTEGER NOT NULL,
//!     default_rate     REAL,                 -- operations/s
//!     last_seen_unix_s REAL NOT NULL,
//!     registration     TEXT NOT NULL         -- the whole Registration as JSON (authoritative)
//! );
//! -- Performance-model points: one row per (server, service, sizes), replaced on update.
//! CREATE TABLE model_points (
//!     server  TEXT NOT NULL,                 -- server name
//!     service TEXT NOT NULL,                 -- service name
//!     x       TEXT NOT NULL,                 -- size-parameter values as a JSON array, e.g. [500,500,500]
//!     count   INTEGER NOT NULL,              -- calls or benchmark runs aggregated
//!     min     REAL,                          -- in the model's unit (NULL stands for NaN)
//!     mean    REAL,
//!     max     REAL,
//!     source  TEXT NOT NULL,                 -- 'benchmark', 'online' or 'assumed-zero'
//!     sd      REAL,                          -- sample sd of the runs (NULL: not known)
//!     PRIMARY KEY (server, service, x)
//! );
//! -- Finished calls as servers reported them; the newest rows per (server, service) are kept.
//! CREATE TABLE timings (
//!     id               INTEGER PRIMARY KEY,  -- recording order
//!     server           TEXT NOT NULL,
//!     service          TEXT NOT NULL,
//!     at_unix_s        REAL NOT NULL,        -- when the agent recorded it
//!     sizes            TEXT NOT NULL,        -- JSON, e.g. [["m",500],["n",500]]
//!     queue_wait_s     REAL,
//!     input_transfer_s REAL,
//!     kernel_s         REAL,
//!     server_s         REAL,
//!     ok               INTEGER NOT NULL,     -- 1 when the kernel returned outputs
//!     ticket           INTEGER               -- the agent's assignment, if any
//! );
//! CREATE INDEX timings_by_pair ON timings (server, service, id);
//! -- Every agent sharing a store hears every report: one row per ticket.
//! CREATE UNIQUE INDEX timings_by_ticket ON timings (ticket) WHERE ticket IS NOT NULL;
//! -- Host load from heartbeats; the newest rows per server are kept.
//! CREATE TABLE load_history (
//!     id            INTEGER PRIMARY KEY,     -- recording order
//!     server        TEXT NOT NULL,
//!     at_unix_s     REAL NOT NULL,
//!     loadavg_1m    REAL,                    -- NULL while the server benchmarked its models
//!     cpu_available REAL,                    -- fraction of a core a new call would get
//!     free_memory   REAL                     -- bytes
//! );
//! CREATE INDEX load_by_server ON load_history (server, id);
//! ```
//!
//! "Newest" and "oldest" always mean recording order (`id`), not the `at_unix_s` timestamps,
//! so a clock step on the agent's host cannot make [`Store::prune`] drop fresh rows.
//!
//! Points are bounded by the distinct sizes seen; timings and load are bounded by
//! [`Store::prune`], which the [`Writer`] runs periodically ([`WriterConfig`]).

mod error;
mod pg;
mod schema;
mod sql;
mod sqlite;
mod store;
mod writer;

pub use error::StoreError;
pub use gridwise_proto::PointSource;
pub use schema::SCHEMA_VERSION;
pub use sqlite::DB_FILE;
pub use store::{LoadRow, PointRow, Snapshot, Store, StoredTiming};
pub use writer::{Op, Writer, WriterConfig, WriterHealth};

#[cfg(test)]
mod tests;
