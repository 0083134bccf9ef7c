//! Kubernetes lease store for [tenure]: leader election with fencing tokens
//! on the API server your services already run on, as
//! `coordination.k8s.io/v1` Lease objects.
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure::Elector;
//! use tenure_kubernetes::KubernetesStore;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // In a pod: the service account; elsewhere: $KUBECONFIG or ~/.kube/config.
//! let store = KubernetesStore::connect("k8s://billing").await?;
//! let elector = Elector::builder(store, "nightly-billing")
//!     .candidate_id(std::env::var("POD_NAME")?)
//!     .term(Duration::from_secs(15))
//!     .start()?;
//! let term = elector.wait_for_leadership().await?;
//! println!("leading with fencing token {}", term.token());
//! elector.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # The Lease object
//!
//! One Lease per group, in the namespace the store is given, named by
//! [`lease_name`]: the group name itself where it is a valid object name,
//! else `t--` and the base32 of its bytes, else (names over 156 bytes)
//! `t--h-` and its SHA-256; every name is accepted, none refused. What
//! `kubectl get lease -n billing nightly-billing -o yaml` shows:
//!
//! ```yaml
//! metadata:
//!   name: nightly-billing
//!   labels:
//!     app.kubernetes.io/managed-by: tenure
//!   annotations:
//!     tenure.dev/group: nightly-billing
//!     tenure.dev/token: "7"
//!     tenure.dev/record: '{"v":1,"holder":{"id":"billing-7d9f-x2","incarnation":…},"token":7,…}'
//! spec:
//!   holderIdentity: billing-7d9f-x2
//!   leaseDurationSeconds: 15
//!   acquireTime: "2026-01-02T03:04:05.000000Z"
//!   renewTime: "2026-01-02T03:09:35.000000Z"
//!   leaseTransitions: 6
//! ```
//!
//! * `spec.holderIdentity` is the leader's candidate id (absent once it
//!   released), `spec.leaseDurationSeconds` the term in whole seconds
//!   (rounded up), `spec.acquireTime` the start of the term, `spec.renewTime`
//!   its last renewal, and `spec.leaseTransitions` rises by one with every
//!   new term (a new fencing token), as client-go counts them.
//! * tenure's own fields are annotations under the one prefix
//!   `tenure.dev/`: the group name, the token, and the record itself
//!   (format version, holder and incarnation, token, term, times,
//!   published metadata) as JSON. The record annotation is what tenure
//!   reads; the spec mirrors it.
//! * Labels and annotations other programs add are kept across tenure's
//!   writes.
//!
//! **A Lease tenure did not write is foreign**: one without the record
//! annotation (client-go's `leaderelection`, kube-coordinate, a Lease made
//! by hand), one whose `spec.holderIdentity` another program changed, or
//! one that names another group. Reading it is a
//! [`StoreError::Record`](tenure::StoreError::Record) with
//! [`RecordError::Foreign`](tenure::error::RecordError::Foreign) naming its
//! holder; it is never overwritten.
//!
//! # Operations
//!
//! * **read**: `GET` of the Lease (a quorum read from etcd: the API server
//!   serves a `GET` without `resourceVersion` from etcd, not its cache).
//! * **compare-and-swap**: creating is a `POST` (`409 AlreadyExists`: lost);
//!   replacing is a `PUT` carrying the `metadata.resourceVersion` and the
//!   `metadata.uid` it read (`409 Conflict`: lost). The uid matters: for
//!   Leases the API server allows create-on-update, so a `PUT` of a Lease
//!   someone deleted would quietly make it again whatever resourceVersion
//!   it carries; with the uid it is a precondition that fails instead. The
//!   version is the `resourceVersion` (the etcd revision of the write).
//! * Nothing else writes: no merge patch, no strategic merge patch, no
//!   server-side apply, no `PUT` without a resourceVersion.
//!
//! **Why not a patch or apply.** A merge patch without a resourceVersion in
//! it is applied to whatever the object is when it arrives; server-side
//! apply with `force` takes the fields whoever held them. Two candidates
//! that both saw the Lease expire both succeed, one after the other, and
//! both believe they lead. That is what crates that write the Lease with an
//! unconditional patch or a forced apply do (kube-rs has no leader election
//! of its own: kube-rs/kube#485). Only a write conditional on the version
//! the candidate read (and the object it read) makes "I saw it expire, so I
//! take it" atomic.
//!
//! # Change feed
//!
//! [`LeaseView::watch`](tenure::LeaseView::watch) is one watch of the
//! namespace's Leases with the store's labels, from the resourceVersion of
//! a list; its events carry the Lease, so a follower learns each renewal
//! without reading. A watch the server ends is resumed from the last
//! resourceVersion; `410 Gone` (the revision was compacted) makes the feed
//! list again and ask every group to read once
//! ([`Change::Resync`](tenure::store::Change::Resync)). Candidates act on a feed
//! record only as a hint: only a read or their own write ends, hands over
//! or fails a term. Observers get a watch per Lease
//! ([`LeaseView::changes`](tenure::LeaseView::changes)).
//!
//! # Many groups
//!
//! Electors built from clones of one [`KubernetesStore`] share one engine
//! and one HTTP client. Kubernetes has no multi-object transaction, so a
//! batch is single requests sent together, at most `in-flight` (64) at once
//! per handle; the client speaks HTTP/2 where the server offers it (TLS
//! ALPN), so they are streams of one connection. [`list`](tenure::LeaseView::list)
//! (sharded sets) lists by label selector in pages of 500 (`continue`).
//!
//! Every renewal is a request: N groups at a term T cost about 3N/T
//! `PUT`s a second (10,000 groups at 10 s: 3,000). kube-apiserver lets one
//! HTTP/2 connection carry 250 requests at once and, with API Priority
//! and Fairness, shares 600 by default among all its clients; a kubelet's
//! node Lease is one `PUT` every 10 s, so a 5,000-node cluster makes 500 a
//! second. Size `in-flight` to what the cluster should give one process,
//! and for thousands of groups prefer a sharded set (one Lease per member)
//! or a longer term. The figures, and where the CPU goes on this
//! repository's test server, are in `docs/benchmarks.md` ("Kubernetes").
//!
//! # Connection and versions
//!
//! `k8s://NAMESPACE` connects as `kube::Config::infer()` finds: the
//! kubeconfig (`$KUBECONFIG`, else `~/.kube/config`), else the pod's
//! service account; `?context=` and `?kubeconfig=` choose, and
//! [`KubernetesOptions::with_config`] takes a `kube::Config` built by hand.
//! See [`KubernetesOptions`] for the URL's options.
//!
//! This crate builds on kube 2.0 and k8s-openapi 0.26, the newest pair
//! whose minimum Rust (1.85) is this workspace's; kube 3 and later require
//! a newer Rust (kube 5.0 with k8s-openapi 0.29: 1.89). The store uses
//! only the Lease API, stable since Kubernetes 1.14. As k8s-openapi
//! requires, this library chooses no Kubernetes version: a binary that
//! uses it enables one `k8s-openapi` version feature (`v1_30` … `v1_34`;
//! the `tenure` CLI enables `v1_34`, as kube-fake-client, which this
//! crate's tests use, requires: the Lease fields later versions added are
//! optional, and the store writes only the ones 1.14 has).
//!
//! # Errors
//!
//! Errors are [`KubernetesStoreError`]s naming the server and the fix; as
//! [`StoreError`](tenure::StoreError)s, 401 (wrong or expired token), 403
//! (the message prints the Role and RoleBinding the store needs: `get`,
//! `list`, `watch`, `create` and `update` on `leases` in the namespace,
//! see [`role_needed`]), a namespace that does not exist and a Lease the
//! server refuses (an admission policy) are `Misconfigured`. `429` (API
//! priority and fairness, refused before it ran) is retried with back-off
//! within the operation timeout, and so is `503` for reads, then
//! `Unavailable`; a write answered `503` is not retried (it may have been
//! applied, and its retry would conflict with itself) but reported, and
//! the elector reads before it decides. No error, log line or
//! `Debug` output carries the bearer token.
//!
//! # What the tests show, and what they cannot
//!
//! The tests run against `tenure-kube-testserver`, this repository's API
//! server for Leases: objects in etcd as kube-apiserver keeps them, its
//! answers (201, 409 AlreadyExists and Conflict, uid preconditions, 422
//! without a resourceVersion, create-on-update, 404, 410 Gone after
//! compaction, pages, selectors, 401, 403) each following a cited upstream
//! source file, and `kubectl` working against it. What it cannot show:
//!
//! * **admission**: webhooks or policies that change or refuse Leases;
//! * **API priority and fairness**: real 429s under load (the retry path
//!   is tested only as code);
//! * **the watch cache**: a real API server serves watches (and lists with
//!   `resourceVersion=0`) from a cache that may lag etcd; tenure never
//!   decides from the feed, and its reads and writes go to etcd (the test
//!   server, like kube-apiserver, starts an update from the state it last
//!   saw of the Lease, which etcd's transaction on `mod_revision` checks;
//!   it serves watches from etcd directly);
//! * **several API servers behind a load balancer**: each keeps its own
//!   watch cache, and a watch resumed on another server may answer 410
//!   sooner; writes are still decided by etcd.
//!
//! **A second implementation**: the same conformance suite runs against
//! `kube-fake-client` 0.1 (an in-memory port of controller-runtime's fake
//! client, written outside this repository; 0.1 is its release on kube 2.0
//! and k8s-openapi 0.26, this crate's pair), through
//! [`KubernetesStore::with_client`] (`tests/fake_client.rs`): 21 of its 23
//! cases pass there. Where its semantics differ, the test says so and
//! leaves the check out: it has no watch (the two feed cases fail there,
//! and only they may); it answers a refusal as a transport error, which the
//! test turns into the `Status` kube-apiserver sends (404, 409
//! AlreadyExists, 409 Conflict), the decision staying the fake's; it
//! answers a list of a kind it holds nothing of with 404. And its
//! compare-and-swap is not atomic: it checks the `resourceVersion` and
//! writes under two takings of its lock, so on a multi-threaded runtime
//! the suite's racers caught it applying two of 16 racing updates of one
//! version (2 runs of 5); the test runs it on one thread, where each
//! request runs whole.
//!
//! To check tenure on a real cluster, point the tests at it:
//! `TENURE_TEST_KUBERNETES=/path/to/kubeconfig cargo test -p tenure-kubernetes`
//! runs the same suite with that kubeconfig's current context (it needs a
//! namespace `tenure-test` and the rights of [`role_needed`] there, and, for
//! the test of missing rights, the contexts the test server writes).

mod error;
mod feed;
mod layout;
mod options;
mod store;

pub use error::{role_needed, KubernetesStoreError};
pub use layout::{
    group_of_name, lease_name, ANNOTATION_PREFIX, GROUP_ANNOTATION, MANAGED_BY_LABEL,
    MANAGED_BY_VALUE, RECORD_ANNOTATION, TOKEN_ANNOTATION,
};
pub use options::{KubernetesOptions, DEFAULT_IN_FLIGHT, DEFAULT_TIMEOUT};
pub use store::KubernetesStore;
