//! The sharded tier's changing catalog (`--catalog`): the source the set's
//! catalog leader lists, changed during the fault phase as a resharded
//! stream changes (splits, merges, shards added and removed), what the
//! parents' holders marked finished, and the checks on both.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tenure::shards::SourceShard;
use tenure_testkit::{catalog::ScriptedSource, TermLog};
use tokio::time::Instant;

use crate::paused::lock;

/// What the work of a parent's holder needs to mark it finished: the
/// shards to finish, and when each was first marked.
#[derive(Clone, Default)]
pub(super) struct Finishing {
    /// Parents with children listed: their holders mark them finished.
    pub(super) closing: Arc<Mutex<BTreeSet<usize>>>,
    /// When a holder first called `mark_finished` on each shard (before
    /// the call: the mark cannot apply earlier).
    pub(super) marked: Arc<Mutex<BTreeMap<usize, Instant>>>,
}

impl Finishing {
    /// Whether shard `s` is to be marked finished; notes the first time.
    pub(super) fn to_mark(&self, s: usize) -> bool {
        if !lock(&self.closing).contains(&s) {
            return false;
        }
        lock(&self.marked).entry(s).or_insert_with(Instant::now);
        true
    }
}

/// The source and its history.
pub(super) struct CatalogSim {
    pub(super) source: ScriptedSource,
    pub(super) finishing: Finishing,
    /// What the source lists now.
    listed: Vec<SourceShard>,
    /// Every child ever listed, with its parents.
    parents: BTreeMap<usize, Vec<usize>>,
    /// The next unused shard index.
    next: usize,
    /// How many shard indices the run has logs for.
    capacity: usize,
    /// Changes of the source made.
    pub(super) reshards: u64,
    /// A negative control: the source lists children without their
    /// parents (the checker still knows them).
    forgets_parents: bool,
}

/// The shard named `i`.
fn shard(i: usize) -> SourceShard {
    SourceShard::new(i.to_string())
}

fn index(s: &SourceShard) -> Option<usize> {
    s.name.parse().ok()
}

impl CatalogSim {
    /// A source listing shards `0` to `shards − 1`, with room for
    /// `capacity` shards in all.
    pub(super) fn new(shards: usize, capacity: usize, forgets_parents: bool) -> Self {
        let listed: Vec<SourceShard> = (0..shards).map(shard).collect();
        CatalogSim {
            source: ScriptedSource::listing(listed.clone()),
            finishing: Finishing::default(),
            listed,
            parents: BTreeMap::new(),
            next: shards,
            capacity,
            reshards: 0,
            forgets_parents,
        }
    }

    /// How many shards were marked finished.
    pub(super) fn finished(&self) -> u64 {
        lock(&self.finishing.marked).len() as u64
    }

    /// Child `c` of `parents`, as the source lists it.
    fn child(&self, c: usize, parents: &[usize]) -> SourceShard {
        if self.forgets_parents {
            shard(c)
        } else {
            shard(c).after(parents.iter().map(usize::to_string))
        }
    }

    /// How often the catalog leader lists the source at `term`.
    pub(super) fn refresh(term: Duration) -> Duration {
        term / 2
    }

    /// The shards the checker counts in the catalog now: listed, and not
    /// marked finished.
    fn in_catalog(&self) -> BTreeSet<usize> {
        let marked = lock(&self.finishing.marked);
        self.listed
            .iter()
            .filter_map(index)
            .filter(|i| !marked.contains_key(i))
            .collect()
    }

    /// The shards the set must assign once it settles: those in the
    /// catalog none of whose parents still is.
    pub(super) fn ready(&self) -> BTreeSet<usize> {
        let present = self.in_catalog();
        present
            .iter()
            .copied()
            .filter(|i| {
                self.parents
                    .get(i)
                    .is_none_or(|ps| ps.iter().all(|p| !present.contains(p)))
            })
            .collect()
    }

    /// One change of the source, drawn: a split, a merge, a shard added or
    /// one removed. Returns what it did, or `None` if nothing fit.
    pub(super) fn reshard(&mut self, rng: &mut impl Rng) -> Option<String> {
        let closing = lock(&self.finishing.closing).clone();
        // Shards ready and not already being finished, with no children:
        // the ones a change may touch.
        let free: Vec<usize> = self
            .ready()
            .into_iter()
            .filter(|i| !closing.contains(i) && !self.parents.values().any(|ps| ps.contains(i)))
            .collect();
        let what = match rng.gen_range(0..4) {
            0 | 1 if !free.is_empty() && self.next + 2 <= self.capacity => {
                let p = free[rng.gen_range(0..free.len())];
                let (a, b) = (self.next, self.next + 1);
                self.next += 2;
                for c in [a, b] {
                    self.parents.insert(c, vec![p]);
                    self.listed.push(self.child(c, &[p]));
                }
                lock(&self.finishing.closing).insert(p);
                format!("shard {p} splits into {a} and {b}")
            }
            2 if free.len() >= 2 && self.next < self.capacity => {
                let p = free[rng.gen_range(0..free.len())];
                let q = *free.iter().find(|&&q| q != p)?;
                let m = self.next;
                self.next += 1;
                self.parents.insert(m, vec![p, q]);
                self.listed.push(self.child(m, &[p, q]));
                let mut c = lock(&self.finishing.closing);
                c.insert(p);
                c.insert(q);
                format!("shards {p} and {q} merge into {m}")
            }
            _ if rng.gen_bool(0.5) && free.len() > 1 => {
                let r = free[rng.gen_range(0..free.len())];
                self.listed.retain(|s| index(s) != Some(r));
                format!("shard {r} leaves the stream")
            }
            _ if self.next < self.capacity => {
                let a = self.next;
                self.next += 1;
                self.listed.push(shard(a));
                format!("shard {a} is added")
            }
            _ => return None,
        };
        self.reshards += 1;
        self.source.set(self.listed.clone());
        Some(what)
    }

    /// Every work span of a child that began before one of its parents was
    /// marked finished (or whose parent never was): "children never before
    /// their parents are finished".
    pub(super) fn order_problems(&self, work: &[TermLog]) -> Vec<(usize, u64, String)> {
        let marked = lock(&self.finishing.marked);
        let mut out = Vec::new();
        for (&child, parents) in &self.parents {
            let Some(log) = work.get(child) else { continue };
            for span in log.spans() {
                for p in parents {
                    let early = marked.get(p).is_none_or(|&at| span.elected < at);
                    if early {
                        out.push((
                            child,
                            span.token,
                            format!(
                                "shard {child} was worked (token {}, by {}) before its parent {p} was marked finished",
                                span.token, span.candidate
                            ),
                        ));
                    }
                }
            }
        }
        out
    }
}
