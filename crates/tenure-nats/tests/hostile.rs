//! What others leave in the bucket: keys tenure never writes (foreign
//! programs, hand-made keys that only look like tenure's), values that are
//! no lease, deletions and purges by an operator. None of it is mistaken
//! for a group, stops the feed, or panics; a deleted or purged key is an
//! error, never a fresh start of the group's tokens.

mod common;

use std::time::Duration;

use async_nats::jetstream;
use tenure::store::Change;
use tenure::{GroupName, LeaseStore, LeaseView, RecordError, StoreError};
use tenure_nats::NatsStore;
use tenure_testkit::{self as testkit, held_by};

async fn next_change(feed: &mut tenure::store::StoreFeed) -> Change {
    tokio::time::timeout(Duration::from_secs(5), feed.next())
        .await
        .expect("a change within 5 s")
        .expect("the feed is open")
}

/// A bucket on the shared server made as `nats kv add` makes it (so that
/// `nats kv purge` works), a store on it and raw access to it.
struct OperatorBucket {
    url: String,
    store: NatsStore,
    raw: async_nats::jetstream::kv::Store,
}

impl OperatorBucket {
    async fn make(label: &str) -> Option<OperatorBucket> {
        let url = common::shared_url(label)?;
        let (server, bucket) = common::split_bucket(&url);
        common::nats_kv_add(server, bucket).await;
        let store = NatsStore::connect(&url).await.unwrap();
        let raw = common::raw_bucket(server, bucket).await;
        Some(OperatorBucket { url, store, raw })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn foreign_keys_and_values_neither_stop_nor_fool_the_feed_or_the_listing() {
    let Some(OperatorBucket { store, raw, .. }) = OperatorBucket::make("hostile").await else {
        return;
    };
    let mut feed = store.watch().await.unwrap().expect("a feed");

    let run = testkit::unique_group("hostile");
    let name = |label: &str| GroupName::new(format!("{run}/{label}")).unwrap();
    let (garbage, deleted, purged, real) = (
        name("garbage"),
        name("deleted"),
        name("purged"),
        name("real"),
    );
    let key = |g: &GroupName| NatsStore::key_of(g);
    for g in [&deleted, &purged] {
        store
            .compare_and_swap(g, None, &held_by("a", 1))
            .await
            .unwrap();
    }
    for _ in 0..2 {
        let c = next_change(&mut feed).await;
        assert!(matches!(c, Change::Written { .. }), "{c:?}");
    }
    let prefix = key(&name("x"));
    let prefix = prefix.strip_suffix(".x").unwrap();
    // Keys that are no group's: another program's, a non-canonical
    // escape, an escaped separator, a control character, outside tenure's
    // root. None of them may reach the feed or a listing.
    for foreign in [
        "other.app.key".to_owned(),
        "tenure".to_owned(),
        format!("{prefix}.=41"),
        format!("{prefix}.a=2Fb"),
        format!("{prefix}.=07"),
        format!("{prefix}.=FF"),
    ] {
        raw.put(&foreign, "{\"not\":\"a lease\"}".into())
            .await
            .unwrap_or_else(|e| panic!("put {foreign}: {e}"));
    }
    raw.put(key(&garbage), b"\x00\xffnot json".to_vec().into())
        .await
        .unwrap();
    raw.delete(key(&deleted)).await.unwrap();
    raw.purge(key(&purged)).await.unwrap();
    store
        .compare_and_swap(&real, None, &held_by("b", 1))
        .await
        .unwrap();

    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(next_change(&mut feed).await);
    }
    assert!(
        matches!(&seen[..], [
            Change::Hint { group: g1 },
            Change::Hint { group: g2 },
            Change::Hint { group: g3 },
            Change::Written { group: g4, current },
        ] if g1 == &garbage && g2 == &deleted && g3 == &purged && g4 == &real
            && current.record.holder_id() == Some("b")),
        "foreign keys are skipped, undecodable values and deletions are hints: {seen:?}"
    );
    assert!(feed.try_next().is_none());

    // The listing: the groups only; the undecodable, deleted and purged
    // ones each fail alone.
    let listed = store.list(&format!("{run}/")).await.unwrap();
    let mut names: Vec<String> = listed.iter().map(|l| l.group.to_string()).collect();
    names.sort();
    let mut expected = [&deleted, &garbage, &purged, &real].map(|g| g.to_string());
    expected.sort();
    assert_eq!(names, expected);
    for l in &listed {
        if l.group == real {
            assert!(l.record.is_ok(), "{l:?}");
        } else {
            assert!(matches!(l.record, Err(StoreError::Record { .. })), "{l:?}");
        }
    }
    let everything = store.list("").await.unwrap();
    assert!(everything
        .iter()
        .all(|l| l.group.as_str().starts_with(run.as_str())));
}

/// An operator's `nats kv del` or `nats kv purge`, or a message under an
/// operation this build does not know, leaves no record tenure may use:
/// the group's last token is gone. Reads, batch reads and a first write
/// report an error naming the key and the fix (never "no record", never a
/// fresh record whose tokens start again at 1); the feed hints (the
/// elector reads and reports that error), never carries it as written.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_purged_or_unknown_marker_is_an_error_never_a_fresh_start() {
    let Some(OperatorBucket { url, store, raw }) = OperatorBucket::make("deleted").await else {
        return;
    };
    let (server, bucket) = common::split_bucket(&url);
    let js = jetstream::new(
        async_nats::connect(server.trim_start_matches("nats://"))
            .await
            .unwrap(),
    );
    let mut feed = store.watch().await.unwrap().expect("a feed");
    for how in ["del", "purge", "unknown operation"] {
        let group = testkit::unique_group("deleted");
        let v1 = testkit::applied(&store, &group, None, &held_by("a", 7)).await;
        let c = next_change(&mut feed).await;
        assert!(
            matches!(&c, Change::Written { group: g, .. } if g == &group),
            "{c:?}"
        );
        let key = NatsStore::key_of(&group);
        match how {
            "del" => raw.delete(&key).await.unwrap(),
            "purge" => raw.purge(&key).await.unwrap(),
            _ => {
                // A lease's bytes, under an operation nobody defined.
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("KV-Operation", "FROB");
                js.publish_with_headers(
                    format!("$KV.{bucket}.{key}"),
                    headers,
                    held_by("z", 99).encode().into(),
                )
                .await
                .unwrap()
                .await
                .unwrap();
            }
        }
        let c = next_change(&mut feed).await;
        assert!(
            matches!(&c, Change::Hint { group: g } if g == &group),
            "{how}: the feed hints, never carries it as written: {c:?}"
        );
        let names_the_key_and_the_fix = |e: &StoreError| {
            matches!(e, StoreError::Record { group: g, source: RecordError::Corrupt { detail } }
                if g == &group && detail.contains(&key) && detail.contains("another group name"))
        };
        let e = store.read(&group).await.unwrap_err();
        assert!(names_the_key_and_the_fix(&e), "{how}: {e}");
        let batch = store.read_many(std::slice::from_ref(&group)).await.unwrap();
        assert!(
            matches!(&batch[..], [Err(e)] if names_the_key_and_the_fix(e)),
            "{how}: {batch:?}"
        );
        let e = store
            .compare_and_swap(&group, None, &held_by("b", 1))
            .await
            .unwrap_err();
        assert!(names_the_key_and_the_fix(&e), "{how}: a fresh start: {e}");
        testkit::conflicts(
            &store,
            &group,
            Some(v1),
            &held_by("b", 8),
            &format!("{how}: a version from before the marker"),
        )
        .await;
        let e = store.read(&group).await.unwrap_err();
        assert!(
            names_the_key_and_the_fix(&e),
            "{how}: nothing written over it: {e}"
        );
    }
}

/// Buckets tenure creates refuse what would send tokens back: `nats kv
/// purge` (a roll-up), purging the stream (which would leave no marker at
/// all) and deleting a message. The record stays.
#[tokio::test(flavor = "multi_thread")]
async fn buckets_tenure_creates_refuse_purges_and_deletions() {
    let Some(url) = common::shared_url("nopurge") else {
        return;
    };
    let store = NatsStore::connect(&url).await.unwrap();
    let (server, bucket) = common::split_bucket(&url);
    let raw = common::raw_bucket(server, bucket).await;
    let group = testkit::unique_group("nopurge");
    let v1 = testkit::applied(&store, &group, None, &held_by("a", 3)).await;
    let key = NatsStore::key_of(&group);
    assert!(raw.purge(&key).await.is_err(), "nats kv purge");
    assert!(raw.stream.purge().await.is_err(), "nats stream purge");
    assert!(
        raw.stream.delete_message(v1.0).await.is_err(),
        "nats stream rmm"
    );
    let now = store.read(&group).await.unwrap().expect("the record stays");
    assert_eq!((now.version, now.record.token), (v1, 3));
}
