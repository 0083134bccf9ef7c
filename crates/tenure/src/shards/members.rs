//! Who is a live member of a set, judged from listings of the members'
//! lease records, by the same rule a challenger uses for a lease: a held
//! record counts until it has been seen unchanged for its term × (1 +
//! drift); a released one (a graceful leave) counts no more at once. A
//! record that lapsed is then cleared (see [`Roster::lapsed`]).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::clock::MonoTime;
use crate::record::{Metadata, Version, Versioned};
use crate::role::LeaderInfo;

/// A live member of a sharded set, as its lease record shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The member's id.
    pub id: String,
    /// What it publishes (its address, its version).
    pub metadata: Metadata,
}

#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// The record as listed.
    pub(crate) current: Versioned,
    since: MonoTime,
    term: Option<Duration>,
    metadata: Metadata,
}

impl Seen {
    fn version(&self) -> Version {
        self.current.version
    }

    /// When the member counts as gone, if its record is held.
    fn lapses_at(&self, drift: f64) -> Option<MonoTime> {
        self.term.map(|term| self.since + term.mul_f64(1.0 + drift))
    }
}

/// Judges liveness across listings.
#[derive(Debug, Default)]
pub(crate) struct Roster {
    seen: BTreeMap<String, Seen>,
}

impl Roster {
    /// Takes in one listing of member records (`id` → record), received at
    /// `now`.
    pub(crate) fn observe(&mut self, now: MonoTime, listing: BTreeMap<String, Versioned>) {
        self.seen.retain(|id, _| listing.contains_key(id));
        for (id, v) in listing {
            let same = self.seen.get(&id).is_some_and(|s| s.version() == v.version);
            if same {
                continue;
            }
            let term = v.record.holder.as_ref().map(|_| v.record.term);
            let metadata = LeaderInfo::from_record(&v)
                .map(|l| l.metadata)
                .unwrap_or_default();
            self.seen.insert(
                id,
                Seen {
                    current: v,
                    since: now,
                    term,
                    metadata,
                },
            );
        }
    }

    /// The members live at `now`, sorted by id.
    pub(crate) fn live(&self, now: MonoTime, drift: f64) -> Vec<Member> {
        self.seen
            .iter()
            .filter(|(_, s)| s.lapses_at(drift).is_some_and(|t| now < t))
            .map(|(id, s)| Member {
                id: id.clone(),
                metadata: s.metadata.clone(),
            })
            .collect()
    }

    /// The next instant at which a member may lapse, for waking.
    pub(crate) fn next_lapse(&self, now: MonoTime, drift: f64) -> Option<MonoTime> {
        self.seen
            .values()
            .filter_map(|s| s.lapses_at(drift))
            .filter(|t| *t > now)
            .min()
    }

    /// The members whose held record has lapsed by `now`: seen unchanged for
    /// its term × (1 + drift), so by the lease rule its holder's term is
    /// over and a compare-and-swap on that version may clear it, exactly as
    /// a challenger's takeover would. A crashed member's record stays held
    /// until someone does: a member listing it for the first time (one that
    /// joins later, or restarts) would count the dead member live for a
    /// whole takeover wait, and compute other targets than everyone else.
    pub(crate) fn lapsed(&self, now: MonoTime, drift: f64) -> Vec<(&str, &Seen)> {
        self.seen
            .iter()
            .filter(|(_, s)| s.lapses_at(drift).is_some_and(|t| now >= t))
            .map(|(id, s)| (id.as_str(), s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::WallTime;
    use crate::record::{Holder, LeaseRecord};

    fn rec(holder: Option<&str>, version: u64) -> Versioned {
        Versioned {
            record: LeaseRecord {
                holder: holder.map(|h| Holder {
                    id: h.into(),
                    incarnation: 1,
                }),
                token: 1,
                term: Duration::from_secs(10),
                renewed_at: WallTime::from_millis(0),
                expires_at: WallTime::from_millis(10_000),
                metadata: Metadata::address("x"),
            },
            version: Version(version),
        }
    }

    fn at(s: u64) -> MonoTime {
        MonoTime::from_nanos(s * 1_000_000_000)
    }

    fn ids(members: Vec<Member>) -> Vec<String> {
        members.into_iter().map(|m| m.id).collect()
    }

    #[test]
    fn a_renewing_member_stays_a_silent_one_lapses_a_leaver_goes_at_once() {
        let mut r = Roster::default();
        let listing = |a: u64, b: u64, c: Option<&str>| {
            BTreeMap::from([
                ("a".to_owned(), rec(Some("a"), a)),
                ("b".to_owned(), rec(Some("b"), b)),
                ("c".to_owned(), rec(c, 1)),
            ])
        };
        r.observe(at(0), listing(1, 1, Some("c")));
        assert_eq!(ids(r.live(at(0), 0.01)), ["a", "b", "c"]);
        // a renews, b is silent, c released (left).
        r.observe(
            at(5),
            BTreeMap::from([
                ("a".to_owned(), rec(Some("a"), 2)),
                ("b".to_owned(), rec(Some("b"), 1)),
                ("c".to_owned(), rec(None, 2)),
            ]),
        );
        assert_eq!(ids(r.live(at(5), 0.01)), ["a", "b"]);
        assert_eq!(
            r.next_lapse(at(5), 0.01),
            Some(at(0) + Duration::from_millis(10_100))
        );
        r.observe(at(10), listing(3, 1, None));
        // b unchanged since 0: lapses at 10.1 s, not before.
        assert_eq!(ids(r.live(at(10), 0.01)), ["a", "b"]);
        assert!(r.lapsed(at(10), 0.01).is_empty());
        assert_eq!(ids(r.live(at(11), 0.01)), ["a"]);
        // Then its record may be cleared, on the version seen unchanged; a
        // released one (c) is nothing to clear.
        let lapsed: Vec<(&str, Version)> = r
            .lapsed(at(11), 0.01)
            .into_iter()
            .map(|(id, s)| (id, s.current.version))
            .collect();
        assert_eq!(lapsed, [("b", Version(1))]);
    }

    #[test]
    fn a_member_whose_record_vanished_is_gone() {
        let mut r = Roster::default();
        r.observe(at(0), BTreeMap::from([("a".to_owned(), rec(Some("a"), 1))]));
        r.observe(at(1), BTreeMap::new());
        assert!(r.live(at(1), 0.01).is_empty());
    }
}
