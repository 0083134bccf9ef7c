//! A leader cut off from NATS (by a proxy that goes silent) ends its term
//! before the other candidate, still connected, is elected.

mod common;

use tenure_nats::NatsStore;
use tenure_testkit::{scenarios, TcpProxy};

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_leader_stops_before_the_other_is_elected() {
    let server = common::Nats::start();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let proxied = format!("nats://{}/cutoff?timeout=1s", proxy.addr());
    scenarios::reported_cut_off(
        "nats",
        &server.url("cutoff"),
        &proxied,
        &proxy,
        NatsStore::connect,
    )
    .await;
}
