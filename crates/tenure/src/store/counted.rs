//! [`Counted`]: a store that counts the operations passing through it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{
    BatchResult, CasOutcome, CasRequest, ChangeFeed, LeaseStore, LeaseView, Listed, Running,
    StoreFeed,
};
use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Version, Versioned};

/// Operations sent so far: calls, and the items in them (a batch is one
/// call of several items; a single read or write is one call of one).
/// Serialized with these field names (`tenure bench` sends it between
/// processes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCounts {
    /// Listings by prefix.
    pub lists: u64,
    /// Read calls, single or batched.
    pub reads: u64,
    /// Records read.
    pub read_items: u64,
    /// Write calls, single or batched compare-and-swaps.
    pub writes: u64,
    /// Records written (or tried).
    pub write_items: u64,
}

impl OpCounts {
    /// What was sent between `earlier` and `self`.
    pub fn since(&self, earlier: &OpCounts) -> OpCounts {
        OpCounts {
            lists: self.lists.saturating_sub(earlier.lists),
            reads: self.reads.saturating_sub(earlier.reads),
            read_items: self.read_items.saturating_sub(earlier.read_items),
            writes: self.writes.saturating_sub(earlier.writes),
            write_items: self.write_items.saturating_sub(earlier.write_items),
        }
    }
}

/// The running totals of one or more [`Counted`] stores.
#[derive(Debug, Default)]
pub struct OpCounters {
    lists: AtomicU64,
    reads: AtomicU64,
    read_items: AtomicU64,
    writes: AtomicU64,
    write_items: AtomicU64,
}

impl OpCounters {
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

/// `inner`, counting every read, write and listing sent through it into
/// counters its clones share; everything else, [`running`](LeaseView::running)
/// included, passes through whole, so that electors on a counted store run
/// as they would on `inner`.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use tenure::store::Counted;
/// use tenure::{GroupName, LeaseView, MemoryStore};
/// let store = Counted::new(MemoryStore::new());
/// let groups = [GroupName::new("a")?, GroupName::new("b")?];
/// store.read_many(&groups).await?;
/// store.read(&groups[0]).await?;
/// let counts = store.counts();
/// assert_eq!((counts.reads, counts.read_items), (2, 3));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    counters: Arc<OpCounters>,
    only: Option<Arc<str>>,
}

impl<S> Counted<S> {
    /// Counts the operations sent through `inner`.
    pub fn new(inner: S) -> Self {
        Counted {
            inner,
            counters: Arc::default(),
            only: None,
        }
    }

    /// The same store counting into `counters` (shared by several stores,
    /// to count what they send together).
    pub fn counting_into(mut self, counters: Arc<OpCounters>) -> Self {
        self.counters = counters;
        self
    }

    /// Counts only the records of groups whose names contain `part` (a
    /// sharded set's `"/shards/"`, say), the calls that carry at least one
    /// of them, and the listings of prefixes that contain it.
    pub fn only_groups_containing(mut self, part: impl Into<String>) -> Self {
        self.only = Some(Arc::from(part.into()));
        self
    }

    /// The totals so far.
    pub fn counts(&self) -> OpCounts {
        self.counters.snapshot()
    }

    /// The counters this store adds to.
    pub fn counters(&self) -> &Arc<OpCounters> {
        &self.counters
    }

    fn counted(&self, name: &str) -> bool {
        self.only.as_deref().is_none_or(|part| name.contains(part))
    }

    /// Adds one call of the counted ones among `groups` to `calls` and
    /// `items`, if there is any.
    fn count<'a>(
        &self,
        calls: &AtomicU64,
        items: &AtomicU64,
        groups: impl Iterator<Item = &'a GroupName>,
    ) {
        let n: u64 = groups.map(|g| u64::from(self.counted(g.as_str()))).sum();
        if n > 0 {
            calls.fetch_add(1, Ordering::Relaxed);
            items.fetch_add(n, Ordering::Relaxed);
        }
    }
}

#[async_trait]
impl<S: LeaseView> LeaseView for Counted<S> {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.count(
            &self.counters.reads,
            &self.counters.read_items,
            std::iter::once(group),
        );
        self.inner.read(group).await
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        self.inner.changes(group).await
    }

    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        self.count(
            &self.counters.reads,
            &self.counters.read_items,
            groups.iter(),
        );
        self.inner.read_many(groups).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        if self.counted(prefix) {
            self.counters.lists.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.list(prefix).await
    }

    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        self.inner.watch().await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn running(&self) -> Running<'_> {
        self.inner.running()
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseStore for Counted<S> {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        self.count(
            &self.counters.writes,
            &self.counters.write_items,
            std::iter::once(group),
        );
        self.inner.compare_and_swap(group, expected, record).await
    }

    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        let c = &self.counters;
        self.count(&c.writes, &c.write_items, requests.iter().map(|r| &r.group));
        self.inner.compare_and_swap_many(requests).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    #[tokio::test]
    async fn counts_calls_and_items_of_the_groups_asked_for(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let store = Counted::new(MemoryStore::new()).only_groups_containing("/shards/");
        let shard = GroupName::new("set/shards/1")?;
        let member = GroupName::new("set/members/m")?;
        store.read(&member).await?;
        store.read_many(&[shard.clone(), member.clone()]).await?;
        store.list("set/members/").await?;
        store.list("set/shards/").await?;
        let record = LeaseRecord {
            holder: None,
            token: 1,
            term: std::time::Duration::from_secs(1),
            renewed_at: crate::WallTime::from_millis(0),
            expires_at: crate::WallTime::from_millis(0),
            metadata: crate::Metadata::new(),
        };
        store.compare_and_swap(&shard, None, &record).await?;
        let counts = store.counts();
        assert_eq!(
            counts,
            OpCounts {
                lists: 1,
                reads: 1,
                read_items: 1,
                writes: 1,
                write_items: 1,
            }
        );
        let shared = Counted::new(MemoryStore::new()).counting_into(store.counters().clone());
        shared.read(&member).await?;
        assert_eq!(store.counts().reads, 2, "one set of counters for both");
        assert_eq!(store.counts().since(&counts).read_items, 1);
        Ok(())
    }
}
