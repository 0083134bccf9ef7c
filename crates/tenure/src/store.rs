//! The seam every store implements: [`LeaseView`] (read, the change feeds,
//! list) and [`LeaseStore`] on top of it (compare-and-swap). As small as
//! vimeo's `RaceDecider`; a read-only user needs only the view.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::concurrent::InFlight;
use crate::engine::EngineSlot;
use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Version, Versioned};

mod last_seen;
pub use last_seen::LastSeen;

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

/// One compare-and-swap of a batch (see [`LeaseStore::compare_and_swap_many`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CasRequest {
    /// The group whose record to write.
    pub group: GroupName,
    /// The version the store must still have (`None`: no record may exist).
    pub expected: Option<Version>,
    /// The record to write.
    pub record: LeaseRecord,
}

/// What a store-wide change feed reports (see [`LeaseView::watch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The group's record was written and is now this. A feed that carries
    /// records spares every follower a read per renewal.
    Written {
        /// The group written.
        group: GroupName,
        /// The record as written, with its new version.
        current: Versioned,
    },
    /// Something about the group changed; read it to learn what.
    Hint {
        /// The group that may have changed.
        group: GroupName,
    },
    /// The feed may have missed changes (it reconnected, or fell behind):
    /// every group should be read again.
    Resync,
}

/// A store-wide stream of [`Change`]s, for every group of the store. Ends
/// (`None`) when the store gives up on it; the reader then polls.
#[derive(Debug)]
pub struct StoreFeed {
    rx: mpsc::Receiver<Change>,
}

/// The sending side of a [`StoreFeed`], held by the store's listener task.
#[derive(Clone, Debug)]
pub struct StoreFeedSender {
    tx: mpsc::Sender<Change>,
}

impl StoreFeed {
    /// A feed and its sender. `capacity` bounds the changes in flight; a
    /// listener that finds the feed full should send [`Change::Resync`] once
    /// room returns rather than block its connection for long.
    pub fn channel(capacity: usize) -> (StoreFeedSender, StoreFeed) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (StoreFeedSender { tx }, StoreFeed { rx })
    }

    /// The next change; `None` once the store ended the feed.
    pub async fn next(&mut self) -> Option<Change> {
        self.rx.recv().await
    }

    /// The next change if one is ready, without waiting.
    pub fn try_next(&mut self) -> Option<Change> {
        self.rx.try_recv().ok()
    }
}

impl StoreFeedSender {
    /// Sends a change, waiting for room; `false` once the reader is gone
    /// (the listener should then stop).
    pub async fn send(&self, change: Change) -> bool {
        self.tx.send(change).await.is_ok()
    }

    /// Sends a change if there is room: `Ok(false)` when the feed is full
    /// (the change is dropped: follow up with a [`Change::Resync`]),
    /// `Err(())` once the reader is gone.
    #[allow(
        clippy::result_unit_err,
        reason = "the only failure is \"the reader is gone\", which carries nothing"
    )]
    pub fn try_send(&self, change: Change) -> Result<bool, ()> {
        match self.tx.try_send(change) {
            Ok(()) => Ok(true),
            Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        }
    }

    /// Whether the reader is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Completes once the reader is gone, for a listener to stop on while
    /// it waits for its store.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

/// One group found by [`LeaseView::list`].
#[derive(Debug)]
pub struct Listed {
    /// The group found under the prefix.
    pub group: GroupName,
    /// Its record, or why it cannot be used.
    pub record: Result<Versioned, StoreError>,
}

impl Listed {
    /// What [`LeaseView::list`] returns for the groups a store found and
    /// their records, read afterwards in one batch (in the same order): a
    /// group whose record is gone by then (deleted between the listing and
    /// the read) is left out; one that cannot be read keeps its error.
    pub fn from_reads(
        groups: Vec<GroupName>,
        records: Vec<Result<Option<Versioned>, StoreError>>,
    ) -> Vec<Listed> {
        groups
            .into_iter()
            .zip(records)
            .filter_map(|(group, record)| record.transpose().map(|record| Listed { group, record }))
            .collect()
    }
}

