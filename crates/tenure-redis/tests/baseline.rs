//! The naive loop `tenure bench --renewal-cost` measures tenure against,
//! and the server's CPU read from `INFO`.

use std::time::Duration;

use tenure_redis::baseline::{server_cpu, NaiveLoop};
use tenure_testkit as testkit;

/// 50 leases, each on a task of its own, all held and renewed every third
/// of the term; the server's CPU time is read and only rises.
#[tokio::test(flavor = "multi_thread")]
async fn the_naive_loop_holds_and_renews_its_keys() {
    let Some(url) = testkit::server_url("TENURE_TEST_REDIS") else {
        return;
    };
    let prefix = format!("tenure-naive-{:x}-", testkit::unique_suffix());
    let before = server_cpu(&url).await.expect("INFO cpu");
    let naive = NaiveLoop::start(&url, &prefix, "a", 50, Duration::from_secs(3))
        .await
        .expect("start");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while naive.held() < 50 || naive.renewals() < 50 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "held {} renewed {}",
            naive.held(),
            naive.renewals()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A second owner takes none of the keys while the first renews them.
    let rival = NaiveLoop::start(&url, &prefix, "b", 50, Duration::from_secs(3))
        .await
        .expect("start");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rival.held(), 0);
    assert_eq!(naive.held(), 50);
    rival.stop().await;
    naive.stop().await;
    let after = server_cpu(&url).await.expect("INFO cpu");
    assert!(after >= before, "{before:?} then {after:?}");
}
