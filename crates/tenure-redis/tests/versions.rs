//! The versions an update writes: the expected one plus one, added by the
//! client (the script compares text and writes what it is given), and
//! none past the last version the store reads (such an update is refused
//! where it would apply, and conflicts where it would not).

mod common;

use tenure::store::{CasOutcome, CasRequest};
use tenure::{GroupName, LeaseStore, LeaseView, Version};
use tenure_redis::RedisStore;
use tenure_testkit::sample_record;

/// The largest version the store reads (2^53 - 2).
const LAST: u64 = (1 << 53) - 2;

async fn store(server: &common::RedisServer) -> RedisStore {
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    assert!(store.adopt_empty().await.expect("adopt"));
    store
}

fn update(group: &GroupName, expected: u64) -> CasRequest {
    CasRequest {
        group: group.clone(),
        expected: Some(Version(expected)),
        record: sample_record(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_writes_the_expected_version_plus_one() {
    let server = common::Redis::start(&[]);
    let store = store(&server).await;
    let group = GroupName::new("counted").unwrap();
    let CasOutcome::Applied(created) = store
        .compare_and_swap(&group, None, &sample_record())
        .await
        .expect("create")
    else {
        panic!("the creation conflicted");
    };
    // Two updates of one group in one batch: the second sees the first.
    let outcomes = store
        .compare_and_swap_many(&[update(&group, created.0), update(&group, created.0 + 1)])
        .await
        .expect("the batch");
    let versions: Vec<_> = outcomes.into_iter().map(|o| o.expect("applied")).collect();
    assert_eq!(
        versions,
        [
            CasOutcome::Applied(Version(created.0 + 1)),
            CasOutcome::Applied(Version(created.0 + 2))
        ]
    );
    let stored = server.cli(&["HGET", "tenure:counted", "v"]);
    assert_eq!(stored.trim(), (created.0 + 2).to_string());
    // A stale version still conflicts, and writes nothing.
    assert_eq!(
        store
            .compare_and_swap(&group, Some(created), &sample_record())
            .await
            .expect("a reply"),
        CasOutcome::Conflict
    );
    assert_eq!(
        store
            .read(&group)
            .await
            .expect("read")
            .expect("a record")
            .version,
        Version(created.0 + 2)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_over_the_last_version_is_refused_and_its_batch_goes_on() {
    let server = common::Redis::start(&[]);
    let store = store(&server).await;
    let (last, next) = (
        GroupName::new("last").unwrap(),
        GroupName::new("next").unwrap(),
    );
    for g in [&last, &next] {
        store
            .compare_and_swap(g, None, &sample_record())
            .await
            .expect("create");
    }
    // A record at the last version (a hostile or very old data set).
    assert_eq!(
        server
            .cli(&["HSET", "tenure:last", "v", &LAST.to_string()])
            .trim(),
        "0"
    );
    let at_last = store.read(&last).await.expect("read").expect("a record");
    assert_eq!(at_last.version, Version(LAST));
    let other = store.read(&next).await.expect("read").expect("a record");
    let outcomes = store
        .compare_and_swap_many(&[
            update(&next, other.version.0),
            update(&last, LAST),
            update(&next, other.version.0 + 1),
        ])
        .await
        .expect("the batch as a whole");
    assert_eq!(outcomes.len(), 3);
    assert_eq!(
        outcomes[0].as_ref().expect("applied"),
        &CasOutcome::Applied(Version(other.version.0 + 1))
    );
    let refused = outcomes[1].as_ref().expect_err("refused");
    let message = refused.to_string();
    assert!(
        message.contains("tenure:last") && message.contains(&LAST.to_string()),
        "{message}"
    );
    assert!(message.contains("delete the key"), "{message}");
    assert_eq!(
        outcomes[2].as_ref().expect("applied"),
        &CasOutcome::Applied(Version(other.version.0 + 2))
    );
    // Not applied: the record at the last version is as it was.
    let stored = server.cli(&["HGET", "tenure:last", "v"]);
    assert_eq!(stored.trim(), LAST.to_string());
    // An expected version past the last, which no read gives, conflicts
    // where the record is at another version (or there is none), and is
    // refused where a hostile record matches it.
    let beyond = Some(Version(u64::MAX));
    let never = GroupName::new("never").unwrap();
    for g in [&last, &never] {
        assert_eq!(
            store
                .compare_and_swap(g, beyond, &sample_record())
                .await
                .expect("a reply"),
            CasOutcome::Conflict
        );
    }
    server.cli(&["HSET", "tenure:last", "v", &u64::MAX.to_string()]);
    let past = store
        .compare_and_swap(&last, beyond, &sample_record())
        .await
        .expect_err("refused");
    assert!(past.to_string().contains("delete the key"), "{past}");
    let stored = server.cli(&["HGET", "tenure:last", "v"]);
    assert_eq!(stored.trim(), u64::MAX.to_string());
}
