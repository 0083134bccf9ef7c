//! A member process that stops running for a while (a long GC, swap, a
//! `SIGSTOP`), as the sharded tier models it on one tokio runtime: while
//! the process is frozen none of its timers fire and none of its store
//! requests go out or come back; its clock keeps counting (as
//! `CLOCK_BOOTTIME` does), so when it thaws every timer that fell due in
//! between fires at once and replies that arrived meanwhile are delivered.
//!
//! [`Pause`] is the switch, shared by the process's clock ([`PausedClock`])
//! and its view of the store ([`PausedStore`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tenure::clock::Sleep;
use tenure::store::Running;
use tenure::store::{BatchResult, CasOutcome, CasRequest, ChangeFeed, Listed, StoreFeed};
use tenure::{
    Clock, GroupName, LeaseRecord, LeaseStore, LeaseView, MonoTime, Now, StoreError, Version,
    Versioned,
};
use tokio::time::Instant;

use crate::clock::SimTime;
use crate::elector::clock::{SimClock, TIMER_RESOLUTION};

/// Changes a frozen process's store feed may hold back before it drops the
/// rest and asks for a resync.
const FEED_CAPACITY: usize = 1024;

/// Whether one process is frozen, and since when.
#[derive(Clone, Debug)]
pub(crate) struct Pause {
    /// Real instant zero of the run.
    origin: Instant,
    /// The latest pause: from, until (real nanoseconds; both 0 if none).
    window: Arc<[AtomicU64; 2]>,
}

impl Pause {
    pub(crate) fn new(origin: Instant) -> Self {
        Pause {
            origin,
            window: Arc::new([AtomicU64::new(0), AtomicU64::new(0)]),
        }
    }

    fn real_now(&self) -> SimTime {
        SimTime::from_duration(Instant::now().saturating_duration_since(self.origin))
    }

    /// Freezes the process from now until `until`. A pause that begins
    /// within a timer tick of the last one's end continues it: the timers
    /// due at the thaw fire on that tick, so what the process did in
    /// between was only to drop work whose term had ended while it was
    /// frozen, which a single longer pause would have done as it thawed.
    pub(crate) fn freeze(&self, until: SimTime) {
        let now = self.real_now();
        let (from, to) = (&self.window[0], &self.window[1]);
        let last_end = SimTime(to.load(Ordering::Acquire));
        if last_end.after(TIMER_RESOLUTION) < now || last_end == SimTime(0) {
            from.store(now.as_nanos(), Ordering::Release);
        }
        to.fetch_max(until.as_nanos(), Ordering::AcqRel);
    }

    /// The latest pause, if any: when it began and when it ends (or ended).
    pub(crate) fn latest(&self) -> Option<(SimTime, SimTime)> {
        let to = self.window[1].load(Ordering::Acquire);
        (to > 0).then(|| (SimTime(self.window[0].load(Ordering::Acquire)), SimTime(to)))
    }

    /// Completes at once unless the process is frozen; then when it thaws.
    pub(crate) async fn thawed(&self) {
        loop {
            let until = self.window[1].load(Ordering::Acquire);
            if self.real_now().as_nanos() >= until {
                return;
            }
            tokio::time::sleep_until(self.origin + SimTime(until).as_duration()).await;
        }
    }

    /// If the process was frozen at `from` and is seen again only at `now`,
    /// within `resolution` of thawing, the instant it froze: whatever ran
    /// under it did nothing after that.
    pub(crate) fn frozen_since(
        &self,
        began: SimTime,
        now: SimTime,
        resolution: std::time::Duration,
    ) -> Option<SimTime> {
        let (from, to) = self.latest()?;
        (began <= from && from <= now && now <= to.after(resolution)).then_some(from)
    }

    /// The tokio instant of a real (simulated) time.
    pub(crate) fn instant(&self, t: SimTime) -> Instant {
        self.origin + t.as_duration()
    }
}

/// A member's clock: its drifting [`SimClock`], whose timers wait while
/// the process is frozen.
pub(crate) struct PausedClock {
    pub(crate) inner: Arc<SimClock>,
    pub(crate) pause: Pause,
}

impl Clock for PausedClock {
    fn now(&self) -> Now {
        self.inner.now()
    }

    fn mono(&self) -> MonoTime {
        self.inner.mono()
    }

    fn random_u64(&self) -> u64 {
        self.inner.random_u64()
    }

    fn sleep_until(&self, deadline: MonoTime) -> Sleep {
        let sleep = self.inner.sleep_until(deadline);
        let pause = self.pause.clone();
        Box::pin(async move {
            sleep.await;
            pause.thawed().await;
        })
    }
}

/// A member's view of the store: requests wait to go out, and replies to
/// come back, while the process is frozen; so do change notifications.
///
/// It also counts the reads of catalog parts (groups under `SET/catalog/`)
/// into a counter the set shares, for the cost check of hostile catalogs.
#[derive(Clone, Debug)]
pub(crate) struct PausedStore<S> {
    inner: S,
    pause: Pause,
    catalog_reads: Arc<AtomicUsize>,
}

impl<S> PausedStore<S> {
    pub(crate) fn new(inner: S, pause: Pause, catalog_reads: Arc<AtomicUsize>) -> Self {
        PausedStore {
            inner,
            pause,
            catalog_reads,
        }
    }

