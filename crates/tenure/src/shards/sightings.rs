//! What a member knows of the records under one prefix of the store (the
//! set's member records, or its shard records), and since when.
//!
//! Three sources tell it, with different authority:
//!
//! * **The change feed** delivers each write as it happens, so a member
//!   learns of renewals, joins, leaves and hand-overs without asking. A
//!   feed is a hint, never authority: what only the feed showed is
//!   *unconfirmed* until a read or a listing shows it too, and a record the
//!   feed delivers again counts from its latest delivery (a copy published
//!   ahead of the real write cannot make that write look older than it is).
//! * **A read** of one record, and **a listing** of the prefix, are
//!   authority. A reply is always taken in, even with a lower version than
//!   the one held (the store lost its data and counts again), except where
//!   the entry changed after the request went out: then the reply is older
//!   than what is known, and only a higher version replaces it.
//!
//! A version unchanged since it was first seen has been unchanged since
//! then: `since` moves only when the record changes, which is what the
//! lease rule measures a silent member's wait from.

use std::collections::BTreeMap;

use crate::clock::MonoTime;
use crate::record::Versioned;

/// One record as known.
#[derive(Clone, Debug)]
pub(crate) struct Sighting {
    /// The record and its version.
    pub(crate) current: Versioned,
    /// When this record was first seen (for an unconfirmed one: last
    /// delivered).
    pub(crate) since: MonoTime,
    /// When the entry last changed, whatever the source: a reply to a
    /// request sent before then is older than the entry.
    updated: MonoTime,
    /// Whether a read or a listing showed this record (not only the feed).
    pub(crate) confirmed: bool,
}

/// The records under one prefix, by the name after the prefix.
#[derive(Debug, Default)]
pub(crate) struct Sightings {
    seen: BTreeMap<String, Sighting>,
}

impl Sightings {
    /// The record known for `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&Sighting> {
        self.seen.get(id)
    }

    /// Every record known, by id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &Sighting)> {
        self.seen.iter()
    }

    /// A record the change feed delivered at `now`. Returns whether the
    /// record known for `id` changed.
    pub(crate) fn feed(&mut self, now: MonoTime, id: &str, v: Versioned) -> bool {
        match self.seen.get_mut(id) {
            // A late delivery: a read already showed a newer version.
            Some(s) if s.confirmed && v.version < s.current.version => false,
            Some(s) if s.current == v => {
                if !s.confirmed {
                    s.since = now;
                    s.updated = now;
                }
                false
            }
            _ => {
                self.seen.insert(
                    id.to_owned(),
                    Sighting {
                        current: v,
                        since: now,
                        updated: now,
                        confirmed: false,
                    },
                );
                true
            }
        }
    }

    /// What a read of `id` sent at `sent` showed at `now` (`None`: the
    /// store has no record). Returns whether the record known changed.
    pub(crate) fn read(
        &mut self,
        sent: MonoTime,
        now: MonoTime,
        id: &str,
        current: Option<Versioned>,
    ) -> bool {
        let newer_known = |s: &Sighting| s.updated >= sent;
        match current {
            None => match self.seen.get(id) {
                Some(s) if !newer_known(s) => {
                    self.seen.remove(id);
                    true
                }
                _ => false,
            },
            Some(v) => match self.seen.get_mut(id) {
                Some(s) if s.current == v => {
                    s.confirmed = true;
                    false
                }
                Some(s) if newer_known(s) && v.version < s.current.version => false,
                _ => {
                    self.seen.insert(
                        id.to_owned(),
                        Sighting {
                            current: v,
                            since: now,
                            updated: now,
                            confirmed: true,
                        },
                    );
                    true
                }
            },
        }
    }

    /// A full listing of the prefix, requested at `sent` and received at
    /// `now`. An entry missing from it is gone, unless it changed after the
    /// listing was requested. Returns whether any record known changed.
    pub(crate) fn listing(
        &mut self,
        sent: MonoTime,
        now: MonoTime,
        mut listing: BTreeMap<String, Versioned>,
    ) -> bool {
        let mut changed = false;
        let gone: Vec<String> = self
            .seen
            .iter()
            .filter(|(id, s)| !listing.contains_key(*id) && s.updated < sent)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.seen.remove(&id);
            changed = true;
        }
        for (id, v) in std::mem::take(&mut listing) {
            changed |= self.read(sent, now, &id, Some(v));
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::WallTime;
    use crate::record::{Holder, LeaseRecord, Metadata, Version};
    use std::time::Duration;

    fn rec(holder: &str, version: u64) -> Versioned {
        Versioned {
            record: LeaseRecord {
                holder: Some(Holder {
                    id: holder.into(),
                    incarnation: 1,
                }),
                token: 1,
                term: Duration::from_secs(2),
                renewed_at: WallTime::from_millis(version),
                expires_at: WallTime::from_millis(2_000 + version),
                metadata: Metadata::new(),
            },
            version: Version(version),
        }
    }

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn the_feed_is_unconfirmed_until_a_read_agrees() {
        let mut s = Sightings::default();
        assert!(s.feed(at(0), "a", rec("a", 5)));
        assert!(!s.get("a").unwrap().confirmed);
        // Delivered again: counts from the latest delivery.
        assert!(!s.feed(at(100), "a", rec("a", 5)));
        assert_eq!(s.get("a").unwrap().since, at(100));
        // A read agrees: confirmed, and `since` stays.
        assert!(!s.read(at(150), at(200), "a", Some(rec("a", 5))));
        let a = s.get("a").unwrap();
        assert!(a.confirmed);
        assert_eq!(a.since, at(100));
        // Now a late feed delivery of an older version changes nothing, and
        // a repeat of the confirmed one does not move `since`.
        assert!(!s.feed(at(300), "a", rec("a", 4)));
        assert!(!s.feed(at(300), "a", rec("a", 5)));
        assert_eq!(s.get("a").unwrap().since, at(100));
        assert!(s.feed(at(400), "a", rec("a", 6)));
        assert_eq!(s.get("a").unwrap().since, at(400));
    }

    #[test]
    fn a_reply_older_than_what_is_known_does_not_undo_it() {
        let mut s = Sightings::default();
        s.read(at(0), at(10), "a", Some(rec("a", 5)));
        // A listing goes out at 100; the feed shows a renewal at 120 and a
        // join of b at 130; the listing, answered before either, arrives at
        // 150 without b and with a's older version.
        assert!(s.feed(at(120), "a", rec("a", 6)));
        assert!(s.feed(at(130), "b", rec("b", 1)));
        let listing = BTreeMap::from([("a".to_owned(), rec("a", 5))]);
        assert!(!s.listing(at(100), at(150), listing));
        assert_eq!(s.get("a").unwrap().current.version, Version(6));
        assert!(s.get("b").is_some(), "b joined after the listing went out");
        // A listing sent after both is authority: b is gone, and a store
        // that restarted its versions is believed.
        let listing = BTreeMap::from([("a".to_owned(), rec("a", 2))]);
        assert!(s.listing(at(200), at(210), listing));
        assert!(s.get("b").is_none());
        assert_eq!(s.get("a").unwrap().current.version, Version(2));
        assert!(s.get("a").unwrap().confirmed);
    }

    #[test]
    fn a_read_of_nothing_removes_only_what_it_can_speak_for() {
        let mut s = Sightings::default();
        s.feed(at(0), "a", rec("a", 1));
        assert!(
            !s.read(at(0), at(10), "a", None),
            "fed at the moment the read went out"
        );
        assert!(s.read(at(1), at(10), "a", None));
        assert!(s.get("a").is_none());
    }
}
