//! Many groups in one engine, on tokio's paused clock: sharing, batching,
//! coalesced renewals, followers without reads, and faults.

use std::sync::Arc;
use std::time::Duration;

use tenure::{
    Clock, Config, Elector, Engine, EngineOptions, Faults, LeaseStore, LeaseView, MemoryStore,
    Role, TokioClock,
};

const TERM: Duration = Duration::from_secs(10);

fn engine_on(store: impl LeaseStore, clock: &Arc<TokioClock>) -> Engine {
    Engine::builder(store)
        .clock(clock.clone())
        .start()
        .expect("in a runtime")
}

fn candidates(engine: &Engine, groups: usize, id: &str) -> Vec<Elector> {
    (0..groups)
        .map(|g| {
            engine
                .elector(format!("shard-{g}"))
                .candidate_id(id)
                .config(Config::new(TERM))
                .start()
                .expect("valid config")
        })
        .collect()
}

/// Two processes on one store (two views of it, so two engines), standing
/// as `a` and `b` in `groups` groups each, once `a` leads every one.
struct TwoProcesses {
    clock: Arc<TokioClock>,
    /// Cuts process `a` or `b` off the store.
    faults: Faults,
    /// The engine of process `b`, whose counters show what following costs.
    b_engine: Engine,
    a: Vec<Elector>,
    b: Vec<Elector>,
}

impl TwoProcesses {
    async fn a_leading(groups: usize) -> TwoProcesses {
        let clock = Arc::new(TokioClock::new());
        let store = MemoryStore::new();
        let faults = Faults::new();
        let first = engine_on(faults.wrap(store.clone(), "a"), &clock);
        let b_engine = engine_on(faults.wrap(store, "b"), &clock);
        let a = candidates(&first, groups, "a");
        for e in &a {
            e.wait_for_leadership().await.unwrap();
        }
        let b = candidates(&b_engine, groups, "b");
        TwoProcesses {
            clock,
            faults,
            b_engine,
            a,
            b,
        }
    }
}

fn leaders(electors: &[Elector]) -> usize {
    electors.iter().filter(|e| e.is_leader()).count()
}

/// How many of `electors` follow a leader they know of.
fn followers(electors: &[Elector]) -> usize {
    electors
        .iter()
        .filter(|e| matches!(e.role(), Role::Follower { .. }))
        .count()
}

#[tokio::test(start_paused = true)]
async fn clones_of_one_store_share_one_engine() {
    let store = MemoryStore::new();
    let a = Elector::builder(store.clone(), "a").start().unwrap();
    let b = Elector::builder(store.clone(), "b").start().unwrap();
    let c = Elector::builder(MemoryStore::new(), "c").start().unwrap();
    let (ea, eb, ec) = (
        a.engine().unwrap(),
        b.engine().unwrap(),
        c.engine().unwrap(),
    );
    a.wait_for_leadership().await.unwrap();
    b.wait_for_leadership().await.unwrap();
    c.wait_for_leadership().await.unwrap();
    assert_eq!(ea.stats().groups, 2, "a and b share");
    assert_eq!(eb.stats().groups, 2);
    assert_eq!(ec.stats().groups, 1, "another store, another engine");
    for e in [&a, &b, &c] {
        e.shutdown().await;
    }
    assert_eq!(ea.stats().groups, 0);
}

#[tokio::test(start_paused = true)]
async fn a_thousand_groups_are_elected_in_a_few_batches() {
    let clock = Arc::new(TokioClock::new());
    let engine = engine_on(MemoryStore::new(), &clock);
    let began = clock.now().mono;
    let es = candidates(&engine, 1000, "host-a");
    for e in &es {
        e.wait_for_leadership().await.unwrap();
    }
    let took = clock.now().mono.saturating_since(began);
    assert!(
        took < Duration::from_millis(10),
        "took {took:?} of paused time"
    );
    let stats = engine.stats();
    assert_eq!(stats.groups, 1000);
    assert!(
        stats.write_batches <= 10,
        "1000 acquisitions in {} batches",
        stats.write_batches
    );
    for e in &es {
        e.shutdown().await;
    }
}

/// Renewals fall due at scattered instants (the groups were elected over
/// a whole renew interval), yet they coalesce: after the first round, at
/// most three batched round trips per renew interval, and still three
/// writes per group per term.
#[tokio::test(start_paused = true)]
async fn renewals_coalesce_into_few_batches_without_extra_writes() {
    let clock = Arc::new(TokioClock::new());
    let engine = engine_on(MemoryStore::new(), &clock);
    let mut es = Vec::new();
    let renew = TERM / 3;
    // 300 groups elected over one renew interval, 100 ms apart.
    for g in 0..300 {
        es.push(
            engine
                .elector(format!("g{g}"))
                .config(Config::new(TERM))
                .start()
                .unwrap(),
        );
        tokio::time::sleep(renew / 300).await;
    }
    tokio::time::sleep(TERM).await;
    let before = engine.stats();
    tokio::time::sleep(TERM * 3).await;
    let after = engine.stats();
    let terms = 3.0;
    let batches = (after.write_batches - before.write_batches) as f64;
    let writes = (after.writes - before.writes) as f64;
    let intervals = terms * 3.0;
    assert!(
        batches / intervals <= 3.0,
        "{batches} batches in {intervals} renew intervals"
    );
    let per_group_term = writes / 300.0 / terms;
    assert!(
        per_group_term <= 3.0 + 1e-9,
        "{per_group_term} writes per group per term"
    );
    assert!(per_group_term >= 2.9, "{per_group_term}: renewals stopped?");
    assert_eq!(leaders(&es), 300);
    for e in &es {
        e.shutdown().await;
    }
}

