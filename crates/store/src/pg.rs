//! Opening the PostgreSQL store: one database several agents share. The schema is migrated
//! by refinery, under an advisory lock so that agents started together do not race.

use crate::error::StoreError;
use crate::schema::{POSTGRES_MIGRATIONS, SCHEMA_VERSION};
use crate::sql::DbError;
use postgres::config::Host;
use postgres::{Client, Config, NoTls};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The table refinery records applied migrations in.
const HISTORY_TABLE: &str = "gridwise_schema_history";

/// The advisory lock migrations run under (any constant no other program of the database
/// is likely to take: "gridwise" in ASCII).
const MIGRATION_LOCK: i64 = 0x6772_6964_7769_7365;

/// Begins a transaction holding the lock all agents' writes take (until it ends).
pub(crate) const BEGIN_WRITE: &str = "BEGIN; SELECT pg_advisory_xact_lock(7450035551110062963)";

/// How long a connection attempt may take before the store reports the database unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `location` names a PostgreSQL database rather than an SQLite data directory.
pub(crate) fn is_url(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
}

/// Where `config` points, without its password, for messages and [`crate::Store::path`].
fn describe(config: &Config) -> PathBuf {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or(user);
    PathBuf::from(format!("postgres://{user}@{host}:{port}/{db}"))
}

/// Connects to `url` and migrates the database to the current schema.
pub(crate) fn connect(url: &str) -> Result<(Client, PathBuf), StoreError> {
    let mut config: Config = url.parse().map_err(|e| StoreError::BadUrl {
        detail: format!("{e}"),
    })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config.application_name("gridwise-agent");
    let path = describe(&config);
    let mut client = config
        .connect(NoTls)
        .map_err(|source| StoreError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
    migrate(&mut client, &path)?;
    Ok((client, path))
}

/// The newest migration the database has had.
pub(crate) fn schema_version(client: &mut Client) -> Result<i64, DbError> {
    let row = client.query_one(
        &format!("SELECT COALESCE(max(version), 0)::int8 FROM {HISTORY_TABLE}"),
        &[],
    )?;
    Ok(row.get(0))
}

/// A failure while migrating the database at `path`.
fn migrating(path: &Path, e: DbError) -> StoreError {
    StoreError::db(path.to_path_buf(), "migrating the schema", e)
}

fn migrate(client: &mut Client, path: &Path) -> Result<(), StoreError> {
    let sql_err = |e: postgres::Error| migrating(path, e.into());
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .map_err(sql_err)?;
    let result = check_and_migrate(client, path);
    if let Err(e) = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]) {
        tracing::warn!(error = %e, "releasing the migration lock failed (it goes with the connection)");
    }
    result
}

fn check_and_migrate(client: &mut Client, path: &Path) -> Result<(), StoreError> {
    let sql_err = |e: postgres::Error| migrating(path, e.into());
    let has_history: bool = client
        .query_one(
            &format!("SELECT to_regclass('{HISTORY_TABLE}') IS NOT NULL"),
            &[],
        )
        .map_err(sql_err)?
        .get(0);
    if has_history {
        let found = schema_version(client).map_err(|e| migrating(path, e))?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: path.to_path_buf(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
    } else if let Some(row) = client
        .query_opt(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() ORDER BY table_name LIMIT 1",
            &[],
        )
        .map_err(sql_err)?
    {
        return Err(StoreError::Foreign {
            path: path.to_path_buf(),
            table: row.get(0),
        });
    }
    let migrations = POSTGRES_MIGRATIONS
        .iter()
        .enumerate()
        .map(|(i, (name, sql))| refinery::Migration::unapplied(&format!("V{}__{name}", i + 1), sql))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::Migrate {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
    let mut runner = refinery::Runner::new(&migrations)
        .set_abort_divergent(true)
        .set_abort_missing(true);
    runner.set_migration_table_name(HISTORY_TABLE);
    let report = runner.run(client).map_err(|e| StoreError::Migrate {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    for m in report.applied_migrations() {
        tracing::info!(path = %path.display(), version = m.version(), "database schema migrated");
    }
    Ok(())
}
