//! Sharded leadership: N shards spread over the live members of a set, each
//! shard a fenced lease of its own.
//!
//! A stream processor's partitions, per-tenant schedulers, a controller's
//! objects: many pieces of work, each to be done by exactly one process,
//! spread over however many processes are running. [`Shards`] is
//! kinsumer's clients table and shard split, on tenure's leases:
//!
//! * **Membership.** Each process is a member of a named set, with a lease
//!   of its own (group `SET/members/ID`) carrying its metadata. Every member
//!   follows the member records and counts a member as live by the lease
//!   rule: until its record has been seen unchanged for its term × (1 +
//!   drift). A member that stops gracefully releases its record and is
//!   gone at once; a crashed one is gone after that wait, and the members
//!   that judged it gone then clear its record (a release written on the
//!   version they saw unchanged, as a challenger's takeover would), so that
//!   a member listing the set later does not count it live for another
//!   wait.
//! * **Following the records.** On a store with a change feed, a member
//!   takes the member and shard records in as the feed delivers them (a
//!   renewal, a join, a leave, a hand-over costs it no store operation),
//!   and lists the members and reads every shard only at its start, after
//!   the feed says it may have missed something, and every 4 terms as a
//!   net. For the members the feed is a hint: a member only the feed
//!   showed is read before it is counted live or gone (a forged join would
//!   give a ghost a share nobody stands for). A shard's holder is taken
//!   from the delivery, newer versions only: it steers the assignment,
//!   never the shard's safety. The feed is the one the engine keeps for
//!   the store handle (the one its electors follow), tapped: however many
//!   members and sets a process runs on one handle, the store serves it
//!   one feed. Without a feed (DynamoDB, object stores), it lists
//!   and reads every poll, in one listing and one batched read. Listing
//!   and reading run in the background, bounded by the term, so a slow
//!   listing (a Redis `SCAN` over a database shared with many other keys)
//!   holds nothing up.
//! * **Assignment.** From the same member list every member computes the
//!   same target assignment (rendezvous hashing with a load bound of
//!   `⌈shards / members⌉`, see [`assign`]), and stands only for its own
//!   targets. A member that holds a shard that is no longer its target
//!   drains and releases it, so the new target takes it over through the
//!   change feed; a join moves about `shards / members` shards, a leave
//!   only the leaver's.
//! * **Safety per shard.** Every shard is its own lease (group
//!   `SET/shards/SHARD`) with its own fencing token and its own
//!   leader-stops-first deadline, so no shard is ever worked by two members
//!   at one instant, whatever the members believe about each other: two
//!   members that disagree about the member list may both stand for a
//!   shard, and the lease lets one of them hold it.
//! * **No membership, no shards.** A member that does not hold its own
//!   membership lease (the store is unreachable, or another process runs
//!   with the same id) stands for no shard and gives back what it holds.
//!
//! # A changing catalog
//!
//! A set built with [`ShardsBuilder::catalog`] follows a shard list that
//! changes at runtime (a stream resharded, a topic that gains partitions, a
//! tenant added), without restarting any member. One member at a time, the
//! set's catalog leader (a lease of its own, group `SET/leader`), lists the
//! user's [`ShardSource`] whenever the published list is older than the
//! refresh period, and publishes it as records `SET/catalog/N`, written
//! under its fencing token by compare-and-swap, so a deposed leader's late
//! write is refused. Every member reads the catalog every poll (at once
//! when its change feed shows a write of it) and assigns over its ready
//! shards as over a fixed list:
//!
//! * a shard added is read and assigned like any shard; the others stay
//!   where they are, unless the balance needs a move;
//! * a shard removed is no member's target: its holder drains and releases
//!   it (its record and token stay, so a shard that comes back continues
//!   its tokens); a shard marked finished stays finished: a name that
//!   comes back after its mark is dropped again (give a source whose
//!   names are reused, such as a stream deleted and created again, a new
//!   set name);
//! * a shard that names parents ([`SourceShard::after`]) is assigned only
//!   once none of them is in the catalog: its holder marks a parent
//!   finished ([`Shards::mark_finished`], a record `SET/finished/SHARD`
//!   written under the parent's own token), and the leader drops finished
//!   shards, and shards the source no longer lists, at its next refresh;
//! * a member never stands for a shard it has not read in a catalog; a
//!   catalog torn by a leader that crashed while writing it is ignored and
//!   written again by the next leader; parts of two leaders' writes are
//!   one torn catalog too. Members take each catalog written under
//!   another token or generation than the one they have (the store's is
//!   the truth: generations may start again lower after a store lost
//!   writes).
//!
//! A change of the source is followed within the refresh period plus a
//! poll, plus the usual hand-over of a shard that moves.
//!
//! What goes wrong is told, and does not stop the set:
//!
//! * a catalog leader whose refreshes fail four times in a row (about a
//!   term: its source fails on its host only, say) hands the duty on and
//!   stands again after a term, so a member whose source works takes it
//!   over; a member that keeps failing while nobody lists the source (a
//!   source failing everywhere) waits and tolerates twice as long each
//!   time, up to 8 terms, so that the duty does not move every term;
//! * a shard the source lists that cannot be published (a name the set's
//!   groups cannot carry, more than [`MAX_PARENTS`] parents, more bytes
//!   than a catalog part holds) is left out and reported once
//!   ([`ShardEvent::ShardLeftOut`], naming the limit); the others are
//!   published. A listing of more than [`MAX_CATALOG_SHARDS`] shards is
//!   refused whole;
//! * a catalog part 0 written by someone else that claims more parts than
//!   a catalog may have, or parts that are not there, costs a reader one
//!   batch of reads, and a valid leader writes over it;
//! * a member that cannot read the catalog (its store fails, or the parts
//!   stay torn or hostile) warns (once a minute at most), counts it in
//!   `tenure_shard_catalog_unreadable_total`, and publishes why in its
//!   membership record
//!   ([`CATALOG_UNREADABLE_KEY`](crate::record::CATALOG_UNREADABLE_KEY)),
//!   which `tenure status --group SET` shows.
//!
//! # Convergence
//!
//! With `T` the term, `ρ` the drift bound and `P` the poll (`T/4` plus up to
//! `T/10` of jitter by default): once the membership stops changing, every
//! member sees the same list within a round trip on a store with a change
//! feed, and within `P` plus a round trip without one; a simultaneous
//! start of every member is no exception. (A feed that loses a delivery
//! without saying so delays a join until the refresh, at most 4 terms and
//! a jitter; a lost renewal costs nothing, since a member is read before
//! it is counted gone.) Then:
//!
//! * after a **graceful** leave or a join, a shard that moves is drained by
//!   its old holder (bounded by its work, at most the rest of its term),
//!   released, and taken by its new holder within one round trip (change
//!   feed) or one poll;
//! * after a **crash**, the crashed member is seen gone after its record
//!   has been unchanged for `T(1+ρ)`, and its shards are then taken over
//!   like any crashed leader's: within `T(1+ρ)/(1−ρ)` plus a poll of the new
//!   holder's first sight. In all, at most `2·(T(1+ρ)/(1−ρ) + P)`.
//!
//! # Cost
//!
//! On a store with a change feed, a settled member's store operations per
//! term are its own writes (renewing its membership and the shards it
//! holds), about two batched reads of the member records (a member's
//! renewals count once a read shows them; a read of one member about to
//! lapse takes every member along, so their lapses line up and one read
//! serves them all), and a quarter of a listing with a read of every shard:
//! whatever the number of members and shards. Every member does receive
//! every write of the store on its feed; deliveries are gathered for up to
//! a twentieth of the poll (50 ms at most), and the assignment (in
//! `O(shards × log shards)` once settled) is computed when the members or
//! the holders change, at most once per 10 µs per shard, so that a member
//! of a large set spends a few per cent of a core on it however fast
//! shards move. `docs/benchmarks.md` has the figures per store.
//!
//! ```
//! use std::time::Duration;
//! use tenure::{MemoryStore, Shards};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! let shards = Shards::builder(store, "ingest")
//!     .member_id("host-a")
//!     .shards(8)
//!     .start()?;
//! # let stopper = shards.clone();
//! # tokio::spawn(async move { tokio::time::sleep(Duration::from_secs(1)).await; stopper.shutdown().await; });
//! shards
//!     .run_per_shard(|shard, term| async move {
//!         // work on `shard`, fencing each write with term.token(), until
//!         // term.cancelled() fires (before the shard's deadline)
//!         term.cancelled().await;
//!         let _ = shard;
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await?;
//! # Ok(()) }
//! ```

