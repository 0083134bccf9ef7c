//! The elector end to end on the memory store, under tokio's paused clock:
//! every timing assertion is exact, none depends on scheduling luck.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tenure::{
    Clock, Config, ElectorError, EndReason, Event, Faults, GroupName, LeaseStore, LeaseView,
    MemoryStore, Metadata, Observer, Role, Term, TokioClock,
};
use tenure_testkit as testkit;
use tokio::time::Instant;

const TERM: Duration = Duration::from_secs(10);

fn config() -> Config {
    Config::new(TERM)
}

fn start(store: impl LeaseStore, id: &str) -> tenure::Elector {
    start_with(store, id, config())
}

fn start_with(store: impl LeaseStore, id: &str, config: Config) -> tenure::Elector {
    tenure::Elector::builder(store, "jobs")
        .candidate_id(id)
        .config(config)
        .metadata(Metadata::address(format!("{id}:8080")))
        .clock(Arc::new(TokioClock::new()))
        .start()
        .expect("valid config")
}

/// `a` elected, then `b` standing as its follower for a second.
async fn a_leads_then_b_stands() -> (tenure::Elector, tenure::Elector) {
    let store = MemoryStore::new();
    let (a, _, b) = a_leads_then_b_stands_by(|id| start(store.clone(), id)).await;
    (a, b)
}

/// `a` elected (with its term), then `b` standing as its follower for a
/// second, each started by `start`.
async fn a_leads_then_b_stands_by(
    start: impl Fn(&str) -> tenure::Elector,
) -> (tenure::Elector, Term, tenure::Elector) {
    let a = start("a");
    let a_term = a.wait_for_leadership().await.unwrap();
    let b = start("b");
    tokio::time::sleep(Duration::from_secs(1)).await;
    (a, a_term, b)
}

/// Shuts the leader `a` down: `b`'s term, and how long after the shutdown
/// began `b` was elected.
async fn hand_over_on_shutdown(a: &tenure::Elector, b: &tenure::Elector) -> (Term, Duration) {
    let began = Instant::now();
    a.shutdown().await;
    let term = b.wait_for_leadership().await.unwrap();
    (term, began.elapsed())
}

/// One store that each candidate reaches through a node of its own, as
/// separate processes would: `faults` cuts a candidate off by its id.
struct Nodes {
    store: MemoryStore,
    faults: Faults,
}

impl Nodes {
    fn new() -> Nodes {
        Nodes {
            store: MemoryStore::new(),
            faults: Faults::new(),
        }
    }

    /// The store as the candidate `id` reaches it, through its own node.
    fn reach(&self, id: &str) -> tenure::FaultyStore<MemoryStore> {
        self.faults.wrap(self.store.clone(), id)
    }
}

/// The one of `electors` that leads, once one does (the paused clock runs
/// through the election at once; the bound is real time, for a hang).
async fn leader_of(electors: &[&tenure::Elector]) -> usize {
    testkit::scenarios::one_leader(electors, Duration::from_secs(30)).await
}

#[tokio::test(start_paused = true)]
async fn a_lone_candidate_is_elected_with_token_one() {
    let e = start(MemoryStore::new(), "a");
    let mut events = e.events();
    let term = e.wait_for_leadership().await.unwrap();
    assert_eq!(term.token(), 1);
    assert_eq!(term.candidate(), "a");
    assert!(term.remaining() > Duration::from_secs(9));
    assert_eq!(events.next().await, Some(Event::Elected { token: 1 }));
    e.shutdown().await;
    assert!(matches!(e.role(), Role::Stopped));
}

