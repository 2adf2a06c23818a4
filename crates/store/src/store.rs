//! The database: opening, migrating, writing and reading back.

use crate::error::StoreError;
use crate::sql::{Db, DbError, Value, is_row_decode_error, params};
use gridwise_proto::{
    CallReport, PointSource, Registration, ServerId, ServiceDesc, Ticket, Timing,
};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// `min`, `mean` and `max` may be NaN: the store keeps it as NULL, and reading turns NULL
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

/// Where the store is and how to reach it again: a PostgreSQL connection that broke is
/// opened again from its URL before the next write.
enum Reopen {
    Never,
    Postgres(String),
}

/// The gridwise database: one connection, to SQLite (the embedded default, one agent) or to
/// PostgreSQL (shared by several agents). Not shared between threads; hand it to a
/// [`crate::Writer`] to write from a thread of its own.
pub struct Store {
    db: RefCell<Db>,
    /// The database file, or the PostgreSQL URL without its password.
    path: PathBuf,
    /// Whether a transaction is open (the writer's batch, or an operation's own).
    in_tx: Cell<bool>,
    /// Whether an operation inside the writer's batch runs in a savepoint of its own (off
    /// while the writer tries a batch all at once).
    op_savepoints: Cell<bool>,
    reopen: Reopen,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// NULL (a NaN on the way in) reads back as NaN.
fn real(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

/// A u64 as the databases' signed integer, saturating.
fn sat_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The next column of a row.
fn col(row: &mut std::vec::IntoIter<Value>) -> Value {
    row.next().unwrap_or(Value::Null)
}

impl Store {
    /// Opens (creating it and the directory if needed) `<dir>/gridwise.db` in WAL mode and
    /// migrates it to the current schema.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let (conn, path) = crate::sqlite::open(dir)?;
        Ok(Store::new(Db::Sqlite(conn), path, Reopen::Never))
    }

    /// Opens a private in-memory database with the current schema (for tests and `--no-store`).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let (conn, path) = crate::sqlite::open_in_memory()?;
        Ok(Store::new(Db::Sqlite(conn), path, Reopen::Never))
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://user[:password]@host[:port]/db`,
    /// or the key-value form libpq takes) and migrates it to the current schema. Several
    /// agents may share it: migrations take a lock, so agents started together do not race.
    pub fn connect(url: &str) -> Result<Store, StoreError> {
        let (client, path) = crate::pg::connect(url)?;
        Ok(Store::new(
            Db::postgres(client),
            path,
            Reopen::Postgres(url.to_string()),
        ))
    }

    /// Opens the store `location` names: a `postgres://` or `postgresql://` URL, else the
    /// data directory of an SQLite store.
    pub fn open_location(location: &str) -> Result<Store, StoreError> {
        if crate::pg::is_url(location) {
            Store::connect(location)
        } else {
            Store::open(Path::new(location))
        }
    }

    fn new(db: Db, path: PathBuf, reopen: Reopen) -> Store {
        Store {
            db: RefCell::new(db),
            path,
            in_tx: Cell::new(false),
            op_savepoints: Cell::new(true),
            reopen,
        }
    }

    /// How long a statement waits for another connection's lock before failing (5 s unless
    /// changed; SQLite only: PostgreSQL waits for row locks as long as they are held).
    pub fn set_busy_timeout(&self, wait: Duration) {
        if let Db::Sqlite(c) = &*self.db.borrow() {
            if let Err(e) = c.busy_timeout(wait) {
                tracing::warn!(error = %e, "cannot change the database's busy timeout");
            }
        }
    }

    /// The database file (`:memory:` for an in-memory store), or the PostgreSQL URL without
    /// its password.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the store is a PostgreSQL database (shared) rather than an SQLite file.
    pub fn is_shared(&self) -> bool {
        matches!(self.reopen, Reopen::Postgres(_))
    }

    /// The schema version of the open database (always [`SCHEMA_VERSION`] after open).
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.with_db("reading the schema version", |db| match db {
            Db::Sqlite(c) => Ok(crate::sqlite::user_version(c)?),
            Db::Postgres { client, .. } => crate::pg::schema_version(client),
        })
    }

