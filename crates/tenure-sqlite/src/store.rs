//! The [`LeaseStore`] in a SQLite file: one row per group, compare-and-swap
//! in an immediate transaction, batches in one transaction each.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};
use tenure::store::Running;
use tenure::store::{BatchResult, CasOutcome, CasRequest, ChangeFeed, Listed, StoreFeed};
use tenure::{
    EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, RecordError, StoreError, Version,
    Versioned,
};

use crate::error::SqliteStoreError;
use crate::{feed, schema, SqliteOptions};

struct Inner {
    /// The path as opened, for reconnecting and in error messages.
    path: PathBuf,
    /// `sqlite://` and the absolute path.
    describe: String,
    options: SqliteOptions,
    /// One connection per store; the mutex serialises this handle's calls,
    /// which SQLite would serialise anyway.
    conn: Mutex<Connection>,
    /// The engine that electors on clones of this handle share.
    engine: EngineSlot,
}

/// A [`LeaseStore`] in a SQLite database file, shared by the processes of
/// one host. See the [crate documentation](crate) for the schema and the
/// concurrency model.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with default
    /// [`SqliteOptions`], creating the schema on first use.
    ///
    /// Fails with a [`SqliteStoreError`] naming the path and the fix when the
    /// file is not a SQLite database or is corrupt, when a newer tenure
    /// upgraded its schema, when it cannot be created or written, or when
    /// another process keeps it locked for longer than the busy timeout.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("tenure-open-{}.txt", std::process::id()));
    /// std::fs::write(&path, "not a database, just some text that is long enough").unwrap();
    /// let err = tenure_sqlite::SqliteStore::connect(&path).await.unwrap_err();
    /// assert!(matches!(err, tenure_sqlite::SqliteStoreError::NotADatabase { .. }), "{err}");
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    pub async fn connect(path: impl AsRef<Path>) -> Result<Self, SqliteStoreError> {
        Self::connect_with(path, SqliteOptions::default()).await
    }

    /// Opens the database at `path` with the given options; see
    /// [`connect`](SqliteStore::connect). (The file is the store's
    /// address, so it comes beside the options rather than in them.)
    pub async fn connect_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<Self, SqliteStoreError> {
        let path = path.as_ref().to_path_buf();
        if path.as_os_str().is_empty() {
            return Err(SqliteStoreError::InvalidPath {
                path,
                reason: "the path is empty",
            });
        }
        if path.as_os_str() == ":memory:" {
            return Err(SqliteStoreError::InvalidPath {
                path,
                reason: "an in-memory database is private to one connection, so no other candidate would see it",
            });
        }
        let p = path.clone();
        let opts = options.clone();
        let conn = tokio::task::spawn_blocking(move || {
            let mut conn = schema::connect(&p, &opts)?;
            schema::ensure_schema(&mut conn, &p, &opts)?;
            Ok::<_, SqliteStoreError>(conn)
        })
        .await
        .map_err(|e| SqliteStoreError::Worker {
            path: path.clone(),
            detail: e.to_string(),
        })??;
        // After connecting the file exists, so it has a canonical name.
        let shown = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        tracing::debug!(path = %shown.display(), "opened the SQLite lease store");
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                describe: format!("sqlite://{}", shown.display()),
                path,
                options,
                conn: Mutex::new(conn),
                engine: EngineSlot::new(),
            }),
        })
    }

    /// The same as [`connect`](SqliteStore::connect): opening a file is
    /// what connecting is for SQLite, and this is the name it had first.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, SqliteStoreError> {
        Self::connect(path).await
    }

    /// The same as [`connect_with`](SqliteStore::connect_with).
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<Self, SqliteStoreError> {
        Self::connect_with(path, options).await
    }

    /// The database file, as given to [`connect`](SqliteStore::connect).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The options in force.
    pub fn options(&self) -> &SqliteOptions {
        &self.inner.options
    }

    /// Runs `f` with this handle's connection on a blocking thread.
    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Inner) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = self.inner.clone();
        let joined = tokio::task::spawn_blocking(move || {
            // A panic inside a transaction rolls it back while unwinding
            // (rusqlite's Transaction rolls back on drop), so a poisoned
            // connection is still consistent.
            let mut conn = inner.conn.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut conn, &inner)
        })
        .await;
        joined.unwrap_or_else(|e| {
            Err(SqliteStoreError::Worker {
                path: self.inner.path.clone(),
                detail: e.to_string(),
            }
            .into())
        })
    }
}

