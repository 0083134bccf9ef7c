//! A shard list that changes at runtime: kinsumer's shard cache, fenced.
//!
//! One member at a time, the set's catalog leader (an [`Elector`] on group
//! `SET/leader`), calls the user's [`ShardSource`] and publishes what it
//! lists as the set's **catalog**: records `SET/catalog/0`, `SET/catalog/1`,
//! … in the store, each carrying a part of the list. Every member reads the
//! catalog and assigns over its ready shards as it would over a fixed list.
//!
//! * **Skip if fresh.** On each tick the leader reads the catalog and lists
//!   the source only if the catalog is older than the refresh period (by
//!   the wall time it was written), so a new leader does not list again a
//!   source listed a moment ago.
//! * **Fenced writes.** Each part carries the leader's fencing token, and
//!   is written by compare-and-swap on the version the leader read; a
//!   leader that reads a part written under a higher token stops writing.
//!   After a write under token `t`, no write under a lower token applies:
//!   a deposed leader's late write is refused.
//! * **Whole or not at all.** Every part of one catalog carries its
//!   generation and the number of parts. A reader takes a catalog only when
//!   every part shows the same generation, and never one older than it has
//!   (a leader that crashed half-way leaves a torn catalog, which readers
//!   ignore and the next leader writes again at once).
//! * **Dependencies and finished shards.** A shard may name parents (a
//!   Kinesis child shard is read only after its parents are finished). The
//!   holder of a shard marks it finished ([`Shards::mark_finished`]: a
//!   record `SET/finished/SHARD` created under the shard's own token); the
//!   leader drops finished shards from the catalog, and shards the source
//!   no longer lists (kinsumer's `diffShardIDs`). A shard is **ready**, and
//!   assigned, once none of its parents is in the catalog.
//!
//! [`Shards::mark_finished`]: super::Shards::mark_finished

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::clock::{Clock, WallTime};
use crate::elector::Elector;
use crate::error::{ConfigError, ElectorError, StoreError};
use crate::record::{check_name, GroupName, LeaseRecord, Metadata, Version, MAX_GROUP_BYTES};
use crate::store::{bounded, CasOutcome, CasRequest, LeaseStore};
use crate::term::Term;

/// The error a [`ShardSource`] returns; shown in the logs and in
/// [`ShardEvent::CatalogFailed`](super::ShardEvent::CatalogFailed).
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

/// Where a set's shards come from: a stream's shard listing, a topic's
/// partitions, a table of tenants. Only the set's catalog leader calls it,
/// once per refresh period.
///
/// ```
/// use async_trait::async_trait;
/// use tenure::shards::{ShardSource, SourceError, SourceShard};
///
/// struct Tenants;
///
/// #[async_trait]
/// impl ShardSource for Tenants {
///     async fn list(&self) -> Result<Vec<SourceShard>, SourceError> {
///         Ok(vec![SourceShard::new("acme"), SourceShard::new("globex")])
///     }
/// }
/// ```
#[async_trait]
pub trait ShardSource: Send + Sync + 'static {
    /// Every shard there is now, with the parents each must wait for. An
    /// error keeps the catalog as it is until the next try.
    async fn list(&self) -> Result<Vec<SourceShard>, SourceError>;
}

/// A [`ShardSource`] whose list the application sets: tenants read from
/// a configuration it reloads, partitions it learns of by other means.
/// Clones share the list; the catalog leader sees a change at its next
/// refresh.
///
/// ```
/// use tenure::shards::{ShardList, SourceShard};
/// let tenants = ShardList::new([SourceShard::new("acme")]);
/// tenants.set([SourceShard::new("acme"), SourceShard::new("globex")]);
/// assert_eq!(tenants.get().len(), 2);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ShardList {
    shards: Arc<std::sync::Mutex<Vec<SourceShard>>>,
}

impl ShardList {
    /// A list of `shards`.
    pub fn new(shards: impl IntoIterator<Item = SourceShard>) -> Self {
        let list = ShardList::default();
        list.set(shards);
        list
    }

    /// Lists `shards` from now on.
    pub fn set(&self, shards: impl IntoIterator<Item = SourceShard>) {
        *self.lock() = shards.into_iter().collect();
    }

