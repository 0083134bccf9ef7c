//! Change feeds by polling: MySQL has no `LISTEN`. A row's version is the
//! server's clock in microseconds at its last write (or one more than
//! before, if higher), and the column is indexed, so it doubles as the
//! table's change counter:
//!
//! * [`watch`]: one connection for the whole table. Every `poll` it runs
//!   one statement, `SELECT … WHERE version > ?`, for the rows written
//!   since the last poll, with their records: followers learn of every
//!   renewal without a read of their own, whatever the number of groups.
//!   A version is taken at the start of its statement and becomes visible
//!   at its commit, so a row committed late may carry a version below one
//!   already seen: once every [`LOOK_BACK_EVERY`] by the clock (or every
//!   poll, if polls are further apart) a poll looks back [`LAG`] further, and for the rows
//!   in that stretch the server sends only the name and version (the
//!   record only for the rows above the last poll's). A row there that
//!   this feed had not seen is read and reported. The feed remembers only
//!   the versions within the look-back. (Looking back on every poll cost
//!   a follower of 10,000 groups the names and versions of some 6,000 rows
//!   four times a second, most of its CPU.)
//! * [`subscribe`]: one connection polling one group's version, for an
//!   [`Observer`](tenure::Observer).
//!
//! Both end when their connection fails; the store-wide one reconnects
//! once first and then owes its reader a [`Change::Resync`].

use std::collections::HashMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Row;
use tenure::store::{Change, ChangeFeed, FeedRelay, StoreFeed};
use tenure::{GroupName, StoreError};
use tokio::time::MissedTickBehavior;

use crate::conn::{self, Live};
use crate::error::classify;
use crate::options::MysqlOptions;
use crate::sql::{self, as_bytes, as_u64, MAX_VERSION};
use crate::store::decode;

/// How far back each poll looks for rows committed after a later-versioned
/// row was seen: a write's statement takes far less than this between
/// reading the clock and committing (the store bounds statements below
/// its timeout; a write slower than this is found by the engine's own
/// polls instead).
///
/// With a look-back every [`LOOK_BACK_EVERY`], a row is found as long as
/// the time between its version's stamp and its commit stays below `LAG`
/// less that interval and a poll.
pub(crate) const LAG: Duration = Duration::from_secs(3);

/// How often a poll looks back (at most; every poll if polls are further
/// apart).
pub(crate) const LOOK_BACK_EVERY: Duration = Duration::from_secs(1);

/// Room in the store-wide feed: every renewal of a large engine's round.
const CAPACITY: usize = 16_384;

/// The store-wide poller's state.
struct Poller {
    live: Live,
    query: String,
    /// The highest version seen (at most the server's clock then).
    cursor: u64,
    /// The versions seen within the look-back, by group name.
    seen: HashMap<Vec<u8>, u64>,
    /// When the last poll that looked back began (at first, when the feed
    /// opened). By the clock, not by a count of polls: polls slower than
    /// `poll` (a loaded server, a long round trip) would otherwise space
    /// the look-backs out past [`LAG`] and miss the rows they are for.
    looked_back: tokio::time::Instant,
}

/// Whether a poll beginning at `now` looks back, the last having begun at
/// `last`: about once a second, or on every poll if polls are further
/// apart.
fn look_back_due(last: tokio::time::Instant, now: tokio::time::Instant) -> bool {
    now.saturating_duration_since(last) >= LOOK_BACK_EVERY
}

fn lag_us() -> u64 {
    u64::try_from(LAG.as_micros()).unwrap_or(u64::MAX)
}

impl Poller {
    async fn open(options: &MysqlOptions) -> Result<Poller, StoreError> {
        let target = options.redacted_url();
        let mut live = conn::open(options).await?;
        let now: Option<u64> = tokio::time::timeout(
            options.timeout,
            live.conn.query_first(format!("SELECT {}", sql::CLOCK)),
        )
        .await
        .map_err(|_| StoreError::Timeout(options.timeout))?
        .map_err(|e| classify("reading the server's clock", target, e))?;
        Ok(Poller {
            live,
            query: format!(
                "SELECT group_name, version, IF(version > ?, record, NULL), {} FROM {} WHERE version > ?",
                sql::CLOCK,
                options.table.quoted
            ),
            cursor: now.unwrap_or(0),
            seen: HashMap::new(),
            looked_back: tokio::time::Instant::now(),
        })
    }

    /// One poll: the changes since the last.
    async fn poll(&mut self, options: &MysqlOptions) -> Result<Vec<Change>, StoreError> {
        let started = tokio::time::Instant::now();
        let floor = if look_back_due(self.looked_back, started) {
            self.looked_back = started;
            self.cursor.saturating_sub(lag_us())
        } else {
            self.cursor
        };
        let rows: Vec<Row> = tokio::time::timeout(
            options.timeout,
            self.live.conn.exec(&self.query, (self.cursor, floor)),
        )
        .await
        .map_err(|_| StoreError::Timeout(options.timeout))?
        .map_err(|e| classify("polling for changes", options.redacted_url(), e))?;
        let mut changes = Vec::new();
        let mut late = Vec::new();
        let mut highest = self.cursor;
        for row in rows {
            let mut v = sql::values(row);
            let now = as_u64(v.get(3).and_then(Option::as_ref)).unwrap_or(0);
            let record = as_bytes(v.get_mut(2).and_then(Option::take));
            let Some(version) = as_u64(v.get(1).and_then(Option::as_ref)) else {
                continue;
            };
            let Some(name) = as_bytes(v.get_mut(0).and_then(Option::take)) else {
                continue;
            };
            if self.seen.get(&name) == Some(&version) {
                continue;
            }
            self.seen.insert(name.clone(), version);
            if version <= now {
                highest = highest.max(version);
            }
            // A name tenure would refuse was written by hand: nobody waits on it.
            let Some(group) = String::from_utf8(name)
                .ok()
                .and_then(|n| GroupName::new(n).ok())
            else {
                continue;
            };
            match record {
                Some(bytes) => changes.push(written_or_hint(group, version, bytes)),
                // Committed late, below the last poll's versions: its record
                // is read below, so followers need no read of their own.
                None if version <= MAX_VERSION => late.push(group),
                None => changes.push(Change::Hint { group }),
            }
        }
        if !late.is_empty() {
            changes.extend(self.read_late(options, late).await?);
        }
        self.cursor = highest;
        let floor = self.cursor.saturating_sub(lag_us());
        self.seen.retain(|_, v| *v > floor);
        Ok(changes)
    }
}