/// A single read as a batch of one, for a store whose native read is the
/// batch (one statement, one script call): the batch's only entry, or an
/// unavailable store if it answered with none.
pub async fn read_as_batch<S: LeaseView + ?Sized>(
    store: &S,
    group: &GroupName,
) -> Result<Option<Versioned>, StoreError> {
    only_entry(store.read_many(std::slice::from_ref(group)).await?)
}

/// A single compare-and-swap as a batch of one, for a store whose native
/// write is the batch; see [`read_as_batch`].
pub async fn compare_and_swap_as_batch<S: LeaseStore + ?Sized>(
    store: &S,
    group: &GroupName,
    expected: Option<Version>,
    record: &LeaseRecord,
) -> Result<CasOutcome, StoreError> {
    let request = CasRequest {
        group: group.clone(),
        expected,
        record: record.clone(),
    };
    only_entry(
        store
            .compare_and_swap_many(std::slice::from_ref(&request))
            .await?,
    )
}

/// Checks that a store answered a batch of `asked` operations with as many
/// results: a server that answers with more or fewer is not one the
/// results can be matched to (`server` names it, `what` the batch).
pub fn check_batch_answer(
    server: &str,
    what: &str,
    asked: usize,
    answered: usize,
) -> Result<(), StoreError> {
    if asked == answered {
        return Ok(());
    }
    Err(StoreError::Unavailable {
        message: format!("{server} answered {what} of {asked} with {answered} results"),
        source: None,
    })
}

fn only_entry<T>(batch: Vec<Result<T, StoreError>>) -> Result<T, StoreError> {
    batch.into_iter().next().unwrap_or_else(|| {
        Err(StoreError::Unavailable {
            message: "the store answered a batch of one with no entry".into(),
            source: None,
        })
    })
}

/// How many single operations the default batch methods run at once.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// How often a [`FeedRelay`] that fell behind offers its reader the
/// resync it owes.
pub const RESYNC_RETRY: Duration = Duration::from_millis(20);

/// Hands changes from a store's listener to a [`StoreFeed`] without ever
/// waiting for its reader: when the feed is full, the change is dropped
/// and a [`Change::Resync`] is owed, sent as soon as there is room (it
/// covers every change dropped meanwhile). A listener that reads an
/// unbounded source (a socket's notifications) so never piles them up
/// behind a slow reader.
///
/// ```
/// use tenure::{Change, FeedRelay, GroupName, StoreFeed};
/// let (tx, mut feed) = StoreFeed::channel(1);
/// let mut relay = FeedRelay::new(tx);
/// let hint = |g: &str| Change::Hint { group: GroupName::new(g).unwrap() };
/// assert!(relay.send(hint("a")));
/// assert!(relay.send(hint("b"))); // full: dropped, a resync owed
/// assert!(relay.owes_resync());
/// assert_eq!(feed.try_next(), Some(hint("a")));
/// assert!(relay.settle());
/// assert_eq!(feed.try_next(), Some(Change::Resync));
/// ```
#[derive(Debug)]
pub struct FeedRelay {
    tx: StoreFeedSender,
    owes_resync: bool,
}

impl FeedRelay {
    /// A relay into the feed of `tx`, owing nothing.
    pub fn new(tx: StoreFeedSender) -> Self {
        FeedRelay {
            tx,
            owes_resync: false,
        }
    }

    /// Relays one change (or the resync owed, which covers it); `false`
    /// once the reader is gone and the listener should stop.
    pub fn send(&mut self, change: Change) -> bool {
        if !self.settle() {
            return false;
        }
        if self.owes_resync {
            return true;
        }
        match self.tx.try_send(change) {
            Ok(sent) => {
                self.owes_resync = !sent;
                true
            }
            Err(()) => false,
        }
    }

    /// Notes that changes were missed (the listener reconnected), and
    /// offers the resync at once; `false` once the reader is gone.
    pub fn missed(&mut self) -> bool {
        self.owes_resync = true;
        self.settle()
    }