    /// What it lists now.
    pub fn get(&self) -> Vec<SourceShard> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SourceShard>> {
        self.shards
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl ShardSource for ShardList {
    async fn list(&self) -> Result<Vec<SourceShard>, SourceError> {
        Ok(self.get())
    }
}

/// A shard as a [`ShardSource`] lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceShard {
    /// The shard's name (a shard id, a partition number, a tenant).
    pub name: String,
    /// Shards that must be finished (or gone from the catalog) before this
    /// one is assigned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
}

impl SourceShard {
    /// A shard with no parents.
    pub fn new(name: impl Into<String>) -> Self {
        SourceShard {
            name: name.into(),
            parents: Vec::new(),
        }
    }

    /// The same shard, assigned only after `parents` are finished.
    pub fn after<I, S>(mut self, parents: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.parents = parents.into_iter().map(Into::into).collect();
        self
    }
}

/// A set's catalog as a member last read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardCatalog {
    /// Rises with every change of the list written under one token.
    pub generation: u64,
    /// The fencing token of the catalog leader's term that wrote it
    /// (every part carries it: parts of two leaders' writes are no
    /// catalog).
    pub token: u64,
    /// The shards, sorted by name.
    pub shards: Vec<SourceShard>,
    /// When the leader last listed the source, by its wall clock.
    pub listed_at: WallTime,
}

impl ShardCatalog {
    /// The shards ready to be assigned: those none of whose parents is
    /// still in the catalog, sorted by name.
    pub fn ready(&self) -> Vec<String> {
        let present: BTreeSet<&str> = self.shards.iter().map(|s| s.name.as_str()).collect();
        self.shards
            .iter()
            .filter(|s| !s.parents.iter().any(|p| present.contains(p.as_str())))
            .map(|s| s.name.clone())
            .collect()
    }
}

/// The metadata key of a catalog part.
const PART_KEY: &str = "tenure.catalog";
/// Bytes of shard list per part: a part's metadata stays well under
/// [`MAX_METADATA_BYTES`](crate::record::MAX_METADATA_BYTES) with its
/// header and JSON escaping.
const PART_BYTES: usize = 3000;
/// The most parts a reader follows: a hostile part 0 cannot make it read
/// without end (65,536 × 3,000 bytes of names is far beyond any stream).
const MAX_PARTS: u64 = 65_536;

/// One part of a catalog, as stored in its record's metadata.
#[derive(Debug, Serialize, Deserialize)]
struct Part {
    /// The catalog's generation.
    g: u64,
    /// How many parts it has.
    n: u64,
    /// This part's shards.
    s: Vec<SourceShard>,
}

pub(crate) fn catalog_prefix(set: &str) -> String {
    format!("{set}/catalog/")
}

pub(crate) fn catalog_group(set: &str, part: u64) -> String {
    format!("{}{part}", catalog_prefix(set))
}

pub(crate) fn finished_prefix(set: &str) -> String {
    format!("{set}/finished/")
}

pub(crate) fn leader_group(set: &str) -> String {
    format!("{set}/leader")
}

fn group(name: String) -> Result<GroupName, StoreError> {
    GroupName::new(name).map_err(|e| StoreError::Misconfigured {
        message: e.to_string(),
        source: None,
    })
}

