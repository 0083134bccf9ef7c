//! `Checkpoints` against a real dynalite (`TENURE_TEST_DYNAMODB`, from
//! `scripts/servers.sh`): fenced saves, a sequence that never moves back,
//! finish marks.

use tenure_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use tenure_kinesis::checkpoint::{Checkpoint, SEQUENCE, SEQUENCE_LENGTH, SHARD, TOKEN};
use tenure_kinesis::{CheckpointError, Checkpoints};

mod common;

/// The dynalite endpoint, or `None` (skip; with `CI=true` it fails).
fn endpoint() -> Option<String> {
    tenure_testkit::server_url("TENURE_TEST_DYNAMODB")
}

/// A checkpoint table of the test's own, created, on a client built the
/// way tenure-dynamodb builds one for dynalite.
async fn checkpoints(endpoint: &str, label: &str) -> Checkpoints {
    let store = common::dynalite(endpoint).await;
    let table = format!("tenure_cp_{label}_{:x}", tenure_testkit::unique_suffix());
    let c = Checkpoints::new(store.client().clone(), table);
    assert!(c.create_table_if_missing().await.expect("create table"));
    assert!(!c.create_table_if_missing().await.expect("exists"));
    c
}

#[tokio::test]
async fn a_lower_token_is_refused_and_counted() {
    let Some(endpoint) = endpoint() else { return };
    let c = checkpoints(&endpoint, "stale").await;
    assert_eq!(c.load("s0").await.unwrap(), None);
    c.save("s0", "100", 5).await.expect("first save");
    // The same token moves on; a higher token takes over.
    c.save("s0", "200", 5).await.expect("same token");
    c.save("s0", "300", 7).await.expect("higher token");
    let e = c.save("s0", "400", 5).await.unwrap_err();
    match &e {
        CheckpointError::Stale {
            shard,
            token,
            stored_token,
        } => assert_eq!((shard.as_str(), *token, *stored_token), ("s0", 5, 7)),
        other => panic!("not Stale: {other:?}"),
    }
    assert!(e.to_string().contains("newer holder"), "{e}");
    let e = c.finish("s0", 6).await.unwrap_err();
    assert!(
        matches!(
            e,
            CheckpointError::Stale {
                stored_token: 7,
                ..
            }
        ),
        "{e:?}"
    );
    let e = c.claim("s0", 1).await.unwrap_err();
    assert!(
        matches!(
            e,
            CheckpointError::Stale {
                stored_token: 7,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(c.stale_refusals(), 3);
    assert_eq!(
        c.load("s0").await.unwrap(),
        Some(Checkpoint {
            shard: "s0".into(),
            sequence: Some("300".into()),
            token: 7,
            finished: false,
            owner: None,
        })
    );
}

#[tokio::test]
async fn a_checkpoint_never_moves_back() {
    let Some(endpoint) = endpoint() else { return };
    let c = checkpoints(&endpoint, "back").await;
    // 9 < 10 though "9" > "10" as text: by length first.
    c.save("s", "9", 1).await.unwrap();
    c.save("s", "10", 1).await.unwrap();
    let e = c.save("s", "9", 1).await.unwrap_err();
    match &e {
        CheckpointError::Backwards {
            sequence, stored, ..
        } => {
            assert_eq!((sequence.as_str(), stored.as_str()), ("9", "10"));
        }
        other => panic!("not Backwards: {other:?}"),
    }
    // Not even under a higher token.
    let e = c.save("s", "1", 2).await.unwrap_err();
    assert!(matches!(e, CheckpointError::Backwards { .. }), "{e:?}");
    // The same sequence again is fine (a retried save).
    c.save("s", "10", 1).await.unwrap();
    // 128 digits against 127.
    let long = format!("1{}", "0".repeat(127));
    c.save("s", &"9".repeat(127), 2).await.unwrap();
    c.save("s", &long, 2).await.unwrap();
    let e = c.save("s", &"9".repeat(127), 2).await.unwrap_err();
    assert!(matches!(e, CheckpointError::Backwards { .. }), "{e:?}");
    assert_eq!(c.stale_refusals(), 0);
    let e = c.save("s", "12a", 2).await.unwrap_err();
    assert!(
        matches!(e, CheckpointError::InvalidSequence { .. }),
        "{e:?}"
    );
    // The stored item, read around the library.
    let item = c
        .client()
        .get_item()
        .table_name(c.table())
        .key(SHARD, AttributeValue::S("s".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(item[SEQUENCE], AttributeValue::S(long.clone()));
    assert_eq!(item[SEQUENCE_LENGTH], AttributeValue::N("128".into()));
    assert_eq!(item[TOKEN], AttributeValue::N("2".into()));
}

#[tokio::test]
async fn claim_fences_the_old_holder_and_finish_sets_finished() {
    let Some(endpoint) = endpoint() else { return };
    let c = checkpoints(&endpoint, "finish").await;
    // A claim of a new shard creates it without a sequence.
    let cp = c.claim("p", 3).await.unwrap();
    assert_eq!((cp.sequence, cp.token, cp.finished), (None, 3, false));
    c.save("p", "55", 3).await.unwrap();
    // The next term claims: the sequence stays, the old holder is fenced.
    let cp = c.claim("p", 4).await.unwrap();
    assert_eq!((cp.sequence.as_deref(), cp.token), (Some("55"), 4));
    assert!(matches!(
        c.save("p", "66", 3).await.unwrap_err(),
        CheckpointError::Stale { .. }
    ));
    c.finish("p", 4).await.unwrap();
    let cp = c.load("p").await.unwrap().unwrap();
    assert!(cp.finished, "{cp:?}");
    assert_eq!(cp.sequence.as_deref(), Some("55"));
    // Finishing again is harmless; a claim shows it finished.
    c.finish("p", 4).await.unwrap();
    assert!(c.claim("p", 5).await.unwrap().finished);
    assert_eq!(c.stale_refusals(), 1);
}

#[tokio::test]
async fn a_hostile_item_is_malformed_never_retried_for_ever_nor_moved_back() {
    let Some(endpoint) = endpoint() else { return };
    let c = checkpoints(&endpoint, "hostile").await;
    let put = |shard: &str, attrs: Vec<(&str, AttributeValue)>| {
        let mut put = c
            .client()
            .put_item()
            .table_name(c.table())
            .item(SHARD, AttributeValue::S(shard.to_owned()));
        for (k, v) in attrs {
            put = put.item(k, v);
        }
        put.send()
    };
    // A length that does not match the sequence: every save's condition
    // would fail while the item read after it allows the write (so it
    // looked transient, and was tried again for ever).
    put(
        "len",
        vec![
            (SEQUENCE, AttributeValue::S("100".into())),
            (SEQUENCE_LENGTH, AttributeValue::N("50".into())),
            (TOKEN, AttributeValue::N("1".into())),
        ],
    )
    .await
    .unwrap();
    // A sequence without its length: the condition's "no length" branch
    // would let any sequence in, backwards too.
    put(
        "nolen",
        vec![
            (SEQUENCE, AttributeValue::S("900".into())),
            (TOKEN, AttributeValue::N("1".into())),
        ],
    )
    .await
    .unwrap();
    put(
        "text",
        vec![
            (SEQUENCE, AttributeValue::S("12x".into())),
            (SEQUENCE_LENGTH, AttributeValue::N("3".into())),
        ],
    )
    .await
    .unwrap();
    for shard in ["len", "nolen", "text"] {
        let e = c.load(shard).await.unwrap_err();
        assert!(
            matches!(e, CheckpointError::Malformed { .. }),
            "{shard}: {e:?}"
        );
        assert!(!e.is_transient(), "{shard}: {e:?}");
        let e = c.claim(shard, 2).await.unwrap_err();
        assert!(
            matches!(e, CheckpointError::Malformed { .. }),
            "{shard}: {e:?}"
        );
    }
    let e = c.save("len", "200", 2).await.unwrap_err();
    assert!(matches!(e, CheckpointError::Malformed { .. }), "{e:?}");
}

#[tokio::test]
async fn a_second_consumer_set_on_the_same_table_is_refused_not_skipping_records() {
    let Some(endpoint) = endpoint() else { return };
    let c = checkpoints(&endpoint, "owner").await;
    let (x, y) = (
        c.clone().owned_by("orders-x"),
        c.clone().owned_by("orders-y"),
    );
    let cp = x.claim("s", 1).await.unwrap();
    assert_eq!(cp.owner.as_deref(), Some("orders-x"));
    x.save("s", "100", 1).await.unwrap();
    // Another set, even with a higher token: refused, naming both sets.
    let e = y.claim("s", 9).await.unwrap_err();
    match &e {
        CheckpointError::OtherOwner { owner, mine, .. } => {
            assert_eq!((owner.as_str(), mine.as_str()), ("orders-x", "orders-y"));
        }
        other => panic!("not OtherOwner: {other:?}"),
    }
    assert!(!e.is_transient());
    assert!(
        e.to_string().contains("a checkpoint table of its own"),
        "{e}"
    );
    // The owner's own next term claims as before; the item is unchanged
    // by the refusal.
    let cp = x.claim("s", 2).await.unwrap();
    assert_eq!((cp.sequence.as_deref(), cp.token), (Some("100"), 2));
    // A shard first claimed by `y` is its own.
    assert_eq!(
        y.claim("t", 1).await.unwrap().owner.as_deref(),
        Some("orders-y")
    );
}
