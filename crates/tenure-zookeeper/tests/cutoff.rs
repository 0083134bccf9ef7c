//! A leader cut off from ZooKeeper (by a proxy that goes silent) ends its
//! term before the other candidate, still connected, is elected.

mod common;

use tenure_testkit::{scenarios, TcpProxy};
use tenure_zookeeper::ZkStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_leader_stops_before_the_other_is_elected() {
    let server = common::Zk::start();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let proxied = format!("zk://{}?timeout=1s", proxy.addr());
    scenarios::reported_cut_off(
        "zookeeper",
        &server.url(),
        &proxied,
        &proxy,
        ZkStore::connect,
    )
    .await;
}