/// Splits `shards` into parts of about [`PART_BYTES`] each (at least one,
/// empty for an empty list).
fn split(shards: &[SourceShard]) -> Vec<Vec<SourceShard>> {
    let mut parts = vec![Vec::new()];
    let mut bytes = 0;
    for shard in shards {
        let size = serde_json::to_vec(shard).map_or(PART_BYTES, |v| v.len() + 1);
        if bytes + size > PART_BYTES && !parts.last().is_some_and(Vec::is_empty) {
            parts.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        if let Some(last) = parts.last_mut() {
            last.push(shard.clone());
        }
    }
    parts
}

/// What a part's record says, or `None` if it is no catalog part (foreign
/// or hostile contents are ignored, never trusted).
fn decode(record: &LeaseRecord) -> Option<Part> {
    let part: Part = serde_json::from_str(record.metadata.get(PART_KEY)?).ok()?;
    (part.n >= 1 && part.n <= MAX_PARTS).then_some(part)
}

/// The catalog's parts as stored: their versions, tokens and contents.
struct Stored {
    /// Per part read: its version and record, if it exists.
    parts: Vec<Option<(Version, LeaseRecord)>>,
}

impl Stored {
    /// The whole catalog, if every part shows one generation written
    /// under one token. Two leaders that read the same parts both write
    /// the next generation: parts of both, with the same generation and
    /// count, would stitch a list neither wrote (a shard lost between
    /// them), so the token must match too.
    fn catalog(&self) -> Option<ShardCatalog> {
        let (_, first) = self.parts.first()?.as_ref()?;
        let head = decode(first)?;
        let n = usize::try_from(head.n).ok()?;
        let mut shards = Vec::new();
        for k in 0..n {
            let (_, record) = self.parts.get(k)?.as_ref()?;
            let part = decode(record)?;
            if part.g != head.g || part.n != head.n || record.token != first.token {
                return None;
            }
            shards.extend(part.s);
        }
        shards.sort_by(|a, b| a.name.cmp(&b.name));
        Some(ShardCatalog {
            generation: head.g,
            token: first.token,
            shards,
            listed_at: first.renewed_at,
        })
    }

    /// The highest token any part was written under.
    fn highest_token(&self) -> u64 {
        self.parts
            .iter()
            .flatten()
            .map(|(_, r)| r.token)
            .max()
            .unwrap_or(0)
    }

    /// The highest generation any part claims, torn or not.
    fn highest_generation(&self) -> u64 {
        self.parts
            .iter()
            .flatten()
            .filter_map(|(_, r)| decode(r))
            .map(|p| p.g)
            .max()
            .unwrap_or(0)
    }
}

/// Reads part 0, then the other parts it names (and `at_least` parts in
/// all, for a writer that must see the parts it is about to replace).
async fn read_parts(
    store: &dyn LeaseStore,
    set: &str,
    at_least: u64,
) -> Result<Stored, StoreError> {
    let first = store.read(&group(catalog_group(set, 0))?).await?;
    let n = first
        .as_ref()
        .and_then(|v| decode(&v.record))
        .map_or(1, |p| p.n)
        .max(at_least)
        .min(MAX_PARTS);
    let mut parts = vec![first.map(|v| (v.version, v.record))];
    if n > 1 {
        let groups = (1..n)
            .map(|k| group(catalog_group(set, k)))
            .collect::<Result<Vec<_>, _>>()?;
        for read in store.read_many(&groups).await? {
            parts.push(read?.map(|v| (v.version, v.record)));
        }
    }
    Ok(Stored { parts })
}

/// Reads the set's catalog: `None` if there is none yet, or it is torn.
pub(crate) async fn read_catalog(
    store: &dyn LeaseStore,
    set: &str,
) -> Result<Option<ShardCatalog>, StoreError> {
    Ok(read_parts(store, set, 1).await?.catalog())
}

/// Why a catalog write did not apply.
#[derive(Debug)]
enum WriteError {
    /// A part was written under a higher token: this leader is deposed.
    Superseded,
    /// A part changed since it was read (another leader wrote): read again.
    Conflict,
    /// The store failed.
    Store(StoreError),
}

impl From<StoreError> for WriteError {
    fn from(e: StoreError) -> Self {
        WriteError::Store(e)
    }
}

/// Writes `shards` as the catalog under `token`, on the parts `stored`
/// read: every part compare-and-swapped on its version. Parts written
/// under a higher token are a later leader's, and refused, unless
/// `overrule` (the writer's term is valid after the read, so the higher
/// token is no later term's: the set's leader record went back).
#[allow(
    clippy::too_many_arguments,
    reason = "the write's whole context, each a distinct input"
)]
async fn write_catalog(
    store: &dyn LeaseStore,
    set: &str,
    token: u64,
    term: Duration,
    now: WallTime,
    stored: &Stored,
    shards: &[SourceShard],
    overrule: bool,
) -> Result<ShardCatalog, WriteError> {
    if stored.highest_token() > token && !overrule {
        return Err(WriteError::Superseded);
    }
    let mut sorted = shards.to_vec();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let current = stored.catalog();
    let generation = match &current {
        Some(c) if c.shards == sorted => c.generation,
        _ => stored.highest_generation().saturating_add(1),
    };
    let pieces = split(&sorted);
    let n = pieces.len() as u64;
    let mut requests = Vec::with_capacity(pieces.len());
    for (k, piece) in pieces.into_iter().enumerate() {
        let part = Part {
            g: generation,
            n,
            s: piece,
        };
        let json = serde_json::to_string(&part).map_err(|e| {
            WriteError::Store(StoreError::Misconfigured {
                message: format!("the catalog cannot be encoded: {e}"),
                source: None,
            })
        })?;
        let record = LeaseRecord {
            holder: None,
            token,
            term,
            renewed_at: now,
            expires_at: now,
            metadata: Metadata::new().with(PART_KEY, json),
        };
        record.metadata.validate().map_err(|e| {
            WriteError::Store(StoreError::Misconfigured {
                message: format!("a catalog part is too large: {e}"),
                source: None,
            })
        })?;
        let expected = stored
            .parts
            .get(k)
            .and_then(|p| p.as_ref())
            .map(|(v, _)| *v);
        requests.push(CasRequest {
            group: group(catalog_group(set, k as u64))?,
            expected,
            record,
        });
    }
    for outcome in store.compare_and_swap_many(&requests).await? {
        if outcome? == CasOutcome::Conflict {
            return Err(WriteError::Conflict);
        }
    }
    Ok(ShardCatalog {
        generation,
        token,
        shards: sorted,
        listed_at: now,
    })
}

