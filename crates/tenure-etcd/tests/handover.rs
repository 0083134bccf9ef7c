//! A graceful stop hands the lease over within one round trip, through the
//! watch, not after a poll.

mod common;

use std::time::{Duration, Instant};

use tenure::{testkit, Role};
use tenure_etcd::EtcdStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_release_is_taken_over_at_once_not_after_a_poll() {
    let Some(server) = testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    let store_a = EtcdStore::connect(&server).await.unwrap();
    let store_b = EtcdStore::connect(&server).await.unwrap();
    let group = testkit::unique_group("handover");
    // A 10 s term: candidates poll every 2.5 s + up to 1 s of jitter.
    let term = Duration::from_secs(10);
    let a = common::elector(store_a, &group, "a", term);
    let a_term = tokio::time::timeout(Duration::from_secs(5), a.wait_for_leadership())
        .await
        .expect("a elected")
        .unwrap();
    let b = common::elector(store_b, &group, "b", term);
    let poll = b.timing().bounds().graceful_failover_polling;
    assert!(poll >= Duration::from_millis(3500), "{poll:?}");
    let mut roles = b.watch_role();
    tokio::time::timeout(
        Duration::from_secs(5),
        roles.wait_for(|r| matches!(r, Role::Follower { .. })),
    )
    .await
    .expect("b follows a")
    .unwrap();
    // Let b's watch start.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let t0 = Instant::now();
    a.shutdown().await;
    let released = t0.elapsed();
    let b_term = tokio::time::timeout(Duration::from_secs(10), b.wait_for_leadership())
        .await
        .expect("b elected")
        .unwrap();
    let handover = t0.elapsed();
    eprintln!("etcd hand-over: release took {released:?}, b elected {handover:?} after a.shutdown() began (poll period {poll:?})");
    assert!(
        handover < Duration::from_millis(300),
        "b took {handover:?} to take over; a poll would take up to {poll:?}"
    );
    assert_eq!(b_term.token(), a_term.token() + 1);
    b.shutdown().await;
}
