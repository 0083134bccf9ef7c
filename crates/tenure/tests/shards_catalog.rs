//! Sharded sets whose shards change at runtime, on tokio's paused clock:
//! the catalog leader lists a source that gains, loses and splits shards,
//! and the members follow, with the per-shard guarantee checked at every
//! step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tenure::shards::{CatalogError, FinishError, SourceShard};
use tenure::store::Counted;
use tenure::{
    Clock, Config, GroupName, LeaseRecord, LeaseStore, LeaseView, MemoryStore, Metadata, Shards,
    TokioClock, WallTime,
};
use tenure_testkit::catalog::{held, plain, ScriptedSource};
use tenure_testkit::holders::{self, moved, Holders};

const TERM: Duration = Duration::from_secs(10);
const REFRESH: Duration = Duration::from_secs(5);

struct Set {
    store: MemoryStore,
    clock: Arc<TokioClock>,
    source: ScriptedSource,
    members: BTreeMap<String, Shards>,
}

impl Set {
    fn of(ids: &[&str], shards: Vec<SourceShard>) -> Set {
        let mut set = Set {
            store: MemoryStore::new(),
            clock: Arc::new(TokioClock::new()),
            source: ScriptedSource::default(),
            members: BTreeMap::new(),
        };
        set.source.set(shards);
        for id in ids {
            set.join(id);
        }
        set
    }

    fn join(&mut self, id: &str) {
        let member = Shards::builder(self.store.clone(), "stream")
            .member_id(id)
            .catalog(self.source.clone(), REFRESH)
            .config(Config::new(TERM))
            .clock(self.clock.clone())
            .start()
            .expect("valid");
        self.members.insert(id.to_owned(), member);
    }

    fn holders(&self) -> Holders {
        holders::of_members(self.members.values())
    }

