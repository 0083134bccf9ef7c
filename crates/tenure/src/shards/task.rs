//! The task behind a [`Shards`](super::Shards) member: it follows the
//! member and shard records, computes this member's targets and keeps one
//! elector standing for each, and leaves gracefully at the end.
//!
//! What it knows of the records comes mostly from the store's change feed,
//! taken in as it arrives (a renewal, a join, a leave, a hand-over is one
//! delivery, with no store operation). The store is asked only:
//!
//! * for a **refresh** (a listing of the members and one batched read of
//!   every shard): at the start, after the feed says it may have missed
//!   changes, and at a slow poll ([`FEED_REFRESH_TERMS`] terms) as a net
//!   under a feed that loses a delivery without saying so; without a feed,
//!   at every poll;
//! * for a **read** of the few records the feed only hinted at, and of a
//!   member whose record only the feed showed and has lapsed (is it gone,
//!   or was a renewal lost?).
//!
//! Requests run in the background, one refresh and one read at a time, so
//! that a slow listing (a store with many other keys) never holds up the
//! feed; while one is in flight, what asks for another is remembered and
//! asked once it returns. A member's store operations per term are then
//! its writes plus a fraction of one refresh, whatever the set's size.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinSet;

use super::assign::assign_names;
use super::members::{Member, Roster};
use super::sightings::Sightings;
use super::{member_group, member_prefix, shard_group, shard_prefix, ShardEvent};
use crate::clock::{Clock, MonoTime};
use crate::config::Config;
use crate::elector::Elector;
use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Metadata, Version, Versioned};
use crate::role::{Event, Role};
use crate::store::{CasOutcome, Change, LeaseStore, StoreFeed};

/// With a change feed, a full refresh every this many terms (plus jitter):
/// a net under a feed that loses a delivery without a resync.
pub(crate) const FEED_REFRESH_TERMS: u32 = 4;

/// Changes taken from the feed at once before the targets are computed
/// again: a burst (every shard renewed) costs one computation, not one per
/// delivery.
const FEED_BURST: usize = 4096;

pub(crate) struct Task {
    pub(crate) set: String,
    pub(crate) member: String,
    pub(crate) shards: Vec<String>,
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) events: broadcast::Sender<ShardEvent>,
    pub(crate) membership: Elector,
    pub(crate) config: Config,
    pub(crate) drift: f64,
    pub(crate) poll: Duration,
    pub(crate) metadata: Metadata,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) members_tx: watch::Sender<Vec<Member>>,
    pub(crate) electors_tx: watch::Sender<BTreeMap<String, Elector>>,
    pub(crate) commands: mpsc::UnboundedReceiver<()>,
}

/// A request's answer, back from the background.
enum Reply {
    /// A listing of the members and a read of every shard, sent at `sent`.
    Refresh {
        sent: MonoTime,
        members: Result<BTreeMap<String, Versioned>, StoreError>,
        shards: Option<Vec<(String, Option<Versioned>)>>,
    },
    /// The elector of a shard given up has stopped (drained, and released
    /// the shard if it held it).
    Stopped { shard: String },
    /// Reads of single records, sent at `sent`; a record that could not
    /// be read is left out.
    Read {
        sent: MonoTime,
        members: Vec<(String, Option<Versioned>)>,
        shards: Vec<(String, Option<Versioned>)>,
    },
}

/// A shard this member gave up. While its elector stops (drains, and
/// releases the shard if it holds it, even one whose acquisition was still
/// on its way), a record naming this member is out of date. Once it has
/// stopped, the record it left is out of date until the record changes, or
/// a read sent after the stop shows it unchanged (the release did not
/// apply), or a poll has passed (the release's write would have come back
/// on the feed by then, and a read may fail): then it is taken at its word.
struct GivenUp {
    /// When its elector stopped, and the version of the shard's record then.
    stopped: Option<(MonoTime, Option<Version>)>,
}

impl GivenUp {
    /// Whether `seen`, a record naming this member, is out of date.
    fn outdates(&self, seen: &Versioned) -> bool {
        match self.stopped {
            None => true,
            Some((_, version)) => version == Some(seen.version),
        }
    }
}