    fn count(&self, groups: &[GroupName]) {
        let parts = groups
            .iter()
            .filter(|g| g.as_str().contains("/catalog/"))
            .count();
        if parts > 0 {
            self.catalog_reads.fetch_add(parts, Ordering::Relaxed);
        }
    }
}

impl<S: LeaseStore> PausedStore<S> {
    /// Runs `op` once the process runs, and hands its reply back once the
    /// process runs again.
    async fn gated<T>(&self, op: impl std::future::Future<Output = T>) -> T {
        self.pause.thawed().await;
        let reply = op.await;
        self.pause.thawed().await;
        reply
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseView for PausedStore<S> {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.count(std::slice::from_ref(group));
        self.gated(self.inner.read(group)).await
    }

    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        self.count(groups);
        self.gated(self.inner.read_many(groups)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        self.gated(self.inner.list(prefix)).await
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        let Some(mut inner) = self.gated(self.inner.changes(group)).await? else {
            return Ok(None);
        };
        let (tx, feed) = ChangeFeed::channel();
        let pause = self.pause.clone();
        tokio::spawn(async move {
            while inner.changed().await.is_some() {
                pause.thawed().await;
                // A full channel already holds a hint: this one adds nothing.
                if tx.try_send(()).is_err() && tx.is_closed() {
                    return;
                }
            }
        });
        Ok(Some(feed))
    }

    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        let Some(mut inner) = self.gated(self.inner.watch()).await? else {
            return Ok(None);
        };
        let (tx, feed) = StoreFeed::channel(FEED_CAPACITY);
        let pause = self.pause.clone();
        tokio::spawn(async move {
            while let Some(change) = inner.next().await {
                pause.thawed().await;
                if !tx.send(change).await {
                    return;
                }
            }
        });
        Ok(Some(feed))
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn running(&self) -> Running<'_> {
        // The inner store's engine; batches of the default size and no
        // shared bound, as the sharded tier's recorded seeds ran.
        let mine = Running::default();
        self.inner
            .running()
            .engine
            .map_or(mine, |e| mine.with_engine(e))
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseStore for PausedStore<S> {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        self.gated(self.inner.compare_and_swap(group, expected, record))
            .await
    }

    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        self.gated(self.inner.compare_and_swap_many(requests)).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use tenure::{Faults, MemoryStore};

    use super::*;
    use crate::clock::NodeClock;
    use crate::paused::Findings;

    fn ms(t: u64) -> SimTime {
        SimTime::from_duration(Duration::from_millis(t))
    }

    #[tokio::test(start_paused = true)]
    async fn a_frozen_process_fires_no_timer_and_reaches_no_store_until_it_thaws() {
        let origin = Instant::now();
        let pause = Pause::new(origin);
        let findings = Arc::new(Mutex::new(Findings::new(0, false)));
        let clock = PausedClock {
            inner: Arc::new(SimClock::new(
                origin,
                NodeClock::with_rate(0.0),
                0,
                findings,
            )),
            pause: pause.clone(),
        };
        let store = PausedStore::new(
            Faults::new().wrap(MemoryStore::new(), "a"),
            pause.clone(),
            Arc::default(),
        );
        assert_eq!(pause.latest(), None);
        tokio::time::sleep(Duration::from_millis(100)).await;
        pause.freeze(ms(1_000));
        assert_eq!(pause.latest(), Some((ms(100), ms(1_000))));
        // A timer due during the pause fires as the process thaws; its
        // clock has counted on meanwhile.
        let start = clock.mono();
        clock.sleep_until(start + Duration::from_millis(200)).await;
        assert_eq!(origin.elapsed(), Duration::from_secs(1));
        assert_eq!(clock.mono(), start + Duration::from_millis(900));
        // A store request waits for the thaw too, and so does its reply.
        // Frozen again as it thawed: the same pause goes on.
        pause.freeze(ms(1_500));
        assert_eq!(pause.latest(), Some((ms(100), ms(1_500))));
        let group = GroupName::new("g").unwrap();
        assert_eq!(store.read(&group).await.unwrap(), None);
        assert_eq!(origin.elapsed(), Duration::from_millis(1_500));
        // Work frozen from 0.1 s and ended as it thawed ended at 0.1 s;
        // work that ran on after the thaw, or began later, did not.
        let res = Duration::from_millis(1);
        assert_eq!(pause.frozen_since(ms(90), ms(1_500), res), Some(ms(100)));
        assert_eq!(pause.frozen_since(ms(90), ms(1_501), res), Some(ms(100)));
        assert_eq!(pause.frozen_since(ms(90), ms(1_502), res), None);
        assert_eq!(pause.frozen_since(ms(200), ms(1_500), res), None);
        assert_eq!(pause.frozen_since(ms(90), ms(99), res), None);
        // Frozen again within a tick of thawing: still one pause.
        tokio::time::sleep_until(origin + Duration::from_micros(1_500_800)).await;
        pause.freeze(ms(3_000));
        assert_eq!(pause.latest(), Some((ms(100), ms(3_000))));
        // Frozen again later: a new pause.
        tokio::time::sleep_until(origin + Duration::from_millis(3_002)).await;
        pause.freeze(ms(4_000));
        assert_eq!(pause.latest(), Some((ms(3_002), ms(4_000))));
    }
}