impl Poller {
    /// The current records of `late` (rows a poll found committed late),
    /// in one statement per thousand: the rare second statement of a poll.
    async fn read_late(
        &mut self,
        options: &MysqlOptions,
        late: Vec<GroupName>,
    ) -> Result<Vec<Change>, StoreError> {
        let mut changes = Vec::with_capacity(late.len());
        for chunk in late.chunks(1000) {
            let query = format!(
                "SELECT group_name, version, record FROM {} WHERE group_name IN {}",
                options.table.quoted,
                sql::in_list(chunk.iter().map(GroupName::as_str))
            );
            let rows: Vec<Row> = tokio::time::timeout(options.timeout, self.live.conn.query(query))
                .await
                .map_err(|_| StoreError::Timeout(options.timeout))?
                .map_err(|e| classify("reading late changes", options.redacted_url(), e))?;
            let mut found: HashMap<Vec<u8>, crate::store::RawRow> = HashMap::new();
            for row in rows {
                let mut v = sql::values(row);
                let record = as_bytes(v.get_mut(2).and_then(Option::take));
                let version = as_u64(v.get(1).and_then(Option::as_ref));
                if let Some(name) = as_bytes(v.get_mut(0).and_then(Option::take)) {
                    found.insert(name, (version, record));
                }
            }
            for group in chunk {
                let change = match found.remove(group.as_str().as_bytes()) {
                    Some((Some(version), Some(bytes))) => {
                        self.seen
                            .insert(group.as_str().as_bytes().to_vec(), version);
                        written_or_hint(group.clone(), version, bytes)
                    }
                    _ => Change::Hint {
                        group: group.clone(),
                    },
                };
                changes.push(change);
            }
        }
        Ok(changes)
    }
}

/// The change a row's version and record report: the record as written,
/// or a hint if it cannot be decoded (the electors read it and say why).
fn written_or_hint(group: GroupName, version: u64, bytes: Vec<u8>) -> Change {
    match decode(&group, &(Some(version), Some(bytes))) {
        Ok(current) => Change::Written { group, current },
        Err(_) => Change::Hint { group },
    }
}

/// Opens the connection that reports every group's writes to the returned
/// feed (see the module docs).
pub(crate) async fn watch(options: &MysqlOptions) -> Result<StoreFeed, StoreError> {
    let poller = Poller::open(options).await?;
    let (tx, feed) = StoreFeed::channel(CAPACITY);
    let options = options.clone();
    tokio::spawn(async move {
        let mut relay = FeedRelay::new(tx);
        let mut poller = poller;
        let mut ticks = tokio::time::interval(options.poll);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            if relay.next(ticks.tick()).await.is_none() {
                return;
            }
            let Some(polled) = relay.next(poller.poll(&options)).await else {
                return;
            };
            match polled {
                Ok(changes) => {
                    for change in changes {
                        if !relay.send(change) {
                            return;
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "the MySQL change feed's poll failed; reconnecting");
                    let lost = |e: StoreError| {
                        tracing::debug!(error = %e, "the MySQL change feed is down; the engine polls until it subscribes again");
                    };
                    let Some(again) = relay.reconnect(|| Poller::open(&options), lost).await else {
                        return;
                    };
                    poller = again;
                }
            }
        }
    });
    Ok(feed)
}

/// Opens a connection that polls `group`'s version and hints the feed
/// (once at once, then on every change). The feed ends (and the elector
/// polls, and subscribes again) when the connection fails.
pub(crate) async fn subscribe(
    options: &MysqlOptions,
    group: &GroupName,
) -> Result<ChangeFeed, StoreError> {
    let mut live = conn::open(options).await?;
    let (tx, feed) = ChangeFeed::channel();
    let _ = tx.try_send(());
    let query = format!(
        "SELECT version FROM {} WHERE group_name = ?",
        options.table.quoted
    );
    let name = group.as_str().as_bytes().to_vec();
    let every = options.poll;
    let timeout = options.timeout;
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last: Option<Option<u64>> = None;
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                _ = ticks.tick() => {}
            }
            let read = tokio::time::timeout(
                timeout,
                live.conn.exec_first::<Row, _, _>(&query, (name.clone(),)),
            )
            .await;
            let Ok(Ok(row)) = read else { return };
            let version = row.and_then(|r| as_u64(sql::values(r).first().and_then(Option::as_ref)));
            if last.is_some_and(|l| l != version) && !tenure::store::send_hint(&tx) {
                return;
            }
            last = Some(version);
        }
    });
    Ok(feed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_look_back_about_once_a_second_however_slow() {
        let t = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        assert!(!look_back_due(t, t + ms(750)));
        assert!(look_back_due(t, t + ms(1000)));
        // Polls 5 s apart (poll=5s, or each poll's round trip) look back
        // every time.
        assert!(look_back_due(t, t + ms(5000)));
    }
}
