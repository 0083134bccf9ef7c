//! The task behind a [`Shards`](super::Shards) member: it follows the
//! member and shard records, computes this member's targets and keeps one
//! elector standing for each, and leaves gracefully at the end.
//!
//! What it knows of the member records it knows from reads and listings
//! only (see [`Sightings`]); the store's change feed (a tap of the one
//! its engine keeps, see [`Requests::subscribe`]) tells it *when* to
//! read. A delivery of a member joining or leaving makes it read that
//! record; of a renewal it only notes when it came (see [`Roster::fed`]).
//! Shard records it takes from the feed as delivered, newer versions only
//! ([`Sightings::fed`]): who holds a shard only steers the assignment,
//! never a shard's safety, and reading every shard that changes hands would
//! cost each member a read of every hand-over in the set. It asks the store:
//!
//! * for a **refresh** (a listing of the members and one batched read of
//!   every shard): at the start, after the feed says it may have missed
//!   changes (at most once a poll), and every [`FEED_REFRESH_TERMS`] terms
//!   as a net under a feed that loses a delivery without saying so;
//!   without a feed, at every poll;
//! * for a **read** of the member records the feed pointed at (and of the
//!   shards it only had a hint of, or a doubtful record), and of the
//!   members whose records are about to lapse (gone, or renewed?),
//!   together: about one batched read a term.
//!
//! Requests run in the background ([`Requests`]), one listing and one read
//! at a time, so that a slow listing (a store with many other keys) never
//! holds up the loop; what asks for another meanwhile is remembered and
//! asked once it returns. A member's store operations per term are then
//! its writes plus about one read and a quarter of a refresh, whatever the
//! set's size.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch, Notify};
use tokio::task::JoinSet;

use super::assign::assign_names;
use super::catalog::ShardCatalog;
use super::layout::{catalog_prefix, member_prefix, shard_group, shard_prefix};
use super::members::{Member, Roster};
use super::requests::{Reply, Requests};
use super::sightings::{Fed, Sightings};
use super::ShardEvent;
use crate::clock::{Clock, MonoTime};
use crate::config::Config;
use crate::elector::Elector;
use crate::record::{Metadata, Version, Versioned};
use crate::role::{Event, Role};
use crate::store::{Change, LeaseStore, StoreFeed};

/// With a change feed, a full refresh every this many terms (plus jitter):
/// a net under a feed that loses a delivery without a resync.
pub(crate) const FEED_REFRESH_TERMS: u32 = 4;

/// Changes taken from the feed at once before the targets are computed
/// again: a burst (every shard renewed) costs one computation, not one per
/// delivery.
const FEED_BURST: usize = 4096;

/// The longest a delivery waits for the ones after it before the member
/// computes again (a twentieth of the poll, if shorter). Deliveries come one
/// at a time: at 10,000 shards and a 10 s term a renewal of some shard
/// every third of a millisecond, and each computation looks at every shard
/// stood for. Computed once per delivery, 16 members over 10,000 shards
/// kept both cores of a machine busy and never balanced.
const FEED_GATHER: Duration = Duration::from_millis(50);

/// The targets are computed again at most once per this much time for each
/// shard of the set (and at least once a quarter of a poll): a computation
/// looks at every shard, about a microsecond each, so a member spends at most
/// a few per cent of a core on it however fast holders change. Without a
/// bound, 17 members over 10,000 shards recomputed on every change while a
/// join moved 588 shards, used both cores of the machine, could no longer
/// renew their own leases in time, and the set collapsed to no shard held.
const RETARGET_PER_SHARD: Duration = Duration::from_micros(10);

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
    /// The catalog, for a set that follows one (`shards` is then its ready
    /// shards as last read).
    pub(crate) catalog: Option<watch::Receiver<Option<Arc<ShardCatalog>>>>,
    /// Tells the catalog's follower to read it now.
    pub(crate) catalog_read: Arc<Notify>,
    /// Stops the catalog's follower when the member leaves (the handles
    /// keep a receiver of the catalog, so it cannot tell by itself).
    pub(crate) catalog_stop: tokio_util::sync::CancellationToken,
    /// Where `shards` is published.
    pub(crate) shards_tx: watch::Sender<Arc<Vec<String>>>,
    /// The catalog leader, stopped when the member leaves.
    pub(crate) leader: Option<super::catalog::LeaderHandle>,
}

