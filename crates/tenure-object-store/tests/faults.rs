//! How the store reads a server's failures, through a proxy to moto that
//! loses replies and answers with injected errors: a lost reply is a
//! timeout (the write may have applied), a refused condition a conflict,
//! a 5xx an unknown outcome, never retried; refusals of credentials,
//! permissions and buckets name the fix and never the secret.

use std::time::Duration;

use tenure::{LeaseStore, LeaseView, StoreError};
use tenure_object_store::{BucketOptions, BucketStore, BucketStoreError};
use tenure_testkit::{self as testkit, held_by};

mod support;
use support::{
    endpoint, options, own_prefix_and_group, store, unique_prefix, Fault, FaultProxy, BUCKET,
    ECHOED, SECRET,
};

/// A store through the proxy, with a short request timeout.
async fn through(proxy: &FaultProxy, prefix: &str, timeout: Duration) -> BucketStore {
    BucketStore::connect_with(options(&proxy.endpoint(), BUCKET, prefix).timeout(timeout))
        .await
        .expect("connect through the proxy")
}

/// A new fault proxy in front of `endpoint`, and a store on a prefix of
/// its own (named after `label`) that reaches the server through it, with
/// a 5 s operation timeout.
async fn behind_a_new_fault_proxy(endpoint: &str, label: &str) -> (FaultProxy, BucketStore) {
    let proxy = FaultProxy::start(endpoint).await;
    let s = through(&proxy, &unique_prefix(label), Duration::from_secs(5)).await;
    (proxy, s)
}

fn puts(proxy: &FaultProxy) -> usize {
    proxy
        .requests()
        .iter()
        .filter(|r| r.starts_with("PUT "))
        .count()
}

/// The reply to a conditional put is lost: the store reports a timeout
/// (not a conflict, not "not applied"), and the write did apply; the
/// request was sent once.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_reply_is_a_timeout_and_the_write_may_have_applied() {
    let Some(e) = endpoint() else { return };
    let (prefix, g) = own_prefix_and_group("lost");
    let direct = store(&e, &prefix).await;
    let proxy = FaultProxy::start(&e).await;
    let s = through(&proxy, &prefix, Duration::from_secs(1)).await;

    // A create whose reply is lost.
    proxy.push("PUT", Fault::SwallowReply);
    let e1 = s
        .compare_and_swap(&g, None, &held_by("a", 1))
        .await
        .unwrap_err();
    assert!(matches!(e1, StoreError::Timeout(_)), "{e1:?}");
    assert!(e1.is_transient());
    assert_eq!(puts(&proxy), 1, "sent once, never retried");
    let now = direct.read(&g).await.unwrap().expect("the create applied");
    assert_eq!(now.record.holder_id(), Some("a"));

    // A replacement whose reply is lost: same.
    proxy.push("PUT", Fault::SwallowReply);
    let e2 = s
        .compare_and_swap(&g, Some(now.version), &held_by("a", 2))
        .await
        .unwrap_err();
    assert!(matches!(e2, StoreError::Timeout(_)), "{e2:?}");
    assert_eq!(puts(&proxy), 2, "sent once, never retried");
    let after = direct.read(&g).await.unwrap().unwrap();
    assert_eq!(after.record.token, 2, "the replacement applied");
    assert_eq!(after.version.0, now.version.0 + 1);
    // The handle forgot what it saw: a write on the old version conflicts
    // (the store reads first), it does not send a stale If-Match blindly.
    testkit::conflicts(
        &s,
        &g,
        Some(now.version),
        &held_by("a", 3),
        "a write on the version the handle forgot",
    )
    .await;
}

