//! moto keeps everything in memory: a restart loses the bucket and every
//! lease in it. What the crate docs promise, on a moto of the test's own:
//!
//! * while the server is down, operations fail as transient, naming it;
//! * while the bucket is gone, every operation is refused as
//!   misconfigured, naming the missing bucket: nobody is elected, nothing
//!   is written;
//! * once an operator recreates the bucket, candidates that ran through
//!   the loss issue tokens above every token they saw;
//! * a process started after a loss knows nothing of the old tokens and
//!   starts again at token 1 (the documented limit).

use std::time::Duration;

use tenure::{LeaseStore, LeaseView};
use tenure_object_store::BucketStore;
use tenure_testkit::{self as testkit, scenarios};

mod support;
use support::{create_bucket, endpoint, options, PrivateMoto};

const BUCKET: &str = "tenure-restart";

async fn store(moto: &PrivateMoto) -> BucketStore {
    BucketStore::connect_with(
        options(&moto.endpoint(), BUCKET, "leases").timeout(Duration::from_secs(2)),
    )
    .await
    .expect("connect")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_moto_loses_the_bucket_and_no_token_goes_back_in_running_candidates() {
    if endpoint().is_none() {
        return; // the shared server is the sign that moto is installed
    }
    let mut moto = PrivateMoto::start(&[]).await;
    create_bucket(&moto.endpoint(), BUCKET).await;
    let g = testkit::unique_group("restart");
    let term = Duration::from_secs(2);
    let a = scenarios::elector(store(&moto).await, &g, "a", term);
    let b = scenarios::elector(store(&moto).await, &g, "b", term);
    let first = scenarios::either_leads(&a, &b, Duration::from_secs(10), "someone leads").await;
    let old_token = first.token();
    let probe = store(&moto).await;

    // Down: transient, naming the server.
    moto.kill().await;
    let err = probe.read(&g).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("127.0.0.1:{}", moto.port)),
        "{err}"
    );
    tokio::time::timeout(term * 2, first.ended())
        .await
        .expect("the leader's term ended while the store was down");

    // Back, empty: the bucket is gone; every operation is refused.
    moto.start_again().await;
    let err = probe.read(&g).await.unwrap_err();
    testkit::assert_misconfigured(&err, "does not exist");
    let err = probe
        .compare_and_swap(&g, None, &testkit::held_by("x", 1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    tokio::time::sleep(term * 3).await;
    assert!(!a.is_leader() && !b.is_leader(), "elected without a bucket");

    // The operator recreates the bucket: the running candidates go on
    // above the tokens they saw.
    create_bucket(&moto.endpoint(), BUCKET).await;
    let next = scenarios::either_leads(
        &a,
        &b,
        Duration::from_secs(20),
        "someone leads once the bucket is back",
    )
    .await;
    eprintln!(
        "after the loss: token {} (before: {old_token})",
        next.token()
    );
    assert!(
        next.token() > old_token,
        "a token went back: {} <= {old_token}",
        next.token()
    );
    a.shutdown().await;
    b.shutdown().await;

    // A second loss with nobody running: a fresh process starts at 1.
    moto.kill().await;
    moto.start_again().await;
    create_bucket(&moto.endpoint(), BUCKET).await;
    let c = scenarios::elector(store(&moto).await, &g, "c", term);
    let fresh = tokio::time::timeout(Duration::from_secs(10), c.wait_for_leadership())
        .await
        .expect("c leads")
        .unwrap();
    assert_eq!(
        fresh.token(),
        1,
        "documented: a process started after the loss knows nothing of the old tokens"
    );
    c.shutdown().await;
}
