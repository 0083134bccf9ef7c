//! Sharded sets against a feed that lies or falls silent, a membership
//! lease that can no longer be held, resync storms and a leave during a
//! drain, on tokio's paused clock. Each test names the schedule it drives.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tenure::store::Running;
use tenure::store::{
    BatchResult, CasOutcome, CasRequest, Change, ChangeFeed, Listed, StoreFeed, StoreFeedSender,
};
use tenure::{
    Config, EngineSlot, Faults, FaultyStore, GroupName, Holder, LeaseRecord, LeaseStore, LeaseView,
    MemoryStore, Metadata, Shards, StoreError, TokioClock, Version, Versioned, WallTime,
};
use tenure_testkit::holders::{of_members, Holders};

const TERM: Duration = Duration::from_secs(10);
const SHARDS: usize = 16;

fn holders(members: &[&Shards]) -> Holders {
    of_members(members.iter().copied())
}

fn balanced(h: &Holders, members: usize) -> bool {
    tenure_testkit::holders::balanced(h, SHARDS, members)
}

async fn until(members: &[&Shards], within: Duration, mut done: impl FnMut(&Holders) -> bool) {
    let start = tokio::time::Instant::now();
    loop {
        let h = holders(members);
        if done(&h) {
            return;
        }
        assert!(start.elapsed() <= within, "not settled: {h:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Member `id` of `set` over `shards` shards at [`TERM`] on the paused
/// `clock`, on its own view of the store.
fn member(
    view: impl LeaseStore,
    set: &str,
    id: &str,
    shards: usize,
    clock: &Arc<TokioClock>,
) -> Shards {
    Shards::builder(view, set)
        .member_id(id)
        .shards(shards)
        .config(Config::new(TERM))
        .clock(clock.clone())
        .start()
        .expect("valid")
}

fn ids(m: &Shards) -> Vec<String> {
    m.members().into_iter().map(|m| m.id).collect()
}

/// A feed that falls silent (no resync) is no evidence that anyone left: a
/// member is counted gone only once a read sent after its lapse shows its
/// record unchanged.
///
/// Schedule: a and b settle. a's store-wide feed goes silent
/// (`Faults::silence_feed`, no resync) while b keeps renewing: a must go on
/// counting b live, and the set stay balanced.
#[tokio::test(start_paused = true)]
async fn a_silent_feed_does_not_make_a_live_member_look_gone() {
    let store = MemoryStore::new();
    let faults = Faults::new();
    let clock = Arc::new(TokioClock::new());
    let join = |id: &str| member(faults.wrap(store.clone(), id), "silent", id, SHARDS, &clock);
    let a = join("a");
    let b = join("b");
    until(&[&a, &b], TERM * 3, |h| balanced(h, 2)).await;
    faults.silence_feed("a", true);
    let start = tokio::time::Instant::now();
    let mut lost_at = None;
    let mut gone_for = Duration::ZERO;
    let mut most_targets = 0;
    while start.elapsed() < TERM * 12 {
        if ids(&a) != ["a", "b"] {
            lost_at.get_or_insert(start.elapsed());
            gone_for += Duration::from_millis(100);
        }
        most_targets = most_targets.max(a.targets().len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    faults.silence_feed("a", false);
    a.shutdown().await;
    b.shutdown().await;
    assert!(
        lost_at.is_none(),
        "a counted the live member b gone {:?} after its feed went silent, for {gone_for:?} of {:?} in all; a stood for up to {most_targets} of {SHARDS} shards",
        lost_at.unwrap(),
        TERM * 12
    );
}

/// A store whose store-wide feed a test can write into: a publisher on the
/// feed's channel that is not the store (the machine's own comments count
/// "a foreign publisher on the channel" as a case to survive).
#[derive(Clone)]
struct Forgeable {
    inner: FaultyStore<MemoryStore>,
    feeds: Arc<Mutex<Vec<StoreFeedSender>>>,
    engine: Arc<EngineSlot>,
    lists: Arc<std::sync::atomic::AtomicUsize>,
}

impl Forgeable {
    fn new(inner: FaultyStore<MemoryStore>) -> Self {
        Forgeable {
            inner,
            feeds: Arc::default(),
            engine: Arc::new(EngineSlot::new()),
            lists: Arc::default(),
        }
    }

    fn forge(&self, change: Change) {
        for f in self.feeds.lock().unwrap().iter() {
            let _ = f.try_send(change.clone());
        }
    }
}

#[async_trait]
impl LeaseView for Forgeable {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.inner.read(group).await
    }
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        self.inner.read_many(groups).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        self.lists
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.list(prefix).await
    }
    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        self.inner.changes(group).await
    }
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        let Some(mut inner) = self.inner.watch().await? else {
            return Ok(None);
        };
        let (tx, feed) = StoreFeed::channel(4096);
        self.feeds.lock().unwrap().push(tx.clone());
        tokio::spawn(async move {
            while let Some(c) = inner.next().await {
                if !tx.send(c).await {
                    return;
                }
            }
        });
        Ok(Some(feed))
    }
    fn describe(&self) -> String {
        "forgeable".into()
    }

    fn running(&self) -> Running<'_> {
        self.inner.running().with_engine(&self.engine)
    }
}