/// What the member knows and is doing, between turns of its loop.
struct State {
    /// The member records known, and who is live.
    roster: Roster,
    /// The shard records known (who holds what).
    shards: Sightings,
    /// The shards this member stands for, with their electors.
    standing: BTreeMap<String, Elector>,
    /// Of those, the ones it leads now (known first-hand).
    leading: BTreeSet<String>,
    /// The live member ids last published.
    view: Option<Vec<String>>,
    /// Whether the targets must be computed again (the members, the
    /// holders or this member's own standing changed).
    dirty: bool,
    /// A refresh in flight; another wanted after it.
    refreshing: bool,
    refresh_wanted: bool,
    next_refresh: MonoTime,
    /// A read in flight, and what to read next.
    reading: bool,
    read_members: BTreeSet<String>,
    read_shards: BTreeSet<String>,
    /// The lapsed feed-only member records already asked about, by version.
    confirming: BTreeMap<String, Version>,
    /// The lapsed member records already cleared (or tried), by version.
    cleared: BTreeMap<String, Version>,
    /// The shards this member gave up (see [`Task::holders`]).
    given_up: BTreeMap<String, GivenUp>,
    /// The last kind of listing failure logged: once per kind, not per poll.
    reported: Option<String>,
}

impl Task {
    pub(crate) async fn run(mut self) {
        let now = self.clock.now().mono;
        let mut s = State {
            roster: Roster::new(self.drift, self.poll),
            shards: Sightings::default(),
            standing: BTreeMap::new(),
            leading: BTreeSet::new(),
            view: None,
            dirty: true,
            refreshing: false,
            refresh_wanted: true,
            next_refresh: now,
            reading: false,
            read_members: BTreeSet::new(),
            read_shards: BTreeSet::new(),
            confirming: BTreeMap::new(),
            cleared: BTreeMap::new(),
            given_up: BTreeMap::new(),
            reported: None,
        };
        let known: HashSet<String> = self.shards.iter().cloned().collect();
        let (replies_tx, mut replies) = mpsc::unbounded_channel();
        let mut feed = self.subscribe().await;
        let mut membership = self.membership.watch_role();
        loop {
            let now = self.clock.now().mono;
            if !s.refreshing && (s.refresh_wanted || now >= s.next_refresh) {
                s.refreshing = true;
                s.refresh_wanted = false;
                self.refresh(now, replies_tx.clone());
            }
            for (id, version) in s.roster.to_confirm(now) {
                if s.confirming.get(id) != Some(&version) {
                    s.confirming.insert(id.to_owned(), version);
                    s.read_members.insert(id.to_owned());
                }
            }
            let to_read = !(s.read_members.is_empty() && s.read_shards.is_empty());
            if to_read && !s.reading {
                s.reading = true;
                let members = std::mem::take(&mut s.read_members);
                let shards = std::mem::take(&mut s.read_shards);
                self.read(now, members, shards, replies_tx.clone());
            }
            self.clear_lapsed(&s.roster, &mut s.cleared);
            let members = self.live(&s.roster, now);
            let ids: Vec<String> = members.iter().map(|m| m.id.clone()).collect();
            if s.view.as_ref() != Some(&ids) {
                s.view = Some(ids.clone());
                s.dirty = true;
                self.members_tx.send_replace(members.clone());
                let _ = self.events.send(ShardEvent::MembersChanged { members });
            }
            let leading: BTreeSet<String> = s
                .standing
                .iter()
                .filter(|(_, e)| e.is_leader())
                .map(|(shard, _)| shard.clone())
                .collect();
            if leading != s.leading {
                s.leading = leading;
                s.dirty = true;
            }
            let poll = self.poll;
            let before = s.given_up.len();
            s.given_up
                .retain(|_, g| g.stopped.is_none_or(|(stopped, _)| now < stopped + poll));
            s.dirty |= s.given_up.len() != before;
            if s.dirty {
                s.dirty = false;
                let holders = self.holders(&s);
                let dropped = self.stand_for(&ids, &holders, &mut s.standing, &replies_tx);
                // Forget what no longer applies: a shard stood for again, a
                // record that changed since the elector stopped.
                let (shards, standing) = (&s.shards, &s.standing);
                s.given_up.retain(|shard, g| {
                    let now_seen = shards.get(shard).map(|seen| seen.current.version);
                    !standing.contains_key(shard)
                        && g.stopped.is_none_or(|(_, version)| version == now_seen)
                });
                for shard in dropped {
                    s.given_up.insert(shard, GivenUp { stopped: None });
                }
            }
            // While a refresh is in flight its answer wakes the loop.
            let wake = [
                Some(s.next_refresh).filter(|_| !s.refreshing),
                s.roster.next_change(now),
                s.given_up
                    .values()
                    .filter_map(|g| g.stopped)
                    .map(|(t, _)| t + self.poll)
                    .min(),
            ]
            .into_iter()
            .flatten()
            .min();
            let clock = self.clock.clone();
            tokio::select! {
                _ = self.commands.recv() => break,
                change = next_change(&mut feed) => match change {
                    Some(change) => {
                        self.take_in(&mut s, &known, change);
                        // The rest of a burst, before computing again.
                        for _ in 1..FEED_BURST {
                            match feed.as_mut().and_then(StoreFeed::try_next) {
                                Some(change) => self.take_in(&mut s, &known, change),
                                None => break,
                            }
                        }
                    }
                    None => {
                        // The feed ended: poll from now on.
                        feed = None;
                        s.refresh_wanted = true;
                    }
                },
                Some(reply) = replies.recv() => self.answer(&mut s, reply, feed.is_some()),
                _ = membership.changed() => s.dirty = true,
                _ = sleep_until(&clock, wake) => {}
            }
        }
        self.leave(s.standing).await;
    }