    /// After the connection feeding the relay failed: unless the reader is
    /// gone, opens a new one (`reopen`, not called when the reader is gone)
    /// and, once it is open, owes the reader a resync (changes made
    /// meanwhile were missed) and offers it. The new connection, or `None`
    /// when the feed should end: the reader is gone, or reopening failed
    /// (`failed` is told why; the engine then polls until it subscribes
    /// again).
    pub async fn reconnect<S, E, Fut>(
        &mut self,
        reopen: impl FnOnce() -> Fut,
        failed: impl FnOnce(E),
    ) -> Option<S>
    where
        Fut: Future<Output = Result<S, E>>,
    {
        if self.is_closed() {
            return None;
        }
        match reopen().await {
            Ok(again) => self.missed().then_some(again),
            Err(e) => {
                failed(e);
                None
            }
        }
    }

    /// Offers the resync owed, if any; `false` once the reader is gone.
    /// Call it now and then while one is owed: nothing else may come to
    /// carry it.
    pub fn settle(&mut self) -> bool {
        if !self.owes_resync {
            return !self.tx.is_closed();
        }
        match self.tx.try_send(Change::Resync) {
            Ok(sent) => {
                self.owes_resync = !sent;
                true
            }
            Err(()) => false,
        }
    }

    /// Whether a resync is owed.
    pub fn owes_resync(&self) -> bool {
        self.owes_resync
    }

    /// Waits for `source` (the listener's next event) while doing the
    /// relay's own duties meanwhile: offering the resync owed every
    /// [`RESYNC_RETRY`], since nothing else may come to carry it, and
    /// noticing the reader is gone. `None` once it is: the listener should
    /// stop.
    pub async fn next<T>(&mut self, source: impl Future<Output = T>) -> Option<T> {
        let mut source = std::pin::pin!(source);
        let tx = self.tx.clone();
        loop {
            tokio::select! {
                item = &mut source => return Some(item),
                () = tx.closed() => return None,
                () = tokio::time::sleep(RESYNC_RETRY), if self.owes_resync => {
                    if !self.settle() {
                        return None;
                    }
                }
            }
        }
    }

    /// Whether the reader is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// A store's per-group change feeds, turned off for a while after the
/// server refused one (an ACL without the permission it needs), so that
/// electors poll meanwhile instead of asking again for a feed that cannot
/// work. Clones share the state.
#[derive(Clone, Debug, Default)]
pub struct FeedsOff(std::sync::Arc<std::sync::Mutex<Option<tokio::time::Instant>>>);

impl FeedsOff {
    /// Whether feeds are off now.
    pub fn now(&self) -> bool {
        let mut off = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match *off {
            Some(until) if tokio::time::Instant::now() < until => true,
            Some(_) => {
                *off = None;
                false
            }
            None => false,
        }
    }

    /// Turns feeds off for `retry_after` from now.
    pub fn for_a_while(&self, retry_after: std::time::Duration) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(tokio::time::Instant::now() + retry_after);
    }
}

/// How long a store's listener pauses before it watches again after
/// `failures` failed attempts in a row: 50 ms, doubling, at most 2 s (a
/// feed that stays down leaves the electors polling meanwhile).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tenure::store::feed_backoff(1), Duration::from_millis(50));
/// assert_eq!(tenure::store::feed_backoff(3), Duration::from_millis(200));
/// assert_eq!(tenure::store::feed_backoff(u32::MAX), Duration::from_secs(2));
/// ```
pub fn feed_backoff(failures: u32) -> std::time::Duration {
    const FIRST: std::time::Duration = std::time::Duration::from_millis(50);
    const MOST: std::time::Duration = std::time::Duration::from_secs(2);
    let exp = failures.saturating_sub(1).min(16);
    (FIRST * 2u32.pow(exp)).min(MOST)
}

