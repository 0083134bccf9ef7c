//! Who leads, as heartbeats on partition 0 tell a reader (the known
//! leader). Pure: heartbeats and time come in, the leader goes out.
//!
//! * A heartbeat carrying a token names the leader, unless a heartbeat
//!   with a higher token was seen: tokens only rise across terms, so a
//!   lower one comes from an old leader that has not yet noticed it lost
//!   the partition.
//! * A heartbeat without a token, or a released one, from the current
//!   leader's instance means it stopped leading (fenced, given up, or
//!   holding the partition before its first heartbeat came back).
//! * Heartbeats of other consumer groups sharing the topic, and ones whose
//!   token no earlier record could have given (forged, or carried over
//!   from before the topic was recreated), are not leaders.
//! * An offset below one already read means the topic's offsets
//!   restarted (recreated, or data lost): what was known is forgotten, so
//!   the new leader shows, with a warning; tokens restarted with it.
//! * A leader lapses when no heartbeat of it was read for its heartbeat
//!   timeout. A record read long after it was written (the last one in the
//!   topic, read at start-up) counts only for what is left of its timeout
//!   by the wall clocks.

use std::time::Duration;

use tenure::{LeaderInfo, MonoTime, Now};

use crate::heartbeat::Heartbeat;

/// The leader as seen, with what identifies its instance.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seen {
    pub(crate) info: LeaderInfo,
    pub(crate) incarnation: u64,
    lapse: MonoTime,
}

/// Follows the leader of one consumer group from heartbeats.
#[derive(Debug)]
pub(crate) struct LeaderView {
    group: String,
    current: Option<Seen>,
    /// The highest token seen: lower ones are from deposed leaders.
    highest: u64,
    /// The highest offset read.
    highest_offset: Option<i64>,
}

impl LeaderView {
    /// A view of the leaders of consumer group `group`.
    pub(crate) fn new(group: impl Into<String>) -> Self {
        LeaderView {
            group: group.into(),
            current: None,
            highest: 0,
            highest_offset: None,
        }
    }

    /// The leader now.
    pub(crate) fn current(&self) -> Option<&Seen> {
        self.current.as_ref()
    }

    /// A record that is not a heartbeat was read at `offset`. Returns
    /// whether the leader changed (it does if the offsets restarted).
    pub(crate) fn offset(&mut self, offset: i64) -> bool {
        if let Some(highest) = self.highest_offset.filter(|h| offset < *h) {
            tracing::warn!(group = %self.group, highest, offset,
                "the leader topic's offsets went back: it was deleted and recreated, or lost data; \
                 fencing tokens restarted with it");
            let changed = self.current.is_some();
            *self = LeaderView::new(std::mem::take(&mut self.group));
            self.highest_offset = Some(offset);
            return changed;
        }
        self.highest_offset = Some(offset);
        false
    }

    /// A heartbeat was read at `offset`, at `now`. Returns whether the
    /// leader (who, or their token or metadata) changed.
    pub(crate) fn heartbeat(&mut self, offset: i64, hb: &Heartbeat, now: Now) -> bool {
        let mut changed = self.offset(offset);
        if !hb.is_of_group(&self.group) || !hb.token_fits(offset) {
            return changed;
        }
        let timeout = hb.timeout();
        let written_ago =
            Duration::from_millis(now.wall.as_millis().saturating_sub(hb.sent_wall_ms));
        let left = timeout.saturating_sub(written_ago);
        let before = self.key();
        let from_current = self
            .current
            .as_ref()
            .is_some_and(|c| c.incarnation == hb.incarnation);
        match hb.token {
            _ if hb.released && from_current => self.current = None,
            _ if hb.released => {}
            Some(token) if token >= self.highest && !left.is_zero() => {
                self.highest = token;
                // A writer's clock ahead of this one's (or a forged time)
                // does not publish a renewal from the future.
                let sent = tenure::WallTime::from_millis(hb.sent_wall_ms.min(now.wall.as_millis()));
                self.current = Some(Seen {
                    info: LeaderInfo {
                        candidate: hb.candidate.clone(),
                        token,
                        metadata: hb.metadata.clone(),
                        renewed_at: sent.to_system_time(),
                        expires_at: (sent + timeout).to_system_time(),
                    },
                    incarnation: hb.incarnation,
                    lapse: now.mono + left,
                });
            }
            None if from_current => {
                self.current = None;
            }
            _ => {}
        }
        changed |= self.key() != before;
        changed
    }

    /// Time passed; returns whether the leader lapsed.
    pub(crate) fn tick(&mut self, now: MonoTime) -> bool {
        if self.current.as_ref().is_some_and(|c| now >= c.lapse) {
            self.current = None;
            return true;
        }
        false
    }

    /// When the current leader lapses unless heard from.
    pub(crate) fn next_lapse(&self) -> Option<MonoTime> {
        self.current.as_ref().map(|c| c.lapse)
    }