#[tokio::test(start_paused = true)]
async fn exactly_one_of_three_leads_and_the_others_follow_it() {
    let store = MemoryStore::new();
    let es: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|id| start(store.clone(), id))
        .collect();
    let refs: Vec<_> = es.iter().collect();
    let i = leader_of(&refs).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        leader_of(&refs).await,
        i,
        "leadership is stable without faults"
    );
    let leader_id = es[i].candidate_id().to_owned();
    for (j, e) in es.iter().enumerate() {
        if j == i {
            continue;
        }
        match e.role() {
            Role::Follower { leader } => {
                assert_eq!(leader.candidate, leader_id);
                assert_eq!(
                    leader.metadata.get("address"),
                    Some(format!("{leader_id}:8080").as_str())
                );
            }
            other => panic!("{} is {other:?}", e.candidate_id()),
        }
    }
    for e in &es {
        e.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_hands_over_at_once_with_notifications() {
    let (a, b) = a_leads_then_b_stands().await;
    let (term, took) = hand_over_on_shutdown(&a, &b).await;
    assert_eq!(term.token(), 2, "the next term raises the token");
    assert!(took < Duration::from_millis(100), "took {took:?}");
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_hands_over_within_one_poll_without_notifications() {
    let nodes = Nodes::new();
    nodes.faults.set_no_notifications(true);
    let (a, _, b) = a_leads_then_b_stands_by(|id| start(nodes.reach(id), id)).await;
    let (_, took) = hand_over_on_shutdown(&a, &b).await;
    let bound = b.timing().bounds().graceful_failover_polling;
    assert!(took <= bound, "took {took:?}, bound {bound:?}");
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_leader_stops_before_the_challenger_starts() {
    let nodes = Nodes::new();
    let (a, a_term, b) = a_leads_then_b_stands_by(|id| start(nodes.reach(id), id)).await;
    let t_cut = Instant::now();
    nodes.faults.partition("a");

    let a_stopped = {
        let t = a_term.clone();
        tokio::spawn(async move {
            t.cancelled().await;
            Instant::now()
        })
    };
    let a_ended = {
        let t = a_term.clone();
        tokio::spawn(async move {
            t.ended().await;
            Instant::now()
        })
    };
    let b_term = b.wait_for_leadership().await.unwrap();
    let b_elected = Instant::now();
    let a_stopped = a_stopped.await.unwrap();
    let a_ended = a_ended.await.unwrap();
    assert!(a_stopped <= a_ended);
    assert!(
        a_ended < b_elected,
        "a's work ended at {a_ended:?}, b elected at {b_elected:?}"
    );
    let margin = b_elected - a_stopped;
    assert!(margin >= a.timing().stop_grace, "margin {margin:?}");
    assert!(b_term.token() > a_term.token());
    let failover = b_elected - t_cut;
    assert!(
        failover <= b.timing().bounds().crash_failover,
        "failover {failover:?}"
    );
    assert!(!a.is_leader());
    // a keeps standing; once healed it follows b. Its last attempt may still
    // be timing out, then it backs off one poll period: bound by those.
    nodes.faults.heal("a");
    let t = a.timing();
    let bound = t.op_timeout + t.retry_interval + t.retry_jitter + t.op_timeout;
    let mut role = a.watch_role();
    tokio::time::timeout(bound, role.wait_for(|r| matches!(r, Role::Follower { .. })))
        .await
        .expect("a follows b once healed")
        .unwrap();
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn run_while_leader_runs_each_term_and_cancels_it_before_its_deadline() {
    let nodes = Nodes::new();
    let a = start(nodes.reach("a"), "a");
    let runs = Arc::new(AtomicU32::new(0));
    let worker = {
        let a = a.clone();
        let runs = runs.clone();
        tokio::spawn(async move {
            a.run_while_leader(|term| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    term.cancelled().await;
                    // Stopping must happen with time left on the term.
                    assert!(term.remaining() > Duration::ZERO);
                    Ok::<(), ElectorError>(())
                }
            })
            .await
        })
    };
    a.wait_for_leadership().await.unwrap();
    // A partition longer than the term ends the first term...
    nodes.faults.partition("a");
    tokio::time::sleep(TERM * 2).await;
    assert!(!a.is_leader());
    nodes.faults.heal("a");
    // ...and after healing the same candidate leads again: the work runs again.
    let term = a.wait_for_leadership().await.unwrap();
    assert_eq!(term.token(), 2);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    a.shutdown().await;
    worker.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn work_that_ignores_cancellation_is_dropped_at_the_deadline() {
    let nodes = Nodes::new();
    let a = start(nodes.reach("a"), "a");
    let dropped_at = Arc::new(std::sync::Mutex::new(None));
    struct OnDrop(Arc<std::sync::Mutex<Option<Instant>>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = Some(Instant::now());
        }
    }
    let worker = {
        let a = a.clone();
        let dropped_at = dropped_at.clone();
        tokio::spawn(async move {
            a.run_while_leader(|_term| {
                let guard = OnDrop(dropped_at.clone());
                async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                    Ok::<(), ElectorError>(())
                }
            })
            .await
        })
    };
    let term = a.wait_for_leadership().await.unwrap();
    nodes.faults.partition("a");
    term.ended().await;
    let deadline_left = term.remaining();
    assert_eq!(
        deadline_left,
        Duration::ZERO,
        "ended exactly at the deadline"
    );
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        dropped_at.lock().unwrap().is_some(),
        "the work future was dropped"
    );
    nodes.faults.heal("a");
    a.shutdown().await;
    worker.abort();
}

