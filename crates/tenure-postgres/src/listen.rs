//! Change feeds through LISTEN/NOTIFY. Every write that applies notifies
//! the table's channel in the same statement, with the group, its new
//! version and its record (see [`crate::payload`]).
//!
//! * [`watch`]: one connection for the whole table, the feed of an engine
//!   that runs many groups. It reconnects once when its connection is
//!   lost, and then owes its reader a [`Change::Resync`] (notifications
//!   sent meanwhile are gone); if that fails too, the feed ends and the
//!   engine polls until it subscribes again.
//! * [`subscribe`]: one connection hinting one group, for an
//!   [`Observer`](tenure::Observer).
//!
//! Both ping their connection every `timeout` and drop it when a ping goes
//! unanswered: a half-open connection would otherwise stay silent forever,
//! and every hand-over would wait for a poll.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tenure::store::{Change, ChangeFeed, FeedRelay, StoreFeed};
use tenure::{GroupName, StoreError};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::Client;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::options::PostgresOptions;
use crate::{error, payload, session};

/// The least time between two pings of a LISTEN connection.
const MIN_PING_EVERY: Duration = Duration::from_secs(1);

/// Room in the store-wide feed: every renewal of a large engine's round.
const CAPACITY: usize = 16_384;

/// How long looking up a notification's sender may take.
const SENDER_LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// A connection listening on the table's channel.
struct Listener {
    client: Arc<Client>,
    notes: UnboundedReceiver<(i32, String)>,
    ping: tokio::time::Interval,
    /// The ping in flight: whether it was answered within the timeout. A
    /// task of its own, so that a caller may drop [`Listener::next`] at any
    /// await without losing it.
    pong: Option<JoinHandle<bool>>,
    timeout: Duration,
}

impl Listener {
    async fn open(
        options: &PostgresOptions,
        tls: MakeRustlsConnect,
        channel: &str,
    ) -> Result<Listener, StoreError> {
        let target = options.redacted_url();
        let timeout = options.timeout;
        let (notes_tx, notes) = unbounded_channel();
        let open = async {
            let client = session::connect(options, tls, target, Some(notes_tx)).await?;
            client
                .batch_execute(&format!("LISTEN \"{channel}\""))
                .await
                .map_err(|e| error::classify("LISTEN", target, e))?;
            Ok::<_, StoreError>(client)
        };
        let client = match tokio::time::timeout(timeout, open).await {
            Ok(r) => r?,
            Err(_) => return Err(StoreError::Timeout(timeout)),
        };
        let mut ping = tokio::time::interval(timeout.max(MIN_PING_EVERY));
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.reset();
        Ok(Listener {
            client: Arc::new(client),
            notes,
            ping,
            pong: None,
            timeout,
        })
    }

    /// The next notification: its sender's process id and its payload;
    /// `None` once the connection is lost or a ping went unanswered.
    /// Cancel-safe.
    async fn next(&mut self) -> Option<(i32, String)> {
        loop {
            tokio::select! {
                note = self.notes.recv() => return note,
                answered = wait_pong(&mut self.pong), if self.pong.is_some() => {
                    self.pong = None;
                    if !answered {
                        tracing::debug!(timeout = ?self.timeout, "LISTEN connection did not answer a ping; dropping it");
                        return None;
                    }
                }
                _ = self.ping.tick(), if self.pong.is_none() => {
                    let (client, timeout) = (self.client.clone(), self.timeout);
                    self.pong = Some(tokio::spawn(async move {
                        matches!(
                            tokio::time::timeout(timeout, client.simple_query("SELECT 1")).await,
                            Ok(Ok(_))
                        )
                    }));
                }
            }
        }
    }
}

async fn wait_pong(pong: &mut Option<JoinHandle<bool>>) -> bool {
    match pong {
        Some(p) => p.await.unwrap_or(false),
        None => std::future::pending().await,
    }
}

/// Opens a dedicated connection that listens on `channel` and hints the
/// feed for `group` (once at once, then on every notification). The feed
/// ends (and the elector polls, and subscribes again) when the connection
/// is lost.
pub(crate) async fn subscribe(
    options: &PostgresOptions,
    tls: MakeRustlsConnect,
    channel: String,
    group: &GroupName,
) -> Result<ChangeFeed, StoreError> {
    let mut listener = Listener::open(options, tls, &channel).await?;
    let (tx, feed) = ChangeFeed::channel();
    // Writes notified before LISTEN took effect were missed: one hint now
    // makes the reader read once, so a release that happened while this
    // connection was being opened is not left for a poll to find.
    let _ = tx.try_send(());
    let group = group.clone();
    tokio::spawn(async move {
        loop {
            let note = tokio::select! {
                note = listener.next() => note,
                _ = tx.closed() => return,
            };
            let Some((_, note)) = note else { return };
            let ours = match payload::decode(&note) {
                Some(Change::Written { group: g, .. } | Change::Hint { group: g }) => g == group,
                Some(Change::Resync) => true,
                None => false,
            };
            // A full channel already holds a hint.
            if ours {
                if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) = tx.try_send(()) {
                    return;
                }
            }
        }
    });
    Ok(feed)
}