/// Hints the reader of a [`ChangeFeed`] without waiting; `false` once the
/// reader is gone. A full channel already holds a hint: the reader re-reads
/// once and sees this change too.
///
/// ```
/// let (tx, mut feed) = tenure::ChangeFeed::channel();
/// assert!(tenure::store::send_hint(&tx));
/// assert!(tenure::store::send_hint(&tx), "a full channel is no error");
/// drop(feed);
/// assert!(!tenure::store::send_hint(&tx));
/// ```
pub fn send_hint(tx: &mpsc::Sender<()>) -> bool {
    !matches!(tx.try_send(()), Err(mpsc::error::TrySendError::Closed(_)))
}

/// What [`keep_hinting`] hands each attempt of a per-group hint feed (one
/// watch or subscription): the attempt calls
/// [`connected`](HintAttempt::connected) once it is up, so that the
/// back-off after a later failure starts again from the shortest.
#[derive(Clone, Debug, Default)]
pub struct HintAttempt {
    connected: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl HintAttempt {
    /// The watch or subscription is up: the failures before it no longer
    /// count.
    pub fn connected(&self) {
        self.connected
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Keeps a per-group hint feed alive for as long as its reader (`tx`'s
/// receiver) is there. `attempt` is one watch or subscription: it hints
/// until the reader is gone (`Ok(())`) or the connection breaks (`Err`).
/// After a transient failure (reported to `lost`) it runs again, once
/// [`feed_backoff`] of the failures in a row has passed (a failure after
/// the attempt [connected](HintAttempt::connected) is the first in a row).
/// `Ok(())` once the reader is gone; `Err` with the first failure an
/// operator must fix (a permission, say), after which the store's electors
/// poll.
pub async fn keep_hinting<E, F, A>(
    tx: &mpsc::Sender<()>,
    mut attempt: F,
    mut lost: impl FnMut(&E),
) -> Result<(), E>
where
    E: crate::error::BackendError,
    F: FnMut(HintAttempt) -> A,
    A: Future<Output = Result<(), E>>,
{
    let mut failures = 0u32;
    loop {
        let this = HintAttempt::default();
        let outcome = tokio::select! {
            _ = tx.closed() => return Ok(()),
            r = attempt(this.clone()) => r,
        };
        match outcome {
            Ok(()) => return Ok(()),
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => {
                if this.connected.load(std::sync::atomic::Ordering::Relaxed) {
                    failures = 0;
                }
                failures = failures.saturating_add(1);
                lost(&e);
            }
        }
        tokio::select! {
            _ = tx.closed() => return Ok(()),
            _ = tokio::time::sleep(feed_backoff(failures)) => {}
        }
    }
}

/// Per-item results of a batch, or the failure of the batch as a whole.
pub type BatchResult<T> = Result<Vec<Result<T, StoreError>>, StoreError>;

/// The read side of a store: what watching a group takes, without the
/// power to write one.
///
/// [`Observer`](crate::Observer) and other read-only users (the CLI's
/// `status` and `watch`, a view of leadership decided elsewhere such as
/// Kafka's heartbeats) need only this. Every [`LeaseStore`] is a
/// `LeaseView`; a type that cannot write implements `LeaseView` alone
/// rather than a compare-and-swap that always fails.
///
/// Reading a record this build cannot decode must fail with
/// [`StoreError::Record`]; since the elector only writes with a version it
/// read, such a record is never overwritten.
#[async_trait]
pub trait LeaseView: Send + Sync + 'static {
    /// Reads the group's record and its version; `None` if the group has
    /// never been written (or the store lost it: the elector then still
    /// issues tokens above every token it has seen, but a store that can
    /// lose data should guard against it itself, as `tenure-redis` does).
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError>;

    /// A feed of change hints for the group, if the store can notify.
    /// The default is `Ok(None)`: the elector polls. Should return promptly
    /// (do slow work in a spawned task); the elector gives up on it after
    /// its operation timeout and polls instead.
    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        let _ = group;
        Ok(None)
    }

    /// Reads many groups' records. The result has one entry per group, in
    /// order; an entry fails alone (a corrupt record) or the whole batch
    /// fails (the store is unreachable).
    ///
    /// The default sends one read per group, in flight together under
    /// [`in_flight`](LeaseView::in_flight) (one after another, a batch of a
    /// few hundred would outlast the operation timeout); stores override it
    /// with fewer round trips (one statement, one script call, a pipeline).
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let limit = self.in_flight().cloned().unwrap_or_else(default_in_flight);
        Ok(limit.read_each(groups, |g| self.read(g)).await)
    }

    /// The bound on requests in flight at once that this handle's clones
    /// share, for a store whose batches are single requests sent together
    /// (each request atomic on its own, as every batch must be): the
    /// default [`read_many`](LeaseView::read_many) and
    /// [`compare_and_swap_many`](LeaseStore::compare_and_swap_many) send
    /// through it, so that every batch of every elector on the handle
    /// stays within one bound. The default (`None`) bounds each batch on
    /// its own, [`DEFAULT_CONCURRENCY`] at a time.
    fn in_flight(&self) -> Option<&InFlight> {
        None
    }

    /// Lists every group whose name starts with `prefix` (byte for byte, no
    /// wildcards), with its record: what membership of a sharded set is read
    /// from (see [`Shards`](crate::Shards)). An entry whose record cannot be
    /// decoded fails alone. The order is unspecified.
    ///
    /// The default fails with [`StoreError::Unsupported`]: a store that
    /// cannot enumerate its groups cannot host a sharded set.
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let _ = prefix;
        Err(StoreError::Unsupported {
            what: "listing groups by prefix",
            store: self.describe(),
        })
    }

