//! Writes whose outcome the store cannot know are reported as unknown
//! (`Timeout` or `Unavailable`), never as a definite conflict: the server
//! may have applied them. Against a private nats-server that the test
//! freezes (SIGSTOP) and kills mid-write.

mod common;

use std::time::{Duration, Instant};

use tenure::store::CasOutcome;
use tenure::{LeaseStore, LeaseView, StoreError};
use tenure_nats::NatsStore;
use tenure_testkit::{self as testkit, held_by};

/// A private server, and a handle on its bucket `bucket` with a 1 s
/// operation timeout: the test freezes or kills the server under it.
async fn private_with_short_timeout(bucket: &str) -> (common::NatsServer, NatsStore) {
    let server = common::Nats::start();
    let url = format!("{}?timeout=1s", server.url(bucket));
    let store = NatsStore::connect(&url).await.unwrap();
    (server, store)
}

/// Polls `read` until the group's record is held by `holder`.
async fn wait_for_holder(store: &NatsStore, group: &tenure::GroupName, holder: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if let Ok(Some(v)) = store.read(group).await {
            if v.record.holder_id() == Some(holder) {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The server takes the write but is frozen before it answers: the store
/// reports a timeout. Thawed, the server applies it: the write the store
/// could not confirm did happen, and a retry on the old version is then a
/// definite conflict.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_reply_is_a_timeout_and_the_write_may_have_applied() {
    let (server, store) = private_with_short_timeout("lost").await;
    let group = testkit::unique_group("lost-reply");
    let v1 = testkit::applied(&store, &group, None, &held_by("a", 1)).await;

    server.freeze();
    let started = Instant::now();
    let got = store
        .compare_and_swap(&group, Some(v1), &held_by("b", 2))
        .await;
    assert!(
        matches!(got, Err(StoreError::Timeout(_))),
        "a write without an answer must be reported as unknown, got {got:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by the timeout"
    );
    server.thaw();

    // The frozen server still had the request in its socket: it applies it.
    assert!(
        wait_for_holder(&store, &group, "b").await,
        "the write reported as timed out was applied once the server thawed"
    );
    testkit::conflicts(
        &store,
        &group,
        Some(v1),
        &held_by("c", 2),
        "now the old version is definitely stale",
    )
    .await;
}

/// The same for a group's first write: the client library's own `create`
/// would look again after the timeout, find the key its write made, and
/// report "already exists"; tenure must report the timeout.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_reply_to_a_first_write_is_a_timeout_not_a_conflict() {
    let (server, store) = private_with_short_timeout("lost-create").await;
    let group = testkit::unique_group("lost-create");
    server.freeze();
    let got = store.compare_and_swap(&group, None, &held_by("a", 1)).await;
    server.thaw();
    assert!(
        matches!(got, Err(StoreError::Timeout(_))),
        "a first write without an answer must be reported as unknown, got {got:?}"
    );
    assert!(
        wait_for_holder(&store, &group, "a").await,
        "the first write was applied once the server thawed"
    );
}

/// The server is killed while a write is in flight (frozen first, so the
/// request is surely sent and unanswered): the store reports an unknown
/// outcome, not a conflict. Restarted on its data, the store works again
/// and the record is as the server left it.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_mid_write_is_an_unknown_outcome_never_a_conflict() {
    let (mut server, store) = private_with_short_timeout("killed").await;
    let group = testkit::unique_group("killed-mid-write");
    let v1 = testkit::applied(&store, &group, None, &held_by("a", 1)).await;

    server.freeze();
    let write = {
        let store = store.clone();
        let group = group.clone();
        tokio::spawn(async move {
            store
                .compare_and_swap(&group, Some(v1), &held_by("b", 2))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    let got = write.await.unwrap();
    assert!(
        matches!(got, Err(ref e) if e.is_transient()),
        "a write cut off by the server's death must be reported as unknown, got {got:?}"
    );

    server.restart();
    let until = Instant::now() + Duration::from_secs(10);
    let after = loop {
        match store.read(&group).await {
            Ok(v) => break v.expect("the bucket survived the restart"),
            Err(e) => {
                assert!(e.is_transient(), "{e}");
                assert!(
                    Instant::now() < until,
                    "the store never answered again: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // SIGKILL discarded the unread request: the record is a's, at v1.
    assert_eq!(after.version, v1);
    assert_eq!(after.record.holder_id(), Some("a"));
    assert!(matches!(
        store
            .compare_and_swap(&group, Some(v1), &held_by("b", 2))
            .await
            .unwrap(),
        CasOutcome::Applied(v) if v > v1
    ));
}

/// A batch whose requests go unanswered fails each of them as unknown; no
/// request of it is reported as a conflict.
#[tokio::test(flavor = "multi_thread")]
async fn an_unanswered_batch_is_unknown_for_every_write() {
    let (server, store) = private_with_short_timeout("batch").await;
    let groups: Vec<_> = (0..20)
        .map(|i| testkit::unique_group(&format!("batch-{i}")))
        .collect();
    let mut requests = Vec::new();
    for g in &groups {
        let CasOutcome::Applied(v) = store
            .compare_and_swap(g, None, &held_by("a", 1))
            .await
            .unwrap()
        else {
            panic!("conflict");
        };
        requests.push(tenure::store::CasRequest {
            group: g.clone(),
            expected: Some(v),
            record: held_by("a", 1),
        });
    }
    server.freeze();
    let got = store.compare_and_swap_many(&requests).await;
    server.thaw();
    let got = got.expect("per-write results");
    assert_eq!(got.len(), requests.len());
    for r in got {
        assert!(
            matches!(r, Err(StoreError::Timeout(_))),
            "every unanswered write is unknown: {r:?}"
        );
    }
}
