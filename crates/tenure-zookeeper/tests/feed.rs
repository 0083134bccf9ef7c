//! The store-wide change feed (`LeaseView::watch`): one persistent
//! recursive watch on the prefix node whose reports carry the records;
//! it shrugs off nodes under the prefix that tenure did not write, comes
//! back after the connection breaks (with a resync: ZooKeeper does not
//! replay what a persistent watch missed), and ends with its reader.

mod common;

use std::time::Duration;

use common::ZkServer;
use tenure::testkit::{self, held_by, TcpProxy};
use tenure::{CasOutcome, Change, GroupName, LeaseStore, LeaseView, StoreFeed, Version};
use tenure_zookeeper::ZkStore;
use zookeeper_client as zk;

const WITHIN: Duration = Duration::from_secs(10);

async fn next(feed: &mut StoreFeed, what: &str) -> Change {
    tokio::time::timeout(WITHIN, feed.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: no change within {WITHIN:?}"))
        .unwrap_or_else(|| panic!("{what}: the feed ended"))
}

async fn quiet(feed: &mut StoreFeed, what: &str) {
    if let Ok(change) = tokio::time::timeout(Duration::from_millis(500), feed.next()).await {
        panic!("{what}: unexpected {change:?}");
    }
}

async fn write(store: &ZkStore, g: &GroupName, expected: Option<Version>, id: &str) -> Version {
    match store
        .compare_and_swap(g, expected, &held_by(id, 1))
        .await
        .expect("write")
    {
        CasOutcome::Applied(v) => v,
        CasOutcome::Conflict => panic!("conflict writing {g}"),
    }
}

fn written(change: Change, group: &GroupName, version: Version, id: &str) {
    match change {
        Change::Written { group: g, current }
            if &g == group
                && current.version == version
                && current.record.holder_id() == Some(id) => {}
        other => panic!("expected {group} at {version} held by {id}, got {other:?}"),
    }
}

/// Nodes under the prefix written by something else: a child whose name
/// tenure did not give and a grandchild are skipped; undecodable data and
/// a deletion are hints; the feed goes on.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_nodes_under_the_prefix_do_not_stop_the_feed() {
    let Some(server) = testkit::server_url("TENURE_TEST_ZOOKEEPER") else {
        return;
    };
    let prefix = common::unique_prefix("feed-foreign");
    let store = ZkStore::connect(&format!("{server}{prefix}"))
        .await
        .unwrap();
    let raw = zk::Client::connect(&common::hosts(&server)).await.unwrap();
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    raw.mkdir(&prefix, &open).await.unwrap();
    let mut feed = store.watch().await.unwrap().expect("ZooKeeper has a feed");

    for (name, data) in [
        ("%61", b"not canonical".as_slice()),
        ("%zz", b"no escape"),
        ("bad", b"\x00not a record"),
        ("json", br#"{"v":1,"token":"many"}"#),
    ] {
        raw.create(&format!("{prefix}/{name}"), data, &open)
            .await
            .unwrap();
    }
    raw.create(&format!("{prefix}/bad/child"), b"x", &open)
        .await
        .unwrap();
    raw.set_data(&prefix, b"the prefix node itself", None)
        .await
        .unwrap();
    let bad = GroupName::new("bad").unwrap();
    let json = GroupName::new("json").unwrap();
    for (want, what) in [(&bad, "binary garbage"), (&json, "JSON that is no record")] {
        match next(&mut feed, what).await {
            Change::Hint { group } if &group == want => {}
            other => panic!("{what}: expected a hint for {want}, got {other:?}"),
        }
    }
    let ok = GroupName::new("ok").unwrap();
    let v = write(&store, &ok, None, "a").await;
    written(next(&mut feed, "a write").await, &ok, v, "a");
    raw.delete(&format!("{prefix}/ok"), None).await.unwrap();
    match next(&mut feed, "a deletion").await {
        Change::Hint { group } if group == ok => {}
        other => panic!("a deletion: expected a hint for ok, got {other:?}"),
    }
    let v2 = write(&store, &ok, None, "b").await;
    assert!(v2 > v, "a node created again gets a higher version");
    written(
        next(&mut feed, "a write after all that").await,
        &ok,
        v2,
        "b",
    );
    quiet(&mut feed, "after the writes").await;
}

/// A connection that breaks and comes back within the session: the watch
/// is armed again (zookeeper-client does not restore persistent watches on
/// a new connection), the feed asks for a resync for what it missed, and
/// writes are reported again.
#[tokio::test(flavor = "multi_thread")]
async fn a_broken_connection_resyncs_and_the_feed_goes_on() {
    let server = ZkServer::start();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let watcher = ZkStore::connect(&format!(
        "zk://{}/feed?timeout=1s&session_timeout=30s",
        proxy.addr()
    ))
    .await
    .unwrap();
    let writer = ZkStore::connect(&format!("{}/feed", server.url()))
        .await
        .unwrap();
    let mut feed = watcher.watch().await.unwrap().unwrap();
    let g = GroupName::new("g").unwrap();
    let v1 = write(&writer, &g, None, "a").await;
    written(next(&mut feed, "before the cut").await, &g, v1, "a");

    proxy.cut();
    let v2 = write(&writer, &g, Some(v1), "b").await;
    // Long enough for the client to give the connection up (1 s).
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.heal();
    match next(&mut feed, "after the heal").await {
        Change::Resync => {}
        // The missed write may come first if the old watch caught it.
        c => {
            written(c, &g, v2, "b");
            assert_eq!(next(&mut feed, "after the heal").await, Change::Resync);
        }
    }
    let v3 = write(&writer, &g, Some(v2), "c").await;
    written(next(&mut feed, "after the resync").await, &g, v3, "c");
    let v4 = write(&writer, &g, Some(v3), "d").await;
    written(next(&mut feed, "and again").await, &g, v4, "d");
    quiet(&mut feed, "after the writes").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_feed_ends_its_task() {
    let Some(server) = testkit::server_url("TENURE_TEST_ZOOKEEPER") else {
        return;
    };
    let store = ZkStore::connect(&format!("{server}{}", common::unique_prefix("feed-drop")))
        .await
        .unwrap();
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let feed = store.watch().await.unwrap().unwrap();
    let hints = store
        .changes(&GroupName::new("g").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        metrics.num_alive_tasks() > before,
        "tasks forward the watches"
    );
    drop(feed);
    drop(hints);
    let deadline = std::time::Instant::now() + WITHIN;
    while metrics.num_alive_tasks() > before {
        assert!(
            std::time::Instant::now() < deadline,
            "a watch task outlived its feed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
