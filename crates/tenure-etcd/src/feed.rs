//! The store-wide change feed: ONE etcd watch on the key prefix, for every
//! group of the store, whose events carry the written key-value. A put
//! becomes [`Change::Written`] with the record and its `mod_revision` (the
//! version a read would return), so a follower learns of a renewal without
//! a read.
//!
//! The watch resumes where it stopped: after a broken stream it is created
//! again from the revision after the last one it delivered, so nothing is
//! missed and nothing needs reading. Only when that revision has been
//! compacted away (etcd cancels the watch with a `compact_revision`), or
//! the server's revision went backwards (a cluster rebuilt from scratch),
//! does the feed send [`Change::Resync`] and watch from now on.
//!
//! Keys under the prefix that tenure did not write are no reason to stop:
//! a key that is no group name is skipped (no elector can be waiting on
//! it), a value that does not decode and a deleted key become
//! [`Change::Hint`]s (the elector reads the group and reports what it
//! finds).

use std::sync::Arc;

use etcd_client::{Client, Event, WatchOptions, WatchResponse, WatchStream};
use tenure::store::{Change, StoreFeed, StoreFeedSender};
use tenure::{GroupName, LeaseRecord, Versioned};

use crate::error::EtcdStoreError;
use crate::options::EtcdOptions;
use crate::store::{ctx, version_of};
use crate::watch::cancelled;

/// Room in the feed: a whole renewal round of a large engine. The watch
/// waits (and etcd buffers) while it is full; nothing is dropped.
pub(crate) const CAPACITY: usize = 16_384;

/// A created watch and the first revision it reports.
struct Watching {
    stream: WatchStream,
    from: i64,
}

/// Why creating a watch did not give one.
enum Refusal {
    /// The revision to resume from is gone: watch from now, and resync.
    Compacted,
    /// Any other failure: the feed is retried after a pause.
    Failed(EtcdStoreError),
}

/// Creates the watch (waiting for etcd to confirm it) and a task that
/// forwards its events until the feed is dropped.
pub(crate) async fn start(
    client: Client,
    options: Arc<EtcdOptions>,
) -> Result<StoreFeed, EtcdStoreError> {
    let watching = match create(&client, &options, None).await {
        Ok(w) => w,
        Err(Refusal::Failed(e)) => return Err(e),
        // Only a start revision can have been compacted.
        Err(Refusal::Compacted) => {
            return Err(EtcdStoreError::Unreachable {
                target: options.target(),
                detail: "etcd cancelled a new watch as compacted".into(),
            })
        }
    };
    let (tx, feed) = StoreFeed::channel(CAPACITY);
    tokio::spawn(forward(client, options, watching, tx));
    Ok(feed)
}

/// Watches the prefix from `from` (from now if `None`), waiting for etcd
/// to confirm the watch within the timeout.
async fn create(
    client: &Client,
    options: &EtcdOptions,
    from: Option<i64>,
) -> Result<Watching, Refusal> {
    let ctx = ctx(options);
    let mut watch = WatchOptions::new().with_prefix();
    if let Some(rev) = from {
        watch = watch.with_start_revision(rev);
    }
    let created = async {
        let mut stream = client
            .watch_client()
            .watch(options.prefix.as_bytes(), Some(watch))
            .await
            .map_err(|e| Refusal::Failed(ctx.classify("watch", e)))?;
        loop {
            match stream.message().await {
                Ok(Some(resp)) if resp.canceled() => {
                    return Err(if resp.compact_revision() > 0 {
                        Refusal::Compacted
                    } else {
                        Refusal::Failed(cancelled(&ctx, resp.cancel_reason()))
                    })
                }
                Ok(Some(resp)) if resp.created() => {
                    // A watch without a start revision reports the writes
                    // after the revision in its confirmation.
                    let now = resp.header().map_or(0, |h| h.revision());
                    return Ok((stream, now));
                }
                Ok(Some(_)) => continue,
                Ok(None) => {
                    return Err(Refusal::Failed(EtcdStoreError::Unreachable {
                        target: options.target(),
                        detail: "the watch stream ended before etcd confirmed it".into(),
                    }))
                }
                Err(e) => return Err(Refusal::Failed(ctx.classify("watch", e))),
            }
        }
    };
    let (stream, now) = tokio::time::timeout(options.timeout, created)
        .await
        .map_err(|_| Refusal::Failed(ctx.timeout()))??;
    let from = match from {
        // The server's revision is behind where the feed stopped: its
        // history was rebuilt, and a watch from the old revision would wait
        // for writes that already happened under other numbers.
        Some(rev) if now < rev - 1 => return Err(Refusal::Compacted),
        Some(rev) => rev,
        None => now + 1,
    };
    Ok(Watching { stream, from })
}

