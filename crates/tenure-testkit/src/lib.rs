//! The conformance suite every tenure [`LeaseStore`] runs, and the harness
//! its tests use: private servers started and stopped by the test
//! ([`PrivateServer`]), a TCP proxy that cuts and heals connections
//! ([`TcpProxy`]), a term-overlap checker ([`TermLog`]), and the shared
//! scenarios that run against every store. Depend on it as a
//! dev-dependency (it is not on crates.io yet; a path into a checkout of
//! the repository):
//!
//! ```toml
//! [dev-dependencies]
//! tenure-testkit = { path = "PATH/TO/tenure/crates/tenure-testkit" }
//! ```
//!
//! The helpers are assertions: like `assert!`, they panic, naming what went
//! differently, when the store under test or the server behind it does not
//! behave (each says when under "Panics"). A service never links this
//! crate, so no input, configuration or store contents can reach those
//! panics there.
//!
//! A store crate gives the suite a [`Harness`] for its store (open a fresh
//! handle, plant and read raw bytes) and runs the whole suite in one test.
//! A store opened from a URL takes the ready [`UrlHarness`]: its author
//! writes only the raw access ([`RawAccess`]) and names the feeds the store
//! promises (see [`UrlHarness`] for an example). Any other store implements
//! [`Harness`] itself:
//!
//! ```
//! use async_trait::async_trait;
//! use tenure_testkit::{self as testkit, Harness};
//! use tenure::{GroupName, MemoryStore};
//!
//! struct MemoryHarness(MemoryStore);
//!
//! #[async_trait]
//! impl Harness for MemoryHarness {
//!     type Store = MemoryStore;
//!     async fn store(&self) -> MemoryStore {
//!         self.0.clone()
//!     }
//!     async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
//!         self.0.put_raw(group, bytes);
//!     }
//!     async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
//!         self.0.get_raw(group)
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! // In a store crate this is the body of a
//! // `#[tokio::test(flavor = "multi_thread")]` test.
//! testkit::run_conformance(&MemoryHarness(MemoryStore::new())).await;
//! # })
//! ```
//!
//! The suite is modelled on openraft's `testing/log/suite.rs`: each case is
//! a separate async function run in sequence; a failing case does not stop
//! the others, and [`run_conformance`] panics at the end listing every
//! failure with its case name. Every run uses group names with a fresh
//! random prefix, so the suite can run again and again against one
//! persistent server, and concurrently from several test processes.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use tenure::clock::WallTime;
use tenure::error::StoreError;
use tenure::record::{GroupName, Holder, LeaseRecord, Metadata, Version};
use tenure::store::{CasOutcome, LeaseStore};

pub mod catalog;
mod conformance;
mod connect_checks;
mod counting_recorder;
mod feed_checks;
mod hand_over;
pub mod holders;
mod hostile_password;
pub mod many_groups;
mod polled;
mod private_server;
mod proxy;
mod reported;
mod sample;
pub mod scenarios;
mod servers;
mod service_time;
pub mod sharded;
mod support;
mod term_log;
mod tls;
mod url_harness;
pub use connect_checks::{tls_to_a_plain_server_fails, unreachable_is_unavailable};
pub use counting_recorder::CountingRecorder;
pub use feed_checks::{
    expect_foreign_values_hinted, expect_hint, expect_quiet, expect_written, next_change,
    next_change_about, resyncs_then_carries_writes, tasks_end_with_feed, write_carried_whole,
    write_seen_on_feed, FEED_WITHIN, FOREIGN_VALUES, RESYNC_WITHIN,
};
pub use hand_over::{story_holds, url_argument, HandOver, StoryError};
pub use hostile_password::{
    assert_hostile_password_handled, assert_password_never_shown, assert_raw_password_refused,
    assert_store_shown_without_secret, assert_url_refusals, HOSTILE_PASSWORD,
    HOSTILE_PASSWORD_ESCAPED, REFUSED_URL_PASSWORD,
};
pub use private_server::{Launch, PrivateServer};
pub use proxy::{HttpFront, TcpProxy};
pub use sample::sample_record;
pub use servers::server_url;
pub use service_time::ServiceTimeStore;
pub use support::{
    free_port, signal, unique_suffix, wait_for_listener, wait_for_own_listener, ServerProcess,
    TempDir,
};
pub use term_log::{SpanGuard, TermLog, TermProblem, TermSpan};
pub use tls::TlsFiles;
pub use url_harness::{RawAccess, UrlHarness};

