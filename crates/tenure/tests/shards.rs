//! Sharded sets on tokio's paused clock: members as separate processes
//! (each its own view of one memory store, so its own engine), joins,
//! graceful leaves and crashes, and the per-shard guarantee throughout.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tenure::store::{Counted, OpCounters};
use tenure::{
    Clock, Config, ConfigError, ElectorError, Faults, MemoryStore, ShardEvent, Shards, TokioClock,
};
use tenure_testkit::holders::{self, held_by, loads, moved, Holders};
use tenure_testkit::sharded;

const TERM: Duration = Duration::from_secs(10);
const SHARDS: usize = 16;

struct Set {
    store: MemoryStore,
    faults: Faults,
    clock: Arc<TokioClock>,
    members: BTreeMap<String, Shards>,
}

impl Set {
    fn new() -> Set {
        Set {
            store: MemoryStore::new(),
            faults: Faults::new(),
            clock: Arc::new(TokioClock::new()),
            members: BTreeMap::new(),
        }
    }

    /// Members `a` to `d`, once each holds its share; with how long that
    /// took.
    async fn of_four_balanced() -> (Set, Duration) {
        let mut set = Set::new();
        for id in ["a", "b", "c", "d"] {
            set.join(id);
        }
        let settle = set.until(TERM * 3, |h| balanced(h, 4)).await;
        (set, settle)
    }

    fn join(&mut self, id: &str) {
        let shards = Shards::builder(self.faults.wrap(self.store.clone(), id), "ingest")
            .member_id(id)
            .shards(SHARDS)
            .config(Config::new(TERM))
            .clock(self.clock.clone())
            .start()
            .expect("valid");
        self.members.insert(id.to_owned(), shards);
    }

    /// Who holds each shard with a valid term; panics if two do.
    fn holders(&self) -> Holders {
        holders::of_members(self.members.values())
    }

