//! The store-wide feed across a compaction: a watch resumed from a
//! resourceVersion etcd compacted away is answered 410 Gone; the feed lists
//! again and asks every group to read (`Change::Resync`), then carries
//! writes again. On a private etcd (compacting the shared one would disturb
//! other tests) under a private test API server, behind a proxy that cuts
//! the watch's connection.

mod common;

use tenure::LeaseView;
use tenure_kubernetes::KubernetesStore;
use tenure_testkit::{self as testkit, TcpProxy, TempDir};

#[tokio::test(flavor = "multi_thread")]
async fn a_compacted_watch_resyncs_and_goes_on() {
    // The private servers need etcd installed, as the shared one does.
    if common::kubeconfig().is_none() {
        return;
    }
    let etcd = common::Etcd::start();
    let dir = TempDir::new("kube-compaction");
    let server = tenure_kube_testserver::start(tenure_kube_testserver::Config {
        etcd: format!("http://127.0.0.1:{}", etcd.port),
        listen: "127.0.0.1:0".parse().unwrap(),
        dir: dir.path().to_owned(),
        prefix: "/compaction/".into(),
    })
    .await
    .unwrap();
    let kc = server.kubeconfig.to_string_lossy().into_owned();
    let proxy = TcpProxy::start(server.addr).await.unwrap();
    let via = common::kubeconfig_via(&kc, proxy.addr(), dir.path());
    let label = common::run_label();
    let watcher = KubernetesStore::connect(&common::url(&via.to_string_lossy(), &label, None))
        .await
        .unwrap();
    let writer = KubernetesStore::connect(&common::url(&kc, &label, None))
        .await
        .unwrap();
    let mut feed = watcher.watch().await.unwrap().expect("a store-wide feed");
    let g = testkit::unique_group("compaction");
    let v = testkit::write_seen_on_feed(&writer, &mut feed, &g, None, "a").await;

    // Cut the watch's connection, write meanwhile, compact etcd past it.
    proxy.cut();
    let v2 = testkit::applied(&writer, &g, Some(v), &testkit::held_by("b", 2)).await;
    testkit::applied(&writer, &g, Some(v2), &testkit::held_by("c", 3)).await;
    let (_, status) = etcd.ctl(&["endpoint", "status", "-w", "json"]);
    let revision = status
        .split("\"revision\":")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse::<u64>().ok())
        .expect("etcd reports its revision");
    let (ok, out) = etcd.ctl(&["compact", &revision.to_string()]);
    assert!(ok, "etcdctl compact: {out}");
    proxy.heal();

    // 410 Gone on resuming: a resync, then writes again.
    testkit::resyncs_then_carries_writes(&mut feed, &writer, "after-compaction").await;
}
