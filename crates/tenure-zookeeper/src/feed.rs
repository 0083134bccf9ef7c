//! The store-wide change feed ([`LeaseView::watch`], what the engine
//! listens to): ONE persistent recursive watch (`addWatch`, ZooKeeper 3.6
//! and later) on the prefix node, for every group.
//!
//! A persistent watch stays armed after it fires, so no event is lost
//! between an event and re-arming, and one watch covers every group node,
//! including ones created later (a child watch plus a one-shot data watch
//! per group would cost a watch per group and a re-arm per renewal).
//! ZooKeeper's events carry no data: the feed reads the nodes that changed
//! (those whose events arrived together in one `multiRead`) and reports
//! [`Change::Written`] with the record and version, so followers need no
//! read of their own.
//!
//! What a persistent watch does not do is catch up: after a reconnect the
//! server does not report the changes it missed (ZOOKEEPER-4698), and the
//! client library (zookeeper-client 0.11) does not even register the watch
//! again on the new connection. So after every reconnect the feed arms the
//! watch again itself and sends [`Change::Resync`] (every group reads
//! once); after the session ends, it does the same on the new session.
//!
//! Nodes under the prefix that are no group of tenure's are skipped; a
//! deleted node, or one whose data does not decode, is a
//! [`Change::Hint`] (the engine reads the group and reports what it
//! finds).
//!
//! The client library queues a watch's events without bound, so the feed
//! never waits for its reader: it keeps taking events, and relays them
//! through a [`FeedRelay`]. When the feed is full, a change is dropped and
//! one [`Change::Resync`] is owed instead (sent as soon as there is room),
//! and the nodes that change meanwhile are not even read: a slow reader
//! costs a resync, never memory.
//!
//! [`LeaseView::watch`]: tenure::LeaseView::watch

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tenure::store::{Change, FeedRelay, StoreFeed, StoreFeedSender};
use tenure::GroupName;
use zookeeper_client as zk;

use crate::error::ZkStoreError;
use crate::names;
use crate::store::{ZkStore, READS_PER_REQUEST};

/// Room in the feed: a whole renewal round of a large engine. When it is
/// full, changes are dropped for a resync (see the module docs).
pub(crate) const CAPACITY: usize = 16_384;

/// Arms the watch (waiting for the server to confirm it) and starts the
/// task that forwards its events until the feed is dropped.
pub(crate) async fn start(store: ZkStore) -> Result<StoreFeed, ZkStoreError> {
    start_with_capacity(store, CAPACITY).await
}

/// [`start`] with room for `capacity` changes.
async fn start_with_capacity(store: ZkStore, capacity: usize) -> Result<StoreFeed, ZkStoreError> {
    let watcher = arm(&store).await?;
    let (tx, feed) = StoreFeed::channel(capacity);
    tokio::spawn(forward(store, watcher, tx));
    Ok(feed)
}

async fn arm(store: &ZkStore) -> Result<zk::PersistentWatcher, ZkStoreError> {
    let prefix = store.options().prefix().to_owned();
    store
        .request("watch", |c| async move {
            c.watch(&prefix, zk::AddWatchMode::PersistentRecursive)
                .await
        })
        .await
        .map_err(|e| store.zk_error("watch", e))
}

/// Arms a new watch, retrying with back-off; `None` once the feed is
/// dropped or ZooKeeper refuses for good (the feed then ends, and the
/// engine polls).
async fn rearm(store: &ZkStore, tx: &StoreFeedSender) -> Option<zk::PersistentWatcher> {
    let mut failures = 0u32;
    loop {
        let armed = tokio::select! {
            _ = tx.closed() => return None,
            r = arm(store) => r,
        };
        match armed {
            Ok(watcher) => return Some(watcher),
            Err(e) if !e.is_transient() => {
                tracing::warn!(error = %e, "ZooKeeper refused the watch of the prefix node; the engine polls");
                return None;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::debug!(error = %e, "ZooKeeper watch of the prefix node not armed; trying again");
                tokio::select! {
                    _ = tx.closed() => return None,
                    _ = tokio::time::sleep(tenure::store::feed_backoff(failures)) => {}
                }
            }
        }
    }
}

/// The next event. The library panics when asked for an event after its
/// session ended (it closes the channel); the feed never asks then, and
/// should it happen anyway it is taken as the end of the session.
async fn next_event(watcher: &mut zk::PersistentWatcher) -> zk::WatchedEvent {
    match AssertUnwindSafe(watcher.changed()).catch_unwind().await {
        Ok(event) => event,
        Err(_) => zk::WatchedEvent::new_session(zk::SessionState::Closed),
    }
}

/// The group an event's path names: a direct child of the prefix node
/// whose name tenure gave it.
fn group_of(prefix: &str, path: &str) -> Option<GroupName> {
    let child = path.strip_prefix(prefix)?.strip_prefix('/')?;
    if child.contains('/') {
        return None;
    }
    names::decode(child)
}

