//! The task behind a [`Shards`](super::Shards) member: it lists the
//! members, computes this member's targets and keeps one elector standing
//! for each, and leaves gracefully at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinSet;

use super::assign::assign_names;
use super::members::{Member, Roster};
use super::{member_group, member_prefix, shard_group, ShardEvent};
use crate::clock::{Clock, MonoTime};
use crate::config::Config;
use crate::elector::Elector;
use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Metadata, Version, Versioned};
use crate::role::{Event, Role};
use crate::store::{CasOutcome, Change, LeaseStore, StoreFeed};

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

impl Task {
    pub(crate) async fn run(mut self) {
        let prefix = member_prefix(&self.set);
        let mut roster = Roster::default();
        let mut feed = self.subscribe().await;
        let mut membership = self.membership.watch_role();
        let mut standing: BTreeMap<String, Elector> = BTreeMap::new();
        let mut view: Option<Vec<String>> = None;
        let mut reported: Option<String> = None;
        let mut next_list = self.clock.now().mono;
        let mut holders: BTreeMap<String, String> = BTreeMap::new();
        // The lapsed member records already cleared (or tried), by version.
        let mut cleared: BTreeMap<String, Version> = BTreeMap::new();
        loop {
            if self.clock.now().mono >= next_list {
                match self.list(&prefix).await {
                    Ok(listing) => {
                        reported = None;
                        roster.observe(self.clock.now().mono, listing);
                        if let Some(now_held) = self.holders().await {
                            holders = now_held;
                        }
                    }
                    Err(e) => {
                        // Once per kind of failure, not once per poll.
                        let kind = e.kind().to_owned();
                        if reported.as_deref() != Some(kind.as_str()) {
                            tracing::warn!(set = %self.set, error = %e, "cannot list the members");
                            reported = Some(kind);
                        }
                    }
                }
                next_list = self.clock.now().mono + self.jittered_poll();
            }
            let now = self.clock.now().mono;
            self.clear_lapsed(&roster, &mut cleared).await;
            let members = self.live(&roster, now);
            let ids: Vec<String> = members.iter().map(|m| m.id.clone()).collect();
            if view.as_ref() != Some(&ids) {
                view = Some(ids.clone());
                self.members_tx.send_replace(members.clone());
                let _ = self.events.send(ShardEvent::MembersChanged { members });
            }
            // What this member holds it knows first-hand.
            for (shard, elector) in &standing {
                if elector.is_leader() {
                    holders.insert(shard.clone(), self.member.clone());
                }
            }
            self.stand_for(&ids, &holders, &mut standing);
            let mut wake = next_list;
            if let Some(lapse) = roster.next_lapse(now, self.drift) {
                wake = wake.min(lapse);
            }
            let clock = self.clock.clone();
            tokio::select! {
                _ = self.commands.recv() => break,
                change = next_change(&mut feed) => match change {
                    Some(change) if touches(&change, &prefix) => next_list = self.clock.now().mono,
                    Some(_) => {}
                    None => feed = None,
                },
                _ = membership.changed() => {}
                _ = clock.sleep_until(wake) => {}
            }
        }
        self.leave(standing).await;
    }

