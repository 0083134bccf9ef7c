//! `tenure bench --catalog`: a sharded set that follows a changing catalog
//! (`ShardsBuilder::catalog`) on each store, its members on handles of
//! their own as separate processes would be. In every round a shard is
//! added, a held shard splits (its two children wait until its holder
//! marks it finished), and a shard is removed; the table shows how long
//! each change took to be followed: the new shard held, the children held
//! after the parent's mark, the removed shard released. A program that
//! prints a table; it asserts nothing about time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::Rng;
use tenure::shards::{ShardList, SourceShard};
use tenure::{Config, Shards};

use crate::cli::BenchArgs;
use crate::commands::bench::separate_handles;
use crate::commands::bench::Stats;
use crate::store_url::StoreUrl;

/// How often the catalog leader lists the source, in terms.
const REFRESH_TERMS: u32 = 2;

/// One store's figures.
#[derive(Debug, serde::Serialize)]
pub struct CatalogRow {
    store: String,
    members: usize,
    term_ms: f64,
    refresh_ms: f64,
    /// From the source listing a new shard to a member holding it.
    added: Stats,
    /// From the parent's holder marking it finished to both children held.
    split: Stats,
    /// From the source no longer listing a shard to nobody holding it.
    removed: Stats,
    /// Shards worked by two members at once (a broken guarantee).
    overlaps: usize,
}

impl CatalogRow {
    /// Whether a shard was held by two members at once.
    pub fn overlapped(&self) -> bool {
        self.overlaps > 0
    }
}

/// Runs the rounds on every store.
pub async fn run(args: &BenchArgs, urls: &[StoreUrl]) -> anyhow::Result<Vec<CatalogRow>> {
    let term = separate_handles(urls, "--catalog", "member", args.term)?;
    Config::new(term).validate()?;
    let mut rows = Vec::new();
    for url in urls {
        rows.push(measure(url, args, term).await?);
    }
    Ok(rows)
}

/// Who holds each shard, as the members report it; counts a shard two
/// members report.
fn holders(members: &[Shards], overlaps: &mut usize) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for m in members {
        for shard in m.held().into_keys() {
            if out.insert(shard, m.member_id().to_owned()).is_some() {
                *overlaps += 1;
            }
        }
    }
    out
}

/// Polls every 10 ms until `done` holds of the holders, within `within`;
/// returns how long it took.
async fn until(
    members: &[Shards],
    overlaps: &mut usize,
    within: Duration,
    what: &str,
    done: impl Fn(&BTreeMap<String, String>) -> bool,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        if done(&holders(members, overlaps)) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > within {
            bail!("{what}: not done within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn measure(url: &StoreUrl, args: &BenchArgs, term: Duration) -> anyhow::Result<CatalogRow> {
    let n = args.members.max(2);
    let refresh = term * REFRESH_TERMS;
    let set = format!("bench-catalog-{:08x}", rand::random::<u32>());
    let source = ShardList::new((0..n).map(|i| SourceShard::new(format!("s{i}"))));
    let mut members = Vec::new();
    for i in 0..n {
        let store = url.open().await.with_context(|| format!("opening {url}"))?;
        let member = Shards::builder(store, set.clone())
            .member_id(format!("m{i}"))
            .catalog(source.clone(), refresh)
            .config(Config::new(term))
            .start()?;
        members.push(member);
    }
    let within = refresh + term * 10;
    let mut overlaps = 0;
    let first = n;
    until(&members, &mut overlaps, within, "the first catalog", |h| {
        h.len() == first
    })
    .await?;
    eprintln!(
        "{url}: {n} members, {} rounds of an added, a split and a removed shard",
        args.rounds
    );
    let (mut added, mut split, mut removed) = (Vec::new(), Vec::new(), Vec::new());
    let mut next = n;
    // A change waits for the leader's next refresh: each one is made at a
    // random moment, so that the figures sample every phase of the
    // refresh instead of one.
    let phase = || {
        Duration::from_millis(rand::thread_rng().gen_range(0..refresh.as_millis().max(1) as u64))
    };
    for round in 0..args.rounds {
        // A shard added.
        tokio::time::sleep(phase()).await;
        let mut listed = source.get();
        let new = format!("s{next}");
        next += 1;
        listed.push(SourceShard::new(new.clone()));
        source.set(listed.clone());
        added.push(
            until(&members, &mut overlaps, within, "an added shard", |h| {
                h.contains_key(&new)
            })
            .await?,
        );
        // A held shard splits; its holder marks it finished.
        let parent = listed[round % listed.len()].name.clone();
        let (a, b) = (format!("s{next}"), format!("s{}", next + 1));
        next += 2;
        for child in [&a, &b] {
            listed.push(SourceShard::new(child.clone()).after([parent.clone()]));
        }
        source.set(listed.clone());
        // Every member reads the split before the parent is finished.
        tokio::time::sleep(refresh + term).await;
        let h = holders(&members, &mut overlaps);
        if h.contains_key(&a) || h.contains_key(&b) {
            bail!("a child of {parent} was held before {parent} was finished");
        }
        tokio::time::sleep(phase()).await;
        // Its holder marks it finished (waiting for one, if it is moving).
        until(&members, &mut overlaps, within, "the parent held", |h| {
            h.contains_key(&parent)
        })
        .await?;
        let (holder, t) = members
            .iter()
            .find_map(|m| Some((m, m.held().remove(&parent)?)))
            .with_context(|| format!("{parent} is held by nobody"))?;
        holder.mark_finished(&parent, &t).await?;
        split.push(
            until(&members, &mut overlaps, within, "a split's children", |h| {
                h.contains_key(&a) && h.contains_key(&b)
            })
            .await?,
        );
        // A shard removed.
        tokio::time::sleep(phase()).await;
        let gone = listed
            .iter()
            .find(|s| s.parents.is_empty() && s.name != parent)
            .map(|s| s.name.clone())
            .context("a shard to remove")?;
        listed.retain(|s| s.name != gone && s.name != parent);
        source.set(listed);
        removed.push(
            until(&members, &mut overlaps, within, "a removed shard", |h| {
                !h.contains_key(&gone)
            })
            .await?,
        );
    }
    for m in &members {
        m.shutdown().await;
    }
    Ok(CatalogRow {
        store: url.scheme().to_owned(),
        members: n,
        term_ms: term.as_secs_f64() * 1e3,
        refresh_ms: refresh.as_secs_f64() * 1e3,
        added: Stats::of(added),
        split: Stats::of(split),
        removed: Stats::of(removed),
        overlaps,
    })
}

/// The table `tenure bench --catalog` prints.
pub fn table(rows: &[CatalogRow]) -> String {
    let mut out = format!(
        "{:<12}{:>7}  {:>6}  {:>7}  {:<32}{:>3}  {:>10}  {:>8}\n",
        "store", "members", "term", "refresh", "change", "n", "median", "max"
    );
    for r in rows {
        for (what, s) in [
            ("shard added → held", &r.added),
            ("parent finished → children held", &r.split),
            ("shard removed → released", &r.removed),
        ] {
            out += &format!(
                "{:<12}{:>7}  {:>5.1}s  {:>6.1}s  {:<32}{:>3}  {:>7.0} ms  {:>5.0} ms\n",
                r.store,
                r.members,
                r.term_ms / 1e3,
                r.refresh_ms / 1e3,
                what,
                s.n,
                s.median_ms,
                s.max_ms
            );
        }
        if r.overlaps > 0 {
            out += &format!(
                "{}: {} shards held by two members at once\n",
                r.store, r.overlaps
            );
        }
    }
    out
}