    /// Takes in one change from the feed.
    fn take_in(&self, s: &mut State, known: &HashSet<String>, change: Change) {
        let now = self.clock.now().mono;
        let (members, shards) = (member_prefix(&self.set), shard_prefix(&self.set));
        match change {
            Change::Written { group, current } => {
                if let Some(id) = group.as_str().strip_prefix(&members) {
                    s.roster.sightings().feed(now, id, current);
                } else if let Some(shard) = group.as_str().strip_prefix(&shards) {
                    if known.contains(shard) {
                        let before = holder(&s.shards, shard);
                        s.shards.feed(now, shard, current);
                        s.dirty |= holder(&s.shards, shard) != before;
                    }
                }
            }
            Change::Hint { group } => {
                if let Some(id) = group.as_str().strip_prefix(&members) {
                    s.read_members.insert(id.to_owned());
                } else if let Some(shard) = group.as_str().strip_prefix(&shards) {
                    if known.contains(shard) {
                        s.read_shards.insert(shard.to_owned());
                    }
                }
            }
            Change::Resync => s.refresh_wanted = true,
        }
    }

    /// Takes in a request's answer.
    fn answer(&self, s: &mut State, reply: Reply, has_feed: bool) {
        let now = self.clock.now().mono;
        match reply {
            Reply::Refresh {
                sent,
                members,
                shards,
            } => {
                s.refreshing = false;
                let every = if has_feed {
                    self.config.term * FEED_REFRESH_TERMS
                } else {
                    self.poll
                };
                s.next_refresh = now + jittered(every);
                match members {
                    Ok(listing) => {
                        s.reported = None;
                        s.roster.sightings().listing(sent, now, listing);
                    }
                    Err(e) => {
                        let kind = e.kind().to_owned();
                        if s.reported.as_deref() != Some(kind.as_str()) {
                            tracing::warn!(set = %self.set, error = %e, "cannot list the members");
                            s.reported = Some(kind);
                        }
                        // Try again at the poll, not at the slow net.
                        s.next_refresh = s.next_refresh.min(now + jittered(self.poll));
                    }
                }
                if let Some(read) = shards {
                    let before = self.holders(s);
                    let listing = read
                        .into_iter()
                        .filter_map(|(n, v)| Some((n, v?)))
                        .collect();
                    s.shards.listing(sent, now, listing);
                    s.dirty |= self.holders(s) != before;
                }
            }
            Reply::Stopped { shard } => {
                // Read the record: it shows whether the release applied.
                if let Some(g) = s.given_up.get_mut(&shard) {
                    let version = s.shards.get(&shard).map(|seen| seen.current.version);
                    g.stopped = Some((now, version));
                    s.read_shards.insert(shard);
                    s.dirty = true;
                }
            }
            Reply::Read {
                sent,
                members,
                shards,
            } => {
                s.reading = false;
                for (id, v) in members {
                    s.roster.sightings().read(sent, now, &id, v);
                }
                for (shard, v) in shards {
                    let before = holder(&s.shards, &shard);
                    s.shards.read(sent, now, &shard, v);
                    s.dirty |= holder(&s.shards, &shard) != before;
                    s.dirty |= forget_given_up(&mut s.given_up, &shard, sent);
                }
            }
        }
    }

