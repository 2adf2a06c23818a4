//! One connection to either database the store runs on, speaking one SQL: every statement of
//! the store is written once, with `$1`-style parameters, and values cross as [`Value`]s. The
//! two dialects differ only in their schemas (`schema.rs`) and in how a connection is opened.

use postgres_types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use std::collections::HashMap;
use std::error::Error as StdError;

/// A value bound to a statement or read from a row. A NaN real is bound as NULL on both
/// databases (SQLite has no NaN; PostgreSQL has one, and the two must read back alike).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Bool(bool),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Int(i64::from(v))
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        if v.is_nan() {
            Value::Null
        } else {
            Value::Real(v)
        }
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value::Text(v.clone())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// What a read value is, for a row that holds something else.
type Decoded<T> = Result<T, String>;

impl Value {
    pub(crate) fn text(self) -> Decoded<String> {
        match self {
            Value::Text(s) => Ok(s),
            v => Err(format!("expected text, found {v:?}")),
        }
    }

    pub(crate) fn int(self) -> Decoded<i64> {
        match self {
            Value::Int(i) => Ok(i),
            v => Err(format!("expected an integer, found {v:?}")),
        }
    }

    pub(crate) fn int_opt(self) -> Decoded<Option<i64>> {
        match self {
            Value::Null => Ok(None),
            v => v.int().map(Some),
        }
    }

    /// A real; NULL (and SQLite's stored NaN) is `None`, an integer is widened.
    pub(crate) fn real_opt(self) -> Decoded<Option<f64>> {
        match self {
            Value::Null => Ok(None),
            Value::Real(f) => Ok(Some(f).filter(|f| !f.is_nan())),
            Value::Int(i) => Ok(Some(i as f64)),
            v => Err(format!("expected a number, found {v:?}")),
        }
    }

    /// A flag: SQLite keeps it as 0 or 1.
    pub(crate) fn boolean(self) -> Decoded<bool> {
        match self {
            Value::Bool(b) => Ok(b),
            Value::Int(i) => Ok(i != 0),
            v => Err(format!("expected a flag, found {v:?}")),
        }
    }
}

/// Binds $1, $2, … positionally.
pub(crate) fn params<const N: usize>(values: [Value; N]) -> Vec<Value> {
    values.into()
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value as V};
        Ok(ToSqlOutput::Owned(match self {
            Value::Null => V::Null,
            Value::Int(i) => V::Integer(*i),
            Value::Real(f) => V::Real(*f),
            Value::Text(s) => V::Text(s.clone()),
            Value::Bool(b) => V::Integer(i64::from(*b)),
        }))
    }
}

impl rusqlite::types::FromSql for Value {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        use rusqlite::types::{FromSqlError, ValueRef};
        Ok(match v {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Int(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(t) => Value::Text(
                std::str::from_utf8(t)
                    .map_err(|e| FromSqlError::Other(Box::new(e)))?
                    .to_string(),
            ),
            ValueRef::Blob(_) => return Err(FromSqlError::InvalidType),
        })
    }
}

type BoxError = Box<dyn StdError + Sync + Send>;

impl ToSql for Value {
    /// Written as the column's own type wants it: PostgreSQL types every parameter from the
    /// statement, and an integer bound where a real is expected is still the user's number.
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, BoxError> {
        match (self, ty) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (Value::Int(i), &Type::INT8) => i.to_sql(ty, out),
            (Value::Int(i), &Type::INT4) => i32::try_from(*i)?.to_sql(ty, out),
            (Value::Int(i), &Type::INT2) => i16::try_from(*i)?.to_sql(ty, out),
            (Value::Int(i), &Type::FLOAT8) => (*i as f64).to_sql(ty, out),
            (Value::Int(i), &Type::BOOL) => (*i != 0).to_sql(ty, out),
            (Value::Real(f), &Type::FLOAT8) => f.to_sql(ty, out),
            (Value::Real(f), &Type::FLOAT4) => (*f as f32).to_sql(ty, out),
            (Value::Text(s), _) if <&str as ToSql>::accepts(ty) => s.as_str().to_sql(ty, out),
            (Value::Bool(b), &Type::BOOL) => b.to_sql(ty, out),
            (v, ty) => Err(format!("cannot write {v:?} as PostgreSQL type {ty}").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Value {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i64::from(i32::from_sql(ty, raw)?)),
            Type::INT2 => Value::Int(i64::from(i16::from_sql(ty, raw)?)),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f64::from(f32::from_sql(ty, raw)?)),
            Type::BOOL => Value::Bool(bool::from_sql(ty, raw)?),
            _ => Value::Text(<&str>::from_sql(ty, raw)?.to_string()),
        })
    }

    fn from_sql_null(_: &Type) -> Result<Self, BoxError> {
        Ok(Value::Null)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(
            *ty,
            Type::INT8 | Type::INT4 | Type::INT2 | Type::FLOAT8 | Type::FLOAT4 | Type::BOOL
        ) || <&str as FromSql>::accepts(ty)
    }
}

