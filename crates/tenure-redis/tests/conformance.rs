//! The tenure conformance suite against the real Redis server.

mod common;

use async_trait::async_trait;
use redis::AsyncCommands;
use tenure::testkit::{self, Feeds, Harness};
use tenure::GroupName;
use tenure_redis::RedisStore;

struct RedisHarness {
    url: String,
    raw: redis::aio::MultiplexedConnection,
    prefix: String,
}

#[async_trait]
impl Harness for RedisHarness {
    type Store = RedisStore;

    async fn store(&self) -> RedisStore {
        RedisStore::connect(&self.url).await.expect("connect")
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        let key = format!("{}{}", self.prefix, group.as_str());
        let mut c = self.raw.clone();
        // As a foreign program would: bytes in the record field, and a new
        // version, so a CAS with the version read before conflicts.
        let _: () = redis::pipe()
            .atomic()
            .hset(&key, "record", bytes)
            .hincr(&key, "v", 1)
            .query_async(&mut c)
            .await
            .expect("plant");
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        let key = format!("{}{}", self.prefix, group.as_str());
        let mut c = self.raw.clone();
        c.hget(&key, "record").await.expect("read raw")
    }

    /// Every write notifies (issue 10, item 15: the feed case fails, not
    /// skips, if that breaks).
    fn promised_feeds(&self) -> Feeds {
        Feeds::ALL
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(server) = testkit::server_url("TENURE_TEST_REDIS") else {
        return;
    };
    // A prefix of its own, adopted as new: the suite expects a missing
    // record to read as never written (see the crate docs on data loss).
    let prefix = format!("tenure-conformance-{:x}:", tenure::testkit::unique_suffix());
    let url = format!("{server}?prefix={prefix}");
    let store = RedisStore::connect(&url).await.expect("connect");
    assert!(store.adopt_empty().await.expect("adopt"));
    let raw = redis::Client::open(server.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    testkit::run_conformance(&RedisHarness { url, raw, prefix }).await;
}

/// An ACL user with exactly the permissions the crate docs list passes the
/// whole suite, the store-wide feed (PSUBSCRIBE) included.
#[tokio::test(flavor = "multi_thread")]
async fn the_documented_acl_permissions_pass_the_suite() {
    let Some(server) = testkit::server_url("TENURE_TEST_REDIS") else {
        return;
    };
    let suffix = tenure::testkit::unique_suffix();
    let prefix = format!("tenure-acl-{suffix:x}:");
    let user = format!("tenure-acl-{suffix:x}");
    let mut raw = redis::Client::open(server.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let rules = format!(
        "~{prefix}* &{prefix}* +evalsha +eval +script|load +subscribe +psubscribe +ping +hset +hget +hmget +hincrby +type +time +publish +scan"
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
    let report = testkit::check_conformance(&RedisHarness {
        url,
        raw: raw.clone(),
        prefix,
    })
    .await;
    let _: () = redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async(&mut raw)
        .await
        .unwrap();
    // Both feeds are promised: a missing one fails its case.
    assert!(report.passed(), "{report}");
}