    /// Who holds each shard: the records known, and what this member
    /// leads (which it knows first-hand, before its own write comes back).
    /// A record still naming this member for a shard it gave up is out of
    /// date (the release has not come back yet): the shard counts as held
    /// by nobody until the record changes, or until a read once its elector
    /// stopped says otherwise. Taken at its word, it made the member stand
    /// again for the shards it had just given up, and give up the ones it
    /// had just taken, over and over (found by the sharded simulation's
    /// simultaneous start). A record naming this member that it did not
    /// give up (a term of a process before it under the same id) counts as
    /// its own, as every other member counts it, so that it stands for
    /// that shard and takes it over.
    fn holders(&self, s: &State) -> BTreeMap<String, String> {
        let mut out: BTreeMap<String, String> = s
            .shards
            .iter()
            .filter_map(|(shard, seen)| {
                let holder = seen.current.record.holder_id()?;
                let stale = holder == self.member
                    && s.given_up
                        .get(shard)
                        .is_some_and(|g| g.outdates(&seen.current));
                (!stale).then(|| (shard.clone(), holder.to_owned()))
            })
            .collect();
        for shard in &s.leading {
            out.insert(shard.clone(), self.member.clone());
        }
        out
    }

    /// Lists the members and reads every shard, in the background.
    fn refresh(&self, sent: MonoTime, replies: mpsc::UnboundedSender<Reply>) {
        let (store, clock, timeout) = (self.store.clone(), self.clock.clone(), self.config.term);
        let prefix = member_prefix(&self.set);
        let groups: Vec<(String, GroupName)> = self
            .shards
            .iter()
            .filter_map(|s| Some((s.clone(), GroupName::new(shard_group(&self.set, s)).ok()?)))
            .collect();
        tokio::spawn(async move {
            let deadline = clock.now().mono + timeout;
            let list = async {
                let listed = store.list(&prefix).await?;
                Ok::<BTreeMap<String, Versioned>, StoreError>(
                    listed
                        .into_iter()
                        .filter_map(|l| {
                            let id = l.group.as_str().strip_prefix(&prefix)?.to_owned();
                            // A record that cannot be read is no evidence of a
                            // member.
                            Some((id, l.record.ok()?))
                        })
                        .collect(),
                )
            };
            let names: Vec<GroupName> = groups.iter().map(|(_, g)| g.clone()).collect();
            let read = async {
                let read = store.read_many(&names).await.ok()?;
                Some(reads(groups.iter().map(|(s, _)| s.clone()), read))
            };
            let reply = tokio::select! {
                (members, shards) = async { tokio::join!(list, read) } => Reply::Refresh { sent, members, shards },
                _ = clock.sleep_until(deadline) => Reply::Refresh {
                    sent,
                    members: Err(StoreError::Timeout(timeout)),
                    shards: None,
                },
            };
            let _ = replies.send(reply);
        });
    }

    /// Reads single member and shard records, in one batch, in the
    /// background.
    fn read(
        &self,
        sent: MonoTime,
        members: BTreeSet<String>,
        shards: BTreeSet<String>,
        replies: mpsc::UnboundedSender<Reply>,
    ) {
        let (store, clock, timeout) = (self.store.clone(), self.clock.clone(), self.config.term);
        let named: Vec<(bool, String, GroupName)> = members
            .into_iter()
            .filter_map(|id| {
                let g = GroupName::new(member_group(&self.set, &id)).ok()?;
                Some((true, id, g))
            })
            .chain(shards.into_iter().filter_map(|shard| {
                let g = GroupName::new(shard_group(&self.set, &shard)).ok()?;
                Some((false, shard, g))
            }))
            .collect();
        tokio::spawn(async move {
            let deadline = clock.now().mono + timeout;
            let names: Vec<GroupName> = named.iter().map(|(_, _, g)| g.clone()).collect();
            let read = tokio::select! {
                r = store.read_many(&names) => r.ok(),
                _ = clock.sleep_until(deadline) => None,
            };
            let (mut members, mut shards) = (Vec::new(), Vec::new());
            if let Some(read) = read {
                for ((is_member, name, _), r) in named.into_iter().zip(read) {
                    if let Ok(v) = r {
                        if is_member {
                            members.push((name, v));
                        } else {
                            shards.push((name, v));
                        }
                    }
                }
            }
            let _ = replies.send(Reply::Read {
                sent,
                members,
                shards,
            });
        });
    }

