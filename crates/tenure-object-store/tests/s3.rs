//! The object store on S3, against moto (`scripts/servers.sh` starts it;
//! `TENURE_TEST_S3` names it): the conformance suite, the shared
//! scenarios, the objects as the crate docs describe them, and hostile
//! objects in the bucket.

use tenure::{LeaseStore, LeaseView, RecordError, StoreError, Version};
use tenure_object_store::object_store::path::Path;
use tenure_object_store::object_store::{ObjectStoreExt, PutPayload};
use tenure_object_store::BucketStore;
use tenure_testkit::{self as testkit, held_by, released, scenarios, TcpProxy};

mod support;
use support::{endpoint, own_prefix_and_group, raw_object, store, unique_prefix, url, BUCKET};

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(e) = endpoint() else { return };
    support::create_bucket(&e, BUCKET).await;
    let harness =
        support::conformance_harness(url(&e, BUCKET, &unique_prefix("conformance"))).await;
    testkit::run_conformance(&harness).await;
}

/// The object as the crate docs show it: the record's fields and
/// `store_version`, first from the clock, then one more per write.
#[tokio::test(flavor = "multi_thread")]
async fn the_object_holds_the_record_and_its_version_counter() {
    let Some(e) = endpoint() else { return };
    let (prefix, g) = own_prefix_and_group("object");
    let s = store(&e, &prefix).await;
    let before = tenure::WallTime::now().as_millis() * 1000;
    let v1 = testkit::applied(&s, &g, None, &held_by("a", 1)).await;
    assert!(
        v1.0 >= before,
        "the first version comes from the clock: {v1} < {before}"
    );
    let o = raw_object(&s, &g).await.expect("the object");
    assert_eq!(o["store_version"], v1.0);
    assert_eq!(o["holder"]["id"], "a");
    assert_eq!(o["token"], 1);
    assert_eq!(o["v"], 1);
    assert_eq!(s.object_key(&g), format!("{prefix}/{g}"));

    let v2 = testkit::applied(&s, &g, Some(v1), &released(1)).await;
    assert_eq!(v2, Version(v1.0 + 1));
    let o = raw_object(&s, &g).await.unwrap();
    assert_eq!(o["store_version"], v2.0);
    assert!(o["holder"].is_null(), "{o}");
    assert_eq!(o["token"], 1, "a release keeps the token");
}

/// Writing the same record twice gives two objects with different
/// contents (the counter), so different ETags: a handle holding the first
/// version is refused, as an ETag-only version (S3's ETag is the MD5 of
/// the contents) would not do.
#[tokio::test(flavor = "multi_thread")]
async fn identical_records_never_bring_an_etag_back() {
    let Some(e) = endpoint() else { return };
    let (prefix, g) = own_prefix_and_group("aba");
    let a = store(&e, &prefix).await;
    let b = store(&e, &prefix).await;
    let rec = held_by("a", 1);
    let v1 = testkit::applied(&a, &g, None, &rec).await;
    let key = Path::parse(a.object_key(&g)).unwrap();
    let etag1 = a.object_store().head(&key).await.unwrap().e_tag;
    // b replaces it with the very same record.
    assert_eq!(b.read(&g).await.unwrap().unwrap().version, v1);
    let v2 = testkit::applied(&b, &g, Some(v1), &rec).await;
    let etag2 = a.object_store().head(&key).await.unwrap().e_tag;
    assert_ne!(etag1, etag2, "same record, new contents, new ETag");
    // a still remembers v1 and its ETag: its write is refused.
    testkit::conflicts(
        &a,
        &g,
        Some(v1),
        &rec,
        "a write on the version and ETag a remembers",
    )
    .await;
    assert_eq!(a.read(&g).await.unwrap().unwrap().version, v2);
}

/// A version this handle never saw is checked with a GET first: a wrong
/// guess conflicts, the right one (read by another handle) applies.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_read_elsewhere_is_checked_before_the_write() {
    let Some(e) = endpoint() else { return };
    let (prefix, g) = own_prefix_and_group("elsewhere");
    let writer = store(&e, &prefix).await;
    let v = testkit::applied(&writer, &g, None, &held_by("a", 1)).await;
    let by_b = held_by("b", 2);
    let fresh = store(&e, &prefix).await;
    for wrong in [Version(v.0 - 1), Version(v.0 + 1), Version(1)] {
        testkit::conflicts(&fresh, &g, Some(wrong), &by_b, &format!("{wrong}")).await;
    }
    let fresh = store(&e, &prefix).await;
    testkit::applied(&fresh, &g, Some(v), &by_b).await;
    assert_eq!(writer.read(&g).await.unwrap().unwrap().record.token, 2);
}

