//! What an elector offers besides the lease, as users of election
//! libraries ask for it, on tokio's paused clock: hand-over to a named
//! candidate, bounded waits, live metadata, health, duties whose period
//! holds across leaders, errors that reach the caller.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::store::CasOutcome;
use tenure::{
    Clock, Config, Elector, ElectorError, EndReason, Event, Fault, GroupName, Health, Holder,
    LeaseRecord, LeaseStore, LeaseView, MemoryStore, Metadata, Observer, Periodic, Role, Term,
    TokioClock,
};

const TERM: Duration = Duration::from_secs(10);

/// The `jobs` group on a fresh memory store, on tokio's (paused) clock.
struct Jobs {
    clock: Arc<TokioClock>,
    store: MemoryStore,
    /// Every candidate started here, for `shutdown` to stop.
    started: Mutex<Vec<Elector>>,
}

impl Jobs {
    fn new() -> Jobs {
        Jobs {
            clock: Arc::new(TokioClock::new()),
            store: MemoryStore::new(),
            started: Mutex::new(Vec::new()),
        }
    }

    /// A candidate named `id`, publishing `id:1` as its address.
    fn candidate(&self, id: &str) -> Elector {
        let e = candidate(&self.store, id, &self.clock);
        self.started.lock().unwrap().push(e.clone());
        e
    }

    /// Stops every candidate started here (so far), in the order they
    /// started; one already stopped returns at once.
    async fn shutdown(&self) {
        let started = std::mem::take(&mut *self.started.lock().unwrap());
        for e in started {
            e.shutdown().await;
        }
    }

    /// `a` elected, with its first term, and `b` standing.
    async fn a_leads_b_stands(&self) -> (Elector, Term, Elector) {
        let a = self.candidate("a");
        let first = a.wait_for_leadership().await.unwrap();
        let b = self.candidate("b");
        (a, first, b)
    }

    /// `a` elected, and `b` following it a second later.
    async fn a_leads_b_follows(&self) -> (Elector, Elector) {
        let (a, _, b) = self.a_leads_b_stands().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        (a, b)
    }

    /// Writes the `jobs` record as `change` leaves it, over the version it
    /// has: what `tenure release --to`, or any writer other than the
    /// candidates, does to the record.
    async fn rewrite(&self, change: impl FnOnce(&mut LeaseRecord)) {
        let group = GroupName::new("jobs").unwrap();
        let current = self.store.read(&group).await.unwrap().unwrap();
        let mut record = current.record;
        change(&mut record);
        let outcome = self
            .store
            .compare_and_swap(&group, Some(current.version), &record)
            .await
            .unwrap();
        assert!(matches!(outcome, CasOutcome::Applied(_)), "{outcome:?}");
    }
}

fn candidate(store: &MemoryStore, id: &str, clock: &Arc<TokioClock>) -> Elector {
    Elector::builder(store.clone(), "jobs")
        .candidate_id(id)
        .config(Config::new(TERM))
        .metadata(Metadata::address(format!("{id}:1")))
        .clock(clock.clone())
        .start()
        .expect("valid")
}

#[tokio::test(start_paused = true)]
async fn transfer_hands_over_to_the_named_candidate_only() {
    let jobs = Jobs::new();
    let (a, first, b) = jobs.a_leads_b_stands().await;
    let c = jobs.candidate("c");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut events = a.events();
    let began = jobs.clock.now().mono;
    a.transfer_to("c").unwrap();
    let term = c.wait_for_leadership().await.unwrap();
    let took = jobs.clock.now().mono.saturating_since(began);
    assert!(took < Duration::from_millis(100), "took {took:?}");
    assert_eq!(term.token(), first.token() + 1);
    assert!(!b.is_leader() && !a.is_leader());
    assert!(first.is_cancelled());
    assert_eq!(
        events.next().await,
        Some(Event::Ousted {
            token: first.token(),
            reason: EndReason::Transferred { to: "c".into() }
        })
    );
    // Anyone but the leader cannot hand over: nothing happens.
    b.transfer_to("a").unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(c.is_leader());
    jobs.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_reservation_for_a_missing_successor_lapses_after_a_term() {
    let jobs = Jobs::new();
    let (a, b) = jobs.a_leads_b_follows().await;
    let began = jobs.clock.now().mono;
    a.transfer_to("nobody").unwrap();
    let term = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(t) = a.current_term().or_else(|| b.current_term()) {
            break t;
        }
    };
    let took = jobs.clock.now().mono.saturating_since(began);
    let wait = Config::new(TERM).validate().unwrap().takeover_wait(TERM);
    assert!(
        took >= wait,
        "the reservation was taken after {took:?} by {}",
        term.candidate()
    );
    jobs.shutdown().await;
}

