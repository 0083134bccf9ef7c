//! Candidate priority and preemption, on tokio's paused clock: the
//! preferred candidate leads one delay after it starts; lower and equal
//! priorities never preempt; a flapping candidate never takes over; a
//! request is a hint the leader checks against its own priority.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::record::{TRANSFER_PRIORITY_KEY, TRANSFER_TO_KEY};
use tenure::{
    Clock, Elector, Event, GroupName, LeaseStore, LeaseView, MemoryStore, MonoTime, TokioClock,
};

const TERM: Duration = Duration::from_secs(10);
const DELAY: Duration = Duration::from_secs(15);

/// A term: its token, its candidate, when it began and when it ended.
type TermSpan = (u64, String, MonoTime, Option<MonoTime>);

struct Group {
    clock: Arc<TokioClock>,
    store: MemoryStore,
    /// Every term begun, as (token, candidate, began, ended) on the
    /// paused clock; `ended` set when its term ends.
    terms: Arc<Mutex<Vec<TermSpan>>>,
}

impl Group {
    fn new() -> Group {
        Group {
            clock: Arc::new(TokioClock::new()),
            store: MemoryStore::new(),
            terms: Arc::default(),
        }
    }

    /// A candidate `id`, with `priority` if given, its terms recorded.
    fn candidate(&self, id: &str, priority: Option<u32>) -> Elector {
        self.candidate_with(id, |b| match priority {
            Some(p) => b.priority(p),
            None => b,
        })
    }

    /// A candidate `id` as `configure` makes it (from a builder with the
    /// term and the preemption delay set), its terms recorded.
    fn candidate_with(
        &self,
        id: &str,
        configure: impl FnOnce(tenure::ElectorBuilder) -> tenure::ElectorBuilder,
    ) -> Elector {
        self.candidate_on(self.store.clone(), id, configure)
    }

