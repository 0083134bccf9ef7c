//! Who is a live member of a set, judged from what is known of the
//! members' lease records ([`Sightings`]) by the rule a challenger uses for
//! a lease: a held record counts until it has been seen unchanged for its
//! term × (1 + drift); a released one (a graceful leave) counts no more at
//! once. A record that lapsed is then cleared (see [`Roster::lapsed`]).
//!
//! Renewals are not read as they happen: the feed's delivery of one is
//! only noted ([`Roster::fed`]), and once a read shows that very version it
//! counts from the delivery, which is when it was written. So a member's
//! wait is measured from its last write, as a challenger's is, while only
//! what a read showed is believed: a forged delivery can at most move the
//! count later, up to the next read. And silence is not evidence: once a
//! held record has lapsed, the member counts on for up to `confirm`
//! more while a read asks the store ([`Roster::to_confirm`]): it is gone
//! only once a read sent after its lapse showed the record unchanged, or
//! once `confirm` has passed without an answer.

use std::collections::BTreeMap;
use std::time::Duration;

use super::sightings::{Sighting, Sightings};
use crate::clock::MonoTime;
use crate::config::takeover_wait;
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

/// Judges liveness from the member records known.
#[derive(Debug)]
pub(crate) struct Roster {
    seen: Sightings,
    /// Per member, the latest version the feed delivered that no read has
    /// shown yet, and when it was (last) delivered.
    fed: BTreeMap<String, (Version, MonoTime)>,
    drift: f64,
    /// How long a lapsed record only the feed showed still counts, while a
    /// read confirms it.
    confirm: Duration,
}

impl Roster {
    pub(crate) fn new(drift: f64, confirm: Duration) -> Roster {
        Roster {
            seen: Sightings::default(),
            fed: BTreeMap::new(),
            drift,
            confirm,
        }
    }

    /// The records known.
    pub(crate) fn sightings(&self) -> &Sightings {
        &self.seen
    }

    /// The records known, to take in reads and listings; call
    /// [`settle_fed`](Self::settle_fed) after.
    pub(crate) fn sightings_mut(&mut self) -> &mut Sightings {
        &mut self.seen
    }

    /// The feed delivered `version` of `id`'s record, by the holder known,
    /// at `at`. A delivery again of the same version counts from the
    /// latest: a copy published ahead of the real write cannot make it look
    /// older than it is.
    pub(crate) fn fed(&mut self, id: &str, version: Version, at: MonoTime) {
        if self
            .seen
            .get(id)
            .is_some_and(|s| s.current.version != version)
        {
            self.fed.insert(id.to_owned(), (version, at));
        }
    }

    /// After reads: a record a read showed in the version the feed had
    /// delivered counts from the delivery; deliveries a read has overtaken
    /// are forgotten.
    pub(crate) fn settle_fed(&mut self) {
        let seen = &mut self.seen;
        self.fed.retain(|id, (version, at)| match seen.get(id) {
            Some(s) if s.current.version == *version => {
                seen.anchor(id, *version, *at);
                false
            }
            Some(s) => s.current.version < *version,
            None => false,
        });
    }

    /// When the member counts as gone, if its record is held: its lapse if
    /// a read sent since showed the record unchanged, else the time a read
    /// has to show it.
    fn gone_at(&self, s: &Sighting) -> Option<MonoTime> {
        let lapse = self.lapses_at(s)?;
        Some(if s.checked >= lapse {
            lapse
        } else {
            lapse + self.confirm
        })
    }

    fn lapses_at(&self, s: &Sighting) -> Option<MonoTime> {
        s.current
            .record
            .holder
            .as_ref()
            .map(|_| s.since + takeover_wait(s.current.record.term, self.drift))
    }