    /// Clears the records of members that lapsed (see [`Roster::lapsed`]),
    /// each version once: a release written with a compare-and-swap on the
    /// version seen unchanged, which fails if the member renewed after all.
    fn clear_lapsed(&self, roster: &Roster, cleared: &mut BTreeMap<String, Version>) {
        let now = self.clock.now();
        let lapsed = roster.lapsed(now.mono);
        cleared.retain(|id, _| lapsed.iter().any(|(l, _)| l == id));
        for (id, seen) in lapsed {
            if id == self.member || cleared.get(id) == Some(&seen.version) {
                continue;
            }
            cleared.insert(id.to_owned(), seen.version);
            let Ok(group) = GroupName::new(member_group(&self.set, id)) else {
                continue;
            };
            let record = LeaseRecord {
                holder: None,
                token: seen.record.token,
                term: seen.record.term,
                renewed_at: now.wall,
                expires_at: now.wall,
                metadata: Metadata::new(),
            };
            let (store, clock, version) = (self.store.clone(), self.clock.clone(), seen.version);
            let (set, id) = (self.set.clone(), id.to_owned());
            let timeout = self.poll.max(Duration::from_millis(1));
            tokio::spawn(async move {
                let deadline = clock.now().mono + timeout;
                tokio::select! {
                    r = store.compare_and_swap(&group, Some(version), &record) => match r {
                        Ok(CasOutcome::Applied(_)) => {
                            tracing::info!(set = %set, member = id, "cleared the record of a member gone")
                        }
                        // It renewed after all, or another member cleared it.
                        Ok(CasOutcome::Conflict) => {}
                        Err(e) => {
                            tracing::debug!(set = %set, member = id, error = %e, "cannot clear a lapsed member's record")
                        }
                    },
                    _ = clock.sleep_until(deadline) => {}
                }
            });
        }
    }

    /// The live members: the roster's, with this member counted by its own
    /// lease (which it knows better than any listing).
    fn live(&self, roster: &Roster, now: MonoTime) -> Vec<Member> {
        let mut members: Vec<Member> = roster
            .live(now)
            .into_iter()
            .filter(|m| m.id != self.member)
            .collect();
        if self.membership.is_leader() {
            members.push(Member {
                id: self.member.clone(),
                metadata: self.metadata.clone(),
            });
            members.sort_by(|a, b| a.id.cmp(&b.id));
        }
        members
    }

    /// Keeps an elector standing for each target and for nothing else;
    /// returns the shards given up.
    fn stand_for(
        &self,
        ids: &[String],
        holders: &BTreeMap<String, String>,
        standing: &mut BTreeMap<String, Elector>,
        replies: &mpsc::UnboundedSender<Reply>,
    ) -> Vec<String> {
        let targets: BTreeSet<String> = if self.membership.is_leader() {
            assign_names(&self.shards, ids, holders)
                .into_iter()
                .filter(|(_, m)| *m == self.member)
                .map(|(s, _)| s)
                .collect()
        } else {
            // Not a member: stand for nothing, give back what is held.
            BTreeSet::new()
        };
        let before = standing.len();
        let mut changed = false;
        let mut dropped = Vec::new();
        standing.retain(|shard, elector| {
            let keep = targets.contains(shard);
            if !keep {
                changed = true;
                dropped.push(shard.clone());
                let (elector, replies, shard) = (elector.clone(), replies.clone(), shard.clone());
                // Drains the shard's work and releases it for its new target.
                tokio::spawn(async move {
                    elector.shutdown().await;
                    let _ = replies.send(Reply::Stopped { shard });
                });
            }
            keep
        });
        for shard in targets {
            if standing.contains_key(&shard) {
                continue;
            }
            match Elector::builder(self.store.clone(), shard_group(&self.set, &shard))
                .candidate_id(self.member.clone())
                .config(self.config.clone())
                .metadata(self.metadata.clone())
                .clock(self.clock.clone())
                .start()
            {
                Ok(elector) => {
                    forward(shard.clone(), &elector, self.events.clone());
                    standing.insert(shard, elector);
                    changed = true;
                }
                // Names and config were checked when the member started.
                Err(e) => {
                    tracing::error!(set = %self.set, shard, error = %e, "cannot stand for a shard")
                }
            }
        }
        if changed || standing.len() != before {
            self.electors_tx.send_replace(standing.clone());
        }
        dropped
    }

