//! NELI's decisions as a pure state machine: assignment, own and foreign
//! heartbeats and time come in; elected / renewed / term ended go out. No
//! I/O and no clock reads, so every rule is unit-tested with explicit
//! times.
//!
//! The rules (goneli's fast, exclusive NELI, plus a fencing token):
//!
//! * Holding partition 0 of the leader topic makes a candidate eligible,
//!   not leader: its term starts when its first heartbeat sent under this
//!   assignment comes back, and that record's offset gives the token
//!   ([`token_of`](crate::heartbeat::token_of)). So the leader never acts
//!   before it has a token, and tokens rise across leaders.
//! * Each own heartbeat that comes back renews the term until
//!   `sent + heartbeat timeout + grace`, anchored at the instant it was
//!   *sent* (it cannot have been written before).
//! * When no heartbeat sent within the last heartbeat timeout has come
//!   back, the leader is **fenced**: its term ends at once, it keeps the
//!   assignment, and it leads again — with a new, higher token — as soon as
//!   a fresh heartbeat comes back (**resumed**).
//! * A heartbeat on the leader's partition from another candidate with a
//!   higher token means the group gave the partition to someone else while
//!   this candidate was cut off: the term ends (superseded) and this
//!   assignment is not used again.
//! * With liveness coupling, a term ends when the application has not
//!   pulsed for the liveness timeout, and no term starts before it pulses
//!   again.

use std::time::Duration;

use tenure::{EndReason, MonoTime};

use crate::heartbeat::{token_of, Heartbeat};

/// What the coordinator must tell the session.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Decision {
    /// A term starts.
    Elected {
        /// Its fencing token.
        token: u64,
        /// Its deadline.
        deadline: MonoTime,
    },
    /// The term's deadline moves.
    Renewed {
        /// The new deadline.
        deadline: MonoTime,
        /// From sending the heartbeat to reading it back.
        latency: Duration,
    },
    /// The term ends now; its work must be gone by `work_deadline`.
    End {
        /// Why.
        reason: EndReason,
        /// When the work must be gone.
        work_deadline: MonoTime,
    },
}

#[derive(Clone, Debug, PartialEq)]
struct Lead {
    token: u64,
    /// When the latest own heartbeat that came back was sent.
    last_sent: MonoTime,
}

#[derive(Clone, Debug, PartialEq)]
enum State {
    /// Not holding partition 0.
    Unassigned,
    /// Holding partition 0 of assignment `generation`.
    Held {
        generation: u64,
        lead: Option<Lead>,
        /// Another candidate wrote with a higher token: this assignment is
        /// stale and must not start a term.
        superseded: bool,
    },
}

/// The NELI state of one candidate.
#[derive(Debug)]
pub(crate) struct Neli {
    incarnation: u64,
    timeout: Duration,
    grace: Duration,
    liveness: Option<Duration>,
    state: State,
}

impl Neli {
    /// A candidate (elector instance `incarnation`) with heartbeat timeout
    /// `timeout` and optional liveness timeout.
    pub(crate) fn new(incarnation: u64, timeout: Duration, liveness: Option<Duration>) -> Self {
        Neli {
            incarnation,
            timeout,
            grace: grace(timeout),
            liveness,
            state: State::Unassigned,
        }
    }

    /// The current term's token, stamped on heartbeats.
    pub(crate) fn token(&self) -> Option<u64> {
        match &self.state {
            State::Held {
                lead: Some(lead), ..
            } => Some(lead.token),
            _ => None,
        }
    }

    /// Whether partition 0 is held.
    pub(crate) fn is_assigned(&self) -> bool {
        matches!(self.state, State::Held { .. })
    }

    /// Whether `hb` was written by this elector instance.
    pub(crate) fn is_mine(&self, hb: &Heartbeat) -> bool {
        hb.incarnation == self.incarnation
    }