pub mod assign;
mod catalog;
pub mod layout;
mod members;
mod requests;
mod sightings;
mod task;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinSet;

use crate::clock::{system_clock, Clock};
use crate::config::Config;
use crate::elector::Elector;
use crate::error::{ConfigError, ElectorError, StoreError};
use crate::machine::EndReason;
use crate::record::{check_name, GroupName, Metadata, MAX_CANDIDATE_BYTES, MAX_GROUP_BYTES};
use crate::store::LeaseStore;
use crate::term::Term;
use layout::{member_group, shard_group};

pub use catalog::{
    CatalogError, FinishError, ShardCatalog, ShardList, ShardSource, SourceError, SourceShard,
    MAX_CATALOG_SHARDS, MAX_PARENTS,
};
pub use members::Member;

/// Configures and starts a [`Shards`] member; see [`Shards::builder`].
pub struct ShardsBuilder {
    store: Arc<dyn LeaseStore>,
    set: String,
    member: Option<String>,
    shards: Vec<String>,
    /// The source of a changing shard list, and how often it is listed.
    catalog: Option<(Arc<dyn ShardSource>, Duration)>,
    config: Config,
    metadata: Metadata,
    clock: Arc<dyn Clock>,
}

impl ShardsBuilder {
    /// This member's id (default: `hostname-pid-random`, as for electors).
    /// Ids must be unique in the set: a second process with the same id
    /// waits until the first is gone.
    pub fn member_id(mut self, id: impl Into<String>) -> Self {
        self.member = Some(id.into());
        self
    }

