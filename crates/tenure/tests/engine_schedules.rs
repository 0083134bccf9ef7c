//! Schedules of the many-leases engine that once went wrong (each failed
//! before its fix: sequential batches starving the tail, an engine shared
//! across runtimes, two candidates of one group on one engine, a spin, a
//! drop during an acquisition), and awkward states that must stay cheap
//! and correct.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure::store::CasOutcome;
use tenure::store::Running;
use tenure::{
    Clock, Config, Elector, EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, MemoryStore,
    StoreError, TokioClock, Version, Versioned,
};

/// A store with a per-operation round trip and only the single-record
/// operations: `read_many` / `compare_and_swap_many` are the trait's
/// defaults, as for tenure-postgres, -redis, -etcd and -dynamodb.
#[derive(Clone)]
struct OneByOne {
    inner: MemoryStore,
    rtt: Duration,
    slot: Option<Arc<EngineSlot>>,
}

#[async_trait]
impl LeaseView for OneByOne {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        tokio::time::sleep(self.rtt).await;
        self.inner.read(group).await
    }
    fn describe(&self) -> String {
        "one-by-one://".into()
    }

    fn running(&self) -> Running<'_> {
        let mine = Running::default();
        self.slot.as_deref().map_or(mine, |e| mine.with_engine(e))
    }
}

#[async_trait]
impl LeaseStore for OneByOne {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        tokio::time::sleep(self.rtt).await;
        self.inner.compare_and_swap(group, expected, record).await
    }
}

async fn leading_after(shared_engine: bool, groups: usize, rtt: Duration) -> (usize, u64) {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let store = OneByOne {
        inner: MemoryStore::new(),
        rtt,
        slot: shared_engine.then(|| Arc::new(EngineSlot::new())),
    };
    let electors: Vec<Elector> = (0..groups)
        .map(|i| {
            Elector::builder(store.clone(), format!("g{i}"))
                .candidate_id("a")
                .config(Config::new(Duration::from_secs(10)))
                .clock(clock.clone())
                .start()
                .unwrap()
        })
        .collect();
    let mut events: Vec<_> = electors.iter().map(|e| e.events()).collect();
    // One candidate per group, nobody competing: every group should lead
    // within a round trip or two and keep leading.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let leading = electors.iter().filter(|e| e.is_leader()).count();
    let mut ousted = 0;
    for ev in &mut events {
        loop {
            match tokio::time::timeout(Duration::from_millis(1), ev.next()).await {
                Ok(Some(tenure::Event::Ousted { .. })) => ousted += 1,
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
    (leading, ousted)
}

/// the engine batches N operations into one call of the trait's
/// default `read_many`/`compare_and_swap_many`, which runs them one after
/// another; coalescing puts every renewal into one batch, so its tail
/// passes the operation timeout. With an engine per group (no slot) the
/// same store keeps every group leading.
#[tokio::test(start_paused = true)]
async fn default_batches_are_sequential_and_starve_the_tail() {
    let rtt = Duration::from_millis(20);
    let (own_leading, own_ousted) = leading_after(false, 200, rtt).await;
    assert_eq!(
        (own_leading, own_ousted),
        (200, 0),
        "control: an engine per group"
    );
    let (leading, ousted) = leading_after(true, 200, rtt).await;
    assert_eq!(
        (leading, ousted),
        (200, 0),
        "one shared engine, 200 groups, 20 ms per operation: {leading} lead, {ousted} terms lost"
    );
}

/// a batch abandoned at its own deadline reports
/// `StoreError::Timeout(Duration::ZERO)` ("did not answer within 0ns"),
/// which reaches the health event when it wins the race with the
/// engine's per-operation deadline.
#[tokio::test(start_paused = true)]
async fn batch_timeout_message() {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let store = OneByOne {
        inner: MemoryStore::new(),
        rtt: Duration::from_secs(60),
        slot: Some(Arc::new(EngineSlot::new())),
    };
    let e = Elector::builder(store, "g")
        .candidate_id("a")
        .config(Config::new(Duration::from_secs(10)))
        .clock(clock)
        .start()
        .unwrap();
    let mut ev = e.events();
    let msg = loop {
        if let Some(tenure::Event::StoreHealth { message: Some(m) }) = ev.next().await {
            break m;
        }
    };
    assert!(!msg.contains("0ns"), "health message: {msg}");
}

/// electors on clones of one store share the engine in the store's
/// slot whatever runtime they were built on; an elector built on runtime B
/// joins an engine whose task lives on runtime A, and makes progress only
/// while A is driven.
#[test]
fn engine_shared_across_runtimes() {
    let store = MemoryStore::new();
    let a_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a = a_rt.block_on(async {
        let a = Elector::builder(store.clone(), "a")
            .candidate_id("x")
            .start()
            .unwrap();
        a.wait_for_leadership().await.unwrap();
        a
    });
    // Runtime A is idle now (not dropped, just not driven), as a
    // current-thread runtime is between block_on calls.
    let b_rt = tokio::runtime::Runtime::new().unwrap();
    let elected = b_rt.block_on(async {
        let b = Elector::builder(store.clone(), "b")
            .candidate_id("y")
            .start()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), b.wait_for_leadership())
            .await
            .is_ok()
    });
    drop(a);
    assert!(
        elected,
        "an elector on runtime B never ran: its engine lives on idle runtime A"
    );
}

/// two candidates of one group in one engine.
#[tokio::test(start_paused = true)]
async fn two_candidates_one_group_one_engine() {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let store = MemoryStore::new();
    let mk = |id: &str| {
        Elector::builder(store.clone(), "g")
            .candidate_id(id)
            .config(Config::new(Duration::from_secs(10)))
            .clock(clock.clone())
            .start()
            .unwrap()
    };
    let a = mk("a");
    let b = mk("b");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        [a.is_leader(), b.is_leader()]
            .iter()
            .filter(|x| **x)
            .count(),
        1
    );
    let (leader, other) = if a.is_leader() { (a, b) } else { (b, a) };
    let t0 = clock.now().mono;
    leader.shutdown().await;
    let term = other.wait_for_leadership().await.unwrap();
    let took = clock.now().mono.saturating_since(t0);
    assert!(took < Duration::from_millis(50), "hand-over took {took:?}");
    assert_eq!(term.token(), 2);
    // Drop the new leader's handle mid-term: it releases.
    let t1 = clock.now().mono;
    drop(term);
    drop(other);
    let c = mk("c");
    c.wait_for_leadership().await.unwrap();
    let took = clock.now().mono.saturating_since(t1);
    assert!(
        took < Duration::from_secs(4),
        "after a dropped handle: {took:?}"
    );
}