/// The metadata key of a finished mark.
const FINISHED_KEY: &str = "tenure.finished";

/// Whether `record` is a finished mark. A store may read a group never
/// written as a released record (Redis after a data loss): only a record
/// carrying the mark counts.
fn is_finished_mark(record: &LeaseRecord) -> bool {
    record.metadata.get(FINISHED_KEY).is_some()
}

/// The shards marked finished, by name.
async fn finished(store: &dyn LeaseStore, set: &str) -> Result<BTreeSet<String>, StoreError> {
    let prefix = finished_prefix(set);
    Ok(store
        .list(&prefix)
        .await?
        .into_iter()
        .filter(|l| matches!(&l.record, Ok(v) if is_finished_mark(&v.record)))
        .filter_map(|l| l.group.as_str().strip_prefix(&prefix).map(str::to_owned))
        .collect())
}

/// Checks what a source listed: names the set can hold, unique.
fn checked(set: &str, listed: Vec<SourceShard>) -> Result<Vec<SourceShard>, String> {
    let mut seen = BTreeSet::new();
    for shard in &listed {
        check_name("shard name", &shard.name, MAX_GROUP_BYTES).map_err(|e| e.to_string())?;
        GroupName::new(super::shard_group(set, &shard.name)).map_err(|e| e.to_string())?;
        GroupName::new(format!("{}{}", finished_prefix(set), shard.name))
            .map_err(|e| e.to_string())?;
        if !seen.insert(shard.name.as_str()) {
            return Err(format!("the source listed shard {:?} twice", shard.name));
        }
    }
    if let Some(shard) = waits_for_itself(&listed) {
        return Err(format!(
            "the source listed shard {shard:?} after itself (through its parents): it could never be assigned"
        ));
    }
    Ok(listed)
}

/// A shard that is its own ancestor among the `listed` (a parent cycle),
/// if any: it would wait for ever.
fn waits_for_itself(listed: &[SourceShard]) -> Option<String> {
    let parents: BTreeMap<&str, &[String]> = listed
        .iter()
        .map(|s| (s.name.as_str(), s.parents.as_slice()))
        .collect();
    // Depth-first, each shard finished once: linear in shards + edges.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
    for start in listed {
        if marks.contains_key(start.name.as_str()) {
            continue;
        }
        // (shard, index of the next parent to visit)
        let mut path: Vec<(&str, usize)> = vec![(start.name.as_str(), 0)];
        marks.insert(start.name.as_str(), Mark::Open);
        while let Some(&(shard, next)) = path.last() {
            let of = parents.get(shard).copied().unwrap_or_default();
            match of.get(next) {
                None => {
                    marks.insert(shard, Mark::Done);
                    path.pop();
                }
                Some(parent) => {
                    if let Some(top) = path.last_mut() {
                        top.1 += 1;
                    }
                    let parent = parent.as_str();
                    match marks.get(parent) {
                        Some(Mark::Open) => return Some(parent.to_owned()),
                        Some(Mark::Done) => {}
                        // A parent not listed is gone: nothing to wait on.
                        None if !parents.contains_key(parent) => {}
                        None => {
                            marks.insert(parent, Mark::Open);
                            path.push((parent, 0));
                        }
                    }
                }
            }
        }
    }
    None
}

