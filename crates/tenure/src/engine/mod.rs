//! The engine: one task that runs the lease elections of every group a
//! process campaigns for on one store.
//!
//! Each group keeps its own sans-IO [`Machine`](crate::machine::Machine); the engine feeds them time,
//! store replies and the handle's commands, and carries out their actions.
//! What it adds is what makes the number of groups cheap:
//!
//! * **One timer structure.** The engine sleeps until the earliest wake-up
//!   of all its groups (a heap), not a task and a sleep per group.
//! * **Batched store operations.** Every read and compare-and-swap the
//!   machines ask for in one turn goes out together, through
//!   [`LeaseView::read_many`](crate::LeaseView::read_many) and [`LeaseStore::compare_and_swap_many`]
//!   (one statement, one script call, a pipeline), with a bounded number of
//!   batches in flight, so connections do not grow with the groups.
//! * **Renewals that coalesce.** When one group's renewal falls due, every
//!   leader whose renewal is due within half a renew interval renews with
//!   it ([`Input::RenewEarly`](crate::machine::Input::RenewEarly)). Renewing early is never unsafe (a renewal
//!   anchors its deadline at its own send, so an earlier send gives an
//!   earlier deadline, and a deadline never moves back), and it never moves
//!   a renewal later than its schedule. The leaders settle into at most two
//!   or three batches per renew interval. Polls of waiting candidates (on a
//!   store that cannot notify) coalesce the same way.
//! * **One change feed per store** ([`LeaseView::watch`](crate::LeaseView::watch)), demultiplexed by
//!   group. A feed that carries the written record spares followers a read
//!   per renewal; while it is up they do not poll at all.
//!
//! And what keeps it standing when the store cannot keep up:
//!
//! * **Priorities.** Operations go out in the order of what they protect:
//!   renewals (and a leader's verifying reads) first, then releases, then
//!   acquisitions, then polls; the last batch slot is kept for the first
//!   two.
//! * **Admission.** Acquisitions and polls are sent only as far as an AIMD
//!   window sized by the store's measured service time allows (see
//!   `admission.rs`), so groups starting by the hundred thousand, or a store
//!   that slows down, never crowd out the renewals of terms already held.
//!   One that waits out its whole timeout unsent is answered
//!   [`StoreError::Busy`](crate::StoreError::Busy) (certainly not applied), and its candidate backs
//!   off with jitter.
//!   The window moves on the store's replies (their latency, measured
//!   where the reply lands, and their errors), never on the engine's own
//!   lag: a host whose CPU others take is not a slow store. Waking late
//!   only pauses acquisitions while it puts held terms at risk (half a
//!   renewal's margin gone), so past its process's CPU the engine holds
//!   what it can renew.
//! * **Nothing sent late.** A renewal whose deadline would pass before the
//!   store could answer it, counting every operation in flight ahead of
//!   it, is not sent (it is answered `Busy`), and the admission window
//!   then drops to its floor: past capacity the engine keeps the terms the
//!   store can renew rather than queueing them all into lateness together.
//! * **A feed that goes silent is found.** A feed can stay open and
//!   deliver nothing (an etcd member cut off from its quorum, a stalled
//!   proxy), and candidates do not poll while it is up. So once per retry
//!   interval the engine reads one following group's record itself (one
//!   read per engine, whatever the number of groups); a version the feed
//!   has not delivered within two retry intervals of that read, while it
//!   delivered nothing else either, means the feed is silent: it is
//!   dropped, every candidate polls, and the engine subscribes again.
//! * **Failure isolation.** A group whose last operation failed is sent in
//!   a batch of suspects only, never with healthy groups: half the size of
//!   the batch it failed in, down to one, until it succeeds; nor is its
//!   retry pulled into the healthy renewals' batch. One item that a store
//!   cannot write fails only itself (and at worst, briefly, the suspects
//!   it failed with).
//!
//! The timing argument of [`crate::config`] holds unchanged in the batched
//! case: a machine anchors an operation at the instant it *emitted* it, and
//! the batch that carries it is sent at or after that instant, so every
//! anchor is at or before the real send. A queued operation that waits for
//! a free batch slot only makes its deadline more conservative, and its
//! timeout counts from emission too.
//!
//! Electors built from clones of one store handle share one engine (see
//! [`EngineSlot`]); [`Engine::builder`] makes one explicitly, for tuning.

use std::sync::Arc;

use crate::clock::Clock;
use crate::coordinator::{Command, Session};
use crate::elector::ElectorBuilder;
use crate::error::ElectorError;
use crate::store::LeaseStore;

mod batch;
mod deadlines;
mod feed;
mod host_lag;
mod limits;
mod schedule;
mod shared;
mod task;

pub(crate) use shared::EngineShared;
pub use shared::EngineSlot;

/// Identifies one candidate (one elector) inside an engine.
pub(crate) type GroupId = u64;

/// What reaches the engine task from the handles.
pub(crate) enum ToEngine {
    Join(Box<Joining>),
    Command(GroupId, Command),
    Drained(GroupId, u64),
    Pulse(GroupId),
    TransferTo(GroupId, String),
    SetMetadata(GroupId, crate::record::Metadata),
    /// A tap of the store-wide feed for a reader outside the groups (see
    /// `feed::Taps`): the feed, or `None` if there is none to be had now.
    Tap(tokio::sync::oneshot::Sender<Option<crate::store::StoreFeed>>),
}

/// A new candidate for the engine to run.
pub(crate) struct Joining {
    pub(crate) id: GroupId,
    pub(crate) session: Session,
    pub(crate) seed: u64,
    /// The preemption delay of a candidate with a priority, if it has one.
    pub(crate) preempt_after: Option<std::time::Duration>,
}

