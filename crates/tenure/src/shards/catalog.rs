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

use super::layout::{catalog_group, finished_group, finished_prefix};
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
/// Bytes of shard list per part, **as stored**: a part is a JSON document
/// kept as a JSON string inside the record's metadata, so every `"` and
/// `\` of the shards' own JSON is escaped once more. With the part's
/// header (two `u64`s) and the metadata's own key, a part stays under
/// [`MAX_METADATA_BYTES`](crate::record::MAX_METADATA_BYTES) (4,096).
const PART_BYTES: usize = 3500;
/// The most shards a catalog holds: as many as a Kinesis stream's listing
/// may bring (`tenure_kinesis::MAX_LISTED_SHARDS`). A source listing more
/// is refused ([`CatalogError::TooManyShards`]).
pub const MAX_CATALOG_SHARDS: usize = 100_000;
/// The most parents a shard may name (a Kinesis split names one, a merge
/// two). A shard naming more is left out of the catalog
/// ([`CatalogError::TooManyParents`]).
pub const MAX_PARENTS: usize = 16;
/// The most parts a catalog has, and a reader follows: what
/// [`MAX_CATALOG_SHARDS`] Kinesis shards need at [`PART_BYTES`] a part
/// (a 20-byte shard id and two parents, about 110 bytes stored each:
/// about 3,200 parts), with room to spare. A listing that needs more is
/// refused ([`CatalogError::TooManyParts`]); a part 0 claiming more is no
/// catalog part, and a valid leader writes over it.
const MAX_PARTS: u64 = 4096;
/// Parts read at once after part 0, doubling up to [`MAX_PART_BATCH`]; a
/// reader stops at the first part that is missing or not of part 0's
/// catalog, so a part 0 claiming many parts that are not there costs one
/// batch.
const FIRST_PART_BATCH: u64 = 16;
/// The most parts read in one batch.
const MAX_PART_BATCH: u64 = 1024;

/// Why a source's listing, or one shard of it, cannot be published in the
/// catalog. A shard-level problem leaves that shard out (reported as
/// [`ShardEvent::ShardLeftOut`](super::ShardEvent::ShardLeftOut)) and the
/// others are published; a catalog-level one keeps the catalog as it was
/// (reported as [`ShardEvent::CatalogFailed`](super::ShardEvent::CatalogFailed)).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// The shard's name cannot name its groups (empty, too long, control
    /// characters).
    #[error("shard {shard:?} is left out of the catalog: {problem} (give the source shard names of 1 to {max} bytes without control characters)")]
    BadName {
        /// The shard's name as listed.
        shard: String,
        /// What is wrong with it.
        problem: String,
        /// The longest name, in bytes.
        max: usize,
    },
    /// A parent's name is no shard name: the shard could never be told
    /// its parent finished.
    #[error("shard {shard:?} is left out of the catalog: its parent {parent:?} is no valid shard name ({problem})")]
    BadParent {
        /// The shard's name.
        shard: String,
        /// The parent named.
        parent: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The shard names more parents than a catalog holds.
    #[error("shard {shard:?} is left out of the catalog: it names {parents} parents, at most {max} are allowed")]
    TooManyParents {
        /// The shard's name.
        shard: String,
        /// How many parents it names.
        parents: usize,
        /// [`MAX_PARENTS`].
        max: usize,
    },
    /// The shard, stored (its name and parents, escaped twice), is larger
    /// than one catalog part holds.
    #[error("shard {shard:?} is left out of the catalog: it takes {bytes} bytes stored, a catalog part holds {max} (shorten its name or its parents' names, or name fewer parents)")]
    TooLarge {
        /// The shard's name.
        shard: String,
        /// Its size as stored.
        bytes: usize,
        /// The most a part holds.
        max: usize,
    },
    /// The source listed more shards than a catalog holds.
    #[error("the source listed {shards} shards, a catalog holds at most {max}: the catalog is kept as it was")]
    TooManyShards {
        /// How many were listed.
        shards: usize,
        /// [`MAX_CATALOG_SHARDS`].
        max: usize,
    },
    /// The listing needs more parts than a catalog may have.
    #[error("the listing needs {parts} catalog parts, at most {max} are allowed (shorter names, fewer parents): the catalog is kept as it was")]
    TooManyParts {
        /// How many parts it needs.
        parts: usize,
        /// The most parts.
        max: u64,
    },
}

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

