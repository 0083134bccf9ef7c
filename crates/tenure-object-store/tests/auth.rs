//! Signed requests against a moto that checks signatures: moto's IAM
//! authentication, switched on after the few unsigned requests that
//! create a user, its access key, its policy and the bucket
//! (`INITIAL_NO_AUTH_ACTION_COUNT`). The right key reads and writes; a
//! wrong secret, or an access key id moto does not know, is refused with
//! a message naming the fix and never the secret.
//!
//! moto (5.x) computes a wrong signature for LISTs with a prefix
//! (getmoto/moto#5948), so these stores are opened without the
//! connection check (a LIST) and exercise the lease operations, GET and
//! conditional PUT.

use tenure::store::CasOutcome;
use tenure::{LeaseStore, LeaseView, StoreError};
use tenure_object_store::{BucketOptions, BucketStore};
use tenure_testkit::{self as testkit, held_by};

mod support;
use support::{endpoint, raw_request, PrivateMoto};

/// What the unsigned IAM requests must look like for moto's router.
const IAM: (&str, &str) = (
    "Authorization",
    "AWS4-HMAC-SHA256 Credential=AKIDBOOTSTRAP/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0",
);

fn between<'a>(text: &'a str, open: &str, close: &str) -> &'a str {
    let start = text.find(open).expect(open) + open.len();
    let end = text[start..].find(close).expect(close) + start;
    &text[start..end]
}

async fn iam(endpoint: &str, form: &str) -> String {
    let reply = raw_request(
        endpoint,
        "POST",
        "/",
        &[IAM, ("Content-Type", "application/x-www-form-urlencoded")],
        form,
    )
    .await;
    assert!(support::is_ok(&reply), "{form}: {reply}");
    reply
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn open(endpoint: &str, key_id: &str, secret: &str) -> BucketStore {
    let url = format!(
        "s3://tenure-auth/t?region=us-east-1&endpoint={endpoint}&access_key_id={}&secret_access_key={}",
        encode(key_id),
        encode(secret)
    );
    BucketStore::open(BucketOptions::from_url(&url).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn signed_requests_pass_and_wrong_keys_are_refused_clearly() {
    if endpoint().is_none() {
        return; // the shared server is the sign that moto is installed
    }
    let moto = PrivateMoto::start(&[("INITIAL_NO_AUTH_ACTION_COUNT", "4")]).await;
    let e = moto.endpoint();
    iam(&e, "Action=CreateUser&UserName=tenure&Version=2010-05-08").await;
    let key = iam(
        &e,
        "Action=CreateAccessKey&UserName=tenure&Version=2010-05-08",
    )
    .await;
    let (key_id, secret) = (
        between(&key, "<AccessKeyId>", "</AccessKeyId>").to_owned(),
        between(&key, "<SecretAccessKey>", "</SecretAccessKey>").to_owned(),
    );
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}"#;
    iam(
        &e,
        &format!(
            "Action=PutUserPolicy&UserName=tenure&PolicyName=leases&PolicyDocument={}&Version=2010-05-08",
            encode(policy)
        ),
    )
    .await;
    support::create_bucket(&e, "tenure-auth").await;
    // From here on moto checks every request's signature.

    let g = testkit::unique_group("auth");
    let good = open(&e, &key_id, &secret);
    let CasOutcome::Applied(v) = good
        .compare_and_swap(&g, None, &held_by("a", 1))
        .await
        .expect("a signed create")
    else {
        panic!("conflict")
    };
    let read = good.read(&g).await.expect("a signed read").unwrap();
    assert_eq!(read.version, v);
    testkit::applied(&good, &g, Some(v), &held_by("a", 1)).await;

    let wrong_secret = format!("{}x", &secret[..secret.len() - 1]);
    for (label, s, shown_secret) in [
        (
            "a wrong secret",
            open(&e, &key_id, &wrong_secret),
            wrong_secret.as_str(),
        ),
        (
            "an unknown access key id",
            open(&e, "AKIDNOBODYKNOWS0000", &secret),
            secret.as_str(),
        ),
    ] {
        for err in [
            s.read(&g).await.unwrap_err(),
            s.compare_and_swap(&g, None, &held_by("b", 2))
                .await
                .unwrap_err(),
        ] {
            assert!(
                matches!(err, StoreError::Misconfigured { .. }),
                "{label}: {err:?}"
            );
            let text = format!("{err} / {err:?} / {s:?}");
            assert!(text.contains("refused the credentials"), "{label}: {text}");
            assert!(
                !text.contains(shown_secret),
                "{label}: the secret leaked: {text}"
            );
        }
    }
    // Nothing was written by the refused handles.
    assert_eq!(
        good.read(&g).await.unwrap().unwrap().record.holder_id(),
        Some("a")
    );
}
