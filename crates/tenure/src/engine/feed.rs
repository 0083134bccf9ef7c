//! The store-wide change feed: subscribed once, demultiplexed by group,
//! checked against reads, and resubscribed with a back-off when it fails.
//! Other readers in the process that follow the whole store (a sharded
//! set's members) tap this one feed ([`Taps`]) instead of opening their
//! own: one feed per store per process, however many members and sets.
//! An engine none of whose groups follows (every one leads) and that no
//! reader taps drops the feed until one does (`Task::park_feed_if_unused`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::clock::{Clock, MonoTime, Now};
use crate::error::StoreError;
use crate::machine::{Action, Input, Phase};
use crate::record::{GroupName, Version, Versioned};
use crate::store::{Change, FeedRelay, StoreFeed, RESYNC_RETRY};

use super::shared::Counters;
use super::task::{Slot, Task};
use super::GroupId;

/// The engine's change feeds: the store-wide feed and its subscription,
/// the check that it still delivers, the taps of other readers, and the
/// per-group hints of a store without a store-wide feed. It owns that
/// state; the task hands what arrives to the machines.
pub(super) struct Feeds {
    /// The store-wide feed's state: read by the task's loop for changes,
    /// changed only by the methods below (which keep the check and the
    /// taps in step with it).
    pub(super) state: Feed,
    pub(super) check: FeedCheck,
    /// The subscription in flight, if any.
    pub(super) subscribing: JoinSet<Result<Option<StoreFeed>, StoreError>>,
    /// Readers of the store-wide feed besides the groups.
    pub(super) taps: Taps,
    /// Change hints of single groups, for stores without a store-wide feed.
    pub(super) hints: mpsc::UnboundedReceiver<GroupId>,
    hint_tx: mpsc::UnboundedSender<GroupId>,
}

impl Feeds {
    /// No feed yet; the first subscription may go out at `now`.
    pub(super) fn new(now: MonoTime) -> Feeds {
        let (hint_tx, hints) = mpsc::unbounded_channel();
        Feeds {
            state: Feed::Off { retry_at: now },
            check: FeedCheck {
                next_at: now,
                reading: JoinSet::new(),
                owed: None,
                delivered: 0,
                delivered_when_owed: 0,
                cursor: 0,
                idle: false,
            },
            subscribing: JoinSet::new(),
            taps: Taps::default(),
            hints,
            hint_tx,
        }
    }

    /// Whether the store-wide feed delivers changes.
    pub(super) fn is_up(&self) -> bool {
        matches!(self.state, Feed::Up(_))
    }

    /// When the feed should be subscribed (again), if it is off and
    /// `wanted` (a group joined) or a tap waits for it.
    pub(super) fn subscribe_at(&self, wanted: bool) -> Option<MonoTime> {
        match self.state {
            Feed::Off { retry_at } if wanted || self.taps.awaited() => Some(retry_at),
            _ => None,
        }
    }

    /// When the feed check has something to do next, if the feed is up:
    /// judge what a read found, or send the next read (only while some
    /// group follows, and no read is in flight).
    pub(super) fn check_due(&self) -> Option<MonoTime> {
        if !self.is_up() {
            return None;
        }
        if let Some((_, _, by)) = self.check.owed {
            return Some(by);
        }
        // Whether any group follows is looked at only when a read is due
        // (once per retry interval): it takes a pass over every group.
        self.check.reading.is_empty().then_some(self.check.next_at)
    }

    /// Whether the store has no store-wide feed (its groups subscribe one
    /// by one).
    pub(super) fn is_per_group(&self) -> bool {
        matches!(self.state, Feed::PerGroup)
    }

    /// Whether the feed is parked (see [`Task::park_feed_if_unused`]).
    pub(super) fn is_parked(&self) -> bool {
        matches!(self.state, Feed::Parked)
    }

    /// A reader outside the engine's groups asks for the store-wide feed
    /// (see [`Taps`]): a tap at once if the feed is up, `None` if the store
    /// has none (it polls, as it would have on its own `watch`), else once
    /// the engine's subscription answers (its caller unparks a parked feed
    /// first).
    fn tap(&mut self, to: oneshot::Sender<Option<StoreFeed>>) {
        match self.state {
            Feed::Up(_) => self.taps.open(to),
            Feed::PerGroup => {
                let _ = to.send(None);
            }
            Feed::Off { .. } | Feed::Subscribing | Feed::Parked => self.taps.waiting.push(to),
        }
    }

    /// A subscription went out.
    fn subscribing(&mut self) {
        self.state = Feed::Subscribing;
    }