fn group(name: String) -> Result<GroupName, StoreError> {
    GroupName::new(name).map_err(|e| StoreError::Misconfigured {
        message: e.to_string(),
        source: None,
    })
}

/// The bytes `shard` takes in a part as stored: its JSON, escaped again
/// as part of a JSON string, and a comma.
fn stored_size(shard: &SourceShard) -> usize {
    serde_json::to_string(shard)
        .and_then(|json| serde_json::to_string(&json))
        .map_or(usize::MAX, |twice| twice.len().saturating_sub(2) + 1)
}

/// Splits `shards` into parts of at most [`PART_BYTES`] each as stored
/// (at least one, empty for an empty list; a shard larger than that, which
/// [`checked`] leaves out, would take a part of its own).
fn split(shards: &[SourceShard]) -> Vec<Vec<SourceShard>> {
    let mut parts = vec![Vec::new()];
    let mut bytes = 0;
    for shard in shards {
        let size = stored_size(shard);
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

    /// Why the parts read are no whole catalog, or `None` if they are one,
    /// or there is no catalog at all (no part 0 yet).
    fn problem(&self) -> Option<String> {
        let first = self.parts.first()?.as_ref();
        let (_, first) = first?;
        let Some(head) = decode(first) else {
            return Some(format!(
                "catalog part 0 is no catalog part (undecodable, or claiming more than {MAX_PARTS} parts)"
            ));
        };
        let n = usize::try_from(head.n).unwrap_or(usize::MAX);
        for k in 1..n {
            let Some(Some((_, record))) = self.parts.get(k) else {
                return Some(format!(
                    "catalog part {k} of {n} (generation {}) is missing",
                    head.g
                ));
            };
            match decode(record) {
                None => return Some(format!("catalog part {k} of {n} is no catalog part")),
                Some(p) if p.g != head.g || p.n != head.n || record.token != first.token => {
                    return Some(format!(
                        "catalog part {k} of {n} is of generation {} under token {}, part 0 of generation {} under token {}",
                        p.g, record.token, head.g, first.token
                    ))
                }
                Some(_) => {}
            }
        }
        None
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

/// Reads part 0, then the other parts it names while they are of its
/// catalog (in batches from [`FIRST_PART_BATCH`] parts, doubling: a part
/// 0 that claims parts which are not there costs one batch, not a read of
/// every part it claims), and `at_least` parts in all, for a writer that
/// must see the parts it is about to replace.
async fn read_parts(
    store: &dyn LeaseStore,
    set: &str,
    at_least: u64,
) -> Result<Stored, StoreError> {
    let first = store.read(&group(catalog_group(set, 0))?).await?;
    let head = first
        .as_ref()
        .and_then(|v| decode(&v.record).map(|p| (p.g, p.n, v.record.token)));
    let claimed = head.map_or(1, |(_, n, _)| n);
    let at_least = at_least.min(MAX_PARTS);
    let mut whole = head.is_some();
    let mut parts = vec![first.map(|v| (v.version, v.record))];
    let (mut next, mut batch) = (1_u64, FIRST_PART_BATCH);
    loop {
        let end = if whole {
            claimed.max(at_least)
        } else {
            at_least
        };
        if next >= end {
            break;
        }
        let upto = end.min(next.saturating_add(batch));
        let groups = (next..upto)
            .map(|k| group(catalog_group(set, k)))
            .collect::<Result<Vec<_>, _>>()?;
        for (k, read) in (next..upto).zip(store.read_many(&groups).await?) {
            let read = read?;
            if whole && k < claimed {
                let same = read
                    .as_ref()
                    .is_some_and(|v| decode(&v.record).map(|p| (p.g, p.n, v.record.token)) == head);
                whole &= same;
            }
            parts.push(read.map(|v| (v.version, v.record)));
        }
        next = upto;
        batch = batch.saturating_mul(2).min(MAX_PART_BATCH);
    }
    Ok(Stored { parts })
}

/// Reads the set's catalog: `None` if there is none yet, or it is torn.
#[cfg(test)]
async fn read_catalog(
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
        // A generation that cannot rise (a hostile part at `u64::MAX`)
        // starts again at 1: readers take any other (token, generation)
        // than theirs, so it is still seen as new.
        _ => stored.highest_generation().checked_add(1).unwrap_or(1),
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

/// Why one shard cannot be published, if it cannot: a name the set's
/// groups cannot carry, too many parents or a bad one, or more bytes
/// stored than a part holds.
fn unpublishable(set: &str, shard: &SourceShard) -> Option<CatalogError> {
    let bad_name = |problem: String| CatalogError::BadName {
        shard: shard.name.clone(),
        problem,
        max: MAX_GROUP_BYTES,
    };
    let named = check_name("shard name", &shard.name, MAX_GROUP_BYTES)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            GroupName::new(super::shard_group(set, &shard.name)).map_err(|e| e.to_string())
        })
        .and_then(|_| GroupName::new(finished_group(set, &shard.name)).map_err(|e| e.to_string()));
    if let Err(problem) = named {
        return Some(bad_name(problem));
    }
    if shard.parents.len() > MAX_PARENTS {
        return Some(CatalogError::TooManyParents {
            shard: shard.name.clone(),
            parents: shard.parents.len(),
            max: MAX_PARENTS,
        });
    }
    for parent in &shard.parents {
        if let Err(e) = check_name("parent shard name", parent, MAX_GROUP_BYTES) {
            return Some(CatalogError::BadParent {
                shard: shard.name.clone(),
                parent: parent.clone(),
                problem: e.to_string(),
            });
        }
    }
    let bytes = stored_size(shard);
    (bytes > PART_BYTES).then(|| CatalogError::TooLarge {
        shard: shard.name.clone(),
        bytes,
        max: PART_BYTES,
    })
}

/// Checks what a source listed: the shards that can be published, and why
/// each other one cannot (left out, so that one bad shard does not stop
/// the others). A listing that cannot be published at all (a name listed
/// twice, a shard waiting for itself, too many shards) is refused.
fn checked(
    set: &str,
    listed: Vec<SourceShard>,
) -> Result<(Vec<SourceShard>, Vec<CatalogError>), String> {
    if listed.len() > MAX_CATALOG_SHARDS {
        return Err(CatalogError::TooManyShards {
            shards: listed.len(),
            max: MAX_CATALOG_SHARDS,
        }
        .to_string());
    }
    let mut seen = BTreeSet::new();
    for shard in &listed {
        if !seen.insert(shard.name.as_str()) {
            return Err(format!("the source listed shard {:?} twice", shard.name));
        }
    }
    let (mut kept, mut left_out) = (Vec::with_capacity(listed.len()), Vec::new());
    for shard in listed {
        match unpublishable(set, &shard) {
            Some(why) => left_out.push(why),
            None => kept.push(shard),
        }
    }
    if let Some(shard) = waits_for_itself(&kept) {
        return Err(format!(
            "the source listed shard {shard:?} after itself (through its parents): it could never be assigned"
        ));
    }
    Ok((kept, left_out))
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

/// Failed refreshes in a row after which a catalog leader hands the duty
/// on, the first time: at a retry every quarter term, about a term of
/// failures. A leader whose own source fails (credentials expired on its
/// host, a host-local network fault) must not keep the duty from a member
/// whose source works.
pub(crate) const GIVE_UP_AFTER: u32 = 4;

/// The most a hand-over's pacing doubles (see [`Pacing`]): a member
/// waits at most `2^3 = 8` terms before standing again, and leads at
/// most 8 terms of failed refreshes before handing on.
pub(crate) const MOST_DOUBLINGS: u32 = 3;

/// How a member paces the catalog duty when its refreshes fail.
///
/// After its `k`-th hand-over in a row (with no catalog listed by anyone
/// since its last), a member waits `2^(k−1)` terms before standing again
/// (at most [`MOST_DOUBLINGS`] doublings), and, should it lead again before
/// anyone lists the source, hands on only after `GIVE_UP_AFTER · 2^k`
/// failures. A source failing on one member only moves the duty on within
/// about a term, to a member whose source works (which then lists it, and
/// the pacing starts over); a source failing on every member moves the
/// duty ever more slowly (each member's leads and waits double, to 8
/// terms), not every term.
#[derive(Debug, Default)]
pub(crate) struct Pacing {
    /// Refreshes failed in a row, across terms.
    failures: u32,
    /// Hand-overs in a row without a catalog listed since.
    handed_on: u32,
    /// When the last of them was, by this member's wall clock.
    handed_on_at: Option<WallTime>,
}

impl Pacing {
    /// A refresh that succeeded (or found the catalog fresh).
    fn succeeded(&mut self) {
        *self = Pacing::default();
    }

    /// Someone listed the source at `listed_at`: if after the last
    /// hand-over, the duty is done elsewhere, and the pacing starts over.
    fn listed(&mut self, listed_at: WallTime) {
        if self.handed_on_at.is_some_and(|at| listed_at > at) {
            self.handed_on = 0;
            self.handed_on_at = None;
        }
    }

    /// A refresh that failed: whether to hand the duty on now.
    fn failed(&mut self) -> bool {
        self.failures = self.failures.saturating_add(1);
        let limit = GIVE_UP_AFTER << self.handed_on.min(MOST_DOUBLINGS);
        self.failures >= limit
    }

    /// The duty is handed on at `now`: how long to wait, in terms, before
    /// standing again.
    fn hand_on(&mut self, now: WallTime) -> u32 {
        self.failures = 0;
        self.handed_on = self.handed_on.saturating_add(1);
        self.handed_on_at = Some(now);
        1 << (self.handed_on - 1).min(MOST_DOUBLINGS)
    }
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
    /// Builds the elector that stands for the duty again after a back-off.
    pub(crate) stand: Box<dyn Fn() -> Result<Elector, ElectorError> + Send + Sync>,
    /// How the duty is paced when refreshes fail.
    pub(crate) pacing: std::sync::Mutex<Pacing>,
    /// The shards left out at the last refresh (reported when this
    /// changes, not at every refresh).
    pub(crate) left_out: std::sync::Mutex<BTreeSet<String>>,
}

/// Why a term's duty ended early.
#[derive(Debug)]
enum LeadError {
    /// The duty failed [`GIVE_UP_AFTER`] times in a row: hand it on.
    GaveUp,
    /// The elector failed for good.
    Elector(ElectorError),
}

impl From<ElectorError> for LeadError {
    fn from(e: ElectorError) -> Self {
        LeadError::Elector(e)
    }
}

/// Stops a catalog leader (see [`Leader::run`]).
pub(crate) struct LeaderHandle {
    pub(crate) stop: tokio_util::sync::CancellationToken,
    pub(crate) done: tokio::task::JoinHandle<()>,
}

impl LeaderHandle {
    /// Stops standing for the duty (a leader drains and releases it) and
    /// returns once done.
    pub(crate) async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.done.await;
    }
}

impl Leader {
    /// Runs the catalog duty in every term `elector` wins, until `stop` is
    /// cancelled or the elector fails for good. A leader whose refreshes
    /// keep failing resigns, stops standing for a back-off, and stands
    /// again (see [`Pacing`]).
    pub(crate) async fn run(self, mut elector: Elector, stop: tokio_util::sync::CancellationToken) {
        let this = Arc::new(self);
        loop {
            let result = {
                let leader = this.clone();
                let run = elector.run_while_leader(move |term| {
                    let leader = leader.clone();
                    async move { leader.lead(term).await }
                });
                tokio::pin!(run);
                tokio::select! {
                    biased;
                    r = &mut run => r,
                    () = stop.cancelled() => {
                        let ((), r) = tokio::join!(elector.shutdown(), &mut run);
                        if let Err(LeadError::Elector(e)) = r {
                            tracing::error!(error = %e, "the catalog leader's elector stopped");
                        }
                        return;
                    }
                }
            };
            match result {
                Ok(()) => return,
                Err(LeadError::Elector(e)) => {
                    tracing::error!(error = %e, "the catalog leader's elector stopped");
                    return;
                }
                Err(LeadError::GaveUp) => {}
            }
            elector.shutdown().await;
            let backoff = this.backoff();
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = this.clock.sleep_until(this.clock.now().mono + backoff) => {}
            }
            elector = match (this.stand)() {
                Ok(elector) => elector,
                Err(e) => {
                    tracing::error!(set = %this.set, error = %e, "cannot stand for the shard catalog's duty again");
                    return;
                }
            };
        }
    }

    /// How long to wait before standing again after a hand-over.
    fn backoff(&self) -> Duration {
        let terms = self.pacing().hand_on(self.clock.now().wall);
        self.term.saturating_mul(terms)
    }

    fn pacing(&self) -> std::sync::MutexGuard<'_, Pacing> {
        self.pacing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `op`, bounded by the operation timeout.
    async fn bounded<T, E: From<StoreError>>(
        &self,
        op: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        bounded(&*self.clock, self.op_timeout, op).await
    }

    /// One term's duty: keep the catalog fresh until the term ends, or
    /// give it up after failed refreshes in a row (see [`Pacing`]).
    async fn lead(&self, term: Term) -> Result<(), LeadError> {
        // After a failure, try again within a fraction of the term, never
        // faster than a tenth of it.
        let retry = (self.term / 4).max(Duration::from_millis(10));
        loop {
            let wait = match self.tick(&term).await {
                Ok(Some(fresh_until)) => {
                    self.pacing().succeeded();
                    let now = self.clock.now().wall;
                    Duration::from_millis(fresh_until.as_millis().saturating_sub(now.as_millis()))
                        .max(retry / 2)
                }
                Ok(None) => return Ok(()),
                Err(why) => {
                    let _ = self
                        .events
                        .send(super::ShardEvent::CatalogFailed { error: why.clone() });
                    let give_up = self.pacing().failed();
                    if give_up {
                        tracing::warn!(set = %self.set, error = %why, "the shard catalog was not refreshed, again; handing the duty on to another member");
                        return Err(LeadError::GaveUp);
                    }
                    tracing::warn!(set = %self.set, error = %why, "the shard catalog was not refreshed; trying again");
                    retry
                }
            };
            tokio::select! {
                biased;
                () = term.cancelled() => return Ok(()),
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
            self.pacing().listed(current.listed_at);
            if fresh(current.listed_at, now, self.refresh) {
                return Ok(Some(current.listed_at + self.refresh));
            }
        }
        let listed = tokio::time::timeout(self.term, self.source.list())
            .await
            .map_err(|_| format!("the shard source did not answer within {:?}", self.term))?
            .map_err(|e| format!("the shard source failed: {e}"))?;
        let (listed, left_out) = checked(&self.set, listed)?;
        self.report_left_out(left_out);
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
        let parts = split(&shards).len();
        if parts as u64 > MAX_PARTS {
            return Err(CatalogError::TooManyParts {
                parts,
                max: MAX_PARTS,
            }
            .to_string());
        }
        let n = parts as u64;
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

impl Leader {
    /// Reports the shards left out of the catalog when they change: a
    /// warning and a [`ShardEvent::ShardLeftOut`](super::ShardEvent::ShardLeftOut)
    /// each, once, not at every refresh.
    fn report_left_out(&self, left_out: Vec<CatalogError>) {
        let mut reported = self
            .left_out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now: BTreeSet<String> = left_out.iter().map(|e| shard_of(e).to_owned()).collect();
        for error in left_out {
            let shard = shard_of(&error).to_owned();
            if reported.contains(&shard) {
                continue;
            }
            tracing::warn!(set = %self.set, error = %error, "a shard the source listed cannot be published");
            metrics::counter!("tenure_shard_catalog_left_out_total", "set" => self.set.clone())
                .increment(1);
            let _ = self
                .events
                .send(super::ShardEvent::ShardLeftOut { shard, error });
        }
        *reported = now;
    }
}

/// The shard a shard-level [`CatalogError`] names (empty for a
/// catalog-level one).
fn shard_of(error: &CatalogError) -> &str {
    match error {
        CatalogError::BadName { shard, .. }
        | CatalogError::BadParent { shard, .. }
        | CatalogError::TooManyParents { shard, .. }
        | CatalogError::TooLarge { shard, .. } => shard,
        CatalogError::TooManyShards { .. } | CatalogError::TooManyParts { .. } => "",
    }
}

/// Whether a catalog listed at `listed_at` is fresh at `now`: listed less
/// than `refresh` ago by this clock. A listing stamped `refresh` or more
/// ahead of this clock (by a host whose clock runs ahead) is not: taken at
/// its word it would stop every refresh until this clock caught up.
fn fresh(listed_at: WallTime, now: WallTime, refresh: Duration) -> bool {
    now < listed_at + refresh && listed_at < now + refresh
}

/// Reads in a row that found the catalog unreadable (a store failure, or
/// parts torn or hostile) before a member counts it unreadable: a catalog
/// read while its leader writes it may be torn for a moment.
const UNREADABLE_AFTER: u32 = 2;

/// While the catalog stays unreadable, a member warns at most once per
/// this much time.
const UNREADABLE_WARN_EVERY: Duration = Duration::from_secs(60);

/// The longest reason a member publishes under
/// [`CATALOG_UNREADABLE_KEY`](crate::record::CATALOG_UNREADABLE_KEY).
const MOST_REASON_BYTES: usize = 200;

/// What a member's follower knows of its own reads of the catalog: whether
/// they fail, since when it warned, what it published.
struct Unreadable {
    set: String,
    member: String,
    membership: Elector,
    /// Failed reads in a row.
    failed: u32,
    /// When it last warned, while the catalog stays unreadable.
    warned: Option<crate::clock::MonoTime>,
    /// Whether the reason is published in the membership record.
    published: bool,
}

impl Unreadable {
    /// A read that found a whole catalog, or none at all yet.
    fn read(&mut self) {
        self.failed = 0;
        if self.warned.take().is_some() {
            tracing::info!(set = %self.set, member = %self.member, "the shard catalog is readable again");
        }
        if self.published {
            self.published = false;
            let _ = self.membership.update_metadata(|m| {
                m.remove(crate::record::CATALOG_UNREADABLE_KEY);
            });
        }
    }

    /// A read that failed, or found no whole catalog, for `why`.
    fn failed(&mut self, why: &str, now: crate::clock::MonoTime) {
        self.failed = self.failed.saturating_add(1);
        if self.failed < UNREADABLE_AFTER {
            tracing::debug!(set = %self.set, error = %why, "the shard catalog could not be read");
            return;
        }
        metrics::counter!(
            "tenure_shard_catalog_unreadable_total",
            "set" => self.set.clone(),
            "member" => self.member.clone()
        )
        .increment(1);
        if self
            .warned
            .is_none_or(|at| now >= at + UNREADABLE_WARN_EVERY)
        {
            self.warned = Some(now);
            tracing::warn!(set = %self.set, member = %self.member, error = %why, reads = self.failed, "this member cannot read the shard catalog: it stands for no shard it has not read in one");
        }
        if !self.published {
            let mut reason: String = why.chars().filter(|c| !c.is_control()).collect();
            if reason.len() > MOST_REASON_BYTES {
                let mut end = MOST_REASON_BYTES;
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                reason.truncate(end);
            }
            let published = self.membership.update_metadata(|m| {
                m.insert(crate::record::CATALOG_UNREADABLE_KEY, reason);
            });
            match published {
                Ok(()) => self.published = true,
                Err(e) => {
                    tracing::debug!(set = %self.set, error = %e, "cannot publish that the shard catalog is unreadable");
                }
            }
        }
    }
}

/// Follows the set's catalog for one member: reads it every `poll`, and
/// at once when `read_now` is notified (the member's feed delivered a
/// write of a part), and sends each catalog that is not the one it sent
/// last (another token or generation) on `tx`, until `stop` is cancelled
/// or `tx` has no receiver. Not "only a higher generation": the store's catalog is the
/// truth, and a store that lost writes, or a leader record that went
/// back, restarts generations lower.
///
/// A catalog it cannot read ([`UNREADABLE_AFTER`] reads in a row that
/// failed, or found parts but no whole catalog) is warned of (at most
/// once per [`UNREADABLE_WARN_EVERY`]), counted
/// (`tenure_shard_catalog_unreadable_total`), and published in the
/// member's record under
/// [`CATALOG_UNREADABLE_KEY`](crate::record::CATALOG_UNREADABLE_KEY).
#[allow(
    clippy::too_many_arguments,
    reason = "the follower's whole context, each a distinct input"
)]
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
    (member, membership): (String, Elector),
) {
    let mut unreadable = Unreadable {
        set: set.clone(),
        member,
        membership,
        failed: 0,
        warned: None,
        published: false,
    };
    while !stop.is_cancelled() {
        let read = bounded(&*clock, op_timeout, read_parts(&*store, &set, 1)).await;
        match read {
            Ok(stored) => match stored.catalog() {
                Some(catalog) => {
                    unreadable.read();
                    let other = tx.borrow().as_ref().is_none_or(|c| {
                        (c.token, c.generation) != (catalog.token, catalog.generation)
                    });
                    if other {
                        tx.send_replace(Some(Arc::new(catalog)));
                    }
                }
                None => match stored.problem() {
                    None => unreadable.read(),
                    Some(why) => unreadable.failed(&why, clock.now().mono),
                },
            },
            Err(e) => unreadable.failed(&e.to_string(), clock.now().mono),
        }
        tokio::select! {
            biased;
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
/// request unanswered, and each store request after `op_timeout`: a
/// request whose reply was lost would otherwise hold the mark until the
/// term ends, which for a shard held and renewed is never (its children
/// then wait for ever).
pub(crate) async fn mark_finished(
    store: &dyn LeaseStore,
    set: &str,
    shard: &str,
    term: &Term,
    (clock, op_timeout): (&dyn Clock, Duration),
) -> Result<(), FinishError> {
    let not_held = || FinishError::NotHeld {
        shard: shard.to_owned(),
    };
    tokio::select! {
        biased;
        r = mark(store, set, shard, term, (clock, op_timeout)) => r,
        // The deadline as renewals move it, not as it was at the call.
        () = term.expired() => Err(not_held()),
    }
}

async fn mark(
    store: &dyn LeaseStore,
    set: &str,
    shard: &str,
    term: &Term,
    (clock, op_timeout): (&dyn Clock, Duration),
) -> Result<(), FinishError> {
    let now = clock.now().wall;
    if !term.is_valid() || term.group().as_str() != super::shard_group(set, shard) {
        return Err(FinishError::NotHeld {
            shard: shard.to_owned(),
        });
    }
    let failed = |source| FinishError::Store {
        shard: shard.to_owned(),
        source,
    };
    let group = group(finished_group(set, shard)).map_err(failed)?;
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
        let current = bounded(clock, op_timeout, store.read(&group))
            .await
            .map_err(failed)?;
        if current
            .as_ref()
            .is_some_and(|v| is_finished_mark(&v.record))
        {
            return Ok(());
        }
        let expected = current.map(|v| v.version);
        let swap = store.compare_and_swap(&group, expected, &record);
        if let CasOutcome::Applied(_) = bounded(clock, op_timeout, swap).await.map_err(failed)? {
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

    /// A part is a JSON string in the record's metadata: `"` and `\` are
    /// escaped once more. Sized on the shards' own JSON, 20 names of 120
    /// backslashes made parts of over 5,000 bytes stored.
    #[test]
    fn parts_are_sized_on_the_bytes_stored() {
        let escaping = |c: &str, n: usize| -> Vec<SourceShard> {
            (0..n)
                .map(|i| SourceShard::new(format!("{}{i:02}", c.repeat(118))))
                .collect()
        };
        let tenants: Vec<SourceShard> = (0..110)
            .map(|i| SourceShard::new(format!("{{\"t\":\"acme-{i:03}\"}}")))
            .collect();
        let largest = SourceShard::new("\"".repeat(240))
            .after((0..2).map(|i| format!("{i:02}{}", "\"".repeat(253))));
        assert!(unpublishable("s", &largest).is_none());
        for shards in [
            escaping("\\", 20),
            escaping("\"", 20),
            tenants,
            vec![largest.clone(), largest],
        ] {
            for p in split(&shards) {
                let json = serde_json::to_string(&Part {
                    g: u64::MAX,
                    n: u64::MAX,
                    s: p,
                })
                .unwrap();
                let metadata = Metadata::new().with(PART_KEY, json);
                assert!(metadata.validate().is_ok(), "{:?}", metadata.validate());
            }
        }
    }

    /// [`MAX_PARTS`] holds a catalog of [`MAX_CATALOG_SHARDS`] Kinesis
    /// shards, each naming two parents as a merge does.
    #[test]
    fn the_most_parts_hold_the_most_kinesis_shards() {
        let shards: Vec<SourceShard> = (0..MAX_CATALOG_SHARDS)
            .map(|i| {
                SourceShard::new(format!("shardId-{i:012}")).after([
                    format!("shardId-{:012}", i + MAX_CATALOG_SHARDS),
                    format!("shardId-{:012}", i + 2 * MAX_CATALOG_SHARDS),
                ])
            })
            .collect();
        let parts = split(&shards).len() as u64;
        assert!(parts <= MAX_PARTS, "{parts} parts");
        assert!(parts * 2 > MAX_PARTS, "{parts} parts: the bound is loose");
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
        // A shard that cannot be published is left out, the others kept.
        let (kept, left_out) = checked(
            "s",
            vec![
                SourceShard::new(""),
                SourceShard::new("x".repeat(300)),
                SourceShard::new("ok"),
                SourceShard::new("p").after(["bad\n"]),
                SourceShard::new("many").after((0..=MAX_PARENTS).map(|i| i.to_string())),
            ],
        )
        .unwrap();
        assert_eq!(kept, vec![SourceShard::new("ok")]);
        assert!(
            matches!(
                &left_out[..],
                [
                    CatalogError::BadName { .. },
                    CatalogError::BadName {
                        max: MAX_GROUP_BYTES,
                        ..
                    },
                    CatalogError::BadParent { .. },
                    CatalogError::TooManyParents {
                        parents: 17,
                        max: MAX_PARENTS,
                        ..
                    },
                ]
            ),
            "{left_out:?}"
        );
        assert!(
            left_out[3].to_string().contains("at most 16"),
            "{}",
            left_out[3]
        );
        // The most parents, each as long and as escaped as can be: too
        // large for a part, left out naming the limit.
        let huge = SourceShard::new("\"".repeat(240))
            .after((0..MAX_PARENTS).map(|i| format!("{i:02}{}", "\\".repeat(253))));
        let (kept, left_out) = checked("s", vec![huge]).unwrap();
        assert!(kept.is_empty());
        assert!(
            matches!(
                &left_out[..],
                [CatalogError::TooLarge {
                    max: PART_BYTES,
                    ..
                }]
            ),
            "{left_out:?}"
        );
        let many: Vec<SourceShard> = (0..=MAX_CATALOG_SHARDS)
            .map(|i| SourceShard::new(i.to_string()))
            .collect();
        assert!(checked("s", many).unwrap_err().contains("at most 100000"));
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
