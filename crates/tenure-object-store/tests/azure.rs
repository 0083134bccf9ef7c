//! The object store on Azure Blob Storage, against Azurite
//! (`scripts/servers.sh` starts it and creates the container;
//! `TENURE_TEST_AZURE` names it): Azurite answers `If-None-Match: *` on an
//! existing blob with 409 and a stale `If-Match` with 412, as Azure does,
//! so the whole conformance suite and the hand-over run on it too.

use std::time::{Duration, Instant};

use tenure::testkit::{self, scenarios, TcpProxy, TermLog};
use tenure::Config;
use tenure_object_store::BucketStore;

mod support;
use support::{unique_prefix, BucketHarness};

/// The container `scripts/servers.sh` creates.
const CONTAINER: &str = "tenure-test";

fn url(endpoint: &str, prefix: &str) -> String {
    format!("az://{CONTAINER}/{prefix}?emulator=true&endpoint={endpoint}")
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(e) = testkit::server_url("TENURE_TEST_AZURE") else {
        return;
    };
    testkit::run_conformance(&BucketHarness {
        url: url(&e, &unique_prefix("conformance")),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_stop_hands_over_within_one_poll() {
    let Some(e) = testkit::server_url("TENURE_TEST_AZURE") else {
        return;
    };
    let u = url(&e, &unique_prefix("handover"));
    let g = testkit::unique_group("handover");
    let term = Config::default().term;
    let a = scenarios::elector(BucketStore::connect(&u).await.unwrap(), &g, "a", term);
    let a_term = a.wait_for_leadership().await.unwrap();
    let b = scenarios::elector(BucketStore::connect(&u).await.unwrap(), &g, "b", term);
    let log = TermLog::watch(&[&a, &b]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    a.shutdown().await;
    let b_term = tokio::time::timeout(Duration::from_secs(15), b.wait_for_leadership())
        .await
        .expect("b takes over")
        .unwrap();
    let took = t0.elapsed();
    let poll = b.timing().bounds().graceful_failover_polling;
    eprintln!("Azure (Azurite), hand-over after a graceful stop: {took:?} (one poll: {poll:?})");
    assert!(took < poll + Duration::from_secs(1), "{took:?}");
    assert_eq!(b_term.token(), a_term.token() + 1);
    log.check();
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_leader_stops_first() {
    let Some(e) = testkit::server_url("TENURE_TEST_AZURE") else {
        return;
    };
    let prefix = unique_prefix("cutoff");
    let direct = BucketStore::connect(&url(&e, &prefix)).await.unwrap();
    let proxy = TcpProxy::start(e.trim_start_matches("http://").parse().unwrap())
        .await
        .unwrap();
    let via = BucketStore::connect(&url(&format!("http://{}", proxy.addr()), &prefix))
        .await
        .unwrap();
    let cut = scenarios::cut_off_leader_stops_first(via, direct, &proxy).await;
    eprintln!("Azure (Azurite), cut-off leader: {cut:?}");
}