    /// One feed of changes for every group of this store, if the store can
    /// notify: what the engine that runs many groups listens to (one
    /// connection, not one per group). The default is `Ok(None)`: polling.
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        Ok(None)
    }

    /// A short description for logs and status output, without secrets
    /// (for example `sqlite:///var/lib/tenure.db`).
    fn describe(&self) -> String;
}

/// A linearizable register of lease records, one per group: a
/// [`LeaseView`] that can also write, by compare-and-swap.
///
/// Implementations are thin adapters over the store's own atomic
/// compare-and-swap. They never interpret the record beyond encoding it, and
/// they never delete one: a release is a write of a record without a holder,
/// so the fencing token survives.
///
/// # Migrating a store written before the split
///
/// The read methods used to live in this trait too. A store of your own
/// now implements two traits: move `read`, `describe` and whichever of
/// `changes`, `read_many`, `list` and `watch` you override, unchanged, into
/// an `impl LeaseView for YourStore` (with `#[async_trait]`), and keep
/// `compare_and_swap` and the rest here. Code that calls `store.read(..)` on
/// a concrete store imports [`LeaseView`] as well (`use tenure::{LeaseStore,
/// LeaseView};`); generic code bound by `S: LeaseStore` and
/// `Arc<dyn LeaseStore>` need no change, and `Elector::builder(store, ..)`
/// takes the same stores as before.
///
/// ```
/// use async_trait::async_trait;
/// use tenure::{
///     CasOutcome, GroupName, LeaseRecord, LeaseStore, LeaseView, MemoryStore, StoreError,
///     Version, Versioned,
/// };
///
/// /// A store that forwards to another, as a store of your own would
/// /// forward to its database.
/// struct Wrapped(MemoryStore);
///
/// #[async_trait]
/// impl LeaseView for Wrapped {
///     async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
///         self.0.read(group).await
///     }
///     fn describe(&self) -> String {
///         "wrapped memory".into()
///     }
/// }
///
/// #[async_trait]
/// impl LeaseStore for Wrapped {
///     async fn compare_and_swap(
///         &self,
///         group: &GroupName,
///         expected: Option<Version>,
///         record: &LeaseRecord,
///     ) -> Result<CasOutcome, StoreError> {
///         self.0.compare_and_swap(group, expected, record).await
///     }
/// }
/// # let _ = tenure::Elector::builder(Wrapped(MemoryStore::new()), "g");
/// ```
#[async_trait]
pub trait LeaseStore: LeaseView {
    /// Writes `record` if the stored version is `expected` (`None`: only if
    /// no record exists), atomically, in the store itself.
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError>;