#[async_trait]
impl LeaseStore for Forgeable {
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

fn held_record(holder: &str, version: u64, term: Duration) -> Versioned {
    Versioned {
        record: LeaseRecord {
            holder: Some(Holder {
                id: holder.into(),
                incarnation: 7,
            }),
            token: 1,
            term,
            renewed_at: WallTime::now(),
            expires_at: WallTime::now() + term,
            metadata: Metadata::new(),
        },
        version: Version(version),
    }
}

/// Members a and b of the set `forged`, each on a [`Forgeable`] view of
/// one store, once they have settled.
async fn forgeable_pair() -> ([Forgeable; 2], [Shards; 2]) {
    let store = MemoryStore::new();
    let faults = Faults::new();
    let clock = Arc::new(TokioClock::new());
    let views = ["a", "b"].map(|id| Forgeable::new(faults.wrap(store.clone(), id)));
    let members = [
        member(views[0].clone(), "forged", "a", SHARDS, &clock),
        member(views[1].clone(), "forged", "b", SHARDS, &clock),
    ];
    until(&[&members[0], &members[1]], TERM * 3, |h| balanced(h, 2)).await;
    (views, members)
}

/// A member record only the feed showed is not believed: the member reads
/// it first.
///
/// Schedule: a and b settle. A foreign publisher on the feed channel
/// delivers `forged/members/ghost` (held, term 10 s, never written to the
/// store) every 3 s. Neither member may count ghost live (it would get a
/// share nobody stands for).
#[tokio::test(start_paused = true)]
async fn a_forged_member_on_the_feed_cannot_keep_shards_unheld() {
    let (views, members) = forgeable_pair().await;
    let (a, b) = (&members[0], &members[1]);
    let ghost = Change::Written {
        group: GroupName::new("forged/members/ghost").unwrap(),
        current: held_record("ghost", 1, TERM),
    };
    let start = tokio::time::Instant::now();
    let mut unheld_for = Duration::ZERO;
    let mut next_forge = start;
    while start.elapsed() < TERM * 12 {
        if tokio::time::Instant::now() >= next_forge {
            for v in &views {
                v.forge(ghost.clone());
            }
            next_forge += Duration::from_secs(3);
        }
        if holders(&[a, b]).len() < SHARDS {
            unheld_for += Duration::from_millis(100);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = ids(a);
    let held = holders(&[a, b]).len();
    a.shutdown().await;
    b.shutdown().await;
    assert!(
        unheld_for < TERM * 2,
        "a member only a forged feed showed (never in the store) counted live: a sees {seen:?}; \
         only {held} of {SHARDS} shards held at the end, some shard unheld for {unheld_for:?} of {:?}",
        TERM * 12
    );
}

/// The process's CPU time (user + system), from /proc/self/stat.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which is in parentheses).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Once the membership elector stops for good (the member record's token
/// is `u64::MAX`, or the store's tokens went backwards after a restore),
/// the member stands for nothing and its task waits quietly: its role
/// channel's sender is gone, and a `select!` on it would be ready at once,
/// forever, spinning a core.
///
/// Schedule: the record `spin/members/a` exists, released, with token
/// `u64::MAX`; member a starts; its membership elector fails with
/// `TokenExhausted`; the process's CPU time over 2 s must stay small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_membership_elector_stopped_does_not_spin() {
    let store = MemoryStore::new();
    // Control: a healthy member of another set, idle.
    let calm = Shards::builder(store.clone(), "calm")
        .member_id("a")
        .shards(4)
        .config(Config::new(Duration::from_secs(1)))
        .start()
        .expect("valid");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_time();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calm_used = cpu_time().saturating_sub(before);
    calm.shutdown().await;
    let group = GroupName::new("spin/members/a").unwrap();
    let now = WallTime::now();
    store.compare_and_swap_now(
        &group,
        None,
        &LeaseRecord {
            holder: None,
            token: u64::MAX,
            term: Duration::from_secs(1),
            renewed_at: now,
            expires_at: now,
            metadata: Metadata::new(),
        },
    );
    let a = Shards::builder(store.clone(), "spin")
        .member_id("a")
        .shards(4)
        .config(Config::new(Duration::from_secs(1)))
        .start()
        .expect("valid");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_time();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_time().saturating_sub(before);
    assert!(!a.is_member());
    let stopped = tokio::time::timeout(Duration::from_secs(5), a.shutdown()).await;
    assert!(
        used < Duration::from_millis(500),
        "the member task used {used:?} of CPU in 2 s of wall time with nothing to do (a healthy member: {calm_used:?}; shutdown finished: {})",
        stopped.is_ok()
    );
}

/// A release only the feed showed does not remove a live member: the
/// member reads the record first.
///
/// Schedule: a and b settle; a foreign publisher delivers
/// `forged/members/b` released (version 10^9, holder none) to a every
/// second. a must go on seeing b.
#[tokio::test(start_paused = true)]
async fn a_forged_release_on_the_feed_does_not_remove_a_live_member() {
    let (views, members) = forgeable_pair().await;
    let (a, b) = (&members[0], &members[1]);
    let mut released = held_record("b", 1_000_000_000, TERM);
    released.record.holder = None;
    let forged = Change::Written {
        group: GroupName::new("forged/members/b").unwrap(),
        current: released,
    };
    let start = tokio::time::Instant::now();
    let mut alone_for = Duration::ZERO;
    let mut most_targets = 0;
    while start.elapsed() < TERM * 6 {
        views[0].forge(forged.clone());
        for _ in 0..10 {
            if ids(a) == ["a"] {
                alone_for += Duration::from_millis(100);
            }
            most_targets = most_targets.max(a.targets().len());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    a.shutdown().await;
    b.shutdown().await;
    assert!(
        alone_for < TERM,
        "a counted live b gone on a forged release for {alone_for:?} of {:?}, standing for up to {most_targets} shards",
        TERM * 6
    );
}

/// A resync lists the members and reads every shard again, but not more
/// often than once a poll: a feed that resyncs every 10 ms (a connection
/// that flaps, a reader that keeps falling behind) must not make the
/// member list the prefix as fast as the store answers.
#[tokio::test(start_paused = true)]
async fn a_resync_storm_costs_a_bounded_number_of_listings() {
    let store = MemoryStore::new();
    let faults = Faults::new();
    faults.set_latency(Duration::from_millis(1));
    let clock = Arc::new(TokioClock::new());
    let view = Forgeable::new(faults.wrap(store.clone(), "a"));
    let a = member(view.clone(), "storm", "a", SHARDS, &clock);
    until(&[&a], TERM * 3, |h| h.len() == SHARDS).await;
    let before = view.lists.load(std::sync::atomic::Ordering::Relaxed);
    let start = tokio::time::Instant::now();
    while start.elapsed() < TERM {
        view.forge(Change::Resync);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lists = view.lists.load(std::sync::atomic::Ordering::Relaxed) - before;
    a.shutdown().await;
    // One per poll (2.5 s) would be 4.
    assert!(lists <= 10, "{lists} listings in one term of resyncs");
}

/// A graceful leave waits for the shards given up just before it to drain
/// and be released, not only for the ones still stood for.
///
/// Schedule: c joins; b gives up shard 0, whose work takes 3 s to stop; b
/// calls `shutdown()` 100 ms later: when it returns, b holds nothing and
/// no work of b runs.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_shards_given_up_before_it() {
    let store = MemoryStore::new();
    let faults = Faults::new();
    let clock = Arc::new(TokioClock::new());
    let join = |id: &str| member(faults.wrap(store.clone(), id), "late", id, 4, &clock);
    let a = join("a");
    let b = join("b");
    let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cancels = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runner = {
        let (b, running, cancels) = (b.clone(), running.clone(), cancels.clone());
        tokio::spawn(async move {
            b.run_per_shard(move |_shard, term| {
                let (running, cancels) = (running.clone(), cancels.clone());
                async move {
                    running.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    term.cancelled().await;
                    // The first run told to stop (the shard given up for c)
                    // takes 3 s to wind down; the rest stop at once.
                    if cancels.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                    }
                    running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
        })
    };
    for _ in 0..3000 {
        if a.held().len() + b.held().len() == 4 && b.held().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let c = join("c");
    for _ in 0..3000 {
        if b.targets().len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(b.targets().len(), 1, "b gave one shard up for c");
    tokio::time::sleep(Duration::from_millis(100)).await;
    b.shutdown().await;
    // What the store says right after b's shutdown returned.
    let mut still_b = Vec::new();
    for s in 0..4 {
        let g = GroupName::new(format!("late/shards/{s}")).unwrap();
        if let Some(v) = store.read_now(&g).unwrap() {
            if v.record.holder_id() == Some("b") {
                still_b.push(s);
            }
        }
    }
    let work = running.load(std::sync::atomic::Ordering::SeqCst);
    runner.await.unwrap().unwrap();
    a.shutdown().await;
    c.shutdown().await;
    assert!(
        still_b.is_empty() && work == 0,
        "b's shutdown() returned with shards {still_b:?} still held by b and {work} runs of its work still going"
    );
}

/// A shard record from the feed is believed only until the record's real
/// writes say otherwise: a delivery older than what a member knows, and
/// different, makes it read the shard.
///
/// Schedule: a and b settle. Every 3 s a foreign publisher delivers, for
/// every shard b holds, a record naming a with a version far above the
/// store's. a then counts b's shards as its own, and would stand for some
/// of them and give up its own, which b, at its share, would not take
/// either. b's renewals (lower versions) must correct a within a renewal
/// and a read, so that no shard stays unheld for long.
#[tokio::test(start_paused = true)]
async fn a_forged_holder_on_the_feed_cannot_keep_shards_unheld() {
    let (views, members) = forgeable_pair().await;
    let (a, b) = (&members[0], &members[1]);
    let b_shards: Vec<String> = holders(&[a, b])
        .into_iter()
        .filter(|(_, holder)| holder.as_str() == "b")
        .map(|(shard, _)| shard)
        .collect();
    let forged: Vec<Change> = b_shards
        .iter()
        .map(|shard| Change::Written {
            group: GroupName::new(format!("forged/shards/{shard}")).unwrap(),
            current: held_record("a", u64::MAX / 2, TERM),
        })
        .collect();
    let start = tokio::time::Instant::now();
    let mut unheld_for = Duration::ZERO;
    let mut next_forge = start;
    while start.elapsed() < TERM * 12 {
        if tokio::time::Instant::now() >= next_forge {
            for change in &forged {
                views[0].forge(change.clone());
            }
            next_forge += Duration::from_secs(3);
        }
        if holders(&[a, b]).len() < SHARDS {
            unheld_for += Duration::from_millis(100);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = holders(&[a, b]).len();
    a.shutdown().await;
    b.shutdown().await;
    assert!(
        unheld_for < TERM * 2,
        "forged holders kept shards unheld for {unheld_for:?} of {:?}; {held} of {SHARDS} held at the end",
        TERM * 12
    );
}