    /// `n` shards named `0` to `n − 1`.
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = (0..n).map(|i| i.to_string()).collect();
        self
    }

    /// Shards with the given names (a tenant id, a partition name).
    pub fn shard_names<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.shards = names.into_iter().map(Into::into).collect();
        self
    }

    /// Shards that come and go: the set's catalog leader lists `source`
    /// every `refresh` and publishes the list in the store, and every
    /// member assigns over it (see the [module documentation](crate::shards)
    /// under "A changing catalog"). Every member of the set should be given
    /// a source: any of them may become the catalog's leader. Instead of
    /// [`shards`](ShardsBuilder::shards) or
    /// [`shard_names`](ShardsBuilder::shard_names).
    ///
    /// ```
    /// use std::time::Duration;
    /// use async_trait::async_trait;
    /// use tenure::shards::{ShardSource, SourceError, SourceShard};
    /// use tenure::{MemoryStore, Shards};
    ///
    /// struct Stream;
    ///
    /// #[async_trait]
    /// impl ShardSource for Stream {
    ///     async fn list(&self) -> Result<Vec<SourceShard>, SourceError> {
    ///         // A split: the children are read once the parent is finished.
    ///         Ok(vec![
    ///             SourceShard::new("shard-0"),
    ///             SourceShard::new("shard-1").after(["shard-0"]),
    ///             SourceShard::new("shard-2").after(["shard-0"]),
    ///         ])
    ///     }
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let shards = Shards::builder(MemoryStore::new(), "ingest")
    ///     .member_id("host-a")
    ///     .catalog(Stream, Duration::from_secs(60))
    ///     .start()?;
    /// let mut catalog = shards.watch_shards();
    /// catalog.wait_for(|ready| !ready.is_empty()).await?;
    /// assert_eq!(shards.current_shards(), ["shard-0"]);
    /// # shards.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn catalog(mut self, source: impl ShardSource, refresh: Duration) -> Self {
        self.catalog = Some((Arc::new(source), refresh));
        self
    }

    /// The timing of every lease (membership and shards); see [`Config`].
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// The term of every lease; other timings derive from it.
    pub fn term(mut self, term: Duration) -> Self {
        self.config.term = term;
        self
    }

    /// What this member publishes in its membership record and in the
    /// records of the shards it holds.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// The clock (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Validates everything and joins the set. Must be called within a
    /// tokio runtime.
    pub fn start(self) -> Result<Shards, ElectorError> {
        let timing = self.config.validate()?;
        check_name("set name", &self.set, MAX_GROUP_BYTES)?;
        if self.set.contains('/') {
            return Err(ConfigError::shards(
                "a set name may not contain '/': tenure names the set's groups SET/members/ID and SET/shards/SHARD",
            )
            .into());
        }
        let member = match self.member {
            Some(id) => id,
            None => crate::elector::default_candidate_id(),
        };
        check_name("member id", &member, MAX_CANDIDATE_BYTES)?;
        match &self.catalog {
            Some(_) if !self.shards.is_empty() => {
                return Err(ConfigError::shards(
                    "both a shard list and a catalog: give .shards(n), .shard_names(..) or .catalog(..), not two",
                )
                .into())
            }
            Some((_, refresh)) => catalog::check_refresh(*refresh)?,
            None if self.shards.is_empty() => {
                return Err(ConfigError::shards(
                    "no shards: give a count with .shards(n), names with .shard_names(..), or a source with .catalog(..)",
                )
                .into())
            }
            None => {}
        }
        let mut sorted = self.shards.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.len() != self.shards.len() {
            return Err(ConfigError::shards(
                "two shards have the same name: shard names must be unique",
            )
            .into());
        }
        for shard in &self.shards {
            check_name("shard name", shard, MAX_GROUP_BYTES)?;
            GroupName::new(shard_group(&self.set, shard))?;
        }
        GroupName::new(member_group(&self.set, &member))?;
        self.metadata.validate_published()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ElectorError::NoRuntime)?;
        let membership = Elector::builder(self.store.clone(), member_group(&self.set, &member))
            .candidate_id(member.clone())
            .config(self.config.clone())
            .metadata(self.metadata.clone())
            .clock(self.clock.clone())
            .start()?;
        // A catalog set: the member follows the catalog, and stands to be
        // its leader.
        let (catalog_tx, catalog_rx) = watch::channel(None);
        let leader = match &self.catalog {
            Some((source, refresh)) => {
                let elector = Elector::builder(self.store.clone(), layout::leader_group(&self.set))
                    .candidate_id(member.clone())
                    .config(self.config.clone())
                    .clock(self.clock.clone())
                    .start()?;
                Some((elector, source.clone(), *refresh))
            }
            None => None,
        };
        let (members_tx, members) = watch::channel(Vec::new());
        let (electors_tx, electors) = watch::channel(BTreeMap::new());
        let (events, _) = broadcast::channel(1024);
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (shards_tx, current) = watch::channel(Arc::new(self.shards.clone()));
        let catalog_read = Arc::new(tokio::sync::Notify::new());
        let catalog_stop = tokio_util::sync::CancellationToken::new();
        let leader = leader.map(|(elector, source, refresh)| {
            let stand = {
                let (store, set) = (self.store.clone(), self.set.clone());
                let (member, config, clock) =
                    (member.clone(), self.config.clone(), self.clock.clone());
                move || {
                    Elector::builder(store.clone(), layout::leader_group(&set))
                        .candidate_id(member.clone())
                        .config(config.clone())
                        .clock(clock.clone())
                        .start()
                }
            };
            let stop = tokio_util::sync::CancellationToken::new();
            let done = runtime.spawn(
                catalog::Leader {
                    set: self.set.clone(),
                    store: self.store.clone(),
                    source,
                    refresh,
                    term: self.config.term,
                    op_timeout: timing.op_timeout,
                    clock: self.clock.clone(),
                    events: events.clone(),
                    stand: Box::new(stand),
                    pacing: std::sync::Mutex::default(),
                    left_out: std::sync::Mutex::default(),
                }
                .run(elector, stop.clone()),
            );
            runtime.spawn(catalog::follow(
                self.store.clone(),
                self.set.clone(),
                (timing.retry_interval, timing.op_timeout),
                self.clock.clone(),
                catalog_tx,
                (catalog_read.clone(), catalog_stop.clone()),
                (member.clone(), membership.clone()),
            ));
            catalog::LeaderHandle { stop, done }
        });
        let following = leader.is_some().then(|| catalog_rx.clone());
        runtime.spawn(
            task::Task {
                set: self.set.clone(),
                member: member.clone(),
                shards: self.shards.clone(),
                store: self.store.clone(),
                events: events.clone(),
                membership: membership.clone(),
                config: self.config,
                drift: timing.drift,
                poll: timing.retry_interval,
                metadata: self.metadata,
                clock: self.clock.clone(),
                members_tx,
                electors_tx,
                commands: commands_rx,
                catalog: following.clone(),
                catalog_read,
                catalog_stop,
                shards_tx,
                leader,
            }
            .run(),
        );
        let inner = Arc::new(Inner {
            set: self.set,
            member,
            shards: self.shards,
            store: self.store,
            members,
            electors,
            events,
            commands,
            membership,
            current,
            catalog: following,
            clock: self.clock,
            op_timeout: timing.op_timeout,
        });
        Ok(Shards { inner })
    }
}

