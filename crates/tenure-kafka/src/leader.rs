//! Who leads, as heartbeats on partition 0 tell a reader (the known
//! leader). Pure: heartbeats and time come in, the leader goes out.
//!
//! * A heartbeat carrying a token names the leader, unless a heartbeat
//!   with a higher token was seen: tokens only rise across terms, so a
//!   lower one comes from an old leader that has not yet noticed it lost
//!   the partition.
//! * A heartbeat without a token from the current leader's instance means
//!   it stopped leading (fenced, or holding the partition before its first
//!   heartbeat came back).
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

/// Follows the leader from heartbeats.
#[derive(Debug, Default)]
pub(crate) struct LeaderView {
    current: Option<Seen>,
    /// The highest token seen: lower ones are from deposed leaders.
    highest: u64,
}

impl LeaderView {
    /// The leader now.
    pub(crate) fn current(&self) -> Option<&Seen> {
        self.current.as_ref()
    }

    /// A heartbeat was read at `now`. Returns whether the leader (who, or
    /// their token or metadata) changed.
    pub(crate) fn heartbeat(&mut self, hb: &Heartbeat, now: Now) -> bool {
        let timeout = Duration::from_millis(hb.timeout_ms);
        let written_ago =
            Duration::from_millis(now.wall.as_millis().saturating_sub(hb.sent_wall_ms));
        let left = timeout.saturating_sub(written_ago);
        let before = self.key();
        match hb.token {
            Some(token) if token >= self.highest && !left.is_zero() => {
                self.highest = token;
                let sent = tenure::WallTime::from_millis(hb.sent_wall_ms);
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
            None if self
                .current
                .as_ref()
                .is_some_and(|c| c.incarnation == hb.incarnation) =>
            {
                self.current = None;
            }
            _ => {}
        }
        self.key() != before
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
            candidate: format!("c{who}"),
            incarnation: who,
            generation: 1,
            seq: 0,
            sent_mono_ns: 0,
            sent_wall_ms: 1_700_000_000_000 + sent_ms,
            timeout_ms: 5000,
            token,
            metadata: Metadata::address(format!("10.0.0.{who}:80")),
        }
    }

    #[test]
    fn a_heartbeat_with_a_token_names_the_leader_until_it_lapses() {
        let mut v = LeaderView::default();
        assert!(v.heartbeat(&hb(1, Some(5), 1000), now(1000)));
        let c = v.current().unwrap();
        assert_eq!(c.info.candidate, "c1");
        assert_eq!(c.info.token, 5);
        assert_eq!(c.info.metadata.get("address"), Some("10.0.0.1:80"));
        assert!(!v.heartbeat(&hb(1, Some(5), 1100), now(1100)), "a renewal");
        assert_eq!(v.next_lapse(), Some(now(6100).mono));
        assert!(!v.tick(now(6099).mono));
        assert!(v.tick(now(6100).mono));
        assert!(v.current().is_none());
    }

    #[test]
    fn lower_tokens_are_deposed_leaders() {
        let mut v = LeaderView::default();
        v.heartbeat(&hb(2, Some(9), 0), now(0));
        assert!(!v.heartbeat(&hb(1, Some(5), 10), now(10)));
        assert_eq!(v.current().unwrap().info.candidate, "c2");
        assert!(v.heartbeat(&hb(3, Some(12), 20), now(20)));
        assert_eq!(v.current().unwrap().info.candidate, "c3");
    }

    #[test]
    fn a_tokenless_heartbeat_of_the_leader_means_it_stopped() {
        let mut v = LeaderView::default();
        v.heartbeat(&hb(2, Some(9), 0), now(0));
        assert!(
            !v.heartbeat(&hb(3, None, 10), now(10)),
            "someone else, acquiring"
        );
        assert!(v.heartbeat(&hb(2, None, 20), now(20)));
        assert!(v.current().is_none());
    }

    #[test]
    fn an_old_record_counts_only_for_what_is_left_of_its_timeout() {
        let mut v = LeaderView::default();
        // Written 60 s before it is read: long gone.
        assert!(!v.heartbeat(&hb(1, Some(5), 0), now(60_000)));
        assert!(v.current().is_none());
        // Written 4 s before: one second left.
        assert!(v.heartbeat(&hb(1, Some(6), 56_000), now(60_000)));
        assert_eq!(v.next_lapse(), Some(now(61_000).mono));
    }
}
