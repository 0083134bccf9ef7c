//! The change feed: SQLite cannot push notifications to other processes,
//! but `PRAGMA data_version` on a connection changes whenever *another*
//! connection commits to the file. Polling it is a read of one in-memory
//! counter, so a dedicated connection can poll every ~50 ms at negligible
//! cost, and a graceful hand-over between processes takes about one poll.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension};
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;

use crate::error::SqliteError;

/// What the watcher last saw: the file's data version, and the group's row
/// version (`None`: no row).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seen {
    data_version: i64,
    row_version: Option<Value>,
}

/// Reads what the watcher compares. The row version filters out commits to
/// other groups in the same file, so electors of one group are not woken by
/// every other group's renewals.
pub(crate) fn look(
    conn: &Connection,
    group: &str,
    previous: Option<&Seen>,
) -> rusqlite::Result<Seen> {
    let data_version: i64 = conn.query_row("PRAGMA data_version", [], |row| row.get(0))?;
    if let Some(prev) = previous {
        if prev.data_version == data_version {
            return Ok(prev.clone());
        }
    }
    // Read as a generic value: a damaged version column must not stop the
    // feed; the elector's own read reports the damage.
    let row_version = conn
        .query_row(
            "SELECT version FROM tenure_leases WHERE group_name = ?1",
            [group],
            |row| row.get::<_, Value>(0),
        )
        .optional()?;
    Ok(Seen {
        data_version,
        row_version,
    })
}

/// Polls until the feed's receiver is dropped or the file cannot be read;
/// then the connection closes and the elector falls back to polling reads.
pub(crate) async fn watch(
    mut conn: Connection,
    path: PathBuf,
    group: String,
    mut seen: Seen,
    every: Duration,
    busy_timeout: Duration,
    tx: mpsc::Sender<()>,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tx.closed() => return,
            _ = ticks.tick() => {}
        }
        let g = group.clone();
        let last = seen.clone();
        // The connection moves into the blocking call and back, so no lock
        // is needed: this task is its only user.
        let polled = tokio::task::spawn_blocking(move || {
            let r = look(&conn, &g, Some(&last));
            (conn, r)
        })
        .await;
        let (back, result) = match polled {
            Ok(pair) => pair,
            // The runtime is shutting down.
            Err(_) => return,
        };
        conn = back;
        match result {
            Ok(now) => {
                if now.row_version != seen.row_version {
                    if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(()) {
                        return;
                    }
                    // A full channel already holds a hint: the elector will
                    // re-read and see this change too.
                }
                seen = now;
            }
            Err(e) => {
                let e = SqliteError::from_sqlite(&path, busy_timeout, e);
                tracing::warn!(
                    path = %path.display(),
                    group,
                    error = %e,
                    "the SQLite change feed stopped; electors fall back to polling"
                );
                return;
            }
        }
    }
}