/// What the catalog leader needs.
pub(crate) struct Leader {
    pub(crate) set: String,
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) source: Arc<dyn ShardSource>,
    pub(crate) refresh: Duration,
    pub(crate) term: Duration,
    /// The bound on each store operation.
    pub(crate) op_timeout: Duration,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) events: tokio::sync::broadcast::Sender<super::ShardEvent>,
}

impl Leader {
    /// Runs the catalog duty in every term `elector` wins, until it stops.
    pub(crate) async fn run(self, elector: Elector) {
        let this = Arc::new(self);
        let result = elector
            .run_while_leader(move |term| {
                let this = this.clone();
                async move {
                    this.lead(term).await;
                    Ok::<(), ElectorError>(())
                }
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "the catalog leader's elector stopped");
        }
    }

    /// `op`, bounded by the operation timeout.
    async fn bounded<T, E: From<StoreError>>(
        &self,
        op: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        bounded(&*self.clock, self.op_timeout, op).await
    }

    /// One term's duty: keep the catalog fresh until the term ends.
    async fn lead(&self, term: Term) {
        // After a failure, try again within a fraction of the term, never
        // faster than a tenth of it.
        let retry = (self.term / 4).max(Duration::from_millis(10));
        loop {
            let wait = match self.tick(&term).await {
                Ok(Some(fresh_until)) => {
                    let now = self.clock.now().wall;
                    Duration::from_millis(fresh_until.as_millis().saturating_sub(now.as_millis()))
                        .max(retry / 2)
                }
                Ok(None) => return,
                Err(why) => {
                    tracing::warn!(set = %self.set, error = %why, "the shard catalog was not refreshed; trying again");
                    let _ = self
                        .events
                        .send(super::ShardEvent::CatalogFailed { error: why });
                    retry
                }
            };
            tokio::select! {
                () = term.cancelled() => return,
                () = self.clock.sleep_until(self.clock.now().mono + wait) => {}
            }
        }
    }

    /// Whether this leader may write over the parts `stored` read: those
    /// written under a higher token are a later term's, and end this
    /// leader's duty, unless its own term is still valid now, after the
    /// read. Then no later term can have begun (never two valid terms):
    /// the higher token is history from before the set's leader record
    /// went back (a store that lost writes, or hand-written records), and
    /// giving up to it would resign and win again without end.
    fn may_write_over(&self, stored: &Stored, term: &Term) -> bool {
        let highest = stored.highest_token();
        if highest <= term.token() {
            return true;
        }
        if !term.is_valid() {
            return false;
        }
        tracing::warn!(
            set = %self.set,
            parts = highest,
            leader = term.token(),
            "the shard catalog was written under a higher token than this valid leader's: the set's leader record went back (lost writes?); writing over it"
        );
        true
    }

    /// Reads the catalog, and lists the source if the catalog is older
    /// than the refresh period (or missing, or torn). Returns until when
    /// the catalog is fresh, or `None` if this leader is deposed.
    async fn tick(&self, term: &Term) -> Result<Option<WallTime>, String> {
        let store = &*self.store;
        let stored = self
            .bounded(read_parts(store, &self.set, 1))
            .await
            .map_err(|e| e.to_string())?;
        if !self.may_write_over(&stored, term) {
            return Ok(None);
        }
        let now = self.clock.now().wall;
        if let Some(current) = stored.catalog() {
            if fresh(current.listed_at, now, self.refresh) {
                return Ok(Some(current.listed_at + self.refresh));
            }
        }
        let listed = tokio::time::timeout(self.term, self.source.list())
            .await
            .map_err(|_| format!("the shard source did not answer within {:?}", self.term))?
            .map_err(|e| format!("the shard source failed: {e}"))?;
        let listed = checked(&self.set, listed)?;
        let done = self
            .bounded(finished(store, &self.set))
            .await
            .map_err(|e| e.to_string())?;
        let shards: Vec<SourceShard> = listed
            .into_iter()
            .filter(|s| !done.contains(&s.name))
            .collect();
        if !term.is_valid() {
            return Ok(None);
        }
        // The parts the new catalog replaces, all of them read (a longer
        // catalog before leaves parts past the new end, which readers
        // ignore: part 0 names the count).
        let n = split(&shards).len() as u64;
        let stored = self
            .bounded(read_parts(store, &self.set, n))
            .await
            .map_err(|e| e.to_string())?;
        if !self.may_write_over(&stored, term) {
            return Ok(None);
        }
        let now = self.clock.now().wall;
        let write = write_catalog(
            store,
            &self.set,
            term.token(),
            self.term,
            now,
            &stored,
            &shards,
            true,
        );
        match self.bounded(write).await {
            Ok(written) => {
                tracing::debug!(set = %self.set, generation = written.generation, shards = written.shards.len(), "shard catalog written");
                Ok(Some(written.listed_at + self.refresh))
            }
            Err(WriteError::Superseded) => Ok(None),
            // Another leader wrote in between: look again at once.
            Err(WriteError::Conflict) => Ok(Some(now)),
            Err(WriteError::Store(e)) => Err(e.to_string()),
        }
    }
}

