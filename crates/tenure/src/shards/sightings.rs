//! What a member knows of the records under one prefix of the store (the
//! set's member records, or its shard records), and since when. Member
//! records are known only as a read or a listing showed them: the change
//! feed is a hint, and a delivery that could change what the member does
//! (a new member, a release) makes it read the record, so a forged or lost
//! delivery can delay what a member learns of the membership, never make it
//! believe what the store does not hold. Shard records are also taken from
//! the feed ([`Sightings::fed`]), newer versions only: a shard's holder
//! steers the assignment, not the shard's safety.
//!
//! A reply is always taken in, even with a lower version than the one
//! known (the store lost its data and counts again), except where the entry
//! changed after the request went out: then the reply is older than what is
//! known, and only a higher version replaces it. A version unchanged since
//! it was first seen has been unchanged since then: `since` moves only when
//! the record changes, which is what the lease rule measures a silent
//! member's wait from.

use std::collections::BTreeMap;

use crate::clock::MonoTime;
use crate::record::Versioned;

/// One record as a read or a listing showed it.
#[derive(Clone, Debug)]
pub(crate) struct Sighting {
    /// The record and its version.
    pub(crate) current: Versioned,
    /// When this record was first seen.
    pub(crate) since: MonoTime,
    /// When the latest request that showed this very record was sent: the
    /// record was unchanged at least until then.
    pub(crate) checked: MonoTime,
    /// When the entry last changed: a reply to a request sent before then
    /// is older than the entry.
    updated: MonoTime,
}

/// What a delivery did to the record known ([`Sightings::fed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fed {
    /// It was newer, and is now the record known.
    Changed,
    /// It was the record known.
    Unchanged,
    /// It was another record with no higher version: not taken. A feed
    /// delivers in order, so this is a late copy, or the record known was
    /// itself a forgery (a foreign publisher on the channel, with a high
    /// version) or the store counts again after losing its data: only a
    /// read can say which.
    Older,
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
                    s.checked = s.checked.max(sent);
                    false
                }
                Some(s) if newer_known(s) && v.version < s.current.version => false,
                _ => {
                    self.seen.insert(
                        id.to_owned(),
                        Sighting {
                            current: v,
                            since: now,
                            checked: sent,
                            updated: now,
                        },
                    );
                    true
                }
            },
        }
    }

    /// What the change feed delivered for `id` at `now`: taken in only if
    /// it is newer than the record known, and kept against replies to
    /// requests sent before `now`, as a read answered at `now` would be.
    pub(crate) fn fed(&mut self, now: MonoTime, id: &str, current: Versioned) -> Fed {
        match self.seen.get_mut(id) {
            Some(s) if s.current == current => {
                s.checked = s.checked.max(now);
                Fed::Unchanged
            }
            Some(s) if current.version <= s.current.version => Fed::Older,
            _ => {
                self.seen.insert(
                    id.to_owned(),
                    Sighting {
                        current,
                        since: now,
                        checked: now,
                        updated: now,
                    },
                );
                Fed::Changed
            }
        }
    }

    /// Counts `id`'s record from `at` if it is `version` and was first seen
    /// later: the change feed delivered that very version then, before a
    /// read showed it.
    pub(crate) fn anchor(&mut self, id: &str, version: crate::record::Version, at: MonoTime) {
        if let Some(s) = self.seen.get_mut(id) {
            if s.current.version == version && at < s.since {
                s.since = at;
            }
        }
    }

    /// A full listing of the prefix, requested at `sent` and received at
    /// `now`. An entry missing from it is gone, unless it changed after the
    /// listing was requested. Returns whether any record known changed.
    pub(crate) fn listing(
        &mut self,
        sent: MonoTime,
        now: MonoTime,
        listing: BTreeMap<String, Versioned>,
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
        for (id, v) in listing {
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
    fn an_unchanged_record_keeps_its_since_and_moves_its_check() {
        let mut s = Sightings::default();
        assert!(s.read(at(0), at(10), "a", Some(rec("a", 5))));
        assert!(!s.read(at(100), at(110), "a", Some(rec("a", 5))));
        let a = s.get("a").unwrap();
        assert_eq!((a.since, a.checked), (at(10), at(100)));
        // A late reply to an older request does not move the check back.
        assert!(!s.read(at(50), at(120), "a", Some(rec("a", 5))));
        assert_eq!(s.get("a").unwrap().checked, at(100));
        assert!(s.read(at(200), at(210), "a", Some(rec("a", 6))));
        assert_eq!(s.get("a").unwrap().since, at(210));
    }

    #[test]
    fn a_reply_older_than_what_is_known_does_not_undo_it() {
        let mut s = Sightings::default();
        s.read(at(0), at(10), "a", Some(rec("a", 5)));
        // A listing goes out at 100; a read sent at 110 shows a's renewal
        // and b's join at 120; the listing, answered before either, arrives
        // at 150 without b and with a's older version.
        assert!(s.read(at(110), at(120), "a", Some(rec("a", 6))));
        assert!(s.read(at(110), at(130), "b", Some(rec("b", 1))));
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
    }

    #[test]
    fn a_delivery_is_taken_only_if_newer_and_outlives_older_replies() {
        let mut s = Sightings::default();
        assert_eq!(s.fed(at(10), "a", rec("a", 5)), Fed::Changed);
        assert_eq!(s.fed(at(15), "a", rec("a", 5)), Fed::Unchanged);
        // A late copy of an older version is not taken, and says so.
        assert_eq!(s.fed(at(20), "a", rec("b", 4)), Fed::Older);
        assert_eq!(s.get("a").unwrap().current.version, Version(5));
        // A reply to a read sent before the delivery, older than it, does
        // not undo it; a listing sent before it does not remove it.
        assert!(!s.read(at(5), at(30), "a", Some(rec("a", 3))));
        assert!(!s.listing(at(5), at(30), BTreeMap::new()));
        assert_eq!(s.get("a").unwrap().current.version, Version(5));
        // A read sent after it is authority, a lower version too (the
        // store counts again after losing its data).
        assert!(s.read(at(40), at(45), "a", Some(rec("c", 2))));
        assert_eq!(s.get("a").unwrap().current.version, Version(2));
        assert_eq!(s.fed(at(50), "a", rec("d", 3)), Fed::Changed);
    }

    #[test]
    fn a_read_of_nothing_removes_only_what_it_can_speak_for() {
        let mut s = Sightings::default();
        s.read(at(0), at(5), "a", Some(rec("a", 1)));
        assert!(
            !s.read(at(5), at(10), "a", None),
            "seen at the moment the read went out"
        );
        assert!(s.read(at(6), at(10), "a", None));
        assert!(s.get("a").is_none());
    }
}
