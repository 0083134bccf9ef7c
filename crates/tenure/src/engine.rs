//! The engine: one task that runs the lease elections of every group a
//! process campaigns for on one store.
//!
//! Each group keeps its own sans-IO [`Machine`]; the engine feeds them time,
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
//!   it ([`Input::RenewEarly`]). Renewing early is never unsafe (a renewal
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
//!   [`StoreError::Busy`] (certainly not applied), and its candidate backs
//!   off with jitter.
//!   The engine's own lag (waking later than its earliest timer) counts as
//!   congestion too: past its process's CPU it holds what it can renew.
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

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

use crate::admission::Admission;
use crate::clock::{Clock, MonoTime, Now};
use crate::config::Timing;
use crate::coordinator::{Command, Session};
use crate::elector::ElectorBuilder;
use crate::error::{ElectorError, StoreError};
use crate::machine::{Action, Input, Machine, OpId, Phase, ReadPurpose, WritePurpose};
use crate::record::{GroupName, Version, Versioned};
use crate::role::LeaderInfo;
use crate::store::{BatchResult, CasOutcome, CasRequest, Change, LeaseStore, StoreFeed};

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
}

/// A new candidate for the engine to run.
pub(crate) struct Joining {
    pub(crate) id: GroupId,
    pub(crate) session: Session,
    pub(crate) seed: u64,
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
    /// [`StoreError::Busy`]: acquisitions and polls
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

#[derive(Default)]
struct Counters {
    groups: AtomicU64,
    read_batches: AtomicU64,
    reads: AtomicU64,
    write_batches: AtomicU64,
    writes: AtomicU64,
    changes: AtomicU64,
    shed: AtomicU64,
    admission_window: AtomicU64,
    feed_silences: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn snapshot(&self) -> EngineStats {
        EngineStats {
            groups: self.groups.load(Ordering::Relaxed),
            read_batches: self.read_batches.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            write_batches: self.write_batches.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            changes: self.changes.load(Ordering::Relaxed),
            shed: self.shed.load(Ordering::Relaxed),
            admission_window: self.admission_window.load(Ordering::Relaxed),
            feed_silences: self.feed_silences.load(Ordering::Relaxed),
        }
    }
}

/// What the handles of an engine share: the way in, and the clock every
/// group of the engine runs on.
pub(crate) struct EngineShared {
    tx: mpsc::UnboundedSender<ToEngine>,
    pub(crate) clock: Arc<dyn Clock>,
    next_id: AtomicU64,
    counters: Arc<Counters>,
}

impl EngineShared {
    pub(crate) fn send(&self, msg: ToEngine) {
        let _ = self.tx.send(msg);
    }

    pub(crate) fn next_id(&self) -> GroupId {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether the engine task still runs (its runtime may have shut down).
    fn is_running(&self) -> bool {
        !self.tx.is_closed()
    }

    fn start(
        store: Arc<dyn LeaseStore>,
        clock: Arc<dyn Clock>,
        options: EngineOptions,
        runtime: &tokio::runtime::Handle,
    ) -> Arc<EngineShared> {
        let (tx, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        let shared = Arc::new(EngineShared {
            tx,
            clock: clock.clone(),
            next_id: AtomicU64::new(1),
            counters: counters.clone(),
        });
        // Batches no larger than the store handles well in one call.
        let options = EngineOptions {
            max_batch: options.max_batch.min(store.batch_size_hint().max(1)),
            ..options
        };
        let task = Task::new(store, clock, options, counters, rx);
        runtime.spawn(task.run());
        shared
    }

    /// The engine shared by every elector built from clones of `store`
    /// with the same clock handle; a new one if there is none yet (or the
    /// store offers no slot).
    pub(crate) fn for_store(
        store: Arc<dyn LeaseStore>,
        clock: &Arc<dyn Clock>,
        runtime: &tokio::runtime::Handle,
    ) -> Arc<EngineShared> {
        let Some(slot) = store.engine_slot() else {
            return Self::start(store, clock.clone(), EngineOptions::default(), runtime);
        };
        let here = RuntimeKey::of(runtime);
        let mut engines = slot.lock();
        engines.retain(|(_, e)| e.upgrade().is_some_and(|e| e.is_running()));
        let found = engines.iter().find_map(|(key, e)| {
            let e = e.upgrade()?;
            (*key == here && same_clock(&e.clock, clock)).then_some(e)
        });
        if let Some(engine) = found {
            return engine;
        }
        let engine = Self::start(
            store.clone(),
            clock.clone(),
            EngineOptions::default(),
            runtime,
        );
        engines.push((here, Arc::downgrade(&engine)));
        engine
    }
}

/// Which runtime an engine's task runs on, as far as sharing goes. A
/// current-thread runtime is driven by one thread at a time, and electors
/// on another runtime must not join an engine that may sit undriven (or be
/// dropped with it); tokio offers no stable runtime id, so such a runtime
/// is told apart by the thread building the elector. Multi-thread runtimes
/// are one class: a process with several of them and electors of one store
/// handle on more than one should give each runtime its own store handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RuntimeKey {
    CurrentThread(std::thread::ThreadId),
    MultiThread,
}

impl RuntimeKey {
    fn of(runtime: &tokio::runtime::Handle) -> RuntimeKey {
        match runtime.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::CurrentThread => {
                RuntimeKey::CurrentThread(std::thread::current().id())
            }
            _ => RuntimeKey::MultiThread,
        }
    }
}

fn same_clock(a: &Arc<dyn Clock>, b: &Arc<dyn Clock>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// Where a store handle keeps the engine its clones share. A store puts one
/// in the state its clones share and returns it from
/// [`LeaseStore::engine_slot`]; that is all it takes for
/// `Elector::builder(store.clone(), group)` in a loop to run every group on
/// one engine.
#[derive(Default)]
pub struct EngineSlot {
    /// The engines running for this store handle, by runtime.
    engines: Mutex<Vec<(RuntimeKey, Weak<EngineShared>)>>,
}

impl EngineSlot {
    /// An empty slot.
    pub fn new() -> Self {
        EngineSlot::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(RuntimeKey, Weak<EngineShared>)>> {
        // The guarded value is a list of pointers, never left half-written.
        self.engines.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for EngineSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineSlot")
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

    pub(crate) fn from_shared(shared: Arc<EngineShared>) -> Engine {
        Engine { shared }
    }
}

/// A wake-up of one group, valid while the group's generation matches.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at: MonoTime,
    id: GroupId,
    gen: u64,
}

/// An operation's reply deadline.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct OpDeadline {
    at: MonoTime,
    id: GroupId,
    op: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Read(ReadPurpose),
    Write(WritePurpose),
}

impl OpKind {
    /// The machine's input for operation `op` of this kind failing with
    /// `error`.
    fn failed(self, op: OpId, error: StoreError) -> Input {
        match self {
            OpKind::Read(_) => Input::ReadDone {
                op,
                result: Err(error),
            },
            OpKind::Write(_) => Input::CasDone {
                op,
                result: Err(error),
            },
        }
    }

    fn label(self) -> &'static str {
        match self {
            OpKind::Read(p) => p.label(),
            OpKind::Write(p) => p.label(),
        }
    }
}

/// A group's operation in flight.
#[derive(Clone, Copy)]
struct Current {
    op: OpId,
    kind: OpKind,
    /// Whether its batch has gone out; one that never did cannot have
    /// applied.
    sent: bool,
}

/// What an operation is for, in the order the engine sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Priority {
    /// A leader's renewal, or its read verifying a conflicted one.
    Renewal,
    /// A release, or a releasing node's verifying read.
    Release,
    /// A candidate's attempt to take the lease.
    Acquisition,
    /// A candidate's look at the record.
    Poll,
}

