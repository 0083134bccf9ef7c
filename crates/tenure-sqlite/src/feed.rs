//! The change feed: SQLite cannot push notifications to other processes,
//! but `PRAGMA data_version` on a connection changes whenever *another*
//! connection commits to the file. Polling it is a read of one in-memory
//! counter, so a dedicated connection can poll every ~50 ms at negligible
//! cost, and a graceful hand-over between processes takes about one poll.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension};
use tenure::store::{Change, StoreFeedSender};
use tenure::GroupName;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;

use crate::error::SqliteStoreError;
use crate::store::decode_row;
use crate::SqliteOptions;

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
        // An error: the runtime is shutting down.
        let Ok((back, result)) = polled else { return };
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
                let e = SqliteStoreError::from_sqlite(&path, busy_timeout, e);
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

/// Room in the store-wide feed: a whole renewal round of a large engine.
pub(crate) const CAPACITY: usize = 16_384;

/// What the store-wide watcher knows: the file's data version and every
/// row's version.
pub(crate) struct Known {
    data_version: i64,
    versions: HashMap<String, Value>,
}

/// Every row's version, to compare later scans against.
pub(crate) fn snapshot(conn: &Connection) -> rusqlite::Result<Known> {
    let data_version: i64 = conn.query_row("PRAGMA data_version", [], |row| row.get(0))?;
    Ok(Known {
        data_version,
        versions: versions(conn)?,
    })
}

fn versions(conn: &Connection) -> rusqlite::Result<HashMap<String, Value>> {
    let mut stmt = conn.prepare_cached("SELECT group_name, version FROM tenure_leases")?;
    let rows = stmt.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, Value>(1)?))
    })?;
    rows.collect()
}

/// The groups whose rows changed since `known`, with their records. A scan
/// of names and versions only (cheap even for many thousands of rows) runs
/// when another connection has committed; only changed rows are read whole.
fn changed(conn: &Connection, known: &mut Known) -> rusqlite::Result<Vec<Change>> {
    let data_version: i64 = conn.query_row("PRAGMA data_version", [], |row| row.get(0))?;
    if data_version == known.data_version {
        return Ok(Vec::new());
    }
    // One snapshot for the scan and the reads.
    let tx = conn.unchecked_transaction()?;
    let now = versions(&tx)?;
    let mut out = Vec::new();
    for (name, version) in &now {
        if known.versions.get(name) == Some(version) {
            continue;
        }
        // A name tenure would refuse was written by hand: nobody waits on it.
        let Ok(group) = GroupName::new(name.as_str()) else {
            continue;
        };
        let row = tx
            .prepare_cached("SELECT version, record FROM tenure_leases WHERE group_name = ?1")?
            .query_row([name.as_str()], |row| {
                Ok((row.get::<_, Value>(0)?, row.get::<_, Value>(1)?))
            })
            .optional()?;
        out.push(match row.map(|(v, r)| decode_row(&group, &v, &r)) {
            Some(Ok(current)) => Change::Written { group, current },
            // Damaged or gone: let the electors read it and say so.
            _ => Change::Hint { group },
        });
    }
    tx.finish()?;
    known.data_version = data_version;
    known.versions = now;
    Ok(out)
}

/// Polls for the whole file until the feed's reader is gone or the file
/// cannot be read; then the engine polls instead.
pub(crate) async fn watch_all(
    mut conn: Connection,
    path: PathBuf,
    mut known: Known,
    options: SqliteOptions,
    tx: StoreFeedSender,
) {
    let mut ticks = tokio::time::interval(options.change_poll_interval());
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if tx.is_closed() {
            return;
        }
        let polled = tokio::task::spawn_blocking(move || {
            let r = changed(&conn, &mut known);
            (conn, known, r)
        })
        .await;
        // An error: the runtime is shutting down.
        let Ok((back, k, result)) = polled else {
            return;
        };
        conn = back;
        known = k;
        match result {
            Ok(changes) => {
                for change in changes {
                    if !tx.send(change).await {
                        return;
                    }
                }
            }
            Err(e) => {
                let e = SqliteStoreError::from_sqlite(&path, options.busy_timeout(), e);
                tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "the SQLite change feed stopped; the engine falls back to polling"
                );
                return;
            }
        }
    }
}