    /// The same, on a store handle of its own (one with faults, say).
    fn candidate_on(
        &self,
        store: impl LeaseStore,
        id: &str,
        configure: impl FnOnce(tenure::ElectorBuilder) -> tenure::ElectorBuilder,
    ) -> Elector {
        let b = Elector::builder(store, "jobs")
            .candidate_id(id)
            .term(TERM)
            .preempt_after(DELAY)
            .clock(self.clock.clone());
        let e = configure(b).start().expect("valid");
        let mut events = e.events();
        let (terms, clock, id) = (self.terms.clone(), self.clock.clone(), id.to_owned());
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let now = clock.now().mono;
                match event {
                    Event::Elected { token } => {
                        terms.lock().unwrap().push((token, id.clone(), now, None));
                    }
                    Event::Ousted { token, .. } => {
                        for t in terms.lock().unwrap().iter_mut() {
                            if t.0 == token && t.3.is_none() {
                                t.3 = Some(now);
                            }
                        }
                    }
                    _ => {}
                }
            }
        });
        e
    }

    /// Who leads now, by the store.
    async fn holder(&self) -> Option<(String, u64)> {
        let v = self
            .store
            .read(&GroupName::new("jobs").unwrap())
            .await
            .unwrap()?;
        Some((v.record.holder_id()?.to_owned(), v.record.token))
    }

    /// Checks that terms never overlap and tokens rise.
    fn check_terms(&self) {
        let terms = self.terms.lock().unwrap().clone();
        for pair in terms.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(b.0 > a.0, "tokens did not rise: {terms:?}");
            let ended =
                a.3.unwrap_or_else(|| panic!("term {a:?} never ended: {terms:?}"));
            assert!(ended <= b.2, "terms overlap: {a:?} and {b:?}");
        }
    }

    fn leaders(&self) -> Vec<String> {
        self.terms
            .lock()
            .unwrap()
            .iter()
            .map(|t| t.1.clone())
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_higher_priority_candidate_leads_one_delay_after_it_starts_and_keeps_leading() {
    let g = Group::new();
    let a = g.candidate("a", None);
    a.wait_for_leadership().await.unwrap();
    let started = g.clock.now().mono;
    let b = g.candidate("b", Some(5));
    let term = tokio::time::timeout(DELAY + TERM * 3, b.wait_for_leadership())
        .await
        .expect("b, of higher priority, never led")
        .unwrap();
    let took = g.clock.now().mono.saturating_since(started);
    assert!(term.token() > 1);
    // The delay, then the leader's next look (a third of a term), its
    // drain and the reserved release.
    assert!(
        took >= DELAY && took <= DELAY + TERM,
        "took {took:?} from b's start"
    );
    // No oscillation: a (priority 0) never asks back.
    tokio::time::sleep(TERM * 20).await;
    assert_eq!(g.holder().await.map(|h| h.0).as_deref(), Some("b"));
    assert_eq!(g.leaders(), ["a", "b"]);
    g.check_terms();
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn lower_and_equal_priorities_never_preempt() {
    let g = Group::new();
    let a = g.candidate("a", Some(5));
    a.wait_for_leadership().await.unwrap();
    let b = g.candidate("b", Some(5));
    let c = g.candidate("c", Some(3));
    let d = g.candidate("d", None);
    tokio::time::sleep(TERM * 20).await;
    assert_eq!(g.leaders(), ["a"]);
    assert_eq!(g.holder().await, Some(("a".to_owned(), 1)));
    for e in [a, b, c, d] {
        e.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_highest_of_several_leads_once_and_stays() {
    let g = Group::new();
    let a = g.candidate("a", Some(1));
    a.wait_for_leadership().await.unwrap();
    let b = g.candidate("b", Some(2));
    let c = g.candidate("c", Some(3));
    tokio::time::sleep(TERM * 20).await;
    let leaders = g.leaders();
    assert_eq!(leaders.last().map(String::as_str), Some("c"), "{leaders:?}");
    // At most a then b then c: each move is to a higher priority.
    assert!(leaders.len() <= 3, "{leaders:?}");
    tokio::time::sleep(TERM * 20).await;
    assert_eq!(g.leaders(), leaders, "leadership moved again");
    g.check_terms();
    for e in [a, b, c] {
        e.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_flapping_candidate_never_takes_over() {
    let g = Group::new();
    let a = g.candidate("a", None);
    a.wait_for_leadership().await.unwrap();
    // Up for less than the delay, then gone, again and again.
    for _ in 0..10 {
        let b = g.candidate("b", Some(9));
        tokio::time::sleep(DELAY / 2).await;
        b.shutdown().await;
        tokio::time::sleep(TERM).await;
    }
    assert_eq!(g.leaders(), ["a"]);
    assert_eq!(g.holder().await, Some(("a".to_owned(), 1)));
    a.shutdown().await;
}

/// Writes a request into the leader's record by hand, keeping holder and
/// token (as a candidate, or a forger with write access, would).
async fn request(g: &Group, to: &str, priority: &str) {
    let group = GroupName::new("jobs").unwrap();
    loop {
        let v = g.store.read(&group).await.unwrap().expect("a record");
        let mut r = v.record.clone();
        r.metadata.insert(TRANSFER_TO_KEY, to);
        r.metadata.insert(TRANSFER_PRIORITY_KEY, priority);
        if let tenure::store::CasOutcome::Applied(_) = g
            .store
            .compare_and_swap(&group, Some(v.version), &r)
            .await
            .unwrap()
        {
            return;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_is_a_hint_the_leader_checks_against_its_own_priority() {
    let g = Group::new();
    let a = g.candidate("a", Some(7));
    a.wait_for_leadership().await.unwrap();
    let b = g.candidate("b", None);
    tokio::time::sleep(TERM).await;
    // Forged or stale: a priority not above the leader's, or no number.
    for asked in ["7", "3", "0", "lots", "-1", "99999999999999999999"] {
        request(&g, "b", asked).await;
        tokio::time::sleep(TERM * 2).await;
        assert_eq!(
            g.holder().await,
            Some(("a".to_owned(), 1)),
            "a request of priority {asked:?} ended the term"
        );
        // The leader's next renewal wrote its own record: no request left.
        let v = g
            .store
            .read(&GroupName::new("jobs").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(v.record.transfer_to().is_none(), "{v:?}");
    }
    // Above the leader's: honoured, through the transfer path.
    request(&g, "b", "8").await;
    let term = tokio::time::timeout(TERM * 2, b.wait_for_leadership())
        .await
        .expect("a request above the leader's priority was not honoured")
        .unwrap();
    assert_eq!(term.token(), 2);
    g.check_terms();
    a.shutdown().await;
    b.shutdown().await;
}

/// A coordinator that never decides anything.
struct Idle;

#[async_trait::async_trait]
impl tenure::Coordinator for Idle {
    async fn run(self: Box<Self>, _session: tenure::Session) {}
}

#[tokio::test(start_paused = true)]
async fn a_priority_with_a_coordinator_is_refused() {
    let err = Elector::with_coordinator(Idle, "jobs")
        .priority(3)
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("priority"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_zero_delay_asks_at_once() {
    let g = Group::new();
    let a = g.candidate("a", None);
    a.wait_for_leadership().await.unwrap();
    let b = g.candidate_with("b", |b| b.priority(9).preempt_after(Duration::ZERO));
    let started = g.clock.now().mono;
    tokio::time::timeout(TERM * 2, b.wait_for_leadership())
        .await
        .expect("b never led")
        .unwrap();
    assert!(g.clock.now().mono.saturating_since(started) <= TERM);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_that_cannot_be_written_is_no_busy_loop() {
    let g = Group::new();
    // The leader's metadata leaves no room for a request in its record.
    let big = "x".repeat(tenure::record::MAX_METADATA_BYTES - 40);
    let a = g.candidate_with("a", |b| {
        b.metadata(tenure::Metadata::new().with("blob", big))
    });
    a.wait_for_leadership().await.unwrap();
    let b = g.candidate_with("b", |b| b.priority(9).preempt_after(Duration::ZERO));
    // A task asking in a loop would starve the paused clock's timers.
    tokio::time::timeout(TERM * 30, tokio::time::sleep(TERM * 10))
        .await
        .expect("time stood still: something spins");
    assert_eq!(g.holder().await, Some(("a".to_owned(), 1)));
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_candidate_whose_liveness_lapsed_does_not_ask() {
    let g = Group::new();
    let a = g.candidate("a", None);
    a.wait_for_leadership().await.unwrap();
    // b never pulses: it could not take the lease, so it must not make a
    // hand it over (to wait out a reservation nobody takes, again and
    // again).
    let b = g.candidate_with("b", |b| {
        b.priority(9).liveness_timeout(Duration::from_secs(5))
    });
    tokio::time::sleep(TERM * 20).await;
    assert_eq!(g.holder().await, Some(("a".to_owned(), 1)));
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_into_a_dead_leaders_record_does_not_delay_the_takeover() {
    let g = Group::new();
    let faults = tenure::Faults::new();
    let a = g.candidate_on(faults.wrap(g.store.clone(), "a"), "a", |b| b);
    a.wait_for_leadership().await.unwrap();
    let b = g.candidate("b", Some(9));
    let wait = tenure::Config::new(TERM)
        .validate()
        .unwrap()
        .takeover_wait(TERM);
    // a dies just before b asks, so that b's request (after its look for
    // a renewal) would land in a record nobody renews, before the
    // takeover.
    tokio::time::sleep(DELAY.saturating_sub(Duration::from_millis(500))).await;
    faults.partition("a");
    let cut = g.clock.now().mono;
    tokio::time::timeout(wait + TERM, b.wait_for_leadership())
        .await
        .expect("b never led")
        .unwrap();
    let took = g.clock.now().mono.saturating_since(cut);
    assert!(
        took <= wait + TERM / 3 + Duration::from_secs(1),
        "the takeover took {took:?} after the leader died (a takeover wait is {wait:?})"
    );
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_candidate_that_stops_withdraws_its_request() {
    let g = Group::new();
    // a polls (no change feed), so it sees a request only at its next
    // renewal: b stops before that.
    let faults = tenure::Faults::new();
    faults.set_no_notifications(true);
    let a = g.candidate_on(faults.wrap(g.store.clone(), "a"), "a", |b| b);
    a.wait_for_leadership().await.unwrap();
    let b = g.candidate("b", Some(9));
    let group = GroupName::new("jobs").unwrap();
    loop {
        let v = g.store.read(&group).await.unwrap().unwrap();
        if v.record.transfer_to() == Some("b") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    b.shutdown().await;
    tokio::time::sleep(TERM * 3).await;
    // Without the withdrawal a hands over to b, gone, and the lease waits
    // out its reservation with no leader.
    assert_eq!(g.holder().await, Some(("a".to_owned(), 1)));
    assert_eq!(g.leaders(), ["a"]);
    a.shutdown().await;
}

/// Issue 39, schedule 3: a chain of priorities under a dead leader. `a`
/// (no priority) dies just after a renewal that falls inside the first
/// candidate's look; candidates of priority 5, 9 and 12 started a few
/// seconds apart look in turn. Each must see that the record was not
/// renewed (another candidate's request is no renewal), and no request
/// may restart the others' takeover wait: the first takeover comes within
/// the documented crash fail-over bound of the last real renewal, whatever
/// the number of priority levels.
#[tokio::test(start_paused = true)]
async fn a_chain_of_priorities_under_a_dead_leader_keeps_the_crash_failover_bound() {
    let g = Group::new();
    let faults = tenure::Faults::new();
    let a = g.candidate_on(faults.wrap(g.store.clone(), "a"), "a", |b| b);
    a.wait_for_leadership().await.unwrap();
    let started = g.clock.now().mono;
    let mut others = Vec::new();
    for (id, priority) in [("p5", 5), ("p9", 9), ("p12", 12)] {
        others.push(g.candidate(id, Some(priority)));
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    // The first look begins a delay after p5 started: a dies just after
    // its first renewal from then on.
    let group = GroupName::new("jobs").unwrap();
    let first_look = started + DELAY;
    let mut seen = g
        .store
        .read(&group)
        .await
        .unwrap()
        .unwrap()
        .record
        .renewed_at;
    let renewed = loop {
        let v = g.store.read(&group).await.unwrap().unwrap();
        if v.record.renewed_at != seen {
            if g.clock.now().mono >= first_look {
                break g.clock.now().mono;
            }
            seen = v.record.renewed_at;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    faults.partition("a");
    let bound = tenure::Config::new(TERM)
        .validate()
        .unwrap()
        .bounds()
        .crash_failover;
    let elected = async {
        loop {
            if let Some((holder, _)) = g.holder().await {
                if holder != "a" {
                    return holder;
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let holder = tokio::time::timeout(bound * 3, elected)
        .await
        .expect("nobody took over from the dead leader");
    let took = g.clock.now().mono.saturating_since(renewed);
    assert!(
        took <= bound,
        "{holder} took over {took:?} after the last real renewal; the crash fail-over bound is {bound:?}"
    );
    for e in others {
        e.shutdown().await;
    }
    a.shutdown().await;
}