    /// Clears the records of members that lapsed (see [`Roster::lapsed`]),
    /// each version once: a release written with a compare-and-swap on the
    /// version seen unchanged, which fails if the member renewed after all.
    async fn clear_lapsed(&self, roster: &Roster, cleared: &mut BTreeMap<String, Version>) {
        let now = self.clock.now();
        let lapsed = roster.lapsed(now.mono, self.drift);
        cleared.retain(|id, _| lapsed.iter().any(|(l, _)| l == id));
        for (id, seen) in lapsed {
            let version = seen.current.version;
            if id == self.member || cleared.get(id) == Some(&version) {
                continue;
            }
            cleared.insert(id.to_owned(), version);
            let Ok(group) = GroupName::new(member_group(&self.set, id)) else {
                continue;
            };
            let record = LeaseRecord {
                holder: None,
                token: seen.current.record.token,
                term: seen.current.record.term,
                renewed_at: now.wall,
                expires_at: now.wall,
                metadata: Metadata::new(),
            };
            let timeout = self.poll.max(Duration::from_millis(1));
            let deadline = self.clock.now().mono + timeout;
            tokio::select! {
                r = self.store.compare_and_swap(&group, Some(version), &record) => match r {
                    Ok(CasOutcome::Applied(_)) => {
                        tracing::info!(set = %self.set, member = id, "cleared the record of a member gone")
                    }
                    // It renewed after all, or another member cleared it.
                    Ok(CasOutcome::Conflict) => {}
                    Err(e) => {
                        tracing::debug!(set = %self.set, member = id, error = %e, "cannot clear a lapsed member's record")
                    }
                },
                _ = self.clock.sleep_until(deadline) => {}
            }
        }
    }

    /// The live members: the roster's, with this member counted by its own
    /// lease (which it knows better than any listing).
    fn live(&self, roster: &Roster, now: MonoTime) -> Vec<Member> {
        let mut members: Vec<Member> = roster
            .live(now, self.drift)
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

    /// Keeps an elector standing for each target and for nothing else.
    fn stand_for(
        &self,
        ids: &[String],
        holders: &BTreeMap<String, String>,
        standing: &mut BTreeMap<String, Elector>,
    ) {
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
        standing.retain(|shard, elector| {
            let keep = targets.contains(shard);
            if !keep {
                changed = true;
                let elector = elector.clone();
                // Drains the shard's work and releases it for its new target.
                tokio::spawn(async move { elector.shutdown().await });
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

    async fn list(&self, prefix: &str) -> Result<BTreeMap<String, Versioned>, StoreError> {
        let timeout = self.poll.max(Duration::from_millis(1));
        let deadline = self.clock.now().mono + timeout;
        let listed = tokio::select! {
            r = self.store.list(prefix) => r?,
            _ = self.clock.sleep_until(deadline) => return Err(StoreError::Timeout(timeout)),
        };
        Ok(listed
            .into_iter()
            .filter_map(|l| {
                let id = l.group.as_str().strip_prefix(prefix)?.to_owned();
                // A record that cannot be read is no evidence of a member.
                Some((id, l.record.ok()?))
            })
            .collect())
    }

    /// Who holds each shard now, from one batched read of every shard's
    /// record; `None` if the read failed (the last view stays).
    async fn holders(&self) -> Option<BTreeMap<String, String>> {
        let groups: Vec<GroupName> = self
            .shards
            .iter()
            .map(|s| GroupName::new(shard_group(&self.set, s)))
            .collect::<Result<_, _>>()
            .ok()?;
        let timeout = self.poll.max(Duration::from_millis(1));
        let deadline = self.clock.now().mono + timeout;
        let read = tokio::select! {
            r = self.store.read_many(&groups) => r.ok()?,
            _ = self.clock.sleep_until(deadline) => return None,
        };
        Some(
            self.shards
                .iter()
                .zip(read)
                .filter_map(|(shard, r)| {
                    let holder = r.ok()??.record.holder?.id;
                    Some((shard.clone(), holder))
                })
                .collect(),
        )
    }

    fn jittered_poll(&self) -> Duration {
        let jitter = self.poll / 4;
        let nanos = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
        self.poll + Duration::from_nanos(rand::thread_rng().gen_range(0..=nanos))
    }

    /// The store's feed, if it has one, to notice joins and graceful leaves
    /// at once rather than at the next poll.
    async fn subscribe(&self) -> Option<StoreFeed> {
        let deadline = self.clock.now().mono + self.poll;
        tokio::select! {
            r = self.store.watch() => r.ok().flatten(),
            _ = self.clock.sleep_until(deadline) => None,
        }
    }
}

fn touches(change: &Change, prefix: &str) -> bool {
    match change {
        Change::Written { group, .. } | Change::Hint { group } => {
            group.as_str().starts_with(prefix)
        }
        Change::Resync => true,
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