    /// Advances time in small steps, checking the per-shard guarantee at
    /// every step, until `done` holds or `within` passes.
    async fn until(&self, within: Duration, mut done: impl FnMut(&Holders) -> bool) -> Duration {
        let start = self.clock.now().mono;
        loop {
            let h = self.holders();
            let took = self.clock.now().mono.saturating_since(start);
            if done(&h) {
                return took;
            }
            assert!(took <= within, "not settled after {took:?}: {h:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn balanced(h: &Holders, members: usize) -> bool {
    holders::balanced(h, SHARDS, members)
}

#[tokio::test(start_paused = true)]
async fn four_members_settle_at_four_shards_each_and_a_crash_moves_only_its_shards() {
    let (set, settle) = Set::of_four_balanced().await;
    eprintln!("settled in {settle:?}");
    let before = set.holders();
    assert!(
        loads(&before).values().all(|&l| l == 4),
        "{:?}",
        loads(&before)
    );
    // Members agree on the member list.
    for m in set.members.values() {
        let ids: Vec<String> = m.members().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);
    }

    // Crash c: cut off from the store.
    set.faults.partition("c");
    let timing = Config::new(TERM).validate().unwrap();
    let bound = (timing.bounds().crash_failover + timing.retry_interval + timing.retry_jitter) * 2;
    let took = set
        .until(bound, |h| {
            h.len() == SHARDS && !h.values().any(|id| id == "c")
        })
        .await;
    let after = set.holders();
    let c_had = held_by(&before, "c");
    assert_eq!(moved(&before, &after), c_had, "only c's shards moved");
    assert!(took <= bound, "took {took:?}, documented bound {bound:?}");
    eprintln!(
        "crash moved {} shards in {took:?} (bound {bound:?})",
        c_had.len()
    );
    set.until(TERM * 2, |h| balanced(h, 3)).await;
    for (id, m) in &set.members {
        if id != "c" {
            m.shutdown().await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_joining_member_takes_its_share_and_a_graceful_leave_hands_over_at_once() {
    let (mut set, _) = Set::of_four_balanced().await;
    let before = set.holders();
    set.join("e");
    let took = set.until(TERM * 3, |h| balanced(h, 5)).await;
    let after = set.holders();
    let took_over = held_by(&after, "e").len();
    assert_eq!(
        moved(&before, &after).len(),
        took_over,
        "only the newcomer's share moved"
    );
    assert!((3..=4).contains(&took_over), "e took {took_over}");
    eprintln!("join: {took_over} shards moved in {took:?}");

    // b leaves gracefully: its shards are released and taken over through
    // the change feed, well before any lease could lapse.
    let b_had = after.values().filter(|id| *id == "b").count();
    let b = set.members.remove("b").unwrap();
    let left = set.clock.now().mono;
    b.shutdown().await;
    set.until(TERM, |h| balanced(h, 4)).await;
    let took = set.clock.now().mono.saturating_since(left);
    let settled = set.holders();
    let moved = after
        .iter()
        .filter(|(s, id)| settled.get(*s) != Some(*id))
        .count();
    assert_eq!(moved, b_had, "only b's shards moved");
    assert!(took < TERM / 2, "a graceful leave took {took:?}");
    eprintln!("graceful leave: {b_had} shards moved in {took:?}");
    for m in set.members.values() {
        m.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn run_per_shard_runs_each_held_shard_once_and_events_follow() {
    let mut set = Set::new();
    set.join("a");
    let a = set.members["a"].clone();
    let mut events = a.events();
    let running = Arc::new(std::sync::Mutex::new(BTreeMap::<String, u64>::new()));
    let r = running.clone();
    let runner = tokio::spawn(async move {
        a.run_per_shard(move |shard, term| {
            let r = r.clone();
            async move {
                assert!(
                    r.lock()
                        .unwrap()
                        .insert(shard.clone(), term.token())
                        .is_none(),
                    "{shard} twice"
                );
                term.cancelled().await;
                r.lock().unwrap().remove(&shard);
                Ok::<(), std::io::Error>(())
            }
        })
        .await
    });
    set.until(TERM, |h| h.len() == SHARDS).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        running.lock().unwrap().len(),
        SHARDS,
        "work runs for every held shard"
    );
    set.join("b");
    set.until(TERM * 2, |h| balanced(h, 2)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        running.lock().unwrap().len(),
        SHARDS / 2,
        "moved shards' work stopped"
    );
    let mut acquired = 0;
    let mut released = 0;
    let mut member_changes = 0;
    while let Ok(Some(e)) = tokio::time::timeout(Duration::ZERO, events.next()).await {
        match e {
            ShardEvent::Acquired { .. } => acquired += 1,
            ShardEvent::Released { .. } => released += 1,
            ShardEvent::MembersChanged { .. } => member_changes += 1,
            _ => {}
        }
    }
    assert_eq!((acquired, released), (SHARDS, SHARDS / 2));
    assert!(member_changes >= 2, "joined alone, then b joined");
    let assignment = set.members["a"].assignment().await.unwrap();
    assert_eq!(assignment.shards.len(), SHARDS);
    assert!(assignment
        .shards
        .iter()
        .all(|s| s.holder.is_some() && s.token >= 1));
    for m in set.members.values() {
        m.shutdown().await;
    }
    runner.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn bad_configuration_is_a_typed_error() {
    let store = MemoryStore::new();
    // Each a shape error by kind, not a timing one.
    let err = |b: tenure::ShardsBuilder| match b.start().unwrap_err() {
        ElectorError::Config(e @ ConfigError::Shards { .. }) => e.to_string(),
        other => panic!("not a sharded-set error: {other:?}"),
    };
    assert!(err(Shards::builder(store.clone(), "x").member_id("a")).contains("no shards"));
    assert!(err(Shards::builder(store.clone(), "a/b")
        .member_id("a")
        .shards(2))
    .contains("'/'"));
    assert!(err(Shards::builder(store.clone(), "x")
        .member_id("a")
        .shard_names(["p", "p"]))
    .contains("same name"));
    let empty_member = Shards::builder(store, "x").member_id("").shards(1);
    assert!(empty_member
        .start()
        .unwrap_err()
        .to_string()
        .contains("empty"));
}

/// A shard that stops being a member's target and becomes one again while
/// its old elector is still draining gets a new elector. When the old one
/// finally stops, `run_per_shard` must not forget the new one: it did (the
/// old runner's end removed the shard's entry), so the next change of the
/// member's targets started a second runner for the new elector, and that
/// term's work ran twice at once (found by the sharded simulation, seed 1).
#[tokio::test(start_paused = true)]
async fn a_shard_retargeted_while_draining_is_worked_once() {
    const N: usize = 4;
    let store = MemoryStore::new();
    let faults = Faults::new();
    let clock = Arc::new(TokioClock::new());
    let join = |id: &str| {
        Shards::builder(faults.wrap(store.clone(), id), "retarget")
            .member_id(id)
            .shards(N)
            .config(Config::new(TERM))
            .clock(clock.clone())
            .start()
            .expect("valid")
    };
    // Work on b lingers 3 s after it is told to stop, and records how many
    // runs of each shard are under way at once.
    let running = Arc::new(std::sync::Mutex::new(BTreeMap::<String, usize>::new()));
    let most = Arc::new(std::sync::Mutex::new(0usize));
    let a = join("a");
    let b = join("b");
    let runner = {
        let (b, running, most) = (b.clone(), running.clone(), most.clone());
        tokio::spawn(async move {
            b.run_per_shard(move |shard, term| {
                let (running, most) = (running.clone(), most.clone());
                async move {
                    {
                        let mut r = running.lock().unwrap();
                        let n = r.entry(shard.clone()).or_default();
                        *n += 1;
                        let mut m = most.lock().unwrap();
                        *m = (*m).max(*n);
                    }
                    struct Done(Arc<std::sync::Mutex<BTreeMap<String, usize>>>, String);
                    impl Drop for Done {
                        fn drop(&mut self) {
                            *self.0.lock().unwrap().get_mut(&self.1).unwrap() -= 1;
                        }
                    }
                    let _done = Done(running, shard);
                    term.cancelled().await;
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
        })
    };
    let settle = |members: Vec<Shards>, want: usize| async move {
        for _ in 0..3000 {
            let h = holders::of_members(&members);
            if h.len() == N && loads(&h).len() == want {
                return h;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("not settled: {:?}", holders::of_members(&members));
    };
    settle(vec![a.clone(), b.clone()], 2).await;
    // c joins: b (without the extra share, which goes to a by name) drains
    // one shard, its work lingering; c leaves again before b has released
    // it, so b stands for it again with a new elector.
    let c = join("c");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.targets().len(), 1, "b gave up one shard for c");
    c.shutdown().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.targets().len(), 2, "b stands for it again");
    // The old elector drains and stops; the new one takes the shard.
    tokio::time::sleep(Duration::from_secs(5)).await;
    // a leaves: b's targets change again, and it takes all four.
    a.shutdown().await;
    let h = settle(vec![b.clone()], 1).await;
    assert_eq!(h.len(), N);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*most.lock().unwrap(), 1, "a shard's work ran twice at once");
    assert!(
        running.lock().unwrap().values().all(|&n| n == 1),
        "{:?}",
        running.lock().unwrap()
    );
    b.shutdown().await;
    runner.await.unwrap().unwrap();
}

/// A crashed member's record stays held in the store until someone clears
/// it. Members that saw it stop changing count the member gone after the
/// takeover wait; a member that joins later sees the record for the first
/// time and would count the dead member live for a whole wait, computing
/// other targets than everyone else (found by `tenure bench --shards`: after
/// a kill, every later join took a takeover wait, its shards unheld). The
/// members that judge a member gone clear its record (a release on the
/// version they saw unchanged, as a challenger's takeover), so a newcomer
/// takes its share at once.
#[tokio::test(start_paused = true)]
async fn a_member_joining_after_a_crash_is_not_held_up_by_the_dead_members_record() {
    let (mut set, _) = Set::of_four_balanced().await;
    set.faults.partition("c");
    set.members.remove("c");
    set.until(TERM * 3, |h| balanced(h, 3)).await;
    // The others have counted c gone; now e joins.
    tokio::time::sleep(TERM / 2).await;
    set.join("e");
    let took = set.until(TERM * 3, |h| balanced(h, 4)).await;
    assert!(
        took < TERM / 4,
        "the join took {took:?}: the newcomer counted the dead member live"
    );
    let ids: Vec<String> = set.members["e"]
        .members()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, ["a", "b", "d", "e"]);
    for m in set.members.values() {
        m.shutdown().await;
    }
}

/// `members` members of `shards` shards at `term`, started at the same
/// moment on the paused clock, each on its own view of one store (as
/// separate processes); `faults` shapes the store first.
fn start_together(
    members: usize,
    shards: usize,
    term: Duration,
    faults: impl FnOnce(&Faults),
) -> Vec<Shards> {
    let store = MemoryStore::new();
    let f = Faults::new();
    faults(&f);
    let handles = (0..members)
        .map(|i| f.wrap(store.clone(), format!("m{i}")))
        .collect();
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    sharded::start_together(handles, "together", shards, term, Some(clock))
}

/// Eight members started at the same moment at a 2 s term, on a store
/// whose listing takes 600 ms (a Redis `SCAN` over a database shared with
/// many other groups, a table scan): longer than the 500 ms poll. Members
/// used to list again on every member-record change, and give up on every
/// listing at the poll, so none ever saw another: one member held all 64
/// shards and the others none. They now follow each other's records on the
/// feed and list only now and then, in the background, for as long as a
/// listing takes.
#[tokio::test(start_paused = true)]
async fn eight_members_started_together_balance_when_a_listing_outlasts_the_poll() {
    let term = Duration::from_secs(2);
    let set = start_together(8, 64, term, |f| {
        f.set_list_latency(Duration::from_millis(600))
    });
    let took = sharded::until_balanced(&set, 64, sharded::settle_bound(term)).await;
    eprintln!("8 × 64 at 2 s, listing 600 ms: balanced in {took:?}");
    for m in &set {
        m.shutdown().await;
    }
}

/// The same from a simultaneous start without any delay, at 1 s, 2 s and
/// 10 s terms and sizes up to 16 members × 256 shards.
#[tokio::test(start_paused = true)]
async fn members_started_together_balance_within_the_bound() {
    for (members, shards, term) in [(8, 64, 1), (6, 32, 2), (16, 256, 2), (8, 64, 10)] {
        let term = Duration::from_secs(term);
        let set = start_together(members, shards, term, |_| {});
        let took = sharded::until_balanced(&set, shards, sharded::settle_bound(term)).await;
        eprintln!("{members} × {shards} at {term:?}: balanced in {took:?}");
        for m in &set {
            m.shutdown().await;
        }
    }
}

/// Who holds a shard is taken from the change feed, not read again: 16
/// members started together over 256 shards read, each, the shard records
/// once at the start (the refresh), not once more for every shard that
/// changes hands in the set, nor again to look around once a member
/// (before: 672 records each, 2.6 refreshes, and at 64 members × 1,024
/// shards on Redis the reads timed out the members' own renewals).
#[tokio::test(start_paused = true)]
async fn shard_holders_come_from_the_feed_not_from_a_read_per_hand_over() {
    let (members, shards, term) = (16, 256, Duration::from_secs(2));
    let store = MemoryStore::new();
    let faults = Faults::new();
    let read = Arc::new(OpCounters::default());
    let handles = (0..members)
        .map(|i| {
            Counted::new(faults.wrap(store.clone(), format!("m{i}")))
                .only_groups_containing("/shards/")
                .counting_into(read.clone())
        })
        .collect();
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let set = sharded::start_together(handles, "fed", shards, term, Some(clock));
    let took = sharded::until_balanced(&set, shards, sharded::settle_bound(term)).await;
    let per_member = usize::try_from(read.snapshot().read_items).unwrap_or(usize::MAX) / members;
    eprintln!(
        "{members} × {shards}: balanced in {took:?}, {per_member} shard records read per member"
    );
    assert!(
        per_member < 2 * shards,
        "each member read {per_member} shard records before the set balanced: two refreshes of {shards} or more"
    );
    for m in &set {
        m.shutdown().await;
    }
}
