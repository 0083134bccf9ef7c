//! What others leave in the bucket: keys tenure never writes (foreign
//! programs, hand-made keys that only look like tenure's), values that are
//! no lease, deletions and purges by an operator. None of it is mistaken
//! for a group, stops the feed, or panics.

mod common;

use std::time::Duration;

use tenure::testkit::{self, held_by};
use tenure::{CasOutcome, Change, GroupName, LeaseStore, LeaseView, StoreError};
use tenure_nats::NatsStore;

async fn next_change(feed: &mut tenure::StoreFeed) -> Change {
    tokio::time::timeout(Duration::from_secs(5), feed.next())
        .await
        .expect("a change within 5 s")
        .expect("the feed is open")
}

#[tokio::test(flavor = "multi_thread")]
async fn foreign_keys_and_values_neither_stop_nor_fool_the_feed_or_the_listing() {
    let Some(url) = common::shared_url("hostile") else {
        return;
    };
    let store = NatsStore::connect(&url).await.unwrap();
    let (server, bucket) = common::split_bucket(&url);
    let raw = common::raw_bucket(server, bucket).await;
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

    // The listing: the real groups only; the undecodable one fails alone;
    // deleted and purged keys have no record.
    let listed = store.list(&format!("{run}/")).await.unwrap();
    let mut names: Vec<String> = listed.iter().map(|l| l.group.to_string()).collect();
    names.sort();
    assert_eq!(names, [garbage.to_string(), real.to_string()]);
    for l in &listed {
        if l.group == garbage {
            assert!(matches!(l.record, Err(StoreError::Record { .. })), "{l:?}");
        } else {
            assert!(l.record.is_ok(), "{l:?}");
        }
    }
    let everything = store.list("").await.unwrap();
    assert!(everything
        .iter()
        .all(|l| l.group.as_str().starts_with(run.as_str())));
}

/// An operator's `nats kv del` or `purge` leaves a marker: the group reads
/// as having no record, a first write creates it again (expecting the
/// marker's revision, so a write in between still conflicts), and a
/// version from before the deletion conflicts.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_or_purged_key_reads_as_none_and_is_created_again() {
    let Some(url) = common::shared_url("deleted") else {
        return;
    };
    let store = NatsStore::connect(&url).await.unwrap();
    let (server, bucket) = common::split_bucket(&url);
    let raw = common::raw_bucket(server, bucket).await;
    for purge in [false, true] {
        let group = testkit::unique_group("deleted");
        let CasOutcome::Applied(v1) = store
            .compare_and_swap(&group, None, &held_by("a", 1))
            .await
            .unwrap()
        else {
            panic!("conflict on the first write");
        };
        let key = NatsStore::key_of(&group);
        if purge {
            raw.purge(&key).await.unwrap();
        } else {
            raw.delete(&key).await.unwrap();
        }
        assert!(store.read(&group).await.unwrap().is_none(), "purge {purge}");
        assert_eq!(
            store
                .compare_and_swap(&group, Some(v1), &held_by("b", 2))
                .await
                .unwrap(),
            CasOutcome::Conflict,
            "a version from before the deletion"
        );
        let CasOutcome::Applied(v2) = store
            .compare_and_swap(&group, None, &held_by("c", 3))
            .await
            .unwrap()
        else {
            panic!("the group could not be created again (purge {purge})");
        };
        assert!(v2 > v1);
        assert_eq!(
            store
                .compare_and_swap(&group, None, &held_by("d", 3))
                .await
                .unwrap(),
            CasOutcome::Conflict,
            "created once only"
        );
        let now = store.read(&group).await.unwrap().unwrap();
        assert_eq!((now.version, now.record.holder_id()), (v2, Some("c")));
    }
}