impl Priority {
    const ALL: [Priority; 4] = [
        Priority::Renewal,
        Priority::Release,
        Priority::Acquisition,
        Priority::Poll,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// Whether the admission window bounds it (it adds load, and may wait).
    fn deferrable(self) -> bool {
        matches!(self, Priority::Acquisition | Priority::Poll)
    }

    fn of(kind: OpKind, phase: &Phase) -> Priority {
        match kind {
            OpKind::Write(WritePurpose::Renew) => Priority::Renewal,
            OpKind::Write(WritePurpose::Release) => Priority::Release,
            OpKind::Write(WritePurpose::Acquire) => Priority::Acquisition,
            OpKind::Read(ReadPurpose::Poll) => Priority::Poll,
            OpKind::Read(ReadPurpose::Verify) => match phase {
                Phase::Leader { .. } => Priority::Renewal,
                _ => Priority::Release,
            },
        }
    }
}

/// Operations of one priority waiting for a batch: healthy groups' and
/// suspects' apart, each in the order they came.
struct Lane<T> {
    healthy: VecDeque<Queued<T>>,
    suspects: VecDeque<Queued<T>>,
}

impl<T> Default for Lane<T> {
    fn default() -> Self {
        Lane {
            healthy: VecDeque::new(),
            suspects: VecDeque::new(),
        }
    }
}

impl<T> Lane<T> {
    fn push(&mut self, q: Queued<T>) {
        if q.isolate == usize::MAX {
            self.healthy.push_back(q);
        } else {
            self.suspects.push_back(q);
        }
    }

    fn len(&self) -> usize {
        self.healthy.len() + self.suspects.len()
    }

    fn is_empty(&self) -> bool {
        self.healthy.is_empty() && self.suspects.is_empty()
    }

    /// The next batch of at most `room`: suspects' operations if any wait
    /// and `suspects` allows, no more of them than the smallest bound among
    /// them; else healthy groups' operations.
    fn take(&mut self, room: usize, suspects: bool) -> (Vec<Queued<T>>, bool) {
        if suspects && !self.suspects.is_empty() {
            let mut limit = room;
            let mut chunk = Vec::new();
            while let Some(q) = self.suspects.front() {
                let limit_with = limit.min(q.isolate);
                if chunk.len() >= limit_with {
                    break;
                }
                limit = limit_with;
                chunk.extend(self.suspects.pop_front());
            }
            return (chunk, true);
        }
        let take = room.min(self.healthy.len());
        (self.healthy.drain(..take).collect(), false)
    }
}

/// A group's operations waiting for a batch, by [`Priority`].
struct Queues<T> {
    by_priority: [Lane<T>; 4],
}

impl<T> Default for Queues<T> {
    fn default() -> Self {
        Queues {
            by_priority: Default::default(),
        }
    }
}

impl<T> Queues<T> {
    fn of(&mut self, priority: Priority) -> &mut Lane<T> {
        &mut self.by_priority[priority.index()]
    }
}

struct Slot {
    group: GroupName,
    machine: Machine,
    session: Session,
    /// The last pulse fed to the machine.
    fed_pulse: u64,
    /// The operation in flight, if any.
    op: Option<Current>,
    /// The newest version of the group's record this engine has seen, by
    /// the feed, a read or its own write (what the feed check compares).
    seen: Option<Version>,
    /// The largest batch this group's operations may go in: unbounded
    /// while healthy; after a failure half the batch it failed in (down to
    /// one), until one succeeds.
    isolate: usize,
    /// The wake-up in the heap that counts; older entries are stale.
    gen: u64,
    scheduled: Option<MonoTime>,
    renew_key: Option<MonoTime>,
    poll_key: Option<MonoTime>,
    /// The per-group hint forwarder, for stores without a store-wide feed.
    hints: Option<AbortHandle>,
}

/// A queued store operation of one group: `item` is the group to read or
/// the compare-and-swap to make.
struct Queued<T> {
    id: GroupId,
    op: OpId,
    deadline: MonoTime,
    /// The group's batch-size bound when it was queued (see `Slot::isolate`).
    isolate: usize,
    item: T,
}

/// The operations of a batch about to be sent: whose they are, the latest
/// of their deadlines (the batch is abandoned once all have passed), and
/// what to send.
struct Outgoing<T> {
    ids: Vec<(GroupId, OpId)>,
    deadline: MonoTime,
    items: Vec<T>,
}

/// A finished batch, with the instant it was sent, what it was for and
/// whether it carried suspects.
struct BatchReply {
    sent: MonoTime,
    priority: Priority,
    suspects: bool,
    result: BatchResults,
}

/// How a batch's items fared, for failure isolation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    AllApplied,
    Mixed,
    AllFailed,
}

enum BatchResults {
    Reads(Vec<(GroupId, OpId)>, BatchResult<Option<Versioned>>),
    Writes(Vec<(GroupId, OpId)>, BatchResult<CasOutcome>),
}

impl BatchResults {
    fn len(&self) -> usize {
        match self {
            BatchResults::Reads(ids, _) | BatchResults::Writes(ids, _) => ids.len(),
        }
    }

    /// Whether every item failed (the batch as a whole or each on its
    /// own), some did, or none did; busy items (certainly not applied) are
    /// not failures.
    fn outcome(&self) -> Outcome {
        fn of<R>(r: &BatchResult<R>) -> Outcome {
            let failed = |e: &StoreError| !e.not_applied();
            match r {
                Err(e) if failed(e) => Outcome::AllFailed,
                Err(_) => Outcome::AllApplied,
                Ok(items) => {
                    let bad = items
                        .iter()
                        .filter(|i| i.as_ref().err().is_some_and(failed))
                        .count();
                    if bad == 0 {
                        Outcome::AllApplied
                    } else if bad == items.len() {
                        Outcome::AllFailed
                    } else {
                        Outcome::Mixed
                    }
                }
            }
        }
        match self {
            BatchResults::Reads(_, r) => of(r),
            BatchResults::Writes(_, r) => of(r),
        }
    }

