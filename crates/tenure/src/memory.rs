//! An in-process store, and a fault-injecting wrapper for any store.
//!
//! [`MemoryStore`] is a real linearizable register (a mutex around a map), so
//! it gives exactly the guarantees tenure needs from a store; it is the
//! store of the simulation and of unit tests, and a stand-in for a real store
//! in applications' own tests (goneli ships `MockNeli` for that job).
//! [`FaultyStore`] wraps any [`LeaseStore`] and adds latency, failures,
//! replies lost after the write applied, and per-candidate partitions.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::engine::EngineSlot;
use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Version, Versioned};
use crate::store::{
    BatchResult, CasOutcome, CasRequest, Change, ChangeFeed, LeaseStore, LeaseView, Listed,
    Running, StoreFeed, StoreFeedSender,
};

#[derive(Default)]
struct Register {
    /// Encoded records, so that decoding (and corrupt records) are real.
    rows: HashMap<GroupName, (Version, Vec<u8>)>,
    watchers: HashMap<GroupName, Vec<mpsc::Sender<()>>>,
    /// Store-wide feeds, and whether each has dropped a change (it then
    /// owes its reader a resync).
    feeds: Vec<(StoreFeedSender, bool)>,
}

impl Register {
    /// Tells every watcher of `group`, and every store-wide feed, about a
    /// write. `current` is the record as written, if it decodes.
    fn notify(&mut self, group: &GroupName, current: Option<Versioned>) {
        if let Some(watchers) = self.watchers.get_mut(group) {
            // A full channel already holds a hint; a closed one is dropped.
            watchers
                .retain(|tx| !matches!(tx.try_send(()), Err(mpsc::error::TrySendError::Closed(_))));
        }
        let change = match current {
            Some(current) => Change::Written {
                group: group.clone(),
                current,
            },
            None => Change::Hint {
                group: group.clone(),
            },
        };
        self.feeds.retain_mut(|(feed, lagging)| {
            if *lagging {
                match feed.try_send(Change::Resync) {
                    Ok(true) => *lagging = false,
                    Ok(false) => return true,
                    Err(()) => return false,
                }
            }
            match feed.try_send(change.clone()) {
                Ok(sent) => {
                    *lagging = !sent;
                    true
                }
                Err(()) => false,
            }
        });
    }
}

/// Room in a memory store's feed before it falls back to a resync.
const FEED_CAPACITY: usize = 4096;

/// An in-process lease store. Clones share the same records.
///
/// ```
/// # tokio_test();
/// # fn tokio_test() { tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use tenure::{GroupName, LeaseView, MemoryStore};
/// let store = MemoryStore::new();
/// assert!(store.read(&GroupName::new("jobs").unwrap()).await.unwrap().is_none());
/// # }) }
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Register>>,
    engine: Arc<EngineSlot>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryStore")
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, Register> {
        // A panic while holding this lock cannot leave the map half-written
        // (every update is one insert), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads without awaiting: the same operation as [`LeaseView::read`],
    /// for the deterministic simulation.
    pub fn read_now(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        read_row(&self.lock(), group)
    }

    /// Compare-and-swap without awaiting, for the deterministic simulation.
    pub fn compare_and_swap_now(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> CasOutcome {
        cas_row(&mut self.lock(), group, expected, record)
    }

    /// Stores raw bytes as the group's record, bypassing every check: for
    /// tests of corrupt and foreign records.
    pub fn put_raw(&self, group: &GroupName, bytes: &[u8]) {
        let mut reg = self.lock();
        let version = Version(reg.rows.get(group).map_or(1, |(v, _)| v.0 + 1));
        reg.rows.insert(group.clone(), (version, bytes.to_vec()));
        reg.notify(group, None);
    }

    /// The raw bytes stored for the group.
    pub fn get_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        self.lock().rows.get(group).map(|(_, b)| b.clone())
    }
}

fn read_row(reg: &Register, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
    match reg.rows.get(group) {
        None => Ok(None),
        Some((version, bytes)) => {
            let record = LeaseRecord::decode(bytes).map_err(|source| StoreError::Record {
                group: group.clone(),
                source,
            })?;
            Ok(Some(Versioned {
                record,
                version: *version,
            }))
        }
    }
}

