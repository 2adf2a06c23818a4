//! What can go wrong with the store, and what to do about it.

use crate::sql::DbError;
use rusqlite::ErrorCode;
use std::path::PathBuf;

/// A store failure; every message names the database and says what to do. Every `path` is the
/// database file (`:memory:` for an in-memory store), except [`CreateDir`](Self::CreateDir)'s.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory could not be created.
    #[error(
        "cannot create the gridwise data directory {}: {source}; check the path and its permissions, or choose another data directory",
        .path.display()
    )]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The database file could not be opened.
    #[error(
        "cannot open the gridwise database {}: {source}; {hint}",
        .path.display()
    )]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
        /// Advice chosen from the SQLite error code, ending the message.
        hint: &'static str,
    },
    /// The file is not an SQLite database, or it is damaged.
    #[error(
        "{} is not a gridwise database or is corrupt ({source}); move it (and any gridwise.db-wal, gridwise.db-shm beside it) aside to start with empty models, or restore it from a backup",
        .path.display()
    )]
    Corrupt {
        path: PathBuf,
        source: rusqlite::Error,
    },
    /// The file is an SQLite database that some other program made.
    #[error(
        "{} is an SQLite database but not a gridwise one (it has tables, among them `{table}`, but no gridwise schema version); point the agent at another data directory, or move the file aside",
        .path.display()
    )]
    Foreign {
        path: PathBuf,
        /// Its first table by name, or `(user_version N)` when the version is negative.
        table: String,
    },
    /// The database was written by a newer gridwise.
    #[error(
        "{} was written by a newer gridwise (schema version {found}; this build understands versions up to {supported}): upgrade gridwise, or point the agent at another data directory",
        .path.display()
    )]
    NewerSchema {
        path: PathBuf,
        /// The version in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// An SQL statement failed.
    #[error(
        "gridwise database {}: {action} failed: {source}; {hint}",
        .path.display()
    )]
    Sqlite {
        path: PathBuf,
        /// What the store was doing.
        action: &'static str,
        source: rusqlite::Error,
        /// Advice chosen from the SQLite error code, ending the message.
        hint: &'static str,
    },
    /// A PostgreSQL statement failed.
    #[error(
        "gridwise database {}: {action} failed: {source}; {hint}",
        .path.display()
    )]
    Postgres {
        path: PathBuf,
        /// What the store was doing.
        action: &'static str,
        source: postgres::Error,
        /// Advice chosen from the SQLSTATE, ending the message.
        hint: &'static str,
    },
    /// A row held a value the store cannot read where it could not be skipped.
    #[error(
        "gridwise database {}: {action} failed: a row holds {detail}; fix or delete it with the database's shell",
        .path.display()
    )]
    Unreadable {
        path: PathBuf,
        action: &'static str,
        detail: String,
    },
    /// The `store` setting is not a URL the PostgreSQL client understands.
    #[error(
        "the store's PostgreSQL URL cannot be read ({detail}); write it as postgres://user:password@host:port/database"
    )]
    BadUrl { detail: String },
    /// The PostgreSQL server could not be reached, or refused the agent.
    #[error(
        "cannot connect to the gridwise database {}: {source}; check that PostgreSQL runs there, that the user, password and database in the URL are right, and that its pg_hba.conf lets this host in",
        .path.display()
    )]
    Connect {
        path: PathBuf,
        source: postgres::Error,
    },
    /// The PostgreSQL schema could not be brought to this build's version.
    #[error(
        "gridwise database {}: migrating the schema failed: {detail}; if another program changed gridwise's tables, restore them from a backup or point the agent at an empty database",
        .path.display()
    )]
    Migrate { path: PathBuf, detail: String },
    /// A value could not be written as JSON.
    #[error(
        "gridwise database {}: cannot store {what}: {detail}",
        .path.display()
    )]
    Encode {
        path: PathBuf,
        /// What was being stored.
        what: String,
        detail: String,
    },
}

impl StoreError {
    /// Classifies a failure of either database met while doing `action` on the one at `path`.
    pub(crate) fn db(path: PathBuf, action: &'static str, e: DbError) -> Self {
        match e {
            DbError::Sqlite(e) => StoreError::sqlite(path, action, e),
            DbError::Postgres(source) => StoreError::Postgres {
                path,
                action,
                hint: pg_hint(&source),
                source,
            },
            DbError::Row(detail) => StoreError::Unreadable {
                path,
                action,
                detail,
            },
        }
    }

    /// Classifies an SQLite error met while doing `action` on the database at `path`.
    pub(crate) fn sqlite(path: PathBuf, action: &'static str, source: rusqlite::Error) -> Self {
        match source.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                StoreError::Corrupt { path, source }
            }
            _ => {
                let hint = hint(&source);
                StoreError::Sqlite {
                    path,
                    action,
                    source,
                    hint,
                }
            }
        }
    }

    /// Classifies an SQLite error met while opening the database at `path`.
    pub(crate) fn open(path: PathBuf, source: rusqlite::Error) -> Self {
        match source.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                StoreError::Corrupt { path, source }
            }
            _ => {
                let hint = hint(&source);
                StoreError::Open { path, source, hint }
            }
        }
    }
}

/// What a user can do about a PostgreSQL error.
fn pg_hint(e: &postgres::Error) -> &'static str {
    use postgres::error::SqlState;
    match e.code() {
        Some(c) if *c == SqlState::DISK_FULL => "free some disk space on the database server",
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => {
            "grant the agent's database role the rights on gridwise's tables"
        }
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED =>
        {
            "another agent wrote the same rows at the same moment; the write is tried again"
        }
        None if e.is_closed() => {
            "the connection to the database is gone; the agent reconnects and tries again"
        }
        _ => "if it persists, read the database server's log",
    }
}

/// What a user can do about an SQLite error.
fn hint(e: &rusqlite::Error) -> &'static str {
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => "free some disk space",
        Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied | ErrorCode::CannotOpen) => {
            "check that the data directory and the files in it are writable by the agent's user"
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            "another process holds the database: make sure only one agent uses this data directory"
        }
        Some(ErrorCode::SystemIoFailure) => "the disk reported an I/O error: check the disk",
        Some(ErrorCode::NoLargeFileSupport | ErrorCode::FileLockingProtocolFailed) => {
            "put the data directory on a local filesystem"
        }
        _ => {
            "if it persists, stop the agent and move the database aside to start with empty models"
        }
    }
}