/// A shard this member gave up. While its elector stops (drains, and
/// releases the shard if it holds it, even one whose acquisition was still
/// on its way), a record naming this member is out of date. Once it has
/// stopped, the record it left is out of date until the record changes, or
/// a read sent after the stop shows it unchanged (the release did not
/// apply), or a poll has passed (the release's write would have come back
/// by then, and a read may fail): then it is taken at its word.
struct GivenUp {
    /// Which giving-up this is: a shard given up, stood for again and given
    /// up again has a new one, so that the first elector's stop is not
    /// taken for the second's.
    generation: u64,
    stopped: Option<Stopped>,
}

/// When a given-up shard's elector stopped.
#[derive(Clone, Copy)]
struct Stopped {
    at: MonoTime,
    /// The first request sent after the stop.
    seq: u64,
    /// The version of the shard's record then.
    version: Option<Version>,
}

impl GivenUp {
    /// Whether `seen`, a record naming this member, is out of date.
    fn outdates(&self, seen: &Versioned) -> bool {
        match self.stopped {
            None => true,
            Some(stopped) => stopped.version == Some(seen.version),
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
    /// Electors of shards given up, draining: a graceful leave waits for
    /// them.
    draining: JoinSet<()>,
    /// Of the shards stood for, the ones it leads now (known first-hand).
    leading: BTreeSet<String>,
    /// The live member ids last published.
    view: Option<Vec<String>>,
    /// Whether the targets must be computed again (the members, the
    /// holders or this member's own standing changed), and the earliest
    /// instant they may be (see [`RETARGET_PER_SHARD`]).
    dirty: bool,
    next_retarget: MonoTime,
    /// The store's feed, once subscribed; whether a subscription is under
    /// way, and when to try again without one.
    feed: Option<StoreFeed>,
    subscribing: bool,
    next_subscribe: MonoTime,
    /// The membership elector's role, until it stops for good.
    membership_open: bool,
    /// Since when this member holds its membership lease (while it does).
    member_since: Option<MonoTime>,
    /// Whether it has looked around since: a listing sent once it was a
    /// member has answered, and half a poll has passed for the others'
    /// joins to arrive. Until then it stands for nothing: a member that
    /// started together with the others and stood for what it saw alone
    /// (every shard) had every member of the set contend for every shard
    /// at once; on 16 members × 10,000 shards the store never recovered.
    settled: bool,
    /// When the first listing since it became a member went out.
    listed_as_member: Option<MonoTime>,
    /// Requests sent so far, numbering them.
    seq: u64,
    /// A listing in flight; one wanted (a resync); when the last went out;
    /// when the next is due.
    listing: bool,
    list_wanted: bool,
    /// A listing wanted at once, whatever the last (to look around as a
    /// new member).
    list_now: bool,
    /// Until when the first listing waits for the first subscription's
    /// answer (a request's time limit after the start).
    first_listing_by: MonoTime,
    /// Whether a read of every shard has answered (so that a look around
    /// may list the members alone).
    shards_read: bool,
    last_list: Option<MonoTime>,
    next_list: MonoTime,
    /// A read in flight, and what to read next.
    reading: bool,
    read_members: BTreeSet<String>,
    read_shards: BTreeSet<String>,
    /// The lapsing member records already asked about: by version, and
    /// whether after the lapse.
    confirming: BTreeMap<String, (Version, bool)>,
    /// The lapsed member records already cleared (or tried), by version.
    cleared: BTreeMap<String, Version>,
    /// The shards this member gave up (see [`Task::holders`]), and the
    /// giving-ups so far.
    given_up: BTreeMap<String, GivenUp>,
    generations: u64,
    /// The last kind of listing failure logged: once per kind, not per poll.
    reported: Option<String>,
}

impl State {
    /// Whether the first listing is still waiting for the first
    /// subscription's answer (see [`State::first_listing_by`]).
    fn awaits_first_subscription(&self) -> bool {
        self.subscribing && self.last_list.is_none()
    }
}

impl Task {
    pub(crate) async fn run(mut self) {
        let now = self.clock.now().mono;
        let (replies_tx, mut replies) = mpsc::unbounded_channel();
        let requests = Requests {
            set: self.set.clone(),
            store: self.store.clone(),
            engine: self.membership.engine(),
            clock: self.clock.clone(),
            timeout: self.config.term,
            replies: replies_tx,
        };
        let mut s = State {
            roster: Roster::new(self.drift, self.poll),
            shards: Sightings::default(),
            standing: BTreeMap::new(),
            draining: JoinSet::new(),
            leading: BTreeSet::new(),
            view: None,
            dirty: true,
            next_retarget: MonoTime::from_nanos(0),
            feed: None,
            subscribing: true,
            next_subscribe: now,
            membership_open: true,
            member_since: None,
            settled: false,
            listed_as_member: None,
            seq: 0,
            listing: false,
            list_wanted: true,
            list_now: false,
            first_listing_by: now + self.config.term,
            shards_read: false,
            last_list: None,
            next_list: now,
            reading: false,
            read_members: BTreeSet::new(),
            read_shards: BTreeSet::new(),
            confirming: BTreeMap::new(),
            cleared: BTreeMap::new(),
            given_up: BTreeMap::new(),
            generations: 0,
            reported: None,
        };
        let mut known: HashSet<String> = self.shards.iter().cloned().collect();
        requests.subscribe();
        let mut membership = self.membership.watch_role();
        loop {
            let now = self.clock.now().mono;
            self.send_requests(&mut s, &requests, now);
            self.clear_lapsed(&mut s, &requests);
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
            while s.draining.try_join_next().is_some() {}
            self.look_around(&mut s, now);
            let poll = self.poll;
            let before = s.given_up.len();
            s.given_up
                .retain(|_, g| g.stopped.is_none_or(|stopped| now < stopped.at + poll));
            s.dirty |= s.given_up.len() != before;
            if s.dirty && now >= s.next_retarget {
                s.dirty = false;
                s.next_retarget = now + self.retarget_every();
                self.retarget(&mut s, &ids, &requests);
            }
            let wake = self.next_wake(&s, now);
            let clock = self.clock.clone();
            tokio::select! {
                // In this order, the same in every run (a simulation
                // replays its seed), and a busy feed never starves the
                // replies: a turn does whatever is due at its start, so
                // the sleep's own branch may wait.
                biased;
                _ = self.commands.recv() => break,
                Some(reply) = replies.recv() => {
                    self.answer(&mut s, reply);
                    // Every reply waiting, not one per turn: a turn that
                    // takes in the feed gathers for a while, and a busy
                    // feed wins most turns (a member giving up hundreds of
                    // shards has one reply for each).
                    while let Ok(reply) = replies.try_recv() {
                        self.answer(&mut s, reply);
                    }
                }
                changed = membership.changed(), if s.membership_open => {
                    if changed.is_err() {
                        // The membership elector stopped for good (its
                        // token cannot rise, or the store went back): this
                        // member stands for nothing from now on.
                        tracing::error!(set = %self.set, member = %self.member, "the membership lease's elector stopped; standing for no shard");
                        s.membership_open = false;
                    }
                    s.dirty = true;
                }
                read = catalog_changed(&mut self.catalog) => {
                    if read {
                        self.follow_catalog(&mut s, &mut known);
                    } else {
                        self.catalog = None;
                    }
                }
                change = next_change(&mut s.feed) => match change {
                    Some(change) => {
                        self.take_in(&mut s, &known, change);
                        // The rest of a burst, before computing again.
                        let gather = (self.poll / 20).min(FEED_GATHER);
                        clock.sleep_until(self.clock.now().mono + gather).await;
                        for _ in 1..FEED_BURST {
                            match s.feed.as_mut().and_then(StoreFeed::try_next) {
                                Some(change) => self.take_in(&mut s, &known, change),
                                None => break,
                            }
                        }
                    }
                    None => {
                        // The feed ended: poll, and subscribe again later.
                        s.feed = None;
                        s.list_wanted = true;
                        s.next_subscribe = now + self.poll;
                    }
                },
                _ = sleep_until(&clock, wake) => {}
            }
        }
        self.leave(s).await;
    }

    /// Sends what is due: a subscription, a listing (with a read of every
    /// shard), a read of what the feed pointed at and of lapsed members.
    fn send_requests(&self, s: &mut State, requests: &Requests, now: MonoTime) {
        if s.feed.is_none() && !s.subscribing && now >= s.next_subscribe {
            s.subscribing = true;
            requests.subscribe();
        }
        // A resync lists again, but not more often than once a poll.
        let resync_due = s.list_wanted && s.last_list.is_none_or(|t| now >= t + self.poll);
        // The first listing waits for the first subscription's answer
        // (bounded by the request's time limit): a listing sent before the
        // feed was there must be sent again once it is, for what was
        // written in between, and each costs a read of every shard.
        let first_subscription = s.awaits_first_subscription() && now < s.first_listing_by;
        if !s.listing && !first_subscription && (s.list_now || resync_due || now >= s.next_list) {
            // A listing only to look around as a new member (the set's
            // shards were read with an earlier listing, and the feed has
            // brought their changes since) lists the members alone.
            let members_only = s.list_now
                && !s.list_wanted
                && now < s.next_list
                && s.shards_read
                && s.feed.is_some();
            s.listing = true;
            s.list_now = false;
            s.list_wanted = false;
            s.last_list = Some(now);
            if s.member_since.is_some() && s.listed_as_member.is_none() {
                s.listed_as_member = Some(now);
            }
            requests.list(now, !members_only, member_prefix(&self.set));
            if !members_only {
                s.read_shards.extend(self.shards.iter().cloned());
            }
        }
        // A member about to lapse is read half a poll early; one that shows
        // the record unchanged is read again once it has lapsed: only a read
        // sent after the lapse counts the member gone. Such a read takes
        // every held member record along, in the same call: each one then
        // counts from its latest renewal, so all lapse at about the same
        // time and one read confirms them all, about twice a term whatever
        // the set's size (read one by one, members renewing at their own
        // phases cost one read per member).
        let to_confirm: Vec<(String, (Version, bool))> = s
            .roster
            .to_confirm(now + self.poll / 2)
            .into_iter()
            .map(|(id, v, lapse)| (id.to_owned(), (v, now >= lapse)))
            .collect();
        s.confirming
            .retain(|id, _| to_confirm.iter().any(|(c, _)| c == id));
        let mut confirm = false;
        for (id, ask) in to_confirm {
            if s.confirming.get(&id) != Some(&ask) {
                s.confirming.insert(id, ask);
                confirm = true;
            }
        }
        if confirm {
            let held = s.roster.held();
            s.read_members.extend(held);
        }
        let to_read = !(s.read_members.is_empty() && s.read_shards.is_empty());
        if to_read && !s.reading {
            s.reading = true;
            s.seq += 1;
            let members = std::mem::take(&mut s.read_members).into_iter().collect();
            let shards = std::mem::take(&mut s.read_shards).into_iter().collect();
            requests.read(s.seq, now, members, shards);
        }
    }

    /// Keeps track of whether this member is a member that has looked
    /// around (see [`State::settled`]).
    fn look_around(&self, s: &mut State, now: MonoTime) {
        if !self.membership.is_leader() {
            s.member_since = None;
            s.listed_as_member = None;
            s.dirty |= s.settled;
            s.settled = false;
            return;
        }
        let since = *s.member_since.get_or_insert(now);
        if s.listed_as_member.is_none() {
            // A listing from now on counts; ask for one at once.
            s.list_now = true;
        }
        if !s.settled
            && now >= since + self.poll / 2
            && s.listed_as_member.is_some_and(|sent| sent >= since)
            && !s.listing
        {
            s.settled = true;
            s.dirty = true;
        }
    }

    /// The least time between two computations of the targets.
    fn retarget_every(&self) -> Duration {
        let shards = u32::try_from(self.shards.len()).unwrap_or(u32::MAX);
        RETARGET_PER_SHARD.saturating_mul(shards).min(self.poll / 4)
    }

    /// The next instant something is due, if any.
    fn next_wake(&self, s: &State, now: MonoTime) -> Option<MonoTime> {
        // While a request is in flight its answer wakes the loop; so does
        // the first subscription's, which the first listing waits for (up
        // to a deadline, should that answer never come).
        let list = if s.listing {
            None
        } else if s.awaits_first_subscription() {
            Some(s.first_listing_by)
        } else if s.list_now {
            Some(now)
        } else if s.list_wanted {
            Some(s.last_list.map_or(now, |t| t + self.poll).min(s.next_list))
        } else {
            Some(s.next_list)
        };
        let subscribe = (s.feed.is_none() && !s.subscribing).then_some(s.next_subscribe);
        let given_up = s
            .given_up
            .values()
            .filter_map(|g| g.stopped)
            .map(|stopped| stopped.at + self.poll)
            .min();
        let settle = s
            .member_since
            .filter(|_| !s.settled)
            .map(|since| since + self.poll / 2)
            // Once past, the listing's answer wakes the loop.
            .filter(|at| *at > now);
        let early = self.poll / 2;
        let confirm = s.roster.next_change(now + early).map(|t| t - early);
        let retarget = s.dirty.then_some(s.next_retarget);
        [
            list,
            subscribe,
            given_up,
            confirm,
            settle,
            retarget,
            s.roster.next_change(now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Takes in one change from the feed: a shard's record as delivered, or
    /// a hint of which member records to read.
    fn take_in(&self, s: &mut State, known: &HashSet<String>, change: Change) {
        let (members, shards) = (member_prefix(&self.set), shard_prefix(&self.set));
        if self.catalog.is_some() {
            // A write of a catalog part, or a feed that may have missed
            // one: the follower reads the catalog (it takes nothing from
            // the delivery, which is only a hint).
            let part = match &change {
                Change::Written { group, .. } | Change::Hint { group } => {
                    group.as_str().starts_with(&catalog_prefix(&self.set))
                }
                Change::Resync => false,
            };
            if part || matches!(change, Change::Resync) {
                self.catalog_read.notify_one();
            }
            if part {
                return;
            }
        }
        match change {
            Change::Written { group, current } => {
                if let Some(id) = group.as_str().strip_prefix(&members) {
                    // A record it does not know, or another holder (a join,
                    // a leave, a restart) is read before it is believed: a
                    // forged join would give a ghost a share nobody stands
                    // for. A renewal by the same holder changes nothing it
                    // does: only when it was written is noted, for the
                    // next read.
                    let holder = current.record.holder.as_ref();
                    let same_holder = s
                        .roster
                        .sightings()
                        .get(id)
                        .is_some_and(|seen| seen.current.record.holder.as_ref() == holder);
                    if same_holder {
                        s.roster.fed(id, current.version, self.clock.now().mono);
                    } else {
                        s.read_members.insert(id.to_owned());
                    }
                } else if let Some(shard) = group.as_str().strip_prefix(&shards) {
                    // A shard's holder is taken from the delivery itself:
                    // reading it again would cost every member a read of
                    // every shard that changes hands (64 members starting
                    // together read 65,536 shard records). A false holder
                    // can only move the shard's target, never keep it
                    // unheld for long: a live member named stands for it
                    // as its own, a holder that is no member is not
                    // counted, and a forged record lasts until the real
                    // holder's next renewal (see below).
                    // A delivery older than the record known, and
                    // different, is read: if the record known was forged
                    // (a high version), the real holder's next renewal
                    // corrects it.
                    //
                    // A record naming this member for a shard it does not
                    // lead is read, not taken: it knows first-hand what it
                    // holds, and taken at its word such a record (forged,
                    // or a predecessor's under the same id) makes it give
                    // up shards it really holds for ones it does not.
                    if !known.contains(shard) {
                        return;
                    }
                    let names_me = current.record.holder_id() == Some(self.member.as_str());
                    if names_me && !s.leading.contains(shard) {
                        s.read_shards.insert(shard.to_owned());
                        return;
                    }
                    let before = holder(&s.shards, shard);
                    match s.shards.fed(self.clock.now().mono, shard, current) {
                        Fed::Changed => s.dirty |= holder(&s.shards, shard) != before,
                        Fed::Unchanged => {}
                        Fed::Older => {
                            s.read_shards.insert(shard.to_owned());
                        }
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
            Change::Resync => s.list_wanted = true,
        }
    }

    /// Takes in a request's answer.
    fn answer(&self, s: &mut State, reply: Reply) {
        let now = self.clock.now().mono;
        match reply {
            Reply::Listing {
                sent,
                full,
                members,
            } => {
                s.listing = false;
                let every = if s.feed.is_some() {
                    self.config.term * FEED_REFRESH_TERMS
                } else {
                    self.poll
                };
                // Only a refresh puts off the next one: looking around as
                // a member, again and again (a membership lost and won back
                // on an overloaded store), must not put off the net forever.
                if full {
                    s.next_list = now + jittered(every, &*self.clock);
                }
                match members {
                    Ok(listing) => {
                        s.reported = None;
                        s.roster.sightings_mut().listing(sent, now, listing);
                        s.roster.settle_fed();
                    }
                    Err(e) => {
                        let kind = e.kind().to_owned();
                        if s.reported.as_deref() != Some(kind.as_str()) {
                            tracing::warn!(set = %self.set, error = %e, "cannot list the members");
                            s.reported = Some(kind);
                        }
                        // Try again at the poll, not at the slow net.
                        s.next_list = s.next_list.min(now + jittered(self.poll, &*self.clock));
                    }
                }
            }
            Reply::Read {
                seq,
                sent,
                members,
                shards,
            } => {
                s.reading = false;
                s.shards_read |= shards.len() == self.shards.len();
                for (id, v) in members {
                    s.roster.sightings_mut().read(sent, now, &id, v);
                }
                s.roster.settle_fed();
                for (shard, v) in shards {
                    let before = holder(&s.shards, &shard);
                    s.shards.read(sent, now, &shard, v);
                    s.dirty |= holder(&s.shards, &shard) != before;
                    s.dirty |= forget_given_up(&mut s.given_up, &shard, seq);
                }
            }
            Reply::Stopped { shard, generation } => {
                // Read the record: it shows whether the release applied.
                if let Some(g) = s.given_up.get_mut(&shard) {
                    if g.generation == generation {
                        g.stopped = Some(Stopped {
                            at: now,
                            seq: s.seq + 1,
                            version: s.shards.get(&shard).map(|seen| seen.current.version),
                        });
                        s.read_shards.insert(shard);
                        s.dirty = true;
                    }
                }
            }
            Reply::Subscribed(feed) => {
                s.subscribing = false;
                match feed {
                    // What was written before the subscription: list again.
                    Some(feed) => {
                        s.feed = Some(feed);
                        s.list_wanted = true;
                    }
                    None => s.next_subscribe = now + self.config.term * FEED_REFRESH_TERMS,
                }
            }
        }
    }

    /// Assigns over the catalog's ready shards as last read: a shard added
    /// is read (for its holder) and assigned; one removed is no target of
    /// anyone's any more, and its holder drains and releases it.
    fn follow_catalog(&mut self, s: &mut State, known: &mut HashSet<String>) {
        let Some(catalog) = self.catalog.as_ref().and_then(|c| c.borrow().clone()) else {
            return;
        };
        let ready = catalog.ready();
        if ready == self.shards {
            return;
        }
        for shard in &ready {
            if !known.contains(shard) {
                s.read_shards.insert(shard.clone());
            }
        }
        *known = ready.iter().cloned().collect();
        self.shards = ready;
        s.dirty = true;
        self.shards_tx.send_replace(Arc::new(self.shards.clone()));
        let _ = self.events.send(ShardEvent::ShardsChanged {
            generation: catalog.generation,
            shards: self.shards.clone(),
        });
    }

    /// Computes the targets again and stands for them.
    fn retarget(&self, s: &mut State, ids: &[String], requests: &Requests) {
        let holders = self.holders(s);
        let dropped = self.stand_for(ids, &holders, s, requests);
        // Forget what no longer applies: a shard stood for again, a record
        // that changed since the elector stopped.
        let (shards, standing) = (&s.shards, &s.standing);
        s.given_up.retain(|shard, g| {
            let now_seen = shards.get(shard).map(|seen| seen.current.version);
            !standing.contains_key(shard)
                && g.stopped.is_none_or(|stopped| stopped.version == now_seen)
        });
        for (shard, generation) in dropped {
            s.given_up.insert(
                shard,
                GivenUp {
                    generation,
                    stopped: None,
                },
            );
        }
    }

    /// Who holds each shard: the records known, and what this member
    /// leads (which it knows first-hand, before its own write comes back).
    /// A record still naming this member for a shard it gave up is out of
    /// date (see [`GivenUp`]): the shard counts as held by nobody. Taken at
    /// its word, it made the member stand again for the shards it had just
    /// given up, and give up the ones it had just taken, over and over. A
    /// record naming this member that it did not give up (a term of a
    /// process before it under the same id) counts as its own, as every
    /// other member counts it, so that it stands for that shard and takes
    /// it over.
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

    /// Clears the records of members that lapsed (see [`Roster::lapsed`]),
    /// each version once.
    fn clear_lapsed(&self, s: &mut State, requests: &Requests) {
        let now = self.clock.now();
        let lapsed = s.roster.lapsed();
        s.cleared
            .retain(|id, _| lapsed.iter().any(|(l, _)| l == id));
        for (id, seen) in lapsed {
            if id == self.member || s.cleared.get(id) == Some(&seen.version) {
                continue;
            }
            s.cleared.insert(id.to_owned(), seen.version);
            requests.clear(now, id.to_owned(), seen);
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
    /// returns the shards given up, each with its giving-up's generation.
    fn stand_for(
        &self,
        ids: &[String],
        holders: &BTreeMap<String, String>,
        s: &mut State,
        requests: &Requests,
    ) -> Vec<(String, u64)> {
        let targets: BTreeSet<String> = if self.membership.is_leader() && s.settled {
            assign_names(&self.shards, ids, holders)
                .into_iter()
                .filter(|(_, m)| *m == self.member)
                .map(|(s, _)| s)
                .collect()
        } else {
            // Not a member, or one that has not looked around yet: stand
            // for nothing, give back what is held.
            BTreeSet::new()
        };
        let mut changed = false;
        let mut dropped = Vec::new();
        let given_up: Vec<String> = s
            .standing
            .keys()
            .filter(|shard| !targets.contains(*shard))
            .cloned()
            .collect();
        for shard in given_up {
            let Some(elector) = s.standing.remove(&shard) else {
                continue;
            };
            changed = true;
            s.generations += 1;
            let generation = s.generations;
            dropped.push((shard.clone(), generation));
            let replies = requests.replies.clone();
            // Drains the shard's work and releases it for its new target.
            s.draining.spawn(async move {
                elector.shutdown().await;
                let _ = replies.send(Reply::Stopped { shard, generation });
            });
        }
        for shard in targets {
            if s.standing.contains_key(&shard) {
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
                    s.standing.insert(shard, elector);
                    changed = true;
                }
                // Names and config were checked when the member started.
                Err(e) => {
                    tracing::error!(set = %self.set, shard, error = %e, "cannot stand for a shard")
                }
            }
        }
        if changed {
            self.electors_tx.send_replace(s.standing.clone());
        }
        dropped
    }

    /// Leaves gracefully: every shard drained and released first (those
    /// given up before included, so the others take them over at once),
    /// then the membership lease.
    async fn leave(mut self, mut s: State) {
        self.electors_tx.send_replace(BTreeMap::new());
        for elector in std::mem::take(&mut s.standing).into_values() {
            s.draining.spawn(async move { elector.shutdown().await });
        }
        while s.draining.join_next().await.is_some() {}
        if let Some(leader) = self.leader.take() {
            leader.shutdown().await;
        }
        self.catalog_stop.cancel();
        self.membership.shutdown().await;
        // Dropping `electors_tx` here tells every `shutdown()` caller.
    }
}

/// Forgets that `shard` was given up if read `seq` went out after its
/// elector stopped: what the read showed is then the truth (a record still
/// naming this member is a term whose release did not apply, which every
/// member counts as this member's). Returns whether it forgot.
fn forget_given_up(given_up: &mut BTreeMap<String, GivenUp>, shard: &str, seq: u64) -> bool {
    let done = given_up
        .get(shard)
        .and_then(|g| g.stopped)
        .is_some_and(|stopped| seq >= stopped.seq);
    if done {
        given_up.remove(shard);
    }
    done
}

/// The holder of `shard` as known.
fn holder(shards: &Sightings, shard: &str) -> Option<String> {
    Some(shards.get(shard)?.current.record.holder_id()?.to_owned())
}

/// `every` plus up to a quarter of it, so that members started together do
/// not refresh together (drawn from the clock, which a simulation seeds).
fn jittered(every: Duration, clock: &dyn Clock) -> Duration {
    let jitter = every / 4;
    let nanos = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
    every + Duration::from_nanos(clock.random_u64() % nanos.saturating_add(1))
}

async fn sleep_until(clock: &Arc<dyn Clock>, wake: Option<MonoTime>) {
    match wake {
        Some(at) => clock.sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Whether the catalog changed (`false` once it can change no more);
/// never ready for a set without one.
async fn catalog_changed(catalog: &mut Option<watch::Receiver<Option<Arc<ShardCatalog>>>>) -> bool {
    match catalog {
        Some(rx) => rx.changed().await.is_ok(),
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
