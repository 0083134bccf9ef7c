//! The tenure conformance suite against the real Redis server.

mod common;

use async_trait::async_trait;
use redis::AsyncCommands;
use tenure::GroupName;
use tenure_redis::RedisStore;
use tenure_testkit::{self as testkit, Feeds, RawAccess, UrlHarness};

/// The store's hashes, read and written by a plain client.
struct RedisKeys {
    client: redis::aio::MultiplexedConnection,
    /// Each group's hash is the prefix and the group's name, written out
    /// here rather than asked of the store, so that a change of the
    /// layout (which would strand every existing lease) fails the suite.
    prefix: String,
}

#[async_trait]
impl RawAccess for RedisKeys {
    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        let key = format!("{}{}", self.prefix, group.as_str());
        // As a foreign program would: bytes in the record field, and a new
        // version, so a CAS with the version read before conflicts.
        let _: () = redis::pipe()
            .atomic()
            .hset(&key, "record", bytes)
            .hincr(&key, "v", 1)
            .query_async(&mut self.client.clone())
            .await
            .expect("plant");
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        let mut c = self.client.clone();
        c.hget(format!("{}{}", self.prefix, group.as_str()), "record")
            .await
            .expect("read raw")
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(server) = testkit::server_url("TENURE_TEST_REDIS") else {
        return;
    };
    // A prefix of its own, adopted as new: the suite expects a missing
    // record to read as never written (see the crate docs on data loss).
    let prefix = format!("tenure-conformance-{:x}:", tenure_testkit::unique_suffix());
    let url = format!("{server}?prefix={prefix}");
    let store = RedisStore::connect(&url).await.expect("connect");
    assert!(store.adopt_empty().await.expect("adopt"));
    let client = redis::Client::open(server.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys = RedisKeys { client, prefix };
    // Every write notifies: the feed case fails, not skips, if that
    // breaks.
    let harness = UrlHarness::new(url, RedisStore::connect, keys).promising(Feeds::ALL);
    testkit::run_conformance(&harness).await;
}

/// An ACL user with exactly the permissions the crate docs list passes the
/// whole suite, the store-wide feed (PSUBSCRIBE) included.
#[tokio::test(flavor = "multi_thread")]
async fn the_documented_acl_permissions_pass_the_suite() {
    let Some(server) = testkit::server_url("TENURE_TEST_REDIS") else {
        return;
    };
    let suffix = tenure_testkit::unique_suffix();
    let prefix = format!("tenure-acl-{suffix:x}:");
    let user = format!("tenure-acl-{suffix:x}");
    let mut raw = redis::Client::open(server.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let rules = format!(
        "~{prefix}* &{prefix}* +evalsha +eval +script|load +subscribe +psubscribe +ping +hset +hget +hmget +hincrby +type +time +publish +scan +pubsub|numpat +pubsub|numsub"
    );
    let mut acl = redis::cmd("ACL");
    acl.arg("SETUSER").arg(&user).arg("on").arg(">acl-pw");
    for rule in rules.split(' ') {
        acl.arg(rule);
    }
    let _: () = acl.query_async(&mut raw).await.expect("ACL SETUSER");
    let host = server.trim_start_matches("redis://");
    let url = format!("redis://{user}:acl-pw@{host}?prefix={prefix}");
    let store = RedisStore::connect(&url).await.expect("connect");
    assert!(store.adopt_empty().await.expect("adopt"));
    let keys = RedisKeys {
        client: raw.clone(),
        prefix,
    };
    // Both feeds are promised: a missing one fails its case.
    let harness = UrlHarness::new(url, RedisStore::connect, keys).promising(Feeds::ALL);
    let report = testkit::check_conformance(&harness).await;
    let _: () = redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(report.passed(), "{report}");
}