    /// Performs many compare-and-swaps, each atomic on its own and
    /// independent of the others (never all-or-nothing: one group's
    /// conflict must not undo another's renewal). The result has one entry
    /// per request, in order. A batch that fails as a whole may have
    /// applied any subset of its requests, like a timed-out single write.
    ///
    /// The default sends one compare-and-swap per request, different
    /// groups in flight together under [`in_flight`](LeaseView::in_flight)
    /// and one group's writes one after the other, as listed; stores
    /// override it with fewer round trips where the store allows
    /// independent writes in one request.
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        let limit = self.in_flight().cloned().unwrap_or_else(default_in_flight);
        let results = limit
            .compare_and_swap_each(requests, |r| {
                self.compare_and_swap(&r.group, r.expected, &r.record)
            })
            .await;
        Ok(results)
    }

    /// How many operations one batch call (of reads or of writes) should
    /// carry: the engine splits larger batches. Stores with a native batch
    /// (one statement, one script call) raise it; the default suits the
    /// default batch methods, which run the single operations concurrently,
    /// [`DEFAULT_CONCURRENCY`] at a time, so that a batch takes a few round
    /// trips, not hundreds.
    fn batch_size_hint(&self) -> usize {
        DEFAULT_CONCURRENCY * 4
    }

    /// The slot through which electors built from clones of this store
    /// handle find and share one engine. Stores return a slot kept in the
    /// state their clones share; the default (`None`) gives every elector
    /// an engine of its own.
    fn engine_slot(&self) -> Option<&EngineSlot> {
        None
    }
}

/// The bound of a batch on a store that shares none between batches.
fn default_in_flight() -> InFlight {
    InFlight::new(DEFAULT_CONCURRENCY)
}

/// Forwards every method of both traits to the store behind a pointer, so
/// `Arc<dyn LeaseStore>`, `Box<S>` and the like are stores (and views)
/// themselves.
macro_rules! forward_through_pointer {
    ($($pointer:ident)::+) => {
        #[async_trait]
        impl<S: LeaseView + ?Sized> LeaseView for $($pointer)::+<S> {
            async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
                (**self).read(group).await
            }
            async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
                (**self).changes(group).await
            }
            async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
                (**self).read_many(groups).await
            }
            async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
                (**self).list(prefix).await
            }
            async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
                (**self).watch().await
            }
            fn describe(&self) -> String {
                (**self).describe()
            }
            fn in_flight(&self) -> Option<&InFlight> {
                (**self).in_flight()
            }
        }

        #[async_trait]
        impl<S: LeaseStore + ?Sized> LeaseStore for $($pointer)::+<S> {
            async fn compare_and_swap(
                &self,
                group: &GroupName,
                expected: Option<Version>,
                record: &LeaseRecord,
            ) -> Result<CasOutcome, StoreError> {
                (**self).compare_and_swap(group, expected, record).await
            }
            async fn compare_and_swap_many(
                &self,
                requests: &[CasRequest],
            ) -> BatchResult<CasOutcome> {
                (**self).compare_and_swap_many(requests).await
            }
            fn batch_size_hint(&self) -> usize {
                (**self).batch_size_hint()
            }
            fn engine_slot(&self) -> Option<&EngineSlot> {
                (**self).engine_slot()
            }
        }
    };
}

