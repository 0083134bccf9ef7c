//! The tenure conformance suite against the real ZooKeeper server.

mod common;

use async_trait::async_trait;
use tenure::testkit::{self, Feeds, Harness};
use tenure::GroupName;
use tenure_zookeeper::ZkStore;

struct ZkHarness {
    url: String,
    raw: common::Raw,
}

#[async_trait]
impl Harness for ZkHarness {
    type Store = ZkStore;

    async fn store(&self) -> ZkStore {
        ZkStore::connect(&self.url).await.expect("connect")
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        // An unconditional setData (or a create) moves the node's mzxid,
        // as any write does.
        self.raw.plant(group, bytes).await;
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        self.raw.get(group).await
    }

    /// A one-shot data watch per group (observers) and the persistent
    /// recursive watch on the prefix node (engines).
    fn promised_feeds(&self) -> Feeds {
        Feeds::ALL
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(server) = testkit::server_url("TENURE_TEST_ZOOKEEPER") else {
        return;
    };
    let prefix = format!("/tenure-conformance-{:x}", testkit::unique_suffix());
    let url = format!("{server}{prefix}");
    let raw = common::Raw::connect(&server, &prefix).await;
    testkit::run_conformance(&ZkHarness { url, raw }).await;
}
