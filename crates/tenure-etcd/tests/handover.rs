//! A graceful stop hands the lease over within one round trip, through the
//! store's notifications, not after a poll.

use std::time::Duration;

use tenure::testkit::{self, scenarios};
use tenure_etcd::EtcdStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_release_is_taken_over_at_once_not_after_a_poll() {
    let Some(url) = testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    let a = EtcdStore::connect(&url).await.unwrap();
    let b = EtcdStore::connect(&url).await.unwrap();
    let took = scenarios::graceful_handover_via_feed(a, b, Duration::from_secs(2)).await;
    eprintln!("etcd hand-over: {took:?}");
}
