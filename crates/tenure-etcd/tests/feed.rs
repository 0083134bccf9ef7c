//! The store-wide change feed (`LeaseView::watch`): one watch on the key
//! prefix whose events carry the records, which resumes after a broken
//! stream without missing a write, resyncs when etcd no longer has the
//! history, and shrugs off keys under the prefix that tenure did not write.

mod common;

use std::time::Duration;

use common::EtcdServer;
use tenure::testkit::{self, held_by, TcpProxy};
use tenure::{CasOutcome, Change, GroupName, LeaseStore, LeaseView, StoreFeed, Version};
use tenure_etcd::EtcdStore;

const WITHIN: Duration = Duration::from_secs(10);

fn unique_prefix(label: &str) -> String {
    format!("tenure-feed-{label}-{:x}/", testkit::unique_suffix())
}

async fn shared(prefix: &str) -> Option<(EtcdStore, etcd_client::Client)> {
    let server = testkit::server_url("TENURE_TEST_ETCD")?;
    let store = EtcdStore::connect(&format!("{server}?prefix={prefix}"))
        .await
        .expect("connect");
    let raw = etcd_client::Client::connect([server.trim_start_matches("http://")], None)
        .await
        .expect("raw client");
    Some((store, raw))
}

async fn next(feed: &mut StoreFeed, what: &str) -> Change {
    tokio::time::timeout(WITHIN, feed.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: no change within {WITHIN:?}"))
        .unwrap_or_else(|| panic!("{what}: the feed ended"))
}

/// Nothing more arrives for a while.
async fn quiet(feed: &mut StoreFeed, what: &str) {
    if let Ok(change) = tokio::time::timeout(Duration::from_millis(500), feed.next()).await {
        panic!("{what}: unexpected {change:?}");
    }
}

async fn write(store: &EtcdStore, g: &GroupName, expected: Option<Version>, id: &str) -> Version {
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

#[tokio::test(flavor = "multi_thread")]
async fn every_write_arrives_with_its_record_and_version() {
    let prefix = unique_prefix("records");
    let Some((watcher, _raw)) = shared(&prefix).await else {
        return;
    };
    let writer = shared(&prefix).await.unwrap().0;
    let mut feed = watcher.watch().await.unwrap().expect("etcd has a feed");
    let (a, b) = (GroupName::new("a").unwrap(), GroupName::new("b").unwrap());
    let v1 = write(&writer, &a, None, "x").await;
    written(next(&mut feed, "first write").await, &a, v1, "x");
    let v2 = write(&writer, &a, Some(v1), "y").await;
    written(next(&mut feed, "second write").await, &a, v2, "y");
    let v3 = write(&watcher, &b, None, "z").await;
    written(
        next(&mut feed, "the watcher's own write").await,
        &b,
        v3,
        "z",
    );
    // What the feed said is what a read says.
    assert_eq!(watcher.read(&a).await.unwrap().unwrap().version, v2);
    quiet(&mut feed, "after three writes").await;
}

/// Keys under the prefix written by something else: a key that is no
/// group name is skipped, an undecodable value and a deletion are hints,
/// and the feed goes on.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_keys_and_values_under_the_prefix_do_not_stop_the_feed() {
    let prefix = unique_prefix("foreign");
    let Some((store, raw)) = shared(&prefix).await else {
        return;
    };
    let mut feed = store.watch().await.unwrap().expect("etcd has a feed");
    let mut kv = raw.kv_client();
    let mut key = prefix.as_bytes().to_vec();
    key.extend_from_slice(b"\xff\xfe not utf-8");
    kv.put(key, "x", None).await.unwrap();
    kv.put(prefix.as_str(), "the prefix itself", None)
        .await
        .unwrap();
    kv.put(format!("{prefix}bad"), b"\x00not a record".to_vec(), None)
        .await
        .unwrap();
    kv.put(format!("{prefix}json"), r#"{"v":1,"token":"many"}"#, None)
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
    kv.delete(format!("{prefix}ok"), None).await.unwrap();
    match next(&mut feed, "a deletion").await {
        Change::Hint { group } if group == ok => {}
        other => panic!("a deletion: expected a hint for ok, got {other:?}"),
    }
    let v = write(&store, &ok, None, "b").await;
    written(next(&mut feed, "a write after all that").await, &ok, v, "b");
}

/// A watch cut off while writes happen resumes from where it stopped:
/// every write arrives, with its record, and no resync.
#[tokio::test(flavor = "multi_thread")]
async fn a_broken_watch_resumes_without_missing_a_write() {
    let server = EtcdServer::start();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let watcher = EtcdStore::connect(&format!("etcd://{}?timeout=1s", proxy.addr()))
        .await
        .unwrap();
    let writer = EtcdStore::connect(&server.url()).await.unwrap();
    let mut feed = watcher.watch().await.unwrap().unwrap();
    let g = GroupName::new("g").unwrap();
    let v1 = write(&writer, &g, None, "a").await;
    written(next(&mut feed, "before the cut").await, &g, v1, "a");
    proxy.cut();
    let v2 = write(&writer, &g, Some(v1), "b").await;
    let v3 = write(&writer, &g, Some(v2), "c").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.heal();
    written(next(&mut feed, "missed while cut").await, &g, v2, "b");
    written(next(&mut feed, "missed while cut").await, &g, v3, "c");
    let v4 = write(&writer, &g, Some(v3), "d").await;
    written(next(&mut feed, "after the heal").await, &g, v4, "d");
}

/// If etcd compacted the history the watch would resume from, the feed
/// asks for a resync, then goes on from now.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_that_cannot_resume_after_compaction_resyncs() {
    let server = EtcdServer::start();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let watcher = EtcdStore::connect(&format!("etcd://{}?timeout=1s", proxy.addr()))
        .await
        .unwrap();
    let writer = EtcdStore::connect(&server.url()).await.unwrap();
    let mut feed = watcher.watch().await.unwrap().unwrap();
    let g = GroupName::new("g").unwrap();
    let v1 = write(&writer, &g, None, "a").await;
    written(next(&mut feed, "before the cut").await, &g, v1, "a");
    proxy.cut();
    let v2 = write(&writer, &g, Some(v1), "b").await;
    let v3 = write(&writer, &g, Some(v2), "c").await;
    let (ok, out) = server.ctl(&["compact", &v3.0.to_string()]);
    assert!(ok, "etcdctl compact: {out}");
    proxy.heal();
    match next(&mut feed, "after compaction").await {
        Change::Resync => {}
        other => panic!("expected a resync, got {other:?}"),
    }
    let v4 = write(&writer, &g, Some(v3), "d").await;
    written(next(&mut feed, "after the resync").await, &g, v4, "d");
}

/// A cluster rebuilt from nothing numbers its revisions from 1 again: a
/// watch resumed at the old revision would wait for writes that already
/// happened, so the feed resyncs instead.
#[tokio::test(flavor = "multi_thread")]
async fn revisions_that_went_backwards_resync() {
    let mut server = EtcdServer::start();
    let url = format!("{}?timeout=1s", server.url());
    let watcher = EtcdStore::connect(&url).await.unwrap();
    let mut feed = watcher.watch().await.unwrap().unwrap();
    let g = GroupName::new("g").unwrap();
    let mut v = None;
    for i in 0..20 {
        let id = format!("w{i}");
        let got = write(&watcher, &g, v, &id).await;
        written(next(&mut feed, "a write").await, &g, got, &id);
        v = Some(got);
    }
    server.wipe_and_restart();
    match next(&mut feed, "after the wipe").await {
        Change::Resync => {}
        other => panic!("expected a resync, got {other:?}"),
    }
    let fresh = write(&watcher, &g, None, "new").await;
    assert!(fresh < v.unwrap(), "the wiped server counts from 1 again");
    written(
        next(&mut feed, "a write on the new cluster").await,
        &g,
        fresh,
        "new",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_feed_ends_its_watch_task() {
    let prefix = unique_prefix("drop");
    let Some((store, _raw)) = shared(&prefix).await else {
        return;
    };
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let feed = store.watch().await.unwrap().unwrap();
    assert!(
        metrics.num_alive_tasks() > before,
        "a task forwards the watch"
    );
    drop(feed);
    let deadline = std::time::Instant::now() + WITHIN;
    while metrics.num_alive_tasks() > before {
        assert!(
            std::time::Instant::now() < deadline,
            "the watch task outlived its feed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
