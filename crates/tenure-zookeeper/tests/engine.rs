//! A thousand groups on clones of one ZooKeeper store handle are elected
//! by one engine, and a second handle (another process, in effect)
//! follows every renewal through the one persistent recursive watch,
//! whose reports carry the records, reading nothing. Real time, generous
//! bounds.

mod common;

use tenure_testkit::{self as testkit, scenarios};
use tenure_zookeeper::ZkStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_groups_are_led_by_one_engine_and_followed_without_reads() {
    let Some(server) = testkit::server_url("TENURE_TEST_ZOOKEEPER") else {
        return;
    };
    let url = format!("{server}{}", common::unique_prefix("engine"));
    scenarios::reported_thousand_groups("zookeeper", &url, ZkStore::connect, None).await;
}