/// Objects the store did not write: a huge one at a group's key is refused
/// by its size, foreign keys under the prefix are not groups, and a
/// foreign object at a group key lists as that group's error.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_objects_are_refused_and_never_listed_as_groups() {
    let Some(e) = endpoint() else { return };
    let s = store(&e, &unique_prefix("hostile")).await;
    let raw = s.object_store().clone();
    let put = |key: String, bytes: Vec<u8>| {
        let raw = raw.clone();
        async move {
            raw.put(&Path::parse(key).unwrap(), PutPayload::from(bytes))
                .await
                .unwrap();
        }
    };
    let huge = testkit::unique_group("huge");
    put(s.object_key(&huge), vec![b' '; 1 << 20]).await;
    match s.read(&huge).await {
        Err(StoreError::Record {
            source: RecordError::Foreign { detail },
            ..
        }) => assert!(detail.contains("1048576 bytes"), "{detail}"),
        other => panic!("{other:?}"),
    }
    testkit::conflicts(&s, &huge, None, &held_by("a", 1), "never written over").await;

    let ok = testkit::unique_group("ok");
    s.compare_and_swap(&ok, None, &held_by("a", 1))
        .await
        .unwrap();
    let dir = s.object_key(&ok).rsplit_once('/').unwrap().0.to_owned();
    put(format!("{dir}/nested/object"), b"{}".to_vec()).await;
    put(format!("{dir}/not%41canonical"), b"{}".to_vec()).await;
    put(format!("{dir}/bad%ZZescape"), b"{}".to_vec()).await;
    let listed = s.list("").await.unwrap();
    let mut names: Vec<String> = listed.iter().map(|l| l.group.to_string()).collect();
    names.sort();
    let mut want = vec![huge.to_string(), ok.to_string()];
    want.sort();
    assert_eq!(names, want);
    for l in &listed {
        assert_eq!(l.record.is_err(), l.group == huge, "{l:?}");
    }
}

/// The shared scenario: a leader cut off from moto by a TCP proxy ends
/// its term before the other candidate (polling) is elected.
#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_leader_stops_first() {
    let Some(e) = endpoint() else { return };
    let prefix = unique_prefix("cutoff");
    let direct = store(&e, &prefix).await;
    let (proxy, via) = behind_a_proxy(&e, &prefix).await;
    let cut = scenarios::cut_off_leader_stops_first(via, direct, &proxy).await;
    eprintln!("S3 (moto), cut-off leader: {cut:?}");
}

/// A graceful stop releases the lease; the waiting candidate, polling,
/// takes it within one poll (the store has no change feed), far sooner
/// than a crashed leader's term.
#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_stop_hands_over_within_one_poll() {
    let Some(e) = endpoint() else { return };
    let prefix = unique_prefix("handover");
    let (a, b) = (store(&e, &prefix).await, store(&e, &prefix).await);
    let handed = scenarios::graceful_stop_hands_over_within_one_poll(a, b, "S3 (moto)").await;
    handed.successor.shutdown().await;
}

/// A crashed leader (its store cut off for good) is replaced within the
/// crash bound, never before its term ended.
#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_leader_is_replaced_within_the_bound() {
    let Some(e) = endpoint() else { return };
    let prefix = unique_prefix("crash");
    let (proxy, via) = behind_a_proxy(&e, &prefix).await;
    let direct = store(&e, &prefix).await;
    scenarios::crashed_leader_replaced_within_the_bound(via, direct, &proxy, "S3 (moto)").await;
}

/// A store on `prefix` that reaches moto through a proxy a test can cut.
async fn behind_a_proxy(endpoint: &str, prefix: &str) -> (TcpProxy, BucketStore) {
    let upstream = endpoint.trim_start_matches("http://").parse().unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let via = BucketStore::connect(&url(&format!("http://{}", proxy.addr()), BUCKET, prefix))
        .await
        .unwrap();
    (proxy, via)
}
