//! A graceful stop hands the lease over within one round trip, through the
//! bucket's watch, not after a poll.

mod common;

use std::time::Duration;

use tenure::testkit::scenarios;
use tenure_nats::NatsStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_release_is_taken_over_at_once_not_after_a_poll() {
    let Some(url) = common::shared_url("handover") else {
        return;
    };
    let a = NatsStore::connect(&url).await.unwrap();
    let b = NatsStore::connect(&url).await.unwrap();
    let took = scenarios::graceful_handover_via_feed(a, b, Duration::from_secs(2)).await;
    eprintln!("nats hand-over: {took:?}");
}