/// A second process (another view of the store, so another engine) follows
/// every group through the store's feed: no reads while the leaders renew,
/// but the engine's own check that the feed still delivers (one read per
/// retry interval for the whole engine, not per group).
#[tokio::test(start_paused = true)]
async fn followers_learn_every_renewal_from_the_feed_without_reads() {
    let two = TwoProcesses::a_leading(200).await;
    tokio::time::sleep(TERM).await;
    assert_eq!(leaders(&two.b), 0);
    assert_eq!(followers(&two.b), 200);
    let before = two.b_engine.stats();
    tokio::time::sleep(TERM * 3).await;
    let after = two.b_engine.stats();
    let checks = u64::from(
        (TERM * 3).as_millis() as u32 / two.b[0].timing().retry_interval.as_millis() as u32,
    ) + 1;
    assert!(
        after.reads - before.reads <= checks,
        "followers read while leaders renewed: {} reads, {checks} feed checks",
        after.reads - before.reads
    );
    assert_eq!(
        after.feed_silences, 0,
        "a live feed is not taken for silent"
    );
    assert_eq!(after.writes, before.writes);
    assert!(
        after.changes > before.changes,
        "the feed delivered the renewals"
    );
    assert_eq!(leaders(&two.a), 200, "leadership is stable");
    // A graceful stop of every leader hands every group over through the feed.
    let began = two.clock.now().mono;
    for e in &two.a {
        e.shutdown().await;
    }
    for e in &two.b {
        e.wait_for_leadership().await.unwrap();
    }
    let took = two.clock.now().mono.saturating_since(began);
    assert!(took < Duration::from_millis(100), "hand-over took {took:?}");
    for e in &two.b {
        e.shutdown().await;
    }
}

