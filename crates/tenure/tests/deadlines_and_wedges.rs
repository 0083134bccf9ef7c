//! Hostile schedules for the async shell (driver, publisher, term,
//! elector, observer), each pinned on tokio's paused clock.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::from_now;
use tenure::clock::Sleep;
use tenure::store::{CasOutcome, ChangeFeed};
use tenure::Version;
use tenure::{
    Clock, Config, Coordinator, Elector, ElectorError, EndReason, Event, Fault, Faults, GroupName,
    Holder, LeaseRecord, LeaseStore, LeaseView, MemoryStore, Metadata, MonoTime, Now, Observer,
    Role, Session, StoreError, TokioClock, Versioned, WallTime,
};

const TERM: Duration = Duration::from_secs(10);

fn start(store: impl LeaseStore, id: &str, clock: Arc<dyn Clock>) -> Elector {
    Elector::builder(store, "jobs")
        .candidate_id(id)
        .config(Config::new(TERM))
        .clock(clock)
        .start()
        .expect("valid config")
}

fn held_by(id: &str, token: u64, now: Now) -> LeaseRecord {
    LeaseRecord {
        holder: Some(Holder {
            id: id.into(),
            incarnation: 1,
        }),
        token,
        term: TERM,
        renewed_at: now.wall,
        expires_at: now.wall + TERM,
        metadata: Metadata::address(format!("{id}:1")),
    }
}

/// A memory store whose change feed never answers the subscription.
struct HangingFeed(MemoryStore);

#[async_trait]
impl LeaseView for HangingFeed {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.0.read(group).await
    }
    async fn changes(&self, _group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        std::future::pending().await
    }
    fn describe(&self) -> String {
        "hanging-feed://".into()
    }
}

#[async_trait]
impl LeaseStore for HangingFeed {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        self.0.compare_and_swap(group, expected, record).await
    }
}

/// The driver awaited the change-feed subscription before
/// the machine's first input; a store whose feed hangs delayed every
/// election by the operation timeout (T/4).
#[tokio::test(start_paused = true)]
async fn a_hanging_change_feed_does_not_delay_the_election() {
    let clock = Arc::new(TokioClock::new());
    let began = clock.now().mono;
    let e = start(HangingFeed(MemoryStore::new()), "a", clock.clone());
    e.wait_for_leadership().await.unwrap();
    let took = clock.now().mono.saturating_since(began);
    assert!(
        took < Duration::from_millis(100),
        "elected after {took:?}: the subscription blocked the driver"
    );
    e.shutdown().await;
}

/// A test clock whose monotonic reading can jump ahead, as the boot clock
/// does across a host suspend while tokio's timers stand still.
struct JumpClock {
    inner: TokioClock,
    jumped: AtomicU64,
}

impl JumpClock {
    /// Tokio's paused clock, not jumped yet.
    fn paused() -> Arc<JumpClock> {
        Arc::new(JumpClock {
            inner: TokioClock::new(),
            jumped: AtomicU64::new(0),
        })
    }

