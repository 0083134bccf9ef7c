//! An engine whose process was suspended while a batch was in flight, on
//! tokio's paused clock: the batch's reply measures the suspension as the
//! store's latency. What the engine learns from it must not hold back
//! every operation for good (issue 39: `tenure-sim --shards --catalog`
//! seed 316, a member frozen for 4.7 s at its start that never held its
//! membership again).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure::clock::Sleep;
use tenure::store::{BatchResult, CasOutcome, CasRequest};
use tenure::{
    Clock, Config, Elector, Engine, GroupName, LeaseRecord, LeaseStore, LeaseView, MemoryStore,
    MonoTime, Now, StoreError, TokioClock, Version, Versioned,
};

const TERM: Duration = Duration::from_secs(2);
const GROUPS: usize = 8;

/// Tokio's paused clock, which a suspended host's clock jumps ahead of.
struct JumpClock {
    inner: TokioClock,
    jumped: AtomicU64,
}

impl JumpClock {
    fn jump(&self, by: Duration) {
        self.jumped
            .fetch_add(u64::try_from(by.as_nanos()).unwrap(), Ordering::SeqCst);
    }

    fn jumped(&self) -> Duration {
        Duration::from_nanos(self.jumped.load(Ordering::SeqCst))
    }
}

impl Clock for JumpClock {
    fn now(&self) -> Now {
        let now = self.inner.now();
        Now {
            mono: now.mono + self.jumped(),
            wall: now.wall + self.jumped(),
        }
    }
    fn sleep_until(&self, deadline: MonoTime) -> Sleep {
        self.inner.sleep_until(deadline - self.jumped())
    }
}

/// A memory store whose first batch of reads of `GROUPS` groups or more
/// finds the process suspended for 5 s before the reply is read.
struct SuspendsOnce {
    inner: MemoryStore,
    clock: Arc<JumpClock>,
    armed: AtomicBool,
}

#[async_trait]
impl LeaseView for SuspendsOnce {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.inner.read(group).await
    }
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        if groups.len() >= GROUPS && self.armed.swap(false, Ordering::SeqCst) {
            self.clock.jump(Duration::from_secs(5));
        }
        self.inner.read_many(groups).await
    }
    fn describe(&self) -> String {
        "suspends-once".into()
    }
}

#[async_trait]
impl LeaseStore for SuspendsOnce {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        self.inner.compare_and_swap(group, expected, record).await
    }
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        self.inner.compare_and_swap_many(requests).await
    }
}

/// Eight candidates start together; their first polls go in one batch,
/// whose reply is read 5 s later (the host was suspended): the engine took
/// 5 s for the store's round trip, judged that no operation could be
/// answered within its 500 ms timeout, and sent none again, so nobody was
/// ever elected (seen to fail before: no leader after 30 terms). With one
/// operation sent as a probe whenever nothing is in flight, the replies
/// teach it the store's real speed and every group is led within a few
/// terms.
#[tokio::test(start_paused = true)]
async fn a_suspension_measured_as_latency_does_not_hold_back_every_operation() {
    let clock = Arc::new(JumpClock {
        inner: TokioClock::new(),
        jumped: AtomicU64::new(0),
    });
    let store = SuspendsOnce {
        inner: MemoryStore::new(),
        clock: clock.clone(),
        armed: AtomicBool::new(true),
    };
    let engine = Engine::builder(store)
        .clock(clock.clone())
        .start()
        .expect("engine");
    let electors: Vec<Elector> = (0..GROUPS)
        .map(|i| {
            engine
                .elector(format!("g{i}"))
                .candidate_id("a")
                .config(Config::new(TERM))
                .start()
                .expect("valid")
        })
        .collect();
    let mut waited = Duration::ZERO;
    while !electors.iter().all(Elector::is_leader) {
        assert!(
            waited < TERM * 30,
            "{} of {GROUPS} groups led after {waited:?}: {:?}",
            electors.iter().filter(|e| e.is_leader()).count(),
            engine.stats()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    assert!(clock.jumped() > Duration::ZERO, "the suspension happened");
    eprintln!("every group led {waited:?} after the start");
    for e in &electors {
        e.shutdown().await;
    }
}
