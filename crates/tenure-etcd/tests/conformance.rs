//! The tenure conformance suite against the real etcd server.

mod common;

use async_trait::async_trait;
use tenure::testkit::{self, Feeds, Harness};
use tenure::GroupName;
use tenure_etcd::EtcdStore;

struct EtcdHarness {
    url: String,
    raw: etcd_client::Client,
    prefix: String,
}

#[async_trait]
impl Harness for EtcdHarness {
    type Store = EtcdStore;

    async fn store(&self) -> EtcdStore {
        EtcdStore::connect(&self.url).await.expect("connect")
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        let key = format!("{}{}", self.prefix, group.as_str());
        // A plain put changes mod_revision, as any write does.
        self.raw
            .kv_client()
            .put(key, bytes, None)
            .await
            .expect("plant");
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        let key = format!("{}{}", self.prefix, group.as_str());
        let resp = self.raw.kv_client().get(key, None).await.expect("read raw");
        resp.kvs().first().map(|kv| kv.value().to_vec())
    }

    /// Every write notifies (issue 10, item 15: the feed case fails, not
    /// skips, if that breaks).
    /// A watch per group (observers) and the prefix watch (engines).
    fn promised_feeds(&self) -> Feeds {
        Feeds::ALL
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(server) = testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    let prefix = format!("tenure-conformance-{:x}/", tenure::testkit::unique_suffix());
    let url = format!("{server}?prefix={prefix}");
    let endpoint = server.trim_start_matches("http://").to_owned();
    let raw = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    testkit::run_conformance(&EtcdHarness { url, raw, prefix }).await;
}