    /// Advances time in small steps, checking at every step that no shard
    /// is held twice and that `never` does not hold, until `done` holds.
    async fn until(
        &self,
        within: Duration,
        never: impl Fn(&Holders) -> Option<String>,
        done: impl Fn(&Holders) -> bool,
    ) -> Holders {
        let start = self.clock.now().mono;
        loop {
            let h = self.holders();
            if let Some(broken) = never(&h) {
                panic!("{broken}: {h:?}");
            }
            if done(&h) {
                return h;
            }
            let took = self.clock.now().mono.saturating_since(start);
            assert!(took <= within, "not done after {took:?}: {h:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Set {
    /// Advances time for `span` in small steps, checking at every step
    /// that no shard is held twice and that `never` does not hold.
    async fn during(&self, span: Duration, never: impl Fn(&Holders) -> Option<String>) {
        let start = self.clock.now().mono;
        while self.clock.now().mono.saturating_since(start) < span {
            if let Some(broken) = never(&self.holders()) {
                panic!("{broken}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn nothing(_: &Holders) -> Option<String> {
    None
}

/// The bound a change of the source takes to be held: a refresh, the
/// members' poll, a take-over; generous on the paused clock.
const FOLLOW: Duration = Duration::from_secs(30);

#[tokio::test(start_paused = true)]
async fn members_follow_shards_added_and_removed_and_moves_are_only_the_changed_ones() {
    let set = Set::of(
        &["a", "b", "c"],
        plain(&["s0", "s1", "s2", "s3", "s4", "s5"]),
    );
    let before = set
        .until(FOLLOW, nothing, |h| {
            h.len() == 6 && holders::loads(h).len() == 3
        })
        .await;
    // Two shards appear: only they move (nobody held them before).
    set.source
        .set(plain(&["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"]));
    let after = set.until(FOLLOW, nothing, |h| h.len() == 8).await;
    assert!(moved(&before, &after).is_empty(), "{before:?} → {after:?}");
    // A shard disappears: its holder releases it, nobody takes it, and
    // its record keeps its token.
    let s3_holder = after["s3"].clone();
    set.source
        .set(plain(&["s0", "s1", "s2", "s4", "s5", "s6", "s7"]));
    let fewer = set
        .until(FOLLOW, nothing, |h| !h.contains_key("s3") && h.len() == 7)
        .await;
    // Besides s3, at most the one move the balance needs (its holder may
    // now hold two fewer than another member).
    let moved_now: BTreeSet<&String> = moved(&after, &fewer);
    assert!(
        moved_now.contains(&"s3".to_owned()) && moved_now.len() <= 2,
        "s3 left {s3_holder}, and more moved: {after:?} → {fewer:?}"
    );
    let fewer = set
        .until(FOLLOW, nothing, |h| holders::balanced(h, 7, 3))
        .await;
    assert!(!fewer.contains_key("s3"));
    let record = set
        .store
        .read(&GroupName::new("stream/shards/s3").unwrap())
        .await
        .unwrap()
        .expect("the record stays");
    assert!(
        record.record.holder.is_none() && record.record.token >= 1,
        "{record:?}"
    );
    // Every member follows within a poll of the catalog's write.
    for m in set.members.values() {
        let mut shards = m.watch_shards();
        tokio::time::timeout(TERM, shards.wait_for(|s| s.len() == 7))
            .await
            .expect("follows the catalog")
            .unwrap();
        assert!(m.catalog().is_some_and(|c| c.generation >= 3));
    }
    // It stays released.
    set.during(Duration::from_secs(60), |h| {
        h.contains_key("s3").then(|| "s3 held again".into())
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn children_wait_for_their_parents_to_be_finished() {
    // A split: p's children c1 and c2; a merge: c2 and q into m.
    let set = Set::of(
        &["a", "b"],
        vec![
            SourceShard::new("p"),
            SourceShard::new("q"),
            SourceShard::new("c1").after(["p"]),
            SourceShard::new("c2").after(["p"]),
            SourceShard::new("m").after(["c2", "q"]),
        ],
    );
    let blocked = |h: &Holders| -> Option<String> {
        let h = held(h);
        (h.contains("c1") || h.contains("c2") || h.contains("m"))
            .then(|| "a child held before its parents finished".into())
    };
    set.until(FOLLOW, blocked, |h| held(h) == BTreeSet::from(["p", "q"]))
        .await;
    // Nothing changes while p is unfinished.
    set.during(REFRESH * 4, |h| {
        (held(h) != BTreeSet::from(["p", "q"])).then(|| format!("moved: {h:?}"))
    })
    .await;
    // p's holder marks it finished; its children become ready, p leaves.
    let holder = &set.members[&set.holders()["p"]];
    let term = holder.held().remove("p").expect("held");
    holder.mark_finished("p", &term).await.unwrap();
    // Marking again is harmless.
    holder.mark_finished("p", &term).await.unwrap();
    let m_blocked = |h: &Holders| {
        h.contains_key("m")
            .then(|| "m held before c2 and q finished".to_owned())
    };
    set.until(FOLLOW, m_blocked, |h| {
        held(h) == BTreeSet::from(["c1", "c2", "q"])
    })
    .await;
    // A term of another shard, or an ended one, cannot mark a shard.
    let c1_holder = &set.members[&set.holders()["c1"]];
    let c1_term = c1_holder.held().remove("c1").expect("held");
    assert!(matches!(
        c1_holder.mark_finished("q", &c1_term).await,
        Err(FinishError::NotHeld { .. })
    ));
    assert!(matches!(
        holder.mark_finished("p", &term).await,
        Ok(()) | Err(FinishError::NotHeld { .. })
    ));
    for shard in ["c2", "q"] {
        let member = &set.members[&set.holders()[shard]];
        let term = member.held().remove(shard).expect("held");
        member.mark_finished(shard, &term).await.unwrap();
    }
    set.until(FOLLOW, nothing, |h| held(h) == BTreeSet::from(["c1", "m"]))
        .await;
}

#[tokio::test(start_paused = true)]
async fn the_source_is_listed_by_one_leader_once_a_refresh_and_failures_keep_the_catalog() {
    let set = Set::of(&["a", "b", "c"], plain(&["x", "y"]));
    set.until(FOLLOW, nothing, |h| h.len() == 2).await;
    let calls = set.source.calls();
    tokio::time::sleep(REFRESH * 10).await;
    let listed = set.source.calls() - calls;
    // One leader lists, once per refresh (give or take the first and a
    // retry), not one per member.
    assert!(
        (8..=12).contains(&listed),
        "{listed} listings in 10 refreshes"
    );
    // A failing source keeps the catalog as it was.
    set.source.fail(true);
    tokio::time::sleep(REFRESH * 4).await;
    assert_eq!(held(&set.holders()), BTreeSet::from(["x", "y"]));
    set.source.fail(false);
    set.source.set(plain(&["x", "y", "z"]));
    set.until(FOLLOW, nothing, |h| h.len() == 3).await;
}

#[tokio::test(start_paused = true)]
async fn the_catalog_leader_moves_when_it_leaves_and_a_new_member_follows_at_once() {
    let mut set = Set::of(&["a", "b"], plain(&["x", "y", "z"]));
    set.until(FOLLOW, nothing, |h| h.len() == 3).await;
    // Whoever leads the catalog leaves; the other takes the duty over.
    for id in ["a", "b"] {
        let m = set.members.remove(id).unwrap();
        m.shutdown().await;
        set.join(id);
    }
    set.source.set(plain(&["x", "y", "z", "w"]));
    set.until(FOLLOW * 2, nothing, |h| h.len() == 4).await;
    set.join("c");
    set.until(FOLLOW, nothing, |h| {
        h.len() == 4 && holders::loads(h).len() == 3
    })
    .await;
    assert_eq!(set.members["c"].current_shards(), ["w", "x", "y", "z"]);
}

#[tokio::test(start_paused = true)]
async fn a_catalog_and_a_fixed_list_together_are_refused() {
    let err = Shards::builder(MemoryStore::new(), "s")
        .shards(3)
        .catalog(ScriptedSource::default(), REFRESH)
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("not two"), "{err}");
    let err = Shards::builder(MemoryStore::new(), "s")
        .catalog(ScriptedSource::default(), Duration::ZERO)
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("refresh period is zero"), "{err}");
}

/// Writes a whole one-part catalog of `names` into `store` by hand, as
/// generation `g` under `token`.
async fn seed_catalog(store: &MemoryStore, token: u64, g: u64, names: &[&str]) {
    let group = GroupName::new("stream/catalog/0").unwrap();
    let current = store.read(&group).await.unwrap().map(|v| v.version);
    let shards: Vec<String> = names
        .iter()
        .map(|n| format!("{{\"name\":\"{n}\"}}"))
        .collect();
    let json = format!("{{\"g\":{g},\"n\":1,\"s\":[{}]}}", shards.join(","));
    let at = WallTime::from_millis(0);
    let record = LeaseRecord {
        holder: None,
        token,
        term: TERM,
        renewed_at: at,
        expires_at: at,
        metadata: Metadata::new().with("tenure.catalog", json),
    };
    store
        .compare_and_swap(&group, current, &record)
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn catalog_parts_under_a_higher_token_than_the_leader_record_are_written_over() {
    // The set's leader record lost (a store that lost writes) while the
    // catalog kept parts written under token 50: the new leader (token 1)
    // writes over them instead of resigning and standing again for ever.
    let store = MemoryStore::new();
    seed_catalog(&store, 50, 9, &["old"]).await;
    let mut set = Set::of(&[], plain(&["x", "y"]));
    set.store = store;
    set.join("a");
    set.join("b");
    set.until(FOLLOW, nothing, |h| held(h) == BTreeSet::from(["x", "y"]))
        .await;
    tokio::time::sleep(TERM * 3).await;
    let leader = set
        .store
        .read(&GroupName::new("stream/leader").unwrap())
        .await
        .unwrap()
        .expect("a catalog leader");
    assert!(
        leader.record.token < 5,
        "the catalog leader resigned and stood again: token {}",
        leader.record.token
    );
}

#[tokio::test(start_paused = true)]
async fn members_take_a_rewritten_catalog_whose_generation_is_not_higher() {
    let set = Set::of(&["a", "b"], plain(&["x", "y"]));
    set.until(FOLLOW, nothing, |h| h.len() == 2).await;
    // The catalog written again from generation 1 (under the current
    // leader's token, as after a store's loss of writes), with another
    // list, while the source fails so that the leader keeps it: the
    // members follow it though its generation is lower than theirs.
    set.source.fail(true);
    let token = set
        .store
        .read(&GroupName::new("stream/catalog/0").unwrap())
        .await
        .unwrap()
        .expect("a catalog")
        .record
        .token;
    seed_catalog(&set.store, token + 1, 1, &["x", "y", "z"]).await;
    set.until(FOLLOW, nothing, |h| h.len() == 3).await;
}

#[tokio::test(start_paused = true)]
async fn a_member_that_left_reads_the_catalog_no_more() {
    let store = Counted::new(MemoryStore::new()).only_groups_containing("stream/catalog/");
    let source = ScriptedSource::default();
    source.set(plain(&["x", "y"]));
    let member = Shards::builder(store.clone(), "stream")
        .member_id("a")
        .catalog(source, REFRESH)
        .config(Config::new(TERM))
        .clock(Arc::new(TokioClock::new()))
        .start()
        .expect("valid");
    tokio::time::sleep(FOLLOW).await;
    assert_eq!(member.current_shards(), ["x", "y"]);
    // The handle is kept (it holds a receiver of the catalog).
    member.shutdown().await;
    tokio::time::sleep(TERM).await;
    let before = store.counts().read_items;
    tokio::time::sleep(TERM * 10).await;
    let after = store.counts().read_items;
    assert_eq!(before, after, "the catalog was read after the member left");
    drop(member);
}

/// Issue 39, schedule 1: a catalog leader whose own source fails (expired
/// credentials on that host only) hands the duty on.
///
/// Schedule: member `a` starts alone with a source that always fails and
/// wins `stream/leader`; `b`, whose source works, joins 5 s later. Within a
/// few terms `b` must lead the catalog, publish it, and the set hold both
/// shards. Before the fix `a` retried every quarter term for ever and no
/// catalog was ever written.
#[tokio::test(start_paused = true)]
async fn a_catalog_leader_whose_source_fails_hands_the_duty_to_one_whose_source_works() {
    let store = MemoryStore::new();
    let clock = Arc::new(TokioClock::new());
    let start = |id: &str, source: ScriptedSource| {
        Shards::builder(store.clone(), "stream")
            .member_id(id)
            .catalog(source, REFRESH)
            .config(Config::new(TERM))
            .clock(clock.clone())
            .start()
            .expect("valid")
    };
    let broken = ScriptedSource::listing(plain(&["x", "y"]));
    broken.fail(true);
    let a = start("a", broken.clone());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let leader = GroupName::new("stream/leader").unwrap();
    let led_by = |store: &MemoryStore| {
        let store = store.clone();
        let leader = leader.clone();
        async move {
            store
                .read(&leader)
                .await
                .unwrap()
                .and_then(|v| v.record.holder_id().map(str::to_owned))
        }
    };
    assert_eq!(led_by(&store).await.as_deref(), Some("a"));
    let b = start("b", ScriptedSource::listing(plain(&["x", "y"])));
    let members = [a.clone(), b.clone()];
    let began = tokio::time::Instant::now();
    loop {
        let h = holders::of_members(members.iter());
        if h.len() == 2 {
            break;
        }
        assert!(
            began.elapsed() <= TERM * 8,
            "no catalog {:?} after b joined: catalog leader {:?}, a's source listed {} times, holders {h:?}",
            began.elapsed(),
            led_by(&store).await,
            broken.calls()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(led_by(&store).await.as_deref(), Some("b"));
    // The duty stays with b: a, backing off, does not take it back.
    let calls = broken.calls();
    tokio::time::sleep(TERM * 6).await;
    assert_eq!(led_by(&store).await.as_deref(), Some("b"));
    assert_eq!(broken.calls(), calls, "a listed its source while b led");
    a.shutdown().await;
    b.shutdown().await;
}

/// Issue 39: a source failing on every member does not make the duty flap:
/// each member that gives it up waits longer before standing again.
#[tokio::test(start_paused = true)]
async fn a_source_failing_everywhere_does_not_make_the_duty_flap() {
    let set = Set::of(&["a", "b", "c"], plain(&["x", "y"]));
    set.until(FOLLOW, nothing, |h| h.len() == 2).await;
    set.source.fail(true);
    let leader = GroupName::new("stream/leader").unwrap();
    let token = |store: MemoryStore| {
        let leader = leader.clone();
        async move {
            store
                .read(&leader)
                .await
                .unwrap()
                .map_or(0, |v| v.record.token)
        }
    };
    let before = token(set.store.clone()).await;
    tokio::time::sleep(TERM * 30).await;
    let terms = token(set.store.clone()).await - before;
    // Without a back-off, a leader giving up every term would be 30 terms.
    assert!(terms <= 12, "{terms} catalog leaders' terms in 30 terms");
    // Held shards stay held through the outage; the catalog comes back.
    assert_eq!(held(&set.holders()), BTreeSet::from(["x", "y"]));
    set.source.fail(false);
    set.source.set(plain(&["x", "y", "z"]));
    set.until(TERM * 10, nothing, |h| h.len() == 3).await;
}

/// Names of `n` shards, each `len` copies of `c` and a number.
fn repeated(c: char, len: usize, n: usize) -> Vec<SourceShard> {
    (0..n)
        .map(|i| SourceShard::new(format!("{}{i:02}", c.to_string().repeat(len))))
        .collect()
}

/// Issue 39, schedule 2: parts are sized on the bytes stored (a part is a
/// JSON string inside the record's metadata, where `"` and `\` are escaped
/// once more). Before the fix every refresh failed with "a catalog part is
/// too large" and no catalog was written.
#[tokio::test(start_paused = true)]
async fn names_that_escape_twice_are_published() {
    for shards in [
        repeated('\\', 118, 20),
        repeated('"', 118, 20),
        (0..110)
            .map(|i| SourceShard::new(format!("{{\"t\":\"acme-{i:03}\"}}")))
            .collect(),
    ] {
        let set = Set::of(&["a", "b"], shards.clone());
        set.until(FOLLOW, nothing, |h| h.len() == shards.len())
            .await;
        for m in set.members.values() {
            m.shutdown().await;
        }
    }
}

/// Issue 39, schedule 2: one shard that cannot be published (300 parents)
/// is left out and reported, naming the limit; the others are published.
/// Before the fix its part was refused as too large at every refresh, and
/// no catalog was written.
#[tokio::test(start_paused = true)]
async fn a_shard_that_cannot_be_published_does_not_stop_the_others() {
    let parents: Vec<String> = (0..300).map(|i| format!("parent-{i:04}")).collect();
    let set = Set::of(
        &["a", "b"],
        vec![
            SourceShard::new("x"),
            SourceShard::new("y"),
            SourceShard::new("many").after(parents),
        ],
    );
    // Subscribed before any member runs: whichever leads reports it.
    let mut streams: Vec<_> = set.members.values().map(Shards::events).collect();
    set.until(FOLLOW, nothing, |h| held(h) == BTreeSet::from(["x", "y"]))
        .await;
    let catalog = set.members["a"].catalog().expect("a catalog");
    assert_eq!(catalog.shards.len(), 2, "{catalog:?}");
    let mut reported = Vec::new();
    for stream in &mut streams {
        while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(1), stream.next()).await
        {
            if let tenure::shards::ShardEvent::ShardLeftOut { shard, error } = e {
                reported.push((shard, error));
            }
        }
    }
    // Once, not at every refresh (the leader refreshed a few times).
    assert_eq!(reported.len(), 1, "{reported:?}");
    let (shard, error) = &reported[0];
    assert_eq!(shard, "many");
    assert!(
        matches!(
            error,
            CatalogError::TooManyParents {
                parents: 300,
                max: 16,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("at most 16"), "{error}");
}

/// Issue 39, schedule 4: a hostile part 0 claiming 65,536 parts costs the
/// members and the leader a few reads, not 65,535 each, and the leader
/// writes over it.
#[tokio::test(start_paused = true)]
async fn a_part_0_claiming_65536_parts_does_not_stall_the_catalog() {
    let memory = MemoryStore::new();
    let group = GroupName::new("stream/catalog/0").unwrap();
    let at = WallTime::from_millis(0);
    let hostile = LeaseRecord {
        holder: None,
        token: u64::MAX,
        term: TERM,
        renewed_at: at,
        expires_at: at,
        metadata: Metadata::new().with("tenure.catalog", "{\"g\":1,\"n\":65536,\"s\":[]}"),
    };
    memory
        .compare_and_swap(&group, None, &hostile)
        .await
        .unwrap();
    let store = Counted::new(memory.clone()).only_groups_containing("stream/catalog/");
    let source = ScriptedSource::listing(plain(&["x", "y"]));
    let clock = Arc::new(TokioClock::new());
    let members: Vec<Shards> = ["a", "b"]
        .iter()
        .map(|id| {
            Shards::builder(store.clone(), "stream")
                .member_id(*id)
                .catalog(source.clone(), REFRESH)
                .config(Config::new(TERM))
                .clock(clock.clone())
                .start()
                .expect("valid")
        })
        .collect();
    let began = tokio::time::Instant::now();
    while holders::of_members(members.iter()).len() < 2 {
        assert!(
            began.elapsed() <= FOLLOW,
            "not held: {} catalog reads",
            store.counts().read_items
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(TERM * 3).await;
    let reads = store.counts().read_items;
    // Two members polling every quarter term and a leader ticking: a few
    // hundred part reads at most, not tens of thousands per poll.
    assert!(reads < 2_000, "{reads} catalog part reads");
    let part0 = memory.read(&group).await.unwrap().expect("part 0");
    let written = part0.record.metadata.get("tenure.catalog").unwrap_or("");
    assert!(
        !written.contains("65536"),
        "part 0 not written over: {written}"
    );
    for m in &members {
        m.shutdown().await;
    }
}

/// Issue 39: a member that cannot read the catalog says so: a warning, a
/// counter (`tenure_shard_catalog_unreadable_total`), and the reason in its
/// membership record (`tenure.catalog-unreadable`, which `tenure status
/// --group SET` shows), removed once it reads a whole catalog again.
/// Before, it logged at debug level only, and stood for no shard.
///
/// Schedule: part 0 of a two-part catalog is planted, part 1 is missing
/// (a torn catalog), and the source fails, so that the leader keeps it;
/// member `a` joins.
#[tokio::test(start_paused = true)]
async fn a_member_that_cannot_read_the_catalog_says_so() {
    let recorder = tenure_testkit::CountingRecorder::default();
    let _local = metrics::set_default_local_recorder(&recorder);
    let store = MemoryStore::new();
    let part0 = GroupName::new("stream/catalog/0").unwrap();
    let at = WallTime::from_millis(0);
    let torn = LeaseRecord {
        holder: None,
        token: 1,
        term: TERM,
        renewed_at: at,
        expires_at: at,
        metadata: Metadata::new().with(
            "tenure.catalog",
            "{\"g\":3,\"n\":2,\"s\":[{\"name\":\"x\"}]}",
        ),
    };
    store.compare_and_swap(&part0, None, &torn).await.unwrap();
    let source = ScriptedSource::listing(plain(&["x", "y"]));
    source.fail(true);
    let a = Shards::builder(store.clone(), "stream")
        .member_id("a")
        .catalog(source.clone(), REFRESH)
        .config(Config::new(TERM))
        .clock(Arc::new(TokioClock::new()))
        .start()
        .expect("valid");
    let member = GroupName::new("stream/members/a").unwrap();
    let published = || {
        let store = store.clone();
        let member = member.clone();
        async move {
            store.read(&member).await.unwrap().and_then(|v| {
                v.record
                    .metadata
                    .get("tenure.catalog-unreadable")
                    .map(str::to_owned)
            })
        }
    };
    tokio::time::sleep(TERM * 2).await;
    let reason = published().await;
    let counted = recorder.count(
        "tenure_shard_catalog_unreadable_total",
        &[("set", "stream"), ("member", "a")],
    );
    assert!(
        reason.as_deref().is_some_and(|r| r.contains("part 1 of 2")) && counted > 0,
        "published {reason:?}, counted {counted}"
    );
    assert!(a.current_shards().is_empty());
    // The source works again: the leader writes a whole catalog, a reads
    // it and takes the reason back.
    source.fail(false);
    tokio::time::sleep(TERM * 3).await;
    assert_eq!(a.current_shards(), ["x", "y"]);
    assert_eq!(published().await, None);
    a.shutdown().await;
}
