//! The change feeds: watches of Lease objects.
//!
//! The store-wide feed is ONE watch of the namespace's Leases that carry
//! the store's labels, started from the resourceVersion of a list. Its
//! events carry the objects, so a put becomes [`Change::Written`] with the
//! record and the version a read would return. A watch the server ends
//! (its timeout, a broken connection) is resumed from the last
//! resourceVersion seen, so nothing is missed; when the server answers
//! `410 Gone` (etcd compacted that revision away), the feed lists again for
//! a fresh resourceVersion and sends [`Change::Resync`]: every group reads
//! once. A Lease that does not decode, or a deletion, is a
//! [`Change::Hint`]: the elector reads the group and reports what it finds.
//!
//! A per-group feed (for observers) is a watch with the field selector
//! `metadata.name=…` whose every event is a hint.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{WatchEvent, WatchParams};
use tenure::store::{feed_backoff, keep_hinting, send_hint, HintAttempt};
use tenure::store::{Change, FeedRelay, StoreFeed, StoreFeedSender};
use tokio::sync::mpsc;

use crate::error::{Failure, KubernetesStoreError};
use crate::store::{group_of, CallError, Inner};

/// Room in the store-wide feed: a whole renewal round of a large engine.
const CAPACITY: usize = 16_384;

/// How long the server keeps one watch open before the feed resumes it
/// (kube-apiserver caps it at `--min-request-timeout`, 1800 s by default;
/// shorter, so that a watch through a proxy that drops idle connections is
/// renewed).
const WATCH_SECONDS: u32 = 290;

fn resource_version(lease: &Lease) -> Option<String> {
    lease.metadata.resource_version.clone()
}

async fn open(
    inner: &Inner,
    wp: &WatchParams,
    version: &str,
) -> Result<
    futures_util::stream::BoxStream<'static, Result<WatchEvent<Lease>, kube::Error>>,
    KubernetesStoreError,
> {
    match tokio::time::timeout(inner.options.timeout, inner.api.watch(wp, version)).await {
        Err(_) => Err(inner.error("watch", "watch", None, CallError::TimedOut)),
        Ok(Err(e)) => Err(inner.error("watch", "watch", None, CallError::Failed(Failure::of(&e)))),
        Ok(Ok(stream)) => Ok(stream.boxed()),
    }
}

/// Hints `tx` on every change of the Lease `name` until the reader is gone
/// (`Ok`) or the server refuses the watch for good (a permission: `Err`).
pub(crate) async fn per_group(
    inner: Arc<Inner>,
    name: String,
    tx: mpsc::Sender<()>,
) -> Result<(), KubernetesStoreError> {
    let version = Arc::new(Mutex::new("0".to_owned()));
    let attempt = |this: HintAttempt| {
        let inner = inner.clone();
        let name = name.clone();
        let tx = tx.clone();
        let version = version.clone();
        async move { hint_attempt(&inner, &name, &tx, &version, &this).await }
    };
    keep_hinting(&tx, attempt, |e| {
        tracing::debug!(error = %e, "the watch of a Lease broke; watching again");
    })
    .await
}

async fn hint_attempt(
    inner: &Inner,
    name: &str,
    tx: &mpsc::Sender<()>,
    version: &Mutex<String>,
    attempt: &HintAttempt,
) -> Result<(), KubernetesStoreError> {
    let wp = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(WATCH_SECONDS);
    loop {
        let from = version.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut stream = open(inner, &wp, &from).await?;
        attempt.connected();
        loop {
            let next = tokio::select! {
                () = tx.closed() => return Ok(()),
                next = stream.next() => next,
            };
            let set = |v: Option<String>| {
                if let Some(v) = v {
                    *version.lock().unwrap_or_else(|p| p.into_inner()) = v;
                }
            };
            match next {
                // The server ended the watch: resume from the last version.
                None => break,
                Some(Err(e)) => {
                    return Err(inner.error(
                        "watch",
                        "watch",
                        None,
                        CallError::Failed(Failure::of(&e)),
                    ))
                }
                Some(Ok(
                    WatchEvent::Added(l) | WatchEvent::Modified(l) | WatchEvent::Deleted(l),
                )) => {
                    set(resource_version(&l));
                    if !send_hint(tx) {
                        return Ok(());
                    }
                }
                Some(Ok(WatchEvent::Bookmark(b))) => set(Some(b.metadata.resource_version)),
                Some(Ok(WatchEvent::Error(status))) if status.code == 410 => {
                    // Compacted: start again from now, and read.
                    set(Some("0".to_owned()));
                    if !send_hint(tx) {
                        return Ok(());
                    }
                    break;
                }
                Some(Ok(WatchEvent::Error(status))) => {
                    return Err(inner.error(
                        "watch",
                        "watch",
                        None,
                        CallError::Failed(Failure::Status {
                            code: status.code,
                            reason: status.reason,
                            message: status.message,
                        }),
                    ))
                }
            }
        }
    }
}