pub(crate) struct Inner {
    set: String,
    member: String,
    shards: Vec<String>,
    store: Arc<dyn LeaseStore>,
    members: watch::Receiver<Vec<Member>>,
    /// The shards this member stands for now, with their electors.
    electors: watch::Receiver<BTreeMap<String, Elector>>,
    events: broadcast::Sender<ShardEvent>,
    /// Closing it (every handle dropped) or sending on it stops the member.
    commands: mpsc::UnboundedSender<()>,
    membership: Elector,
    /// The shards assigned over now: the fixed list, or the catalog's
    /// ready shards as this member last read them.
    current: watch::Receiver<Arc<Vec<String>>>,
    /// The catalog as last read, for a set that follows one.
    catalog: Option<watch::Receiver<Option<Arc<ShardCatalog>>>>,
    clock: Arc<dyn Clock>,
    /// The bound on each store request (of a finished mark).
    op_timeout: Duration,
}

/// A member of a sharded set. Clones are handles to the same member; it
/// keeps running until [`shutdown`](Shards::shutdown).
///
/// See the [module documentation](crate::shards) for the guarantees and the
/// convergence bound.
#[derive(Clone)]
pub struct Shards {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shards")
            .field("set", &self.inner.set)
            .field("member", &self.inner.member)
            .field("standing_for", &self.inner.electors.borrow().len())
            .finish()
    }
}

