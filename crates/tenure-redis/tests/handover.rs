//! A graceful stop hands the lease over within one round trip, through the
//! pub/sub change feed, not after a poll.

mod common;

use std::time::Duration;

use tenure_redis::RedisStore;
use tenure_testkit::{self as testkit, scenarios};

#[tokio::test(flavor = "multi_thread")]
async fn a_release_is_taken_over_at_once_not_after_a_poll() {
    let Some(server) = testkit::server_url("TENURE_TEST_REDIS") else {
        return;
    };
    // A prefix of its own, declared new so the first election need not
    // wait out the data-loss quarantine.
    let url = format!(
        "{server}?prefix=tenure-handover-{:x}:",
        tenure_testkit::unique_suffix()
    );
    let a = RedisStore::connect(&url).await.unwrap();
    assert!(a.adopt_empty().await.unwrap());
    let b = RedisStore::connect(&url).await.unwrap();
    let took = scenarios::graceful_handover_via_feed(a, b, Duration::from_secs(2)).await;
    eprintln!("Redis hand-over: {took:?}");
}