/// How a store's test gives the suite access to the store. A store opened
/// from a URL need not implement it: [`UrlHarness`] does, from the store's
/// `connect` and a [`RawAccess`].
///
/// Harness methods are test code: they may panic when the store cannot be
/// reached or set up. The suite catches such a panic and reports it as the
/// failure of the case that was running.
#[async_trait]
pub trait Harness: Send + Sync {
    /// The store under test.
    type Store: LeaseStore;

    /// A new handle to the same backing store, on its own connection where
    /// the store has connections, so that the concurrency cases race for
    /// real (16 handles racing one compare-and-swap must be 16 clients, not
    /// one client serialising them).
    async fn store(&self) -> Self::Store;

    /// Stores `bytes` verbatim as the group's record, bypassing
    /// [`LeaseRecord::encode`], as a foreign program or a damaged disk
    /// would. It must change the group's version the way a write does, so
    /// that a compare-and-swap with a version read before the plant
    /// conflicts.
    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]);

    /// The bytes stored as the group's record, verbatim; `None` if the group
    /// has no record. The suite uses it to prove that an undecodable record
    /// was left exactly as it was.
    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>>;

    /// The change feeds the store promises. A feed case is skipped when the
    /// store offers no such feed, which a skip-tolerant report counts as a
    /// pass; for a feed declared here it fails instead, so a store that
    /// promises instant hand-over cannot silently lose it. The default
    /// promises none.
    fn promised_feeds(&self) -> Feeds {
        Feeds::NONE
    }
}

/// Which change feeds a store promises (see [`Harness::promised_feeds`]).
///
/// ```
/// use tenure_testkit::Feeds;
/// assert!(Feeds::PER_GROUP.per_group && !Feeds::PER_GROUP.store_wide);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Feeds {
    /// [`LeaseView::changes`](tenure::LeaseView::changes) returns a feed.
    pub per_group: bool,
    /// [`LeaseView::watch`](tenure::LeaseView::watch) returns a feed.
    pub store_wide: bool,
}

impl Feeds {
    /// No feed: electors poll.
    pub const NONE: Feeds = Feeds {
        per_group: false,
        store_wide: false,
    };
    /// A feed per group ([`LeaseView::changes`](tenure::LeaseView::changes)).
    pub const PER_GROUP: Feeds = Feeds {
        per_group: true,
        store_wide: false,
    };
    /// Both the per-group and the store-wide feed.
    pub const ALL: Feeds = Feeds {
        per_group: true,
        store_wide: true,
    };
}

/// Runs every conformance case against the harness's store and panics,
/// listing every failed case and why, if any failed.
///
/// Run it on a multi-threaded runtime
/// (`#[tokio::test(flavor = "multi_thread")]`) so the concurrency cases
/// race on several threads. It prints one line per case to stderr.
pub async fn run_conformance<H: Harness>(harness: &H) {
    let report = check_conformance(harness).await;
    assert!(report.passed(), "{report}");
    // Each case already printed its line; the summary is the first line.
    if let Some(summary) = report.to_string().lines().next() {
        eprintln!("{summary}");
    }
}

/// Runs every conformance case and returns the results instead of
/// panicking, for tools that check a store (for example a `doctor`
/// command) and for tests that expect a failure.
pub async fn check_conformance<H: Harness>(harness: &H) -> ConformanceReport {
    conformance::run_all(harness).await
}

/// The results of one run of the suite.
#[derive(Clone, Debug)]
pub struct ConformanceReport {
    /// The store as it describes itself ([`LeaseView::describe`](tenure::LeaseView::describe)).
    pub store: String,
    /// The random prefix of every group name this run used.
    pub run_id: String,
    /// One entry per case, in the order they ran.
    pub cases: Vec<CaseReport>,
}