/// Something that happened to a member of a sharded set.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ShardEvent {
    /// This member now holds the shard, with this term's token.
    Acquired {
        /// The shard now held, the name the builder was given.
        shard: String,
        /// The term's fencing token.
        token: u64,
    },
    /// This member's term on the shard ended.
    Released {
        /// The shard no longer held.
        shard: String,
        /// The ended term's token.
        token: u64,
        /// Why (resigned to rebalance, superseded, renewal failed…).
        reason: EndReason,
    },
    /// The shards assigned over changed: a catalog with shards added,
    /// removed or unblocked was read.
    ShardsChanged {
        /// The catalog's generation.
        generation: u64,
        /// The ready shards, sorted by name.
        shards: Vec<String>,
    },
    /// The catalog leader could not refresh the catalog (the source or the
    /// store failed); it tries again within a quarter term, and after
    /// four failures in a row (about a term) hands the duty on to another
    /// member, standing again after a back-off of a term. A member whose
    /// refreshes keep failing as others' do (a source failing everywhere)
    /// waits twice as long, and tolerates twice as many failures, each
    /// time, up to 8 terms: the duty moves ever more slowly.
    CatalogFailed {
        /// What failed.
        error: String,
    },
    /// The catalog leader left a shard the source listed out of the
    /// catalog: it cannot be published (its name, its parents, its size);
    /// the others are published. Reported once while it stays left out.
    ShardLeftOut {
        /// The shard, as the source listed it.
        shard: String,
        /// Why, naming the limit.
        error: CatalogError,
    },
    /// The live members, as this member sees them, changed.
    MembersChanged {
        /// The live members, sorted by id.
        members: Vec<Member>,
    },
}

/// Who holds what, as read from the store at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    /// The live members, as this member sees them.
    pub members: Vec<Member>,
    /// Every shard, in the order given to the builder (for a catalog, the
    /// ready shards, sorted by name).
    pub shards: Vec<ShardHolding>,
}

/// One shard's state in an [`Assignment`].
#[derive(Clone, Debug, PartialEq)]
pub struct ShardHolding {
    /// The shard, the name the builder was given.
    pub shard: String,
    /// The member holding it, if any.
    pub holder: Option<String>,
    /// The fencing token of its current (or last) term.
    pub token: u64,
    /// When its lease expires unless renewed, by the holder's wall clock.
    pub expires_at: Option<SystemTime>,
    /// Whether this member stands for it (it is one of its targets).
    pub targeted_here: bool,
}