/// Opens the one connection that reports every group's writes to the
/// returned feed (see the module docs).
pub(crate) async fn watch(
    options: &PostgresOptions,
    tls: MakeRustlsConnect,
    channel: String,
) -> Result<StoreFeed, StoreError> {
    let listener = Listener::open(options, tls.clone(), &channel).await?;
    let (tx, feed) = StoreFeed::channel(CAPACITY);
    let options = options.clone();
    tokio::spawn(async move {
        let mut relay = FeedRelay::new(tx);
        let mut listener = listener;
        let mut senders = Senders::new(&options.table.quoted);
        loop {
            let Some(note) = relay.next(listener.next()).await else {
                return;
            };
            match note {
                Some((sender, note)) => {
                    let change = match payload::decode(&note) {
                        Some(Change::Written { group, current }) => {
                            if senders.may_write(&listener.client, sender).await {
                                Change::Written { group, current }
                            } else {
                                Change::Hint { group }
                            }
                        }
                        Some(change) => change,
                        None => continue,
                    };
                    if !relay.send(change) {
                        return;
                    }
                }
                None => {
                    let reopen = || Listener::open(&options, tls.clone(), &channel);
                    let lost = |e: StoreError| {
                        tracing::debug!(error = %e, "LISTEN connection lost; the engine polls until it subscribes again");
                    };
                    let Some(again) = relay.reconnect(reopen, lost).await else {
                        return;
                    };
                    tracing::debug!("LISTEN connection re-established; resyncing every group");
                    listener = again;
                }
            }
        }
    });
    Ok(feed)
}

/// How long a sender's right to write the table is remembered: a process
/// id may be reused by a later session, of another user.
const SENDER_TTL: Duration = Duration::from_secs(60);

/// How soon a lookup that failed is tried again.
const LOOKUP_RETRY: Duration = Duration::from_secs(5);

/// Most senders remembered (a flood of distinct ones clears the memory).
const MAX_SENDERS: usize = 1024;

/// Which sessions may write the table, by process id. Any user of the
/// database may `NOTIFY` on any channel; only one that may also `UPDATE`
/// the lease table could have written the record its payload reports, so
/// only such a sender's record is believed. Anyone else's payload is a
/// hint: the engine reads the group and learns the truth. tenure's own
/// writers are a handful of pooled sessions, each looked up once a minute.
struct Senders {
    table: String,
    /// Whether each sender may write, until when that holds.
    known: HashMap<i32, (bool, Instant)>,
    warned: bool,
}

impl Senders {
    fn new(table: &str) -> Senders {
        Senders {
            table: table.to_owned(),
            known: HashMap::new(),
            warned: false,
        }
    }

    /// Whether the session `pid` may write the lease table. A sender that
    /// is gone, or a lookup that fails, is not believed.
    async fn may_write(&mut self, client: &Client, pid: i32) -> bool {
        let now = Instant::now();
        if let Some((may, until)) = self.known.get(&pid) {
            if now < *until {
                return *may;
            }
        }
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&pid, &self.table];
        let lookup = client.query_opt(
            "SELECT coalesce(has_table_privilege(a.usesysid, to_regclass($2), 'UPDATE'), false)
             FROM pg_catalog.pg_stat_activity a WHERE a.pid = $1",
            &params,
        );
        let (may, ttl) = match tokio::time::timeout(SENDER_LOOKUP_WAIT, lookup).await {
            Ok(Ok(Some(row))) => (row.try_get::<_, bool>(0).unwrap_or(false), SENDER_TTL),
            // Gone already (a short-lived session), or hidden.
            Ok(Ok(None)) => (false, SENDER_TTL),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cannot tell whether a notification's sender may write the lease table");
                (false, LOOKUP_RETRY)
            }
            Err(_) => (false, LOOKUP_RETRY),
        };
        if !may && !self.warned {
            self.warned = true;
            tracing::warn!(
                pid,
                "a notification on the lease table's channel came from a session that may not write the table, \
                 or whose user this connection cannot see in pg_stat_activity: its records are taken as hints \
                 (followers read the group); if this repeats for tenure's own writers, let this user see them"
            );
        }
        if self.known.len() >= MAX_SENDERS {
            self.known.clear();
        }
        self.known.insert(pid, (may, now + ttl));
        may
    }
}
