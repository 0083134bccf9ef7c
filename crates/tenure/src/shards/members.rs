//! Who is a live member of a set, judged from listings of the members'
//! lease records, by the same rule a challenger uses for a lease: a held
//! record counts until it has been seen unchanged for its term × (1 +
//! drift); a released one (a graceful leave) counts no more at once.

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
struct Seen {
    version: Version,
    since: MonoTime,
    term: Option<Duration>,
    metadata: Metadata,
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
            let same = self.seen.get(&id).is_some_and(|s| s.version == v.version);
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
                    version: v.version,
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
            .filter(|(_, s)| {
                s.term
                    .is_some_and(|term| now < s.since + term.mul_f64(1.0 + drift))
            })
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
            .filter_map(|s| s.term.map(|term| s.since + term.mul_f64(1.0 + drift)))
            .filter(|t| *t > now)
            .min()
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
        assert_eq!(ids(r.live(at(11), 0.01)), ["a"]);
    }

    #[test]
    fn a_member_whose_record_vanished_is_gone() {
        let mut r = Roster::default();
        r.observe(at(0), BTreeMap::from([("a".to_owned(), rec(Some("a"), 1))]));
        r.observe(at(1), BTreeMap::new());
        assert!(r.live(at(1), 0.01).is_empty());
    }
}
