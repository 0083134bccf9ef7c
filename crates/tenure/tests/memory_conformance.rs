//! The conformance suite against the in-process [`MemoryStore`], and the
//! suite's own checks: a broken store and a store that breaks its promise of
//! feeds are reported, not passed.

use async_trait::async_trait;
use tenure::{Faults, GroupName, LeaseStore, MemoryStore};
use tenure_testkit::{self as testkit, Feeds, Harness};

/// The memory store as `view` shows it. Clones of one [`MemoryStore`] share
/// its records, so a clone is the memory store's "new connection"; `view`
/// turns that clone into the store under test (the memory store itself, or a
/// wrapper that breaks something on purpose).
struct MemoryHarness<S> {
    records: MemoryStore,
    view: fn(MemoryStore) -> S,
    feeds: Feeds,
}

impl<S> MemoryHarness<S> {
    fn new(view: fn(MemoryStore) -> S, feeds: Feeds) -> Self {
        MemoryHarness {
            records: MemoryStore::new(),
            view,
            feeds,
        }
    }
}

#[async_trait]
impl<S: LeaseStore> Harness for MemoryHarness<S> {
    type Store = S;

    async fn store(&self) -> S {
        (self.view)(self.records.clone())
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        self.records.put_raw(group, bytes);
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        self.records.get_raw(group)
    }

    fn promised_feeds(&self) -> Feeds {
        self.feeds
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    testkit::run_conformance(&MemoryHarness::new(|store| store, Feeds::ALL)).await;
}

/// The suite reports a broken store instead of passing it: a store whose
/// compare-and-swap ignores the expected version must fail the conflict
/// and race cases, by name.
#[tokio::test(flavor = "multi_thread")]
async fn conformance_catches_a_broken_store() {
    use tenure::store::CasOutcome;
    use tenure::{LeaseRecord, LeaseView, StoreError, Version, Versioned};

    /// Writes whatever it is given: a last-writer-wins "store".
    struct Blind(MemoryStore);

    #[async_trait]
    impl LeaseView for Blind {
        async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
            self.0.read(group).await
        }
        fn describe(&self) -> String {
            "blind://".into()
        }
    }

    #[async_trait]
    impl LeaseStore for Blind {
        async fn compare_and_swap(
            &self,
            group: &GroupName,
            _expected: Option<Version>,
            record: &LeaseRecord,
        ) -> Result<CasOutcome, StoreError> {
            let current = self.0.read(group).await.ok().flatten().map(|v| v.version);
            self.0.compare_and_swap(group, current, record).await
        }
    }

    let report = testkit::check_conformance(&MemoryHarness::new(Blind, Feeds::NONE)).await;
    let failed: Vec<_> = report.failures().map(|c| c.name).collect();
    for must_fail in ["conflict", "concurrent_acquire", "concurrent_takeover"] {
        assert!(
            failed.contains(&must_fail),
            "{must_fail} passed for a blind store: {report}"
        );
    }
    assert!(!report.passed());
    // The feed case is skipped, not failed, for a store without one.
    let feed = report
        .cases
        .iter()
        .find(|c| c.name == "changes_feed")
        .unwrap();
    assert!(
        matches!(feed.outcome, testkit::CaseOutcome::Skipped(_)),
        "{report}"
    );
}

/// A store whose harness promises feeds it does not deliver fails the feed
/// cases instead of skipping them (a skip counts as a pass).
#[tokio::test(flavor = "multi_thread")]
async fn a_promised_feed_that_is_missing_fails() {
    /// The memory store with its feeds taken away.
    fn deaf(store: MemoryStore) -> tenure::FaultyStore<MemoryStore> {
        let faults = Faults::new();
        faults.set_no_notifications(true);
        faults.wrap(store, "deaf")
    }

    let outcome = |report: &testkit::ConformanceReport, name: &str| {
        report
            .cases
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no case {name}: {report}"))
            .outcome
            .clone()
    };
    let promised = testkit::check_conformance(&MemoryHarness::new(deaf, Feeds::ALL)).await;
    let failed: Vec<_> = promised.failures().map(|c| c.name).collect();
    assert_eq!(failed.len(), 2, "{promised}");
    assert!(matches!(
        outcome(&promised, "changes_feed"),
        testkit::CaseOutcome::Failed(_)
    ));
    let unpromised = testkit::check_conformance(&MemoryHarness::new(deaf, Feeds::NONE)).await;
    assert!(unpromised.passed(), "{unpromised}");
    assert!(matches!(
        outcome(&unpromised, "changes_feed"),
        testkit::CaseOutcome::Skipped(_)
    ));
}