impl ConformanceReport {
    /// Whether no case failed (skipped cases do not count as failures).
    pub fn passed(&self) -> bool {
        self.failures().next().is_none()
    }

    /// The failed cases.
    pub fn failures(&self) -> impl Iterator<Item = &CaseReport> {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, CaseOutcome::Failed(_)))
    }
}

impl fmt::Display for ConformanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count =
            |want: fn(&CaseOutcome) -> bool| self.cases.iter().filter(|c| want(&c.outcome)).count();
        writeln!(
            f,
            "tenure conformance against {} (groups {}-*): {} passed, {} skipped, {} failed",
            self.store,
            self.run_id,
            count(|o| matches!(o, CaseOutcome::Passed)),
            count(|o| matches!(o, CaseOutcome::Skipped(_))),
            count(|o| matches!(o, CaseOutcome::Failed(_))),
        )?;
        for case in &self.cases {
            writeln!(f, "  {case}")?;
        }
        Ok(())
    }
}

/// The result of one case.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// The case's name, such as `concurrent_acquire`.
    pub name: &'static str,
    /// Whether the case passed, failed (and why) or did not apply to the store.
    pub outcome: CaseOutcome,
    /// How long the case ran.
    pub elapsed: Duration,
}

impl fmt::Display for CaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.elapsed.as_millis();
        match &self.outcome {
            CaseOutcome::Passed => write!(f, "ok      {} ({ms} ms)", self.name),
            CaseOutcome::Skipped(why) => write!(f, "skipped {} ({ms} ms): {why}", self.name),
            CaseOutcome::Failed(why) => write!(f, "FAILED  {} ({ms} ms): {why}", self.name),
        }
    }
}

/// How one case ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaseOutcome {
    /// Every check held.
    Passed,
    /// The store lacks an optional capability the case tests (such as a
    /// change feed) and its harness did not promise it
    /// ([`Harness::promised_feeds`]); this is not a failure.
    Skipped(String),
    /// A check failed, the store returned an unexpected error, the case
    /// panicked or it timed out; the text says which and with what values.
    Failed(String),
}

/// A record held by `holder` (incarnation 1) with fencing token `token`, a
/// 10 s term starting now, and no metadata: the typical record of a test.
///
/// Times are whole milliseconds, so the record survives an encode/decode
/// round trip unchanged and compares equal to what a store reads back.
///
/// ```
/// let rec = tenure_testkit::held_by("node-a", 3);
/// assert_eq!(rec.holder_id(), Some("node-a"));
/// assert_eq!(rec.token, 3);
/// ```
pub fn held_by(holder: &str, token: u64) -> LeaseRecord {
    let term = Duration::from_secs(10);
    let now = WallTime::now();
    LeaseRecord {
        holder: Some(Holder {
            id: holder.to_owned(),
            incarnation: 1,
        }),
        token,
        term,
        renewed_at: now,
        expires_at: now + term,
        metadata: Metadata::new(),
    }
}

/// Writes `record` to `group` expecting `expected` and returns the new
/// version; panics, naming the group, on a conflict or an error (for tests
/// whose write must apply).
pub async fn applied<S: LeaseStore + ?Sized>(
    store: &S,
    group: &GroupName,
    expected: Option<Version>,
    record: &LeaseRecord,
) -> Version {
    match store.compare_and_swap(group, expected, record).await {
        Ok(CasOutcome::Applied(version)) => version,
        other => panic!("writing {group}: {other:?}"),
    }
}

/// Writes `record` to `group` expecting `expected`; panics, naming `what`
/// and what the store answered, unless the write is refused as a conflict
/// (for tests whose write must not apply: a stale version, a fenced-out
/// writer, a record that must not be created).
pub async fn conflicts<S: LeaseStore + ?Sized>(
    store: &S,
    group: &GroupName,
    expected: Option<Version>,
    record: &LeaseRecord,
    what: &str,
) {
    match store.compare_and_swap(group, expected, record).await {
        Ok(CasOutcome::Conflict) => {}
        other => {
            panic!("{what}: writing {group} expecting {expected:?}: {other:?}, expected Conflict")
        }
    }
}