/// A 5xx is an unknown outcome (Unavailable), sent once; a 412 and S3's
/// 409 for concurrent conditional writes are conflicts, sent once.
#[tokio::test(flavor = "multi_thread")]
async fn server_errors_and_refused_conditions() {
    let Some(e) = endpoint() else { return };
    let (proxy, s) = behind_a_new_fault_proxy(&e, "status").await;
    let g = testkit::unique_group("status");
    let v = testkit::applied(&s, &g, None, &held_by("a", 1)).await;
    let sent = puts(&proxy);

    for (status, code) in [(500, "InternalError"), (503, "SlowDown")] {
        proxy.push("PUT", Fault::Reply { status, code });
        let err = s
            .compare_and_swap(&g, Some(v), &held_by("a", 1))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Unavailable { .. }),
            "{status}: {err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&status.to_string()) && text.contains(code),
            "{text}"
        );
        assert!(text.contains("may or may not"), "{text}");
    }
    assert_eq!(puts(&proxy), sent + 2, "each sent once, never retried");

    // The record is untouched (the injected replies never reached moto).
    let v = s.read(&g).await.unwrap().unwrap().version;
    for (status, code) in [
        (412, "PreconditionFailed"),
        (409, "ConditionalRequestConflict"),
    ] {
        proxy.push("PUT", Fault::Reply { status, code });
        testkit::conflicts(&s, &g, Some(v), &held_by("a", 1), &format!("{status}")).await;
    }
    assert_eq!(puts(&proxy), sent + 4, "never retried");

    // A 5xx on a read is transient too.
    proxy.push(
        "GET",
        Fault::Reply {
            status: 500,
            code: "InternalError",
        },
    );
    let err = s.read(&g).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
}

/// Refused keys, missing permissions, a skewed clock, a missing bucket
/// and a bucket in another region: each its own misconfiguration naming
/// the fix, and never the secret, in the message or in `Debug`.
#[tokio::test(flavor = "multi_thread")]
async fn refusals_name_the_fix_and_never_the_secret() {
    let Some(e) = endpoint() else { return };
    let (proxy, s) = behind_a_new_fault_proxy(&e, "refused").await;
    let g = testkit::unique_group("refused");
    // What the refusals of the keys and of the permissions name.
    const KEYS: &str = "refused the credentials";
    const GRANTS: &str = "s3:GetObject, s3:PutObject and s3:ListBucket";
    let cases: [(&str, u16, &str, &str); 7] = [
        ("PUT", 403, "SignatureDoesNotMatch", KEYS),
        ("GET", 400, "InvalidToken", KEYS),
        ("GET", 403, "InvalidAccessKeyId", KEYS),
        ("PUT", 403, "AccessDenied", GRANTS),
        ("GET", 403, "RequestTimeTooSkewed", "clock"),
        ("GET", 404, "NoSuchBucket", "does not exist"),
        ("GET", 301, "PermanentRedirect", "region="),
    ];
    for (method, status, code, says) in cases {
        proxy.push(method, Fault::Reply { status, code });
        let err = if method == "PUT" {
            s.compare_and_swap(&g, None, &held_by("a", 1))
                .await
                .unwrap_err()
        } else {
            s.read(&g).await.unwrap_err()
        };
        assert!(
            matches!(err, StoreError::Misconfigured { .. }),
            "{code}: {err:?}"
        );
        let text = format!("{err} / {err:?}");
        assert!(text.contains(says), "{code}: {text}");
        assert!(!text.contains(SECRET), "{code}: the secret leaked: {text}");
        assert!(
            !text.contains(ECHOED),
            "{code}: the server's echo shown: {text}"
        );
        assert!(!text.contains("tenure-test-secret"), "{code}: {text}");
    }
    assert!(!format!("{s:?}").contains("tenure-test-secret"));
}

/// Connecting to a bucket that does not exist, or to nothing at all.
#[tokio::test(flavor = "multi_thread")]
async fn connecting_to_a_missing_bucket_or_no_server_says_so() {
    let Some(e) = endpoint() else { return };
    let err = BucketStore::connect_with(options(&e, "tenure-no-such-bucket", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            BucketStoreError::Store(StoreError::Misconfigured { .. })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("does not exist"), "{err}");

    let port = testkit::free_port();
    let err = BucketStore::connect_with(
        BucketOptions::from_url(&support::url(
            &format!("http://127.0.0.1:{port}"),
            BUCKET,
            "x",
        ))
        .unwrap(),
    )
    .await
    .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("cannot connect"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("tenure-test-secret"), "{text}");
}
