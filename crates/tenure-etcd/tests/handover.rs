//! A graceful stop hands the lease over within one round trip, through the
//! store's notifications, not after a poll.

use tenure_etcd::EtcdStore;
use tenure_testkit::{self as testkit, scenarios};

#[tokio::test(flavor = "multi_thread")]
async fn a_release_is_taken_over_at_once_not_after_a_poll() {
    let Some(url) = testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    scenarios::reported_graceful_handover("etcd", &url, EtcdStore::connect).await;
}
