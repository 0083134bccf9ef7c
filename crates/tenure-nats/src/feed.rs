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
//! The watch is the same ordered consumer the client's key-value watch
//! makes, read here as raw messages so that their headers are classified
//! exactly as a read classifies them (see [`marker`](crate::marker)); the
//! client's watch reads an unknown `KV-Operation` as a put.
//!
//! Keys in the bucket that tenure did not write are no reason to stop: a
//! key that is no group's is skipped (no elector can be waiting on it), a
//! value that does not decode and a marker (a deletion, a purge, an
//! unknown operation) become [`Change::Hint`]s: the elector reads the
//! group and reports what the read finds (for a marker, an error naming
//! the key and the fix; never "no record").

use std::sync::Arc;

use async_nats::jetstream::consumer::{push, DeliverPolicy, ReplayPolicy};
use async_nats::jetstream::Message;
use futures_util::StreamExt;
use tenure::store::{Change, ChangeFeed, StoreFeed, StoreFeedSender};
use tenure::{GroupName, LeaseRecord, Version, Versioned};

use crate::error::{Concerning, NatsStoreError};
use crate::keys;
use crate::marker::{self, Kind};
use crate::store::{within, Inner};

/// Room in the feed: a whole renewal round of a large engine. The watch
/// waits while it is full (the server holds back through flow control);
/// nothing is dropped.
const CAPACITY: usize = 16_384;

/// A watch: the messages of an ordered consumer of the bucket's stream.
type Watch = push::Ordered;

/// Watches the keys `filter` matches (relative to the bucket), from now:
/// an ordered consumer of new messages, as the client's key-value watch
/// creates it.
async fn create(inner: &Inner, filter: &str) -> Result<Watch, NatsStoreError> {
    let api = inner.api_subject("CONSUMER.CREATE");
    let api = || Concerning::SubjectPrefix(&api);
    let watch = async {
        let consumer = inner
            .kv
            .stream
            .create_consumer(push::OrderedConfig {
                deliver_subject: inner.client.new_inbox(),
                description: Some("tenure watch".into()),
                filter_subject: inner.subject(filter),
                replay_policy: ReplayPolicy::Instant,
                deliver_policy: DeliverPolicy::New,
                ..Default::default()
            })
            .await
            .map_err(|e| inner.ctx().operation("to watch the bucket", api(), e))?;
        consumer
            .messages()
            .await
            .map_err(|e| inner.ctx().operation("to watch the bucket", api(), e))
    };
    match within(inner.options.timeout, watch).await {
        None => Err(inner.ctx().timeout(api())),
        Some(result) => result,
    }
}

/// Waits out a back-off, then creates the watch again, until it works or
/// the feed's reader is gone (`None`).
async fn recreate(
    inner: &Inner,
    filter: &str,
    closed: impl std::future::Future<Output = ()>,
) -> Option<Watch> {
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

async fn forward(inner: Arc<Inner>, filter: String, mut watch: Watch, tx: StoreFeedSender) {
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
                Some(Ok(message)) => {
                    if let Some(change) = change_of(&inner, &message) {
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

/// What a watched message says about a group: `None` for a key that is no
/// group's. Classified as a read classifies it: a record is
/// [`Change::Written`] with the version a read would return; a marker or a
/// value that does not decode is a hint, so the elector reads the group
/// and reports the read's error.
fn change_of(inner: &Inner, message: &Message) -> Option<Change> {
    let key = message
        .subject
        .as_str()
        .strip_prefix(inner.kv.prefix.as_str())?;
    let group = keys::group_of(key)?;
    let Ok(info) = message.info() else {
        return Some(Change::Hint { group });
    };
    if let Kind::Marker(_) = marker::kind_of(message.headers.as_ref()) {
        return Some(Change::Hint { group });
    }
    Some(match LeaseRecord::decode(&message.payload) {
        Ok(record) => Change::Written {
            group,
            current: Versioned {
                record,
                version: Version(info.stream_sequence),
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
            if !tenure::store::send_hint(&tx) {
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
