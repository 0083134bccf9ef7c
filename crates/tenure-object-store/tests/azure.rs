//! The object store on Azure Blob Storage, against Azurite
//! (`scripts/servers.sh` starts it and creates the container;
//! `TENURE_TEST_AZURE` names it): Azurite answers `If-None-Match: *` on an
//! existing blob with 409 and a stale `If-Match` with 412, as Azure does,
//! so the whole conformance suite and the hand-over run on it too.

use tenure_object_store::BucketStore;
use tenure_testkit::{self as testkit, scenarios, TcpProxy};

mod support;
use support::unique_prefix;

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
    let harness = support::conformance_harness(url(&e, &unique_prefix("conformance"))).await;
    testkit::run_conformance(&harness).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_stop_hands_over_within_one_poll() {
    let Some(e) = testkit::server_url("TENURE_TEST_AZURE") else {
        return;
    };
    let u = url(&e, &unique_prefix("handover"));
    let a = BucketStore::connect(&u).await.unwrap();
    let b = BucketStore::connect(&u).await.unwrap();
    let handed = scenarios::graceful_stop_hands_over_within_one_poll(a, b, "Azure (Azurite)").await;
    handed.successor.shutdown().await;
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