    fn jump(&self, by: Duration) {
        self.jumped
            .fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Clock for JumpClock {
    fn now(&self) -> Now {
        let now = self.inner.now();
        let jumped = Duration::from_nanos(self.jumped.load(Ordering::SeqCst));
        Now {
            mono: now.mono + jumped,
            wall: now.wall + jumped,
        }
    }
    fn sleep_until(&self, deadline: MonoTime) -> Sleep {
        let jumped = Duration::from_nanos(self.jumped.load(Ordering::SeqCst));
        self.inner.sleep_until(deadline - jumped)
    }
}

/// Right after a resume, before the driver ticks, the role
/// still holds a term that is past its deadline but not yet cancelled;
/// `wait_for_leadership` handed it out as if it were valid.
#[tokio::test(start_paused = true)]
async fn a_term_past_its_deadline_is_not_handed_out() {
    let clock = JumpClock::paused();
    let e = start(MemoryStore::new(), "a", clock.clone());
    let term = e.wait_for_leadership().await.unwrap();
    // The host sleeps through the term; nothing has run since.
    clock.jump(TERM * 2);
    assert!(!term.is_cancelled(), "the driver has not ticked yet");
    let waited = tokio::time::timeout(Duration::ZERO, e.wait_for_leadership()).await;
    assert!(
        waited.is_err(),
        "handed out a term past its deadline: {waited:?}"
    );
    assert!(!e.is_leader());
    e.shutdown().await;
}

/// A coordinator that elects once and then never renews or ends the term:
/// a backend that has wedged.
struct Wedged;

#[async_trait]
impl Coordinator for Wedged {
    async fn run(self: Box<Self>, mut session: Session) {
        session.elected(1, from_now(&session, Duration::from_secs(5)));
        loop {
            if session.command().await == tenure::Command::Shutdown {
                return;
            }
        }
    }
}

/// An elector on a [`Wedged`] backend, on tokio's paused clock.
fn wedged() -> (Arc<TokioClock>, Elector) {
    let clock = Arc::new(TokioClock::new());
    let e = Elector::with_coordinator(Wedged, "jobs")
        .clock(clock.clone())
        .start()
        .unwrap();
    (clock, e)
}

/// `run_while_leader` dropped work that ignores cancellation
/// only when the backend ended the term; a wedged backend left it running
/// past the deadline. The work now races the deadline itself.
#[tokio::test(start_paused = true)]
async fn work_is_dropped_at_the_deadline_even_if_the_backend_wedges() {
    let (clock, e) = wedged();
    let began = clock.now().mono;
    let stopper = e.clone();
    let ran = tokio::spawn(async move {
        stopper
            .run_while_leader(|term| async move {
                // Ignores term.cancelled() entirely.
                let _ = term;
                std::future::pending::<Result<(), std::io::Error>>().await
            })
            .await
    });
    tokio::time::sleep(Duration::from_secs(6)).await;
    // The work was dropped at 5 s; run_while_leader now waits for a term.
    assert!(!ran.is_finished(), "still campaigning");
    let dropped_by = clock.now().mono.saturating_since(began);
    assert!(dropped_by >= Duration::from_secs(5));
    assert!(!e.is_leader(), "a term past its deadline is not leadership");
    e.shutdown().await;
    let _ = ran.await;
}

/// Work that records when it was dropped.
struct DropAt(Arc<AtomicU64>, Arc<TokioClock>);

impl Drop for DropAt {
    fn drop(&mut self) {
        self.0.store(self.1.now().mono.as_nanos(), Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn wedged_backend_work_is_dropped_exactly_at_the_deadline() {
    let (clock, e) = wedged();
    let dropped = Arc::new(AtomicU64::new(0));
    let (d, c) = (dropped.clone(), clock.clone());
    let runner = e.clone();
    let began = clock.now().mono;
    tokio::spawn(async move {
        runner
            .run_while_leader(move |_term| {
                let guard = DropAt(d.clone(), c.clone());
                async move {
                    let _guard = guard;
                    std::future::pending::<Result<(), std::io::Error>>().await
                }
            })
            .await
    });
    tokio::time::sleep(Duration::from_secs(8)).await;
    let at = MonoTime::from_nanos(dropped.load(Ordering::SeqCst));
    assert_eq!(at.saturating_since(began), Duration::from_secs(5));
    e.shutdown().await;
}

/// A backend reporting a second election replaced the term
/// in force without ending it: its work was never told to stop.
#[tokio::test(start_paused = true)]
async fn a_second_election_ends_the_first_term() {
    struct Twice;
    #[async_trait]
    impl Coordinator for Twice {
        async fn run(self: Box<Self>, mut session: Session) {
            let deadline = from_now(&session, Duration::from_secs(60));
            session.elected(1, deadline);
            tokio::time::sleep(Duration::from_secs(1)).await;
            session.elected(2, deadline);
            while session.command().await != tenure::Command::Shutdown {}
        }
    }
    let e = Elector::with_coordinator(Twice, "jobs")
        .clock(Arc::new(TokioClock::new()))
        .start()
        .unwrap();
    let first = e.wait_for_leadership().await.unwrap();
    assert_eq!(first.token(), 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(first.is_cancelled(), "the first term was never ended");
    assert_eq!(e.current_term().map(|t| t.token()), Some(2));
    e.shutdown().await;
}

/// `StoreHealth` fired on every retry, because a timeout's
/// message names a duration that differs between retries.
#[tokio::test(start_paused = true)]
async fn store_health_fires_once_per_kind_of_failure() {
    let store = MemoryStore::new();
    let faults = Faults::new();
    let e = start(faults.wrap(store, "a"), "a", Arc::new(TokioClock::new()));
    let mut events = e.events();
    e.wait_for_leadership().await.unwrap();
    faults.partition("a");
    // Renewals time out again and again until the term ends.
    tokio::time::sleep(TERM * 3).await;
    faults.heal("a");
    tokio::time::sleep(TERM).await;
    let mut health = vec![];
    while let Ok(Some(event)) = tokio::time::timeout(Duration::ZERO, events.next()).await {
        if let Event::StoreHealth { message } = event {
            health.push(message.is_some());
        }
    }
    assert_eq!(health, vec![true, false], "one failure event, one recovery");
    e.shutdown().await;
}

/// End to end: a record whose token cannot rise any more
/// stops the candidate with a typed error instead of spinning.
#[tokio::test(start_paused = true)]
async fn a_maxed_token_stops_the_elector_with_a_typed_error() {
    let store = MemoryStore::new();
    let clock = Arc::new(TokioClock::new());
    let group = GroupName::new("jobs").unwrap();
    let maxed = held_by("x", u64::MAX, clock.now());
    store.compare_and_swap(&group, None, &maxed).await.unwrap();
    let e = start(store, "a", clock.clone());
    let mut events = e.events();
    let err = e.wait_for_leadership().await.unwrap_err();
    assert!(
        matches!(
            err,
            ElectorError::Failed(Fault::TokenExhausted { token: u64::MAX })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("needs a new name"), "{err}");
    assert!(matches!(e.role(), Role::Stopped));
    let mut saw = false;
    while let Ok(Some(event)) = tokio::time::timeout(Duration::ZERO, events.next()).await {
        saw |= matches!(event, Event::Failed { .. });
    }
    assert!(saw, "no Failed event");
}

/// A memory store holding `jobs` as `x` wrote it now (token 3) before
/// going silent, and the clock it was written by.
async fn a_silent_leaders_record() -> (MemoryStore, Arc<TokioClock>) {
    let store = MemoryStore::new();
    let clock = Arc::new(TokioClock::new());
    let group = GroupName::new("jobs").unwrap();
    let record = held_by("x", 3, clock.now());
    store.compare_and_swap(&group, None, &record).await.unwrap();
    (store, clock)
}

/// The observer read the clock *before* the read and called
/// that the first sight of the record, so with a slow store it declared a
/// silent leader gone one read latency early.
#[tokio::test(start_paused = true)]
async fn the_observer_counts_a_lapse_from_the_reply() {
    let (store, clock) = a_silent_leaders_record().await;
    let faults = Faults::new();
    faults.set_latency(Duration::from_secs(1));
    let began = clock.now().mono;
    let observer = Observer::builder(faults.wrap(store, "obs"), "jobs")
        .poll_interval(Duration::from_secs(60))
        .clock(clock.clone())
        .start()
        .unwrap();
    // First reply at 1 s; lapse at 1 s + 10.1 s.
    tokio::time::sleep(Duration::from_millis(10_900)).await;
    assert!(
        observer.leader().is_some(),
        "lapsed early, at {:?}",
        clock.now().mono.saturating_since(began)
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(observer.leader().is_none());
}

/// Reads had no timeout, so an observer whose read hung kept
/// reporting a leader that had died, for ever.
#[tokio::test(start_paused = true)]
async fn an_observer_whose_reads_hang_still_sees_a_silent_leader_lapse() {
    let (store, clock) = a_silent_leaders_record().await;
    let faults = Faults::new();
    let mut observer = Observer::builder(faults.wrap(store, "obs"), "jobs")
        .poll_interval(Duration::from_secs(1))
        .clock(clock.clone())
        .start()
        .unwrap();
    assert!(observer.wait_for_leader().await.is_some());
    faults.partition("obs");
    tokio::time::sleep(TERM * 2).await;
    assert!(
        observer.leader().is_none(),
        "a dead leader is still reported while reads hang"
    );
}

#[test]
fn wall_time_rounds_durations_up() {
    let t = WallTime::from_millis(1_000) + Duration::from_micros(1_500);
    assert_eq!(t.as_millis(), 1_002);
    let _ = EndReason::Failed;
}

/// A leader whose process slept through its term (nothing has run since) is
/// unhealthy until its term is ended: what a liveness probe must see.
#[tokio::test(start_paused = true)]
async fn a_leader_past_its_deadline_is_unhealthy() {
    let clock = JumpClock::paused();
    let e = start(MemoryStore::new(), "a", clock.clone());
    e.wait_for_leadership().await.unwrap();
    assert!(e.health().is_healthy());
    clock.jump(TERM * 2);
    let health = e.health();
    assert!(!health.is_healthy(), "{health:?}");
    e.shutdown().await;
}
