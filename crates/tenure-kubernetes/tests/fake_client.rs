//! The conformance suite against a second, independent Kubernetes: the
//! in-memory API of `kube-fake-client` (a port of controller-runtime's fake
//! client, written outside this repository), wherever its semantics allow.
//! A misreading of Kubernetes must then slip past two implementations
//! written by different people: the test server (`tenure-kube-testserver`)
//! and this one.
//!
//! Where its semantics do not allow, and what the test does about it:
//!
//! - It answers a refused request (a missing object, one that already
//!   exists, a stale `resourceVersion`) with an error of the client's
//!   transport, not with the `Status` response an API server sends. The
//!   [`StatusAnswers`] layer turns each such error into the `Status` that
//!   kube-apiserver answers (404 `NotFound`, 409 `AlreadyExists`, 409
//!   `Conflict`, 400 `BadRequest`), and passes everything else through
//!   unchanged: the decisions stay the fake's.
//! - Its check of a `resourceVersion` and its write take its lock twice, so
//!   two threads updating one object at once can both win (on a
//!   multi-threaded runtime the concurrency cases saw two of 16 racers
//!   apply one version, in 2 runs of 5). The suite runs on a
//!   current-thread runtime, where each request runs whole; the
//!   concurrency cases still interleave the racers at every await.
//! - It has no watch (a watch request is answered with a list), so the two
//!   feed cases are expected to fail, and only they.
//! - It checks less than kube-apiserver, so what the test server shows on
//!   these is not shown again here: it applies an update without a
//!   `resourceVersion` (the API server answers 422 for Leases), it
//!   overwrites a Lease whose `uid` differs from the update's (the API
//!   server answers 409, which tells the store a Lease was deleted and
//!   made again), and every list says `resourceVersion` "1".
//! - It ignores label selectors and `limit`: each run starts a fake of its
//!   own, which holds only this run's Leases (and one Lease in another
//!   namespace: the fake answers a list of a kind it holds nothing of with
//!   404, not with an empty list).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use kube::client::Body;
use serde_json::json;
use tenure::GroupName;
use tenure_kubernetes::{KubernetesOptions, KubernetesStore};
use tenure_testkit::{self as testkit, CaseOutcome, Harness, RawAccess};

mod common;

/// The feed cases: kube-fake-client 0.1 serves no watch.
const NEEDS_A_WATCH: [&str; 2] = ["changes_feed", "watch_reports_writes"];

/// The namespace of the fake's Leases.
const NAMESPACE: &str = "tenure-fake";

/// A kube client service in front of the fake's client that answers the
/// fake's refusals as the API server does (see the module docs).
#[derive(Clone)]
struct StatusAnswers {
    fake: kube::Client,
}

/// The `Status` kube-apiserver answers for the refusal `e`
/// (staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go:
/// NewNotFound, NewAlreadyExists, NewConflict, NewBadRequest).
fn status_of(e: &kube_fake_client::Error) -> http::Response<Body> {
    use kube_fake_client::Error as Fake;
    let (code, reason) = match e {
        Fake::NotFound { .. } => (404, "NotFound"),
        Fake::AlreadyExists { .. } => (409, "AlreadyExists"),
        Fake::Conflict(_) => (409, "Conflict"),
        Fake::InvalidRequest(_) => (400, "BadRequest"),
        _ => (500, "InternalError"),
    };
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": e.to_string(),
        "reason": reason,
        "code": code,
    });
    http::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string().into_bytes()))
        .expect("a status response from constant parts")
}

impl tower::Service<http::Request<Body>> for StatusAnswers {
    type Response = http::Response<Body>;
    type Error = tower::BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let fake = self.fake.clone();
        Box::pin(async move {
            match fake.send(request).await {
                Ok(response) => Ok(response),
                Err(kube::Error::Service(e)) => match e.downcast_ref::<kube_fake_client::Error>() {
                    Some(refusal) => Ok(status_of(refusal)),
                    None => Err(e),
                },
                Err(e) => Err(Box::new(e) as tower::BoxError),
            }
        })
    }
}

/// Every store handle of one run on one fake, and the raw Leases beside
/// them.
struct FakeHarness {
    client: kube::Client,
    raw: common::KubeRaw,
}

impl FakeHarness {
    async fn new() -> FakeHarness {
        // The fake answers a list of a kind it holds no object of at all
        // with 404, where the API server answers an empty list: one Lease
        // of another namespace makes the kind known.
        let mut elsewhere = Lease::default();
        elsewhere.metadata.name = Some("another-application".into());
        elsewhere.metadata.namespace = Some("elsewhere".into());
        let fake = kube_fake_client::ClientBuilder::new()
            .with_object(elsewhere)
            .build()
            .await
            .expect("an in-memory fake client");
        let client = kube::Client::new(StatusAnswers { fake }, NAMESPACE);
        let raw = common::KubeRaw::with_api(
            kube::Api::<Lease>::namespaced(client.clone(), NAMESPACE),
            "fake",
        );
        FakeHarness { client, raw }
    }
}

#[async_trait]
impl Harness for FakeHarness {
    type Store = KubernetesStore;

    async fn store(&self) -> KubernetesStore {
        let options = KubernetesOptions::new(NAMESPACE).expect("a valid namespace");
        KubernetesStore::with_client(self.client.clone(), options)
            .await
            .expect("a store on the fake client")
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        self.raw.plant_raw(group, bytes).await;
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        self.raw.read_raw(group).await
    }
}

#[tokio::test(flavor = "current_thread")]
async fn conformance_on_kube_fake_client() {
    let harness = FakeHarness::new().await;
    let report = testkit::check_conformance(&harness).await;
    eprintln!("{report}");
    let mut unexpected = Vec::new();
    for case in &report.cases {
        let allowed = NEEDS_A_WATCH.contains(&case.name);
        match &case.outcome {
            CaseOutcome::Failed(why) if !allowed => {
                unexpected.push(format!("{}: {why}", case.name))
            }
            CaseOutcome::Skipped(why) if !allowed => {
                unexpected.push(format!("{} skipped: {why}", case.name))
            }
            _ => {}
        }
    }
    assert!(
        unexpected.is_empty(),
        "cases that kube-fake-client's semantics allow failed:\n{}",
        unexpected.join("\n")
    );
    // The run did reach the fake: the suite's cases ran, not only the
    // opening of a store.
    assert!(report.cases.len() > NEEDS_A_WATCH.len() + 10, "{report}");
}
