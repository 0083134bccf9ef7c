//! The tenure conformance suite against the real nats-server.

mod common;

use async_nats::jetstream::kv;
use async_trait::async_trait;
use tenure::testkit::{self, Feeds, Harness};
use tenure::GroupName;
use tenure_nats::NatsStore;

struct NatsHarness {
    url: String,
    raw: kv::Store,
}

#[async_trait]
impl Harness for NatsHarness {
    type Store = NatsStore;

    async fn store(&self) -> NatsStore {
        NatsStore::connect(&self.url).await.expect("connect")
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        // A plain put gives the key a new revision, as any write does.
        let key = tenure_nats::NatsStore::key_of(group);
        self.raw
            .put(key, bytes.to_vec().into())
            .await
            .expect("plant");
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        let key = tenure_nats::NatsStore::key_of(group);
        let got = self.raw.get(key).await.expect("read raw");
        got.map(|b| b.to_vec())
    }

    /// A watch per group (observers) and the bucket-wide watch (engines).
    fn promised_feeds(&self) -> Feeds {
        Feeds::ALL
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
    let raw = common::raw_bucket(server, bucket).await;
    drop(first);
    testkit::run_conformance(&NatsHarness { url, raw }).await;
}