/// Whether a catalog listed at `listed_at` is fresh at `now`: listed less
/// than `refresh` ago by this clock. A listing stamped `refresh` or more
/// ahead of this clock (by a host whose clock runs ahead) is not: taken at
/// its word it would stop every refresh until this clock caught up.
fn fresh(listed_at: WallTime, now: WallTime, refresh: Duration) -> bool {
    now < listed_at + refresh && listed_at < now + refresh
}

/// Follows the set's catalog for one member: reads it every `poll`, and
/// at once when `read_now` is notified (the member's feed delivered a
/// write of a part), and sends each catalog that is not the one it sent
/// last (another token or generation) on `tx`, until `stop` is cancelled
/// or `tx` has no receiver. Not "only a higher generation": the store's catalog is the
/// truth, and a store that lost writes, or a leader record that went
/// back, restarts generations lower.
pub(crate) async fn follow(
    store: Arc<dyn LeaseStore>,
    set: String,
    (poll, op_timeout): (Duration, Duration),
    clock: Arc<dyn Clock>,
    tx: watch::Sender<Option<Arc<ShardCatalog>>>,
    (read_now, stop): (
        Arc<tokio::sync::Notify>,
        tokio_util::sync::CancellationToken,
    ),
) {
    while !stop.is_cancelled() {
        match bounded(&*clock, op_timeout, read_catalog(&*store, &set)).await {
            Ok(Some(catalog)) => {
                let other = tx
                    .borrow()
                    .as_ref()
                    .is_none_or(|c| (c.token, c.generation) != (catalog.token, catalog.generation));
                if other {
                    tx.send_replace(Some(Arc::new(catalog)));
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(set = %set, error = %e, "the shard catalog could not be read")
            }
        }
        tokio::select! {
            () = tx.closed() => return,
            () = stop.cancelled() => return,
            () = read_now.notified() => {}
            () = clock.sleep_until(clock.now().mono + poll) => {}
        }
    }
}

/// Why [`Shards::mark_finished`](super::Shards::mark_finished) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FinishError {
    /// The term given has ended (or is not this set's term of the shard):
    /// only a holder may say a shard is finished.
    #[error(
        "shard {shard:?} cannot be marked finished: pass the valid term this member holds it under"
    )]
    NotHeld {
        /// The shard named.
        shard: String,
    },
    /// The store failed; the mark may or may not be written (marking
    /// again is harmless).
    #[error("marking shard {shard:?} finished failed: {source}")]
    Store {
        /// The shard named.
        shard: String,
        /// What the store said.
        #[source]
        source: StoreError,
    },
}

/// Marks `shard` finished under `term`, the shard's own: a record
/// `SET/finished/SHARD` created with the term's token. Already marked is
/// success. Gives up when the term ends (on `clock`), even with a store
/// request unanswered.
pub(crate) async fn mark_finished(
    store: &dyn LeaseStore,
    set: &str,
    shard: &str,
    term: &Term,
    clock: &dyn Clock,
) -> Result<(), FinishError> {
    let not_held = || FinishError::NotHeld {
        shard: shard.to_owned(),
    };
    tokio::select! {
        r = mark(store, set, shard, term, clock.now().wall) => r,
        // The deadline as renewals move it, not as it was at the call.
        () = term.expired() => Err(not_held()),
    }
}