/// The store-wide feed: lists (so that an error is reported here, and for
/// the resourceVersion to watch from) and starts the task that watches.
pub(crate) async fn store_wide(inner: Arc<Inner>) -> Result<StoreFeed, KubernetesStoreError> {
    let (_, version) = inner.list_all().await?;
    let (tx, feed) = StoreFeed::channel(CAPACITY);
    tokio::spawn(run(inner, version, tx));
    Ok(feed)
}

async fn pause(relay: &mut FeedRelay, failures: u32) -> bool {
    relay
        .next(tokio::time::sleep(feed_backoff(failures)))
        .await
        .is_some()
}

async fn run(inner: Arc<Inner>, mut version: String, tx: StoreFeedSender) {
    let mut relay = FeedRelay::new(tx);
    let wp = WatchParams::default()
        .labels(&inner.options.selector())
        .timeout(WATCH_SECONDS);
    let mut failures = 0u32;
    loop {
        let Some(opened) = relay.next(open(&inner, &wp, &version)).await else {
            return;
        };
        let mut stream = match opened {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "the watch of the Leases failed; trying again");
                failures = failures.saturating_add(1);
                if !pause(&mut relay, failures).await {
                    return;
                }
                continue;
            }
        };
        failures = 0;
        loop {
            let Some(next) = relay.next(stream.next()).await else {
                return;
            };
            match next {
                // Ended by the server: resume from the last version seen.
                None => break,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "the watch of the Leases broke; resuming");
                    failures = failures.saturating_add(1);
                    if !pause(&mut relay, failures).await {
                        return;
                    }
                    break;
                }
                Some(Ok(WatchEvent::Added(l) | WatchEvent::Modified(l))) => {
                    if let Some(v) = resource_version(&l) {
                        version = v;
                    }
                    let Some(group) = group_of(&l) else { continue };
                    let change = match inner.decode(&group, &l) {
                        Ok(current) => Change::Written { group, current },
                        Err(_) => Change::Hint { group },
                    };
                    if !relay.send(change) {
                        return;
                    }
                }
                Some(Ok(WatchEvent::Deleted(l))) => {
                    if let Some(v) = resource_version(&l) {
                        version = v;
                    }
                    if let Some(group) = group_of(&l) {
                        if !relay.send(Change::Hint { group }) {
                            return;
                        }
                    }
                }
                Some(Ok(WatchEvent::Bookmark(b))) => version = b.metadata.resource_version,
                Some(Ok(WatchEvent::Error(status))) => {
                    if status.code == 410 {
                        // Compacted: list again for a version to watch
                        // from, and every group reads once.
                        match inner.list_all().await {
                            Ok((_, v)) => {
                                version = v;
                                if !relay.missed() {
                                    return;
                                }
                            }
                            Err(e) => {
                                tracing::debug!(error = %e, "listing the Leases again failed");
                                failures = failures.saturating_add(1);
                                if !pause(&mut relay, failures).await {
                                    return;
                                }
                            }
                        }
                    } else {
                        tracing::debug!(code = status.code, message = %status.message, "the watch of the Leases ended with an error; resuming");
                        failures = failures.saturating_add(1);
                        if !pause(&mut relay, failures).await {
                            return;
                        }
                    }
                    break;
                }
            }
        }
    }
}