#[tokio::test(start_paused = true)]
async fn work_returning_an_error_resigns_and_reports_it() {
    let store = MemoryStore::new();
    let a = start(store.clone(), "a");
    let b = start(store.clone(), "b");
    let err = a
        .run_while_leader(|_term| async { Err::<(), _>(std::io::Error::other("boom")) })
        .await;
    // Whichever of a and b led first, a's own work failed with its error.
    assert_eq!(err.map_err(|e| e.to_string()), Err("boom".to_owned()));
    // And the term it gave up is over by the time the error is returned,
    // so a caller retrying at once is not handed it again.
    assert!(!a.is_leader(), "the failed term is still in force");
    let refs = [&a, &b];
    leader_of(&refs).await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn resign_hands_over_and_the_resigned_candidate_keeps_standing() {
    let (a, b) = a_leads_then_b_stands().await;
    let mut a_events = a.events();
    a.resign();
    let b_term = b.wait_for_leadership().await.unwrap();
    assert_eq!(b_term.token(), 2);
    assert_eq!(
        a_events.next().await,
        Some(Event::Ousted {
            token: 1,
            reason: EndReason::Resigned
        })
    );
    b.shutdown().await;
    let a_term = a.wait_for_leadership().await.unwrap();
    assert_eq!(a_term.token(), 3, "a stood again and won the next term");
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_held_work_then_releases() {
    let store = MemoryStore::new();
    let a = start(store.clone(), "a");
    let term = a.wait_for_leadership().await.unwrap();
    let guard = term.hold();
    let releaser = tokio::spawn(async move {
        term.cancelled().await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(guard);
        Instant::now()
    });
    let t0 = Instant::now();
    a.shutdown().await;
    let released_work = releaser.await.unwrap();
    assert!(released_work - t0 >= Duration::from_secs(2));
    let record = store
        .read(&GroupName::new("jobs").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.record.holder, None,
        "released after the work drained"
    );
    assert_eq!(
        record.record.token, 1,
        "the token is kept for the next holder to raise"
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_application_loses_leadership_and_regains_it_when_pulsing() {
    let store = MemoryStore::new();
    let mut c = config();
    c.liveness_timeout = Some(Duration::from_secs(3));
    let a = start_with(store.clone(), "a", c);
    let mut events = a.events();
    let t1 = a.wait_for_leadership().await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!a.is_leader(), "no pulse for longer than the timeout");
    assert_eq!(events.next().await, Some(Event::Elected { token: 1 }));
    assert_eq!(
        events.next().await,
        Some(Event::Ousted {
            token: t1.token(),
            reason: EndReason::LivenessLost
        })
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!a.is_leader(), "does not stand while silent");
    a.pulse();
    let t2 = a.wait_for_leadership().await.unwrap();
    assert_eq!(t2.token(), 2);
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn lost_replies_do_not_cost_the_leader_its_term() {
    let nodes = Nodes::new();
    let a = start(nodes.reach("a"), "a");
    let mut events = a.events();
    let term = a.wait_for_leadership().await.unwrap();
    nodes.faults.set_lose_replies(true);
    tokio::time::sleep(Duration::from_secs(4)).await;
    nodes.faults.set_lose_replies(false);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(a.is_leader());
    assert_eq!(
        a.current_term().unwrap().token(),
        term.token(),
        "same term throughout"
    );
    assert_eq!(events.next().await, Some(Event::Elected { token: 1 }));
    // Only store-health events, no term change.
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(1), events.next()).await {
        assert!(matches!(e, Event::StoreHealth { .. }), "{e:?}");
    }
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_corrupt_record_is_reported_and_never_overwritten() {
    let store = MemoryStore::new();
    let group = GroupName::new("jobs").unwrap();
    store.put_raw(&group, b"{\"owner\":\"someone else\"}");
    let a = start(store.clone(), "a");
    let mut events = a.events();
    let health = events.next().await;
    match health {
        Some(Event::StoreHealth { message: Some(m) }) => {
            assert!(m.contains("not a tenure lease"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(TERM * 3).await;
    assert!(!a.is_leader());
    assert_eq!(
        store.get_raw(&group).unwrap(),
        b"{\"owner\":\"someone else\"}"
    );
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn observer_follows_leaders_and_sees_a_crashed_one_lapse() {
    let nodes = Nodes::new();
    let a = start(nodes.reach("a"), "a");
    a.wait_for_leadership().await.unwrap();
    let mut obs = Observer::builder(nodes.store.clone(), "jobs")
        .clock(Arc::new(TokioClock::new()))
        .start()
        .unwrap();
    let leader = obs.wait_for_leader().await.unwrap();
    assert_eq!(leader.candidate, "a");
    assert_eq!(leader.metadata.get("address"), Some("a:8080"));
    nodes.faults.partition("a");
    let t0 = Instant::now();
    let mut watch = obs.watch();
    watch.wait_for(Option::is_none).await.unwrap();
    let lapse = t0.elapsed();
    assert!(
        lapse <= TERM.mul_f64(1.01) + Duration::from_secs(1),
        "{lapse:?}"
    );
    let b = start(nodes.store.clone(), "b");
    let leader = obs.wait_for_leader().await.unwrap();
    assert_eq!(leader.candidate, "b");
    assert_eq!(leader.token, 2);
    b.shutdown().await;
    nodes.faults.heal("a");
    a.shutdown().await;
}

/// A view that can only read: what the CLI's `kafka://` view and other
/// read-only sources are. An observer needs nothing more, and the type
/// need not pretend to write.
struct ReadOnly(MemoryStore);

#[async_trait::async_trait]
impl LeaseView for ReadOnly {
    async fn read(
        &self,
        group: &GroupName,
    ) -> Result<Option<tenure::Versioned>, tenure::StoreError> {
        self.0.read(group).await
    }
    fn describe(&self) -> String {
        "read-only view of memory://".into()
    }
}

#[tokio::test(start_paused = true)]
async fn an_observer_needs_only_a_read_only_view() {
    let store = MemoryStore::new();
    let a = start(store.clone(), "a");
    a.wait_for_leadership().await.unwrap();
    // Without a change feed the view is polled.
    let mut obs = Observer::builder(ReadOnly(store.clone()), "jobs")
        .poll_interval(Duration::from_millis(200))
        .clock(Arc::new(TokioClock::new()))
        .start()
        .unwrap();
    assert_eq!(obs.wait_for_leader().await.unwrap().candidate, "a");
    a.shutdown().await;
    obs.watch().wait_for(Option::is_none).await.unwrap();
    let b = start(store.clone(), "b");
    let leader = obs.wait_for_leader().await.unwrap();
    assert_eq!((leader.candidate.as_str(), leader.token), ("b", 2));
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn periodic_duties_run_only_while_leading() {
    let store = MemoryStore::new();
    let a = start(store.clone(), "a");
    let runs = Arc::new(AtomicU32::new(0));
    let duty = {
        let a = a.clone();
        let runs = runs.clone();
        tokio::spawn(async move {
            a.run_periodic_while_leader(Duration::from_secs(5), |_term| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            })
            .await
        })
    };
    a.wait_for_leadership().await.unwrap();
    tokio::time::sleep(Duration::from_millis(24_900)).await;
    // At once on election, then at 5, 10, 15, 20 s.
    assert_eq!(runs.load(Ordering::SeqCst), 5);
    a.resign();
    let b = start(store.clone(), "b");
    b.wait_for_leadership().await.unwrap();
    let before = runs.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        before,
        "no duty while not leading"
    );
    b.shutdown().await;
    a.shutdown().await;
    duty.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn no_ousted_event_for_a_candidate_that_never_led() {
    let store = MemoryStore::new();
    let a = start(store.clone(), "a");
    a.wait_for_leadership().await.unwrap();
    let b = start(store.clone(), "b");
    let mut events = b.events();
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.shutdown().await;
    b.wait_for_leadership().await.unwrap();
    b.shutdown().await;
    let mut seen = vec![];
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(1), events.next()).await {
        seen.push(e);
    }
    let ousted: Vec<_> = seen
        .iter()
        .filter(|e| matches!(e, Event::Ousted { .. }))
        .collect();
    assert_eq!(
        ousted.len(),
        1,
        "only the term b actually held ended: {seen:?}"
    );
    assert!(matches!(
        seen.first(),
        Some(Event::LeaderChanged { .. } | Event::Elected { .. })
    ));
}

#[tokio::test]
async fn bad_configuration_is_a_typed_error_naming_the_fix() {
    let err = tenure::Elector::builder(MemoryStore::new(), "")
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("group name is empty"), "{err}");
    let err = tenure::Elector::builder(MemoryStore::new(), "g")
        .term(Duration::ZERO)
        .start()
        .unwrap_err();
    assert!(matches!(err, ElectorError::Config(_)), "{err}");
    let err = tenure::Elector::builder(MemoryStore::new(), "g")
        .candidate_id("x".repeat(300))
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("at most 255 bytes"), "{err}");
    let err = tenure::Elector::builder(MemoryStore::new(), "g")
        .metadata(Metadata::new().with("blob", "x".repeat(5000)))
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("metadata"), "{err}");
}

#[test]
fn starting_outside_a_runtime_is_an_error_not_a_panic() {
    let err = tenure::Elector::builder(MemoryStore::new(), "g")
        .start()
        .unwrap_err();
    assert!(matches!(err, ElectorError::NoRuntime));
    let _ = TokioClock::new().now();
}