/// Asserts that `err` is a [`StoreError::Misconfigured`] (an operator must
/// act; retrying will not help) whose message contains `names`: the
/// problem or the fix a store's error must name.
///
/// # Panics
///
/// If `err` is another kind of error or its message lacks `names`.
///
/// ```
/// use tenure::StoreError;
///
/// let err = StoreError::Misconfigured {
///     message: "the table leases does not exist: create it".into(),
///     source: None,
/// };
/// tenure_testkit::assert_misconfigured(&err, "does not exist");
/// ```
pub fn assert_misconfigured(err: &StoreError, names: &str) {
    assert!(
        matches!(err, StoreError::Misconfigured { .. }),
        "expected a misconfiguration naming {names:?}, got {err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(names),
        "the error does not name {names:?}: {text}"
    );
}

/// A released record keeping fencing token `token`: what a leader writes
/// when it steps down, so that the next term's token is `token + 1`.
///
/// ```
/// let rec = tenure_testkit::released(3);
/// assert_eq!(rec.holder, None);
/// assert_eq!(rec.token, 3);
/// ```
pub fn released(token: u64) -> LeaseRecord {
    let now = WallTime::now();
    LeaseRecord {
        holder: None,
        token,
        term: Duration::from_secs(10),
        renewed_at: now,
        expires_at: now,
        metadata: Metadata::new(),
    }
}

/// A group name no other test run uses: `label` behind a random prefix.
/// Store tests that share a persistent server use it to stay apart.
///
/// ```
/// let a = tenure_testkit::unique_group("jobs");
/// let b = tenure_testkit::unique_group("jobs");
/// assert_ne!(a, b);
/// assert!(a.as_str().ends_with("-jobs"));
/// ```
///
/// # Panics
///
/// If `label` is not a valid group name once prefixed (longer than 238
/// bytes, or containing a control character).
pub fn unique_group(label: &str) -> GroupName {
    match GroupName::new(format!("{}-{label}", random_id())) {
        Ok(g) => g,
        Err(e) => panic!("unique_group({label:?}): {e}"),
    }
}

/// The group named `name`, for tests that name their groups literally.
///
/// ```
/// let g = tenure_testkit::group("nightly-billing");
/// assert_eq!(g.as_str(), "nightly-billing");
/// ```
///
/// # Panics
///
/// If `name` is not a valid group name (empty, longer than 255 bytes, or
/// containing a control character): a test's own mistake.
pub fn group(name: &str) -> GroupName {
    match GroupName::new(name) {
        Ok(g) => g,
        Err(e) => panic!("group({name:?}): {e}"),
    }
}

/// 16 random hex digits.
fn random_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// A boxed future resolving to a panic's payload instead of unwinding, so
/// one panicking case (or harness) fails that case only.
struct CatchUnwind<'a, T>(Pin<Box<dyn Future<Output = T> + Send + 'a>>);

impl<T> Future for CatchUnwind<'_, T> {
    type Output = Result<T, Box<dyn Any + Send>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.get_mut().0.as_mut();
        // The future is dropped right after a panic and never polled again,
        // so no broken invariant inside it can be observed.
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

/// The message of a panic payload.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// Times a case, catches its panic, bounds its run time.
async fn run_case<'a>(
    name: &'static str,
    limit: Duration,
    case: Pin<Box<dyn Future<Output = conformance::CaseResult> + Send + 'a>>,
) -> CaseReport {
    let start = Instant::now();
    let outcome = match tokio::time::timeout(limit, CatchUnwind(case)).await {
        Err(_) => CaseOutcome::Failed(format!(
            "did not finish within {limit:?}: a store operation hangs"
        )),
        Ok(Err(payload)) => {
            CaseOutcome::Failed(format!("panicked: {}", panic_message(payload.as_ref())))
        }
        Ok(Ok(Ok(conformance::Verdict::Pass))) => CaseOutcome::Passed,
        Ok(Ok(Ok(conformance::Verdict::Skip(why)))) => CaseOutcome::Skipped(why),
        Ok(Ok(Err(why))) => CaseOutcome::Failed(why),
    };
    let report = CaseReport {
        name,
        outcome,
        elapsed: start.elapsed(),
    };
    eprintln!("tenure conformance: {report}");
    report
}
