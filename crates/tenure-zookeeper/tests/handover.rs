//! A graceful stop hands the lease over within one round trip, through the
//! store's notifications, not after a poll.

mod common;

use std::time::Duration;

use tenure::testkit::{self, scenarios};
use tenure_zookeeper::ZkStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_release_is_taken_over_at_once_not_after_a_poll() {
    let Some(server) = testkit::server_url("TENURE_TEST_ZOOKEEPER") else {
        return;
    };
    let url = format!("{server}{}", common::unique_prefix("handover"));
    let a = ZkStore::connect(&url).await.unwrap();
    let b = ZkStore::connect(&url).await.unwrap();
    let took = scenarios::graceful_handover_via_feed(a, b, Duration::from_secs(2)).await;
    eprintln!("zookeeper hand-over: {took:?}");
}