fn cas_row(
    reg: &mut Register,
    group: &GroupName,
    expected: Option<Version>,
    record: &LeaseRecord,
) -> CasOutcome {
    let current = reg.rows.get(group).map(|(v, _)| *v);
    if current != expected {
        return CasOutcome::Conflict;
    }
    let version = Version(current.map_or(1, |v| v.0 + 1));
    reg.rows.insert(group.clone(), (version, record.encode()));
    let written = Versioned {
        record: record.clone(),
        version,
    };
    reg.notify(group, Some(written));
    CasOutcome::Applied(version)
}

#[async_trait]
impl LeaseView for MemoryStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.read_now(group)
    }

    /// All groups under one lock: one consistent snapshot.
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let reg = self.lock();
        Ok(groups.iter().map(|g| read_row(&reg, g)).collect())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let reg = self.lock();
        Ok(reg
            .rows
            .keys()
            .filter(|g| g.as_str().starts_with(prefix))
            .map(|g| Listed {
                group: g.clone(),
                record: read_row(&reg, g).and_then(|r| {
                    r.ok_or_else(|| StoreError::unavailable("listed row vanished", "memory"))
                }),
            })
            .collect())
    }

    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        let (tx, feed) = StoreFeed::channel(FEED_CAPACITY);
        self.lock().feeds.push((tx, false));
        Ok(Some(feed))
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        let (tx, feed) = ChangeFeed::channel();
        self.lock()
            .watchers
            .entry(group.clone())
            .or_default()
            .push(tx);
        Ok(Some(feed))
    }

    fn describe(&self) -> String {
        "memory://".into()
    }

    fn running(&self) -> Running<'_> {
        // Any batch is one lock.
        Running::new(4096, &self.engine)
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        let mut reg = self.lock();
        Ok(requests
            .iter()
            .map(|r| Ok(cas_row(&mut reg, &r.group, r.expected, &r.record)))
            .collect())
    }

    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        Ok(self.compare_and_swap_now(group, expected, record))
    }
}

#[derive(Default, Debug)]
struct FaultState {
    latency: Duration,
    list_latency: Duration,
    failing: bool,
    lose_replies: bool,
    no_notifications: bool,
    partitioned: HashSet<String>,
    silenced: HashSet<String>,
}

/// Shared switches for the [`FaultyStore`] handles of a test.
///
/// ```
/// use tenure::{Faults, MemoryStore};
/// let faults = Faults::new();
/// let store = MemoryStore::new();
/// let for_a = faults.wrap(store.clone(), "a");
/// let for_b = faults.wrap(store, "b");
/// faults.partition("a"); // a's operations now hang until they time out
/// # let _ = (for_a, for_b);
/// ```
#[derive(Clone, Default, Debug)]
pub struct Faults {
    state: Arc<Mutex<FaultState>>,
}

impl Faults {
    /// No faults yet.
    pub fn new() -> Self {
        Faults::default()
    }

    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wraps `store` as the view of candidate `node`.
    pub fn wrap<S: LeaseStore>(&self, store: S, node: impl Into<String>) -> FaultyStore<S> {
        FaultyStore {
            inner: store,
            faults: self.clone(),
            node: node.into(),
            engine: Arc::new(EngineSlot::new()),
        }
    }

    /// Adds latency to every operation (before it reaches the store).
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// Adds latency to every listing, on top of [`set_latency`](Self::set_latency):
    /// a store whose listing walks many other keys (a Redis `SCAN` over a
    /// database shared with 200,000 other groups, a table scan).
    pub fn set_list_latency(&self, latency: Duration) {
        self.lock().list_latency = latency;
    }

    /// Makes every operation fail with [`StoreError::Unavailable`].
    pub fn set_failing(&self, failing: bool) {
        self.lock().failing = failing;
    }

    /// Applies writes but loses their replies (reported as a timeout).
    pub fn set_lose_replies(&self, lose: bool) {
        self.lock().lose_replies = lose;
    }

