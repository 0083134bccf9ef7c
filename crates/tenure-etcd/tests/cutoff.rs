//! A leader cut off from etcd (by a proxy that goes silent) ends its term
//! before the other candidate, still connected, is elected.

mod common;

use std::time::{Duration, Instant};

use tenure::testkit;
use tenure_etcd::EtcdStore;

use common::{EtcdServer, Proxy};

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_leader_stops_before_the_other_is_elected() {
    let server = EtcdServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let direct = EtcdStore::connect(&server.url()).await.unwrap();
    let via_proxy = EtcdStore::connect(&format!("etcd://{}?timeout=1s", proxy.addr))
        .await
        .unwrap();
    let group = testkit::unique_group("cutoff");
    let term = Duration::from_secs(2);
    let a = common::elector(via_proxy, &group, "a", term);
    let a_term = tokio::time::timeout(Duration::from_secs(5), a.wait_for_leadership())
        .await
        .expect("a elected")
        .unwrap();
    let b = common::elector(direct, &group, "b", term);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(a.is_leader() && !b.is_leader());

    let t_cut = Instant::now();
    proxy.cut();
    let a_ended = {
        let t = a_term.clone();
        tokio::spawn(async move {
            t.ended().await;
            Instant::now()
        })
    };
    let b_term = tokio::time::timeout(Duration::from_secs(15), b.wait_for_leadership())
        .await
        .expect("b elected")
        .unwrap();
    let b_elected = Instant::now();
    let a_ended = a_ended.await.unwrap();
    eprintln!(
        "etcd cut-off: a's term ended {:?} after the cut, b elected {:?} after it",
        a_ended - t_cut,
        b_elected - t_cut
    );
    assert!(
        a_ended < b_elected,
        "a ended {:?} after b was elected",
        a_ended - b_elected
    );
    assert!(a_ended - t_cut <= term, "a held on {:?}", a_ended - t_cut);
    assert!(b_term.token() > a_term.token());
    b.shutdown().await;
    a.shutdown().await;
}
