//! The per-group change feed ([`LeaseView::changes`], what observers
//! use): a one-shot data watch on the group's node.
//!
//! ZooKeeper watches fire once, so the watch is armed again after every
//! event, and only then is the hint sent: whatever changed between the
//! event and the new watch, the read the hint causes comes after the watch
//! and sees it. Within a session the client re-registers the watch after a
//! reconnect, and the server fires it if the node changed meanwhile; when
//! the session ends the watch is told so, and it is armed again on the new
//! session (with a hint, since changes in between were not watched).
//!
//! [`LeaseView::changes`]: tenure::LeaseView::changes

use tenure::ChangeFeed;
use tokio::sync::mpsc;
use zookeeper_client as zk;

use crate::store::ZkStore;

/// A feed of hints for the node at `path`, kept by a task that ends when
/// the feed is dropped.
pub(crate) fn start(store: ZkStore, path: String) -> ChangeFeed {
    let (tx, feed) = ChangeFeed::channel();
    tokio::spawn(run(store, path, tx));
    feed
}

async fn run(store: ZkStore, path: String, tx: mpsc::Sender<()>) {
    let mut failures = 0u32;
    loop {
        let path = path.clone();
        let armed = tokio::select! {
            _ = tx.closed() => return,
            r = store.request("watch", |c| async move {
                c.check_and_watch_stat(&path).await.map(|(_, watcher)| watcher)
            }) => r,
        };
        let watcher = match armed {
            Ok(watcher) => watcher,
            Err(e) => {
                let e = store.zk_error("watch", e);
                if !e.is_transient() {
                    // Ending the feed makes the elector poll.
                    tracing::warn!(error = %e, "ZooKeeper refused the watch of a group; its electors poll");
                    return;
                }
                failures = failures.saturating_add(1);
                tracing::debug!(error = %e, "ZooKeeper watch not armed; trying again");
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(tenure::store::feed_backoff(failures)) => {}
                }
                continue;
            }
        };
        failures = 0;
        if !tenure::store::send_hint(&tx) {
            return;
        }
        let event = tokio::select! {
            _ = tx.closed() => return,
            event = watcher.changed() => event,
        };
        // A node event, or the end of the session (the only session event
        // a one-shot watch is told): either way, arm again and hint.
        if event.event_type == zk::EventType::Session {
            tracing::debug!(state = %event.session_state, "ZooKeeper session ended under a watch; arming it again");
        }
    }
}
