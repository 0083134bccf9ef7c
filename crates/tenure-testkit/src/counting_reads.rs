//! A store that counts the records read under one part of its key space,
//! for tests that check how much a member reads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tenure::{
    BatchResult, CasOutcome, CasRequest, ChangeFeed, GroupName, LeaseRecord, LeaseStore, LeaseView,
    Listed, StoreError, StoreFeed, Version, Versioned,
};

/// `inner`, counting (in a counter its clones share) every group read,
/// alone or in a batch, whose name contains `part`; everything else
/// passes through unchanged.
#[derive(Clone)]
pub struct CountingReads<S> {
    inner: S,
    part: String,
    reads: Arc<AtomicUsize>,
}

impl<S> CountingReads<S> {
    /// Counts the reads through `inner` of the groups whose names contain
    /// `part` (`"/shards/"`, say).
    pub fn new(inner: S, part: impl Into<String>) -> Self {
        CountingReads {
            inner,
            part: part.into(),
            reads: Arc::default(),
        }
    }

    /// The same store counting into `counter` (shared by several handles).
    pub fn counting_into(mut self, counter: Arc<AtomicUsize>) -> Self {
        self.reads = counter;
        self
    }

    /// How many such groups were read so far.
    pub fn reads(&self) -> usize {
        self.reads.load(Ordering::Relaxed)
    }

    fn count(&self, groups: &[GroupName]) {
        let n = groups
            .iter()
            .filter(|g| g.as_str().contains(&self.part))
            .count();
        self.reads.fetch_add(n, Ordering::Relaxed);
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseView for CountingReads<S> {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.count(std::slice::from_ref(group));
        self.inner.read(group).await
    }
    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        self.inner.changes(group).await
    }
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        self.count(groups);
        self.inner.read_many(groups).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        self.inner.list(prefix).await
    }
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        self.inner.watch().await
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseStore for CountingReads<S> {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        self.inner.compare_and_swap(group, expected, record).await
    }
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        self.inner.compare_and_swap_many(requests).await
    }
}