    /// Whether the store failed the batch as a whole (a batch it turned
    /// away as busy, certainly not applied, is not a failure of its items).
    fn failed(&self) -> bool {
        let failed = |e: &StoreError| !e.not_applied();
        match self {
            BatchResults::Reads(_, r) => r.as_ref().err().is_some_and(failed),
            BatchResults::Writes(_, r) => r.as_ref().err().is_some_and(failed),
        }
    }
}

/// The engine's own check that its store-wide feed still delivers (see
/// the module docs).
struct FeedCheck {
    /// When the next check read goes out.
    next_at: MonoTime,
    /// The check read in flight: the group read, and what the store said.
    reading: JoinSet<(GroupId, Result<Option<Versioned>, StoreError>)>,
    /// A version the check read found that the feed had not delivered
    /// yet: the group, the version, and when the feed must have delivered
    /// it (or anything at all) by.
    owed: Option<(GroupId, Version, MonoTime)>,
    /// Changes the feed has delivered so far, and how many it had when the
    /// debt was noted: a feed that delivers other changes meanwhile is not
    /// silent, only late (a busy store's feed lags; taking that for
    /// silence would add every group's polls to its load).
    delivered: u64,
    delivered_when_owed: u64,
    /// Which following group to read next (round robin).
    cursor: usize,
}

enum Feed {
    /// Not subscribed; try again at this instant.
    Off { retry_at: MonoTime },
    /// A subscription in flight.
    Subscribing,
    /// Changes arrive here.
    Up(StoreFeed),
    /// The store has no store-wide feed; groups subscribe one by one.
    PerGroup,
}

struct Task {
    store: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    options: EngineOptions,
    counters: Arc<Counters>,
    rx: mpsc::UnboundedReceiver<ToEngine>,
    /// Change hints of single groups, for stores without a store-wide feed.
    hints: mpsc::UnboundedReceiver<GroupId>,
    hint_tx: mpsc::UnboundedSender<GroupId>,
    rx_open: bool,
    slots: HashMap<GroupId, Slot>,
    by_group: HashMap<GroupName, Vec<GroupId>>,
    timers: BinaryHeap<Reverse<Timer>>,
    deadlines: BinaryHeap<Reverse<OpDeadline>>,
    renewals: BTreeSet<(MonoTime, GroupId)>,
    polls: BTreeSet<(MonoTime, GroupId)>,
    reads: Queues<GroupName>,
    writes: Queues<CasRequest>,
    /// How many acquisitions and polls may be in flight.
    admission: Admission,
    /// The operations each batch in flight carries, by task: all of them,
    /// and the deferrable ones among them.
    admitted: HashMap<tokio::task::Id, (usize, usize)>,
    /// Operations in flight in every batch: a batch sent now waits behind
    /// them.
    ops_in_flight: usize,
    /// The shortest operation timeout among the groups: a batch that takes
    /// longer than a quarter of it is congestion.
    op_timeout: Duration,
    /// The shortest retry interval among the groups that have joined.
    retry_min: Duration,
    /// Batches of suspects in flight (at most one: a suspect whose request
    /// hangs must not hold every slot).
    suspects_in_flight: usize,
    /// When a batch of reads (`[0]`) and of writes (`[1]`) last came back
    /// with a success: a batch failing whole after that blames its items,
    /// before it the store.
    last_success: [Option<MonoTime>; 2],
    /// Operations answered without being sent, to step after the flush.
    shedding: Vec<(GroupId, OpId)>,
    /// Whether this turn queued a scheduled renewal or poll, which the
    /// nearly-due ones then join.
    renewing: bool,
    polling: bool,
    /// How far ahead of schedule any group's renewal or poll may be pulled
    /// (the largest half-interval among the groups that have joined).
    renew_window: Duration,
    poll_window: Duration,
    batches: JoinSet<BatchReply>,
    feed: Feed,
    check: FeedCheck,
    subscription: JoinSet<Result<Option<StoreFeed>, StoreError>>,
}

impl Task {
    fn new(
        store: Arc<dyn LeaseStore>,
        clock: Arc<dyn Clock>,
        options: EngineOptions,
        counters: Arc<Counters>,
        rx: mpsc::UnboundedReceiver<ToEngine>,
    ) -> Task {
        let now = clock.now().mono;
        let (hint_tx, hints) = mpsc::unbounded_channel();
        Task {
            store,
            clock,
            options,
            counters,
            rx,
            hints,
            hint_tx,
            rx_open: true,
            slots: HashMap::new(),
            by_group: HashMap::new(),
            timers: BinaryHeap::new(),
            deadlines: BinaryHeap::new(),
            renewals: BTreeSet::new(),
            polls: BTreeSet::new(),
            reads: Queues::default(),
            writes: Queues::default(),
            admission: Admission::new(
                options.max_batch / 64,
                options.max_batch.saturating_mul(options.max_in_flight),
            ),
            admitted: HashMap::new(),
            ops_in_flight: 0,
            op_timeout: Duration::MAX,
            retry_min: Duration::MAX,
            suspects_in_flight: 0,
            last_success: [None, None],
            shedding: Vec::new(),
            renewing: false,
            polling: false,
            renew_window: Duration::ZERO,
            poll_window: Duration::ZERO,
            batches: JoinSet::new(),
            feed: Feed::Off { retry_at: now },
            check: FeedCheck {
                next_at: now,
                reading: JoinSet::new(),
                owed: None,
                delivered: 0,
                delivered_when_owed: 0,
                cursor: 0,
            },
            subscription: JoinSet::new(),
        }
    }

    async fn run(mut self) {
        loop {
            self.subscribe_if_due();
            let wake = self.next_wake();
            let clock = self.clock.clone();
            let asleep = clock.now().mono;
            tokio::select! {
                biased;
                msg = self.rx.recv(), if self.rx_open => match msg {
                    Some(msg) => self.handle(msg),
                    None => self.rx_open = false,
                },
                Some(reply) = self.batches.join_next_with_id() => {
                    let task = match &reply {
                        Ok((task, _)) => *task,
                        Err(e) => e.id(),
                    };
                    if let Some((all, deferrable)) = self.admitted.remove(&task) {
                        self.ops_in_flight = self.ops_in_flight.saturating_sub(all);
                        self.admission.returned(deferrable);
                    }
                    if let Ok((_, reply)) = reply {
                        self.on_batch(reply);
                    }
                }
                change = next_change(&mut self.feed) => self.on_change(change),
                Some(subscribed) = self.subscription.join_next() => {
                    self.on_subscribed(subscribed.unwrap_or(Ok(None)));
                }
                Some(id) = self.hints.recv() => self.step(id, Input::Changed),
                Some(read) = self.check.reading.join_next() => {
                    if let Ok((id, result)) = read {
                        self.on_check_read(id, result);
                    }
                }
                _ = sleep_until(&clock, wake) => self.woke(wake, asleep),
            }
            // Take in everything else that is ready, so one turn batches it.
            while let Ok(msg) = self.rx.try_recv() {
                self.handle(msg);
            }
            if let Feed::Up(feed) = &mut self.feed {
                let mut ready = Vec::new();
                while let Some(change) = feed.try_next() {
                    ready.push(change);
                }
                for change in ready {
                    self.on_change(Some(change));
                }
            }
            self.fire_timers();
            self.run_feed_check();
            self.coalesce();
            self.flush();
            if !self.rx_open && self.slots.is_empty() {
                return;
            }
        }
    }

