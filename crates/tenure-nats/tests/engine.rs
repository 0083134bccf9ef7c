//! A thousand groups on clones of one NATS store handle are elected by one
//! engine, and a second handle (another process, in effect) follows every
//! renewal through the one bucket-wide watch, whose messages carry the
//! records, reading nothing. Real time, generous bounds.

mod common;

use tenure_nats::NatsStore;
use tenure_testkit::scenarios;

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_groups_are_led_by_one_engine_and_followed_without_reads() {
    let Some(url) = common::shared_url("engine") else {
        return;
    };
    // About three batched round trips per renew interval (the window is
    // one term, three intervals), four at most.
    scenarios::reported_thousand_groups("nats", &url, NatsStore::connect, Some(4 * 3)).await;
}