    /// Partition 0 was assigned (assignment number `generation`).
    pub(crate) fn assigned(&mut self, generation: u64) {
        self.state = State::Held {
            generation,
            lead: None,
            superseded: false,
        };
    }

    /// Partition 0 was revoked or given up. The caller ends the term with
    /// the barrier, so nothing is returned.
    pub(crate) fn unassigned(&mut self) {
        self.state = State::Unassigned;
    }

    /// An own heartbeat came back at `now`, from offset `offset`.
    /// `silence` is how long the application has not pulsed.
    pub(crate) fn own_heartbeat(
        &mut self,
        hb: &Heartbeat,
        offset: i64,
        now: MonoTime,
        silence: Duration,
    ) -> Option<Decision> {
        let timeout = self.timeout;
        let grace = self.grace;
        let live = self.is_live(silence);
        let State::Held {
            generation,
            lead,
            superseded,
        } = &mut self.state
        else {
            return None;
        };
        // A heartbeat from an earlier assignment proves nothing about this
        // one, and one sent too long ago cannot start or extend a term.
        let sent = MonoTime::from_nanos(hb.sent_mono_ns);
        if hb.generation != *generation || *superseded || now >= sent + timeout {
            return None;
        }
        match lead {
            Some(l) => {
                if sent <= l.last_sent {
                    return None;
                }
                l.last_sent = sent;
                Some(Decision::Renewed {
                    deadline: sent + timeout + grace,
                    latency: now.saturating_since(sent),
                })
            }
            None => {
                if !live {
                    return None;
                }
                let token = token_of(offset)?;
                *lead = Some(Lead {
                    token,
                    last_sent: sent,
                });
                Some(Decision::Elected {
                    token,
                    deadline: sent + timeout + grace,
                })
            }
        }
    }

    /// Another candidate's heartbeat was read on the held partition.
    pub(crate) fn foreign_heartbeat(&mut self, hb: &Heartbeat, now: MonoTime) -> Option<Decision> {
        let State::Held {
            lead, superseded, ..
        } = &mut self.state
        else {
            return None;
        };
        let mine = lead.as_ref().map_or(0, |l| l.token);
        match hb.token {
            Some(theirs) if theirs > mine => {
                *superseded = true;
                let l = lead.take()?;
                Some(Decision::End {
                    reason: EndReason::Superseded {
                        by: Some(hb.candidate.clone()),
                    },
                    work_deadline: now.min(l.last_sent + self.timeout + self.grace),
                })
            }
            _ => None,
        }
    }

    /// Time passed: fence a leader whose heartbeats stopped coming back,
    /// end the term of an application that stopped pulsing. `starved` says
    /// that polls are held back because the application has not pulsed
    /// since the last one: a fence then is the liveness coupling taking
    /// effect, and is reported as such.
    pub(crate) fn tick(
        &mut self,
        now: MonoTime,
        silence: Duration,
        starved: bool,
    ) -> Option<Decision> {
        let timeout = self.timeout;
        let grace = self.grace;
        let live = self.is_live(silence);
        let stalled = self.liveness.is_some() && starved;
        let State::Held { lead, .. } = &mut self.state else {
            return None;
        };
        let l = lead.as_ref()?;
        let deadline = l.last_sent + timeout + grace;
        let reason = if !live || (stalled && now >= l.last_sent + timeout) {
            EndReason::LivenessLost
        } else if now >= l.last_sent + timeout {
            EndReason::Fenced
        } else {
            return None;
        };
        *lead = None;
        Some(Decision::End {
            reason,
            work_deadline: deadline,
        })
    }

    /// Ends the term, if any, for a resignation or shutdown, keeping the
    /// assignment until the caller gives it up.
    pub(crate) fn stand_down(&mut self) {
        if let State::Held {
            lead, superseded, ..
        } = &mut self.state
        {
            *lead = None;
            *superseded = true;
        }
    }

