//! What the electors of one engine share with its task: the channel, the
//! counters behind [`EngineStats`], and the slot a store keeps so that
//! every elector on it (per clock and runtime) joins one engine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::mpsc;

use crate::clock::Clock;
use crate::store::LeaseStore;

use super::task::Task;
use super::{EngineOptions, EngineStats, GroupId, ToEngine};

#[derive(Default)]
pub(super) struct Counters {
    pub(super) groups: AtomicU64,
    pub(super) read_batches: AtomicU64,
    pub(super) reads: AtomicU64,
    pub(super) write_batches: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) changes: AtomicU64,
    pub(super) shed: AtomicU64,
    pub(super) admission_window: AtomicU64,
    pub(super) feed_silences: AtomicU64,
}

impl Counters {
    pub(super) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> EngineStats {
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
    pub(super) tx: mpsc::UnboundedSender<ToEngine>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(super) next_id: AtomicU64,
    pub(super) counters: Arc<Counters>,
}

impl EngineShared {
    pub(crate) fn send(&self, msg: ToEngine) {
        let _ = self.tx.send(msg);
    }

    /// Asks for a tap of the engine's store-wide change feed: the one feed
    /// the engine keeps for its store, shared instead of opening another.
    /// Answers `None` if the store has no store-wide feed or it cannot be
    /// had now (ask again later); the tap ends when the engine's feed
    /// does. What comes on it is a hint, as on any feed.
    pub(crate) fn tap(&self) -> tokio::sync::oneshot::Receiver<Option<crate::store::StoreFeed>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(ToEngine::Tap(tx));
        rx
    }

    pub(crate) fn next_id(&self) -> GroupId {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether the engine task still runs (its runtime may have shut down).
    pub(super) fn is_running(&self) -> bool {
        !self.tx.is_closed()
    }

    pub(super) fn start(
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
            max_batch: options.max_batch.min(store.running().batch_size.max(1)),
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
        let Some(slot) = store.running().engine else {
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
pub(super) enum RuntimeKey {
    CurrentThread(std::thread::ThreadId),
    MultiThread,
}

impl RuntimeKey {
    pub(super) fn of(runtime: &tokio::runtime::Handle) -> RuntimeKey {
        match runtime.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::CurrentThread => {
                RuntimeKey::CurrentThread(std::thread::current().id())
            }
            _ => RuntimeKey::MultiThread,
        }
    }
}

pub(super) fn same_clock(a: &Arc<dyn Clock>, b: &Arc<dyn Clock>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// Where a store handle keeps the engine its clones share. A store puts one
/// in the state its clones share and returns it from
/// [`Running::engine`](crate::store::Running::engine); that is all it takes for
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

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(RuntimeKey, Weak<EngineShared>)>> {
        // The guarded value is a list of pointers, never left half-written.
        self.engines.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for EngineSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineSlot")
    }
}
