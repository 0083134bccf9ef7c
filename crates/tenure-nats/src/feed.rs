//! The change feeds: JetStream key-value watches.
//!
//! The store-wide feed is ONE watch of every key tenure writes
//! (`tenure.>`), whose messages carry the written value and its revision:
//! a put becomes [`Change::Written`] with the record and the version a read
//! would return, so a follower learns of a renewal without a read.
//!
//! A watch is an ordered consumer of the bucket's stream, from the moment
//! it is created. When the connection drops (the server restarted, the
//! network failed), the watch reports trouble (a missed heartbeat) or it
//! ends, the feed drops it, watches again as soon as the server answers
//! (backing off from 50 ms to 2 s between attempts), and then sends
//! [`Change::Resync`]: every group reads once, which covers whatever was
//! written meanwhile. (The client would re-create the watch itself, but
//! backs off for up to 10 s between attempts, and cannot tell a bucket
//! whose revisions started over.)
//!
//! Keys in the bucket that tenure did not write are no reason to stop: a
//! key that is no group's is skipped (no elector can be waiting on it), a
//! value that does not decode and a deletion become [`Change::Hint`]s (the
//! elector reads the group and reports what it finds).

use std::sync::Arc;

use async_nats::jetstream::kv::{self, Operation};
use futures_util::StreamExt;
use tenure::{
    Change, ChangeFeed, GroupName, LeaseRecord, StoreFeed, StoreFeedSender, Version, Versioned,
};
use tokio::sync::mpsc;

use crate::error::NatsStoreError;
use crate::keys;
use crate::store::{within, Inner};

/// Room in the feed: a whole renewal round of a large engine. The watch
/// waits while it is full (the server holds back through flow control);
/// nothing is dropped.
const CAPACITY: usize = 16_384;

/// Watches the keys `filter` matches (relative to the bucket), from now.
async fn create(inner: &Inner, filter: &str) -> Result<kv::Watch, NatsStoreError> {
    match within(inner.options.timeout, inner.kv.watch(filter)).await {
        None => Err(inner.ctx().timeout()),
        Some(Ok(watch)) => Ok(watch),
        Some(Err(e)) => Err(inner.ctx().operation("to watch the bucket", e)),
    }
}

/// Waits out a back-off, then creates the watch again, until it works or
/// the feed's reader is gone (`None`).
async fn recreate(
    inner: &Inner,
    filter: &str,
    closed: impl std::future::Future<Output = ()>,
) -> Option<kv::Watch> {
    tokio::pin!(closed);
    let mut failures = 0u32;
    loop {
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = &mut closed => return None,
            _ = tokio::time::sleep(tenure::store::feed_backoff(failures)) => {}
        }
        match create(inner, filter).await {
            Ok(watch) => return Some(watch),
            Err(e) => tracing::debug!(error = %e, "NATS watch of the bucket failed; trying again"),
        }
    }
}

/// The store-wide feed: creates the watch (so that an error is reported
/// here) and a task that forwards its messages until the feed is dropped.
pub(crate) async fn store_wide(inner: Arc<Inner>) -> Result<StoreFeed, NatsStoreError> {
    let filter = keys::filter_all();
    let watch = create(&inner, &filter).await?;
    let (tx, feed) = StoreFeed::channel(CAPACITY);
    tokio::spawn(forward(inner, filter, watch, tx));
    Ok(feed)
}

async fn forward(inner: Arc<Inner>, filter: String, mut watch: kv::Watch, tx: StoreFeedSender) {
    let mut disconnects = inner.disconnects.clone();
    disconnects.borrow_and_update();
    loop {
        let restart = tokio::select! {
            _ = tx.closed() => return,
            Ok(()) = disconnects.changed() => {
                tracing::debug!("NATS connection lost; watching the bucket again once it is back, then every group reads once");
                true
            }
            item = watch.next() => match item {
                Some(Ok(entry)) => {
                    if let Some(change) = change_of(&entry) {
                        if !tx.send(change).await {
                            return;
                        }
                    }
                    false
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "NATS watch of the bucket in trouble; watching again, then every group reads once");
                    true
                }
                None => {
                    tracing::debug!("NATS watch of the bucket ended; watching again, then every group reads once");
                    true
                }
            },
        };
        if restart {
            // A disconnection from here on restarts the new watch too.
            disconnects.borrow_and_update();
            match recreate(&inner, &filter, tx.closed()).await {
                Some(w) => watch = w,
                None => return,
            }
            // Watching again before the reads: no write falls between.
            if !tx.send(Change::Resync).await {
                return;
            }
        }
    }
}

/// What a watched entry says about a group: `None` for a key that is no
/// group's.
fn change_of(entry: &kv::Entry) -> Option<Change> {
    let group = keys::group_of(&entry.key)?;
    if entry.operation != Operation::Put {
        return Some(Change::Hint { group });
    }
    Some(match LeaseRecord::decode(&entry.value) {
        Ok(record) => Change::Written {
            group,
            current: Versioned {
                record,
                version: Version(entry.revision),
            },
        },
        Err(_) => Change::Hint { group },
    })
}

/// A per-group feed of hints (what an [`Observer`](tenure::Observer)
/// uses): a watch of the group's key, created in a task so that this
/// returns at once. It hints once each time the watch is created (the
/// elector reads, and misses nothing from before), then on every message
/// and every trouble the watch reports.
pub(crate) async fn per_group(
    inner: Arc<Inner>,
    group: &GroupName,
) -> Result<ChangeFeed, NatsStoreError> {
    let (tx, feed) = ChangeFeed::channel();
    let key = keys::key_of(group);
    tokio::spawn(async move {
        let mut disconnects = inner.disconnects.clone();
        disconnects.borrow_and_update();
        let mut watch = match create(&inner, &key).await {
            Ok(w) => w,
            Err(e) => {
                tracing::debug!(error = %e, "NATS watch of a key failed; trying again");
                match recreate(&inner, &key, tx.closed()).await {
                    Some(w) => w,
                    None => return,
                }
            }
        };
        loop {
            if !hint(&tx) {
                return;
            }
            let restart = tokio::select! {
                _ = tx.closed() => return,
                Ok(()) = disconnects.changed() => true,
                item = watch.next() => !matches!(item, Some(Ok(_))),
            };
            if restart {
                disconnects.borrow_and_update();
                match recreate(&inner, &key, tx.closed()).await {
                    Some(w) => watch = w,
                    None => return,
                }
            }
        }
    });
    Ok(feed)
}

/// Hints without waiting: a full channel already holds a hint, and the
/// elector's read will see this change too. `false` once the elector is
/// gone.
fn hint(tx: &mpsc::Sender<()>) -> bool {
    !matches!(tx.try_send(()), Err(mpsc::error::TrySendError::Closed(_)))
}