    fn key(&self) -> Option<(String, u64, u64, tenure::Metadata)> {
        self.current.as_ref().map(|c| {
            (
                c.info.candidate.clone(),
                c.incarnation,
                c.info.token,
                c.info.metadata.clone(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heartbeat::FORMAT_VERSION;
    use tenure::{Metadata, WallTime};

    fn now(ms: u64) -> Now {
        Now {
            mono: MonoTime::from_nanos(ms * 1_000_000),
            wall: WallTime::from_millis(1_700_000_000_000 + ms),
        }
    }

    fn hb(who: u64, token: Option<u64>, sent_ms: u64) -> Heartbeat {
        Heartbeat {
            format: FORMAT_VERSION,
            group: Some("g".into()),
            group_generation: Some(1),
            candidate: format!("c{who}"),
            incarnation: who,
            generation: 1,
            seq: 0,
            sent_mono_ns: 0,
            sent_wall_ms: 1_700_000_000_000 + sent_ms,
            timeout_ms: 5000,
            token,
            released: false,
            metadata: Metadata::address(format!("10.0.0.{who}:80")),
        }
    }

    #[test]
    fn a_heartbeat_with_a_token_names_the_leader_until_it_lapses() {
        let mut v = LeaderView::new("g");
        assert!(v.heartbeat(101, &hb(1, Some(5), 1000), now(1000)));
        let c = v.current().unwrap();
        assert_eq!(c.info.candidate, "c1");
        assert_eq!(c.info.token, 5);
        assert_eq!(c.info.metadata.get("address"), Some("10.0.0.1:80"));
        assert!(
            !v.heartbeat(102, &hb(1, Some(5), 1100), now(1100)),
            "a renewal"
        );
        assert_eq!(v.next_lapse(), Some(now(6100).mono));
        assert!(!v.tick(now(6099).mono));
        assert!(v.tick(now(6100).mono));
        assert!(v.current().is_none());
    }

    #[test]
    fn lower_tokens_are_deposed_leaders() {
        let mut v = LeaderView::new("g");
        v.heartbeat(103, &hb(2, Some(9), 0), now(0));
        assert!(!v.heartbeat(104, &hb(1, Some(5), 10), now(10)));
        assert_eq!(v.current().unwrap().info.candidate, "c2");
        assert!(v.heartbeat(105, &hb(3, Some(12), 20), now(20)));
        assert_eq!(v.current().unwrap().info.candidate, "c3");
    }

    #[test]
    fn a_tokenless_heartbeat_of_the_leader_means_it_stopped() {
        let mut v = LeaderView::new("g");
        v.heartbeat(106, &hb(2, Some(9), 0), now(0));
        assert!(
            !v.heartbeat(107, &hb(3, None, 10), now(10)),
            "someone else, acquiring"
        );
        assert!(v.heartbeat(108, &hb(2, None, 20), now(20)));
        assert!(v.current().is_none());
    }

    #[test]
    fn an_old_record_counts_only_for_what_is_left_of_its_timeout() {
        let mut v = LeaderView::new("g");
        // Written 60 s before it is read: long gone.
        assert!(!v.heartbeat(109, &hb(1, Some(5), 0), now(60_000)));
        assert!(v.current().is_none());
        // Written 4 s before: one second left.
        assert!(v.heartbeat(110, &hb(1, Some(6), 56_000), now(60_000)));
        assert_eq!(v.next_lapse(), Some(now(61_000).mono));
    }

    #[test]
    fn a_release_of_the_leader_means_nobody_leads() {
        let mut v = LeaderView::new("g");
        v.heartbeat(200, &hb(2, Some(9), 0), now(0));
        let released = Heartbeat {
            released: true,
            ..hb(3, Some(12), 10)
        };
        assert!(!v.heartbeat(201, &released, now(10)), "someone else's");
        let released = Heartbeat {
            released: true,
            ..hb(2, Some(9), 20)
        };
        assert!(v.heartbeat(202, &released, now(20)));
        assert!(v.current().is_none());
    }

    /// Hole 5: forged or foreign records do not poison the view.
    #[test]
    fn other_groups_and_impossible_tokens_are_not_leaders() {
        let mut v = LeaderView::new("g");
        let other = Heartbeat {
            group: Some("payroll".into()),
            ..hb(1, Some(5), 0)
        };
        assert!(!v.heartbeat(300, &other, now(0)));
        assert!(!v.heartbeat(301, &hb(2, Some(u64::MAX), 0), now(0)));
        assert!(!v.heartbeat(302, &hb(2, Some(303), 0), now(0)));
        assert!(v.current().is_none());
        // ... and leave the next honest leader visible.
        assert!(v.heartbeat(303, &hb(3, Some(303), 0), now(0)));
        assert_eq!(v.current().unwrap().info.token, 303);
    }

    #[test]
    fn a_record_from_the_future_counts_for_its_timeout_only() {
        let mut v = LeaderView::new("g");
        v.heartbeat(400, &hb(1, Some(5), u64::MAX - 1_700_000_000_000), now(0));
        assert_eq!(v.next_lapse(), Some(now(5000).mono));
        let info = &v.current().unwrap().info;
        assert_eq!(info.renewed_at, now(0).wall.to_system_time());
        assert_eq!(
            info.expires_at,
            (now(0).wall + Duration::from_secs(5)).to_system_time()
        );
    }

    /// Hole 4: the observer does not hide the leader of a recreated topic.
    #[test]
    fn offsets_that_go_back_reset_the_view_so_the_new_leader_shows() {
        let mut v = LeaderView::new("g");
        v.heartbeat(500, &hb(1, Some(480), 0), now(0));
        assert!(v.heartbeat(3, &hb(2, Some(2), 10), now(10)));
        assert_eq!(v.current().unwrap().info.candidate, "c2");
        assert_eq!(v.current().unwrap().info.token, 2);
        assert!(!v.offset(4));
        assert!(v.offset(0), "went back again, with a leader to forget");
        assert!(v.current().is_none());
    }
}