    /// The engine's sleep for `wake` (begun at `asleep`) ended: how late,
    /// measured before any work of this turn, against a wake-up that was
    /// still ahead when it went to sleep (one already due is work, not
    /// lateness). Late past a quarter of the operation timeout, the process
    /// is what cannot keep up.
    fn woke(&mut self, wake: Option<MonoTime>, asleep: MonoTime) {
        let Some(wake) = wake.filter(|w| *w > asleep) else {
            return;
        };
        let now = self.clock.now().mono;
        let lag = now.saturating_since(wake);
        let holding = self.holding();
        self.admission
            .observe_lag(now, lag, self.op_timeout / 4, holding);
    }

    /// Whether any group leads (has a renewal scheduled, queued or in
    /// flight): only then can a renewal batch end an admission pause.
    fn holding(&self) -> bool {
        !self.renewals.is_empty() || !self.writes.by_priority[Priority::Renewal.index()].is_empty()
    }

    fn handle(&mut self, msg: ToEngine) {
        match msg {
            ToEngine::Join(joining) => self.join(*joining),
            ToEngine::Command(id, Command::Resign) => self.step(id, Input::Resign),
            ToEngine::Command(id, Command::Shutdown) => self.step(id, Input::Shutdown),
            ToEngine::Drained(id, token) => self.step(id, Input::Drained { token }),
            ToEngine::Pulse(id) => self.step(id, Input::Tick),
            ToEngine::TransferTo(id, to) => self.step(id, Input::TransferTo { to }),
            ToEngine::SetMetadata(id, metadata) => self.step(id, Input::SetMetadata { metadata }),
        }
    }

    fn join(&mut self, joining: Joining) {
        let Joining { id, session, seed } = joining;
        let now = self.clock.now();
        let machine = Machine::new(
            session.timing().clone(),
            session.candidate().clone(),
            session.metadata().clone(),
            seed,
            now,
        );
        let group = session.group().clone();
        self.by_group.entry(group.clone()).or_default().push(id);
        let timing = machine.timing();
        self.renew_window = self.renew_window.max(timing.renew_interval / 2);
        self.poll_window = self.poll_window.max(timing.retry_interval / 2);
        self.op_timeout = self.op_timeout.min(timing.op_timeout);
        self.retry_min = self.retry_min.min(timing.retry_interval);
        self.slots.insert(
            id,
            Slot {
                group,
                machine,
                session,
                fed_pulse: 0,
                op: None,
                seen: None,
                isolate: usize::MAX,
                gen: 0,
                scheduled: None,
                renew_key: None,
                poll_key: None,
                hints: None,
            },
        );
        self.counters.groups.fetch_add(1, Ordering::Relaxed);
        match self.feed {
            Feed::Up(_) => self.step(id, Input::Feed { live: true }),
            Feed::PerGroup => {
                self.subscribe_group(id);
                self.step(id, Input::Tick);
            }
            _ => self.step(id, Input::Tick),
        }
    }

