//! A thousand groups on clones of one etcd store handle are
//! elected by one engine, and a second handle (another process, in
//! effect) follows every renewal through the one prefix watch, whose
//! events carry the records, reading nothing. Real time, generous bounds.

use tenure_etcd::EtcdStore;
use tenure_testkit::{self as testkit, scenarios};

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_groups_are_led_by_one_engine_and_followed_without_reads() {
    let Some(url) = testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    // About three batched round trips per renew interval (the window is
    // one term, three intervals), four at most.
    scenarios::reported_thousand_groups("etcd", &url, EtcdStore::connect, Some(4 * 3)).await;
}