fn sqlite_err(inner: &Inner, e: rusqlite::Error) -> StoreError {
    SqliteStoreError::from_sqlite(&inner.path, inner.options.busy_timeout, e).into()
}

fn record_err(group: &GroupName, detail: String) -> StoreError {
    StoreError::Record {
        group: group.clone(),
        source: RecordError::Corrupt { detail },
    }
}

/// A row's version: a non-negative integer, or the row is damaged.
fn row_version(group: &GroupName, value: ValueRef<'_>) -> Result<i64, StoreError> {
    match value {
        ValueRef::Integer(v) if v >= 0 => Ok(v),
        other => Err(record_err(
            group,
            format!("the SQLite row's version column holds {other:?}, not a non-negative integer"),
        )),
    }
}

fn to_version(v: i64) -> Version {
    // row_version only lets non-negative values through.
    Version(u64::try_from(v).unwrap_or_default())
}

/// Reads one group's row.
fn read_row(
    conn: &Connection,
    inner: &Inner,
    g: &GroupName,
) -> Result<Option<Versioned>, StoreError> {
    let row = conn
        .prepare_cached("SELECT version, record FROM tenure_leases WHERE group_name = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([g.as_str()], |row| {
                Ok((row.get::<_, Value>(0)?, row.get::<_, Value>(1)?))
            })
            .optional()
        })
        .map_err(|e| sqlite_err(inner, e))?;
    let Some((version, record)) = row else {
        return Ok(None);
    };
    decode_row(g, &version, &record).map(Some)
}

/// A row's version and record, or why the row is not a usable lease.
pub(crate) fn decode_row(
    g: &GroupName,
    version: &Value,
    record: &Value,
) -> Result<Versioned, StoreError> {
    let version = row_version(g, version.into())?;
    let bytes: &[u8] = match record {
        Value::Blob(b) => b,
        // Someone wrote text by hand; decode decides what it is.
        Value::Text(t) => t.as_bytes(),
        other => {
            return Err(StoreError::Record {
                group: g.clone(),
                source: RecordError::Foreign {
                    detail: format!("the SQLite record column holds {other:?}"),
                },
            })
        }
    };
    let record = LeaseRecord::decode(bytes).map_err(|source| StoreError::Record {
        group: g.clone(),
        source,
    })?;
    Ok(Versioned {
        record,
        version: to_version(version),
    })
}

/// One compare-and-swap inside a write transaction the caller commits.
fn cas_row(
    tx: &Connection,
    inner: &Inner,
    g: &GroupName,
    expected: Option<Version>,
    bytes: &[u8],
) -> Result<CasOutcome, StoreError> {
    let err = |e| sqlite_err(inner, e);
    let current = tx
        .prepare_cached("SELECT version FROM tenure_leases WHERE group_name = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([g.as_str()], |row| row.get::<_, Value>(0))
                .optional()
        })
        .map_err(err)?;
    let current = match &current {
        Some(v) => Some(row_version(g, v.into())?),
        None => None,
    };
    let next = match (current, expected) {
        (None, None) => {
            tx.prepare_cached(
                "INSERT INTO tenure_leases (group_name, version, record) VALUES (?1, 1, ?2)",
            )
            .and_then(|mut stmt| stmt.execute(rusqlite::params![g.as_str(), bytes]))
            .map_err(err)?;
            1
        }
        (Some(c), Some(e)) if u64::try_from(c).ok() == Some(e.0) => {
            let next = c.checked_add(1).ok_or_else(|| {
                record_err(g, "the SQLite row's version is at its maximum".into())
            })?;
            tx.prepare_cached(
                "UPDATE tenure_leases SET version = ?2, record = ?3 WHERE group_name = ?1",
            )
            .and_then(|mut stmt| stmt.execute(rusqlite::params![g.as_str(), next, bytes]))
            .map_err(err)?;
            next
        }
        _ => return Ok(CasOutcome::Conflict),
    };
    Ok(CasOutcome::Applied(to_version(next)))
}

impl SqliteStore {
    /// A connection of its own for a feed, opened off the async threads,
    /// and what `first` reads on it. Its own, because `data_version` only
    /// moves for commits by connections other than the one asking, and a
    /// feed's connection never writes.
    async fn watching_connection<T: Send + 'static>(
        &self,
        first: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<(Connection, T), StoreError> {
        let (path, options) = (self.inner.path.clone(), self.inner.options.clone());
        let p = path.clone();
        let opened = tokio::task::spawn_blocking(move || {
            let conn = schema::connect(&p, &options)?;
            let seen = first(&conn)
                .map_err(|e| SqliteStoreError::from_sqlite(&p, options.busy_timeout, e))?;
            Ok::<_, SqliteStoreError>((conn, seen))
        })
        .await
        .map_err(|e| SqliteStoreError::Worker {
            path,
            detail: e.to_string(),
        })?;
        Ok(opened?)
    }
}

