//! Typed errors of the SQLite store, each naming the file, the problem and
//! the fix, and their mapping onto [`StoreError`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::ErrorCode;
use tenure::error::{BackendError, BoxError};
use tenure::StoreError;

/// A failure of the SQLite store.
///
/// [`SqliteStore::connect`](crate::SqliteStore::connect) returns it directly; the
/// [`LeaseStore`](tenure::LeaseStore) operations return it converted into a
/// [`StoreError`] (see [`From<SqliteStoreError> for StoreError`](#impl-From<SqliteStoreError>-for-StoreError)).
/// Messages leave out the SQLite error itself; it is the
/// [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteStoreError {
    /// The path names no file that several processes can share.
    #[error("{path:?} cannot hold a tenure lease database: {reason}; give the path of a file on a local disk, such as /var/lib/tenure/leases.db")]
    InvalidPath {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The file or its directory cannot be opened or created.
    #[error("cannot open the SQLite database {path}: check that the directory exists and that this user may create and write files in it (SQLite also creates {path}-wal and {path}-shm beside it)", path = .path.display())]
    CannotOpen {
        /// The database file.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file, its directory or the file system is read-only.
    #[error("the SQLite database {path} is read-only: give this user write access to the file and its directory (every candidate writes the lease, and SQLite creates -wal and -shm files beside it)", path = .path.display())]
    ReadOnly {
        /// The database file.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file exists but is not a SQLite database.
    #[error("{path} is not a SQLite database (or it is encrypted): point tenure at another path, or move this file away and tenure will create a fresh database there", path = .path.display())]
    NotADatabase {
        /// The file that is not a database, which the fix names.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// SQLite found the database damaged.
    #[error("the SQLite database {path} is corrupt: restore it from a backup, or move it away so tenure creates a fresh one (fencing tokens then restart at 1: reset every resource that checks them)", path = .path.display())]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// A newer tenure has upgraded the schema of this file.
    #[error("the SQLite database {path} has tenure schema version {found}, but this build knows versions up to {supported}: a newer tenure uses this file, so upgrade tenure on this host", path = .path.display())]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// The schema version in the file.
        found: i64,
        /// The newest schema version this build knows.
        supported: i64,
    },
    /// The tenure tables are missing or not as tenure created them.
    #[error("the tenure tables in the SQLite database {path} are missing or altered ({detail}): they are not meant to be edited by hand; restore the file from a backup, or move it away so tenure creates a fresh one", path = .path.display())]
    Schema {
        /// The database file.
        path: PathBuf,
        /// What was found.
        detail: String,
    },
    /// Another connection held the database locked for longer than the
    /// busy timeout.
    #[error("the SQLite database {path} stayed locked for the whole busy timeout ({waited:?}): another process holds a long write transaction; find it with `fuser {path}` (tenure retries on its own)", path = .path.display())]
    Locked {
        /// The database file.
        path: PathBuf,
        /// The busy timeout that ran out.
        waited: Duration,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// The operating system failed to read or write the file.
    #[error("I/O error on the SQLite database {path}: check the disk (full, unmounted, failing?) and that the file is on a local file system", path = .path.display())]
    Io {
        /// The database file.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// Any other SQLite failure.
    #[error("SQLite failed on {path}", path = .path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// The worker thread running the SQLite call failed (it panicked, or
    /// the runtime is shutting down).
    #[error("the SQLite worker for {path} failed: {detail}", path = .path.display())]
    Worker {
        /// The database file.
        path: PathBuf,
        /// What happened to the worker.
        detail: String,
    },
}

impl SqliteStoreError {
    /// Classifies a SQLite error that happened on `path`.
    pub(crate) fn from_sqlite(path: &Path, busy_timeout: Duration, e: rusqlite::Error) -> Self {
        let path = path.to_path_buf();
        let (code, message) = match &e {
            rusqlite::Error::SqliteFailure(f, msg) => (Some(f.code), msg.clone()),
            _ => (None, None),
        };
        match code {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => SqliteStoreError::Locked {
                path,
                waited: busy_timeout,
                source: e,
            },
            Some(ErrorCode::NotADatabase) => SqliteStoreError::NotADatabase { path, source: e },
            Some(ErrorCode::DatabaseCorrupt) => SqliteStoreError::Corrupt { path, source: e },
            Some(ErrorCode::ReadOnly) => SqliteStoreError::ReadOnly { path, source: e },
            Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => {
                SqliteStoreError::CannotOpen { path, source: e }
            }
            Some(
                ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull
                | ErrorCode::FileLockingProtocolFailed
                | ErrorCode::NoLargeFileSupport,
            ) => SqliteStoreError::Io { path, source: e },
            _ => match message {
                // A table or column dropped or renamed behind tenure's back.
                Some(m) if m.contains("no such table") || m.contains("no such column") => {
                    SqliteStoreError::Schema { path, detail: m }
                }
                _ => SqliteStoreError::Sqlite { path, source: e },
            },
        }
    }

    /// The database file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            SqliteStoreError::InvalidPath { path, .. }
            | SqliteStoreError::CannotOpen { path, .. }
            | SqliteStoreError::ReadOnly { path, .. }
            | SqliteStoreError::NotADatabase { path, .. }
            | SqliteStoreError::Corrupt { path, .. }
            | SqliteStoreError::NewerSchema { path, .. }
            | SqliteStoreError::Schema { path, .. }
            | SqliteStoreError::Locked { path, .. }
            | SqliteStoreError::Io { path, .. }
            | SqliteStoreError::Sqlite { path, .. }
            | SqliteStoreError::Worker { path, .. } => path,
        }
    }

    /// Whether retrying later may succeed without an operator's help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SqliteStoreError::Locked { .. }
                | SqliteStoreError::Io { .. }
                | SqliteStoreError::Sqlite { .. }
                | SqliteStoreError::Worker { .. }
        )
    }
}

/// Transient failures (a lock held too long, I/O, a failed worker, an
/// unclassified SQLite error) become [`StoreError::Unavailable`], which the
/// elector retries; everything an operator must fix becomes
/// [`StoreError::Misconfigured`]. The message is the [`SqliteStoreError`]'s and
/// the source is the SQLite error underneath.
impl BackendError for SqliteStoreError {
    fn is_transient(&self) -> bool {
        SqliteStoreError::is_transient(self)
    }

    fn into_source(self) -> Option<BoxError> {
        match self {
            SqliteStoreError::CannotOpen { source, .. }
            | SqliteStoreError::ReadOnly { source, .. }
            | SqliteStoreError::NotADatabase { source, .. }
            | SqliteStoreError::Corrupt { source, .. }
            | SqliteStoreError::Locked { source, .. }
            | SqliteStoreError::Io { source, .. }
            | SqliteStoreError::Sqlite { source, .. } => Some(Box::new(source)),
            SqliteStoreError::InvalidPath { .. }
            | SqliteStoreError::NewerSchema { .. }
            | SqliteStoreError::Schema { .. }
            | SqliteStoreError::Worker { .. } => None,
        }
    }
}

impl From<SqliteStoreError> for StoreError {
    fn from(e: SqliteStoreError) -> Self {
        StoreError::from_backend(e)
    }
}
