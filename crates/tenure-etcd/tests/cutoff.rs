//! A leader cut off from etcd (by a proxy that goes silent) ends its
//! term before the other candidate, still connected, is elected.

mod common;

use tenure_etcd::EtcdStore;
use tenure_testkit::{scenarios, TcpProxy};

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_leader_stops_before_the_other_is_elected() {
    let server = common::Etcd::start();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let proxied = format!("etcd://{}?timeout=1s", proxy.addr());
    scenarios::reported_cut_off("etcd", &server.url(), &proxied, &proxy, EtcdStore::connect).await;
}
