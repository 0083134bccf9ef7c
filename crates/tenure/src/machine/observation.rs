//! What this node knows of the record: every read's reply, every delivery
//! of the change feed and every write of its own is taken in here, and a
//! change of the visible leader is reported from here. A delivery is a
//! hint until a read shows the same record.

use super::{Action, Machine};
use crate::clock::{MonoTime, Now};
use crate::record::{LeaseRecord, Version, Versioned};

/// What this node knows of the record, and since when.
#[derive(Clone, Debug, Hash)]
pub(super) struct Observed {
    /// The record and its version; `None`: the store has none.
    pub(super) current: Option<Versioned>,
    /// When this node first saw `current`'s version (reply receipt).
    pub(super) since: MonoTime,
    /// Whether a read (or this node's own write) showed `current`. A
    /// record that only the change feed delivered is a hint: it may make
    /// the candidate wait or look, but an acquisition, the token it
    /// chooses and a refusal to stand all wait for a read that shows the
    /// same record (a forged feed message could name any version, token
    /// or holder).
    pub(super) confirmed: bool,
}

impl Machine {
    /// Whether what this node last observed was shown by a read (or its
    /// own write), not only by the change feed.
    pub(super) fn observation_confirmed(&self) -> bool {
        self.observed.as_ref().is_none_or(|o| o.confirmed)
    }

    /// Records what a reply showed. The observation's anchor moves only when
    /// the version changes: an unchanged version has been unchanged since it
    /// was first seen.
    pub(super) fn observe(&mut self, now: Now, current: Option<Versioned>, out: &mut Vec<Action>) {
        self.observe_from(now, current, false, out);
    }

    /// Records an observation. A feed's report of a version older than one
    /// already seen is a late report and is dropped; a read's reply is
    /// always taken in, a lower version then being a store whose versions
    /// restarted (it lost its data), and a new sighting. An observation is
    /// the same as the last only if version *and* record match: a restarted
    /// store can reach an old version number again with another record.
    pub(super) fn observe_from(
        &mut self,
        now: Now,
        current: Option<Versioned>,
        from_feed: bool,
        out: &mut Vec<Action>,
    ) {
        // Lateness is judged against what a read showed: a forged record
        // with the highest version must not make every genuine one look
        // late.
        let confirmed = self
            .observed
            .as_ref()
            .filter(|o| o.confirmed)
            .and_then(|o| o.current.as_ref());
        if let (true, Some(seen), Some(v)) = (from_feed, confirmed, &current) {
            if v.version < seen.version {
                return;
            }
        }
        // Only a read (never a hint) raises the token floor or says how
        // long a lost record's holder may still work.
        if let (false, Some(v)) = (from_feed, &current) {
            self.max_token = self.max_token.max(v.record.token);
            self.last_held_term = v.record.holder.as_ref().map(|_| v.record.term);
        }
        match &mut self.observed {
            // The feed delivered the same record again: what only the feed
            // showed counts from its latest delivery, so that a copy
            // published ahead of the real write (a forger who guessed it)
            // cannot move the takeover earlier than the real write's own
            // delivery.
            Some(o) if from_feed && !o.confirmed && o.current.as_ref() == current.as_ref() => {
                o.since = now.mono;
            }
            Some(o) if o.current.as_ref() == current.as_ref() => o.confirmed |= !from_feed,
            // Someone other than the holder rewrote the record a read
            // showed, directly over it (a transfer request, a withdrawal):
            // no renewal, so the holder's term is still bounded from when
            // that version was first seen. Requests written into a dead
            // leader's record must not delay its takeover.
            Some(o)
                if o.confirmed
                    && current
                        .as_ref()
                        .zip(o.current.as_ref())
                        .is_some_and(|(new, seen)| {
                            new.version != seen.version && new.record.rewrites(seen)
                        }) =>
            {
                o.current = current;
                o.confirmed = !from_feed;
            }
            _ => {
                self.observed = Some(Observed {
                    current,
                    since: now.mono,
                    confirmed: !from_feed,
                });
            }
        }
        self.report_leader(out);
    }

    /// Records this node's own write, seen at `now`.
    pub(super) fn observe_own(&mut self, now: Now, record: LeaseRecord, version: Version) {
        self.max_token = self.max_token.max(record.token);
        self.last_held_term = Some(record.term);
        self.observed = Some(Observed {
            current: Some(Versioned { record, version }),
            since: now.mono,
            confirmed: true,
        });
    }

    /// Emits `LeaderChanged` when the visible leader (another holder) changes.
    fn report_leader(&mut self, out: &mut Vec<Action>) {
        let visible = self
            .observed
            .as_ref()
            .and_then(|o| o.current.as_ref())
            .filter(|v| v.record.holder.is_some() && !self.is_mine(&v.record));
        // Metadata counts too: a leader that publishes a new address is news
        // for everyone who follows it.
        let key = visible.and_then(|v| {
            v.record
                .holder
                .clone()
                .map(|h| (h, v.record.token, v.record.metadata.clone()))
        });
        if key != self.reported {
            self.reported = key;
            out.push(Action::LeaderChanged {
                leader: visible.cloned(),
            });
        }
    }
}
