//! What can go wrong with the store, and what to do about it.

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