/// Forwards events until the feed's reader is gone.
async fn forward(store: ZkStore, mut watcher: zk::PersistentWatcher, tx: StoreFeedSender) {
    let prefix = store.options().prefix().to_owned();
    let mut relay = FeedRelay::new(tx.clone());
    // Groups whose nodes changed, to read together, in order of arrival.
    let mut changed: Vec<GroupName> = Vec::new();
    let mut disconnected = false;
    loop {
        let event = if changed.is_empty() {
            match relay.next(next_event(&mut watcher)).await {
                Some(e) => e,
                None => return,
            }
        } else {
            // Take what already arrived; read once nothing more is ready.
            match next_event(&mut watcher).now_or_never() {
                Some(e) if changed.len() < READS_PER_REQUEST => e,
                ready => {
                    if !report(&store, &mut changed, &mut relay).await {
                        return;
                    }
                    match ready {
                        Some(e) => e,
                        None => continue,
                    }
                }
            }
        };
        match event.event_type {
            zk::EventType::NodeCreated | zk::EventType::NodeDataChanged => {
                if let Some(g) = group_of(&prefix, &event.path) {
                    if !changed.contains(&g) {
                        changed.push(g);
                    }
                }
            }
            zk::EventType::NodeDeleted => {
                if let Some(group) = group_of(&prefix, &event.path) {
                    changed.retain(|g| g != &group);
                    if !relay.send(Change::Hint { group }) {
                        return;
                    }
                }
            }
            zk::EventType::NodeChildrenChanged => {}
            zk::EventType::Session => {
                let state = event.session_state;
                if state.is_terminated() || state == zk::SessionState::Disconnected {
                    // Reading now would only wait out the timeout; the
                    // resync that follows the reconnect covers them.
                    changed.clear();
                } else if !report(&store, &mut changed, &mut relay).await {
                    return;
                }
                if state.is_terminated() {
                    // The watch died with its session: watch on a new one
                    // (the first request opens it).
                    tracing::info!(%state, "ZooKeeper session of the feed ended; watching on a new one");
                } else if state == zk::SessionState::Disconnected {
                    disconnected = true;
                    continue;
                } else if !disconnected {
                    continue;
                }
                // Reconnected (or a new session): watch again, then have
                // every group read once, in that order, so that no write
                // falls between the reads and the watch.
                disconnected = false;
                let Some(fresh) = rearm(&store, &tx).await else {
                    return;
                };
                // Replaced only now: dropping the old watcher first could
                // unregister the path on the server.
                watcher = fresh;
                if !relay.missed() {
                    return;
                }
            }
        }
    }
}

/// Reads the groups that changed and reports each with its record (a
/// group that cannot be read as a hint); `false` once the reader is gone.
/// While a resync is owed they are not read: it covers them.
async fn report(store: &ZkStore, changed: &mut Vec<GroupName>, relay: &mut FeedRelay) -> bool {
    if changed.is_empty() {
        return true;
    }
    let groups = std::mem::take(changed);
    if relay.owes_resync() {
        return relay.settle();
    }
    let read = store.read_multi(&groups).await;
    for (i, group) in groups.into_iter().enumerate() {
        let change = match read.as_ref().map(|r| &r[i]) {
            Ok(Ok(Some(current))) => Change::Written {
                group,
                current: current.clone(),
            },
            _ => Change::Hint { group },
        };
        if !relay.send(change) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_server::own_prefix_url;
    use tenure::LeaseStore;
    use tenure_testkit::{group, held_by};

    /// A reader that does not keep up costs a resync, not memory: with
    /// room for two changes, rounds of ten writes overflow the feed, and
    /// the changes that found it full come back as one `Resync` (when the
    /// feed waited for its reader instead, every change was delivered in
    /// the end, queued meanwhile without bound, and no resync came).
    #[tokio::test(flavor = "multi_thread")]
    async fn a_feed_its_reader_does_not_keep_up_with_owes_a_resync() {
        let Some(url) = own_prefix_url("feed-full") else {
            return;
        };
        let store = ZkStore::connect(&url).await.unwrap();
        let mut feed = start_with_capacity(store.clone(), 2).await.unwrap();
        let mut delivered = 0;
        for round in 0..20 {
            for i in 0..10 {
                let g = GroupName::new(format!("g{round}-{i}")).unwrap();
                store
                    .compare_and_swap(&g, None, &held_by("a", 1))
                    .await
                    .unwrap();
            }
            // Generous time for the events to reach the feed's task.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            while let Some(change) = feed.try_next() {
                if change == Change::Resync {
                    return;
                }
                delivered += 1;
            }
        }
        panic!("200 writes through a feed with room for 2 gave no resync ({delivered} changes delivered)");
    }

    #[test]
    fn only_direct_children_named_by_tenure_are_groups() {
        assert_eq!(group_of("/t", "/t/jobs"), Some(group("jobs")));
        assert_eq!(group_of("/t", "/t/a%2Fb"), Some(group("a/b")));
        assert_eq!(group_of("/t", "/t"), None);
        assert_eq!(group_of("/t", "/tx/jobs"), None);
        assert_eq!(group_of("/t", "/t/jobs/child"), None);
        assert_eq!(group_of("/t", "/t/%61"), None);
        assert_eq!(group_of("/t", "/other/jobs"), None);
    }
}