forward_through_pointer!(std::sync::Arc);
forward_through_pointer!(Box);

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(g: &str) -> Change {
        Change::Hint {
            group: GroupName::new(g).unwrap(),
        }
    }

    /// While the source has nothing, `next` still offers the resync owed
    /// once the reader makes room, and ends when the reader is gone.
    #[tokio::test(start_paused = true)]
    async fn next_offers_the_resync_owed_while_the_source_is_quiet() {
        let (tx, mut feed) = StoreFeed::channel(1);
        let mut relay = FeedRelay::new(tx);
        assert!(relay.send(hint("a")));
        assert!(relay.send(hint("b")), "full: dropped, a resync owed");
        assert_eq!(feed.try_next(), Some(hint("a")));
        let quiet = std::future::pending::<()>();
        let waited = tokio::time::timeout(RESYNC_RETRY * 3, relay.next(quiet)).await;
        assert!(waited.is_err(), "the source never answered");
        assert_eq!(feed.try_next(), Some(Change::Resync));
        assert!(!relay.owes_resync());
        drop(feed);
        assert_eq!(relay.next(std::future::pending::<()>()).await, None);
    }

    /// What the source yields is passed through.
    #[tokio::test(start_paused = true)]
    async fn next_passes_the_source_through() {
        let (tx, _feed) = StoreFeed::channel(1);
        let mut relay = FeedRelay::new(tx);
        assert_eq!(relay.next(async { 7 }).await, Some(7));
    }

    /// A transient failure is tried again after the back-off of the
    /// failures in a row (reset by an attempt that connects); the first
    /// failure an operator must fix ends the feed with it; a gone reader
    /// ends it quietly.
    #[tokio::test(start_paused = true)]
    async fn keep_hinting_retries_transient_failures_and_stops_at_a_refusal() {
        use crate::error::ConnectError;
        let (tx, _feed) = ChangeFeed::channel();
        let start = tokio::time::Instant::now();
        let mut calls = Vec::new();
        let mut lost = 0;
        let ended = keep_hinting(
            &tx,
            |attempt: HintAttempt| {
                calls.push(start.elapsed());
                let n = calls.len();
                async move {
                    if n == 3 {
                        attempt.connected();
                    }
                    if n < 5 {
                        Err(ConnectError::Store(StoreError::unavailable("down", "io")))
                    } else {
                        Err(ConnectError::InvalidUrl {
                            store: "test",
                            url: "t://h".into(),
                            reason: "refused".into(),
                        })
                    }
                }
            },
            |e: &ConnectError| {
                assert!(e.is_transient());
                lost += 1;
            },
        )
        .await;
        assert!(matches!(ended, Err(ConnectError::InvalidUrl { .. })));
        assert_eq!(lost, 4);
        let ms = |m| Duration::from_millis(m);
        // 50 ms after the first failure, 100 ms after the second; the third
        // came after the attempt connected: 50 ms again.
        assert_eq!(calls, [ms(0), ms(50), ms(150), ms(200), ms(300)]);

        let (tx, feed) = ChangeFeed::channel();
        drop(feed);
        let gone = keep_hinting(
            &tx,
            |_| std::future::pending(),
            |_: &ConnectError| panic!("nothing failed"),
        )
        .await;
        assert!(gone.is_ok());
    }

    /// A reconnect owes and offers a resync; a failed one is reported and
    /// ends the feed; with the reader gone nothing is reopened.
    #[tokio::test]
    async fn reconnect_resyncs_after_reopening_and_ends_when_it_cannot() {
        let (tx, mut feed) = StoreFeed::channel(4);
        let mut relay = FeedRelay::new(tx);
        let again = relay
            .reconnect(|| async { Ok::<_, String>(7) }, |e| panic!("{e}"))
            .await;
        assert_eq!(again, Some(7));
        assert_eq!(feed.try_next(), Some(Change::Resync));
        let mut told = None;
        let failed = relay
            .reconnect(
                || async { Err::<u8, _>("refused".to_owned()) },
                |e| told = Some(e),
            )
            .await;
        assert_eq!((failed, told.as_deref()), (None, Some("refused")));
        drop(feed);
        let gone = relay
            .reconnect(
                || -> std::future::Ready<Result<u8, String>> {
                    panic!("reopened for a reader that is gone")
                },
                |e: String| panic!("{e}"),
            )
            .await;
        assert_eq!(gone, None::<u8>);
    }
}