    fn leave(&mut self, id: GroupId) {
        let Some(slot) = self.slots.remove(&id) else {
            return;
        };
        if let Some(hints) = slot.hints {
            hints.abort();
        }
        if let Some(t) = slot.renew_key {
            self.renewals.remove(&(t, id));
        }
        if let Some(t) = slot.poll_key {
            self.polls.remove(&(t, id));
        }
        if let Some(ids) = self.by_group.get_mut(&slot.group) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.by_group.remove(&slot.group);
            }
        }
        self.counters.groups.fetch_sub(1, Ordering::Relaxed);
    }

    /// Feeds one input to one group's machine and carries out what it says.
    fn step(&mut self, id: GroupId, input: Input) {
        let now = self.clock.now();
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let mut actions = feed_pulse(slot, now);
        actions.extend(slot.machine.step(now, input));
        let stopped = self.carry_out(id, actions);
        if stopped {
            self.leave(id);
        } else {
            self.reschedule(id, now);
        }
    }

    /// Carries out one group's actions; returns true once it has stopped.
    fn carry_out(&mut self, id: GroupId, actions: Vec<Action>) -> bool {
        let mut stopped = false;
        for action in actions {
            let Some(slot) = self.slots.get_mut(&id) else {
                return true;
            };
            match action {
                Action::Read {
                    op,
                    purpose,
                    deadline,
                } => {
                    let kind = OpKind::Read(purpose);
                    slot.op = Some(Current {
                        op,
                        kind,
                        sent: false,
                    });
                    self.polling |= purpose == ReadPurpose::Poll;
                    let priority = Priority::of(kind, &slot.machine.phase());
                    let (group, isolate) = (slot.group.clone(), slot.isolate);
                    let queued = Queued {
                        id,
                        op,
                        deadline,
                        isolate,
                        item: group,
                    };
                    self.reads.of(priority).push(queued);
                    self.file_deadline(id, op, deadline);
                }
                Action::Cas {
                    op,
                    purpose,
                    expected,
                    record,
                    deadline,
                } => {
                    let kind = OpKind::Write(purpose);
                    slot.op = Some(Current {
                        op,
                        kind,
                        sent: false,
                    });
                    self.renewing |= purpose == WritePurpose::Renew;
                    let priority = Priority::of(kind, &slot.machine.phase());
                    let request = CasRequest {
                        group: slot.group.clone(),
                        expected,
                        record,
                    };
                    let isolate = slot.isolate;
                    let queued = Queued {
                        id,
                        op,
                        deadline,
                        isolate,
                        item: request,
                    };
                    self.writes.of(priority).push(queued);
                    self.file_deadline(id, op, deadline);
                }
                Action::Elected { token, deadline } => {
                    let predecessor = slot.machine.predecessor().clone();
                    slot.session
                        .publisher
                        .elected_after(token, deadline, predecessor);
                }
                Action::Renewed {
                    deadline, latency, ..
                } => slot.session.publisher.renewed(deadline, latency),
                Action::EndTerm {
                    reason,
                    work_deadline,
                    ..
                } => slot.session.publisher.end_term(reason, work_deadline),
                Action::LeaderChanged { leader } => {
                    let info = leader.as_ref().and_then(LeaderInfo::from_record);
                    slot.session.publisher.leader_changed(info);
                }
                Action::Failed { fault } => slot.session.publisher.failed(fault),
                Action::Stopped => {
                    slot.session.publisher.stopped();
                    stopped = true;
                }
            }
        }
        stopped
    }

    /// Files the deadline by which the reply to a queued operation must
    /// have come.
    fn file_deadline(&mut self, id: GroupId, op: OpId, deadline: MonoTime) {
        self.deadlines.push(Reverse(OpDeadline {
            at: deadline,
            id,
            op: op.0,
        }));
    }

    /// Files the group's next wake-up and its due renewal or poll.
    fn reschedule(&mut self, id: GroupId, now: Now) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        watch_liveness(slot, now);
        let wake = slot.machine.next_wake(now);
        if wake != slot.scheduled {
            slot.scheduled = wake;
            slot.gen += 1;
            if let Some(at) = wake {
                self.timers.push(Reverse(Timer {
                    at,
                    id,
                    gen: slot.gen,
                }));
            }
        }
        refile(
            &mut self.renewals,
            &mut slot.renew_key,
            slot.machine.renew_due(),
            id,
        );
        refile(
            &mut self.polls,
            &mut slot.poll_key,
            slot.machine.poll_due(),
            id,
        );
    }

    fn next_wake(&mut self) -> Option<MonoTime> {
        // Drop stale timers from the top so the sleep is for a real one.
        while let Some(Reverse(t)) = self.timers.peek() {
            match self.slots.get(&t.id) {
                Some(slot) if slot.gen == t.gen => break,
                _ => {
                    self.timers.pop();
                }
            }
        }
        while let Some(Reverse(d)) = self.deadlines.peek() {
            match self.slots.get(&d.id) {
                Some(slot) if slot.op.is_some_and(|c| c.op.0 == d.op) => break,
                _ => {
                    self.deadlines.pop();
                }
            }
        }
        let mut wake = self.timers.peek().map(|Reverse(t)| t.at);
        if let Some(Reverse(d)) = self.deadlines.peek() {
            wake = Some(wake.map_or(d.at, |w| w.min(d.at)));
        }
        if let Feed::Off { retry_at } = self.feed {
            if !self.slots.is_empty() {
                wake = Some(wake.map_or(retry_at, |w| w.min(retry_at)));
            }
        }
        if let Some(t) = self.feed_check_due() {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        // Operations held back by a pause go out when it ends.
        let now = self.clock.now().mono;
        if let Some(t) = self
            .admission
            .paused_until(now)
            .filter(|_| self.deferred_waiting())
        {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        wake
    }

    /// Whether acquisitions or polls wait in the queues.
    fn deferred_waiting(&self) -> bool {
        Priority::ALL.iter().filter(|p| p.deferrable()).any(|p| {
            !self.reads.by_priority[p.index()].is_empty()
                || !self.writes.by_priority[p.index()].is_empty()
        })
    }

    /// When the feed check has something to do next, if the feed is up:
    /// judge what a read found, or send the next read (only while some
    /// group follows, and no read is in flight).
    fn feed_check_due(&self) -> Option<MonoTime> {
        if !matches!(self.feed, Feed::Up(_)) {
            return None;
        }
        if let Some((_, _, by)) = self.check.owed {
            return Some(by);
        }
        // Whether any group follows is looked at only when a read is due
        // (once per retry interval): it takes a pass over every group.
        self.check.reading.is_empty().then_some(self.check.next_at)
    }

    /// Sends the feed check's read, or judges what it found, when due.
    fn run_feed_check(&mut self) {
        let now = self.clock.now().mono;
        if self.feed_check_due().is_none_or(|t| now < t) {
            return;
        }
        if let Some((id, version, _)) = self.check.owed.take() {
            let delivered = self
                .slots
                .get(&id)
                .is_none_or(|s| s.seen.is_some_and(|seen| seen >= version));
            let spoke = self.check.delivered != self.check.delivered_when_owed;
            if !delivered && !spoke {
                Counters::add(&self.counters.feed_silences, 1);
                tracing::warn!(
                    "the change feed did not deliver a write within an operation timeout; polling until it is back"
                );
                self.feed_lost();
            }
            return;
        }
        let interval = self.retry_interval();
        self.check.next_at = now + interval;
        let followers: Vec<GroupId> = self
            .slots
            .iter()
            .filter(|(_, s)| following(s))
            .map(|(id, _)| *id)
            .collect();
        let Some(&id) = followers.get(self.check.cursor % followers.len().max(1)) else {
            return;
        };
        self.check.cursor = self.check.cursor.wrapping_add(1);
        let Some(slot) = self.slots.get(&id) else {
            return;
        };
        let (store, clock, group) = (self.store.clone(), self.clock.clone(), slot.group.clone());
        let timeout = self.op_timeout.min(interval);
        Counters::add(&self.counters.read_batches, 1);
        Counters::add(&self.counters.reads, 1);
        self.check.reading.spawn(async move {
            let deadline = clock.now().mono + timeout;
            let result = tokio::select! {
                r = store.read(&group) => r,
                _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(timeout)),
            };
            (id, result)
        });
    }

    /// What the feed check's read found: a version newer than any the
    /// engine has seen for the group must come on the feed within an
    /// operation timeout.
    fn on_check_read(&mut self, id: GroupId, result: Result<Option<Versioned>, StoreError>) {
        let Ok(Some(current)) = result else {
            return;
        };
        let Some(slot) = self.slots.get(&id) else {
            return;
        };
        if slot.seen.is_none_or(|seen| current.version > seen) && matches!(self.feed, Feed::Up(_)) {
            // Two retry intervals: a busy store's feed lags, and taking
            // lag for silence would add every group's polls to its load.
            let by = self.clock.now().mono + self.retry_interval() * 2;
            self.check.owed = Some((id, current.version, by));
            self.check.delivered_when_owed = self.check.delivered;
        }
    }

    /// The store-wide feed ended or went silent: every group polls until
    /// the engine has subscribed again.
    fn feed_lost(&mut self) {
        self.feed = Feed::Off {
            retry_at: self.clock.now().mono + self.retry_interval(),
        };
        self.check.owed = None;
        let ids: Vec<GroupId> = self.slots.keys().copied().collect();
        for id in ids {
            self.step(id, Input::Feed { live: false });
        }
    }

    /// Ticks every group whose wake-up has come, and times out every
    /// operation whose deadline has passed.
    fn fire_timers(&mut self) {
        let now = self.clock.now().mono;
        while let Some(Reverse(d)) = self.deadlines.peek().copied() {
            if d.at > now {
                break;
            }
            self.deadlines.pop();
            let Some(slot) = self.slots.get_mut(&d.id) else {
                continue;
            };
            let Some(Current { op, kind, sent }) = slot.op.filter(|c| c.op.0 == d.op) else {
                continue;
            };
            slot.op = None;
            let error = if sent {
                let error = StoreError::Timeout(slot.machine.timing().op_timeout);
                slot.session.publisher.store_health(
                    kind.label(),
                    Some((error.kind().to_owned(), error.to_string())),
                );
                error
            } else {
                // Never sent: the admission window had no room for it all
                // along, so it certainly did not apply. The engine's own
                // flow control, not a failure of the store: no health
                // report (a warning per group of 100,000 would be a flood).
                Counters::add(&self.counters.shed, 1);
                StoreError::busy("held back by the engine: the store is serving all it can")
            };
            let input = kind.failed(op, error);
            self.step(d.id, input);
        }
        while let Some(Reverse(t)) = self.timers.peek().copied() {
            if t.at > now {
                break;
            }
            self.timers.pop();
            if self.slots.get(&t.id).is_some_and(|s| s.gen == t.gen) {
                if let Some(slot) = self.slots.get_mut(&t.id) {
                    slot.scheduled = None;
                }
                self.step(t.id, Input::Tick);
            }
        }
    }

    /// Pulls nearly-due renewals (and polls) into the batch a scheduled one
    /// is going out in.
    fn coalesce(&mut self) {
        let now = self.clock.now().mono;
        // Early ones fill the batch the due ones go in, no more: on a store
        // that serves little per round trip, pulling every nearly-due
        // renewal into one round would make it a burst that outlasts its
        // timeout, where spread out they fit.
        let cap = self
            .admission
            .batch_cap(self.options.max_batch, self.op_timeout / 4);
        if std::mem::take(&mut self.renewing) {
            let room = cap.saturating_sub(self.writes.of(Priority::Renewal).len());
            let due = self.nearly_due(&self.renewals, now, self.renew_window, room, |t| {
                t.renew_interval
            });
            for id in due {
                self.step(id, Input::RenewEarly);
            }
            self.renewing = false;
        }
        if std::mem::take(&mut self.polling) {
            let room = cap.saturating_sub(self.reads.of(Priority::Poll).len());
            let due = self.nearly_due(&self.polls, now, self.poll_window, room, |t| {
                t.retry_interval
            });
            for id in due {
                self.step(id, Input::PollEarly);
            }
            self.polling = false;
        }
    }

    /// The first `room` groups of `wakes` due within `window` of `now`,
    /// each no earlier than half its own `interval` (so that coalescing
    /// never more than halves a group's renewal or poll period). It stops
    /// at `room` (and walks nothing when it is 0): past capacity the window
    /// holds most groups, and a batch already full must not cost a walk
    /// over all of them each turn.
    fn nearly_due(
        &self,
        wakes: &BTreeSet<(MonoTime, GroupId)>,
        now: MonoTime,
        window: Duration,
        room: usize,
        interval: fn(&Timing) -> Duration,
    ) -> Vec<GroupId> {
        wakes
            .iter()
            .take_while(|(t, _)| *t <= now + window)
            .filter(|(t, id)| {
                // A group retrying after a failure keeps its own schedule:
                // pulled in, it would be batched with the healthy ones.
                self.slots.get(id).is_some_and(|s| {
                    s.isolate == usize::MAX && *t <= now + interval(s.machine.timing()) / 2
                })
            })
            .map(|(_, id)| *id)
            .take(room)
            .collect()
    }

    /// Sends queued operations as batches while there is room in flight,
    /// in the order of their priorities, then answers what it held back.
    fn flush(&mut self) {
        loop {
            for priority in Priority::ALL {
                self.flush_queue(
                    priority,
                    |engine| &mut engine.writes,
                    |counters| (&counters.write_batches, &counters.writes),
                    |store, requests| async move { store.compare_and_swap_many(&requests).await },
                    BatchResults::Writes,
                );
                self.flush_queue(
                    priority,
                    |engine| &mut engine.reads,
                    |counters| (&counters.read_batches, &counters.reads),
                    |store, groups| async move { store.read_many(&groups).await },
                    BatchResults::Reads,
                );
            }
            let shed = std::mem::take(&mut self.shedding);
            if shed.is_empty() {
                break;
            }
            for (id, op) in shed {
                Counters::add(&self.counters.shed, 1);
                self.hold_back(id, op);
            }
        }
        let window = self.admission.window() as u64;
        self.counters
            .admission_window
            .store(window, Ordering::Relaxed);
    }

    /// How many operations of `priority` may go out in the next batch: the
    /// batch size, within the admission window for deferrable ones, which
    /// also leave the last free slot to renewals and releases.
    fn room_for(&self, priority: Priority) -> usize {
        let free = self
            .options
            .max_in_flight
            .saturating_sub(self.batches.len());
        let cap = self
            .admission
            .batch_cap(self.options.max_batch, self.op_timeout / 4);
        if !priority.deferrable() {
            return if free > 0 { cap } else { 0 };
        }
        let reserved = usize::from(self.options.max_in_flight > 1);
        if free <= reserved {
            return 0;
        }
        let now = self.clock.now().mono;
        self.admission.room(now).min(cap)
    }

    /// Sends one priority's operations of one queue as batches while there
    /// is room, through `call`; `counted` names the counters of its batches
    /// and of its operations.
    fn flush_queue<T, R, Fut>(
        &mut self,
        priority: Priority,
        queues: fn(&mut Self) -> &mut Queues<T>,
        counted: fn(&Counters) -> (&AtomicU64, &AtomicU64),
        call: impl Fn(Arc<dyn LeaseStore>, Vec<T>) -> Fut,
        results: fn(Vec<(GroupId, OpId)>, BatchResult<R>) -> BatchResults,
    ) where
        R: 'static,
        Fut: Future<Output = BatchResult<R>> + Send + 'static,
    {
        loop {
            if queues(self).of(priority).is_empty() {
                return;
            }
            let room = self.room_for(priority);
            if room == 0 {
                return;
            }
            let allow_suspects = self.suspects_in_flight == 0;
            let lane = queues(self).of(priority);
            if lane.healthy.is_empty() && !allow_suspects {
                return;
            }
            let (chunk, suspects) = lane.take(room, allow_suspects);
            let Some(out) = self.still_current(chunk, priority) else {
                continue;
            };
            let (batches, operations) = counted(&self.counters);
            Counters::add(batches, 1);
            Counters::add(operations, out.items.len());
            self.send(out, priority, suspects, &call, results);
        }
    }

    /// The operations of `chunk` that are still their groups' operations in
    /// flight, as a batch to send; `None` if none is. A renewal or release
    /// whose deadline is nearer than the store's recent service time is
    /// not sent, but answered as held back.
    fn still_current<T>(
        &mut self,
        chunk: Vec<Queued<T>>,
        priority: Priority,
    ) -> Option<Outgoing<T>> {
        let now = self.clock.now().mono;
        // What the store should take for this batch, at its round trip and
        // learned cost per operation: an operation whose deadline comes
        // sooner would be answered too late, and the store's time spent on
        // it would be taken from the others.
        let expected = self.admission.expected(chunk.len(), self.ops_in_flight);
        let mut live = Vec::with_capacity(chunk.len());
        for q in chunk {
            if !self.is_current(q.id, q.op) {
                continue;
            }
            if !priority.deferrable() && q.deadline.saturating_since(now) < expected {
                // Held terms are being given up for want of time: nothing
                // that adds load may go out, from this very flush on, until
                // the store keeps up again.
                let holding = self.holding();
                self.admission.overloaded(now, self.op_timeout / 4, holding);
                self.shedding.push((q.id, q.op));
                continue;
            }
            live.push(q);
        }
        let deadline = live.iter().map(|q| q.deadline).max()?;
        let ids = live.iter().map(|q| (q.id, q.op)).collect();
        let items = live.into_iter().map(|q| q.item).collect();
        Some(Outgoing {
            ids,
            deadline,
            items,
        })
    }

    /// Sends a batch through `call` in a task of its own, its reply made
    /// by `results`; at its deadline the batch is abandoned (every operation
    /// in it has timed out) and fails as a whole.
    fn send<T, R, Fut>(
        &mut self,
        out: Outgoing<T>,
        priority: Priority,
        suspects: bool,
        call: impl FnOnce(Arc<dyn LeaseStore>, Vec<T>) -> Fut,
        results: fn(Vec<(GroupId, OpId)>, BatchResult<R>) -> BatchResults,
    ) where
        R: 'static,
        Fut: Future<Output = BatchResult<R>> + Send + 'static,
    {
        for (id, op) in &out.ids {
            if let Some(current) = self.slots.get_mut(id).and_then(|s| s.op.as_mut()) {
                if current.op == *op {
                    current.sent = true;
                }
            }
        }
        let clock = self.clock.clone();
        let sent = clock.now().mono;
        let waited = out.deadline.saturating_since(sent);
        let (ids, deadline) = (out.ids, out.deadline);
        let count = ids.len();
        let work = call(self.store.clone(), out.items);
        let task = self.batches.spawn(async move {
            let result = tokio::select! {
                r = work => r,
                _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(waited)),
            };
            BatchReply {
                sent,
                priority,
                suspects,
                result: results(ids, result),
            }
        });
        let deferrable = if priority.deferrable() { count } else { 0 };
        self.admission.sent(deferrable);
        self.admitted.insert(task.id(), (count, deferrable));
        self.ops_in_flight = self.ops_in_flight.saturating_add(count);
        if suspects {
            self.suspects_in_flight += 1;
        }
    }

    /// Whether `op` is still the group's operation in flight (it may have
    /// timed out while queued).
    fn is_current(&self, id: GroupId, op: OpId) -> bool {
        self.slots
            .get(&id)
            .is_some_and(|s| s.op.is_some_and(|c| c.op == op))
    }

    fn on_batch(&mut self, reply: BatchReply) {
        let now = self.clock.now().mono;
        let latency = now.saturating_since(reply.sent);
        let (count, failed) = (reply.result.len(), reply.result.failed());
        let target = self.op_timeout / 4;
        let renewals = reply.priority == Priority::Renewal;
        self.admission
            .observe(now, latency, failed, count, target, renewals);
        if reply.suspects {
            self.suspects_in_flight = self.suspects_in_flight.saturating_sub(1);
        }
        // A group that failed while others in its batch succeeded may go
        // only alone next time; one that failed with its whole batch (or
        // with every item of it), with half as many, unless no batch of
        // the same kind has come back with a success since it went out:
        // then the store is failing everyone (an outage, a Redis that
        // refuses every lease for a while), and blaming the items would
        // only turn the recovery into batches of one.
        let outcome = reply.result.outcome();
        let kind = usize::from(matches!(reply.result, BatchResults::Writes(..)));
        let store_works = self.last_success[kind].is_some_and(|t| t >= reply.sent);
        if outcome != Outcome::AllFailed {
            self.last_success[kind] = Some(now);
        }
        let isolate = match (outcome, store_works) {
            (Outcome::Mixed, _) => 1,
            (Outcome::AllFailed, true) => (count / 2).max(1),
            (Outcome::AllFailed, false) | (Outcome::AllApplied, _) => usize::MAX,
        };
        match reply.result {
            BatchResults::Reads(ids, result) => {
                for ((id, op), result) in spread(ids, result) {
                    self.judge(id, &result, isolate);
                    let result = result.map(Reply::Read);
                    self.answer(id, op, result);
                }
            }
            BatchResults::Writes(ids, result) => {
                for ((id, op), result) in spread(ids, result) {
                    self.judge(id, &result, isolate);
                    let result = result.map(Reply::Write);
                    self.answer(id, op, result);
                }
            }
        }
    }

    /// Files a group as healthy after a success, or as a suspect to be
    /// sent in batches of at most `isolate` after a failure.
    fn judge<T>(&mut self, id: GroupId, result: &Result<T, StoreError>, isolate: usize) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        slot.isolate = match result {
            Ok(_) => usize::MAX,
            // Held back, not failed.
            Err(e) if e.not_applied() => slot.isolate,
            Err(_) if isolate == usize::MAX => slot.isolate,
            Err(_) => slot.isolate.min(isolate),
        };
    }

    /// Answers a group's operation that the engine did not send because it
    /// could not have been answered before its deadline: busy, certainly not
    /// applied, and no report on the store's health (it did not fail).
    fn hold_back(&mut self, id: GroupId, op: OpId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let Some(current) = slot.op.filter(|c| c.op == op) else {
            return;
        };
        slot.op = None;
        let error = StoreError::busy(
            "not sent: the store could not have answered before the operation's deadline",
        );
        let input = current.kind.failed(op, error);
        self.step(id, input);
    }

    /// Hands a group its operation's outcome, if `op` is still the one it
    /// waits for. A read's outcome answers a read, a write's a write; an
    /// error answers either.
    fn answer(&mut self, id: GroupId, op: OpId, result: Result<Reply, StoreError>) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let Some(current) = slot.op else {
            return;
        };
        if current.op != op {
            return;
        }
        slot.op = None;
        match &result {
            Ok(Reply::Read(Some(v))) => saw(slot, v.version),
            Ok(Reply::Write(CasOutcome::Applied(version))) => saw(slot, *version),
            _ => {}
        }
        let health = result
            .as_ref()
            .err()
            .map(|e| (e.kind().to_owned(), e.to_string()));
        slot.session
            .publisher
            .store_health(current.kind.label(), health);
        let input = match (current.kind, result) {
            (_, Ok(Reply::Read(read))) => Input::ReadDone {
                op,
                result: Ok(read),
            },
            (_, Ok(Reply::Write(outcome))) => Input::CasDone {
                op,
                result: Ok(outcome),
            },
            (kind, Err(e)) => kind.failed(op, e),
        };
        self.step(id, input);
    }

    fn subscribe_if_due(&mut self) {
        let Feed::Off { retry_at } = self.feed else {
            return;
        };
        if self.slots.is_empty() || self.clock.now().mono < retry_at {
            return;
        }
        self.feed = Feed::Subscribing;
        let (store, clock) = (self.store.clone(), self.clock.clone());
        // Bounded like an operation of the shortest term in the engine.
        let timeout = self
            .slots
            .values()
            .map(|s| s.machine.timing().op_timeout)
            .min()
            .unwrap_or(Duration::from_secs(5));
        self.subscription.spawn(async move {
            let deadline = clock.now().mono + timeout;
            tokio::select! {
                r = store.watch() => r,
                _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(timeout)),
            }
        });
    }

    fn on_subscribed(&mut self, result: Result<Option<StoreFeed>, StoreError>) {
        match result {
            Ok(Some(feed)) => {
                self.feed = Feed::Up(feed);
                let ids: Vec<GroupId> = self.slots.keys().copied().collect();
                for id in ids {
                    self.step(id, Input::Feed { live: true });
                }
            }
            Ok(None) => {
                self.feed = Feed::PerGroup;
                let ids: Vec<GroupId> = self.slots.keys().copied().collect();
                for id in ids {
                    self.subscribe_group(id);
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "no change feed yet; polling");
                self.feed = Feed::Off {
                    retry_at: self.clock.now().mono + self.retry_interval(),
                };
            }
        }
    }

    /// The shortest retry interval among the groups that have joined, for
    /// re-subscribing and the feed check.
    fn retry_interval(&self) -> Duration {
        if self.retry_min == Duration::MAX {
            Duration::from_secs(1)
        } else {
            self.retry_min
        }
    }

    fn on_change(&mut self, change: Option<Change>) {
        let Some(change) = change else {
            tracing::debug!("change feed ended; polling until it is back");
            return self.feed_lost();
        };
        Counters::add(&self.counters.changes, 1);
        self.check.delivered = self.check.delivered.wrapping_add(1);
        match change {
            Change::Written { group, current } => {
                for id in self.ids_of(&group) {
                    if let Some(slot) = self.slots.get_mut(&id) {
                        // What the feed delivered (a forged version only
                        // blinds the check for this one group; it reads
                        // the groups in turn).
                        saw(slot, current.version);
                    }
                    self.step(
                        id,
                        Input::Observed {
                            current: current.clone(),
                        },
                    );
                }
            }
            Change::Hint { group } => {
                for id in self.ids_of(&group) {
                    self.step(id, Input::Changed);
                }
            }
            Change::Resync => {
                let ids: Vec<GroupId> = self.slots.keys().copied().collect();
                for id in ids {
                    self.step(id, Input::Changed);
                }
            }
        }
    }

    fn ids_of(&self, group: &GroupName) -> Vec<GroupId> {
        self.by_group.get(group).cloned().unwrap_or_default()
    }

    /// For a store without a store-wide feed: forward the group's own
    /// change hints into the engine, re-subscribing when the feed ends.
    fn subscribe_group(&mut self, id: GroupId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let tx = self.hint_tx.clone();
        let (store, group, clock) = (self.store.clone(), slot.group.clone(), self.clock.clone());
        let timeout = slot.machine.timing().op_timeout;
        let retry = slot.machine.timing().retry_interval;
        let handle = tokio::spawn(async move {
            loop {
                let deadline = clock.now().mono + timeout;
                let subscribed = tokio::select! {
                    r = store.changes(&group) => r,
                    _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(timeout)),
                };
                match subscribed {
                    Ok(Some(mut feed)) => {
                        while feed.changed().await.is_some() {
                            if tx.send(id).is_err() {
                                return;
                            }
                        }
                    }
                    // This store cannot notify: the group polls.
                    Ok(None) => return,
                    Err(_) => {}
                }
                clock.sleep_until(clock.now().mono + retry).await;
            }
        });
        slot.hints = Some(handle.abort_handle());
    }
}

