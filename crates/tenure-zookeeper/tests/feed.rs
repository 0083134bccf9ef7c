//! The store-wide change feed (`LeaseView::watch`): one persistent
//! recursive watch on the prefix node whose reports carry the records;
//! it shrugs off nodes under the prefix that tenure did not write, comes
//! back after the connection breaks (with a resync: ZooKeeper does not
//! replay what a persistent watch missed), and ends with its reader.

mod common;

use std::time::Duration;

use tenure::store::Change;
use tenure::{GroupName, LeaseView};
use tenure_testkit::{
    self as testkit, expect_hint, expect_quiet, expect_written, next_change, write_seen_on_feed,
    TcpProxy,
};
use tenure_zookeeper::ZkStore;
use zookeeper_client as zk;

const WITHIN: Duration = Duration::from_secs(10);

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

    let skipped: [(&str, &[u8]); 2] = [("%61", b"not canonical"), ("%zz", b"no escape")];
    for (name, data) in skipped.into_iter().chain(testkit::FOREIGN_VALUES) {
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
    testkit::expect_foreign_values_hinted(&mut feed).await;
    let ok = GroupName::new("ok").unwrap();
    let v = write_seen_on_feed(&store, &mut feed, &ok, None, "a").await;
    raw.delete(&format!("{prefix}/ok"), None).await.unwrap();
    let deletion = next_change(&mut feed, WITHIN, "a deletion").await;
    expect_hint(deletion, &ok, "a deletion");
    let v2 = common::write_held_by(&store, &ok, None, "b").await;
    assert!(v2 > v, "a node created again gets a higher version");
    expect_written(
        next_change(&mut feed, WITHIN, "a write after all that").await,
        &ok,
        v2,
        "b",
    );
    expect_quiet(&mut feed, "after the writes").await;
}

/// A connection that breaks and comes back within the session: the watch
/// is armed again (zookeeper-client does not restore persistent watches on
/// a new connection), the feed asks for a resync for what it missed, and
/// writes are reported again.
#[tokio::test(flavor = "multi_thread")]
async fn a_broken_connection_resyncs_and_the_feed_goes_on() {
    let server = common::Zk::start();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let (watcher, writer) = common::proxied_and_direct(&proxy, &server.url(), "/feed", "30s").await;
    let mut feed = watcher.watch().await.unwrap().unwrap();
    let g = GroupName::new("g").unwrap();
    let v1 = write_seen_on_feed(&writer, &mut feed, &g, None, "a").await;

    proxy.cut();
    let v2 = common::write_held_by(&writer, &g, Some(v1), "b").await;
    // Long enough for the client to give the connection up (1 s).
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.heal();
    match next_change(&mut feed, WITHIN, "after the heal").await {
        Change::Resync => {}
        // The missed write may come first if the old watch caught it.
        c => {
            expect_written(c, &g, v2, "b");
            assert_eq!(
                next_change(&mut feed, WITHIN, "after the heal").await,
                Change::Resync
            );
        }
    }
    let v3 = write_seen_on_feed(&writer, &mut feed, &g, Some(v2), "c").await;
    write_seen_on_feed(&writer, &mut feed, &g, Some(v3), "d").await;
    expect_quiet(&mut feed, "after the writes").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_feed_ends_its_task() {
    let Some(server) = testkit::server_url("TENURE_TEST_ZOOKEEPER") else {
        return;
    };
    let store = ZkStore::connect(&format!("{server}{}", common::unique_prefix("feed-drop")))
        .await
        .unwrap();
    let g = GroupName::new("g").unwrap();
    let both_feeds = async {
        let feed = store.watch().await.unwrap().unwrap();
        let hints = store.changes(&g).await.unwrap().unwrap();
        (feed, hints)
    };
    testkit::tasks_end_with_feed(both_feeds, WITHIN).await;
}