    /// The subscription came back with `feed`: waiting taps get theirs.
    fn up(&mut self, feed: StoreFeed) {
        self.state = Feed::Up(feed);
        self.taps.answer(true);
    }

    /// The store has no store-wide feed: waiting taps are told so.
    fn per_group(&mut self) {
        self.state = Feed::PerGroup;
        self.taps.answer(false);
    }

    /// The subscription failed: waiting taps are told there is none now,
    /// and it is tried again at `retry_at`.
    fn failed(&mut self, retry_at: MonoTime) {
        self.taps.answer(false);
        self.state = Feed::Off { retry_at };
    }

    /// Parks the feed if no group followed at this check nor the last and
    /// no reader taps it (see `Task::park_feed_if_unused`); true if it did.
    fn park_if_unused(&mut self) -> bool {
        if !self.taps.open.is_empty() || !self.taps.waiting.is_empty() {
            self.check.idle = false;
            return false;
        }
        if !std::mem::replace(&mut self.check.idle, true) {
            return false;
        }
        self.state = Feed::Parked;
        self.check.owed = None;
        self.check.idle = false;
        true
    }

    /// The feed is wanted again at `now`: a parked one is subscribed at
    /// once; true if it was parked.
    fn unpark(&mut self, now: MonoTime) -> bool {
        let parked = matches!(self.state, Feed::Parked);
        if parked {
            self.state = Feed::Off { retry_at: now };
        }
        parked
    }

    /// The feed ended or went silent: off until `retry_at`, its debt
    /// forgotten, its taps ended.
    fn lost(&mut self, retry_at: MonoTime) {
        self.state = Feed::Off { retry_at };
        self.check.owed = None;
        self.taps.end();
    }

    /// A change arrived: counted for the check, copied to every tap.
    fn delivered(&mut self, change: &Change) {
        self.check.delivered = self.check.delivered.wrapping_add(1);
        self.taps.relay(change);
    }
}

/// The engine's own check that its store-wide feed still delivers (see
/// the module docs).
pub(super) struct FeedCheck {
    /// When the next check read goes out.
    pub(super) next_at: MonoTime,
    /// The check read in flight: the group read, and what the store said.
    pub(super) reading: JoinSet<(GroupId, Result<Option<Versioned>, StoreError>)>,
    /// A version the check read found that the feed had not delivered
    /// yet: the group, the version, and when the feed must have delivered
    /// it (or anything at all) by.
    pub(super) owed: Option<(GroupId, Version, MonoTime)>,
    /// Changes the feed has delivered so far, and how many it had when the
    /// debt was noted: a feed that delivers other changes meanwhile is not
    /// silent, only late (a busy store's feed lags; taking that for
    /// silence would add every group's polls to its load).
    pub(super) delivered: u64,
    pub(super) delivered_when_owed: u64,
    /// Which following group to read next (round robin).
    pub(super) cursor: usize,
    /// Whether the last check found no group following (two in a row
    /// park the feed).
    pub(super) idle: bool,
}

pub(super) enum Feed {
    /// Not subscribed; try again at this instant.
    Off { retry_at: MonoTime },
    /// A subscription in flight.
    Subscribing,
    /// Changes arrive here.
    Up(StoreFeed),
    /// The store has no store-wide feed; groups subscribe one by one.
    PerGroup,
    /// Dropped because no group follows (see [`Task::park_feed_if_unused`]):
    /// subscribed again as soon as one does, or a reader taps it.
    Parked,
}

/// Room in a tap's feed: as much as a store's own feed offers, so that a
/// reader gathering deliveries for a while (a sharded set's member, up to
/// 50 ms) does not fall behind a burst of renewals and owe a resync.
const TAP_CAPACITY: usize = 8192;

/// Readers of the engine's store-wide feed besides its groups: each gets
/// every change the engine gets, as a hint (it reads before it acts), in a
/// [`StoreFeed`] of its own fed through a relay that never waits for it (a
/// slow reader is owed a [`Change::Resync`], never holds the engine up).
#[derive(Default)]
pub(super) struct Taps {
    /// The taps open, one relay each; a relay whose reader is gone is
    /// dropped at its next send.
    open: Vec<FeedRelay>,
    /// Taps asked for while the engine had no feed yet: answered when its
    /// subscription is.
    waiting: Vec<oneshot::Sender<Option<StoreFeed>>>,
}

impl Taps {
    /// Whether a tap waits for the engine's subscription (a reason to
    /// subscribe even without a group).
    pub(super) fn awaited(&self) -> bool {
        self.waiting.iter().any(|t| !t.is_closed())
    }

