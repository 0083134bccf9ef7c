//! Issue 11: a thousand groups on clones of one etcd store handle are
//! elected by one engine, and a second handle (another process, in
//! effect) follows every renewal through the one prefix watch, whose
//! events carry the records, reading nothing. Real time, generous bounds.

use std::time::Duration;

use tenure::testkit::{self, scenarios};
use tenure_etcd::EtcdStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_groups_are_led_by_one_engine_and_followed_without_reads() {
    let Some(url) = testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    let figures = scenarios::many_groups_followed_without_reads(
        EtcdStore::connect(&url).await.unwrap(),
        EtcdStore::connect(&url).await.unwrap(),
        1000,
        Duration::from_secs(6),
    )
    .await;
    eprintln!("etcd, 1000 groups: {figures:?}");
    assert!(
        figures.leaders.write_batches <= 4 * 3,
        "about three batched round trips per renew interval: {figures:?}"
    );
}
