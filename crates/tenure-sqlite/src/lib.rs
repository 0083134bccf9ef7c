//! The SQLite lease store for [tenure]: the embedded default, one database
//! file shared by the processes of one host.
//!
//! ```
//! use tenure::{GroupName, LeaseView};
//! use tenure_sqlite::SqliteStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let path = std::env::temp_dir().join(format!("tenure-doc-{}.db", std::process::id()));
//! // Creates the file and the schema on first use; every process of the
//! // host opens the same path.
//! let store = SqliteStore::open(&path).await?;
//! assert_eq!(store.describe(), format!("sqlite://{}", path.canonicalize()?.display()));
//!
//! let group = GroupName::new("nightly-billing")?;
//! assert!(store.read(&group).await?.is_none());
//!
//! // The README's quick start: stand for the group, work while leading.
//! let elector = tenure::Elector::builder(store, "nightly-billing")
//!     .candidate_id("host-a")
//!     .term(std::time::Duration::from_secs(10))
//!     .metadata(tenure::Metadata::address("10.0.0.7:8080"))
//!     .start()?;
//! # let stopper = elector.clone();
//! # tokio::spawn(async move {
//! #     tokio::time::sleep(std::time::Duration::from_millis(200)).await;
//! #     stopper.shutdown().await;
//! # });
//! elector
//!     .run_while_leader(|term| async move {
//!         assert_eq!(term.token(), 1); // the first term of a new group
//!         term.cancelled().await; // fires before term.deadline()
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await?;
//! # for suffix in ["", "-wal", "-shm"] {
//! #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
//! # }
//! # Ok(()) }
//! ```
//!
//! # Schema
//!
//! Version 1, created by the first [`SqliteStore::open`] of a new file:
//!
//! ```sql
//! CREATE TABLE tenure_schema (
//!     id      INTEGER PRIMARY KEY CHECK (id = 1),
//!     version INTEGER NOT NULL              -- 1
//! );
//! CREATE TABLE tenure_leases (
//!     group_name TEXT PRIMARY KEY NOT NULL, -- the GroupName, byte for byte
//!     version    INTEGER NOT NULL,          -- 1 on insert, +1 on every write
//!     record     BLOB NOT NULL              -- LeaseRecord::encode(): JSON
//! );
//! -- An UPDATE that keeps the version (a hand edit) bumps it, so a
//! -- candidate holding the old version cannot overwrite the edited row.
//! CREATE TRIGGER tenure_leases_version AFTER UPDATE ON tenure_leases
//! WHEN NEW.version IS OLD.version
//! BEGIN
//!     UPDATE tenure_leases SET version = OLD.version + 1 WHERE group_name = NEW.group_name;
//! END;
//! ```
//!
//! One row per group. A row is never deleted: a release writes a record
//! without a holder, so the fencing token survives and keeps rising, and
//! since rows are never deleted a row's version never repeats. The group
//! column is `group_name` rather than `group`, a reserved word that every
//! hand-written query would have to quote. Inspect a file with
//! `sqlite3 leases.db "SELECT group_name, version, CAST(record AS TEXT) FROM tenure_leases"`.
//!
//! A file whose `tenure_schema` version is newer than this build's
//! ([`SCHEMA_VERSION`]) is refused with [`SqliteError::NewerSchema`] rather
//! than written; a file that is not a SQLite database, or is corrupt, is
//! refused with an error naming the path and the fix.
//!
//! # Concurrency
//!
//! * The file runs in WAL mode: readers never wait for a writer.
//! * A compare-and-swap is one `BEGIN IMMEDIATE` transaction (read the
//!   row's version, compare, write, commit), so it is atomic across
//!   connections and processes: `IMMEDIATE` takes the write lock before
//!   the read, so no other writer can slip in between.
//! * Lock waits are bounded by the busy timeout (1 s by default, see
//!   [`SqliteOptions`]); past it an operation fails with
//!   [`StoreError::Unavailable`] and the elector retries.
//! * `synchronous = FULL`: a commit survives a power cut, so a fencing
//!   token is never handed out twice.
//! * Each [`SqliteStore`] holds one connection; SQLite calls run on tokio's
//!   blocking threads. Clones share the connection; open the path again for
//!   another one.
//! * The file must be on a local file system: SQLite's locking is not
//!   reliable over NFS and similar.
//!
//! # Many groups
//!
//! Electors built from clones of one [`SqliteStore`] share one engine
//! ([`tenure::Engine`]): its batches are one transaction each, a
//! [`LeaseView::read_many`] reads every group from one snapshot, and a
//! [`LeaseStore::compare_and_swap_many`] checks and writes every group
//! under one `BEGIN IMMEDIATE` lock and commits them with one fsync.
//!
//! # Change feed
//!
//! SQLite cannot push notifications to other processes, but `PRAGMA
//! data_version` changes whenever another connection commits to the file,
//! and reading it costs one in-memory counter. So:
//!
//! * [`LeaseView::watch`], the store-wide feed an engine uses: one
//!   connection polls `data_version` every 50 ms
//!   ([`SqliteOptions::with_change_poll_interval`]); after a commit it scans
//!   the groups' names and versions and reports each changed group with its
//!   record, so followers learn of renewals without reading. One poller per
//!   store handle, whatever the number of groups.
//! * [`LeaseView::changes`], a feed of one group (what an
//!   [`Observer`](tenure::Observer) uses): the same poll, hinting when that
//!   group's row version moved.
//!
//! A graceful hand-over between processes therefore takes about one poll
//! rather than one retry interval. A poller ends when its feed is dropped.
//!
//! [tenure]: https://docs.rs/tenure
#![deny(missing_docs)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};
use tenure::{
    BatchResult, CasOutcome, CasRequest, ChangeFeed, EngineSlot, GroupName, LeaseRecord,
    LeaseStore, LeaseView, Listed, RecordError, StoreError, StoreFeed, Version, Versioned,
};

