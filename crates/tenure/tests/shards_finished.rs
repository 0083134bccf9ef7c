//! `Shards::mark_finished` when the store loses a reply, on tokio's paused
//! clock: each request is bounded by the operation timeout, so a lost
//! reply fails the mark (marking again is harmless) instead of holding it
//! for as long as the shard is held, which for a shard renewed is for
//! ever (59b8049, found by `tenure-sim --shards --catalog
//! --catalog-hostile` seed 173).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure::shards::{FinishError, SourceShard};
use tenure::store::Running;
use tenure::store::{BatchResult, CasOutcome, CasRequest, ChangeFeed, Listed, StoreFeed};
use tenure::{
    Clock, Config, GroupName, LeaseRecord, LeaseStore, LeaseView, MemoryStore, Shards, StoreError,
    TokioClock, Version, Versioned,
};
use tenure_testkit::catalog::{held, ScriptedSource};
use tenure_testkit::holders;

const TERM: Duration = Duration::from_secs(10);
const REFRESH: Duration = Duration::from_secs(5);

/// A memory store that loses the reply to the next `lost` single reads of
/// a finished mark (`SET/finished/SHARD`): the request goes out and no
/// answer ever comes, as over a connection that died without a reset.
#[derive(Clone)]
struct LosesMarkReplies {
    inner: MemoryStore,
    lost: Arc<AtomicUsize>,
}

impl LosesMarkReplies {
    /// Whether this read of `group` loses its reply.
    fn loses(&self, group: &GroupName) -> bool {
        group.as_str().contains("/finished/")
            && self
                .lost
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
    }
}

#[async_trait]
impl LeaseView for LosesMarkReplies {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        if self.loses(group) {
            std::future::pending::<()>().await;
        }
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
        self.inner.watch().await
    }
    fn describe(&self) -> String {
        "loses-mark-replies".into()
    }

    fn running(&self) -> Running<'_> {
        self.inner.running()
    }
}

#[async_trait]
impl LeaseStore for LosesMarkReplies {
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

/// Advances time in small steps until `done` holds of the shards held,
/// checking that none is held twice; panics after `within`.
async fn until(
    member: &Shards,
    clock: &Arc<TokioClock>,
    within: Duration,
    done: impl Fn(&std::collections::BTreeSet<&str>) -> bool,
) {
    let start = clock.now().mono;
    loop {
        let h = holders::of_members([member]);
        if done(&held(&h)) {
            return;
        }
        let took = clock.now().mono.saturating_since(start);
        assert!(took <= within, "not done after {took:?}: {h:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A parent `p` and its child `c`: `p`'s holder marks it finished while
/// the store loses the reply to the mark's read. The mark fails within an
/// operation timeout (before 59b8049 it waited for the term to end, and
/// the term of a shard held and renewed never does: the call was still
/// waiting three terms later, and `c` waited with it); marking again
/// succeeds, and `c` is then taken.
#[tokio::test(start_paused = true)]
async fn a_finished_mark_whose_reply_is_lost_fails_in_time_and_marking_again_works() {
    let clock = Arc::new(TokioClock::new());
    let store = LosesMarkReplies {
        inner: MemoryStore::new(),
        lost: Arc::default(),
    };
    let source = ScriptedSource::listing(vec![
        SourceShard::new("p"),
        SourceShard::new("c").after(["p"]),
    ]);
    let config = Config::new(TERM);
    let op_timeout = config.validate().expect("valid").op_timeout;
    let member = Shards::builder(store.clone(), "stream")
        .member_id("a")
        .catalog(source, REFRESH)
        .config(config)
        .clock(clock.clone())
        .start()
        .expect("valid");
    until(&member, &clock, TERM * 3, |h| h.contains("p")).await;
    let term = member.held().remove("p").expect("held");

    store.lost.store(1, Ordering::Relaxed);
    let asked = clock.now().mono;
    let marked = tokio::time::timeout(TERM * 3, member.mark_finished("p", &term)).await;
    let took = clock.now().mono.saturating_since(asked);
    let Ok(marked) = marked else {
        panic!("mark_finished still waiting {took:?} after its call: a lost reply held it");
    };
    assert!(
        matches!(
            marked,
            Err(FinishError::Store {
                source: StoreError::Timeout(_),
                ..
            })
        ),
        "{marked:?}"
    );
    assert!(
        took <= op_timeout + Duration::from_millis(100),
        "the lost reply held the mark {took:?} (operation timeout {op_timeout:?})"
    );
    assert!(term.is_valid(), "p is still held: the mark can be retried");

    // Marking again is harmless, and this time the reply comes.
    member.mark_finished("p", &term).await.expect("marked");
    until(&member, &clock, REFRESH * 4 + TERM, |h| {
        h.contains("c") && !h.contains("p")
    })
    .await;
    member.shutdown().await;
}
