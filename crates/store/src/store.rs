//! The database: opening, migrating, writing and reading back.

use crate::error::StoreError;
use crate::schema::{MIGRATIONS, SCHEMA_VERSION};
use gridwise_proto::{
    CallReport, PointSource, Registration, ServerId, ServiceDesc, Ticket, Timing,
};
use rusqlite::{Connection, OptionalExtension, Row, params};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The database file's name inside the data directory.
pub const DB_FILE: &str = "gridwise.db";

/// How long a statement waits for a lock held by another connection before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The aggregated statistics of one performance-model point: a service's measurements on one
/// server at one vector of size-parameter values. The store does not interpret the values: they
/// are in whatever unit the model uses (times in seconds, or speeds in operations/s).
#[derive(Clone, Debug, PartialEq)]
pub struct PointRow {
    pub server: String,
    pub service: String,
    /// Size-parameter values, in the description's order.
    pub x: Vec<i64>,
    /// How many measurements the statistics are over.
    pub count: u64,
    /// `min`, `mean` and `max` may be NaN: SQLite stores it as NULL, and reading turns NULL
    /// back into NaN.
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// Where the measurements came from.
    pub source: PointSource,
    /// Sample standard deviation of the measurements (0 where not known).
    pub sd: f64,
}

/// One sample of a server's load. Each field is `None` where the server did not measure it
/// (the load average is also left out while the server benchmarked its own models).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadRow {
    pub server: String,
    /// When the agent recorded it, seconds since the Unix epoch.
    pub at_unix_s: f64,
    pub loadavg_1m: Option<f64>,
    /// The fraction of a core a new call would get.
    pub cpu_available: Option<f64>,
    pub free_memory_bytes: Option<f64>,
}

/// One finished call as stored in the timing history.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTiming {
    pub server: String,
    pub service: String,
    /// When the agent recorded it, seconds since the Unix epoch.
    pub at_unix_s: f64,
    /// Size-parameter values.
    pub sizes: Vec<(String, i64)>,
    pub timing: Timing,
    /// Whether the kernel returned outputs.
    pub ok: bool,
    /// The agent's assignment, if any.
    pub ticket: Option<Ticket>,
}

/// Everything the store holds, as a restarted agent needs it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Service descriptions, by name.
    pub services: Vec<ServiceDesc>,
    /// Servers with their id, registration and last-seen time (seconds since the Unix epoch), by name.
    pub servers: Vec<(ServerId, Registration, f64)>,
    /// Performance-model points, ordered by server, service and sizes.
    pub points: Vec<PointRow>,
    /// Load history, oldest first.
    pub load: Vec<LoadRow>,
    /// How many timings the history holds (read them with [`Store::timings`]).
    pub timings: usize,
}

/// The gridwise database: one SQLite connection. Not shared between threads; hand it to a
/// [`crate::Writer`] to write from a thread of its own.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// Statement-level errors that mean "this row holds something we cannot read": skip it.
fn is_row_decode_error(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
    )
}

