//! The sharded tier's changing catalog (`--catalog`): the source the set's
//! catalog leader lists, changed during the fault phase as a resharded
//! stream changes (splits, merges, shards added and removed), what the
//! parents' holders marked finished, and the checks on both.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use tenure::shards::{ShardSource, SourceError, SourceShard};
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

/// What a name of a shard is padded with when the seed draws hostile
/// names: 100 bytes of `\` and `"`, each escaped twice where the catalog
/// stores it (the part is a JSON string inside the record's metadata).
static ESCAPES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| "\\\"".repeat(50));

/// How many parents the hostile shard names (the library allows 16).
pub(super) const HOSTILE_PARENTS: usize = 300;

/// The shard index a name stands for: its leading digits, followed by
/// nothing or by [`ESCAPES`]; `None` for any other name.
pub(super) fn shard_index(name: &str) -> Option<usize> {
    let digits = name.len() - name.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (number, rest) = name.split_at(digits);
    if rest.is_empty() || rest == ESCAPES.as_str() {
        number.parse().ok()
    } else {
        None
    }
}

/// The hostile catalog faults a seed drew (`--catalog-hostile`), and the
/// negative controls on them.
#[derive(Clone, Debug, Default)]
pub(super) struct Hostile {
    /// Every shard's name is padded with [`ESCAPES`].
    pub(super) escaped_names: bool,
    /// The source lists one more shard naming [`HOSTILE_PARENTS`] parents,
    /// which cannot be published: left out, never held.
    pub(super) many_parents: bool,
    /// A negative control for `many_parents`: the checker expects that
    /// shard to be held.
    pub(super) expects_left_out: bool,
    /// At the tail's start, the source of the member that listed it last
    /// (the catalog's leader, if it runs) fails on that member only, until
    /// the set has been checked settled, and a shard is added.
    pub(super) broken_source: bool,
    /// A negative control for `broken_source`: the source fails on every
    /// member.
    pub(super) broken_everywhere: bool,
}

/// The source as one member's process sees it: the set's
/// [`ScriptedSource`], failing while the member is among the broken.
pub(super) struct MemberSource {
    node: usize,
    inner: ScriptedSource,
    broken: Arc<Mutex<BTreeSet<usize>>>,
    everywhere: Arc<Mutex<bool>>,
    last_lister: Arc<Mutex<Option<usize>>>,
}

#[async_trait]
impl ShardSource for MemberSource {
    async fn list(&self) -> Result<Vec<SourceShard>, SourceError> {
        *lock(&self.last_lister) = Some(self.node);
        if *lock(&self.everywhere) || lock(&self.broken).contains(&self.node) {
            return Err(format!("the source fails on member {} only", self.node).into());
        }
        self.inner.list().await
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
    /// The hostile faults drawn.
    pub(super) hostile: Hostile,
    /// The shard that cannot be published, if `hostile.many_parents`: its
    /// index (a log of its own, past `capacity`).
    left_out: Option<usize>,
    /// The shard added at the tail's start, if `hostile.broken_source`:
    /// its index (a log of its own, past `capacity`, so that there is
    /// always room for it).
    tail_shard: Option<usize>,
    /// The members whose source fails now.
    broken: Arc<Mutex<BTreeSet<usize>>>,
    /// Whether the source fails on every member now.
    everywhere: Arc<Mutex<bool>>,
    /// The member that listed the source last.
    last_lister: Arc<Mutex<Option<usize>>>,
}

fn index(s: &SourceShard) -> Option<usize> {
    shard_index(&s.name)
}

impl CatalogSim {
    /// A source listing shards `0` to `shards − 1`, with room for
    /// `capacity` shards in all, and past them one for the shard added at
    /// the tail's start and one for the hostile shard, if drawn (see
    /// [`CatalogSim::extra_logs`]).
    pub(super) fn new(
        shards: usize,
        capacity: usize,
        forgets_parents: bool,
        hostile: Hostile,
    ) -> Self {
        let mut sim = CatalogSim {
            source: ScriptedSource::default(),
            finishing: Finishing::default(),
            listed: Vec::new(),
            parents: BTreeMap::new(),
            next: shards,
            capacity,
            reshards: 0,
            forgets_parents,
            tail_shard: hostile.broken_source.then_some(capacity),
            left_out: hostile
                .many_parents
                .then_some(capacity + usize::from(hostile.broken_source)),
            hostile,
            broken: Arc::default(),
            everywhere: Arc::default(),
            last_lister: Arc::default(),
        };
        sim.listed = (0..shards).map(|i| sim.shard(i)).collect();
        sim.publish();
        sim
    }

    /// The shard named for index `i`.
    fn shard(&self, i: usize) -> SourceShard {
        if self.hostile.escaped_names {
            SourceShard::new(format!("{i}{}", *ESCAPES))
        } else {
            SourceShard::new(i.to_string())
        }
    }

    /// What the source lists from now on: the shards listed, and the
    /// hostile shard if drawn.
    fn publish(&self) {
        let mut listed = self.listed.clone();
        if let Some(k) = self.left_out {
            let ghosts = (0..HOSTILE_PARENTS).map(|j| format!("ghost-{j:04}"));
            listed.push(self.shard(k).after(ghosts));
        }
        self.source.set(listed);
    }

    /// The source as member `node`'s processes see it.
    pub(super) fn member_source(&self, node: usize) -> MemberSource {
        MemberSource {
            node,
            inner: self.source.clone(),
            broken: self.broken.clone(),
            everywhere: self.everywhere.clone(),
            last_lister: self.last_lister.clone(),
        }
    }

    /// The member that listed the source last.
    pub(super) fn last_lister(&self) -> Option<usize> {
        *lock(&self.last_lister)
    }

    /// The source fails on `node` (on every member, under the control)
    /// from now on; returns what it did.
    pub(super) fn break_source(&self, node: usize) -> String {
        if self.hostile.broken_everywhere {
            *lock(&self.everywhere) = true;
            "the source fails on every member".into()
        } else {
            lock(&self.broken).insert(node);
            format!("the source fails on member {node} only")
        }
    }

    /// Every member's source works again.
    pub(super) fn heal_sources(&self) {
        lock(&self.broken).clear();
        *lock(&self.everywhere) = false;
    }

    /// The logs the hostile faults need past `capacity`.
    pub(super) fn extra_logs(hostile: &Hostile) -> usize {
        usize::from(hostile.broken_source) + usize::from(hostile.many_parents)
    }

    /// A shard is added (at the tail's start, so that the catalog must be
    /// written again); returns what it did.
    pub(super) fn add_one(&mut self) -> Option<String> {
        let a = self.tail_shard.take()?;
        self.listed.push(self.shard(a));
        self.reshards += 1;
        self.publish();
        Some(format!("shard {a} is added"))
    }

    /// How many shards were marked finished.
    pub(super) fn finished(&self) -> u64 {
        lock(&self.finishing.marked).len() as u64
    }

    /// Child `c` of `parents`, as the source lists it.
    fn child(&self, c: usize, parents: &[usize]) -> SourceShard {
        if self.forgets_parents {
            self.shard(c)
        } else {
            let names: Vec<String> = parents.iter().map(|&p| self.shard(p).name).collect();
            self.shard(c).after(names)
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
        let expected_left_out = self.left_out.filter(|_| self.hostile.expects_left_out);
        self.listed
            .iter()
            .filter_map(index)
            .chain(expected_left_out)
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
                self.listed.push(self.shard(a));
                format!("shard {a} is added")
            }
            _ => return None,
        };
        self.reshards += 1;
        self.publish();
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
