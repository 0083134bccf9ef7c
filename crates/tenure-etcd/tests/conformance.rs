//! The tenure conformance suite against the real etcd server.

mod common;

use async_trait::async_trait;
use tenure::GroupName;
use tenure_etcd::EtcdStore;
use tenure_testkit::{self as testkit, Feeds, RawAccess, UrlHarness};

/// The store's keys, read and written by a plain client.
struct EtcdKeys {
    client: etcd_client::Client,
    /// Each group's key is the prefix and the group's name, written out
    /// here rather than asked of the store, so that a change of the
    /// layout (which would strand every existing lease) fails the suite.
    prefix: String,
}

#[async_trait]
impl RawAccess for EtcdKeys {
    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        // A plain put changes mod_revision, as any write does.
        let mut kv = self.client.kv_client();
        kv.put(format!("{}{}", self.prefix, group.as_str()), bytes, None)
            .await
            .expect("plant");
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        let mut kv = self.client.kv_client();
        let resp = kv
            .get(format!("{}{}", self.prefix, group.as_str()), None)
            .await
            .expect("read raw");
        resp.kvs().first().map(|kv| kv.value().to_vec())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(server) = testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    let prefix = format!("tenure-conformance-{:x}/", testkit::unique_suffix());
    let endpoint = server.trim_start_matches("http://").to_owned();
    let client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    let url = format!("{server}?prefix={prefix}");
    let keys = EtcdKeys { client, prefix };
    // Every write notifies, and the feed case fails, not skips, if that
    // breaks: a watch per group (observers) and the prefix
    // watch (engines).
    let harness = UrlHarness::new(url, EtcdStore::connect, keys).promising(Feeds::ALL);
    testkit::run_conformance(&harness).await;
}