/// Tuning for an [`Engine`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    /// Most operations in one batch (default 4096: a renewal round of
    /// 10,000 groups in three). Larger batches mean
    /// fewer round trips; stores split further where their protocol limits
    /// a request.
    pub max_batch: usize,
    /// Most batches in flight at once (default 4): bounds the store
    /// connections or requests an engine uses, whatever the number of
    /// groups.
    pub max_in_flight: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            max_batch: 4096,
            max_in_flight: 4,
        }
    }
}

/// Counters of what an engine has done, for benchmarks and monitoring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Candidates running in the engine now.
    pub groups: u64,
    /// Read batches sent (round trips, as the store counts them in one
    /// request each).
    pub read_batches: u64,
    /// Group records read.
    pub reads: u64,
    /// Compare-and-swap batches sent.
    pub write_batches: u64,
    /// Compare-and-swaps carried out.
    pub writes: u64,
    /// Changes received from the store's feed.
    pub changes: u64,
    /// Operations the engine held back and answered
    /// [`StoreError::Busy`](crate::StoreError::Busy): acquisitions and polls
    /// that found no room in the admission window within their timeout,
    /// and renewals that could no longer be answered before their deadline.
    pub shed: u64,
    /// How many acquisitions and polls the admission window lets be in
    /// flight now.
    pub admission_window: u64,
    /// Times the engine found its change feed silent (a write its own
    /// check read that the feed did not deliver within an operation
    /// timeout), dropped it and fell back to polling.
    pub feed_silences: u64,
}

impl EngineStats {
    /// What the engine did between the snapshot `earlier` and this one: the
    /// counters' differences, with the two gauges (`groups`,
    /// `admission_window`) as they are now.
    ///
    /// ```
    /// use tenure::{Engine, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::builder(MemoryStore::new()).start()?;
    /// let before = engine.stats();
    /// let elector = engine.elector("nightly").candidate_id("host-a").start()?;
    /// elector.wait_for_leadership().await?;
    /// let done = engine.stats().since(&before);
    /// assert!(done.writes >= 1, "the election wrote the lease: {done:?}");
    /// assert_eq!(done.groups, 1);
    /// # Ok(()) }
    /// ```
    pub fn since(&self, earlier: &EngineStats) -> EngineStats {
        EngineStats {
            groups: self.groups,
            read_batches: self.read_batches.saturating_sub(earlier.read_batches),
            reads: self.reads.saturating_sub(earlier.reads),
            write_batches: self.write_batches.saturating_sub(earlier.write_batches),
            writes: self.writes.saturating_sub(earlier.writes),
            changes: self.changes.saturating_sub(earlier.changes),
            shed: self.shed.saturating_sub(earlier.shed),
            admission_window: self.admission_window,
            feed_silences: self.feed_silences.saturating_sub(earlier.feed_silences),
        }
    }
}

/// Runs the lease elections of many groups on one store: one task, one
/// timer, batched store operations and one change feed (see the module
/// docs). Electors built with [`Elector::builder`](crate::Elector::builder)
/// from clones of one store handle already share one; build one explicitly
/// to tune it or to read its [`stats`](Engine::stats).
///
/// ```
/// use tenure::{Engine, MemoryStore};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::builder(MemoryStore::new()).start()?;
/// let shards: Vec<_> = (0..100)
///     .map(|i| engine.elector(format!("shard-{i}")).candidate_id("host-a").start())
///     .collect::<Result<_, _>>()?;
/// for shard in &shards {
///     shard.wait_for_leadership().await?;
/// }
/// assert_eq!(engine.stats().groups, 100);
/// # for s in &shards { s.shutdown().await; }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Engine {
    shared: Arc<EngineShared>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("stats", &self.stats())
            .finish()
    }
}

/// Configures an [`Engine`]; see [`Engine::builder`].
pub struct EngineBuilder {
    store: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    options: EngineOptions,
}

impl EngineBuilder {
    /// The clock of every group in the engine (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Batch sizes and concurrency.
    pub fn options(mut self, options: EngineOptions) -> Self {
        self.options = options;
        self
    }

    /// Starts the engine's task. Must be called within a tokio runtime.
    pub fn start(self) -> Result<Engine, ElectorError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ElectorError::NoRuntime)?;
        let options = EngineOptions {
            max_batch: self.options.max_batch.max(1),
            max_in_flight: self.options.max_in_flight.max(1),
        };
        let shared = EngineShared::start(self.store, self.clock, options, &runtime);
        Ok(Engine { shared })
    }
}

impl Engine {
    /// Starts configuring an engine on `store`.
    pub fn builder(store: impl LeaseStore) -> EngineBuilder {
        EngineBuilder {
            store: Arc::new(store),
            clock: crate::clock::system_clock(),
            options: EngineOptions::default(),
        }
    }

    /// Starts configuring a candidate for `group` that runs in this engine
    /// (on the engine's store and clock).
    pub fn elector(&self, group: impl AsRef<str>) -> ElectorBuilder {
        ElectorBuilder::in_engine(self.shared.clone(), group)
    }

    /// What the engine has done so far.
    pub fn stats(&self) -> EngineStats {
        self.shared.counters.snapshot()
    }

    /// A tap of the engine's store-wide change feed (see
    /// `EngineShared::tap`).
    pub(crate) fn tap(&self) -> tokio::sync::oneshot::Receiver<Option<crate::store::StoreFeed>> {
        self.shared.tap()
    }

    pub(crate) fn from_shared(shared: Arc<EngineShared>) -> Engine {
        Engine { shared }
    }
}
