//! The conformance suite against the in-process [`MemoryStore`].

use async_trait::async_trait;
use tenure::testkit::{self, Feeds, Harness};
use tenure::{GroupName, MemoryStore};

/// Clones of one [`MemoryStore`] share its records, so a clone is the
/// memory store's "new connection".
struct MemoryHarness(MemoryStore);

#[async_trait]
impl Harness for MemoryHarness {
    type Store = MemoryStore;

    async fn store(&self) -> MemoryStore {
        self.0.clone()
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        self.0.put_raw(group, bytes);
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        self.0.get_raw(group)
    }

    fn promised_feeds(&self) -> Feeds {
        Feeds::ALL
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    testkit::run_conformance(&MemoryHarness(MemoryStore::new())).await;
}

/// The suite reports a broken store instead of passing it: a store whose
/// compare-and-swap ignores the expected version must fail the conflict
/// and race cases, by name.
#[tokio::test(flavor = "multi_thread")]
async fn conformance_catches_a_broken_store() {
    use tenure::{CasOutcome, LeaseRecord, LeaseStore, LeaseView, StoreError, Version, Versioned};

    /// Writes whatever it is given: a last-writer-wins "store".
    #[derive(Clone)]
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

    struct BlindHarness(MemoryStore);

    #[async_trait]
    impl Harness for BlindHarness {
        type Store = Blind;
        async fn store(&self) -> Blind {
            Blind(self.0.clone())
        }
        async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
            self.0.put_raw(group, bytes);
        }
        async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
            self.0.get_raw(group)
        }
    }

    let report = testkit::check_conformance(&BlindHarness(MemoryStore::new())).await;
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
    use tenure::{CasOutcome, LeaseRecord, LeaseStore, LeaseView, StoreError, Version, Versioned};

    /// The memory store with its feeds taken away.
    #[derive(Clone)]
    struct Deaf(MemoryStore);

    #[async_trait]
    impl LeaseView for Deaf {
        async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
            self.0.read(group).await
        }
        fn describe(&self) -> String {
            "deaf://".into()
        }
    }

    #[async_trait]
    impl LeaseStore for Deaf {
        async fn compare_and_swap(
            &self,
            group: &GroupName,
            expected: Option<Version>,
            record: &LeaseRecord,
        ) -> Result<CasOutcome, StoreError> {
            self.0.compare_and_swap(group, expected, record).await
        }
    }

    struct DeafHarness(MemoryStore, Feeds);

    #[async_trait]
    impl Harness for DeafHarness {
        type Store = Deaf;
        async fn store(&self) -> Deaf {
            Deaf(self.0.clone())
        }
        async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
            self.0.put_raw(group, bytes);
        }
        async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
            self.0.get_raw(group)
        }
        fn promised_feeds(&self) -> Feeds {
            self.1
        }
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
    let promised = testkit::check_conformance(&DeafHarness(MemoryStore::new(), Feeds::ALL)).await;
    let failed: Vec<_> = promised.failures().map(|c| c.name).collect();
    assert_eq!(failed.len(), 2, "{promised}");
    assert!(matches!(
        outcome(&promised, "changes_feed"),
        testkit::CaseOutcome::Failed(_)
    ));
    let unpromised =
        testkit::check_conformance(&DeafHarness(MemoryStore::new(), Feeds::NONE)).await;
    assert!(unpromised.passed(), "{unpromised}");
    assert!(matches!(
        outcome(&unpromised, "changes_feed"),
        testkit::CaseOutcome::Skipped(_)
    ));
}