/// `tenure release --to` writes the request into the leader's record,
/// keeping holder and token; the leader honours it at its next look.
#[tokio::test(start_paused = true)]
async fn a_transfer_request_in_the_record_is_honoured() {
    let jobs = Jobs::new();
    let (_a, b) = jobs.a_leads_b_follows().await;
    jobs.rewrite(|record| record.metadata.insert(tenure::record::TRANSFER_TO_KEY, "b"))
        .await;
    let term = b.wait_for_leadership().await.unwrap();
    assert_eq!(term.token(), 2);
    jobs.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn bounded_waits() {
    let jobs = Jobs::new();
    let a = jobs.candidate("a");
    assert!(
        a.try_acquire().await.unwrap().is_some(),
        "a free lease is taken"
    );
    let b = jobs.candidate("b");
    assert!(
        b.try_acquire().await.unwrap().is_none(),
        "a held one is not"
    );
    let err = b
        .wait_for_leadership_within(Duration::from_secs(3))
        .await
        .unwrap_err();
    assert!(matches!(err, ElectorError::NotLeader { .. }), "{err}");
    a.shutdown().await;
    let term = b
        .wait_for_leadership_within(Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(term.token(), 2);
    jobs.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn new_metadata_reaches_followers_and_observers_at_once() {
    let jobs = Jobs::new();
    let (a, _, b) = jobs.a_leads_b_stands().await;
    let mut observer = Observer::builder(jobs.store.clone(), "jobs")
        .clock(jobs.clock.clone())
        .start()
        .unwrap();
    observer.wait_for_leader().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    a.set_metadata(Metadata::address("moved:2")).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    match b.role() {
        Role::Follower { leader } => assert_eq!(leader.metadata.get("address"), Some("moved:2")),
        other => panic!("b is {other:?}"),
    }
    let seen = observer.leader().unwrap();
    assert_eq!(seen.metadata.get("address"), Some("moved:2"));
    let err = a
        .set_metadata(Metadata::new().with("tenure.mine", "x"))
        .unwrap_err();
    assert!(err.to_string().contains("tenure."), "{err}");
    jobs.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn health_is_bad_only_for_a_wedged_leader_or_a_fault() {
    let jobs = Jobs::new();
    let a = jobs.candidate("a");
    a.wait_for_leadership().await.unwrap();
    assert_eq!(a.health(), Health::Healthy);
    a.shutdown().await;
    assert_eq!(a.health(), Health::Healthy, "stopped on request");

    // A fault: a token that cannot rise.
    jobs.rewrite(|record| {
        record.holder = Some(Holder {
            id: "x".into(),
            incarnation: 1,
        });
        record.token = u64::MAX;
    })
    .await;
    let b = jobs.candidate("b");
    let err = b
        .run_while_leader(|_term| async { Ok::<(), ElectorError>(()) })
        .await
        .unwrap_err();
    assert!(
        matches!(err, ElectorError::Failed(Fault::TokenExhausted { .. })),
        "run_while_leader ends with the fault: {err}"
    );
    assert!(!b.health().is_healthy());
}

#[tokio::test(start_paused = true)]
async fn a_duty_keeps_its_period_across_leaders() {
    let jobs = Jobs::new();
    let period = Duration::from_secs(60);
    let runs = Arc::new(AtomicU32::new(0));
    let spawn_duty = |e: Elector, periodic: Periodic| {
        let runs = runs.clone();
        tokio::spawn(async move {
            e.run_periodic(periodic, move |_term| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
        })
    };
    let a = jobs.candidate("a");
    let b = jobs.candidate("b");
    let da = spawn_duty(a.clone(), Periodic::every(period));
    let db = spawn_duty(b.clone(), Periodic::every(period));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the first leader runs at once"
    );
    // The leader flaps: hand-over after 5 s, then back after 5 s more.
    let (leader, other) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    tokio::time::sleep(Duration::from_secs(4)).await;
    leader.resign();
    other.wait_for_leadership().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a new leader waits out the period since the last run"
    );
    tokio::time::sleep(period).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2, "and runs when it is due");
    jobs.shutdown().await;
    da.await.unwrap().unwrap();
    db.await.unwrap().unwrap();

    // Opting out, on the same store (whose record says when the duty last
    // ran): every new term runs at once.
    runs.store(0, Ordering::SeqCst);
    let a = jobs.candidate("a");
    let da = spawn_duty(a.clone(), Periodic::every(period).at_every_new_term());
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.resign();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    jobs.shutdown().await;
    da.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_last_run_stamped_far_ahead_by_a_fast_clock_does_not_hold_the_duty_back() {
    let jobs = Jobs::new();
    // A released lease whose last leader's wall clock ran two hours ahead:
    // its duty's last run is stamped in this clock's future.
    let now = jobs.clock.now().wall;
    let ahead = now + Duration::from_secs(7200);
    let released = LeaseRecord {
        holder: None,
        token: 1,
        term: TERM,
        renewed_at: ahead,
        expires_at: now,
        metadata: Metadata::new().with("tenure.duty.default", ahead.as_millis().to_string()),
    };
    let group = GroupName::new("jobs").unwrap();
    let planted = jobs.store.compare_and_swap(&group, None, &released).await;
    assert!(matches!(planted, Ok(CasOutcome::Applied(_))));
    let runs = Arc::new(AtomicU32::new(0));
    let a = jobs.candidate("a");
    let counted = runs.clone();
    let duty = tokio::spawn(async move {
        a.run_periodic(Periodic::every(Duration::from_secs(60)), move |_term| {
            let runs = counted.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<(), std::io::Error>(())
            }
        })
        .await
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "runs at once, not in two hours"
    );
    jobs.shutdown().await;
    duty.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_duty_is_an_event() {
    let jobs = Jobs::new();
    let a = jobs.candidate("a");
    let mut events = a.events();
    let runner = a.clone();
    let duty = tokio::spawn(async move {
        runner
            .run_periodic_while_leader(Duration::from_secs(1), |_term| async {
                Err::<(), _>("the cache is down")
            })
            .await
    });
    let failed = loop {
        if let Some(Event::DutyFailed { error, .. }) = events.next().await {
            break error;
        }
    };
    assert_eq!(failed, "the cache is down");
    jobs.shutdown().await;
    duty.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn liveness_says_how_long_the_application_may_go_without_pulsing() {
    let clock = Arc::new(TokioClock::new());
    let e = Elector::builder(MemoryStore::new(), "jobs")
        .liveness_timeout(Duration::from_secs(5))
        .clock(clock.clone())
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let l = e.liveness().expect("a liveness timeout is set");
    assert_eq!(l.since_last_pulse, Duration::from_secs(2));
    assert_eq!(l.lost_in, Duration::from_secs(3));
    e.pulse();
    assert_eq!(e.liveness().unwrap().lost_in, Duration::from_secs(5));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(e.liveness().unwrap().is_lost());
    let plain = candidate(&MemoryStore::new(), "x", &clock);
    assert_eq!(plain.liveness(), None);
    e.shutdown().await;
    plain.shutdown().await;
}
