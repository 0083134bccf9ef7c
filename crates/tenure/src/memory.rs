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

use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Version, Versioned};
use crate::store::{CasOutcome, ChangeFeed, LeaseStore};

#[derive(Default)]
struct Register {
    /// Encoded records, so that decoding (and corrupt records) are real.
    rows: HashMap<GroupName, (Version, Vec<u8>)>,
    watchers: HashMap<GroupName, Vec<mpsc::Sender<()>>>,
}

/// An in-process lease store. Clones share the same records.
///
/// ```
/// # tokio_test();
/// # fn tokio_test() { tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use tenure::{LeaseStore, MemoryStore, GroupName};
/// let store = MemoryStore::new();
/// assert!(store.read(&GroupName::new("jobs").unwrap()).await.unwrap().is_none());
/// # }) }
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Register>>,
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

    /// Reads without awaiting: the same operation as [`LeaseStore::read`],
    /// for the deterministic simulation.
    pub fn read_now(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        let reg = self.lock();
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

    /// Compare-and-swap without awaiting, for the deterministic simulation.
    pub fn compare_and_swap_now(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> CasOutcome {
        let mut reg = self.lock();
        let current = reg.rows.get(group).map(|(v, _)| *v);
        if current != expected {
            return CasOutcome::Conflict;
        }
        let version = Version(current.map_or(1, |v| v.0 + 1));
        reg.rows.insert(group.clone(), (version, record.encode()));
        if let Some(watchers) = reg.watchers.get_mut(group) {
            // A full channel already holds a hint; a closed one is dropped.
            watchers
                .retain(|tx| !matches!(tx.try_send(()), Err(mpsc::error::TrySendError::Closed(_))));
        }
        CasOutcome::Applied(version)
    }

    /// Stores raw bytes as the group's record, bypassing every check: for
    /// tests of corrupt and foreign records.
    pub fn put_raw(&self, group: &GroupName, bytes: &[u8]) {
        let mut reg = self.lock();
        let version = Version(reg.rows.get(group).map_or(1, |(v, _)| v.0 + 1));
        reg.rows.insert(group.clone(), (version, bytes.to_vec()));
    }

    /// The raw bytes stored for the group.
    pub fn get_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        self.lock().rows.get(group).map(|(_, b)| b.clone())
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.read_now(group)
    }

    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        Ok(self.compare_and_swap_now(group, expected, record))
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
}

#[derive(Default, Debug)]
struct FaultState {
    latency: Duration,
    failing: bool,
    lose_replies: bool,
    no_notifications: bool,
    partitioned: HashSet<String>,
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
        }
    }

    /// Adds latency to every operation (before it reaches the store).
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
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
}

/// A [`LeaseStore`] seen through [`Faults`], as one candidate sees it.
#[derive(Clone, Debug)]
pub struct FaultyStore<S> {
    inner: S,
    faults: Faults,
    node: String,
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
impl<S: LeaseStore> LeaseStore for FaultyStore<S> {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.before().await?;
        self.inner.read(group).await
    }

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

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        if self.faults.lock().no_notifications {
            return Ok(None);
        }
        self.inner.changes(group).await
    }

    fn describe(&self) -> String {
        format!("{} (faulty view of {})", self.inner.describe(), self.node)
    }
}
