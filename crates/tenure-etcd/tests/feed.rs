//! The store-wide change feed (`LeaseView::watch`): one watch on the key
//! prefix whose events carry the records, which resumes after a broken
//! stream without missing a write, resyncs when etcd no longer has the
//! history, and shrugs off keys under the prefix that tenure did not write.

mod common;

use std::time::Duration;

use common::EtcdServer;
use tenure::store::{Change, StoreFeed};
use tenure::{GroupName, LeaseView, Version};
use tenure_etcd::EtcdStore;
use tenure_testkit::{
    self as testkit, expect_hint, expect_quiet, expect_written, held_by, next_change,
    write_seen_on_feed, TcpProxy,
};

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

/// Writes `group` held by `id`; the write must apply.
async fn write(store: &EtcdStore, g: &GroupName, expected: Option<Version>, id: &str) -> Version {
    testkit::applied(store, g, expected, &held_by(id, 1)).await
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
    let v1 = write_seen_on_feed(&writer, &mut feed, &a, None, "x").await;
    let v2 = write_seen_on_feed(&writer, &mut feed, &a, Some(v1), "y").await;
    write_seen_on_feed(&watcher, &mut feed, &b, None, "z").await;
    // What the feed said is what a read says.
    assert_eq!(watcher.read(&a).await.unwrap().unwrap().version, v2);
    expect_quiet(&mut feed, "after three writes").await;
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
    for (name, value) in testkit::FOREIGN_VALUES {
        kv.put(format!("{prefix}{name}"), value, None)
            .await
            .unwrap();
    }
    testkit::expect_foreign_values_hinted(&mut feed).await;
    let ok = GroupName::new("ok").unwrap();
    write_seen_on_feed(&store, &mut feed, &ok, None, "a").await;
    kv.delete(format!("{prefix}ok"), None).await.unwrap();
    let deletion = next_change(&mut feed, WITHIN, "a deletion").await;
    expect_hint(deletion, &ok, "a deletion");
    write_seen_on_feed(&store, &mut feed, &ok, None, "b").await;
}

/// A feed on a private server, watched through a proxy, after a first
/// write it carried and two more (`versions[1]`, `versions[2]`) made while
/// the proxy is cut.
struct CutWatch {
    server: EtcdServer,
    proxy: TcpProxy,
    /// Kept open: the feed is its watch.
    _watcher: EtcdStore,
    writer: EtcdStore,
    feed: StoreFeed,
    g: GroupName,
    versions: [Version; 3],
}

async fn two_writes_while_cut() -> CutWatch {
    let server = common::Etcd::start();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let watcher = EtcdStore::connect(&format!("etcd://{}?timeout=1s", proxy.addr()))
        .await
        .unwrap();
    let writer = EtcdStore::connect(&server.url()).await.unwrap();
    let mut feed = watcher.watch().await.unwrap().unwrap();
    let g = GroupName::new("g").unwrap();
    let v1 = write_seen_on_feed(&writer, &mut feed, &g, None, "a").await;
    proxy.cut();
    let v2 = write(&writer, &g, Some(v1), "b").await;
    let v3 = write(&writer, &g, Some(v2), "c").await;
    CutWatch {
        server,
        proxy,
        _watcher: watcher,
        writer,
        feed,
        g,
        versions: [v1, v2, v3],
    }
}

/// A watch cut off while writes happen resumes from where it stopped:
/// every write arrives, with its record, and no resync.
#[tokio::test(flavor = "multi_thread")]
async fn a_broken_watch_resumes_without_missing_a_write() {
    let mut cut = Box::pin(two_writes_while_cut()).await;
    let [_, v2, v3] = cut.versions;
    tokio::time::sleep(Duration::from_millis(300)).await;
    cut.proxy.heal();
    for (v, id) in [(v2, "b"), (v3, "c")] {
        let change = next_change(&mut cut.feed, WITHIN, "missed while cut").await;
        expect_written(change, &cut.g, v, id);
    }
    let v4 = write(&cut.writer, &cut.g, Some(v3), "d").await;
    let change = next_change(&mut cut.feed, WITHIN, "after the heal").await;
    expect_written(change, &cut.g, v4, "d");
}

/// If etcd compacted the history the watch would resume from, the feed
/// asks for a resync, then goes on from now.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_that_cannot_resume_after_compaction_resyncs() {
    let mut cut = Box::pin(two_writes_while_cut()).await;
    let [_, _, v3] = cut.versions;
    let (ok, out) = cut.server.ctl(&["compact", &v3.0.to_string()]);
    assert!(ok, "etcdctl compact: {out}");
    cut.proxy.heal();
    let change = next_change(&mut cut.feed, WITHIN, "after compaction").await;
    assert_eq!(change, Change::Resync, "expected a resync");
    let v4 = write(&cut.writer, &cut.g, Some(v3), "d").await;
    let change = next_change(&mut cut.feed, WITHIN, "after the resync").await;
    expect_written(change, &cut.g, v4, "d");
}

/// A cluster rebuilt from nothing numbers its revisions from 1 again: a
/// watch resumed at the old revision would wait for writes that already
/// happened, so the feed resyncs instead.
#[tokio::test(flavor = "multi_thread")]
async fn revisions_that_went_backwards_resync() {
    let mut server = common::Etcd::start();
    let url = format!("{}?timeout=1s", server.url());
    let watcher = EtcdStore::connect(&url).await.unwrap();
    let mut feed = watcher.watch().await.unwrap().unwrap();
    let g = GroupName::new("g").unwrap();
    let mut v = None;
    for i in 0..20 {
        let id = format!("w{i}");
        let got = write_seen_on_feed(&watcher, &mut feed, &g, v, &id).await;
        v = Some(got);
    }
    common::wipe_and_restart(&mut server);
    let change = next_change(&mut feed, WITHIN, "after the wipe").await;
    assert_eq!(change, Change::Resync, "expected a resync");
    let fresh = write(&watcher, &g, None, "new").await;
    assert!(fresh < v.unwrap(), "the wiped server counts from 1 again");
    expect_written(
        next_change(&mut feed, WITHIN, "a write on the new cluster").await,
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
    let feed = async { store.watch().await.unwrap().unwrap() };
    testkit::tasks_end_with_feed(feed, WITHIN).await;
}
