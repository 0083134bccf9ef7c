//! A thousand groups on clones of one NATS store handle are elected by one
//! engine, and a second handle (another process, in effect) follows every
//! renewal through the one bucket-wide watch, whose messages carry the
//! records, reading nothing. Real time, generous bounds.

mod common;

use std::time::Duration;

use tenure::testkit::scenarios;
use tenure_nats::NatsStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_groups_are_led_by_one_engine_and_followed_without_reads() {
    let Some(url) = common::shared_url("engine") else {
        return;
    };
    let figures = scenarios::many_groups_followed_without_reads(
        NatsStore::connect(&url).await.unwrap(),
        NatsStore::connect(&url).await.unwrap(),
        1000,
        Duration::from_secs(6),
    )
    .await;
    eprintln!("nats, 1000 groups: {figures:?}");
    assert!(
        figures.leaders.write_batches <= 4 * 3,
        "about three batched round trips per renew interval: {figures:?}"
    );
}