    /// The members live at `now`, sorted by id.
    pub(crate) fn live(&self, now: MonoTime) -> Vec<Member> {
        self.seen
            .iter()
            .filter(|(_, s)| self.gone_at(s).is_some_and(|t| now < t))
            .map(|(id, s)| Member {
                id: id.clone(),
                metadata: LeaderInfo::from_record(&s.current)
                    .map(|l| l.metadata)
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// The next instant at which a member may lapse or be counted gone,
    /// for waking.
    pub(crate) fn next_change(&self, now: MonoTime) -> Option<MonoTime> {
        self.seen
            .iter()
            .flat_map(|(_, s)| [self.lapses_at(s), self.gone_at(s)])
            .flatten()
            .filter(|t| *t > now)
            .min()
    }

    /// The members whose record is held, to confirm together.
    pub(crate) fn held(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter(|(_, s)| s.current.record.holder.is_some())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The members whose held record has lapsed by `now` with no read since
    /// the lapse, with the version to confirm and the lapse: read them
    /// before counting them gone.
    pub(crate) fn to_confirm(&self, now: MonoTime) -> Vec<(&str, Version, MonoTime)> {
        self.seen
            .iter()
            .filter_map(|(id, s)| {
                let lapse = self.lapses_at(s)?;
                (now >= lapse && s.checked < lapse).then_some((
                    id.as_str(),
                    s.current.version,
                    lapse,
                ))
            })
            .collect()
    }

    /// The members whose held record has lapsed, as a read sent after the
    /// lapse showed it: seen unchanged for its term × (1 + drift), so by
    /// the lease rule its holder's term is over and a compare-and-swap on
    /// that version may clear it, exactly as a challenger's takeover would.
    /// A crashed member's record stays held until someone does: a member
    /// listing it for the first time (one that joins later, or restarts)
    /// would count the dead member live for a whole takeover wait, and
    /// compute other targets than everyone else.
    pub(crate) fn lapsed(&self) -> Vec<(&str, &Versioned)> {
        self.seen
            .iter()
            .filter(|(_, s)| self.lapses_at(s).is_some_and(|lapse| s.checked >= lapse))
            .map(|(id, s)| (id.as_str(), &s.current))
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

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos(ms * 1_000_000)
    }

    fn ids(members: Vec<Member>) -> Vec<String> {
        members.into_iter().map(|m| m.id).collect()
    }

    fn listing(entries: &[(&str, Option<&str>, u64)]) -> BTreeMap<String, Versioned> {
        entries
            .iter()
            .map(|(id, holder, v)| (id.to_string(), rec(*holder, *v)))
            .collect()
    }

    fn roster() -> Roster {
        Roster::new(0.01, Duration::from_secs(2))
    }

    #[test]
    fn a_renewing_member_stays_a_silent_one_lapses_a_leaver_goes_at_once() {
        let mut r = roster();
        let list = |r: &mut Roster, t: u64, entries: &[(&str, Option<&str>, u64)]| {
            r.sightings_mut().listing(at(t), at(t), listing(entries));
        };
        list(
            &mut r,
            0,
            &[
                ("a", Some("a"), 1),
                ("b", Some("b"), 1),
                ("c", Some("c"), 1),
            ],
        );
        assert_eq!(ids(r.live(at(0))), ["a", "b", "c"]);
        // a renews, b is silent, c released (left).
        list(
            &mut r,
            5_000,
            &[("a", Some("a"), 2), ("b", Some("b"), 1), ("c", None, 2)],
        );
        assert_eq!(ids(r.live(at(5_000))), ["a", "b"]);
        assert_eq!(r.next_change(at(5_000)), Some(at(10_100)));
        // b lapses at 10.1 s; not gone before a read after that shows it
        // unchanged, or the confirmation time has passed.
        assert_eq!(ids(r.live(at(11_000))), ["a", "b"]);
        assert!(r.lapsed().is_empty());
        let asked: Vec<&str> = r
            .to_confirm(at(11_000))
            .into_iter()
            .map(|(id, ..)| id)
            .collect();
        assert_eq!(asked, ["b"]);
        list(
            &mut r,
            11_000,
            &[("a", Some("a"), 3), ("b", Some("b"), 1), ("c", None, 2)],
        );
        assert_eq!(ids(r.live(at(11_000))), ["a"]);
        // Then its record may be cleared, on the version seen unchanged; a
        // released one (c) is nothing to clear.
        let lapsed: Vec<(&str, Version)> = r
            .lapsed()
            .into_iter()
            .map(|(id, v)| (id, v.version))
            .collect();
        assert_eq!(lapsed, [("b", Version(1))]);
        assert!(r.to_confirm(at(11_000)).is_empty());
    }

    #[test]
    fn a_member_whose_record_vanished_is_gone() {
        let mut r = roster();
        r.sightings_mut()
            .listing(at(0), at(0), listing(&[("a", Some("a"), 1)]));
        r.sightings_mut()
            .listing(at(1_000), at(1_000), BTreeMap::new());
        assert!(r.live(at(1_000)).is_empty());
    }

    #[test]
    fn a_lapsed_member_counts_until_a_read_shows_its_silence() {
        let mut r = roster();
        r.sightings_mut()
            .read(at(0), at(0), "a", Some(rec(Some("a"), 1)));
        r.sightings_mut()
            .read(at(0), at(0), "b", Some(rec(Some("b"), 1)));
        // Both lapse at 10.1 s; a read sent before the lapse proves nothing.
        r.sightings_mut()
            .read(at(9_000), at(9_000), "b", Some(rec(Some("b"), 1)));
        assert_eq!(ids(r.live(at(11_000))), ["a", "b"]);
        assert!(r.lapsed().is_empty());
        // a's read shows a renewal: live again. b's shows the same record:
        // gone now, and may be cleared.
        r.sightings_mut()
            .read(at(11_000), at(11_010), "a", Some(rec(Some("a"), 2)));
        r.sightings_mut()
            .read(at(11_000), at(11_010), "b", Some(rec(Some("b"), 1)));
        assert_eq!(ids(r.live(at(11_010))), ["a"]);
        assert_eq!(r.lapsed().len(), 1);
        // Unanswered, a lapsed record counts gone after the confirmation
        // time.
        let mut r = roster();
        r.sightings_mut()
            .read(at(20_000), at(20_000), "c", Some(rec(Some("c"), 1)));
        assert_eq!(r.next_change(at(20_000)), Some(at(30_100)));
        assert_eq!(r.next_change(at(30_100)), Some(at(32_100)));
        assert!(ids(r.live(at(32_100))).iter().all(|id| id != "c"));
    }

    #[test]
    fn a_renewal_read_after_its_delivery_counts_from_the_delivery() {
        let mut r = roster();
        r.sightings_mut()
            .read(at(0), at(0), "a", Some(rec(Some("a"), 1)));
        // Version 2 delivered at 1 s (and forged again at 2 s: the latest
        // counts), read at 5 s: it counts from 2 s.
        r.fed("a", Version(2), at(1_000));
        r.fed("a", Version(2), at(2_000));
        r.sightings_mut()
            .read(at(5_000), at(5_000), "a", Some(rec(Some("a"), 2)));
        r.settle_fed();
        assert_eq!(r.sightings().get("a").unwrap().since, at(2_000));
        // A delivery of the version already read moves nothing.
        r.fed("a", Version(2), at(6_000));
        r.settle_fed();
        assert_eq!(r.sightings().get("a").unwrap().since, at(2_000));
    }
}
