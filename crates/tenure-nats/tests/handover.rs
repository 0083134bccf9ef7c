//! A graceful stop hands the lease over within one round trip, through the
//! bucket's watch, not after a poll.

mod common;

use tenure_nats::NatsStore;
use tenure_testkit::scenarios;

#[tokio::test(flavor = "multi_thread")]
async fn a_release_is_taken_over_at_once_not_after_a_poll() {
    let Some(url) = common::shared_url("handover") else {
        return;
    };
    scenarios::reported_graceful_handover("nats", &url, NatsStore::connect).await;
}
