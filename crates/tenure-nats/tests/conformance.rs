//! The tenure conformance suite against the real nats-server.

mod common;

use async_nats::jetstream::kv;
use async_trait::async_trait;
use tenure::GroupName;
use tenure_nats::NatsStore;
use tenure_testkit::{self as testkit, Feeds, RawAccess, UrlHarness};

/// The store's bucket, read and written by a plain JetStream client.
struct Bucket(kv::Store);

#[async_trait]
impl RawAccess for Bucket {
    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        // A plain put gives the key a new revision, as any write does.
        let key = NatsStore::key_of(group);
        self.0.put(key, bytes.to_vec().into()).await.expect("plant");
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        let got = self.0.get(NatsStore::key_of(group)).await;
        got.expect("read raw").map(|b| b.to_vec())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(url) = common::shared_url("conformance") else {
        return;
    };
    // The store creates the bucket; the raw handle opens it afterwards.
    let first = NatsStore::connect(&url).await.expect("connect");
    let (server, bucket) = common::split_bucket(&url);
    let raw = Bucket(common::raw_bucket(server, bucket).await);
    drop(first);
    // A watch per group (observers) and the bucket-wide watch (engines).
    let harness = UrlHarness::new(url, NatsStore::connect, raw).promising(Feeds::ALL);
    testkit::run_conformance(&harness).await;
}
