//! A sharded set follows the store through the one change feed the engine
//! keeps per store handle: members and sets in one process tap it, none
//! opens a feed of its own (issue 39). On tokio's paused clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tenure::store::Running;
use tenure::store::{BatchResult, CasOutcome, CasRequest, ChangeFeed, Listed, StoreFeed};
use tenure::{
    Clock, Config, GroupName, LeaseRecord, LeaseStore, LeaseView, MemoryStore, Shards, StoreError,
    TokioClock, Version, Versioned,
};
use tenure_testkit::holders::{self, held_by, Holders};
use tokio::task::AbortHandle;

const TERM: Duration = Duration::from_secs(10);
const SHARDS: usize = 12;

/// One store handle whose clones count the store-wide feeds opened on it,
/// and can end them all at once (a store's listener giving up).
#[derive(Clone)]
struct CountingWatches {
    inner: MemoryStore,
    watches: Arc<AtomicUsize>,
    /// The forwarders of the feeds opened: aborting one ends its feed.
    forwarders: Arc<Mutex<Vec<AbortHandle>>>,
}

impl CountingWatches {
    fn new() -> Self {
        CountingWatches {
            inner: MemoryStore::new(),
            watches: Arc::default(),
            forwarders: Arc::default(),
        }
    }

    fn watches(&self) -> usize {
        self.watches.load(Ordering::Relaxed)
    }

    /// Ends every feed opened so far.
    fn end_feeds(&self) {
        for f in self.forwarders.lock().unwrap().drain(..) {
            f.abort();
        }
    }
}

#[async_trait]
impl LeaseView for CountingWatches {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.inner.read(group).await
    }
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        self.inner.read_many(groups).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        self.inner.list(prefix).await
    }
    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        self.inner.changes(group).await
    }
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        self.watches.fetch_add(1, Ordering::Relaxed);
        let Some(mut inner) = self.inner.watch().await? else {
            return Ok(None);
        };
        // Forwarded through a task of ours, so that the test can end it.
        let (tx, feed) = StoreFeed::channel(4096);
        let forwarder = tokio::spawn(async move {
            while let Some(c) = inner.next().await {
                if !tx.send(c).await {
                    return;
                }
            }
        });
        self.forwarders
            .lock()
            .unwrap()
            .push(forwarder.abort_handle());
        Ok(Some(feed))
    }
    fn describe(&self) -> String {
        "counting-watches".into()
    }

    fn running(&self) -> Running<'_> {
        self.inner.running()
    }
}

#[async_trait]
impl LeaseStore for CountingWatches {
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
    // The memory store's slot: clones of this handle share one engine.
}

fn member(store: &CountingWatches, clock: &Arc<TokioClock>, set: &str, id: &str) -> Shards {
    Shards::builder(store.clone(), set)
        .member_id(id)
        .shards(SHARDS)
        .config(Config::new(TERM))
        .clock(clock.clone())
        .start()
        .expect("valid")
}

/// Advances time in small steps, checking that no shard of either set is
/// held twice, until both are balanced over their members or `within`
/// passes; how long it took.
async fn until_balanced(
    clock: &Arc<TokioClock>,
    sets: [(&[Shards], usize); 2],
    within: Duration,
) -> Duration {
    let start = clock.now().mono;
    loop {
        let held: Vec<Holders> = sets
            .iter()
            .map(|(m, _)| holders::of_members(m.iter()))
            .collect();
        let took = clock.now().mono.saturating_since(start);
        if held
            .iter()
            .zip(sets.iter())
            .all(|(h, (_, n))| holders::balanced(h, SHARDS, *n))
        {
            return took;
        }
        assert!(took <= within, "not balanced after {took:?}: {held:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Four members of one set and two of another, on clones of one store
/// handle in one process, open one store-wide feed between them (before:
/// one per member as well as the engine's, 7), and still follow the
/// store through it: a graceful leave is taken over through the feed,
/// well within a poll. When that feed ends, the engine opens one more, and
/// the members follow through it again.
#[tokio::test(start_paused = true)]
async fn members_and_sets_in_one_process_share_the_engines_one_feed() {
    let store = CountingWatches::new();
    let clock = Arc::new(TokioClock::new());
    let mut ingest: Vec<Shards> = ["a", "b", "c", "d"]
        .iter()
        .map(|id| member(&store, &clock, "ingest", id))
        .collect();
    let mut other: Vec<Shards> = ["a", "b"]
        .iter()
        .map(|id| member(&store, &clock, "other", id))
        .collect();
    let took = until_balanced(&clock, [(&ingest, 4), (&other, 2)], TERM * 3).await;
    eprintln!("both sets balanced in {took:?}");
    assert_eq!(
        store.watches(),
        1,
        "6 members of 2 sets on one store handle opened {} feeds",
        store.watches()
    );

    // A graceful leave hands over through the shared feed: the shards
    // are taken within a round trip of the release, not at a poll (a
    // quarter of a term) or a refresh (4 terms).
    let leave = |set: &mut Vec<Shards>, clock: &Arc<TokioClock>| {
        let gone = set.remove(1);
        let had = held_by(&holders::of_members(set.iter().chain([&gone])), "b").len();
        let left = clock.now().mono;
        (gone, had, left)
    };
    let (b, b_had, left) = leave(&mut ingest, &clock);
    assert!(b_had > 0, "b held nothing to hand over");
    b.shutdown().await;
    until_balanced(&clock, [(&ingest, 3), (&other, 2)], TERM).await;
    let took = clock.now().mono.saturating_since(left);
    eprintln!("graceful leave: {b_had} shards taken over in {took:?}");
    assert!(took < TERM / 8, "a graceful leave took {took:?}");

    // The store ends its feed: the engine subscribes again (one more
    // feed, not one per member), the members tap it again, and follow the
    // store through it as before.
    store.end_feeds();
    tokio::time::sleep(TERM).await;
    assert_eq!(
        store.watches(),
        2,
        "after the feed ended the members opened {} feeds in all",
        store.watches()
    );
    let (b, b_had, left) = leave(&mut other, &clock);
    assert!(b_had > 0, "b held nothing to hand over");
    b.shutdown().await;
    until_balanced(&clock, [(&ingest, 3), (&other, 1)], TERM).await;
    let took = clock.now().mono.saturating_since(left);
    eprintln!("graceful leave after the feed came back: {b_had} shards in {took:?}");
    assert!(took < TERM / 8, "a graceful leave took {took:?}");
    assert_eq!(store.watches(), 2);
    for m in ingest.iter().chain(other.iter()) {
        m.shutdown().await;
    }
}