    /// The journal mode SQLite reports: `wal` for a store on disk, `memory` in memory
    /// (`postgres` for a PostgreSQL store).
    pub fn journal_mode(&self) -> Result<String, StoreError> {
        match &*self.db.borrow() {
            Db::Sqlite(c) => c
                .pragma_query_value(None, "journal_mode", |r| r.get(0))
                .map_err(|e| self.err("reading the journal mode", e.into())),
            Db::Postgres { .. } => Ok("postgres".into()),
        }
    }

    /// The SQLite connection, for tests that poke at the file directly.
    #[cfg(test)]
    pub(crate) fn conn_for_tests(&self) -> std::cell::Ref<'_, rusqlite::Connection> {
        std::cell::Ref::map(self.db.borrow(), |db| match db {
            Db::Sqlite(c) => c,
            Db::Postgres { .. } => panic!("not an SQLite store"),
        })
    }

    fn err(&self, action: &'static str, e: DbError) -> StoreError {
        StoreError::db(self.path.clone(), action, e)
    }

    /// Runs `f` on the connection (not in a transaction of its own).
    fn with_db<T>(
        &self,
        action: &'static str,
        f: impl FnOnce(&mut Db) -> Result<T, DbError>,
    ) -> Result<T, StoreError> {
        let mut db = self.db.borrow_mut();
        f(&mut db).map_err(|e| self.err(action, e))
    }

    fn batch(&self, sql: &str) -> Result<(), DbError> {
        self.db.borrow_mut().batch(sql)
    }

    fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        self.db.borrow_mut().execute(sql, params)
    }

    /// Runs the writes of `f` all or nothing: in a savepoint inside an open transaction (the
    /// writer's batch), else in a write transaction of its own.
    fn atomic<T>(
        &self,
        action: &'static str,
        f: impl FnOnce(&Store) -> Result<T, DbError>,
    ) -> Result<T, StoreError> {
        self.transaction(action, self.begin_sql(), f)
    }

    /// Runs the reads of `f` on one consistent view, waiting for no writer.
    fn reading<T>(
        &self,
        action: &'static str,
        f: impl FnOnce(&Store) -> Result<T, DbError>,
    ) -> Result<T, StoreError> {
        self.transaction(action, "BEGIN", f)
    }

    fn transaction<T>(
        &self,
        action: &'static str,
        begin: &'static str,
        f: impl FnOnce(&Store) -> Result<T, DbError>,
    ) -> Result<T, StoreError> {
        let nested = self.in_tx.get();
        if nested && !self.op_savepoints.get() {
            return f(self).map_err(|e| self.err(action, e));
        }
        let (begin, commit, rollback) = if nested {
            (
                "SAVEPOINT gridwise_op",
                "RELEASE gridwise_op",
                "ROLLBACK TO gridwise_op; RELEASE gridwise_op",
            )
        } else {
            (begin, "COMMIT", "ROLLBACK")
        };
        self.reconnect_if_lost();
        self.batch(begin).map_err(|e| self.err(action, e))?;
        self.in_tx.set(true);
        let result = f(self).and_then(|v| self.batch(commit).map(|()| v));
        if result.is_err() {
            if let Err(e2) = self.batch(rollback) {
                tracing::warn!(path = %self.path.display(), error = ?e2, "rolling back failed");
            }
        }
        self.in_tx.set(nested);
        result.map_err(|e| self.err(action, e))
    }

    /// A PostgreSQL connection the server closed (it restarted, or the network dropped it) is
    /// opened again; until that succeeds, every write fails and the writer keeps it.
    fn reconnect_if_lost(&self) {
        let Reopen::Postgres(url) = &self.reopen else {
            return;
        };
        if self.in_tx.get() || !self.db.borrow().is_closed() {
            return;
        }
        match crate::pg::connect(url) {
            Ok((client, _)) => {
                tracing::info!(path = %self.path.display(), "reconnected to the database");
                *self.db.borrow_mut() = Db::postgres(client);
            }
            Err(e) => tracing::warn!(error = %e, "cannot reconnect to the database yet"),
        }
    }

    /// How a transaction begins: at once the only writer. SQLite locks the file; PostgreSQL
    /// takes a lock every agent's writes share, so that two agents' batches upserting the same
    /// points in different orders wait for each other rather than deadlock (which PostgreSQL
    /// breaks only after a second, once per conflict: a minute for a few hundred of them).
    fn begin_sql(&self) -> &'static str {
        match &*self.db.borrow() {
            Db::Sqlite(_) => "BEGIN IMMEDIATE",
            Db::Postgres { .. } => crate::pg::BEGIN_WRITE,
        }
    }

    /// Begins the writer's batch transaction.
    pub(crate) fn begin_batch(&self) -> Result<(), StoreError> {
        self.reconnect_if_lost();
        self.batch(self.begin_sql())
            .map_err(|e| self.err("starting a write transaction", e))?;
        self.in_tx.set(true);
        Ok(())
    }

    /// Whether operations inside the writer's batch take savepoints of their own.
    pub(crate) fn set_op_savepoints(&self, on: bool) {
        self.op_savepoints.set(on);
    }

    /// Abandons the writer's batch transaction.
    pub(crate) fn rollback_batch(&self) {
        self.in_tx.set(false);
        if let Err(e) = self.batch("ROLLBACK") {
            tracing::warn!(path = %self.path.display(), error = ?e, "rolling back failed");
        }
    }

    /// Commits the writer's batch transaction; on failure rolls it back.
    pub(crate) fn commit_batch(&self) -> Result<(), StoreError> {
        self.in_tx.set(false);
        match self.batch("COMMIT") {
            Ok(()) => Ok(()),
            Err(e) => {
                let open = match &*self.db.borrow() {
                    Db::Sqlite(c) => !c.is_autocommit(),
                    // A failed COMMIT ends PostgreSQL's transaction; a ROLLBACK is harmless.
                    Db::Postgres { client, .. } => !client.is_closed(),
                };
                if open {
                    if let Err(e2) = self.batch("ROLLBACK") {
                        tracing::warn!(path = %self.path.display(), error = ?e2, "rolling back failed");
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
            s.execute(
                "INSERT INTO services (name, description) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET description = excluded.description",
                &params([(&desc.name).into(), json.into()]),
            )?;
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
            s.execute(
                "INSERT INTO servers (name, id, addr, slots, cores, memory_bytes, default_rate,
                                      last_seen_unix_s, registration)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (name) DO UPDATE SET
                    id = excluded.id, addr = excluded.addr, slots = excluded.slots,
                    cores = excluded.cores, memory_bytes = excluded.memory_bytes,
                    default_rate = excluded.default_rate,
                    last_seen_unix_s = excluded.last_seen_unix_s,
                    registration = excluded.registration",
                &params([
                    (&reg.name).into(),
                    id.0.to_string().into(),
                    (&reg.addr).into(),
                    reg.slots.into(),
                    reg.cores.into(),
                    sat_i64(reg.memory_bytes).into(),
                    reg.default_rate.into(),
                    at_unix_s.into(),
                    json.into(),
                ]),
            )?;
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
                s.execute(&format!("DELETE FROM {table} = $1"), &params([name.into()]))?;
            }
            Ok(())
        })
    }

    /// Updates a stored server's last-seen time (a heartbeat); unknown names are ignored.
    pub fn touch_server(&self, name: &str, at_unix_s: f64) -> Result<(), StoreError> {
        self.atomic("updating a server's last-seen time", |s| {
            s.execute(
                "UPDATE servers SET last_seen_unix_s = $2 WHERE name = $1",
                &params([name.into(), at_unix_s.into()]),
            )?;
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
            for (r, x) in rows.iter().zip(xs) {
                s.execute(
                    "INSERT INTO model_points (server, service, x, count, min, mean, max, source, sd)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                     ON CONFLICT (server, service, x) DO UPDATE SET
                        count = excluded.count, min = excluded.min, mean = excluded.mean,
                        max = excluded.max, source = excluded.source, sd = excluded.sd",
                    &params([
                        (&r.server).into(),
                        (&r.service).into(),
                        x.into(),
                        sat_i64(r.count).into(),
                        r.min.into(),
                        r.mean.into(),
                        r.max.into(),
                        r.source.as_str().into(),
                        r.sd.into(),
                    ]),
                )?;
            }
            Ok(())
        })
    }

    /// Appends finished calls reported by `server` to the timing history; a call whose ticket
    /// is there already (another agent of a shared store heard the same report) is not added
    /// again.
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
            for (r, sizes) in reports.iter().zip(sizes) {
                s.execute(
                    "INSERT INTO timings (server, service, at_unix_s, sizes, queue_wait_s,
                                          input_transfer_s, kernel_s, server_s, ok, ticket)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                     ON CONFLICT (ticket) WHERE ticket IS NOT NULL DO NOTHING",
                    &params([
                        server.into(),
                        (&r.service).into(),
                        at_unix_s.into(),
                        sizes.into(),
                        r.timing.queue_wait_s.into(),
                        r.timing.input_transfer_s.into(),
                        r.timing.kernel_s.into(),
                        r.timing.server_s.into(),
                        r.ok.into(),
                        // Tickets are counters: the bit pattern round-trips through i64.
                        r.ticket.map(|t| t.0 as i64).into(),
                    ]),
                )?;
            }
            Ok(())
        })
    }

    /// Appends one load sample to its server's load history.
    pub fn add_load(&self, row: &LoadRow) -> Result<(), StoreError> {
        self.atomic("saving a load sample", |s| {
            s.execute(
                "INSERT INTO load_history (server, at_unix_s, loadavg_1m, cpu_available,
                                           free_memory) VALUES ($1, $2, $3, $4, $5)",
                &params([
                    (&row.server).into(),
                    row.at_unix_s.into(),
                    row.loadavg_1m.into(),
                    row.cpu_available.into(),
                    row.free_memory_bytes.into(),
                ]),
            )?;
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
            let pairs = s.read_rows(
                "timings",
                "SELECT DISTINCT server, service FROM timings",
                &[],
                |mut r| Ok((col(&mut r).text()?, col(&mut r).text()?)),
            )?;
            for (server, service) in pairs {
                s.execute(
                    "DELETE FROM timings WHERE server = $1 AND service = $2 AND id <=
                        (SELECT id FROM timings WHERE server = $1 AND service = $2
                         ORDER BY id DESC LIMIT 1 OFFSET $3)",
                    &params([server.into(), service.into(), keep_t.into()]),
                )?;
            }
            let servers = s.read_rows(
                "load_history",
                "SELECT DISTINCT server FROM load_history",
                &[],
                |mut r| col(&mut r).text(),
            )?;
            for server in servers {
                s.execute(
                    "DELETE FROM load_history WHERE server = $1 AND id <=
                        (SELECT id FROM load_history WHERE server = $1
                         ORDER BY id DESC LIMIT 1 OFFSET $2)",
                    &params([server.into(), keep_l.into()]),
                )?;
            }
            Ok(())
        })
    }

    /// Runs a query and decodes its rows; rows that do not decode (written by another program,
    /// or damaged) are skipped with a warning so that one bad row cannot cost every model.
    fn read_rows<T>(
        &self,
        table: &'static str,
        sql: &str,
        params: &[Value],
        mut decode: impl FnMut(std::vec::IntoIter<Value>) -> Result<T, String>,
    ) -> Result<Vec<T>, DbError> {
        let rows = self.db.borrow_mut().query(sql, params)?;
        let mut out = Vec::new();
        for row in rows {
            let decoded = match row {
                Ok(values) => decode(values.into_iter()),
                Err(DbError::Row(e)) => Err(e),
                Err(e) if is_row_decode_error(&e) => Err(format!("{e:?}")),
                Err(e) => return Err(e),
            };
            match decoded {
                Ok(v) => out.push(v),
                Err(detail) => tracing::warn!(
                    path = %self.path.display(),
                    table,
                    %detail,
                    "skipping an unreadable row; fix or delete it with the database's shell"
                ),
            }
        }
        Ok(out)
    }

    /// Reads everything back: what a restarted agent starts from.
    pub fn snapshot(&self) -> Result<Snapshot, StoreError> {
        self.reading("reading the database", |s| {
            let mut services = s.read_rows(
                "services",
                "SELECT name, description FROM services",
                &[],
                |mut r| {
                    let (name, json) = (col(&mut r).text()?, col(&mut r).text()?);
                    serde_json::from_str::<ServiceDesc>(&json)
                        .map_err(|e| format!("service `{name}`: {e}"))
                },
            )?;
            // Sorted here, not by the databases: their collations of text differ.
            services.sort_by(|a, b| a.name.cmp(&b.name));
            let mut servers = s.read_rows(
                "servers",
                "SELECT name, id, registration, last_seen_unix_s FROM servers",
                &[],
                |mut r| {
                    let name = col(&mut r).text()?;
                    let id = col(&mut r).text()?;
                    let json = col(&mut r).text()?;
                    let seen = col(&mut r).real_opt()?;
                    let id: ServerId = serde_json::from_value(serde_json::Value::String(id))
                        .map_err(|e| format!("server `{name}`: bad id: {e}"))?;
                    let reg: Registration =
                        serde_json::from_str(&json).map_err(|e| format!("server `{name}`: {e}"))?;
                    Ok((id, reg, real(seen)))
                },
            )?;
            servers.sort_by(|a, b| a.1.name.cmp(&b.1.name));
            let mut points = s.read_rows(
                "model_points",
                "SELECT server, service, x, count, min, mean, max, source, sd FROM model_points",
                &[],
                |mut r| {
                    let server = col(&mut r).text()?;
                    let service = col(&mut r).text()?;
                    let x = col(&mut r).text()?;
                    let at = || format!("point `{service}` on `{server}` at {x}");
                    let count = col(&mut r).int().map_err(|e| format!("{}: {e}", at()))?;
                    let mut real_col =
                        || col(&mut r).real_opt().map_err(|e| format!("{}: {e}", at()));
                    let (min, mean, max) = (real_col()?, real_col()?, real_col()?);
                    let source = col(&mut r).text().map_err(|e| format!("{}: {e}", at()))?;
                    let sd = col(&mut r)
                        .real_opt()
                        .map_err(|e| format!("{}: {e}", at()))?;
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
                &[],
                |mut r| {
                    Ok(LoadRow {
                        server: col(&mut r).text()?,
                        at_unix_s: real(col(&mut r).real_opt()?),
                        loadavg_1m: col(&mut r).real_opt()?,
                        cpu_available: col(&mut r).real_opt()?,
                        free_memory_bytes: col(&mut r).real_opt()?,
                    })
                },
            )?;
            let timings =
                s.read_rows("timings", "SELECT count(*) FROM timings", &[], |mut r| {
                    col(&mut r).int()
                })?;
            Ok(Snapshot {
                services,
                servers,
                points,
                load,
                timings: timings
                    .first()
                    .and_then(|n| usize::try_from(*n).ok())
                    .unwrap_or(0),
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
        self.reading("reading timings", |s| {
            s.read_rows(
                "timings",
                "SELECT at_unix_s, sizes, queue_wait_s, input_transfer_s, kernel_s, server_s, ok,
                        ticket
                 FROM timings WHERE server = $1 AND service = $2 ORDER BY id DESC LIMIT $3",
                &params([server.into(), service.into(), limit.into()]),
                |mut r| {
                    let at = col(&mut r).real_opt()?;
                    let sizes = col(&mut r).text()?;
                    let mut t = || col(&mut r).real_opt().map(real);
                    let timing = Timing {
                        queue_wait_s: t()?,
                        input_transfer_s: t()?,
                        kernel_s: t()?,
                        server_s: t()?,
                    };
                    let ok = col(&mut r).boolean()?;
                    let ticket = col(&mut r).int_opt()?;
                    Ok(StoredTiming {
                        server: server.to_string(),
                        service: service.to_string(),
                        at_unix_s: real(at),
                        sizes: serde_json::from_str(&sizes)
                            .map_err(|e| format!("timing sizes {sizes}: {e}"))?,
                        timing,
                        ok,
                        ticket: ticket.map(|t| Ticket(t as u64)),
                    })
                },
            )
        })
    }
}
