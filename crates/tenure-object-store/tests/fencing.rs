//! Fencing an object with conditional writes (docs/fencing.md), against
//! moto: the example itself, and a stale writer caught between its read
//! and its conditional put.

mod support;

use tenure::fence::StaleToken;
use tenure_object_store::object_store::path::Path;
use tenure_object_store::object_store::ObjectStore;

#[allow(
    dead_code,
    reason = "its main() is for `cargo run --example fencing_s3`"
)]
#[path = "../examples/fencing_s3.rs"]
mod example;

/// Panics unless the example's `fenced_put` of `body` with `token` is
/// refused because the object holds `highest`.
async fn refused_as_stale(
    bucket: &dyn ObjectStore,
    path: &Path,
    token: u64,
    body: &str,
    highest: u64,
) {
    assert_eq!(
        example::fenced_put(bucket, path, token, body)
            .await
            .unwrap(),
        Err(StaleToken { token, highest }),
        "{body}"
    );
}

/// The example as `cargo run --example fencing_s3` runs it: A's late write
/// with token n after B wrote with n+1 is refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_example_refuses_the_leader_whose_term_ended() {
    let Some(endpoint) = support::endpoint() else {
        return;
    };
    support::create_bucket(&endpoint, support::BUCKET).await;
    let url = support::url(
        &endpoint,
        support::BUCKET,
        &support::unique_prefix("fencing"),
    );
    tenure_testkit::story_holds(example::run(&url)).await;
}

/// A read the object (token 4) before B wrote token 5; its put, on the
/// ETag it read, fails; reading again, it sees 5 and is refused. The
/// object keeps B's write throughout.
#[tokio::test]
async fn a_stale_writer_that_read_before_the_successor_wrote_is_caught_by_the_etag() {
    let Some(endpoint) = support::endpoint() else {
        return;
    };
    let prefix = support::unique_prefix("fencing");
    let store = support::store(&endpoint, &prefix).await;
    let bucket = store.object_store().as_ref();
    let path = Path::from(format!("{prefix}-data/report.json"));

    assert_eq!(
        example::fenced_put(bucket, &path, 4, "by A").await.unwrap(),
        Ok(()),
        "a new object"
    );
    assert_eq!(
        example::fenced_put(bucket, &path, 4, "by A again")
            .await
            .unwrap(),
        Ok(()),
        "the same term"
    );
    let read_by_a = example::read(bucket, &path).await.unwrap();
    assert_eq!(read_by_a.token, Some(4));

    assert_eq!(
        example::fenced_put(bucket, &path, 5, "by B").await.unwrap(),
        Ok(())
    );
    let put = example::put_if_unchanged(bucket, &path, read_by_a, 4, "by A, late")
        .await
        .unwrap();
    assert_eq!(
        put,
        Ok(false),
        "the ETag A read is gone: the put is refused, nothing written"
    );
    refused_as_stale(bucket, &path, 4, "by A, late", 5).await;
    let now = example::read(bucket, &path).await.unwrap();
    assert_eq!(now.token, Some(5));

    // Two writers that both found no object: the second create fails.
    let fresh = Path::from(format!("{prefix}-data/fresh.json"));
    let (first, second) = (
        example::read(bucket, &fresh).await.unwrap(),
        example::read(bucket, &fresh).await.unwrap(),
    );
    assert_eq!((first.token, second.token), (None, None));
    assert_eq!(
        example::put_if_unchanged(bucket, &fresh, first, 7, "first")
            .await
            .unwrap(),
        Ok(true)
    );
    assert_eq!(
        example::put_if_unchanged(bucket, &fresh, second, 6, "second")
            .await
            .unwrap(),
        Ok(false)
    );
    refused_as_stale(bucket, &fresh, 6, "second", 7).await;
}