    /// Leaves gracefully: every shard drained and released first (so the
    /// others take them over at once), then the membership lease.
    async fn leave(self, standing: BTreeMap<String, Elector>) {
        self.electors_tx.send_replace(BTreeMap::new());
        let mut stopping = JoinSet::new();
        for elector in standing.into_values() {
            stopping.spawn(async move { elector.shutdown().await });
        }
        while stopping.join_next().await.is_some() {}
        self.membership.shutdown().await;
        // Dropping `electors_tx` here tells every `shutdown()` caller.
    }

    /// The store's feed, if it has one, to follow the records as they are
    /// written rather than at the next poll.
    async fn subscribe(&self) -> Option<StoreFeed> {
        let deadline = self.clock.now().mono + self.poll;
        tokio::select! {
            r = self.store.watch() => r.ok().flatten(),
            _ = self.clock.sleep_until(deadline) => None,
        }
    }
}

/// Forgets that `shard` was given up if a read sent at `sent` came after
/// its elector stopped: what the read showed is then the truth (a record
/// still naming this member is a term whose release did not apply, which
/// every member counts as this member's). Returns whether it forgot.
fn forget_given_up(given_up: &mut BTreeMap<String, GivenUp>, shard: &str, sent: MonoTime) -> bool {
    let done = given_up
        .get(shard)
        .and_then(|g| g.stopped)
        .is_some_and(|(stopped, _)| sent >= stopped);
    if done {
        given_up.remove(shard);
    }
    done
}

/// The holder of `shard` as known.
fn holder(shards: &Sightings, shard: &str) -> Option<String> {
    Some(shards.get(shard)?.current.record.holder_id()?.to_owned())
}

/// Pairs names with a batched read's answers, leaving out the ones that
/// failed.
fn reads(
    names: impl Iterator<Item = String>,
    read: Vec<Result<Option<Versioned>, StoreError>>,
) -> Vec<(String, Option<Versioned>)> {
    names
        .zip(read)
        .filter_map(|(name, r)| Some((name, r.ok()?)))
        .collect()
}

/// `every` plus up to a quarter of it, so that members started together do
/// not refresh together.
fn jittered(every: Duration) -> Duration {
    let jitter = every / 4;
    let nanos = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
    every + Duration::from_nanos(rand::thread_rng().gen_range(0..=nanos))
}

async fn sleep_until(clock: &Arc<dyn Clock>, wake: Option<MonoTime>) {
    match wake {
        Some(at) => clock.sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn next_change(feed: &mut Option<StoreFeed>) -> Option<Change> {
    match feed {
        Some(f) => f.next().await,
        None => std::future::pending().await,
    }
}

/// Turns one shard elector's events into the member's shard events.
fn forward(shard: String, elector: &Elector, events: broadcast::Sender<ShardEvent>) {
    // Subscribe before looking at the role, so that an election in between
    // is seen by one or the other (and reported once).
    let mut stream = elector.events();
    let mut reported = None;
    if let Role::Leader(term) = elector.role() {
        reported = Some(term.token());
        let _ = events.send(ShardEvent::Acquired {
            shard: shard.clone(),
            token: term.token(),
        });
    }
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            let shard = shard.clone();
            let _ = match event {
                Event::Elected { token } if reported != Some(token) => {
                    events.send(ShardEvent::Acquired { shard, token })
                }
                Event::Ousted { token, reason } => events.send(ShardEvent::Released {
                    shard,
                    token,
                    reason,
                }),
                _ => continue,
            };
        }
    });
}
