//! A store with one server of finite speed, for overload tests on tokio's
//! paused clock: every operation waits its turn, then takes a fixed service
//! time, so the latency of a call grows with the queue in front of it, as a
//! real store's does past its capacity. An operation its caller abandoned
//! is still served (a real server does not know the client gave up),
//! which is what turns a brief overload into a lasting one for a client
//! that keeps sending.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use tenure::engine::EngineSlot;
use tenure::record::{GroupName, LeaseRecord, Version, Versioned};
use tenure::store::Running;
use tenure::store::{
    BatchResult, CasOutcome, CasRequest, ChangeFeed, LeaseStore, LeaseView, Listed, StoreFeed,
};
use tenure::StoreError;

/// `inner` behind one server that takes `per_op` for every operation (a
/// batch of n takes n times that); change feeds are free. Clones share the
/// server and an engine.
///
/// ```
/// use std::time::Duration;
/// use tenure_testkit::ServiceTimeStore;
/// use tenure::MemoryStore;
/// // A store that serves 1,000 operations a second.
/// let store = ServiceTimeStore::new(MemoryStore::new(), Duration::from_millis(1));
/// store.set_per_op(Duration::from_millis(2)); // now half as fast
/// ```
#[derive(Clone, Debug)]
pub struct ServiceTimeStore<S> {
    inner: S,
    server: Arc<tokio::sync::Mutex<()>>,
    per_op: Arc<Mutex<Duration>>,
    engine: Arc<EngineSlot>,
}

impl<S: LeaseStore + Clone> ServiceTimeStore<S> {
    /// `inner` served at `per_op` an operation.
    pub fn new(inner: S, per_op: Duration) -> Self {
        ServiceTimeStore {
            inner,
            server: Arc::new(tokio::sync::Mutex::new(())),
            per_op: Arc::new(Mutex::new(per_op)),
            engine: Arc::new(EngineSlot::new()),
        }
    }

    /// Changes the service time of every operation from now on.
    pub fn set_per_op(&self, per_op: Duration) {
        *self.per_op.lock().unwrap_or_else(|p| p.into_inner()) = per_op;
    }

    /// Runs `op` on the inner store once `ops` operations' worth of the
    /// server's time is spent, in a task of its own that goes on if the
    /// caller gives up.
    async fn serve<T, F, Fut>(&self, ops: usize, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(S) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send,
    {
        let (server, inner) = (self.server.clone(), self.inner.clone());
        let per_op = *self.per_op.lock().unwrap_or_else(|p| p.into_inner());
        let cost = per_op.saturating_mul(u32::try_from(ops).unwrap_or(u32::MAX));
        let served = tokio::spawn(async move {
            let _turn = server.lock().await;
            tokio::time::sleep(cost).await;
            op(inner).await
        });
        served
            .await
            .unwrap_or_else(|e| Err(StoreError::unavailable("the served operation panicked", e)))
    }
}

#[async_trait]
impl<S: LeaseStore + Clone> LeaseView for ServiceTimeStore<S> {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        let group = group.clone();
        self.serve(1, move |s| async move { s.read(&group).await })
            .await
    }

    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let groups = groups.to_vec();
        self.serve(
            groups.len(),
            move |s| async move { s.read_many(&groups).await },
        )
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let prefix = prefix.to_owned();
        self.serve(1, move |s| async move { s.list(&prefix).await })
            .await
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        self.inner.changes(group).await
    }

    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        self.inner.watch().await
    }

    fn describe(&self) -> String {
        format!("{} (one server of finite speed)", self.inner.describe())
    }

    fn running(&self) -> Running<'_> {
        self.inner.running().with_engine(&self.engine)
    }
}

#[async_trait]
impl<S: LeaseStore + Clone> LeaseStore for ServiceTimeStore<S> {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let (group, record) = (group.clone(), record.clone());
        self.serve(1, move |s| async move {
            s.compare_and_swap(&group, expected, &record).await
        })
        .await
    }

    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        let requests = requests.to_vec();
        self.serve(requests.len(), move |s| async move {
            s.compare_and_swap_many(&requests).await
        })
        .await
    }
}
