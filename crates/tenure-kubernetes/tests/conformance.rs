//! The tenure conformance suite against the Kubernetes API server of
//! `TENURE_TEST_KUBERNETES` (the repository's test server, or a cluster).

mod common;

use tenure_kubernetes::KubernetesStore;
use tenure_testkit::{self as testkit, Feeds, UrlHarness};

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(kubeconfig) = common::kubeconfig() else {
        return;
    };
    let label = common::run_label();
    let url = common::url(&kubeconfig, &label, None);
    let raw = common::KubeRaw::new(&kubeconfig, &label).await;
    // A watch per Lease (observers) and one of the namespace's Leases
    // (engines): the feed cases fail, not skip, if either breaks.
    let harness = UrlHarness::new(url, KubernetesStore::connect, raw).promising(Feeds::ALL);
    testkit::run_conformance(&harness).await;
}
