//! A group node deleted by hand and created again (by hand, or by tenure):
//! a compare-and-swap meant for the old node never applies to the new
//! one, and the next term's token is above every token of the old node.

mod common;

use std::time::Duration;

use tenure::{GroupName, LeaseRecord, LeaseView, Version};
use tenure_testkit::{self as testkit, held_by, scenarios};
use tenure_zookeeper::ZkStore;
use zookeeper_client as zk;

/// Creates `g` as `holder` with `token`, then writes it twice more (the
/// node at data version 2): the version a handle then remembers.
async fn written_three_times(store: &ZkStore, g: &GroupName, holder: &str, token: u64) -> Version {
    let mut v = testkit::applied(store, g, None, &held_by(holder, token)).await;
    for _ in 0..2 {
        v = testkit::applied(store, g, Some(v), &held_by(holder, token)).await;
    }
    v
}

/// The old leader `old` writes `g` three times as `a` with token 3
/// ([`written_three_times`]), then the node is deleted by hand. Returns
/// the version `old` remembers.
async fn written_three_times_then_deleted(
    old: &ZkStore,
    raw: &common::Raw,
    g: &GroupName,
) -> Version {
    let v = written_three_times(old, g, "a", 3).await;
    raw.delete_all(g).await;
    v
}

/// Panics unless the old handle's renewal at `v`, the version of the
/// node before it was deleted, conflicts.
async fn stale_renewal_conflicts(old: &ZkStore, g: &GroupName, v: Version) {
    testkit::conflicts(
        old,
        g,
        Some(v),
        &held_by("a", 3),
        "a renewal of the deleted node applied to the new one",
    )
    .await;
}

/// Creates `g`'s node again by hand, with `acls`, holding another
/// candidate's record, and writes it up to data version 2, the version
/// the old node had.
async fn recreated_by_hand(raw: &common::Raw, g: &GroupName, acls: zk::Acls<'_>) {
    let path = raw.path(g);
    let intruder = held_by("b", 9).encode();
    let options = zk::CreateMode::Persistent.with_acls(acls);
    raw.client.create(&path, &intruder, &options).await.unwrap();
    for _ in 0..2 {
        raw.client.set_data(&path, &intruder, None).await.unwrap();
    }
}

async fn setup(label: &str) -> Option<(ZkStore, common::Raw, String, GroupName)> {
    let server = testkit::server_url("TENURE_TEST_ZOOKEEPER")?;
    let prefix = common::unique_prefix(label);
    let url = format!("{server}{prefix}");
    let store = ZkStore::connect(&url).await.unwrap();
    let raw = common::Raw::connect(&server, &prefix).await;
    Some((store, raw, url, GroupName::new("jobs").unwrap()))
}

/// The old leader's handle remembers the node at data version 2. The node
/// is deleted and created again by hand, and written up to data version 2
/// again: the old handle's renewal (a `setData` at data version 2 would
/// apply) must conflict, and leave the new node's record alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_write_never_applies_to_a_node_created_again() {
    let Some((old, raw, _, g)) = setup("recreated").await else {
        return;
    };
    let v = written_three_times_then_deleted(&old, &raw, &g).await;
    recreated_by_hand(&raw, &g, zk::Acls::anyone_all()).await;
    let path = raw.path(&g);
    let (_, stat) = raw.client.get_data(&path).await.unwrap();
    assert_eq!(stat.version, 2, "the new node is at the old data version");

    stale_renewal_conflicts(&old, &g, v).await;
    let now = old.read(&g).await.unwrap().expect("the new node");
    assert_eq!(now.record.holder_id(), Some("b"));
    // The new node is written through tenure as usual.
    let w = testkit::applied(&old, &g, Some(now.version), &held_by("c", 10)).await;
    assert!(w > now.version);
    testkit::conflicts(
        &old,
        &g,
        Some(now.version),
        &held_by("a", 3),
        "the old handle's write on the version it read before",
    )
    .await;
}

/// The same with the node created again by tenure (a candidate that finds
/// it gone): the old handle's renewal conflicts.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_write_never_applies_to_a_node_tenure_created_again() {
    let Some((old, raw, url, g)) = setup("recreated-by-tenure").await else {
        return;
    };
    let v = written_three_times_then_deleted(&old, &raw, &g).await;
    let other = ZkStore::connect(&url).await.unwrap();
    let gone = other.read(&g).await.unwrap().expect("a released record");
    let token = gone.record.token + 1;
    let mut w = testkit::applied(&other, &g, Some(gone.version), &held_by("b", token)).await;
    for _ in 0..2 {
        w = testkit::applied(&other, &g, Some(w), &held_by("b", token)).await;
    }
    stale_renewal_conflicts(&old, &g, v).await;
    let now = other.read(&g).await.unwrap().expect("the new node");
    assert_eq!((now.version, now.record.holder_id()), (w, Some("b")));
}