/// Whether a group waits for a lease someone else may hold (what the feed
/// check reads).
fn following(slot: &Slot) -> bool {
    slot.machine.phase() == Phase::Candidate
}

/// Notes a version of the group's record the engine has seen.
fn saw(slot: &mut Slot, version: Version) {
    slot.seen = Some(slot.seen.map_or(version, |s| s.max(version)));
}

/// A store's answer to one operation.
enum Reply {
    Read(Option<Versioned>),
    Write(CasOutcome),
}

/// Pairs each operation of a batch with its result; a batch that failed as
/// a whole fails every operation in it with a copy of its error.
fn spread<T>(
    ids: Vec<(GroupId, OpId)>,
    result: BatchResult<T>,
) -> Vec<((GroupId, OpId), Result<T, StoreError>)> {
    match result {
        Ok(results) if results.len() == ids.len() => ids.into_iter().zip(results).collect(),
        Ok(results) => {
            let error = StoreError::Unavailable {
                message: format!(
                    "the store answered a batch of {} operations with {} results",
                    ids.len(),
                    results.len()
                ),
                source: None,
            };
            ids.into_iter()
                .map(|id| (id, Err(error.copy_for_batch())))
                .collect()
        }
        Err(error) => ids
            .into_iter()
            .map(|id| (id, Err(error.copy_for_batch())))
            .collect(),
    }
}