/// A failure of either database, or a row that holds something the store cannot read.
#[derive(Debug)]
pub(crate) enum DbError {
    Sqlite(rusqlite::Error),
    Postgres(postgres::Error),
    /// A column that does not read as a value the store knows.
    Row(String),
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        DbError::Sqlite(e)
    }
}

impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> Self {
        DbError::Postgres(e)
    }
}

/// Whether an error means "this row holds something we cannot read": skip the row.
pub(crate) fn is_row_decode_error(e: &DbError) -> bool {
    match e {
        DbError::Sqlite(e) => matches!(
            e,
            rusqlite::Error::InvalidColumnType(..)
                | rusqlite::Error::FromSqlConversionFailure(..)
                | rusqlite::Error::IntegralValueOutOfRange(..)
        ),
        DbError::Row(_) => true,
        DbError::Postgres(_) => false,
    }
}

/// An open connection.
pub(crate) enum Db {
    Sqlite(rusqlite::Connection),
    Postgres {
        client: Box<postgres::Client>,
        /// Statements prepared on this connection, by text (each costs a round trip).
        prepared: HashMap<String, postgres::Statement>,
    },
}

impl Db {
    pub(crate) fn postgres(client: postgres::Client) -> Db {
        Db::Postgres {
            client: Box::new(client),
            prepared: HashMap::new(),
        }
    }

    /// Runs statements that take no parameters (transaction control, schema).
    pub(crate) fn batch(&mut self, sql: &str) -> Result<(), DbError> {
        match self {
            Db::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Db::Postgres { client, .. } => Ok(client.batch_execute(sql)?),
        }
    }

    /// Runs one statement; the rows it changed.
    pub(crate) fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        match self {
            Db::Sqlite(c) => {
                let n = c
                    .prepare_cached(&sqlite_sql(sql))?
                    .execute(rusqlite::params_from_iter(params))?;
                Ok(n as u64)
            }
            Db::Postgres { client, prepared } => {
                let stmt = statement(client, prepared, sql)?;
                Ok(client.execute(&stmt, &pg_params(params))?)
            }
        }
    }

    /// Runs a query; each row's values, or why one could not be read (the rest still are).
    pub(crate) fn query(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> Result<Vec<Result<Vec<Value>, DbError>>, DbError> {
        match self {
            Db::Sqlite(c) => {
                let mut stmt = c.prepare_cached(&sqlite_sql(sql))?;
                let width = stmt.column_count();
                let rows = stmt.query_map(rusqlite::params_from_iter(params), |r| {
                    (0..width).map(|i| r.get::<_, Value>(i)).collect()
                })?;
                Ok(rows.map(|r| r.map_err(DbError::from)).collect())
            }
            Db::Postgres { client, prepared } => {
                let stmt = statement(client, prepared, sql)?;
                let rows = client.query(&stmt, &pg_params(params))?;
                Ok(rows
                    .iter()
                    .map(|r| {
                        (0..r.len())
                            .map(|i| {
                                r.try_get::<_, Value>(i)
                                    .map_err(|e| DbError::Row(e.to_string()))
                            })
                            .collect()
                    })
                    .collect())
            }
        }
    }

    /// Whether the connection is gone for good (PostgreSQL's server went away): a new one
    /// must be opened before anything else can be done.
    pub(crate) fn is_closed(&self) -> bool {
        match self {
            Db::Sqlite(_) => false,
            Db::Postgres { client, .. } => client.is_closed(),
        }
    }
}

/// SQLite reads `$1` as a named parameter numbered by first appearance, which is not always
/// its position; `?1` is numbered as written.
fn sqlite_sql(sql: &str) -> String {
    sql.replace('$', "?")
}

fn statement(
    client: &mut postgres::Client,
    prepared: &mut HashMap<String, postgres::Statement>,
    sql: &str,
) -> Result<postgres::Statement, DbError> {
    if let Some(s) = prepared.get(sql) {
        return Ok(s.clone());
    }
    let s = client.prepare(sql)?;
    prepared.insert(sql.to_string(), s.clone());
    Ok(s)
}

fn pg_params(params: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_parameters_are_numbered_for_sqlite() {
        assert_eq!(
            sqlite_sql("UPDATE t SET a = $2 WHERE b = $1"),
            "UPDATE t SET a = ?2 WHERE b = ?1"
        );
    }

    #[test]
    fn nan_is_bound_as_null_and_read_as_none() {
        assert_eq!(Value::from(f64::NAN), Value::Null);
        assert_eq!(Value::Real(f64::NAN).real_opt(), Ok(None));
        assert_eq!(Value::Int(3).real_opt(), Ok(Some(3.0)));
        assert!(Value::Text("x".into()).real_opt().is_err());
        assert_eq!(Value::Int(1).boolean(), Ok(true));
    }
}
