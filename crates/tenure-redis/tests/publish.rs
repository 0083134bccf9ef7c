//! A write is published exactly where somebody listens: to a group's own
//! subscriber, to a pattern subscriber, and not at all to nobody (the
//! script skips building and publishing the message then). Each case runs
//! on a private server, where no other test's subscriptions count.

mod common;

use std::time::Duration;

use tenure::store::CasOutcome;
use tenure::{GroupName, LeaseStore, LeaseView, Version};
use tenure_redis::RedisStore;
use tenure_testkit::sample_record;

/// How long a subscription may take to be in place on a loaded host.
const WITHIN: Duration = Duration::from_secs(20);

async fn store(server: &common::RedisServer) -> RedisStore {
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    assert!(store.adopt_empty().await.expect("adopt"));
    store
}

/// Writes `group` once more, expecting `version`; returns the new one.
async fn write(store: &RedisStore, group: &GroupName, version: Option<Version>) -> Version {
    match store
        .compare_and_swap(group, version, &sample_record())
        .await
        .expect("write")
    {
        CasOutcome::Applied(v) => v,
        CasOutcome::Conflict => panic!("a write of a group nobody else writes conflicted"),
    }
}

/// `PUBLISH` calls the server has run, from `INFO commandstats`.
fn publishes(server: &common::RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_publish:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.trim().parse().expect("a count"))
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_nobody_listens_to_are_not_published() {
    let server = common::Redis::start(&[]);
    let store = store(&server).await;
    let group = GroupName::new("quiet").unwrap();
    let mut version = write(&store, &group, None).await;
    for _ in 0..10 {
        version = write(&store, &group, Some(version)).await;
    }
    let read = store.read(&group).await.expect("read").expect("a record");
    assert_eq!(read.version, version, "every write applied");
    assert_eq!(publishes(&server), 0, "a publish to nobody was made");
}

/// Subscribes to `group`'s own channel (no pattern anywhere), waits
/// until the server counts the subscriber, writes once more, and says
/// whether the subscriber heard it and how many publishes the server ran.
async fn own_subscriber_hears(
    server: &common::RedisServer,
    store: &RedisStore,
    group: &GroupName,
) -> (bool, u64) {
    let version = write(store, group, None).await;
    let mut feed = store
        .changes(group)
        .await
        .expect("subscribe")
        .expect("Redis has a per-group feed");
    // The subscription is made in the background, and announces itself
    // with a hint (something may have been missed before it): wait until
    // the server counts the subscriber, then take what it said so far.
    let channel = format!("tenure:{}", group.as_str());
    let subscribed = tokio::time::timeout(WITHIN, async {
        while server.cli(&["PUBSUB", "NUMSUB", &channel]).lines().nth(1) != Some("1") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        subscribed.is_ok(),
        "the per-group subscription never came up"
    );
    while tokio::time::timeout(Duration::from_millis(200), feed.changed())
        .await
        .is_ok()
    {}
    let before = publishes(server);
    write(store, group, Some(version)).await;
    let heard = tokio::time::timeout(WITHIN, feed.changed()).await.is_ok();
    (heard, publishes(server) - before)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_groups_own_subscriber_hears_its_writes_without_any_pattern() {
    let server = common::Redis::start(&[]);
    let store = store(&server).await;
    let group = GroupName::new("heard").unwrap();
    let (heard, published) = own_subscriber_hears(&server, &store, &group).await;
    assert!(heard, "the group's subscriber did not hear its write");
    assert_eq!(published, 1, "the write heard was published once");
}

/// A user the ACL does not allow `PUBSUB` cannot ask who listens: every
/// write is published, as before the check existed.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_without_pubsub_publishes_every_write() {
    let server = common::Redis::start(&[]);
    store(&server).await;
    let rules = "on >pw ~tenure:* &tenure:* +evalsha +eval +script|load +subscribe +psubscribe +ping +hset +hget +hmget +hincrby +type +time +publish +scan";
    let mut setuser = vec!["ACL", "SETUSER", "nopubsub"];
    setuser.extend(rules.split(' '));
    assert_eq!(server.cli(&setuser).trim(), "OK");
    let url = server.url().replace("redis://", "redis://nopubsub:pw@");
    let store = RedisStore::connect(&url)
        .await
        .expect("connect as the ACL user");
    let group = GroupName::new("refused").unwrap();
    let (heard, published) = own_subscriber_hears(&server, &store, &group).await;
    assert!(heard, "the group's subscriber did not hear its write");
    assert_eq!(published, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pattern_subscriber_hears_every_groups_writes() {
    let server = common::Redis::start(&[]);
    let store = store(&server).await;
    let group = GroupName::new("watched").unwrap();
    let mut feed = store
        .watch()
        .await
        .expect("subscribe")
        .expect("Redis has a store-wide feed");
    let mut version = write(&store, &group, None).await;
    let heard = tokio::time::timeout(WITHIN, async {
        loop {
            tokio::select! {
                change = feed.next() => match change {
                    Some(tenure::store::Change::Written { group: g, current }) if g == group => {
                        return current.version;
                    }
                    Some(_) => {}
                    None => panic!("the store-wide feed closed"),
                },
                _ = tokio::time::sleep(Duration::from_millis(50)) => {
                    version = write(&store, &group, Some(version)).await;
                }
            }
        }
    })
    .await
    .expect("the pattern subscriber heard none of the group's writes");
    assert!(heard <= version);
}

/// A version field that is not the plain digits the script writes, or
/// that is too large for the script to add one to exactly, is a corrupt
/// record, never a version a writer could match: `+5` and `007` compare
/// unequal to every version as text (a group that conflicts forever),
/// and `9007199254740992` plus one is itself in Lua's doubles (two
/// writers expecting it would both apply).
#[tokio::test(flavor = "multi_thread")]
async fn a_version_field_the_script_did_not_write_is_corrupt() {
    let server = common::Redis::start(&[]);
    let store = store(&server).await;
    let group = GroupName::new("hostile").unwrap();
    write(&store, &group, None).await;
    for bad in ["+5", "007", "1.7654321e+15", "9007199254740992"] {
        assert_eq!(
            server.cli(&["HSET", "tenure:hostile", "v", bad]).trim(),
            "0"
        );
        match store.read(&group).await {
            Err(tenure::StoreError::Record {
                source: tenure::RecordError::Corrupt { detail },
                ..
            }) => assert!(detail.contains(bad), "{detail}"),
            other => panic!("v = {bad:?} read as {other:?}"),
        }
    }
}