/// Feeds the latest application pulse, if any arrived since the last.
fn feed_pulse(slot: &mut Slot, now: Now) -> Vec<Action> {
    let last = slot.session.pulse.last.load(Ordering::Acquire);
    if last <= slot.fed_pulse {
        return Vec::new();
    }
    slot.fed_pulse = last;
    let at = MonoTime::from_nanos(last).min(now.mono);
    slot.machine.step(now, Input::Pulse { at })
}

/// Asks pulses to wake the engine while the application's silence is what
/// keeps this candidate from leading.
fn watch_liveness(slot: &Slot, now: Now) {
    if let Some(timeout) = slot.machine.timing().liveness_timeout {
        let last = MonoTime::from_nanos(slot.session.pulse.last.load(Ordering::Acquire));
        let silent = now.mono >= last + timeout;
        let standing = slot.machine.phase() == Phase::Candidate;
        slot.session
            .pulse
            .waiting
            .store(silent && standing, Ordering::Release);
    }
}

/// Moves group `id` in `index` (groups by the instant something is due
/// for them) from the instant it was filed at to `due`, or out of it.
fn refile(
    index: &mut BTreeSet<(MonoTime, GroupId)>,
    filed: &mut Option<MonoTime>,
    due: Option<MonoTime>,
    id: GroupId,
) {
    if due == *filed {
        return;
    }
    if let Some(t) = filed.take() {
        index.remove(&(t, id));
    }
    if let Some(t) = due {
        index.insert((t, id));
    }
    *filed = due;
}

async fn next_change(feed: &mut Feed) -> Option<Change> {
    match feed {
        Feed::Up(f) => f.next().await,
        _ => std::future::pending().await,
    }
}

async fn sleep_until(clock: &Arc<dyn Clock>, wake: Option<MonoTime>) {
    match wake {
        Some(t) => clock.sleep_until(t).await,
        None => std::future::pending().await,
    }
}
