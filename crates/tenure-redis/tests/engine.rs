//! Many groups on one store handle: one engine, batches of one
//! script call, one pub/sub connection carrying records, bounded
//! connections, and a feed that shrugs off foreign messages and resyncs
//! after a reconnect.

mod common;

use std::time::Duration;

use tenure::store::{CasOutcome, CasRequest, Change};
use tenure::{GroupName, LeaseStore, LeaseView, Version};
use tenure_redis::RedisStore;
use tenure_testkit::{self as testkit, many_groups, scenarios};

/// The shared server with a prefix of its own, adopted as new.
async fn shared(label: &str) -> Option<(String, RedisStore)> {
    let server = testkit::server_url("TENURE_TEST_REDIS")?;
    let prefix = format!("tenure-{label}-{:x}:", testkit::unique_suffix());
    let url = format!("{server}?prefix={prefix}");
    let store = RedisStore::connect(&url).await.expect("connect");
    assert!(store.adopt_empty().await.expect("adopt"));
    Some((url, store))
}

fn applied(outcome: Result<CasOutcome, tenure::StoreError>) -> Version {
    match outcome {
        Ok(CasOutcome::Applied(v)) => v,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_groups_are_led_by_one_engine_and_followed_without_reads() {
    let Some((url, leading)) = shared("many").await else {
        return;
    };
    let following = RedisStore::connect(&url).await.unwrap();
    let figures = scenarios::many_groups_followed_without_reads(
        leading,
        following,
        1000,
        Duration::from_secs(6),
    )
    .await;
    eprintln!("Redis, 1000 groups: {figures:?}");
    // The target: at most three batched round trips per renew
    // interval (the window is one term, three renew intervals).
    assert!(
        figures.leaders.write_batches <= 9,
        "the leaders' renewals went out in {} batches in one term",
        figures.leaders.write_batches
    );
}

/// The store-wide feed reports each write with its record; a foreign
/// publisher's messages on the prefix's channels are hints at most, never
/// stop the feed, and never pass for a record unless well-formed.
#[tokio::test(flavor = "multi_thread")]
async fn the_feed_carries_records_and_foreign_messages_are_hints() {
    let Some((url, writer)) = shared("feed").await else {
        return;
    };
    let watcher = RedisStore::connect(&url).await.unwrap();
    let mut feed = watcher.watch().await.unwrap().expect("a store-wide feed");
    let group = testkit::unique_group("feed");
    let (record, v) = testkit::write_carried_whole(&writer, &mut feed, &group).await;
    let server = testkit::server_url("TENURE_TEST_REDIS").unwrap();
    let mut foreign = redis::Client::open(server.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let prefix = writer.options().prefix().to_owned();
    let channel = writer.key(&group);
    for (on, payload) in [
        (channel.as_str(), &b""[..]),
        (channel.as_str(), b"1:nope:{}"),
        (channel.as_str(), b"\xff\x00garbage"),
        (prefix.as_str(), b"1:5:{}"),
        (&format!("{prefix}\u{1}"), b"1:5:{}"),
    ] {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(on)
            .arg(payload)
            .query_async(&mut foreign)
            .await
            .unwrap();
    }
    for _ in 0..3 {
        assert_eq!(
            testkit::next_change_about(&mut feed, &group).await,
            Change::Hint {
                group: group.clone()
            }
        );
    }
    let v2 = applied(writer.compare_and_swap(&group, Some(v), &record).await);
    match testkit::next_change_about(&mut feed, &group).await {
        Change::Written { current, .. } => assert_eq!(current.version, v2),
        other => panic!("after the foreign messages: {other:?}"),
    }
}

/// The pub/sub connection killed by the server: the feed subscribes again
/// at once and says Resync (messages sent meanwhile are gone), then goes
/// on reporting writes.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_subscription_resubscribes_and_resyncs() {
    let server = common::Redis::start(&[]);
    let store = RedisStore::connect(&server.url()).await.unwrap();
    assert!(store.adopt_empty().await.unwrap());
    let mut feed = store.watch().await.unwrap().expect("a feed");
    let killed = server.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert_eq!(killed.trim(), "1", "the feed's connection was killed");
    testkit::resyncs_then_carries_writes(&mut feed, &store, "after-resync").await;
}

/// Connections do not grow with the number of groups: 500 groups on one
/// store handle use its one command connection and one pub/sub connection.
#[tokio::test(flavor = "multi_thread")]
async fn connections_stay_bounded_whatever_the_number_of_groups() {
    let server = common::Redis::start(&[]);
    let store = RedisStore::connect(&server.url()).await.unwrap();
    assert!(store.adopt_empty().await.unwrap());
    // Every client but redis-cli's own.
    let clients = || async { server.cli(&["CLIENT", "LIST"]).lines().count() - 1 };
    let most = many_groups::peak_while_groups_lead(&store, "pool", 500, clients).await;
    assert!(most <= 2, "{most} connections for 500 groups");
}

/// A batch of several script calls' worth, every group written twice: the
/// second acquisition of each conflicts, since the first applied, in the
/// batch's own order; read back in one call.
#[tokio::test(flavor = "multi_thread")]
async fn a_huge_batch_with_repeats_applies_in_order() {
    let Some((_, store)) = shared("huge").await else {
        return;
    };
    many_groups::huge_batch_with_repeats_applies_in_order(&store, "huge", 5000).await;
}

/// A batch in a data set that lost its data: every creation waits out the
/// quarantine, the first marks the data set, and none is written.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_in_a_wiped_data_set_is_quarantined_whole() {
    let server = common::Redis::start(&[]);
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let (a, b) = (testkit::unique_group("q-a"), testkit::unique_group("q-b"));
    let request = |g: &GroupName| CasRequest {
        group: g.clone(),
        expected: None,
        record: testkit::held_by("a", 1),
    };
    let got = store
        .compare_and_swap_many(&[request(&a), request(&b), request(&a)])
        .await
        .unwrap();
    assert!(
        matches!(&got[0], Err(e) if e.is_transient() && e.to_string().contains("lost its data")),
        "{got:?}"
    );
    // The marker now exists: the others are refused as a sequence of single
    // writes would be (no record may be created from "never written").
    for r in &got[1..] {
        assert!(
            matches!(r, Ok(CasOutcome::Conflict)),
            "after the marker: {got:?}"
        );
    }
    for g in [&a, &b] {
        let seen = store.read(g).await.unwrap().expect("a floor record");
        assert_eq!(seen.version, Version(0));
    }
}