/// Counts clock reads: a spinning engine reads the clock without bound.
struct Counting(TokioClock, std::sync::atomic::AtomicU64);
impl Clock for Counting {
    fn now(&self) -> tenure::Now {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.now()
    }
    fn sleep_until(&self, deadline: tenure::MonoTime) -> tenure::clock::Sleep {
        self.0.sleep_until(deadline)
    }
}

/// clock reads per simulated minute in awkward steady states.
#[tokio::test(start_paused = true)]
async fn no_spin() {
    use tenure::{Faults, Holder, Metadata, WallTime};
    let counting = Arc::new(Counting(TokioClock::new(), Default::default()));
    let clock: Arc<dyn Clock> = counting.clone();
    let mem = MemoryStore::new();
    // A foreign holder with an absurd term (u64::MAX ms after decoding).
    let g = GroupName::new("huge").unwrap();
    let rec = LeaseRecord {
        holder: Some(Holder {
            id: "z".into(),
            incarnation: 9,
        }),
        token: 3,
        term: Duration::from_millis(u64::MAX),
        renewed_at: WallTime::from_millis(0),
        expires_at: WallTime::from_millis(u64::MAX),
        metadata: Metadata::new(),
    };
    mem.compare_and_swap(&g, None, &rec).await.unwrap();
    let faults = Faults::new();
    let hung = faults.wrap(mem.clone(), "hung");
    faults.partition("hung");
    let cfg = Config::new(Duration::from_secs(10));
    // Every elector here has the same configuration and the counting clock.
    let on = |builder: tenure::ElectorBuilder| builder.config(cfg.clone()).clock(clock.clone());
    let _e1 = on(Elector::builder(mem.clone(), "huge")).start().unwrap();
    let _e2 = on(Elector::builder(hung.clone(), "hung")).start().unwrap();
    let lead = on(Elector::builder(mem.clone(), "steady")).start().unwrap();
    let _follow = on(Elector::builder(mem.clone(), "steady")).start().unwrap();
    let _silent = on(Elector::builder(mem.clone(), "steady"))
        .liveness_timeout(Duration::from_secs(1))
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = counting.1.load(std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let reads = counting.1.load(std::sync::atomic::Ordering::Relaxed) - before;
    eprintln!("clock reads in 60 s: {reads}; leader {}", lead.is_leader());
    assert!(reads < 10_000, "{reads} clock reads in a simulated minute");
}

/// dropping the only handle while its acquire is in flight releases
/// what the acquire wrote.
#[tokio::test(start_paused = true)]
async fn drop_during_acquire() {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let mem = MemoryStore::new();
    let store = OneByOne {
        inner: mem.clone(),
        rtt: Duration::from_millis(100),
        slot: Some(Arc::new(EngineSlot::new())),
    };
    let e = Elector::builder(store.clone(), "g")
        .config(Config::new(Duration::from_secs(10)))
        .clock(clock.clone())
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    drop(e);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let got = mem
        .read(&GroupName::new("g").unwrap())
        .await
        .unwrap()
        .expect("written");
    assert_eq!(got.record.holder, None, "left held: {got:?}");
}