/// After the node holding token 5 was deleted, the group reads (alone, in
/// a batch) as released at a token above 5, never as "never written"
/// (whose next token would be 1); a write with that version creates the
/// node, once; a create expecting no record conflicts.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_node_reads_as_released_above_its_tokens() {
    let Some((store, raw, url, g)) = setup("token-floor").await else {
        return;
    };
    let v = testkit::applied(&store, &g, None, &held_by("a", 5)).await;
    testkit::applied(&store, &g, Some(v), &held_by("a", 5)).await;
    raw.delete_all(&g).await;

    let fresh = ZkStore::connect(&url).await.unwrap();
    let gone = fresh
        .read(&g)
        .await
        .unwrap()
        .expect("a deleted node reads as released, not as never written");
    assert_eq!(gone.record.holder, None);
    assert!(gone.record.token > 5, "token floor {}", gone.record.token);
    let batch = fresh.read_many(std::slice::from_ref(&g)).await.unwrap();
    assert_eq!(
        batch.into_iter().next().unwrap().unwrap(),
        Some(gone.clone())
    );
    testkit::conflicts(
        &fresh,
        &g,
        None,
        &held_by("b", 1),
        "expecting no record where a released one reads",
    )
    .await;

    let next = held_by("b", gone.record.token + 1);
    let w = testkit::applied(&fresh, &g, Some(gone.version), &next).await;
    testkit::conflicts(
        &store,
        &g,
        Some(gone.version),
        &held_by("c", gone.record.token + 1),
        "the floor's version was used",
    )
    .await;
    let now = store.read(&g).await.unwrap().unwrap();
    assert_eq!((now.version, &now.record), (w, &next));

    // A group never written under the same prefix node reads at the floor
    // too: the prefix node cannot tell which child was deleted.
    let other = GroupName::new("never").unwrap();
    let floor = fresh.read(&other).await.unwrap().expect("released");
    assert!(floor.record.token > 5);
}

/// End to end: the term after a deletion gets a higher token than the
/// term before it (not 1 again).
#[tokio::test(flavor = "multi_thread")]
async fn the_term_after_a_deletion_gets_a_higher_token() {
    let Some((store, raw, url, g)) = setup("elector").await else {
        return;
    };
    let (term, within) = (Duration::from_secs(2), Duration::from_secs(15));
    let a = scenarios::elector(store, &g, "a", term);
    let before = tokio::time::timeout(within, a.wait_for_leadership())
        .await
        .expect("a leads")
        .unwrap()
        .token();
    a.shutdown().await;
    raw.delete_all(&g).await;

    let b = scenarios::elector(ZkStore::connect(&url).await.unwrap(), &g, "b", term);
    let after = tokio::time::timeout(within, b.wait_for_leadership())
        .await
        .expect("b leads")
        .unwrap()
        .token();
    assert!(after > before, "token {after} after {before}");
    b.shutdown().await;
}

/// A node created again by hand whose ACL lets anyone create children but
/// not delete them, written up to the old node's data version. The old
/// leader's renewal finds no guard of its incarnation; it must not leave
/// one under the new node (which it could not delete again): another
/// handle that remembers the old node at that data version would then
/// write over the new one.
#[tokio::test(flavor = "multi_thread")]
async fn no_guard_of_an_old_incarnation_is_left_under_a_node_created_again() {
    let Some((old, raw, url, g)) = setup("wrong-guard").await else {
        return;
    };
    let v = written_three_times(&old, &g, "a", 3).await;
    // A second handle that remembers the same version of the old node.
    let other = ZkStore::connect(&url).await.unwrap();
    assert_eq!(other.read(&g).await.unwrap().unwrap().version, v);

    raw.delete_all(&g).await;
    let no_delete = [zk::Acl::new(
        zk::Permission::READ | zk::Permission::WRITE | zk::Permission::CREATE,
        zk::AuthId::anyone(),
    )];
    recreated_by_hand(&raw, &g, zk::Acls::new(&no_delete)).await;
    let path = raw.path(&g);

    for (who, store) in [("the old leader", &old), ("another handle", &other)] {
        testkit::conflicts(
            store,
            &g,
            Some(v),
            &held_by("a", 3),
            &format!("{who}: a write of the deleted node applied to the new one"),
        )
        .await;
    }
    let now = raw.get(&g).await.expect("the new node");
    assert_eq!(LeaseRecord::decode(&now).unwrap().holder_id(), Some("b"));
    assert_eq!(
        raw.client.list_children(&path).await.unwrap(),
        Vec::<String>::new(),
        "a guard of the old incarnation under the new node"
    );
}
