//! The seam every store implements: read, compare-and-swap, and an optional
//! change feed. As small as vimeo's `RaceDecider`.

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Version, Versioned};

/// The result of a compare-and-swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasOutcome {
    /// The record was written; this is its new version.
    Applied(Version),
    /// The stored version was not the expected one (or a record existed when
    /// none was expected); nothing was written.
    Conflict,
}

/// A stream of hints that a group's record may have changed. A hint carries
/// no data: the elector re-reads the record. Stores send a hint on every
/// change they see; extra hints are harmless, and when the feed ends the
/// elector falls back to polling.
#[derive(Debug)]
pub struct ChangeFeed {
    rx: mpsc::Receiver<()>,
}

impl ChangeFeed {
    /// A feed and the sender a store task uses to feed it. A small bound is
    /// enough: one pending hint already makes the elector re-read.
    pub fn channel() -> (mpsc::Sender<()>, ChangeFeed) {
        let (tx, rx) = mpsc::channel(1);
        (tx, ChangeFeed { rx })
    }

    /// Waits for the next hint; `None` once the store ended the feed.
    pub async fn changed(&mut self) -> Option<()> {
        self.rx.recv().await
    }
}

/// A linearizable register of lease records, one per group.
///
/// Implementations are thin adapters over the store's own atomic
/// compare-and-swap. They never interpret the record beyond encoding it, and
/// they never delete one: a release is a write of a record without a holder,
/// so the fencing token survives.
///
/// Reading a record this build cannot decode must fail with
/// [`StoreError::Record`]; since the elector only writes with a version it
/// read, such a record is never overwritten.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Reads the group's record and its version; `None` if the group has
    /// never been written (or the store lost it: the elector then still
    /// issues tokens above every token it has seen, but a store that can
    /// lose data should guard against it itself, as `tenure-redis` does).
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError>;

    /// Writes `record` if the stored version is `expected` (`None`: only if
    /// no record exists), atomically, in the store itself.
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError>;

    /// A feed of change hints for the group, if the store can notify.
    /// The default is `Ok(None)`: the elector polls. Should return promptly
    /// (do slow work in a spawned task); the elector gives up on it after
    /// its operation timeout and polls instead.
    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        let _ = group;
        Ok(None)
    }

    /// A short description for logs and status output, without secrets
    /// (for example `sqlite:///var/lib/tenure.db`).
    fn describe(&self) -> String;
}

#[async_trait]
impl<S: LeaseStore + ?Sized> LeaseStore for std::sync::Arc<S> {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        (**self).read(group).await
    }
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        (**self).compare_and_swap(group, expected, record).await
    }
    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        (**self).changes(group).await
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}

#[async_trait]
impl<S: LeaseStore + ?Sized> LeaseStore for Box<S> {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        (**self).read(group).await
    }
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        (**self).compare_and_swap(group, expected, record).await
    }
    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        (**self).changes(group).await
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}
