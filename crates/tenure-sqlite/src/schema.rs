//! Opening connections and creating or checking the schema.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::error::SqliteStoreError;
use crate::SqliteOptions;

/// The schema version this build creates and reads.
pub const SCHEMA_VERSION: i64 = 1;

const CREATE: &str = "
CREATE TABLE tenure_schema (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
CREATE TABLE tenure_leases (
    group_name TEXT PRIMARY KEY NOT NULL,
    version    INTEGER NOT NULL,
    record     BLOB NOT NULL
);
-- A hand edit that changes a row but keeps its version would let a
-- candidate holding the old version overwrite a record tenure did not
-- write; bump the version instead. (Recursive triggers are off, so the
-- inner UPDATE does not fire this again.)
CREATE TRIGGER tenure_leases_version AFTER UPDATE ON tenure_leases
WHEN NEW.version IS OLD.version
BEGIN
    UPDATE tenure_leases SET version = OLD.version + 1 WHERE group_name = NEW.group_name;
END;
";

/// Opens one connection and sets it up: busy timeout, WAL, full sync.
pub(crate) fn connect(
    path: &Path,
    options: &SqliteOptions,
) -> Result<Connection, SqliteStoreError> {
    let err = |e| SqliteStoreError::from_sqlite(path, options.busy_timeout, e);
    // No SQLITE_OPEN_URI: the path is a file name, never a `file:` URI, so
    // what `describe()` shows is exactly the file in use.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(err)?;
    // Before anything touches the file: every lock wait below is bounded by
    // it, and concurrent processes queue instead of failing at once.
    conn.busy_timeout(options.busy_timeout).map_err(err)?;
    set_wal(&conn, path, options)?;
    // FULL, not WAL's usual NORMAL: a commit lost to a power cut could hand
    // out the same fencing token twice after the reboot.
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(err)?;
    Ok(conn)
}

/// Switches the file to WAL, so readers (and the change feed) never wait
/// for a writer. Changing the journal mode needs a moment of exclusive
/// access and SQLite does not always run the busy handler for it, so a busy
/// reply is retried here, within the busy timeout.
fn set_wal(
    conn: &Connection,
    path: &Path,
    options: &SqliteOptions,
) -> Result<(), SqliteStoreError> {
    let deadline = Instant::now() + options.busy_timeout;
    loop {
        let result = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0));
        match result {
            Ok(mode) => {
                if !mode.eq_ignore_ascii_case("wal") {
                    // Still correct (BEGIN IMMEDIATE serialises writers in any
                    // mode), only slower, and readers wait for writers.
                    tracing::warn!(
                        path = %path.display(),
                        mode,
                        "SQLite refused WAL journal mode (is the file on a network file system?); continuing in this mode"
                    );
                }
                return Ok(());
            }
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(SqliteStoreError::from_sqlite(path, options.busy_timeout, e)),
        }
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Creates the schema on first use, or checks that the file's schema is
/// one this build understands.
pub(crate) fn ensure_schema(
    conn: &mut Connection,
    path: &Path,
    options: &SqliteOptions,
) -> Result<(), SqliteStoreError> {
    let err = |e| SqliteStoreError::from_sqlite(path, options.busy_timeout, e);
    // The common case, a file already set up, needs no write lock.
    match schema_version(conn).map_err(err)? {
        Found::Absent => {}
        found => return check_version(path, found),
    }
    // Several processes may start on a fresh file at once: the first to get
    // the write lock creates the tables, the others find them inside their
    // own transaction.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    match schema_version(&tx).map_err(err)? {
        Found::Absent => {}
        found => return check_version(path, found),
    }
    let leases_exists: bool = tx
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'tenure_leases'",
            [],
            |row| row.get::<_, i64>(0),
        )
        .map_err(err)?
        > 0;
    if leases_exists {
        return Err(SqliteStoreError::Schema {
            path: path.to_path_buf(),
            detail: "table tenure_leases exists but tenure_schema does not".into(),
        });
    }
    tx.execute_batch(CREATE).map_err(err)?;
    tx.execute(
        "INSERT INTO tenure_schema (id, version) VALUES (1, ?1)",
        [SCHEMA_VERSION],
    )
    .map_err(err)?;
    tx.commit().map_err(err)?;
    tracing::info!(path = %path.display(), version = SCHEMA_VERSION, "created the tenure schema");
    Ok(())
}

/// What the file says about its schema.
enum Found {
    /// No `tenure_schema` table: tenure never set this file up.
    Absent,
    /// The version row.
    Version(i64),
    /// A `tenure_schema` table without an integer version row.
    NoVersion,
}

fn schema_version(conn: &Connection) -> Result<Found, rusqlite::Error> {
    let exists: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'tenure_schema'",
        [],
        |row| row.get(0),
    )?;
    if exists == 0 {
        return Ok(Found::Absent);
    }
    let version: Option<rusqlite::types::Value> = conn
        .query_row(
            "SELECT version FROM tenure_schema WHERE id = 1",
            [],
            |row| row.get(0),
        )
        .optional()?;
    Ok(match version {
        Some(rusqlite::types::Value::Integer(v)) => Found::Version(v),
        Some(_) | None => Found::NoVersion,
    })
}

fn check_version(path: &Path, found: Found) -> Result<(), SqliteStoreError> {
    match found {
        Found::Version(SCHEMA_VERSION) => Ok(()),
        Found::Version(v) if v > SCHEMA_VERSION => Err(SqliteStoreError::NewerSchema {
            path: path.to_path_buf(),
            found: v,
            supported: SCHEMA_VERSION,
        }),
        Found::Version(v) => Err(SqliteStoreError::Schema {
            path: path.to_path_buf(),
            detail: format!("unknown schema version {v}"),
        }),
        Found::NoVersion => Err(SqliteStoreError::Schema {
            path: path.to_path_buf(),
            detail: "tenure_schema holds no version row".into(),
        }),
        // ensure_schema creates the tables instead of asking.
        Found::Absent => Err(SqliteStoreError::Schema {
            path: path.to_path_buf(),
            detail: "no tenure_schema table".into(),
        }),
    }
}
