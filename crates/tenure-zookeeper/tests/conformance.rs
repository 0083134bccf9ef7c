//! The tenure conformance suite against the real ZooKeeper server.

mod common;

use async_trait::async_trait;
use tenure::GroupName;
use tenure_testkit::{self as testkit, Feeds, RawAccess, UrlHarness};
use tenure_zookeeper::ZkStore;

#[async_trait]
impl RawAccess for common::Raw {
    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        // An unconditional setData (or a create) moves the node's mzxid,
        // as any write does.
        self.plant(group, bytes).await;
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        self.get(group).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(server) = testkit::server_url("TENURE_TEST_ZOOKEEPER") else {
        return;
    };
    let prefix = format!("/tenure-conformance-{:x}", testkit::unique_suffix());
    let raw = common::Raw::connect(&server, &prefix).await;
    // A one-shot data watch per group (observers) and the persistent
    // recursive watch on the prefix node (engines).
    let url = format!("{server}{prefix}");
    let harness = UrlHarness::new(url, ZkStore::connect, raw).promising(Feeds::ALL);
    testkit::run_conformance(&harness).await;
}
