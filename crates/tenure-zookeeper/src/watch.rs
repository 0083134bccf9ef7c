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

use tenure::store::ChangeFeed;
use tenure::store::{keep_hinting, send_hint, HintAttempt};
use tokio::sync::mpsc;
use zookeeper_client as zk;

use crate::error::ZkStoreError;
use crate::store::ZkStore;

/// A feed of hints for the node at `path`, kept by a task that ends when
/// the feed is dropped.
pub(crate) fn start(store: ZkStore, path: String) -> ChangeFeed {
    let (tx, feed) = ChangeFeed::channel();
    tokio::spawn(run(store, path, tx));
    feed
}

/// Keeps the watch armed (again after a transient failure, with the
/// shared back-off) until the feed is dropped or ZooKeeper refuses it.
async fn run(store: ZkStore, path: String, tx: mpsc::Sender<()>) {
    let watched = keep_hinting(
        &tx,
        |attempt| watch(&store, &path, &tx, attempt),
        |e| tracing::debug!(error = %e, "ZooKeeper watch not armed; trying again"),
    )
    .await;
    if let Err(e) = watched {
        // Ending the feed makes the elector poll.
        tracing::warn!(error = %e, "ZooKeeper refused the watch of a group; its electors poll");
    }
}

/// Arms the watch, hints, and arms it again after every event: `Ok(())`
/// once the feed is dropped, `Err` when the watch cannot be armed.
async fn watch(
    store: &ZkStore,
    path: &str,
    tx: &mpsc::Sender<()>,
    attempt: HintAttempt,
) -> Result<(), ZkStoreError> {
    loop {
        let path = path.to_owned();
        let watcher = store
            .request("watch", |c| async move {
                c.check_and_watch_stat(&path)
                    .await
                    .map(|(_, watcher)| watcher)
            })
            .await
            .map_err(|e| store.zk_error("watch", e))?;
        attempt.connected();
        if !send_hint(tx) {
            return Ok(());
        }
        let event = watcher.changed().await;
        // A node event, or the end of the session (the only session event
        // a one-shot watch is told): either way, arm again and hint.
        if event.event_type == zk::EventType::Session {
            tracing::debug!(state = %event.session_state, "ZooKeeper session ended under a watch; arming it again");
        }
    }
}
