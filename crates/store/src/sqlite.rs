//! Opening the SQLite store: the embedded default, one agent's file in its data directory.

use crate::error::StoreError;
use crate::schema::{MIGRATIONS, SCHEMA_VERSION};
use rusqlite::{Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The database file's name inside the data directory.
pub const DB_FILE: &str = "gridwise.db";

/// How long a statement waits for a lock held by another connection before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens (creating it and the directory if needed) `<dir>/gridwise.db` in WAL mode, migrated
/// to the current schema.
pub(crate) fn open(dir: &Path) -> Result<(Connection, PathBuf), StoreError> {
    std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let path = dir.join(DB_FILE);
    let conn = Connection::open(&path).map_err(|e| StoreError::open(path.clone(), e))?;
    init(&conn, &path, true)?;
    Ok((conn, path))
}

/// A private in-memory database with the current schema.
pub(crate) fn open_in_memory() -> Result<(Connection, PathBuf), StoreError> {
    let path = PathBuf::from(":memory:");
    let conn = Connection::open_in_memory().map_err(|e| StoreError::open(path.clone(), e))?;
    init(&conn, &path, false)?;
    Ok((conn, path))
}

pub(crate) fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

fn init(conn: &Connection, path: &Path, on_disk: bool) -> Result<(), StoreError> {
    let open_err = |e| StoreError::open(path.to_path_buf(), e);
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    // The first read of the file: a file that is not a database fails here.
    let version = user_version(conn).map_err(open_err)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < 0 {
        return Err(StoreError::Foreign {
            path: path.to_path_buf(),
            table: format!("(user_version {version})"),
        });
    }
    if version == 0 {
        let table: Option<String> = conn
            .query_row(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(open_err)?;
        if let Some(table) = table {
            return Err(StoreError::Foreign {
                path: path.to_path_buf(),
                table,
            });
        }
    }
    if on_disk {
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(
                path = %path.display(),
                mode,
                "the database could not be switched to WAL mode; writes will be slower"
            );
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_err)?;
    }
    migrate(conn, path, version)
}

fn migrate(conn: &Connection, path: &Path, from: i64) -> Result<(), StoreError> {
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        let to = i as i64 + 1;
        let step = || -> rusqlite::Result<()> {
            conn.execute_batch("BEGIN")?;
            let done = conn
                .execute_batch(sql)
                .and_then(|()| conn.pragma_update(None, "user_version", to))
                .and_then(|()| conn.execute_batch("COMMIT"));
            if done.is_err() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            done
        };
        step().map_err(|e| StoreError::sqlite(path.to_path_buf(), "migrating the schema", e))?;
        tracing::info!(path = %path.display(), version = to, "database schema migrated");
    }
    Ok(())
}