    /// When a tap that fell behind should be offered its resync again.
    pub(super) fn resync_due(&self, now: MonoTime) -> Option<MonoTime> {
        self.open
            .iter()
            .any(FeedRelay::owes_resync)
            .then_some(now + RESYNC_RETRY)
    }

    /// Opens a tap and hands it to `to`, unless its asker is gone.
    fn open(&mut self, to: oneshot::Sender<Option<StoreFeed>>) {
        if to.is_closed() {
            return;
        }
        let (tx, feed) = StoreFeed::channel(TAP_CAPACITY);
        if to.send(Some(feed)).is_ok() {
            self.open.push(FeedRelay::new(tx));
        }
    }

    /// Copies one change to every tap.
    fn relay(&mut self, change: &Change) {
        self.open.retain_mut(|r| r.send(change.clone()));
    }

    /// Offers the resyncs owed; drops the taps whose readers are gone.
    pub(super) fn settle(&mut self) {
        self.open.retain_mut(FeedRelay::settle);
    }

    /// Ends every tap: the engine's feed ended or went silent, and their
    /// readers poll until they tap the next one.
    fn end(&mut self) {
        self.open.clear();
    }

    /// Answers every waiting tap: a tap each if the engine's feed is `up`,
    /// else `None` (no feed to be had now).
    fn answer(&mut self, up: bool) {
        for to in std::mem::take(&mut self.waiting) {
            if up {
                self.open(to);
            } else {
                let _ = to.send(None);
            }
        }
    }
}

/// Whether a group waits for a lease someone else may hold (what the feed
/// check reads).
pub(super) fn following(slot: &Slot) -> bool {
    slot.machine.phase() == Phase::Candidate
}

/// Notes a version of the group's record the engine has seen.
pub(super) fn saw(slot: &mut Slot, version: Version) {
    slot.seen = Some(slot.seen.map_or(version, |s| s.max(version)));
}

/// Feeds the latest application pulse, if any arrived since the last.
pub(super) fn feed_pulse(slot: &mut Slot, now: Now, out: &mut Vec<Action>) {
    let last = slot.session.pulse.last.load(Ordering::Acquire);
    if last <= slot.fed_pulse {
        return;
    }
    slot.fed_pulse = last;
    let at = MonoTime::from_nanos(last).min(now.mono);
    slot.machine.step_into(now, Input::Pulse { at }, out);
}

/// Asks pulses to wake the engine while the application's silence is what
/// keeps this candidate from leading.
pub(super) fn watch_liveness(slot: &Slot, now: Now) {
    if let Some(timeout) = slot.machine.timing().liveness_timeout {
        let last = MonoTime::from_nanos(slot.session.pulse.last.load(Ordering::Acquire));
        let silent = now.mono >= last + timeout;
        let standing = slot.machine.phase() == Phase::Candidate;
        slot.session
            .pulse
            .waiting
            .store(silent && standing, Ordering::Release);
    }
}

/// The candidates of one group, copied out of `Task::by_group` (a step
/// may change it) without an allocation for the usual one.
enum Ids {
    One(GroupId),
    Many(Vec<GroupId>),
}

impl IntoIterator for Ids {
    type Item = GroupId;
    type IntoIter = std::iter::Chain<std::option::IntoIter<GroupId>, std::vec::IntoIter<GroupId>>;

    fn into_iter(self) -> Self::IntoIter {
        match self {
            Ids::One(id) => Some(id).into_iter().chain(Vec::new()),
            Ids::Many(ids) => None.into_iter().chain(ids),
        }
    }
}

impl Ids {
    fn len(&self) -> usize {
        match self {
            Ids::One(_) => 1,
            Ids::Many(ids) => ids.len(),
        }
    }
}

pub(super) async fn next_change(feed: &mut Feed) -> Option<Change> {
    match feed {
        Feed::Up(f) => f.next().await,
        _ => std::future::pending().await,
    }
}

