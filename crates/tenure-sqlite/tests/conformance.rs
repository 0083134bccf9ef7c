//! The tenure conformance suite against a SQLite file.

mod common;

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let scratch = common::Scratch::new("conformance");
    let harness = scratch.harness();
    tenure_testkit::run_conformance(&harness).await;
}

/// Run twice against the same file: the suite's group names do not collide
/// with an earlier run's, as against a persistent server.
#[tokio::test(flavor = "multi_thread")]
async fn conformance_twice_on_one_file() {
    let scratch = common::Scratch::new("conformance-twice");
    let harness = scratch.harness();
    tenure_testkit::run_conformance(&harness).await;
    tenure_testkit::run_conformance(&harness).await;
}