/// Why delivering stopped.
enum Broke {
    /// The feed's reader is gone.
    Closed,
    /// etcd cancelled the watch: the history it needed was compacted.
    Compacted,
    /// The stream broke; resume from where it stopped.
    Failed(EtcdStoreError),
}

/// Forwards events until the feed's reader is gone; re-creates the watch
/// when its stream breaks. Ends (closing the feed, so the engine polls)
/// only when etcd refuses the watch for a reason retrying will not fix.
async fn forward(
    client: Client,
    options: Arc<EtcdOptions>,
    mut watching: Watching,
    tx: StoreFeedSender,
) {
    let mut failures = 0u32;
    loop {
        let broke = tokio::select! {
            _ = tx.closed() => return,
            b = deliver(&options, &mut watching, &tx) => b,
        };
        // Where to resume; `None`: the history is gone, so watch from now
        // and, once watching, have every group read once (in that order,
        // so that no write falls between the reads and the watch).
        let mut resume = match broke {
            Broke::Closed => return,
            Broke::Compacted => None,
            Broke::Failed(error) => {
                tracing::debug!(error = %error, "etcd watch of the prefix lost; watching again");
                Some(watching.from)
            }
        };
        loop {
            failures = failures.saturating_add(1);
            tokio::select! {
                _ = tx.closed() => return,
                _ = tokio::time::sleep(tenure::store::feed_backoff(failures)) => {}
            }
            match create(&client, &options, resume).await {
                Ok(w) => {
                    watching = w;
                    failures = 0;
                    if resume.is_none() {
                        tracing::info!(
                            "etcd no longer has the changes since the watch broke; every group reads once"
                        );
                        if !tx.send(Change::Resync).await {
                            return;
                        }
                    }
                    break;
                }
                Err(Refusal::Compacted) => resume = None,
                Err(Refusal::Failed(e)) if !e.is_transient() => return refused(e),
                Err(Refusal::Failed(_)) => {}
            }
        }
    }
}

fn refused(e: EtcdStoreError) {
    tracing::warn!(
        error = %e,
        "etcd refused the watch of the key prefix; the engine polls until it can watch again"
    );
}

/// Sends the watch's events on until the stream breaks or the feed's
/// reader is gone.
async fn deliver(options: &EtcdOptions, watching: &mut Watching, tx: &StoreFeedSender) -> Broke {
    let ctx = ctx(options);
    loop {
        let resp: WatchResponse = match watching.stream.message().await {
            Ok(Some(resp)) => resp,
            Ok(None) => {
                return Broke::Failed(EtcdStoreError::Unreachable {
                    target: options.target(),
                    detail: "the watch stream ended".into(),
                })
            }
            Err(e) => return Broke::Failed(ctx.classify("watch", e)),
        };
        if resp.canceled() {
            // etcd confirms a watch from a compacted revision first and
            // cancels it afterwards, naming the compaction.
            return if resp.compact_revision() > 0 {
                Broke::Compacted
            } else {
                Broke::Failed(cancelled(&ctx, resp.cancel_reason()))
            };
        }
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            watching.from = watching.from.max(kv.mod_revision().saturating_add(1));
            if let Some(change) = change_of(&options.prefix, event) {
                if !tx.send(change).await {
                    return Broke::Closed;
                }
            }
        }
    }
}

/// What an event says about a group: `None` for a key that is no group.
fn change_of(prefix: &str, event: &Event) -> Option<Change> {
    let kv = event.kv()?;
    let name = kv.key().strip_prefix(prefix.as_bytes())?;
    let group = GroupName::new(std::str::from_utf8(name).ok()?).ok()?;
    // A put always leaves a version of at least 1; a deletion's key-value
    // has none. (Read from the key-value, not `event_type()`, which panics
    // on a type it does not know.)
    if kv.version() < 1 {
        return Some(Change::Hint { group });
    }
    let (Ok(record), Some(version)) = (
        LeaseRecord::decode(kv.value()),
        version_of(kv.mod_revision()),
    ) else {
        return Some(Change::Hint { group });
    };
    Some(Change::Written {
        group,
        current: Versioned { record, version },
    })
}