impl Task {
    /// Sends the feed check's read, or judges what it found, when due.
    pub(super) fn run_feed_check(&mut self) {
        let now = self.clock.now().mono;
        if self.feed.check_due().is_none_or(|t| now < t) {
            return;
        }
        if let Some((id, version, _)) = self.feed.check.owed.take() {
            let delivered = self
                .slots
                .get(&id)
                .is_none_or(|s| s.seen.is_some_and(|seen| seen >= version));
            let spoke = self.feed.check.delivered != self.feed.check.delivered_when_owed;
            if !delivered && !spoke {
                Counters::add(&self.counters.feed_silences, 1);
                tracing::warn!(
                    "the change feed did not deliver a write within an operation timeout; polling until it is back"
                );
                self.feed_lost();
            }
            return;
        }
        let interval = self.limits.retry_interval();
        self.feed.check.next_at = now + interval;
        let followers: Vec<GroupId> = self
            .slots
            .iter()
            .filter(|(_, s)| following(s))
            .map(|(id, _)| *id)
            .collect();
        if followers.is_empty() {
            self.park_feed_if_unused();
            return;
        }
        self.feed.check.idle = false;
        let Some(&id) = followers.get(self.feed.check.cursor % followers.len().max(1)) else {
            return;
        };
        self.feed.check.cursor = self.feed.check.cursor.wrapping_add(1);
        let Some(slot) = self.slots.get(&id) else {
            return;
        };
        let (store, clock, group) = (self.store.clone(), self.clock.clone(), slot.group.clone());
        let timeout = self.limits.op_timeout().min(interval);
        Counters::add(&self.counters.read_batches, 1);
        Counters::add(&self.counters.reads, 1);
        self.feed.check.reading.spawn(async move {
            let deadline = clock.now().mono + timeout;
            let result = tokio::select! {
                biased;
                r = store.read(&group) => r,
                _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(timeout)),
            };
            (id, result)
        });
    }

    /// What the feed check's read found: a version newer than any the
    /// engine has seen for the group must come on the feed within an
    /// operation timeout.
    pub(super) fn on_check_read(
        &mut self,
        id: GroupId,
        result: Result<Option<Versioned>, StoreError>,
    ) {
        let Ok(Some(current)) = result else {
            return;
        };
        let Some(slot) = self.slots.get(&id) else {
            return;
        };
        if slot.seen.is_none_or(|seen| current.version > seen) && self.feed.is_up() {
            // Two retry intervals: a busy store's feed lags, and taking
            // lag for silence would add every group's polls to its load.
            let by = self.clock.now().mono + self.limits.retry_interval() * 2;
            let check = &mut self.feed.check;
            check.owed = Some((id, current.version, by));
            check.delivered_when_owed = check.delivered;
        }
    }

    /// A reader outside the engine's groups asks for the store-wide feed
    /// (see [`Feeds::tap`]): a parked feed is subscribed again at once.
    pub(super) fn tap(&mut self, to: oneshot::Sender<Option<StoreFeed>>) {
        if self.feed.is_parked() {
            let now = self.clock.now().mono;
            self.feed.unpark(now);
        }
        self.feed.tap(to);
    }

    /// Drops the store-wide feed once no group has followed at two feed
    /// checks in a row (a retry interval apart) and no reader taps it:
    /// every group leads (or is ending its term), and a leader needs no
    /// feed. Its own renewals came back on it only to be dropped, and
    /// what else it could bring a leader (a transfer request, a foreign
    /// write) is a hint the leader's next renewal finds anyway, by the
    /// conflict and the read that follows it: the bounds count on that
    /// renewal, not on the feed (`tenure-sim`'s priority hop, `notice`).
    /// On a store that publishes every write (Redis), nobody listening
    /// is what makes the publish cheap. The feed is subscribed again as
    /// soon as a group follows (`Task::step`) or a reader taps it; until
    /// it is up, its candidates poll, as after a lost feed.
    pub(super) fn park_feed_if_unused(&mut self) {
        if !self.feed.park_if_unused() {
            return;
        }
        tracing::debug!("no group follows: the change feed is dropped until one does");
        let ids: Vec<GroupId> = self.slots.keys().copied().collect();
        for id in ids {
            self.step(id, Input::Feed { live: false });
        }
    }

    /// A group of a parked feed's engine follows again (it stands, its term
    /// over, or it joined): the feed is subscribed at once.
    pub(super) fn unpark_feed(&mut self, now: MonoTime) {
        if self.feed.unpark(now) {
            tracing::debug!("a group follows: subscribing to the change feed again");
        }
    }

    /// The store-wide feed ended or went silent: every group polls until
    /// the engine has subscribed again, and so does every tap's reader.
    pub(super) fn feed_lost(&mut self) {
        let retry_at = self.clock.now().mono + self.limits.retry_interval();
        self.feed.lost(retry_at);
        let ids: Vec<GroupId> = self.slots.keys().copied().collect();
        for id in ids {
            self.step(id, Input::Feed { live: false });
        }
    }

    pub(super) fn subscribe_if_due(&mut self) {
        let Some(retry_at) = self.feed.subscribe_at(!self.slots.is_empty()) else {
            return;
        };
        if self.clock.now().mono < retry_at {
            return;
        }
        self.feed.subscribing();
        let (store, clock) = (self.store.clone(), self.clock.clone());
        // Bounded like an operation of the shortest term in the engine.
        let timeout = self
            .slots
            .values()
            .map(|s| s.machine.timing().op_timeout)
            .min()
            .unwrap_or(Duration::from_secs(5));
        self.feed.subscribing.spawn(async move {
            let deadline = clock.now().mono + timeout;
            tokio::select! {
                biased;
                r = store.watch() => r,
                _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(timeout)),
            }
        });
    }

    pub(super) fn on_subscribed(&mut self, result: Result<Option<StoreFeed>, StoreError>) {
        match result {
            Ok(Some(feed)) => {
                self.feed.up(feed);
                let ids: Vec<GroupId> = self.slots.keys().copied().collect();
                for id in ids {
                    self.step(id, Input::Feed { live: true });
                }
            }
            Ok(None) => {
                self.feed.per_group();
                let ids: Vec<GroupId> = self.slots.keys().copied().collect();
                for id in ids {
                    self.subscribe_group(id);
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "no change feed yet; polling");
                // A tap waiting is told now, as its reader's own `watch`
                // failing would have: it polls, and asks again later.
                let retry_at = self.clock.now().mono + self.limits.retry_interval();
                self.feed.failed(retry_at);
            }
        }
    }

    pub(super) fn on_change(&mut self, change: Option<Change>) {
        let Some(change) = change else {
            tracing::debug!("change feed ended; polling until it is back");
            return self.feed_lost();
        };
        Counters::add(&self.counters.changes, 1);
        self.feed.delivered(&change);
        match change {
            Change::Written { group, current } => {
                // One candidate per group is the rule: no copy of the list.
                let ids = match self.by_group.get(&group).map(Vec::as_slice) {
                    Some(&[one]) => Ids::One(one),
                    Some(many) => Ids::Many(many.to_vec()),
                    None => Ids::Many(Vec::new()),
                };
                let last = ids.len().saturating_sub(1);
                let mut current = Some(current);
                for (i, id) in ids.into_iter().enumerate() {
                    let Some(version) = current.as_ref().map(|c| c.version) else {
                        break;
                    };
                    if let Some(slot) = self.slots.get_mut(&id) {
                        // What the feed delivered (a forged version only
                        // blinds the check for this one group; it reads
                        // the groups in turn).
                        saw(slot, version);
                        // A leader's own write coming back: a leader acts
                        // on a delivery only if it is newer than its own
                        // last write (`on_delivery_while_leading`), and
                        // this one is not. Skipping it spares the machine
                        // step (and the record's copy) of every renewal.
                        let leading = matches!(slot.machine.phase(), Phase::Leader { .. });
                        if leading && slot.wrote.is_some_and(|w| w >= version) {
                            continue;
                        }
                    }
                    let delivered = if i == last {
                        current.take()
                    } else {
                        current.clone()
                    };
                    if let Some(current) = delivered {
                        self.step(id, Input::Observed { current });
                    }
                }
            }
            Change::Hint { group } => {
                for id in self.ids_of(&group) {
                    self.step(id, Input::Changed);
                }
            }
            Change::Resync => {
                let ids: Vec<GroupId> = self.slots.keys().copied().collect();
                for id in ids {
                    self.step(id, Input::Changed);
                }
            }
        }
    }

    pub(super) fn ids_of(&self, group: &GroupName) -> Vec<GroupId> {
        self.by_group.get(group).cloned().unwrap_or_default()
    }

    /// For a store without a store-wide feed: forward the group's own
    /// change hints into the engine, re-subscribing when the feed ends.
    pub(super) fn subscribe_group(&mut self, id: GroupId) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let tx = self.feed.hint_tx.clone();
        let (store, group, clock) = (self.store.clone(), slot.group.clone(), self.clock.clone());
        let timeout = slot.machine.timing().op_timeout;
        let retry = slot.machine.timing().retry_interval;
        let handle = tokio::spawn(async move {
            loop {
                let deadline = clock.now().mono + timeout;
                let subscribed = tokio::select! {
                    biased;
                    r = store.changes(&group) => r,
                    _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(timeout)),
                };
                match subscribed {
                    Ok(Some(mut feed)) => {
                        while feed.changed().await.is_some() {
                            if tx.send(id).is_err() {
                                return;
                            }
                        }
                    }
                    // This store cannot notify: the group polls.
                    Ok(None) => return,
                    Err(_) => {}
                }
                clock.sleep_until(clock.now().mono + retry).await;
            }
        });
        slot.hints = Some(handle.abort_handle());
    }
}
