//! Sharded sets that follow a changing catalog: a source the test changes,
//! and the one scenario the library's paused-clock tests and each store's
//! real-server test run (a split, a finished parent, a shard removed).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tenure::config::Config;
use tenure::shards::{ShardList, ShardSource, Shards, SourceError, SourceShard};
use tenure::store::LeaseStore;

use super::holders::{of_members, Holders};

/// A [`ShardSource`] the test scripts: what it lists now (a
/// [`ShardList`]), whether it fails, and how often it was asked. Clones
/// share all three.
#[derive(Clone, Debug, Default)]
pub struct ScriptedSource {
    list: ShardList,
    failing: Arc<Mutex<bool>>,
    calls: Arc<Mutex<u64>>,
}

impl ScriptedSource {
    /// A source listing `shards`.
    pub fn listing(shards: Vec<SourceShard>) -> Self {
        let source = ScriptedSource::default();
        source.set(shards);
        source
    }

    /// Lists `shards` from now on.
    pub fn set(&self, shards: Vec<SourceShard>) {
        self.list.set(shards);
    }

    /// Fails every listing from now on (or stops failing).
    pub fn fail(&self, failing: bool) {
        *lock(&self.failing) = failing;
    }

    /// How many times the source was listed.
    pub fn calls(&self) -> u64 {
        *lock(&self.calls)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait]
impl ShardSource for ScriptedSource {
    async fn list(&self) -> Result<Vec<SourceShard>, SourceError> {
        *lock(&self.calls) += 1;
        if *lock(&self.failing) {
            return Err("the scripted source is failing".into());
        }
        self.list.list().await
    }
}

/// Shards without parents.
pub fn plain(names: &[&str]) -> Vec<SourceShard> {
    names.iter().map(|n| SourceShard::new(*n)).collect()
}

/// The shards held in `holders`.
pub fn held(holders: &Holders) -> BTreeSet<&str> {
    holders.keys().map(String::as_str).collect()
}

/// One member of `set` per handle (`m0`, `m1`, …), following `source` with
/// a catalog refreshed every `refresh`, at `term`.
///
/// # Panics
///
/// If the set's configuration is refused.
pub fn start_following<S: LeaseStore>(
    handles: Vec<S>,
    set: &str,
    source: &ScriptedSource,
    refresh: Duration,
    term: Duration,
) -> Vec<Shards> {
    handles
        .into_iter()
        .enumerate()
        .map(|(i, store)| {
            Shards::builder(store, set)
                .member_id(format!("m{i}"))
                .catalog(source.clone(), refresh)
                .config(Config::new(term))
                .start()
                .expect("a valid sharded set")
        })
        .collect()
}

/// Waits, checking every 20 ms that no shard is held twice and that
/// `never` does not hold, until `done` holds.
///
/// # Panics
///
/// If a shard is held twice, `never` names a problem, or `done` does not
/// hold within `within`.
pub async fn until(
    set: &[Shards],
    within: Duration,
    never: impl Fn(&Holders) -> Option<String>,
    done: impl Fn(&Holders) -> bool,
) -> Holders {
    let start = tokio::time::Instant::now();
    loop {
        let h = of_members(set);
        if let Some(broken) = never(&h) {
            panic!("{broken}: {h:?}");
        }
        if done(&h) {
            return h;
        }
        assert!(
            start.elapsed() <= within,
            "not done after {within:?}: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Checks, every 20 ms for `span`, that no shard is held twice and that
/// `never` does not hold.
///
/// # Panics
///
/// If a shard is held twice or `never` names a problem.
pub async fn during(set: &[Shards], span: Duration, never: impl Fn(&Holders) -> Option<String>) {
    let start = tokio::time::Instant::now();
    while start.elapsed() < span {
        if let Some(broken) = never(&of_members(set)) {
            panic!("{broken}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The scenario every store runs: members on `handles` follow a stream
/// that is split (`p` into `c1`, `c2`) while `q` is also held; the
/// children wait until `p`'s holder marks it finished, then are held
/// while `p` leaves; `q` removed from the source is released and its
/// record keeps its token. `term` bounds every step (a refresh of a term
/// quarter, several terms per step).
///
/// # Panics
///
/// If a child is held before its parent is finished, a shard is held
/// twice, or a step does not happen within its bound.
pub async fn follows_a_split_and_a_removal<S: LeaseStore + Clone>(
    handles: Vec<S>,
    set: &str,
    term: Duration,
) {
    let store = handles.first().expect("one handle at least").clone();
    let source = ScriptedSource::listing(plain(&["p", "q"]));
    let members = start_following(handles, set, &source, term / 4, term);
    let step = term * 8;
    until(
        &members,
        step,
        |_| None,
        |h| held(h) == BTreeSet::from(["p", "q"]),
    )
    .await;
    source.set(vec![
        SourceShard::new("p"),
        SourceShard::new("q"),
        SourceShard::new("c1").after(["p"]),
        SourceShard::new("c2").after(["p"]),
    ]);
    let early = |h: &Holders| -> Option<String> {
        let h = held(h);
        (h.contains("c1") || h.contains("c2")).then(|| "a child held before p finished".to_owned())
    };
    // Every member reads the new catalog; the children stay unheld.
    let start = tokio::time::Instant::now();
    while !members
        .iter()
        .all(|m| m.catalog().is_some_and(|c| c.shards.len() == 4))
    {
        assert!(
            start.elapsed() <= step,
            "the split's catalog is not read within {step:?}"
        );
        during(&members, Duration::from_millis(100), early).await;
    }
    during(&members, term, early).await;
    let holders = of_members(&members);
    let holder = members
        .iter()
        .find(|m| Some(m.member_id()) == holders.get("p").map(String::as_str))
        .expect("p is held");
    let t = holder.held().remove("p").expect("p is held");
    holder
        .mark_finished("p", &t)
        .await
        .expect("p's holder marks it finished");
    until(
        &members,
        step,
        |_| None,
        |h| held(h) == BTreeSet::from(["c1", "c2", "q"]),
    )
    .await;
    source.set(plain(&["c1", "c2"]));
    until(
        &members,
        step,
        |_| None,
        |h| held(h) == BTreeSet::from(["c1", "c2"]),
    )
    .await;
    let q = tenure::GroupName::new(format!("{set}/shards/q")).expect("a valid name");
    let record = store
        .read(&q)
        .await
        .expect("readable")
        .expect("q's record stays");
    assert!(
        record.record.holder.is_none() && record.record.token >= 1,
        "{record:?}"
    );
    for m in &members {
        m.shutdown().await;
    }
}