mod error;
mod feed;
mod schema;

pub use error::SqliteError;
pub use schema::SCHEMA_VERSION;

/// Settings of a [`SqliteStore`].
///
/// ```
/// use std::time::Duration;
/// let options = tenure_sqlite::SqliteOptions::default()
///     .with_busy_timeout(Duration::from_secs(2))
///     .with_change_poll_interval(Duration::from_millis(20));
/// assert_eq!(options.busy_timeout(), Duration::from_secs(2));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteOptions {
    busy_timeout: Duration,
    change_poll_interval: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            // Below the elector's default operation timeout (term / 4 =
            // 2.5 s), so a stuck lock shows as "locked", not a timeout.
            busy_timeout: Duration::from_secs(1),
            change_poll_interval: Duration::from_millis(50),
        }
    }
}

impl SqliteOptions {
    /// How long an operation waits for another connection's lock before it
    /// fails with [`StoreError::Unavailable`] (default 1 s). Writers hold
    /// the lock for a millisecond or so; only a stuck process or an
    /// operator's open `sqlite3` transaction makes anyone wait this long.
    ///
    /// The elector's operation timeout (a quarter of the term by default)
    /// may end a wait earlier, as a timeout; the abandoned call still
    /// finishes on its blocking thread, and this handle's next operation
    /// queues behind it. A busy timeout below the operation timeout turns
    /// such waits into the clearer "locked" error.
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How often the change feed polls (default 50 ms); a hand-over between
    /// processes is noticed within about this long.
    pub fn with_change_poll_interval(mut self, every: Duration) -> Self {
        // A zero period would make tokio's interval panic.
        self.change_poll_interval = every.max(Duration::from_millis(1));
        self
    }

    /// The busy timeout.
    pub fn busy_timeout(&self) -> Duration {
        self.busy_timeout
    }

