//! A leader cut off from Redis (by a proxy that goes silent) ends its
//! term before the other candidate, still connected, is elected.

mod common;

use tenure_redis::RedisStore;
use tenure_testkit::{scenarios, TcpProxy};

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_leader_stops_before_the_other_is_elected() {
    let server = common::Redis::start(&[]);
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let direct = RedisStore::connect(&server.url()).await.unwrap();
    assert!(direct.adopt_empty().await.unwrap());
    let via_proxy = RedisStore::connect(&format!("redis://{}?timeout=1s", proxy.addr()))
        .await
        .unwrap();
    let figures = scenarios::cut_off_leader_stops_first(via_proxy, direct, &proxy).await;
    eprintln!("Redis cut-off: {figures:?}");
}