    /// When [`tick`](Neli::tick) must run next at the latest.
    pub(crate) fn next_wake(&self) -> Option<MonoTime> {
        match &self.state {
            State::Held { lead: Some(l), .. } => Some(l.last_sent + self.timeout),
            _ => None,
        }
    }

    fn is_live(&self, silence: Duration) -> bool {
        self.liveness.is_none_or(|l| silence < l)
    }
}

/// How long after the fence the term's deadline lies: the work is told to
/// stop at the fence and is dropped at the deadline. A fifth of the
/// heartbeat timeout, well inside the session timeout (3 × heartbeat
/// timeout) before which no other candidate can be assigned.
pub(crate) fn grace(timeout: Duration) -> Duration {
    timeout / 5
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heartbeat::FORMAT_VERSION;

    const H: Duration = Duration::from_secs(5);
    const ME: u64 = 7;

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos(1_000_000_000_000 + ms * 1_000_000)
    }

    fn hb(incarnation: u64, generation: u64, sent: MonoTime, token: Option<u64>) -> Heartbeat {
        Heartbeat {
            format: FORMAT_VERSION,
            candidate: format!("c{incarnation}"),
            incarnation,
            generation,
            seq: 0,
            sent_mono_ns: sent.as_nanos(),
            sent_wall_ms: 0,
            timeout_ms: 5000,
            token,
            metadata: Default::default(),
        }
    }

    const LIVE: Duration = Duration::ZERO;

    #[test]
    fn assignment_alone_does_not_lead_the_first_own_heartbeat_does() {
        let mut n = Neli::new(ME, H, None);
        assert_eq!(n.tick(at(0), LIVE, false), None);
        n.assigned(1);
        assert!(n.is_assigned());
        assert_eq!(n.token(), None);
        assert_eq!(n.next_wake(), None);
        let d = n.own_heartbeat(&hb(ME, 1, at(100), None), 41, at(130), LIVE);
        assert_eq!(
            d,
            Some(Decision::Elected {
                token: 42,
                deadline: at(100) + H + H / 5
            })
        );
        assert_eq!(n.token(), Some(42));
        assert_eq!(n.next_wake(), Some(at(100) + H));
    }

    #[test]
    fn heartbeats_renew_from_their_send_instant() {
        let mut n = Neli::new(ME, H, None);
        n.assigned(1);
        n.own_heartbeat(&hb(ME, 1, at(0), None), 0, at(10), LIVE);
        let d = n.own_heartbeat(&hb(ME, 1, at(200), Some(1)), 5, at(260), LIVE);
        assert_eq!(
            d,
            Some(Decision::Renewed {
                deadline: at(200) + H + H / 5,
                latency: Duration::from_millis(60)
            })
        );
        // An older one arriving late changes nothing.
        assert_eq!(
            n.own_heartbeat(&hb(ME, 1, at(100), Some(1)), 4, at(270), LIVE),
            None
        );
        assert_eq!(n.token(), Some(1), "renewals keep the token");
    }

    #[test]
    fn fenced_after_the_heartbeat_timeout_and_resumed_with_a_higher_token() {
        let mut n = Neli::new(ME, H, None);
        n.assigned(1);
        n.own_heartbeat(&hb(ME, 1, at(0), None), 9, at(10), LIVE);
        assert_eq!(n.tick(at(4999), LIVE, false), None);
        assert_eq!(
            n.tick(at(5000), LIVE, false),
            Some(Decision::End {
                reason: EndReason::Fenced,
                work_deadline: at(0) + H + H / 5
            })
        );
        assert!(n.is_assigned(), "a fenced leader keeps the assignment");
        assert_eq!(n.token(), None);
        assert_eq!(n.tick(at(6000), LIVE, false), None, "fenced once");
        // A heartbeat sent before the fence and older than the timeout
        // does not resume.
        assert_eq!(
            n.own_heartbeat(&hb(ME, 1, at(1000), Some(10)), 20, at(7000), LIVE),
            None
        );
        // A fresh one does, with its own offset as the token.
        assert_eq!(
            n.own_heartbeat(&hb(ME, 1, at(7100), Some(10)), 30, at(7150), LIVE),
            Some(Decision::Elected {
                token: 31,
                deadline: at(7100) + H + H / 5
            })
        );
    }

    #[test]
    fn heartbeats_of_another_assignment_or_instance_do_not_count() {
        let mut n = Neli::new(ME, H, None);
        n.assigned(2);
        assert_eq!(
            n.own_heartbeat(&hb(ME, 1, at(0), None), 3, at(10), LIVE),
            None
        );
        n.unassigned();
        assert_eq!(
            n.own_heartbeat(&hb(ME, 2, at(0), None), 3, at(10), LIVE),
            None
        );
        assert!(!n.is_mine(&hb(8, 2, at(0), None)));
        assert!(n.is_mine(&hb(ME, 2, at(0), None)));
    }

    #[test]
    fn a_foreign_heartbeat_with_a_higher_token_supersedes_for_this_assignment() {
        let mut n = Neli::new(ME, H, None);
        n.assigned(1);
        n.own_heartbeat(&hb(ME, 1, at(0), None), 9, at(10), LIVE);
        // Older leaders' late heartbeats are ignored.
        assert_eq!(n.foreign_heartbeat(&hb(8, 4, at(0), Some(3)), at(20)), None);
        assert_eq!(n.foreign_heartbeat(&hb(8, 4, at(0), None), at(20)), None);
        assert_eq!(
            n.foreign_heartbeat(&hb(8, 4, at(0), Some(11)), at(30)),
            Some(Decision::End {
                reason: EndReason::Superseded {
                    by: Some("c8".into())
                },
                work_deadline: at(30)
            })
        );
        assert_eq!(
            n.own_heartbeat(&hb(ME, 1, at(40), None), 12, at(50), LIVE),
            None,
            "the stale assignment never leads again"
        );
        n.assigned(2);
        assert!(n
            .own_heartbeat(&hb(ME, 2, at(60), None), 13, at(70), LIVE)
            .is_some());
    }

    #[test]
    fn liveness_ends_the_term_and_blocks_the_next() {
        let l = Duration::from_secs(2);
        let mut n = Neli::new(ME, H, Some(l));
        n.assigned(1);
        assert_eq!(
            n.own_heartbeat(&hb(ME, 1, at(0), None), 0, at(10), l),
            None,
            "no term while the application is silent"
        );
        n.own_heartbeat(&hb(ME, 1, at(100), None), 1, at(110), LIVE);
        assert_eq!(n.tick(at(1000), Duration::from_secs(1), false), None);
        assert_eq!(
            n.tick(at(1100), l, false),
            Some(Decision::End {
                reason: EndReason::LivenessLost,
                work_deadline: at(100) + H + H / 5
            })
        );
    }

    #[test]
    fn a_fence_caused_by_missing_pulses_is_reported_as_liveness_lost() {
        let mut n = Neli::new(ME, H, Some(Duration::from_secs(30)));
        n.assigned(1);
        n.own_heartbeat(&hb(ME, 1, at(0), None), 0, at(10), LIVE);
        let d = n.tick(at(5000), Duration::from_secs(5), true).unwrap();
        assert!(matches!(
            d,
            Decision::End {
                reason: EndReason::LivenessLost,
                ..
            }
        ));
    }

    #[test]
    fn standing_down_keeps_the_assignment_but_never_leads_on_it() {
        let mut n = Neli::new(ME, H, None);
        n.assigned(1);
        n.own_heartbeat(&hb(ME, 1, at(0), None), 0, at(10), LIVE);
        n.stand_down();
        assert_eq!(n.token(), None);
        assert!(n.is_assigned());
        assert_eq!(
            n.own_heartbeat(&hb(ME, 1, at(100), None), 1, at(110), LIVE),
            None
        );
    }
}