#[async_trait]
impl LeaseView for SqliteStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        let g = group.clone();
        self.blocking(move |conn, inner| read_row(conn, inner, &g))
            .await
    }

    /// One read transaction: every group from one snapshot of the file.
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let groups = groups.to_vec();
        self.blocking(move |conn, inner| {
            let tx = conn.transaction().map_err(|e| sqlite_err(inner, e))?;
            Ok(groups.iter().map(|g| read_row(&tx, inner, g)).collect())
        })
        .await
    }

    /// Rows whose name starts with `prefix`, byte for byte (SQLite's text
    /// comparison is by bytes, and UTF-8 sorts by code point).
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let prefix = prefix.to_owned();
        self.blocking(move |conn, inner| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT group_name, version, record FROM tenure_leases \
                     WHERE group_name >= ?1 AND substr(group_name, 1, length(?1)) = ?1",
                )
                .map_err(|e| sqlite_err(inner, e))?;
            let rows = stmt
                .query_map([prefix.as_str()], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Value>(1)?,
                        row.get::<_, Value>(2)?,
                    ))
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| sqlite_err(inner, e))?;
            Ok(rows
                .into_iter()
                // A name tenure would refuse was written by hand: skip it.
                .filter_map(|(name, version, record)| {
                    let group = GroupName::new(name).ok()?;
                    let record = decode_row(&group, &version, &record);
                    Some(Listed { group, record })
                })
                .collect())
        })
        .await
    }

    /// One connection polls `PRAGMA data_version` for the whole file and
    /// reports every group's writes with their records (see
    /// [the crate docs](crate#change-feed)).
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        let (conn, known) = self.watching_connection(feed::snapshot).await?;
        let (path, options) = (self.inner.path.clone(), self.inner.options.clone());
        let (tx, feed) = StoreFeed::channel(feed::CAPACITY);
        tokio::spawn(feed::watch_all(conn, path, known, options, tx));
        Ok(Some(feed))
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        let g = group.as_str().to_owned();
        let gg = g.clone();
        let (conn, seen) = self
            .watching_connection(move |conn| feed::look(conn, &gg, None))
            .await?;
        let (path, options) = (self.inner.path.clone(), self.inner.options.clone());
        let (tx, feed) = ChangeFeed::channel();
        tokio::spawn(feed::watch(
            conn,
            path,
            g,
            seen,
            options.change_poll_interval,
            options.busy_timeout,
            tx,
        ));
        Ok(Some(feed))
    }

    fn describe(&self) -> String {
        self.inner.describe.clone()
    }

    fn running(&self) -> Running<'_> {
        // A batch is one transaction of point lookups or writes: thousands
        // take milliseconds.
        Running::new(4096, &self.inner.engine)
    }
}

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let g = group.clone();
        let bytes = record.encode();
        self.blocking(move |conn, inner| {
            let err = |e| sqlite_err(inner, e);
            // IMMEDIATE: the write lock is taken before the version is
            // read, so no other connection can commit in between.
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(err)?;
            let outcome = cas_row(&tx, inner, &g, expected, &bytes)?;
            if let CasOutcome::Applied(_) = outcome {
                tx.commit().map_err(err)?;
            }
            // Otherwise dropping the transaction rolls it back.
            Ok(outcome)
        })
        .await
    }

    /// One `BEGIN IMMEDIATE` transaction for the whole batch: every
    /// compare-and-swap is checked and written in order under the one write
    /// lock, and all of them commit together (one fsync). A request whose
    /// row is damaged fails alone.
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        let requests: Vec<(GroupName, Option<Version>, Vec<u8>)> = requests
            .iter()
            .map(|r| (r.group.clone(), r.expected, r.record.encode()))
            .collect();
        self.blocking(move |conn, inner| {
            let err = |e| sqlite_err(inner, e);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(err)?;
            let results: Vec<Result<CasOutcome, StoreError>> = requests
                .iter()
                .map(|(g, expected, bytes)| cas_row(&tx, inner, g, *expected, bytes))
                .collect();
            if results
                .iter()
                .any(|r| matches!(r, Ok(CasOutcome::Applied(_))))
            {
                tx.commit().map_err(err)?;
            }
            Ok(results)
        })
        .await
    }
}