async fn mark(
    store: &dyn LeaseStore,
    set: &str,
    shard: &str,
    term: &Term,
    now: WallTime,
) -> Result<(), FinishError> {
    if !term.is_valid() || term.group().as_str() != super::shard_group(set, shard) {
        return Err(FinishError::NotHeld {
            shard: shard.to_owned(),
        });
    }
    let failed = |source| FinishError::Store {
        shard: shard.to_owned(),
        source,
    };
    let group = group(format!("{}{shard}", finished_prefix(set))).map_err(failed)?;
    let record = LeaseRecord {
        holder: None,
        token: term.token(),
        term: Duration::ZERO,
        renewed_at: now,
        expires_at: now,
        metadata: Metadata::new().with(FINISHED_KEY, term.token().to_string()),
    };
    // Written on the version read (a store may show a group never written
    // as a released record); a conflict is another write of the mark, or
    // of a record that is none, so read again, a few times.
    for _ in 0..3 {
        let current = store.read(&group).await.map_err(failed)?;
        if current
            .as_ref()
            .is_some_and(|v| is_finished_mark(&v.record))
        {
            return Ok(());
        }
        let expected = current.map(|v| v.version);
        if let CasOutcome::Applied(_) = store
            .compare_and_swap(&group, expected, &record)
            .await
            .map_err(failed)?
        {
            return Ok(());
        }
    }
    Err(failed(StoreError::Misconfigured {
        message: format!(
            "the finished mark {group} keeps changing under tenure's writes: another program writes it"
        ),
        source: None,
    }))
}

