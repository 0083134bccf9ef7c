//! A bench member's store, counted: every operation the member's leases
//! and its `Shards` task send goes through [`Counted`], which adds it up,
//! so the bench can report store operations per member per term.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tenure::{
    BatchResult, CasOutcome, CasRequest, ChangeFeed, EngineSlot, GroupName, LeaseRecord,
    LeaseStore, LeaseView, Listed, StoreError, StoreFeed, Version, Versioned,
};

use super::report::OpCounts;

/// The running totals.
#[derive(Debug, Default)]
pub struct Ops {
    lists: AtomicU64,
    reads: AtomicU64,
    read_items: AtomicU64,
    writes: AtomicU64,
    write_items: AtomicU64,
}

impl Ops {
    /// The totals so far.
    pub fn snapshot(&self) -> OpCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        OpCounts {
            lists: get(&self.lists),
            reads: get(&self.reads),
            read_items: get(&self.read_items),
            writes: get(&self.writes),
            write_items: get(&self.write_items),
        }
    }
}

fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// `inner`, counting each call: a batch is one call of several items.
pub struct Counted {
    inner: Arc<dyn LeaseStore>,
    ops: Arc<Ops>,
}

impl Counted {
    /// Counts `inner`'s operations into `ops`.
    pub fn new(inner: Arc<dyn LeaseStore>, ops: Arc<Ops>) -> Counted {
        Counted { inner, ops }
    }
}

#[async_trait]
impl LeaseView for Counted {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        add(&self.ops.reads, 1);
        add(&self.ops.read_items, 1);
        self.inner.read(group).await
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        self.inner.changes(group).await
    }

    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        add(&self.ops.reads, 1);
        add(&self.ops.read_items, groups.len());
        self.inner.read_many(groups).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        add(&self.ops.lists, 1);
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
impl LeaseStore for Counted {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        add(&self.ops.writes, 1);
        add(&self.ops.write_items, 1);
        self.inner.compare_and_swap(group, expected, record).await
    }

    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        add(&self.ops.writes, 1);
        add(&self.ops.write_items, requests.len());
        self.inner.compare_and_swap_many(requests).await
    }

    fn batch_size_hint(&self) -> usize {
        self.inner.batch_size_hint()
    }

    fn engine_slot(&self) -> Option<&EngineSlot> {
        self.inner.engine_slot()
    }
}