impl Shards {
    /// Starts configuring a member of `set` on `store`. Shards and member
    /// leases are groups of that store named `SET/shards/SHARD` and
    /// `SET/members/ID`; the store must support [`LeaseView::list`](crate::LeaseView::list).
    pub fn builder(store: impl LeaseStore, set: impl Into<String>) -> ShardsBuilder {
        ShardsBuilder {
            store: Arc::new(store),
            set: set.into(),
            member: None,
            shards: Vec::new(),
            catalog: None,
            config: Config::default(),
            metadata: Metadata::new(),
            clock: system_clock(),
        }
    }

    /// The set's name.
    pub fn set(&self) -> &str {
        &self.inner.set
    }

    /// This member's id.
    pub fn member_id(&self) -> &str {
        &self.inner.member
    }

    /// Every shard given to the builder (empty for a set that follows a
    /// catalog: see [`current_shards`](Shards::current_shards)).
    pub fn shard_names(&self) -> &[String] {
        &self.inner.shards
    }

    /// The shards assigned over now: the fixed list, or the catalog's
    /// ready shards as this member last read them (none before its first
    /// read).
    pub fn current_shards(&self) -> Vec<String> {
        self.inner.current.borrow().as_ref().clone()
    }

    /// A watch of [`current_shards`](Shards::current_shards).
    pub fn watch_shards(&self) -> watch::Receiver<Arc<Vec<String>>> {
        self.inner.current.clone()
    }

    /// The catalog as this member last read it; `None` for a fixed list,
    /// or before the first read.
    pub fn catalog(&self) -> Option<ShardCatalog> {
        self.inner
            .catalog
            .as_ref()
            .and_then(|c| c.borrow().as_deref().cloned())
    }

    /// Marks `shard` finished, with the [`Term`] this member holds it
    /// under (the one [`run_per_shard`](Shards::run_per_shard) handed the
    /// work): the catalog leader drops it from the catalog at its next
    /// refresh, and the shards that name it as a parent become ready.
    /// Marking again is harmless. The mark is written under the term's
    /// token; an ended term is refused.
    pub async fn mark_finished(&self, shard: &str, term: &Term) -> Result<(), FinishError> {
        let (store, clock) = (&*self.inner.store, &*self.inner.clock);
        let timing = (clock, self.inner.op_timeout);
        catalog::mark_finished(store, &self.inner.set, shard, term, timing).await
    }

    /// The live members as last seen.
    pub fn members(&self) -> Vec<Member> {
        self.inner.members.borrow().clone()
    }

    /// A watch of the live members.
    pub fn watch_members(&self) -> watch::Receiver<Vec<Member>> {
        self.inner.members.clone()
    }

    /// The shards this member holds now, each with its valid term.
    pub fn held(&self) -> BTreeMap<String, Term> {
        self.inner
            .electors
            .borrow()
            .iter()
            .filter_map(|(shard, e)| e.current_term().map(|t| (shard.clone(), t)))
            .collect()
    }

    /// The shards this member stands for (its targets, plus none).
    pub fn targets(&self) -> Vec<String> {
        self.inner.electors.borrow().keys().cloned().collect()
    }

    /// Whether this member holds its membership lease.
    pub fn is_member(&self) -> bool {
        self.inner.membership.is_leader()
    }

    /// A stream of [`ShardEvent`]s from now on. A receiver that falls more
    /// than 1024 events behind skips the oldest.
    pub fn events(&self) -> ShardEventStream {
        ShardEventStream {
            rx: self.inner.events.subscribe(),
        }
    }

    /// Reads every shard's record (one batched read) and reports who holds
    /// what.
    pub async fn assignment(&self) -> Result<Assignment, StoreError> {
        let current = self.current_shards();
        let groups: Vec<GroupName> = current
            .iter()
            .map(|s| GroupName::new(shard_group(&self.inner.set, s)))
            .collect::<Result<_, _>>()
            .map_err(|e| StoreError::Misconfigured {
                message: e.to_string(),
                source: None,
            })?;
        let records = self.inner.store.read_many(&groups).await?;
        let targets = self.targets();
        let shards = current
            .iter()
            .zip(records)
            .map(|(shard, r)| {
                let v = r.ok().flatten();
                ShardHolding {
                    shard: shard.clone(),
                    holder: v
                        .as_ref()
                        .and_then(|v| v.record.holder_id().map(str::to_owned)),
                    token: v.as_ref().map_or(0, |v| v.record.token),
                    expires_at: v
                        .as_ref()
                        .filter(|v| v.record.holder.is_some())
                        .map(|v| v.record.expires_at.to_system_time()),
                    targeted_here: targets.contains(shard),
                }
            })
            .collect();
        Ok(Assignment {
            members: self.members(),
            shards,
        })
    }