/// Checks a catalog configuration.
pub(crate) fn check_refresh(refresh: Duration) -> Result<(), ConfigError> {
    if refresh.is_zero() {
        return Err(ConfigError::timing(
            "the catalog's refresh period is zero: give how often the source is listed, such as 60s",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;

    fn names(n: usize) -> Vec<SourceShard> {
        (0..n)
            .map(|i| SourceShard::new(format!("shardId-{i:012}")))
            .collect()
    }

    fn stored(records: Vec<Option<LeaseRecord>>) -> Stored {
        Stored {
            parts: records
                .into_iter()
                .map(|r| r.map(|r| (Version(1), r)))
                .collect(),
        }
    }

    #[test]
    fn a_child_is_ready_once_its_parents_left_the_catalog() {
        let catalog = ShardCatalog {
            generation: 1,
            token: 1,
            shards: vec![
                SourceShard::new("a"),
                SourceShard::new("b").after(["a"]),
                SourceShard::new("c").after(["gone"]),
            ],
            listed_at: WallTime::from_millis(0),
        };
        assert_eq!(catalog.ready(), ["a", "c"]);
    }

    #[test]
    fn big_lists_split_into_parts_under_the_metadata_bound() {
        let shards = names(1000);
        let parts = split(&shards);
        assert!(parts.len() > 1);
        assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), 1000);
        for p in &parts {
            let json = serde_json::to_string(&Part {
                g: u64::MAX,
                n: u64::MAX,
                s: p.clone(),
            })
            .unwrap();
            assert!(Metadata::new().with(PART_KEY, json).validate().is_ok());
        }
        assert_eq!(split(&[]), vec![Vec::<SourceShard>::new()]);
    }

    /// Writes `shards` under `token` on the parts `stored` read (at a wall
    /// time of `token` ms).
    async fn write_on(
        store: &MemoryStore,
        stored: &Stored,
        token: u64,
        shards: &[SourceShard],
    ) -> Result<ShardCatalog, WriteError> {
        let at = WallTime::from_millis(token);
        write_catalog(
            store,
            "s",
            token,
            Duration::from_secs(10),
            at,
            stored,
            shards,
            false,
        )
        .await
    }

    /// Reads the parts, then writes on them.
    async fn write(store: &MemoryStore, token: u64, shards: &[SourceShard]) -> ShardCatalog {
        let stored = read_parts(store, "s", 1).await.unwrap();
        write_on(store, &stored, token, shards).await.unwrap()
    }

    async fn read(store: &MemoryStore) -> ShardCatalog {
        read_catalog(store, "s")
            .await
            .unwrap()
            .expect("a whole catalog")
    }

    #[tokio::test]
    async fn a_written_catalog_reads_back_whole() {
        let store = MemoryStore::new();
        let shards = names(500);
        let written = write(&store, 3, &shards).await;
        assert_eq!(written.generation, 1);
        assert_eq!(read(&store).await, written);
        // The same list again keeps the generation; a change raises it.
        assert_eq!(write(&store, 3, &shards).await.generation, 1);
        assert_eq!(write(&store, 3, &shards[..10]).await.generation, 2);
        // The shorter catalog's trailing old parts are ignored.
        assert_eq!(read(&store).await.shards.len(), 10);
    }

    #[tokio::test]
    async fn a_lower_token_never_overwrites_a_higher_one() {
        let store = MemoryStore::new();
        let empty = read_parts(&store, "s", 1).await.unwrap();
        write_on(&store, &empty, 5, &names(2)).await.unwrap();
        // A deposed leader that read before the write: its swap conflicts.
        assert!(matches!(
            write_on(&store, &empty, 4, &names(1)).await,
            Err(WriteError::Conflict)
        ));
        // One that reads after it: it sees the higher token and stops.
        let now = read_parts(&store, "s", 1).await.unwrap();
        assert!(matches!(
            write_on(&store, &now, 4, &names(1)).await,
            Err(WriteError::Superseded)
        ));
        assert_eq!(read(&store).await.shards.len(), 2);
    }

    #[test]
    fn torn_and_hostile_parts_are_no_catalog() {
        let part = |g: u64, n: u64| LeaseRecord {
            holder: None,
            token: 1,
            term: Duration::ZERO,
            renewed_at: WallTime::from_millis(0),
            expires_at: WallTime::from_millis(0),
            metadata: Metadata::new().with(
                PART_KEY,
                serde_json::to_string(&Part { g, n, s: names(1) }).unwrap(),
            ),
        };
        assert!(stored(vec![Some(part(2, 2)), Some(part(1, 2))])
            .catalog()
            .is_none());
        assert!(stored(vec![Some(part(2, 2)), None]).catalog().is_none());
        assert!(stored(vec![Some(part(2, 2)), Some(part(2, 2))])
            .catalog()
            .is_some());
        // The same generation and count written by two leaders (each read
        // the same parts and wrote the next generation): no catalog.
        let mut later = part(2, 2);
        later.token = 2;
        assert!(stored(vec![Some(part(2, 2)), Some(later)])
            .catalog()
            .is_none());
        let mut junk = part(1, 1);
        junk.metadata = Metadata::new().with(PART_KEY, "{\"g\":1,\"n\":0,\"s\":[]}");
        assert!(stored(vec![Some(junk.clone())]).catalog().is_none());
        junk.metadata = Metadata::new().with(PART_KEY, "not json");
        assert!(stored(vec![Some(junk.clone())]).catalog().is_none());
        junk.metadata =
            Metadata::new().with(PART_KEY, format!("{{\"g\":1,\"n\":{},\"s\":[]}}", u64::MAX));
        assert!(stored(vec![Some(junk)]).catalog().is_none());
    }

    #[test]
    fn a_listing_is_fresh_for_a_refresh_and_never_from_far_ahead() {
        let refresh = Duration::from_secs(60);
        let at = |s: u64| WallTime::from_millis(1_000_000 + s * 1000);
        assert!(fresh(at(0), at(0), refresh));
        assert!(fresh(at(0), at(59), refresh));
        assert!(!fresh(at(0), at(60), refresh));
        // A clock a little ahead of this one: still fresh.
        assert!(fresh(at(30), at(0), refresh));
        // Stamped a refresh or more ahead: not trusted.
        assert!(!fresh(at(60), at(0), refresh));
        assert!(!fresh(at(7200), at(0), refresh));
    }

    #[test]
    fn a_source_listing_bad_names_is_refused() {
        assert!(checked("s", vec![SourceShard::new("a"), SourceShard::new("a")]).is_err());
        assert!(checked("s", vec![SourceShard::new("")]).is_err());
        assert!(checked("s", vec![SourceShard::new("x".repeat(300))]).is_err());
        assert!(checked("s", names(3)).is_ok());
        // A shard its own parent, or a cycle of parents: never ready.
        assert!(checked("s", vec![SourceShard::new("a").after(["a"])]).is_err());
        let cycle = vec![
            SourceShard::new("a").after(["c"]),
            SourceShard::new("b").after(["a"]),
            SourceShard::new("c").after(["b", "gone"]),
            SourceShard::new("d"),
        ];
        assert!(checked("s", cycle).unwrap_err().contains("after itself"));
        // A diamond (a merge of a split's children) is no cycle.
        let diamond = vec![
            SourceShard::new("p"),
            SourceShard::new("l").after(["p"]),
            SourceShard::new("r").after(["p"]),
            SourceShard::new("m").after(["l", "r", "gone"]),
        ];
        assert!(checked("s", diamond).is_ok());
    }
}
