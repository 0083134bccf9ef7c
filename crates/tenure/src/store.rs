//! The seam every store implements: [`LeaseView`] (read, the change feeds,
//! list) and [`LeaseStore`] on top of it (compare-and-swap). As small as
//! vimeo's `RaceDecider`; a read-only user needs only the view.
//!
//! **This module is for store authors.** A service that elects a leader
//! needs only [`LeaseStore`] and [`LeaseView`] (also at the crate root) and
//! a store crate; what a store is built from is here: the operations'
//! types ([`CasRequest`], [`CasOutcome`], [`BatchResult`], [`Listed`]), the
//! feeds ([`ChangeFeed`], [`StoreFeed`], [`Change`], [`FeedRelay`]), how
//! the engine runs a store ([`Running`]), a counting wrapper
//! ([`Counted`]), and the helpers every store crate shares: [`url`]
//! (options from a URL, redacted), [`tls`] (the PEM files a URL names),
//! [`secret`] (values that never print), [`concurrent`] (batches as
//! requests in flight). A new store proves itself with the conformance
//! suite of the `tenure-testkit` crate. Import what you use by name:
//! `use tenure::store::*` also brings the modules `url` and `tls`, which
//! clash with the crates of those names.

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::engine::EngineSlot;
use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Version, Versioned};
use crate::store::concurrent::InFlight;

mod batch;
mod counted;
mod feed_relay;
mod last_seen;

pub mod concurrent;
pub mod secret;
pub mod tls;
pub mod url;

pub(crate) use batch::spread;
pub use batch::{check_batch_answer, compare_and_swap_as_batch, read_as_batch};
pub use counted::{Counted, OpCounters, OpCounts};
pub use feed_relay::{
    feed_backoff, keep_hinting, send_hint, FeedRelay, FeedsOff, HintAttempt, RESYNC_RETRY,
};
pub use last_seen::LastSeen;

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
    /// [`Running::in_flight`] (one after another, a batch of a few hundred
    /// would outlast the operation timeout); stores override it with fewer
    /// round trips (one statement, one script call, a pipeline).
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let limit = self.running().in_flight_or_default();
        Ok(limit.read_each(groups, |g| self.read(g)).await)
    }

    /// How the engine runs this store, as one value (see [`Running`]): a
    /// wrapper forwards it whole, so that it cannot keep one part of it
    /// and drop another. The default suits a store with no batches of its
    /// own, no shared bound and no shared engine.
    fn running(&self) -> Running<'_> {
        Running::default()
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
    /// groups in flight together under [`Running::in_flight`] and one
    /// group's writes one after the other, as listed; stores override it
    /// with fewer round trips where the store allows independent writes in
    /// one request.
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        let limit = self.running().in_flight_or_default();
        let results = limit
            .compare_and_swap_each(requests, |r| {
                self.compare_and_swap(&r.group, r.expected, &r.record)
            })
            .await;
        Ok(results)
    }
}

/// How the engine runs a store, apart from what the store is (read,
/// compare-and-swap, batches, feeds, list): one value that
/// [`LeaseView::running`] returns and a wrapper forwards whole.
///
/// Built with [`Running::new`] (a store) or from the inner store's
/// (`self.inner.running()`, a wrapper, changed with the `with_` methods);
/// more settings may come, so it cannot be written as a struct literal.
///
/// ```
/// use tenure::store::concurrent::InFlight;
/// use tenure::store::Running;
/// use tenure::EngineSlot;
/// let (bound, slot) = (InFlight::new(64), EngineSlot::new());
/// // A store whose single requests go out together, 64 at a time over all
/// // of its handles, whose batch takes 500 operations, and whose handles
/// // share one engine.
/// let running = Running::new(500, &slot).bounded_by(&bound);
/// assert_eq!(running.in_flight_or_default().limit(), 64);
/// assert_eq!(running.batch_size, 500);
/// assert!(running.engine.is_some());
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Running<'a> {
    /// The bound on requests in flight at once that the handle's clones
    /// share, for a store whose batches are single requests sent together
    /// (each atomic on its own, as every batch must be): the default
    /// [`read_many`](LeaseView::read_many) and
    /// [`compare_and_swap_many`](LeaseStore::compare_and_swap_many) send
    /// through it, so that every batch of every elector on the handle
    /// stays within one bound. `None` bounds each batch on its own,
    /// [`DEFAULT_CONCURRENCY`] at a time.
    pub in_flight: Option<&'a InFlight>,
    /// How many operations one batch call (of reads or of writes) should
    /// carry: the engine splits larger batches. Stores with a native batch
    /// (one statement, one script call) raise it; the default,
    /// [`DEFAULT_BATCH_SIZE`], suits the default batch methods, which run
    /// the single operations [`DEFAULT_CONCURRENCY`] at a time, so that a
    /// batch takes a few round trips, not hundreds.
    pub batch_size: usize,
    /// The slot through which electors built from clones of this handle
    /// find and share one engine: a slot kept in the state the clones
    /// share. `None` gives every elector an engine of its own.
    pub engine: Option<&'a EngineSlot>,
}

impl Default for Running<'_> {
    fn default() -> Self {
        Running {
            in_flight: None,
            batch_size: DEFAULT_BATCH_SIZE,
            engine: None,
        }
    }
}

impl<'a> Running<'a> {
    /// A store's engine slot and batch size, with no shared bound on
    /// requests in flight.
    pub fn new(batch_size: usize, engine: &'a EngineSlot) -> Self {
        Running {
            in_flight: None,
            batch_size,
            engine: Some(engine),
        }
    }

    /// The same, its single requests bounded by `in_flight` over all the
    /// handle's clones.
    pub fn bounded_by(self, in_flight: &'a InFlight) -> Self {
        Running {
            in_flight: Some(in_flight),
            ..self
        }
    }

    /// The same, with the engine slot `engine` (a wrapper that keeps an
    /// engine of its own over its inner store's).
    pub fn with_engine(self, engine: &'a EngineSlot) -> Self {
        Running {
            engine: Some(engine),
            ..self
        }
    }

    /// The same, with batches of `batch_size` operations.
    pub fn with_batch_size(self, batch_size: usize) -> Self {
        Running { batch_size, ..self }
    }

    /// The shared bound, or one of [`DEFAULT_CONCURRENCY`] for this batch
    /// alone.
    pub fn in_flight_or_default(&self) -> InFlight {
        self.in_flight
            .cloned()
            .unwrap_or_else(|| InFlight::new(DEFAULT_CONCURRENCY))
    }
}

/// The batch size of a store that keeps the default batch methods.
pub const DEFAULT_BATCH_SIZE: usize = DEFAULT_CONCURRENCY * 4;

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
            fn running(&self) -> Running<'_> {
                (**self).running()
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
        }
    };
}

forward_through_pointer!(std::sync::Arc);
forward_through_pointer!(Box);

/// How many single operations the default batch methods run at once.
pub const DEFAULT_CONCURRENCY: usize = 16;

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

/// `op`'s answer, or [`StoreError::Timeout`] once `limit` has passed on
/// `clock`: a reply lost on the way (a connection black-holed by a
/// partition) must not hold a task that waits for it for ever.
pub(crate) async fn bounded<T, E: From<StoreError>>(
    clock: &dyn crate::clock::Clock,
    limit: std::time::Duration,
    op: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let deadline = clock.now().mono + limit;
    tokio::select! {
        biased;
        r = op => r,
        () = clock.sleep_until(deadline) => Err(StoreError::Timeout(limit).into()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