    /// The change feed's poll interval.
    pub fn change_poll_interval(&self) -> Duration {
        self.change_poll_interval
    }
}

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
    /// Fails with a [`SqliteError`] naming the path and the fix when the
    /// file is not a SQLite database or is corrupt, when a newer tenure
    /// upgraded its schema, when it cannot be created or written, or when
    /// another process keeps it locked for longer than the busy timeout.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("tenure-open-{}.txt", std::process::id()));
    /// std::fs::write(&path, "not a database, just some text that is long enough").unwrap();
    /// let err = tenure_sqlite::SqliteStore::open(&path).await.unwrap_err();
    /// assert!(matches!(err, tenure_sqlite::SqliteError::NotADatabase { .. }), "{err}");
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, SqliteError> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the database at `path` with the given options; see
    /// [`open`](SqliteStore::open).
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<Self, SqliteError> {
        let path = path.as_ref().to_path_buf();
        if path.as_os_str().is_empty() {
            return Err(SqliteError::InvalidPath {
                path,
                reason: "the path is empty",
            });
        }
        if path.as_os_str() == ":memory:" {
            return Err(SqliteError::InvalidPath {
                path,
                reason: "an in-memory database is private to one connection, so no other candidate would see it",
            });
        }
        let p = path.clone();
        let opts = options.clone();
        let conn = tokio::task::spawn_blocking(move || {
            let mut conn = schema::connect(&p, &opts)?;
            schema::ensure_schema(&mut conn, &p, &opts)?;
            Ok::<_, SqliteError>(conn)
        })
        .await
        .map_err(|e| SqliteError::Worker {
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

    /// The database file, as given to [`open`](SqliteStore::open).
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
            Err(SqliteError::Worker {
                path: self.inner.path.clone(),
                detail: e.to_string(),
            }
            .into())
        })
    }
}

fn sqlite_err(inner: &Inner, e: rusqlite::Error) -> StoreError {
    SqliteError::from_sqlite(&inner.path, inner.options.busy_timeout, e).into()
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
        let (path, options) = (self.inner.path.clone(), self.inner.options.clone());
        let (p, o) = (path.clone(), options.clone());
        let started = tokio::task::spawn_blocking(move || {
            let conn = schema::connect(&p, &o)?;
            let known = feed::snapshot(&conn)
                .map_err(|e| SqliteError::from_sqlite(&p, o.busy_timeout, e))?;
            Ok::<_, SqliteError>((conn, known))
        })
        .await
        .map_err(|e| {
            StoreError::from(SqliteError::Worker {
                path: path.clone(),
                detail: e.to_string(),
            })
        })?;
        let (conn, known) = started?;
        let (tx, feed) = StoreFeed::channel(feed::CAPACITY);
        tokio::spawn(feed::watch_all(conn, path, known, options, tx));
        Ok(Some(feed))
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        let path = self.inner.path.clone();
        let options = self.inner.options.clone();
        let g = group.as_str().to_owned();
        let (p, o, gg) = (path.clone(), options.clone(), g.clone());
        // Its own connection: data_version only moves for commits by
        // connections other than the one asking, and this one never writes.
        let started = tokio::task::spawn_blocking(move || {
            let conn = schema::connect(&p, &o)?;
            let seen = feed::look(&conn, &gg, None)
                .map_err(|e| SqliteError::from_sqlite(&p, o.busy_timeout, e))?;
            Ok::<_, SqliteError>((conn, seen))
        })
        .await
        .map_err(|e| {
            StoreError::from(SqliteError::Worker {
                path: path.clone(),
                detail: e.to_string(),
            })
        })?;
        let (conn, seen) = started?;
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

    fn engine_slot(&self) -> Option<&EngineSlot> {
        Some(&self.inner.engine)
    }

    /// A batch is one transaction of point lookups or writes: thousands
    /// take milliseconds.
    fn batch_size_hint(&self) -> usize {
        4096
    }
}