/// SQLite turns NaN into NULL; this turns it back.
fn real(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

/// A u64 as SQLite's signed integer, saturating.
fn sat_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Store {
    /// Opens (creating it and the directory if needed) `<dir>/gridwise.db` in WAL mode and
    /// migrates it to the current schema.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(DB_FILE);
        let conn = Connection::open(&path).map_err(|e| StoreError::open(path.clone(), e))?;
        Store::init(conn, path, true)
    }

    /// Opens a private in-memory database with the current schema (for tests and `--no-store`).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|e| StoreError::open(path.clone(), e))?;
        Store::init(conn, path, false)
    }

    fn init(conn: Connection, path: PathBuf, on_disk: bool) -> Result<Store, StoreError> {
        let store = Store { conn, path };
        store
            .conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| StoreError::open(store.path.clone(), e))?;
        // The first read of the file: a file that is not a database fails here.
        let version = store.user_version()?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: store.path.clone(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version < 0 {
            return Err(StoreError::Foreign {
                path: store.path.clone(),
                table: format!("(user_version {version})"),
            });
        }
        if version == 0 {
            let table: Option<String> = store
                .conn
                .query_row(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 1",
                    [],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| StoreError::open(store.path.clone(), e))?;
            if let Some(table) = table {
                return Err(StoreError::Foreign {
                    path: store.path.clone(),
                    table,
                });
            }
        }
        if on_disk {
            let mode: String = store
                .conn
                .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
                .map_err(|e| StoreError::open(store.path.clone(), e))?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(
                    path = %store.path.display(),
                    mode,
                    "the database could not be switched to WAL mode; writes will be slower"
                );
            }
            store
                .conn
                .pragma_update(None, "synchronous", "NORMAL")
                .map_err(|e| StoreError::open(store.path.clone(), e))?;
        }
        store.migrate(version)?;
        Ok(store)
    }

    fn user_version(&self) -> Result<i64, StoreError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| StoreError::open(self.path.clone(), e))
    }

    fn migrate(&self, from: i64) -> Result<(), StoreError> {
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
            let to = i as i64 + 1;
            self.atomic("migrating the schema", |s| {
                s.conn.execute_batch(sql)?;
                s.conn.pragma_update(None, "user_version", to)?;
                Ok(())
            })?;
            tracing::info!(path = %self.path.display(), version = to, "database schema migrated");
        }
        Ok(())
    }

    /// How long a statement waits for another connection's lock before failing (5 s unless
    /// changed).
    pub fn set_busy_timeout(&self, wait: Duration) {
        if let Err(e) = self.conn.busy_timeout(wait) {
            tracing::warn!(error = %e, "cannot change the database's busy timeout");
        }
    }

    /// The database file (`:memory:` for an in-memory store).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open database (always [`SCHEMA_VERSION`] after open).
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.user_version()
    }

    /// The journal mode SQLite reports: `wal` for a store on disk, `memory` in memory.
    pub fn journal_mode(&self) -> Result<String, StoreError> {
        self.conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .map_err(|e| self.err("reading the journal mode", e))
    }

    /// The connection, for tests that poke at the file directly.
    #[cfg(test)]
    pub(crate) fn conn_for_tests(&self) -> &Connection {
        &self.conn
    }

    fn err(&self, action: &'static str, e: rusqlite::Error) -> StoreError {
        StoreError::sqlite(self.path.clone(), action, e)
    }

    /// Runs `f` in a savepoint: all of it or nothing. Nests inside an open transaction (the
    /// writer's batch); outside one it is a transaction of its own.
    fn atomic<T>(
        &self,
        action: &'static str,
        f: impl FnOnce(&Store) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        self.conn
            .execute_batch("SAVEPOINT gridwise_op")
            .map_err(|e| self.err(action, e))?;
        let result =
            f(self).and_then(|v| self.conn.execute_batch("RELEASE gridwise_op").map(|()| v));
        match result {
            Ok(v) => Ok(v),
            Err(e) => {
                if let Err(e2) = self
                    .conn
                    .execute_batch("ROLLBACK TO gridwise_op; RELEASE gridwise_op")
                {
                    tracing::warn!(path = %self.path.display(), error = %e2, "rolling back failed");
                }
                Err(self.err(action, e))
            }
        }
    }

    /// Begins the writer's batch transaction.
    pub(crate) fn begin_batch(&self) -> Result<(), StoreError> {
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| self.err("starting a write transaction", e))
    }

    /// Commits the writer's batch transaction; on failure rolls it back.
    pub(crate) fn commit_batch(&self) -> Result<(), StoreError> {
        match self.conn.execute_batch("COMMIT") {
            Ok(()) => Ok(()),
            Err(e) => {
                if !self.conn.is_autocommit() {
                    if let Err(e2) = self.conn.execute_batch("ROLLBACK") {
                        tracing::warn!(path = %self.path.display(), error = %e2, "rolling back failed");
                    }
                }
                Err(self.err("committing a write transaction", e))
            }
        }
    }

    fn encode<T: serde::Serialize + ?Sized>(
        &self,
        what: impl FnOnce() -> String,
        v: &T,
    ) -> Result<String, StoreError> {
        serde_json::to_string(v).map_err(|e| StoreError::Encode {
            path: self.path.clone(),
            what: what(),
            detail: e.to_string(),
        })
    }

    /// Stores a service description, replacing the one with the same name.
    pub fn save_service(&self, desc: &ServiceDesc) -> Result<(), StoreError> {
        let json = self.encode(|| format!("service `{}`", desc.name), desc)?;
        self.atomic("saving a service", |s| {
            s.conn
                .prepare_cached(
                    "INSERT INTO services (name, description) VALUES (?1, ?2)
                     ON CONFLICT (name) DO UPDATE SET description = excluded.description",
                )?
                .execute(params![desc.name, json])?;
            Ok(())
        })
    }

    /// Stores a server's registration under its name, replacing the row with the same name
    /// (id included): the snapshot gives back exactly this id, registration and time.
    pub fn save_server(
        &self,
        id: ServerId,
        reg: &Registration,
        at_unix_s: f64,
    ) -> Result<(), StoreError> {
        let what = || format!("the registration of server `{}`", reg.name);
        let json = self.encode(what, reg)?;
        // serde_json writes NaN and infinities as null, which it cannot read back: refuse now
        // rather than lose the server at the next start.
        if let Err(e) = serde_json::from_str::<Registration>(&json) {
            return Err(StoreError::Encode {
                path: self.path.clone(),
                what: what(),
                detail: format!(
                    "it does not read back ({e}); are its rates finite numbers? Re-register the server with a valid calibration"
                ),
            });
        }
        self.atomic("saving a server", |s| {
            s.conn
                .prepare_cached(
                    "INSERT INTO servers (name, id, addr, slots, cores, memory_bytes, default_rate,
                                          last_seen_unix_s, registration)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                     ON CONFLICT (name) DO UPDATE SET
                        id = excluded.id, addr = excluded.addr, slots = excluded.slots,
                        cores = excluded.cores, memory_bytes = excluded.memory_bytes,
                        default_rate = excluded.default_rate,
                        last_seen_unix_s = excluded.last_seen_unix_s,
                        registration = excluded.registration",
                )?
                .execute(params![
                    reg.name,
                    id.0.to_string(),
                    reg.addr,
                    reg.slots,
                    reg.cores,
                    sat_i64(reg.memory_bytes),
                    reg.default_rate,
                    at_unix_s,
                    json
                ])?;
            Ok(())
        })
    }

    /// Deletes a server and everything stored about it (its model points, timings and load
    /// history): a server the agent forgot must not come back at the next start.
    pub fn forget_server(&self, name: &str) -> Result<(), StoreError> {
        self.atomic("forgetting a server", |s| {
            for table in [
                "servers WHERE name",
                "model_points WHERE server",
                "timings WHERE server",
                "load_history WHERE server",
            ] {
                s.conn
                    .prepare_cached(&format!("DELETE FROM {table} = ?1"))?
                    .execute(params![name])?;
            }
            Ok(())
        })
    }

    /// Updates a stored server's last-seen time (a heartbeat); unknown names are ignored.
    pub fn touch_server(&self, name: &str, at_unix_s: f64) -> Result<(), StoreError> {
        self.atomic("updating a server's last-seen time", |s| {
            s.conn
                .prepare_cached("UPDATE servers SET last_seen_unix_s = ?2 WHERE name = ?1")?
                .execute(params![name, at_unix_s])?;
            Ok(())
        })
    }

    /// Stores points in one transaction; each row replaces the stored statistics for its
    /// (server, service, x).
    pub fn upsert_points(&self, rows: &[PointRow]) -> Result<(), StoreError> {
        let xs = rows
            .iter()
            .map(|r| {
                self.encode(
                    || format!("the sizes of a `{}` point on `{}`", r.service, r.server),
                    &r.x,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.atomic("saving model points", |s| {
            let mut stmt = s.conn.prepare_cached(
                "INSERT INTO model_points (server, service, x, count, min, mean, max, source, sd)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (server, service, x) DO UPDATE SET
                    count = excluded.count, min = excluded.min, mean = excluded.mean,
                    max = excluded.max, source = excluded.source, sd = excluded.sd",
            )?;
            for (r, x) in rows.iter().zip(&xs) {
                stmt.execute(params![
                    r.server,
                    r.service,
                    x,
                    sat_i64(r.count),
                    r.min,
                    r.mean,
                    r.max,
                    r.source.as_str(),
                    r.sd
                ])?;
            }
            Ok(())
        })
    }

    /// Appends finished calls reported by `server` to the timing history.
    pub fn add_timings(
        &self,
        server: &str,
        at_unix_s: f64,
        reports: &[CallReport],
    ) -> Result<(), StoreError> {
        let sizes = reports
            .iter()
            .map(|r| {
                self.encode(
                    || format!("the sizes of a `{}` call on `{server}`", r.service),
                    &r.sizes,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.atomic("saving timings", |s| {
            let mut stmt = s.conn.prepare_cached(
                "INSERT INTO timings (server, service, at_unix_s, sizes, queue_wait_s,
                                      input_transfer_s, kernel_s, server_s, ok, ticket)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
            for (r, sizes) in reports.iter().zip(&sizes) {
                stmt.execute(params![
                    server,
                    r.service,
                    at_unix_s,
                    sizes,
                    r.timing.queue_wait_s,
                    r.timing.input_transfer_s,
                    r.timing.kernel_s,
                    r.timing.server_s,
                    r.ok,
                    // Tickets are counters: the bit pattern round-trips through i64.
                    r.ticket.map(|t| t.0 as i64),
                ])?;
            }
            Ok(())
        })
    }

    /// Appends one load sample to its server's load history.
    pub fn add_load(&self, row: &LoadRow) -> Result<(), StoreError> {
        self.atomic("saving a load sample", |s| {
            s.conn
                .prepare_cached(
                    "INSERT INTO load_history (server, at_unix_s, loadavg_1m, cpu_available,
                                               free_memory) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    row.server,
                    row.at_unix_s,
                    row.loadavg_1m,
                    row.cpu_available,
                    row.free_memory_bytes
                ])?;
            Ok(())
        })
    }

    /// Bounds the history: keeps the newest `keep_timings_per_pair` timings of every
    /// (server, service) and the newest `keep_load_per_server` load samples of every server.
    pub fn prune(
        &self,
        keep_timings_per_pair: usize,
        keep_load_per_server: usize,
    ) -> Result<(), StoreError> {
        let keep_t = sat_i64(keep_timings_per_pair as u64);
        let keep_l = sat_i64(keep_load_per_server as u64);
        self.atomic("pruning the history", |s| {
            let pairs = s
                .conn
                .prepare("SELECT DISTINCT server, service FROM timings")?
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut del = s.conn.prepare(
                "DELETE FROM timings WHERE server = ?1 AND service = ?2 AND id <=
                    (SELECT id FROM timings WHERE server = ?1 AND service = ?2
                     ORDER BY id DESC LIMIT 1 OFFSET ?3)",
            )?;
            for (server, service) in &pairs {
                del.execute(params![server, service, keep_t])?;
            }
            let servers = s
                .conn
                .prepare("SELECT DISTINCT server FROM load_history")?
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut del = s.conn.prepare(
                "DELETE FROM load_history WHERE server = ?1 AND id <=
                    (SELECT id FROM load_history WHERE server = ?1
                     ORDER BY id DESC LIMIT 1 OFFSET ?2)",
            )?;
            for server in &servers {
                del.execute(params![server, keep_l])?;
            }
            Ok(())
        })
    }

    /// Runs a query and decodes its rows; rows that do not decode (written by another program,
    /// or damaged) are skipped with a warning so that one bad row cannot cost every model.
    fn read_rows<R, T>(
        &self,
        table: &'static str,
        sql: &str,
        params: impl rusqlite::Params,
        read: impl FnMut(&Row<'_>) -> rusqlite::Result<R>,
        mut decode: impl FnMut(R) -> Result<T, String>,
    ) -> rusqlite::Result<Vec<T>> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let mut out = Vec::new();
        for row in stmt.query_map(params, read)? {
            let decoded = match row {
                Ok(raw) => decode(raw),
                Err(e) if is_row_decode_error(&e) => Err(e.to_string()),
                Err(e) => return Err(e),
            };
            match decoded {
                Ok(v) => out.push(v),
                Err(detail) => tracing::warn!(
                    path = %self.path.display(),
                    table,
                    %detail,
                    "skipping an unreadable row; fix or delete it with the sqlite3 shell"
                ),
            }
        }
        Ok(out)
    }

    /// Reads everything back: what a restarted agent starts from.
    pub fn snapshot(&self) -> Result<Snapshot, StoreError> {
        self.atomic("reading the database", |s| {
            let services = s.read_rows(
                "services",
                "SELECT name, description FROM services ORDER BY name",
                [],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
                |(name, json)| {
                    serde_json::from_str::<ServiceDesc>(&json)
                        .map_err(|e| format!("service `{name}`: {e}"))
                },
            )?;
            let servers = s.read_rows(
                "servers",
                "SELECT name, id, registration, last_seen_unix_s FROM servers ORDER BY name",
                [],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<f64>>(3)?,
                    ))
                },
                |(name, id, json, seen)| {
                    let id: ServerId = serde_json::from_value(serde_json::Value::String(id))
                        .map_err(|e| format!("server `{name}`: bad id: {e}"))?;
                    let reg: Registration =
                        serde_json::from_str(&json).map_err(|e| format!("server `{name}`: {e}"))?;
                    Ok((id, reg, real(seen)))
                },
            )?;
            let mut points = s.read_rows(
                "model_points",
                "SELECT server, service, x, count, min, mean, max, source, sd FROM model_points",
                [],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<f64>>(4)?,
                        r.get::<_, Option<f64>>(5)?,
                        r.get::<_, Option<f64>>(6)?,
                        r.get::<_, String>(7)?,
                        r.get::<_, Option<f64>>(8)?,
                    ))
                },
                |(server, service, x, count, min, mean, max, source, sd)| {
                    let at = || format!("point `{service}` on `{server}` at {x}");
                    Ok(PointRow {
                        x: serde_json::from_str(&x).map_err(|e| format!("{}: {e}", at()))?,
                        count: u64::try_from(count)
                            .map_err(|_| format!("{}: negative count {count}", at()))?,
                        min: real(min),
                        mean: real(mean),
                        max: real(max),
                        source: source.parse().map_err(|e| format!("{}: {e}", at()))?,
                        sd: sd.filter(|v| v.is_finite() && *v >= 0.0).unwrap_or(0.0),
                        server,
                        service,
                    })
                },
            )?;
            points
                .sort_by(|a, b| (&a.server, &a.service, &a.x).cmp(&(&b.server, &b.service, &b.x)));
            let load = s.read_rows(
                "load_history",
                "SELECT server, at_unix_s, loadavg_1m, cpu_available, free_memory
                 FROM load_history ORDER BY id",
                [],
                |r| {
                    Ok(LoadRow {
                        server: r.get(0)?,
                        at_unix_s: real(r.get(1)?),
                        loadavg_1m: r.get(2)?,
                        cpu_available: r.get(3)?,
                        free_memory_bytes: r.get(4)?,
                    })
                },
                Ok,
            )?;
            let timings: i64 = s
                .conn
                .query_row("SELECT count(*) FROM timings", [], |r| r.get(0))?;
            Ok(Snapshot {
                services,
                servers,
                points,
                load,
                timings: usize::try_from(timings).unwrap_or(0),
            })
        })
    }

    /// The newest `limit` timings of `service` on `server`, newest first.
    pub fn timings(
        &self,
        server: &str,
        service: &str,
        limit: usize,
    ) -> Result<Vec<StoredTiming>, StoreError> {
        let limit = sat_i64(limit as u64);
        self.atomic("reading timings", |s| {
            s.read_rows(
                "timings",
                "SELECT at_unix_s, sizes, queue_wait_s, input_transfer_s, kernel_s, server_s, ok,
                        ticket
                 FROM timings WHERE server = ?1 AND service = ?2 ORDER BY id DESC LIMIT ?3",
                params![server, service, limit],
                |r| {
                    Ok((
                        r.get::<_, Option<f64>>(0)?,
                        r.get::<_, String>(1)?,
                        [
                            r.get::<_, Option<f64>>(2)?,
                            r.get::<_, Option<f64>>(3)?,
                            r.get::<_, Option<f64>>(4)?,
                            r.get::<_, Option<f64>>(5)?,
                        ],
                        r.get::<_, bool>(6)?,
                        r.get::<_, Option<i64>>(7)?,
                    ))
                },
                |(at, sizes, [q, i, k, sv], ok, ticket)| {
                    Ok(StoredTiming {
                        server: server.to_string(),
                        service: service.to_string(),
                        at_unix_s: real(at),
                        sizes: serde_json::from_str(&sizes)
                            .map_err(|e| format!("timing sizes {sizes}: {e}"))?,
                        timing: Timing {
                            queue_wait_s: real(q),
                            input_transfer_s: real(i),
                            kernel_s: real(k),
                            server_s: real(sv),
                        },
                        ok,
                        ticket: ticket.map(|t| Ticket(t as u64)),
                    })
                },
            )
        })
    }
}
