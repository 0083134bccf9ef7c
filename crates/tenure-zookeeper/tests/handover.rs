//! A graceful stop hands the lease over within one round trip, through the
//! store's notifications, not after a poll.

mod common;

use tenure_testkit::{self as testkit, scenarios};
use tenure_zookeeper::ZkStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_release_is_taken_over_at_once_not_after_a_poll() {
    let Some(server) = testkit::server_url("TENURE_TEST_ZOOKEEPER") else {
        return;
    };
    let url = format!("{server}{}", common::unique_prefix("handover"));
    scenarios::reported_graceful_handover("zookeeper", &url, ZkStore::connect).await;
}