    /// Runs `work` for every term of every shard this member holds, until
    /// the member stops. Each run gets the shard's name and its [`Term`];
    /// it is told to stop ([`Term::cancelled`]) before the shard's deadline
    /// and dropped at the deadline at the latest, exactly as
    /// [`Elector::run_while_leader`] does for one group. A shard that moves
    /// to another member is drained first (its work is cancelled and
    /// awaited, bounded by the deadline) and then released.
    ///
    /// If a run returns `Err(e)`, that shard's term is resigned (another
    /// member may take it), every other shard's work is dropped, and
    /// `Err(e)` is returned; the member keeps standing. Returns `Ok(())`
    /// once the member has stopped.
    pub async fn run_per_shard<F, Fut, E>(&self, work: F) -> Result<(), E>
    where
        F: Fn(String, Term) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: From<ElectorError> + Send + 'static,
    {
        let work = Arc::new(work);
        let mut electors = self.inner.electors.clone();
        let mut running: BTreeMap<String, Elector> = BTreeMap::new();
        let mut runners: JoinSet<(String, Elector, Result<(), E>)> = JoinSet::new();
        loop {
            let current = electors.borrow_and_update().clone();
            for (shard, elector) in current {
                if running
                    .get(&shard)
                    .is_some_and(|e| e.same_candidate(&elector))
                {
                    continue;
                }
                running.insert(shard.clone(), elector.clone());
                let work = work.clone();
                runners.spawn(async move {
                    let name = shard.clone();
                    let result = elector
                        .run_while_leader(move |term| (work)(name.clone(), term))
                        .await;
                    (shard, elector, result)
                });
            }
            tokio::select! {
                biased;
                changed = electors.changed() => {
                    if changed.is_err() {
                        // The member stopped: the runners end as their
                        // electors stop.
                        while let Some(done) = runners.join_next().await {
                            if let Ok((_, _, Err(e))) = done {
                                return Err(e);
                            }
                        }
                        return Ok(());
                    }
                }
                Some(done) = runners.join_next() => match done {
                    Ok((shard, stopped, Ok(()))) => {
                        // Its elector stopped (the shard is no target any
                        // more). If the shard became a target again while
                        // it drained, a newer elector runs it now: keep
                        // that one's entry, or the next change would start
                        // a second runner for it and work its terms twice.
                        if running
                            .get(&shard)
                            .is_some_and(|e| e.same_candidate(&stopped))
                        {
                            running.remove(&shard);
                        }
                    }
                    Ok((_, _, Err(e))) => {
                        // Dropped and awaited: no work of this member
                        // still runs once the error is returned.
                        runners.shutdown().await;
                        return Err(e);
                    }
                    Err(join) => {
                        if join.is_panic() {
                            runners.abort_all();
                            std::panic::resume_unwind(join.into_panic());
                        }
                    }
                },
            }
        }
    }

    /// Leaves the set gracefully: drains and releases every shard (so the
    /// other members take them over at once), then releases the
    /// membership lease. Returns when done. Dropping every handle does the
    /// same, in the background.
    pub async fn shutdown(&self) {
        let _ = self.inner.commands.send(());
        let mut electors = self.inner.electors.clone();
        // The task drops its sender once everything is released.
        while electors.changed().await.is_ok() {}
    }
}

/// The events of a [`Shards`] member; see [`Shards::events`].
#[derive(Debug)]
pub struct ShardEventStream {
    rx: broadcast::Receiver<ShardEvent>,
}

impl ShardEventStream {
    /// The next event, or `None` once the member has stopped and every
    /// event was delivered.
    pub async fn next(&mut self) -> Option<ShardEvent> {
        loop {
            match self.rx.recv().await {
                Ok(e) => return Some(e),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}