    /// Hides change notifications, forcing candidates to poll.
    pub fn set_no_notifications(&self, off: bool) {
        self.lock().no_notifications = off;
    }

    /// Cuts `node` off: its operations hang until the caller times out.
    pub fn partition(&self, node: &str) {
        self.lock().partitioned.insert(node.to_owned());
    }

    /// Reconnects `node`.
    pub fn heal(&self, node: &str) {
        self.lock().partitioned.remove(node);
    }

    /// Makes `node`'s store-wide change feed silent: it stays open and
    /// delivers nothing, and says nothing of what it missed (a watch on a
    /// member cut off from its quorum, a stalled proxy). Its operations
    /// still work. `false` lets the feed deliver again.
    pub fn silence_feed(&self, node: &str, silent: bool) {
        let mut f = self.lock();
        if silent {
            f.silenced.insert(node.to_owned());
        } else {
            f.silenced.remove(node);
        }
    }
}

/// A [`LeaseStore`] seen through [`Faults`], as one candidate sees it.
/// Clones are the same view and share an engine; views of other nodes
/// (other [`Faults::wrap`] calls) run engines of their own, as separate
/// processes would.
#[derive(Clone, Debug)]
pub struct FaultyStore<S> {
    inner: S,
    faults: Faults,
    node: String,
    engine: Arc<EngineSlot>,
}

impl<S: LeaseStore> FaultyStore<S> {
    async fn before(&self) -> Result<bool, StoreError> {
        let (latency, failing, partitioned) = {
            let f = self.faults.lock();
            (f.latency, f.failing, f.partitioned.contains(&self.node))
        };
        if partitioned {
            std::future::pending::<()>().await;
        }
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if failing {
            return Err(StoreError::Unavailable {
                message: "injected failure".into(),
                source: None,
            });
        }
        Ok(self.faults.lock().lose_replies)
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseView for FaultyStore<S> {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.before().await?;
        self.inner.read(group).await
    }

    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        self.before().await?;
        self.inner.read_many(groups).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let walk = self.faults.lock().list_latency;
        if !walk.is_zero() {
            tokio::time::sleep(walk).await;
        }
        self.before().await?;
        self.inner.list(prefix).await
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        if self.faults.lock().no_notifications {
            return Ok(None);
        }
        self.inner.changes(group).await
    }

    /// The inner store's feed, as this node receives it: nothing while it
    /// is partitioned or notifications are off, then a resync.
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        if self.faults.lock().no_notifications {
            return Ok(None);
        }
        let Some(mut inner) = self.inner.watch().await? else {
            return Ok(None);
        };
        let (tx, feed) = StoreFeed::channel(FEED_CAPACITY);
        let (faults, node) = (self.faults.clone(), self.node.clone());
        tokio::spawn(async move {
            let mut missed = false;
            while let Some(change) = inner.next().await {
                let (blocked, silenced) = {
                    let f = faults.lock();
                    let blocked = f.no_notifications || f.partitioned.contains(&node);
                    (blocked, f.silenced.contains(&node))
                };
                if silenced {
                    continue;
                }
                if blocked {
                    missed = true;
                    continue;
                }
                if std::mem::take(&mut missed) && !tx.send(Change::Resync).await {
                    return;
                }
                if !tx.send(change).await {
                    return;
                }
            }
        });
        Ok(Some(feed))
    }

    fn describe(&self) -> String {
        format!("{} (faulty view of {})", self.inner.describe(), self.node)
    }

    fn running(&self) -> Running<'_> {
        self.inner.running().with_engine(&self.engine)
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseStore for FaultyStore<S> {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let lose = self.before().await?;
        let result = self.inner.compare_and_swap(group, expected, record).await;
        if lose {
            return Err(StoreError::Timeout(Duration::ZERO));
        }
        result
    }

    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        let lose = self.before().await?;
        let result = self.inner.compare_and_swap_many(requests).await;
        if lose {
            return Err(StoreError::Timeout(Duration::ZERO));
        }
        result
    }
}