/// A crashed process (its engine cut off from the store) loses every group
/// to the other within the crash bound, and no group ever has two leaders.
#[tokio::test(start_paused = true)]
async fn a_cut_off_engine_loses_every_group_and_none_has_two_leaders() {
    let two = TwoProcesses::a_leading(100).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    two.faults.partition("a");
    let cut = two.clock.now().mono;
    let bound = Config::new(TERM)
        .validate()
        .unwrap()
        .bounds()
        .crash_failover;
    let mut step = Duration::ZERO;
    while leaders(&two.b) < 100 {
        for g in 0..100 {
            assert!(
                !(two.a[g].is_leader() && two.b[g].is_leader()),
                "group {g} has two leaders at {step:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        step += Duration::from_millis(50);
        assert!(step < bound * 2, "not every group moved within {step:?}");
    }
    let took = two.clock.now().mono.saturating_since(cut);
    assert!(took <= bound, "took {took:?}, bound {bound:?}");
    assert_eq!(leaders(&two.a), 0);
    two.faults.heal("a");
    for e in two.a.iter().chain(&two.b) {
        e.shutdown().await;
    }
}

/// A store that never answers a batch cannot stall the engine: each
/// operation times out on its own deadline and the leader steps down
/// before its term ends; once the store answers, it leads again.
#[tokio::test(start_paused = true)]
async fn a_hung_store_times_operations_out_and_the_engine_recovers() {
    let clock = Arc::new(TokioClock::new());
    let faults = Faults::new();
    let engine = Engine::builder(faults.wrap(MemoryStore::new(), "a"))
        .clock(clock.clone())
        .options(EngineOptions {
            max_batch: 10,
            max_in_flight: 1,
        })
        .start()
        .unwrap();
    let es = candidates(&engine, 30, "a");
    for e in &es {
        e.wait_for_leadership().await.unwrap();
    }
    faults.partition("a");
    tokio::time::sleep(TERM).await;
    assert_eq!(leaders(&es), 0, "every term ended while the store hung");
    faults.heal("a");
    for e in &es {
        e.wait_for_leadership().await.unwrap();
    }
    for e in &es {
        e.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_releases_and_the_engine_ends() {
    let clock = Arc::new(TokioClock::new());
    let store = MemoryStore::new();
    let engine = engine_on(store.clone(), &clock);
    let es = candidates(&engine, 10, "a");
    for e in &es {
        e.wait_for_leadership().await.unwrap();
    }
    drop(es);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        engine.stats().groups,
        0,
        "every candidate released and left"
    );
    let group = tenure::GroupName::new("shard-3").unwrap();
    let record = store.read(&group).await.unwrap().unwrap();
    assert_eq!(record.record.holder, None, "released, not left to lapse");
}

#[test]
fn is_leader_is_false_once_the_deadline_passes_without_the_engine() {
    // Covered on the paused clock in deadlines_and_wedges.rs (a term past its deadline
    // is not leadership); this checks the lock-free path is the one used.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let e = Elector::builder(MemoryStore::new(), "x").start().unwrap();
        e.wait_for_leadership().await.unwrap();
        assert!(e.is_leader());
        e.resign();
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(!e.is_leader());
        e.shutdown().await;
    });
}

/// A change feed that stays open but goes silent (it delivers nothing and
/// says nothing of it) is found by the engine's own check read: the
/// followers poll again, and a crash of the leading process is taken over
/// within the polling bound, not a term or two later.
#[tokio::test(start_paused = true)]
async fn a_silent_feed_is_found_and_a_crash_is_still_taken_over_in_time() {
    let p = TwoProcesses::a_leading(20).await;
    for e in &p.b {
        let mut roles = e.watch_role();
        roles
            .wait_for(|r| matches!(r, Role::Follower { .. }))
            .await
            .unwrap();
    }
    let quiet = p.b_engine.stats();
    // a's renewals pass b by unseen; b's engine notices within a term or
    // two (a check read per retry interval, two retry intervals' grace).
    p.faults.silence_feed("b", true);
    let mut found = p.b_engine.stats();
    for _ in 0..20 {
        tokio::time::sleep(TERM / 10).await;
        found = p.b_engine.stats();
        if found.feed_silences > quiet.feed_silences {
            break;
        }
    }
    assert!(
        found.feed_silences > quiet.feed_silences,
        "the silent feed went unnoticed for two terms: {found:?}"
    );
    // The leading process dies; b must take over every group within the
    // crash bound of a polling store (plus one check interval: the feed
    // may have come back up, silent again, in between).
    p.faults.partition("a");
    let crashed = p.clock.now().mono;
    let timing = p.b[0].timing().clone();
    let bound = timing.bounds().crash_failover + timing.retry_interval + timing.op_timeout;
    for (i, e) in p.b.iter().enumerate() {
        tokio::time::timeout(bound, e.wait_for_leadership())
            .await
            .unwrap_or_else(|_| panic!("group {i} not taken over within {bound:?} of the crash"))
            .unwrap();
    }
    let took = p.clock.now().mono.saturating_since(crashed);
    eprintln!("silent feed: all taken over {took:?} after the crash (bound {bound:?})");
}

/// An engine whose groups all lead drops the store-wide feed (its own
/// renewals would only come back on it to be dropped, and the store would
/// publish to a listener for nothing), and subscribes again as soon as one
/// of its groups stands: that candidate then learns of the leader's
/// renewals from the feed and takes the lease within a round trip of its
/// release, not at a poll.
#[tokio::test(start_paused = true)]
async fn an_engine_that_only_leads_drops_the_feed_until_a_group_follows() {
    let clock = Arc::new(TokioClock::new());
    let store = MemoryStore::new();
    let faults = Faults::new();
    let a_engine = engine_on(faults.wrap(store.clone(), "a"), &clock);
    let b_engine = engine_on(faults.wrap(store, "b"), &clock);
    let a = candidates(&a_engine, 20, "a");
    for e in &a {
        e.wait_for_leadership().await.unwrap();
    }
    let other = b_engine
        .elector("other")
        .candidate_id("b")
        .config(Config::new(TERM))
        .start()
        .unwrap();
    other.wait_for_leadership().await.unwrap();
    // Two feed checks (a retry interval apart) find no group following.
    tokio::time::sleep(TERM).await;
    let before = a_engine.stats();
    tokio::time::sleep(TERM * 2).await;
    let after = a_engine.stats();
    assert_eq!(leaders(&a), 20, "leading without a feed");
    assert!(
        after.writes - before.writes >= 20 * 5,
        "{} renewals in two terms",
        after.writes - before.writes
    );
    assert_eq!(
        after.changes, before.changes,
        "deliveries to an engine that only leads (its own renewals and b's)"
    );
    // Process a stands in b's group: its engine subscribes again.
    let challenger = a_engine
        .elector("other")
        .candidate_id("a")
        .config(Config::new(TERM))
        .start()
        .unwrap();
    tokio::time::sleep(TERM).await;
    assert!(
        matches!(challenger.role(), Role::Follower { .. }),
        "{:?}",
        challenger.role()
    );
    let following = a_engine.stats();
    tokio::time::sleep(TERM).await;
    assert!(
        a_engine.stats().changes >= following.changes + 3,
        "b's renewals reach the follower again"
    );
    let released = clock.now().mono;
    other.shutdown().await;
    challenger.wait_for_leadership().await.unwrap();
    let took = clock.now().mono.saturating_since(released);
    assert!(
        took < challenger.timing().retry_interval / 4,
        "took over {took:?} after the release: a poll, not the feed"
    );
    assert_eq!(leaders(&a), 20);
    for e in a.iter().chain([&challenger]) {
        e.shutdown().await;
    }
}
