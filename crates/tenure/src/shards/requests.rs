//! The store requests a [`Shards`](super::Shards) member's task sends in
//! the background, so that a slow one (a listing over a database shared
//! with many other keys) never holds up its loop: each runs in a task of
//! its own, bounded in time, and answers with a [`Reply`] on the task's
//! channel.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::layout::{member_group, shard_group};
use crate::clock::{Clock, MonoTime, Now};
use crate::engine::Engine;
use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Metadata, Versioned};
use crate::store::{CasOutcome, LeaseStore, StoreFeed};

/// A request's answer.
pub(crate) enum Reply {
    /// A listing of the members, sent at `sent`; `full` if a read of every
    /// shard went with it (a refresh), not only a look around.
    Listing {
        sent: MonoTime,
        full: bool,
        members: Result<BTreeMap<String, Versioned>, StoreError>,
    },
    /// Reads of single records, request `seq` sent at `sent`; a record that
    /// could not be read is left out.
    Read {
        seq: u64,
        sent: MonoTime,
        members: Vec<(String, Option<Versioned>)>,
        shards: Vec<(String, Option<Versioned>)>,
    },
    /// The elector of a shard given up (the `generation`-th time) has
    /// stopped: drained, and released the shard if it held it.
    Stopped { shard: String, generation: u64 },
    /// A subscription to the store's feed (a tap of the engine's): `None`
    /// if the store has none, or it could not be had in time.
    Subscribed(Option<StoreFeed>),
}

/// What the requests need: the store, the clock, the set's names.
pub(crate) struct Requests {
    pub(crate) set: String,
    pub(crate) store: Arc<dyn LeaseStore>,
    /// The engine running the member's electors, whose one store-wide
    /// feed the member taps (`None`: it runs on none, and subscribes to
    /// the store itself).
    pub(crate) engine: Option<Engine>,
    pub(crate) clock: Arc<dyn Clock>,
    /// How long any request may take.
    pub(crate) timeout: Duration,
    pub(crate) replies: mpsc::UnboundedSender<Reply>,
}

impl Requests {
    /// Lists the members under `prefix`; `full` is handed back in the reply.
    pub(crate) fn list(&self, sent: MonoTime, full: bool, prefix: String) {
        let (store, replies) = (self.store.clone(), self.replies.clone());
        let bounded = self.bounded();
        tokio::spawn(async move {
            let members = match bounded.run(store.list(&prefix)).await {
                Some(Ok(listed)) => Ok(listed
                    .into_iter()
                    .filter_map(|l| {
                        let id = l.group.as_str().strip_prefix(&prefix)?.to_owned();
                        // A record that cannot be read is no evidence of a
                        // member.
                        Some((id, l.record.ok()?))
                    })
                    .collect()),
                Some(Err(e)) => Err(e),
                None => Err(StoreError::Timeout(bounded.timeout)),
            };
            let _ = replies.send(Reply::Listing {
                sent,
                full,
                members,
            });
        });
    }

    /// Reads member and shard records, in one batch.
    pub(crate) fn read(&self, seq: u64, sent: MonoTime, members: Vec<String>, shards: Vec<String>) {
        let named: Vec<(bool, String, GroupName)> = members
            .into_iter()
            .filter_map(|id| Some((true, GroupName::new(member_group(&self.set, &id)).ok()?, id)))
            .chain(shards.into_iter().filter_map(|shard| {
                Some((
                    false,
                    GroupName::new(shard_group(&self.set, &shard)).ok()?,
                    shard,
                ))
            }))
            .map(|(is_member, group, name)| (is_member, name, group))
            .collect();
        let (store, replies) = (self.store.clone(), self.replies.clone());
        let bounded = self.bounded();
        tokio::spawn(async move {
            let names: Vec<GroupName> = named.iter().map(|(_, _, g)| g.clone()).collect();
            let read = bounded.run(store.read_many(&names)).await;
            let (mut members, mut shards) = (Vec::new(), Vec::new());
            if let Some(Ok(read)) = read {
                for ((is_member, name, _), r) in named.into_iter().zip(read) {
                    // A record that could not be read says nothing.
                    let Ok(v) = r else { continue };
                    if is_member {
                        members.push((name, v));
                    } else {
                        shards.push((name, v));
                    }
                }
            }
            let _ = replies.send(Reply::Read {
                seq,
                sent,
                members,
                shards,
            });
        });
    }

    /// Clears member `id`'s lapsed record: a release written with a
    /// compare-and-swap on the version seen unchanged, which fails if the
    /// member renewed after all.
    pub(crate) fn clear(&self, now: Now, id: String, seen: &Versioned) {
        let Ok(group) = GroupName::new(member_group(&self.set, &id)) else {
            return;
        };
        let record = LeaseRecord {
            holder: None,
            token: seen.record.token,
            term: seen.record.term,
            renewed_at: now.wall,
            expires_at: now.wall,
            metadata: Metadata::new(),
        };
        let (store, set, version) = (self.store.clone(), self.set.clone(), seen.version);
        let bounded = self.bounded();
        tokio::spawn(async move {
            let cas = store.compare_and_swap(&group, Some(version), &record);
            match bounded.run(cas).await {
                Some(Ok(CasOutcome::Applied(_))) => {
                    tracing::info!(set = %set, member = id, "cleared the record of a member gone")
                }
                // It renewed after all, or another member cleared it.
                Some(Ok(CasOutcome::Conflict)) | None => {}
                Some(Err(e)) => {
                    tracing::debug!(set = %set, member = id, error = %e, "cannot clear a lapsed member's record")
                }
            }
        });
    }

    /// Subscribes to the store's feed: a tap of the feed the engine keeps
    /// for the store, so that a process keeps one feed per store however
    /// many members and sets it runs (each feed is a connection, a
    /// listener, and every write of the store delivered once more).
    pub(crate) fn subscribe(&self) {
        let replies = self.replies.clone();
        let bounded = self.bounded();
        match &self.engine {
            Some(engine) => {
                let tap = engine.tap();
                tokio::spawn(async move {
                    let feed = bounded.run(tap).await.and_then(|r| r.ok().flatten());
                    let _ = replies.send(Reply::Subscribed(feed));
                });
            }
            None => {
                let store = self.store.clone();
                tokio::spawn(async move {
                    let feed = bounded
                        .run(store.watch())
                        .await
                        .and_then(|r| r.ok().flatten());
                    let _ = replies.send(Reply::Subscribed(feed));
                });
            }
        }
    }

    fn bounded(&self) -> Bounded {
        Bounded {
            clock: self.clock.clone(),
            timeout: self.timeout.max(Duration::from_millis(1)),
        }
    }
}

/// A request's time limit.
struct Bounded {
    clock: Arc<dyn Clock>,
    timeout: Duration,
}

impl Bounded {
    /// `request`'s answer, or `None` once the time is up.
    async fn run<T>(&self, request: impl std::future::Future<Output = T>) -> Option<T> {
        let deadline = self.clock.now().mono + self.timeout;
        tokio::select! {
            biased;
            r = request => Some(r),
            _ = self.clock.sleep_until(deadline) => None,
        }
    }
}
