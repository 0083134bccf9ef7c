//! NELI's decisions as a pure state machine: assignments, the records of
//! partition 0 (read in order, from one reader that runs for the
//! candidate's whole life), what this candidate sent, and time come in;
//! elected / renewed / term ended / rejoin / tokens went back go out. No
//! I/O and no clock reads, so every rule is unit-tested with explicit
//! times. [`Pacing`] decides the async shell's own timers the same way:
//! when to poll the client thread (polls held back by the liveness
//! coupling are *starved*), and when to join the group again.
//!
//! `H` is the heartbeat timeout, `grace` = H/5, and a term lasts at most
//! `H + grace` after the send of the last own heartbeat that came back.
//! The rules (goneli's fast, exclusive NELI, plus a fencing token, closed
//! against partial partitions and pauses):
//!
//! * **Eligible, not leader.** Holding partition 0 makes a candidate
//!   eligible: its term starts when an own heartbeat sent under this
//!   assignment comes back within H, and that record's offset (plus one)
//!   is the token. Own heartbeats are recognised by the sequence numbers
//!   this candidate sent, with their send instants kept here: a record
//!   forged in its name renews nothing.
//! * **Quiet first.** It starts a term only when no other instance's
//!   heartbeat of its group has been read for the *quiet period*
//!   `(H + grace) · (1 + ρ)/(1 − ρ)` (ρ the drift bound; with the larger of
//!   both heartbeat timeouts): longer than any term that heartbeat could
//!   sustain. A released heartbeat (the last one a holder writes once its
//!   term has drained) ends that instance's claim at once; nothing read
//!   before the reader started counts as heard, so the reader's start also
//!   counts as activity. This closes the window in which the group hands
//!   partition 0 to a new member while the old holder, cut off from the
//!   group coordinator only, still renews its term: the
//!   old holder's renewals are records the new one reads, in order, before
//!   its own.
//! * **Renewed** by each own heartbeat that comes back within H, until
//!   `sent + H + grace`.
//! * **Fenced** when no own heartbeat sent in the last H came back: the
//!   term ends, its work is dropped at its deadline, the assignment is
//!   kept, and it leads again (a new, higher token) once the quiet rule
//!   and a fresh heartbeat allow (**resumed**).
//! * **Superseded at once** by another instance's heartbeat read after its
//!   election offset, unless that heartbeat comes from an older generation
//!   of the consumer group (a stale holder, which stands down when it
//!   reads this leader's heartbeats).
//! * **Stale assignment.** A holder that reads a heartbeat from a later
//!   generation of its consumer group knows its own assignment is gone:
//!   it stops heartbeating and rejoins the group.
//! * **No zombies.** After a gap in its own polling longer than
//!   [`GAP_LIMIT`] heartbeat timeouts (a pause or a host suspend, during
//!   which librdkafka's session may have expired without it noticing: its
//!   clock stops in suspend), a holder does not use its assignment again:
//!   it rejoins.
//! * **Let go.** A holder whose own heartbeats have not come back in time
//!   for [`LET_GO_AFTER`] heartbeat timeouts (it cannot produce, or its
//!   pulses are too far apart) rejoins, so another member can lead.
//! * **Tokens never go back.** An offset below one already read means the
//!   topic was recreated, truncated or lost its data: that is reported,
//!   and the coordinator stops for good.
//! * With liveness coupling, a term ends when the application has not
//!   pulsed for the liveness timeout, and no term starts before it pulses
//!   again.

use std::collections::VecDeque;
use std::time::Duration;

use tenure::{EndReason, MonoTime};

use crate::heartbeat::{token_of, Heartbeat};

/// After a gap in polling this many heartbeat timeouts long, a holder's
/// assignment is not used again: its session (three heartbeat timeouts)
/// may have expired, less a group heartbeat interval and some slack.
pub(crate) const GAP_LIMIT: u32 = 2;

/// A holder that has not led, and whose own heartbeats have not come back
/// in time, for this many heartbeat timeouts gives up its assignment.
pub(crate) const LET_GO_AFTER: u32 = 2;

/// How many other instances are tracked one by one; beyond that they are
/// lumped together (and never released).
const MAX_TRACKED: usize = 64;

/// How many sent heartbeats are remembered: a heartbeat stuck in a
/// producer queue or a broker may be read back long after it was sent,
/// and one this candidate no longer knows is taken for a forgery (which
/// holds its own election back for a quiet period).
const MAX_SENT: usize = 4096;

/// Sent heartbeats are also forgotten once this many heartbeat timeouts old.
const REMEMBER_SENT: u32 = 10;

/// What the coordinator must do.
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
        /// What ended it, for the elector's event (fenced, superseded, liveness lost, …).
        reason: EndReason,
        /// When the work must be gone.
        work_deadline: MonoTime,
    },
    /// Give the assignment up (leave the group, join again later): it
    /// cannot, or must no longer, lead.
    Rejoin {
        /// Why, for the log.
        why: &'static str,
    },
    /// Offsets went back: the topic's offsets restarted, and a term
    /// would get a token not above one already handed out.
    Regressed {
        /// The highest token that may have been handed out (the highest
        /// offset read, plus one, or a token read or held).
        highest: u64,
        /// The token the partition offers now (the offset read, plus one).
        next: u64,
    },
}

/// What the client thread should send on its next poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The current term's token, stamped on the heartbeat.
    pub(crate) token: Option<u64>,
    /// The assignment the heartbeat is for; none is sent if partition 0 is
    /// held under another one by then.
    pub(crate) generation: u64,
}

#[derive(Clone, Debug, PartialEq)]
struct Lead {
    token: u64,
    /// The offset of the heartbeat that started the term.
    election_offset: i64,
    /// When the latest own heartbeat that came back was sent.
    last_sent: MonoTime,
}

#[derive(Clone, Debug, PartialEq)]
struct Hold {
    /// Which assignment (counted by the client thread).
    generation: u64,
    /// The consumer group's generation, as stamped on the latest own
    /// heartbeat of this assignment.
    group_generation: Option<i32>,
    lead: Option<Lead>,
    /// Heartbeats may still be sent, and elect, on this assignment.
    usable: bool,
    /// When an own heartbeat last came back in time (or the assignment
    /// began).
    last_fresh: MonoTime,
}

#[derive(Clone, Debug, PartialEq)]
struct Sent {
    seq: u64,
    at: MonoTime,
    generation: u64,
    /// Read back already (a second copy is a producer retry).
    read: bool,
    /// The highest offset read when it was sent: it must land above.
    above: Option<i64>,
}

/// Another instance's claim on partition 0: its heartbeats may sustain a
/// term until `until`.
#[derive(Clone, Debug, PartialEq)]
struct Claim {
    /// `None` lumps together what cannot be told apart (the records before
    /// the reader started, forgeries, instances beyond [`MAX_TRACKED`]).
    instance: Option<u64>,
    until: MonoTime,
}

/// The NELI state of one candidate.
#[derive(Debug)]
pub(crate) struct Neli {
    group: String,
    incarnation: u64,
    timeout: Duration,
    grace: Duration,
    drift: f64,
    liveness: Option<Duration>,
    hold: Option<Hold>,
    sent: VecDeque<Sent>,
    claims: Vec<Claim>,
    /// The reader is positioned: every record from here on is read.
    reading: bool,
    highest_offset: Option<i64>,
    /// The highest token held, or read in a heartbeat whose token fits its
    /// offset: a new term's token must be above it.
    highest_token: u64,
    /// When the group coordinator last answered, by librdkafka's
    /// statistics (`None` until they first arrive).
    contact: Option<MonoTime>,
}

impl Neli {
    /// A candidate (elector instance `incarnation`) of consumer group
    /// `group`, with heartbeat timeout `timeout`, drift bound `drift` and
    /// optional liveness timeout.
    pub(crate) fn new(
        group: impl Into<String>,
        incarnation: u64,
        timeout: Duration,
        drift: f64,
        liveness: Option<Duration>,
    ) -> Self {
        Neli {
            group: group.into(),
            incarnation,
            timeout,
            grace: grace(timeout),
            drift,
            liveness,
            hold: None,
            sent: VecDeque::new(),
            claims: Vec::new(),
            reading: false,
            highest_offset: None,
            highest_token: 0,
            contact: None,
        }
    }

    /// The current term's token.
    #[cfg(test)]
    pub(crate) fn token(&self) -> Option<u64> {
        self.hold.as_ref()?.lead.as_ref().map(|l| l.token)
    }

    /// Whether partition 0 is held.
    pub(crate) fn is_assigned(&self) -> bool {
        self.hold.is_some()
    }

    /// What to send on the next poll, if anything.
    pub(crate) fn plan(&self) -> Option<Plan> {
        let h = self.hold.as_ref().filter(|h| h.usable)?;
        Some(Plan {
            token: h.lead.as_ref().map(|l| l.token),
            generation: h.generation,
        })
    }

    /// The reader is positioned at `now`: what was written before is
    /// unseen, so it counts as a claim for one quiet period.
    pub(crate) fn reading_from(&mut self, now: MonoTime) {
        self.reading = true;
        let quiet = self.quiet_for(self.timeout);
        self.claim(None, now + quiet);
    }

    /// librdkafka's statistics at `now`: the group coordinator has not
    /// answered for `silent` (`Duration::MAX`: its connection is down);
    /// `None` while a rebalance holds this member's join, which the
    /// coordinator counts as a sign of life.
    pub(crate) fn membership(&mut self, now: MonoTime, silent: Option<Duration>) {
        let contact = silent.map_or(now, |s| now - s);
        self.contact = Some(self.contact.map_or(contact, |c| c.max(contact)));
    }

    /// Whether the group coordinator answered within the last heartbeat
    /// timeout (or there is no evidence either way yet).
    fn is_member(&self, now: MonoTime) -> bool {
        self.contact.is_none_or(|c| now < c + self.timeout)
    }

    /// Partition 0 was assigned (assignment number `generation`) at `now`.
    pub(crate) fn assigned(&mut self, generation: u64, now: MonoTime) {
        self.hold = Some(Hold {
            generation,
            group_generation: None,
            lead: None,
            usable: true,
            last_fresh: now,
        });
    }

    /// Partition 0 was revoked or given up. The caller ends the term with
    /// the barrier, so nothing is returned.
    pub(crate) fn unassigned(&mut self) {
        self.hold = None;
    }

    /// The client thread sent heartbeat `seq` at `at` under assignment
    /// `generation` and consumer group generation `group_generation`.
    pub(crate) fn sent(
        &mut self,
        seq: u64,
        at: MonoTime,
        generation: u64,
        group_generation: Option<i32>,
    ) {
        while self.sent.front().is_some_and(|s| {
            s.at + self.timeout * REMEMBER_SENT <= at || self.sent.len() >= MAX_SENT
        }) {
            self.sent.pop_front();
        }
        self.sent.push_back(Sent {
            seq,
            at,
            generation,
            read: false,
            above: self.highest_offset,
        });
        if let Some(h) = self.hold.as_mut().filter(|h| h.generation == generation) {
            h.group_generation = group_generation.or(h.group_generation);
        }
    }

    /// Own heartbeat `seq` was written at `offset`: at or below an offset
    /// read before it was sent, the topic's offsets restarted (even if no
    /// offset read ever goes back: a reader left beyond the end of a
    /// recreated topic waits there).
    pub(crate) fn delivered(&mut self, seq: u64, offset: i64) -> Option<Decision> {
        let above = self.sent.iter().find(|s| s.seq == seq)?.above?;
        (offset <= above).then(|| Decision::Regressed {
            highest: token_of(above).unwrap_or(u64::MAX).max(self.highest_token),
            next: token_of(offset).unwrap_or(0),
        })
    }

    /// A record that is not a heartbeat of this build was read at
    /// `offset`: only its offset matters.
    pub(crate) fn offset(&mut self, offset: i64) -> Option<Decision> {
        match self.highest_offset {
            Some(highest) if offset < highest => Some(Decision::Regressed {
                highest: token_of(highest).unwrap_or(u64::MAX),
                next: token_of(offset).unwrap_or(0),
            }),
            _ => {
                self.highest_offset = Some(offset);
                None
            }
        }
    }

    /// Heartbeat `hb` was read at `offset`, at `now`; the application has
    /// not pulsed for `silence`.
    pub(crate) fn record(
        &mut self,
        offset: i64,
        hb: &Heartbeat,
        now: MonoTime,
        silence: Duration,
    ) -> Vec<Decision> {
        if let Some(d) = self.offset(offset) {
            return vec![d];
        }
        if !hb.is_of_group(&self.group) {
            return Vec::new();
        }
        if hb.incarnation == self.incarnation {
            if hb.released {
                // Its own release (or one forged in its name, which takes
                // away nothing this candidate relies on).
                return Vec::new();
            }
            return match self.take_sent(hb) {
                Some(Some(sent)) => self.own(offset, sent, now, silence),
                // A second copy of one already read: a producer retry.
                Some(None) => Vec::new(),
                None => {
                    // Not sent by this instance: forged in its name. It
                    // proves a writer, not a term.
                    let quiet = self.quiet_for(hb.timeout());
                    self.claim(None, now + quiet);
                    Vec::new()
                }
            };
        }
        self.foreign(offset, hb, now)
    }

    /// Looks `hb` up among the heartbeats sent: `Some(Some(_))` the first
    /// time it is read back, `Some(None)` for a later copy, `None` if this
    /// instance never sent it.
    fn take_sent(&mut self, hb: &Heartbeat) -> Option<Option<Sent>> {
        let s = self.sent.iter_mut().find(|s| {
            s.seq == hb.seq && s.generation == hb.generation && s.at.as_nanos() == hb.sent_mono_ns
        })?;
        if s.read {
            return Some(None);
        }
        s.read = true;
        Some(Some(s.clone()))
    }

    fn own(&mut self, offset: i64, sent: Sent, now: MonoTime, silence: Duration) -> Vec<Decision> {
        let (timeout, grace) = (self.timeout, self.grace);
        let quiet = self.is_quiet(now) && self.is_member(now);
        let live = self.is_live(silence);
        let highest_token = self.highest_token;
        let Some(h) = self.hold.as_mut() else {
            return Vec::new();
        };
        // A heartbeat from an earlier assignment proves nothing about this
        // one, and one sent too long ago cannot start or extend a term.
        if h.generation != sent.generation || !h.usable || now >= sent.at + timeout {
            return Vec::new();
        }
        h.last_fresh = now;
        match &mut h.lead {
            Some(l) => {
                if sent.at <= l.last_sent {
                    return Vec::new();
                }
                l.last_sent = sent.at;
                vec![Decision::Renewed {
                    deadline: sent.at + timeout + grace,
                    latency: now.saturating_since(sent.at),
                }]
            }
            None => {
                if !live || !quiet {
                    return Vec::new();
                }
                let Some(token) = token_of(offset) else {
                    return Vec::new();
                };
                if token <= highest_token {
                    // The offsets restarted under records this candidate
                    // did not read (the topic was recreated and refilled).
                    return vec![Decision::Regressed {
                        highest: highest_token,
                        next: token,
                    }];
                }
                h.lead = Some(Lead {
                    token,
                    election_offset: offset,
                    last_sent: sent.at,
                });
                self.highest_token = token;
                vec![Decision::Elected {
                    token,
                    deadline: sent.at + timeout + grace,
                }]
            }
        }
    }

    fn foreign(&mut self, offset: i64, hb: &Heartbeat, now: MonoTime) -> Vec<Decision> {
        let (timeout, grace) = (self.timeout, self.grace);
        let fits = hb.token_fits(offset);
        if hb.released && fits {
            self.claims.retain(|c| c.instance != Some(hb.incarnation));
            return Vec::new();
        }
        let quiet = self.quiet_for(hb.timeout());
        self.claim(Some(hb.incarnation), now + quiet);
        let mut out = Vec::new();
        if !fits {
            // A token no record before it could have given: forged, or
            // written by a leader of the topic before it was recreated. It
            // holds elections back, and nothing more.
            return out;
        }
        self.highest_token = self.highest_token.max(hb.token.unwrap_or(0));
        let Some(h) = self.hold.as_mut() else {
            return out;
        };
        let older = matches!((hb.group_generation, h.group_generation), (Some(theirs), Some(mine)) if theirs < mine);
        let later = matches!((hb.group_generation, h.group_generation), (Some(theirs), Some(mine)) if theirs > mine);
        if let Some(l) = h.lead.take_if(|l| offset > l.election_offset && !older) {
            out.push(Decision::End {
                reason: EndReason::Superseded {
                    by: Some(hb.candidate.clone()),
                },
                work_deadline: now.min(l.last_sent + timeout + grace),
            });
        }
        if later && h.usable {
            h.usable = false;
            h.lead = None;
            out.push(Decision::Rejoin {
                why: "a later generation of the consumer group holds partition 0",
            });
        }
        out
    }

    /// Time passed: fence a leader whose heartbeats stopped coming back,
    /// end the term of an application that stopped pulsing, let go of an
    /// assignment that cannot lead. `starved` says that polls are held back
    /// because the application has not pulsed since the last one: a fence
    /// then is the liveness coupling taking effect, and is reported as
    /// such.
    pub(crate) fn tick(
        &mut self,
        now: MonoTime,
        silence: Duration,
        starved: bool,
    ) -> Vec<Decision> {
        self.claims.retain(|c| now < c.until);
        let (timeout, grace) = (self.timeout, self.grace);
        let live = self.is_live(silence);
        let member = self.is_member(now);
        let stalled = self.liveness.is_some() && starved;
        let Some(h) = self.hold.as_mut() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(l) = &h.lead {
            let deadline = l.last_sent + timeout + grace;
            // No heartbeat came back for H, or the group coordinator has not
            // answered for H (the group may give partition 0 away two
            // heartbeat timeouts later at the earliest). Without polls,
            // neither heartbeats nor statistics are read: the liveness
            // coupling taking effect.
            let fenced = now >= l.last_sent + timeout || !member;
            let reason = if !live || (stalled && fenced) {
                Some(EndReason::LivenessLost)
            } else if fenced {
                Some(EndReason::Fenced)
            } else {
                None
            };
            if let Some(reason) = reason {
                h.lead = None;
                out.push(Decision::End {
                    reason,
                    work_deadline: deadline,
                });
            }
        }
        if h.lead.is_none() && h.usable && now >= h.last_fresh + timeout * LET_GO_AFTER {
            h.usable = false;
            out.push(Decision::Rejoin {
                why: "its own heartbeats have not come back in time for two heartbeat timeouts",
            });
        }
        out
    }

    /// The client thread found a gap in its polling longer than
    /// [`GAP_LIMIT`] heartbeat timeouts, at `now`: the assignment may be
    /// gone without librdkafka knowing.
    pub(crate) fn gap(&mut self, now: MonoTime) -> Vec<Decision> {
        let (timeout, grace) = (self.timeout, self.grace);
        let Some(h) = self.hold.as_mut() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(l) = h.lead.take() {
            out.push(Decision::End {
                reason: EndReason::Fenced,
                work_deadline: now.min(l.last_sent + timeout + grace),
            });
        }
        if h.usable {
            h.usable = false;
            out.push(Decision::Rejoin {
                why: "a pause or suspend longer than the session can be trusted to survive",
            });
        }
        out
    }

    /// Ends the term, if any, for a resignation or shutdown, and sends no
    /// more heartbeats on this assignment; the caller gives it up.
    pub(crate) fn stand_down(&mut self) {
        if let Some(h) = self.hold.as_mut() {
            h.lead = None;
            h.usable = false;
        }
    }

    /// When [`tick`](Neli::tick) must run next at the latest.
    pub(crate) fn next_wake(&self) -> Option<MonoTime> {
        let h = self.hold.as_ref()?;
        match &h.lead {
            Some(l) => {
                let fence = l.last_sent + self.timeout;
                Some(self.contact.map_or(fence, |c| fence.min(c + self.timeout)))
            }
            None if h.usable => Some(h.last_fresh + self.timeout * LET_GO_AFTER),
            None => None,
        }
    }

    /// How long heartbeats with heartbeat timeout `theirs` keep elections
    /// back: longer than the term they could sustain, `H + grace` with the
    /// larger H, measured on another clock within the drift bound.
    pub(crate) fn quiet_for(&self, theirs: Duration) -> Duration {
        let h = theirs.max(self.timeout);
        let factor = (1.0 + self.drift) / (1.0 - self.drift);
        Duration::try_from_secs_f64(h.saturating_add(grace(h)).as_secs_f64() * factor)
            .unwrap_or(Duration::MAX)
    }

    fn claim(&mut self, instance: Option<u64>, until: MonoTime) {
        if let Some(c) = self.claims.iter_mut().find(|c| c.instance == instance) {
            c.until = c.until.max(until);
            return;
        }
        if self.claims.len() >= MAX_TRACKED && instance.is_some() {
            return self.claim(None, until);
        }
        self.claims.push(Claim { instance, until });
    }

    fn is_quiet(&self, now: MonoTime) -> bool {
        self.reading && self.claims.iter().all(|c| now >= c.until)
    }

    fn is_live(&self, silence: Duration) -> bool {
        self.liveness.is_none_or(|l| silence < l)
    }
}

/// When the shell polls the client thread and when it joins the group
/// again: the timers of the async shell, decided here with explicit times.
///
/// * **Polls** are at least `min_poll_interval` apart and never overlap
///   (the next waits for the report of the last).
/// * **Liveness coupling** (goneli's): with a liveness timeout, a poll
///   happens only if the application pulsed since the last one; without
///   pulses librdkafka's `max.poll.interval.ms` takes its course. Polls
///   held back so are *starved*: a fence then is the coupling taking
///   effect ([`Neli::tick`] reports it as liveness lost).
/// * **Rejoin**: a candidate that gave its assignment up stays out of the
///   group for the rejoin delay (a session timeout, so that the rebalance
///   its leaving caused has given partition 0 to someone else before its
///   own join starts the next one), and gives up at most once meanwhile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pacing {
    min_poll_interval: Duration,
    rejoin_delay: Duration,
    /// Whether polls wait for pulses (a liveness timeout is set).
    coupled: bool,
    poll_in_flight: bool,
    next_poll: MonoTime,
    /// The application's last pulse as of the last poll.
    pulse_at_poll: MonoTime,
    rejoin_at: Option<MonoTime>,
}

impl Pacing {
    /// Pacing that may poll from `now` on.
    pub(crate) fn new(
        now: MonoTime,
        min_poll_interval: Duration,
        rejoin_delay: Duration,
        coupled: bool,
    ) -> Self {
        Pacing {
            min_poll_interval,
            rejoin_delay,
            coupled,
            poll_in_flight: false,
            next_poll: now,
            pulse_at_poll: MonoTime::from_nanos(0),
            rejoin_at: None,
        }
    }

    /// How long the application has not pulsed, as the liveness rules
    /// count it (always zero without coupling).
    pub(crate) fn silence(&self, now: MonoTime, last_pulse: MonoTime) -> Duration {
        if self.coupled {
            now.saturating_since(last_pulse)
        } else {
            Duration::ZERO
        }
    }

    /// Whether polls are held back because the application has not pulsed
    /// since the last one.
    pub(crate) fn starved(&self, last_pulse: MonoTime) -> bool {
        self.coupled && last_pulse <= self.pulse_at_poll
    }

    /// Whether to poll the client thread now; if so the poll counts as in
    /// flight until [`polled`](Pacing::polled).
    pub(crate) fn poll(&mut self, now: MonoTime, last_pulse: MonoTime) -> bool {
        if self.poll_in_flight || now < self.next_poll {
            return false;
        }
        self.next_poll = now + self.min_poll_interval;
        if self.coupled {
            if last_pulse <= self.pulse_at_poll {
                return false;
            }
            self.pulse_at_poll = last_pulse;
        }
        self.poll_in_flight = true;
        true
    }

    /// The poll in flight was answered (or never reached the thread).
    pub(crate) fn polled(&mut self) {
        self.poll_in_flight = false;
    }

    /// Whether to give the assignment up: only while partition 0 is held
    /// (`assigned`), and not again before the rejoin of the last time.
    pub(crate) fn may_leave(&self, assigned: bool) -> bool {
        assigned && self.rejoin_at.is_none()
    }

    /// The candidate left the group at `now`: it joins again after the
    /// rejoin delay.
    pub(crate) fn left(&mut self, now: MonoTime) {
        self.rejoin_at = Some(now + self.rejoin_delay);
    }

    /// Whether to join the group again now (once per leave).
    pub(crate) fn rejoin(&mut self, now: MonoTime) -> bool {
        let due = self.rejoin_at.is_some_and(|t| now >= t);
        if due {
            self.rejoin_at = None;
        }
        due
    }

    /// When the shell must look again at the latest: the next poll
    /// interval from `now`, or the rejoin if sooner.
    pub(crate) fn next_wake(&self, now: MonoTime) -> MonoTime {
        let poll = now + self.min_poll_interval;
        self.rejoin_at.map_or(poll, |t| t.min(poll))
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
    const GROUP: &str = "g";
    const DRIFT: f64 = 0.01;
    const LIVE: Duration = Duration::ZERO;

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos(1_000_000_000_000 + ms * 1_000_000)
    }

    /// Asserts that `decisions` are one election, handing out `token`.
    #[track_caller]
    fn assert_elected(decisions: &[Decision], token: u64) {
        assert!(
            matches!(decisions, [Decision::Elected { token: t, .. }] if *t == token),
            "expected an election with token {token}: {decisions:?}"
        );
    }

    /// The decision that the partition went back: tokens up to `highest`
    /// may have been handed out, it offers `next`.
    fn regressed(highest: u64, next: u64) -> Decision {
        Decision::Regressed { highest, next }
    }

    /// The quiet period for H = 5 s and ρ = 1 %: 6 s × 1.01/0.99.
    fn quiet() -> Duration {
        Duration::from_secs_f64(6.0 * 1.01 / 0.99)
    }

    /// A candidate whose reader started at 0, long quiet by `at(10_000)`.
    fn neli() -> Neli {
        let mut n = Neli::new(GROUP, ME, H, DRIFT, None);
        n.reading_from(at(0));
        n
    }

    fn foreign(incarnation: u64, group_generation: i32, token: Option<u64>) -> Heartbeat {
        Heartbeat {
            format: FORMAT_VERSION,
            group: Some(GROUP.into()),
            group_generation: Some(group_generation),
            candidate: format!("c{incarnation}"),
            incarnation,
            generation: 1,
            seq: 1,
            sent_mono_ns: 0,
            sent_wall_ms: 0,
            timeout_ms: 5000,
            token,
            released: false,
            metadata: Default::default(),
        }
    }

    /// Sends own heartbeat `seq` at `sent` under assignment `generation`
    /// (group generation 5) and returns the record as it will be read.
    fn send(n: &mut Neli, seq: u64, sent: MonoTime, generation: u64) -> Heartbeat {
        n.sent(seq, sent, generation, Some(5));
        Heartbeat {
            candidate: "me".into(),
            incarnation: ME,
            generation,
            seq,
            sent_mono_ns: sent.as_nanos(),
            token: n.token(),
            ..foreign(ME, 5, None)
        }
    }

    /// Assigned at `t` and elected by heartbeat `seq` sent at `t`, read at
    /// `t + 10 ms` from `offset`.
    fn leader(n: &mut Neli, t: u64, offset: i64) -> u64 {
        n.assigned(1, at(t));
        let hb = send(n, 1, at(t), 1);
        match n.record(offset, &hb, at(t + 10), LIVE).as_slice() {
            [Decision::Elected { token, .. }] => *token,
            other => panic!("not elected: {other:?}"),
        }
    }

    /// A candidate (as [`neli`] makes one) that [`leader`] elected at
    /// 10 s from `offset`: its token is `offset + 1`.
    fn leading_from(offset: i64) -> Neli {
        let mut n = neli();
        leader(&mut n, 10_000, offset);
        n
    }

    /// The decision that this candidate leads, with `token`, until
    /// `deadline`.
    fn elected(token: u64, deadline: MonoTime) -> Decision {
        Decision::Elected { token, deadline }
    }

    /// The decision that the term ended, fenced, its work told to stop by
    /// `work_deadline`.
    fn fenced(work_deadline: MonoTime) -> Decision {
        Decision::End {
            reason: EndReason::Fenced,
            work_deadline,
        }
    }

    #[test]
    fn assignment_alone_does_not_lead_the_first_own_heartbeat_does() {
        let mut n = neli();
        assert!(n.tick(at(10_000), LIVE, false).is_empty());
        assert_eq!(n.plan(), None, "nothing to send before the assignment");
        n.assigned(1, at(10_000));
        assert!(n.is_assigned());
        assert_eq!(n.token(), None);
        assert_eq!(
            n.plan(),
            Some(Plan {
                token: None,
                generation: 1
            })
        );
        let hb = send(&mut n, 1, at(10_100), 1);
        assert_eq!(
            n.record(41, &hb, at(10_130), LIVE),
            vec![elected(42, at(10_100) + H + H / 5)]
        );
        assert_eq!(n.token(), Some(42));
        assert_eq!(n.plan().unwrap().token, Some(42));
        assert_eq!(n.next_wake(), Some(at(10_100) + H));
    }

    #[test]
    fn heartbeats_renew_from_their_send_instant_as_this_instance_recorded_it() {
        let mut n = leading_from(0);
        let hb = send(&mut n, 2, at(10_200), 1);
        assert_eq!(
            n.record(5, &hb, at(10_260), LIVE),
            vec![Decision::Renewed {
                deadline: at(10_200) + H + H / 5,
                latency: Duration::from_millis(60)
            }]
        );
        // An older one arriving late changes nothing.
        let late = send(&mut n, 3, at(10_100), 1);
        assert!(n.record(6, &late, at(10_270), LIVE).is_empty());
        // A producer retry's second copy neither.
        assert!(n.record(7, &hb, at(10_280), LIVE).is_empty());
        assert_eq!(n.token(), Some(1), "renewals keep the token");
    }

    #[test]
    fn own_heartbeats_read_back_late_are_still_known_as_its_own() {
        let mut n = neli();
        n.assigned(1, at(10_000));
        let late = send(&mut n, 1, at(10_000), 1);
        // More heartbeats while the broker is away, one every 100 ms.
        for i in 0..100 {
            send(&mut n, 2 + i, at(10_100 + i * 100), 1);
        }
        // The first comes back 20 s after it was sent: too old to lead,
        // and not a forgery that would hold the election back.
        assert!(n.record(1, &late, at(30_000), LIVE).is_empty());
        let hb = send(&mut n, 200, at(30_000), 1);
        assert_elected(&n.record(2, &hb, at(30_010), LIVE), 3);
    }

    #[test]
    fn the_reader_start_counts_as_a_claim_for_one_quiet_period() {
        let mut n = Neli::new(GROUP, ME, H, DRIFT, None);
        n.assigned(1, at(0));
        let hb = send(&mut n, 1, at(0), 1);
        assert!(
            n.record(0, &hb, at(10), LIVE).is_empty(),
            "not reading yet: records may be unseen"
        );
        n.reading_from(at(100));
        let hb = send(&mut n, 2, at(200), 1);
        assert!(n.record(1, &hb, at(210), LIVE).is_empty());
        let t = at(100) + quiet();
        let hb = send(&mut n, 3, t - Duration::from_millis(20), 1);
        assert!(n
            .record(2, &hb, t - Duration::from_millis(1), LIVE)
            .is_empty());
        let hb = send(&mut n, 4, t, 1);
        assert_elected(&n.record(3, &hb, t, LIVE), 4);
    }

    /// Hole 1: the old holder, cut off from the group coordinator only,
    /// keeps renewing; the new assignee reads those renewals before its own
    /// heartbeat and waits until they stop for longer than a term.
    #[test]
    fn a_new_assignee_waits_until_the_old_holders_heartbeats_have_been_quiet_for_a_term() {
        let mut n = neli();
        n.assigned(1, at(10_000));
        // The old holder's heartbeats, with its token, until 12 s.
        for (i, t) in [10_000u64, 11_000, 12_000].iter().enumerate() {
            assert!(n
                .record(100 + i as i64, &foreign(8, 4, Some(50)), at(*t), LIVE)
                .is_empty());
        }
        // Own heartbeats come back, but the old holder's term may last
        // until 12 s + its H + grace.
        let last = at(12_000);
        let hb = send(&mut n, 1, at(12_050), 1);
        assert!(n.record(110, &hb, at(12_060), LIVE).is_empty());
        let hb = send(&mut n, 2, last + quiet() - Duration::from_millis(50), 1);
        assert!(
            n.record(111, &hb, last + quiet() - Duration::from_millis(1), LIVE)
                .is_empty(),
            "one millisecond too early"
        );
        let hb = send(&mut n, 3, last + quiet(), 1);
        assert_elected(&n.record(112, &hb, last + quiet(), LIVE), 113);
    }

    #[test]
    fn tokenless_heartbeats_of_another_holder_also_hold_elections_back() {
        // A holder waiting for its first heartbeat elects on it: its
        // tokenless record may start a term, so it counts.
        let mut n = neli();
        n.assigned(1, at(10_000));
        n.record(100, &foreign(8, 4, None), at(10_000), LIVE);
        let hb = send(&mut n, 1, at(10_100), 1);
        assert!(n.record(101, &hb, at(10_110), LIVE).is_empty());
    }

    #[test]
    fn a_longer_heartbeat_timeout_of_the_writer_lengthens_the_quiet_period() {
        let n = neli();
        assert_eq!(n.quiet_for(Duration::from_secs(1)), quiet());
        assert!(n.quiet_for(Duration::from_secs(10)) > Duration::from_secs(12));
        // No overflow whatever a record claims.
        let _ = n.quiet_for(Duration::MAX);
    }

    #[test]
    fn a_released_heartbeat_ends_that_instances_claim_at_once() {
        let mut n = neli();
        n.assigned(1, at(10_000));
        n.record(100, &foreign(8, 4, Some(50)), at(10_000), LIVE);
        n.record(101, &foreign(9, 4, None), at(10_000), LIVE);
        let released = Heartbeat {
            released: true,
            ..foreign(8, 4, Some(50))
        };
        n.record(102, &released, at(10_050), LIVE);
        let hb = send(&mut n, 1, at(10_100), 1);
        assert!(
            n.record(103, &hb, at(10_110), LIVE).is_empty(),
            "9 still claims"
        );
        let released = Heartbeat {
            released: true,
            ..foreign(9, 4, None)
        };
        n.record(104, &released, at(10_150), LIVE);
        let hb = send(&mut n, 2, at(10_200), 1);
        assert_elected(&n.record(105, &hb, at(10_210), LIVE), 106);
        // A claim after the release counts again.
        n.record(106, &foreign(8, 6, None), at(10_300), LIVE);
        assert!(!n.is_quiet(at(10_400)));
    }

    #[test]
    fn fenced_after_the_heartbeat_timeout_and_resumed_with_a_higher_token() {
        let mut n = leading_from(9);
        assert!(n.tick(at(14_999), LIVE, false).is_empty());
        assert_eq!(
            n.tick(at(15_000), LIVE, false),
            vec![fenced(at(10_000) + H + H / 5)]
        );
        assert!(n.is_assigned(), "a fenced leader keeps the assignment");
        assert_eq!(n.token(), None);
        assert!(n.tick(at(15_500), LIVE, false).is_empty(), "fenced once");
        // A heartbeat sent before the fence and older than the timeout
        // does not resume.
        let old = send(&mut n, 2, at(11_000), 1);
        assert!(n.record(20, &old, at(16_500), LIVE).is_empty());
        // A fresh one does, with its own offset as the token.
        let hb = send(&mut n, 3, at(16_600), 1);
        assert_eq!(
            n.record(30, &hb, at(16_650), LIVE),
            vec![elected(31, at(16_600) + H + H / 5)]
        );
    }

    #[test]
    fn heartbeats_of_another_assignment_or_group_do_not_count() {
        let mut n = neli();
        n.assigned(2, at(10_000));
        let earlier = send(&mut n, 1, at(10_000), 1);
        assert!(n.record(3, &earlier, at(10_010), LIVE).is_empty());
        n.unassigned();
        let hb = send(&mut n, 2, at(10_020), 2);
        assert!(n.record(4, &hb, at(10_030), LIVE).is_empty());
        // Another group sharing the topic neither leads here nor holds
        // elections back.
        n.assigned(3, at(10_040));
        let other = Heartbeat {
            group: Some("payroll".into()),
            ..foreign(8, 9, Some(1))
        };
        assert!(n.record(5, &other, at(10_050), LIVE).is_empty());
        let hb = send(&mut n, 3, at(10_060), 3);
        assert_elected(&n.record(6, &hb, at(10_070), LIVE), 7);
    }

    /// Hole 1, the other half: the leader stops at once when another
    /// holder's heartbeat follows its election.
    #[test]
    fn a_leader_ends_its_term_at_once_on_another_holders_heartbeat_after_its_election() {
        let mut n = leading_from(9);
        // Before its election offset: older than its term, ignored.
        assert!(n.record(9, &foreign(8, 5, None), at(10_020), LIVE).len() <= 1);
        let mut n = leading_from(9);
        assert_eq!(
            n.record(12, &foreign(8, 6, None), at(10_030), LIVE),
            vec![
                Decision::End {
                    reason: EndReason::Superseded {
                        by: Some("c8".into())
                    },
                    work_deadline: at(10_030)
                },
                Decision::Rejoin {
                    why: "a later generation of the consumer group holds partition 0"
                }
            ]
        );
        assert_eq!(n.plan(), None, "no more heartbeats on a stale assignment");
        // The same generation (or an unknown one) supersedes too.
        for theirs in [Some(5), None] {
            let mut n = leading_from(9);
            let hb = Heartbeat {
                group_generation: theirs,
                ..foreign(8, 0, None)
            };
            assert!(matches!(
                n.record(12, &hb, at(10_030), LIVE).as_slice(),
                [Decision::End { .. }]
            ));
            assert!(
                n.plan().is_some(),
                "not known to be stale: still heartbeats"
            );
        }
    }

    #[test]
    fn a_stale_holders_heartbeat_from_an_older_generation_does_not_depose_the_leader() {
        let mut n = neli();
        let token = leader(&mut n, 10_000, 9);
        assert!(n
            .record(12, &foreign(8, 4, Some(3)), at(10_030), LIVE)
            .is_empty());
        assert_eq!(n.token(), Some(token));
    }

    /// Hole 6: a stray or late record of another instance while not
    /// leading only delays the election by the quiet period.
    #[test]
    fn a_foreign_token_while_not_leading_means_wait_for_quiet_not_a_permanent_block() {
        let mut n = neli();
        n.assigned(1, at(10_000));
        n.record(100, &foreign(8, 4, Some(99)), at(10_000), LIVE);
        let hb = send(&mut n, 1, at(10_100), 1);
        assert!(n.record(101, &hb, at(10_110), LIVE).is_empty());
        let t = at(10_000) + quiet();
        let hb = send(&mut n, 2, t, 1);
        assert_elected(&n.record(102, &hb, t, LIVE), 103);
    }

    /// Hole 1, bounded by what librdkafka exposes: a leader whose group
    /// coordinator has not answered for H ends its term, whatever its own
    /// heartbeats say, and does not lead again before it answers.
    #[test]
    fn a_silent_group_coordinator_fences_the_leader_before_its_session_can_expire() {
        let mut n = neli();
        n.membership(at(9_990), Some(Duration::from_millis(100)));
        leader(&mut n, 10_000, 9);
        // Heartbeats keep coming back; the coordinator answered last at
        // 11 s (statistics at 11.2 s, silent for 200 ms).
        n.membership(at(11_200), Some(Duration::from_millis(200)));
        for (seq, t) in [(2, 12_000u64), (3, 15_000)] {
            let hb = send(&mut n, seq, at(t), 1);
            assert!(matches!(
                n.record(seq as i64 + 10, &hb, at(t + 10), LIVE).as_slice(),
                [Decision::Renewed { .. }]
            ));
        }
        // Its connection goes down: no new contact.
        n.membership(at(15_500), Some(Duration::MAX));
        assert_eq!(n.next_wake(), Some(at(11_000) + H));
        assert!(n.tick(at(15_999), LIVE, false).is_empty());
        assert_eq!(
            n.tick(at(16_000), LIVE, false),
            vec![fenced(at(15_000) + H + H / 5)]
        );
        let hb = send(&mut n, 4, at(16_100), 1);
        assert!(
            n.record(20, &hb, at(16_110), LIVE).is_empty(),
            "not before it answers"
        );
        // A rebalance holding this member's join counts as contact.
        n.membership(at(16_200), None);
        let hb = send(&mut n, 5, at(16_300), 1);
        assert_elected(&n.record(21, &hb, at(16_310), LIVE), 22);
    }

    /// Hole 2: after a pause or suspend longer than the session can be
    /// trusted to survive, the assignment is never used again, even if an
    /// own heartbeat then comes back.
    #[test]
    fn after_a_long_gap_the_assignment_is_given_up_not_resumed() {
        let mut n = leading_from(9);
        let woke = at(10_000) + H * 3;
        let d = n.gap(woke);
        assert_eq!(
            d,
            vec![
                fenced(at(10_000) + H + H / 5),
                Decision::Rejoin {
                    why: "a pause or suspend longer than the session can be trusted to survive"
                }
            ]
        );
        assert_eq!(n.plan(), None);
        let hb = send(&mut n, 2, woke, 1);
        assert!(n
            .record(20, &hb, woke + Duration::from_millis(5), LIVE)
            .is_empty());
        // A new assignment is usable again.
        n.unassigned();
        n.assigned(2, woke + Duration::from_secs(1));
        assert!(n.plan().is_some());
    }

    /// Hole 7: a holder that cannot lead lets go after 2 H.
    #[test]
    fn a_holder_whose_heartbeats_do_not_come_back_lets_go_after_two_heartbeat_timeouts() {
        let mut n = neli();
        n.assigned(1, at(10_000));
        assert_eq!(n.next_wake(), Some(at(10_000) + H * 2));
        assert!(n.tick(at(19_999), LIVE, false).is_empty());
        assert_eq!(
            n.tick(at(20_000), LIVE, false),
            vec![Decision::Rejoin {
                why: "its own heartbeats have not come back in time for two heartbeat timeouts"
            }]
        );
        assert_eq!(n.plan(), None);
        assert!(n.tick(at(30_000), LIVE, false).is_empty(), "once");
    }

    #[test]
    fn pulses_too_far_apart_to_lead_let_go_too() {
        // Each poll sends a heartbeat that is read back on the next poll,
        // 1.5 H later: too old to lead, so never fresh.
        let mut n = Neli::new(GROUP, ME, H, DRIFT, Some(Duration::from_secs(60)));
        n.reading_from(at(0));
        n.assigned(1, at(10_000));
        let mut t = 10_000;
        let mut rejoined = false;
        for seq in 1..10 {
            let hb = send(&mut n, seq, at(t), 1);
            t += 7_500;
            assert!(n.record(seq as i64, &hb, at(t), LIVE).is_empty());
            rejoined |= !n.tick(at(t), LIVE, false).is_empty();
        }
        assert!(rejoined);
    }

    #[test]
    fn a_holder_that_keeps_getting_its_heartbeats_back_while_waiting_for_quiet_stays() {
        let mut n = neli();
        n.assigned(1, at(10_000));
        for i in 0..30u64 {
            let t = 10_000 + i * 500;
            n.record(1000 + 2 * i as i64, &foreign(8, 4, None), at(t), LIVE);
            let hb = send(&mut n, i + 1, at(t), 1);
            assert!(n
                .record(1001 + 2 * i as i64, &hb, at(t + 10), LIVE)
                .is_empty());
            assert!(n.tick(at(t + 10), LIVE, false).is_empty());
        }
    }

    /// Hole 4: the topic was recreated (or lost its data): offsets restart.
    #[test]
    fn an_offset_below_one_already_read_is_reported() {
        let mut n = leading_from(500);
        assert_eq!(n.offset(501), None);
        assert_eq!(n.offset(3), Some(regressed(502, 4)));
        let hb = send(&mut n, 2, at(10_100), 1);
        assert_eq!(n.record(0, &hb, at(10_110), LIVE), vec![regressed(502, 1)]);
    }

    #[test]
    fn an_own_heartbeat_landing_at_or_below_an_offset_already_read_is_reported() {
        let mut n = leading_from(330);
        send(&mut n, 2, at(10_100), 1);
        assert_eq!(n.delivered(2, 331), None);
        send(&mut n, 3, at(10_200), 1);
        assert_eq!(n.delivered(3, 20), Some(regressed(331, 21)));
        assert_eq!(n.delivered(99, 0), None, "not sent by this instance");
    }

    /// Hole 4, masked: the topic was recreated and refilled past where the
    /// reader stood before it read again, so no offset it read went back;
    /// the next term's token would still not rise.
    #[test]
    fn a_token_not_above_one_already_seen_is_reported_not_handed_out() {
        let mut n = neli();
        n.assigned(1, at(10_000));
        // Another leader's heartbeat with token 500, at offset 520.
        n.record(520, &foreign(8, 4, Some(500)), at(10_000), LIVE);
        n.unassigned();
        n.assigned(2, at(20_000));
        // The reader goes on at 521 in the new topic, where this
        // candidate's own heartbeat got offset 521: token 522 > 500, fine.
        let hb = send(&mut n, 1, at(20_000), 2);
        assert_elected(&n.record(521, &hb, at(20_010), LIVE), 522);
        // Its own earlier token counts too.
        let mut n = leading_from(700);
        n.unassigned();
        n.assigned(2, at(20_000));
        n.highest_offset = Some(300); // as if the offsets read had not gone back
        let hb = send(&mut n, 2, at(20_000), 2);
        assert_eq!(
            n.record(400, &hb, at(20_010), LIVE),
            vec![regressed(701, 401)]
        );
    }

    /// Hole 5: records forged with a plain producer.
    #[test]
    fn records_forged_in_its_own_name_renew_nothing_and_hold_elections_back() {
        let mut n = leading_from(9);
        let real = send(&mut n, 2, at(10_100), 1);
        // A sequence number never sent, and a send instant far in the future.
        for forged in [
            Heartbeat {
                seq: 99,
                ..real.clone()
            },
            Heartbeat {
                sent_mono_ns: at(1_000_000_000).as_nanos(),
                ..real.clone()
            },
        ] {
            assert!(n.record(20, &forged, at(10_150), LIVE).is_empty());
        }
        assert_eq!(
            n.next_wake(),
            Some(at(10_000) + H),
            "the fence did not move"
        );
        assert!(!n.is_quiet(at(10_200)), "someone writes in its name");
    }

    #[test]
    fn an_impossible_token_holds_elections_back_and_deposes_nobody() {
        let mut n = neli();
        let token = leader(&mut n, 10_000, 9);
        assert!(n
            .record(12, &foreign(8, 6, Some(u64::MAX)), at(10_030), LIVE)
            .is_empty());
        assert_eq!(n.token(), Some(token));
        let mut n = neli();
        n.assigned(1, at(10_000));
        n.record(12, &foreign(8, 6, Some(13)), at(10_000), LIVE);
        let hb = send(&mut n, 1, at(10_100), 1);
        assert!(n.record(13, &hb, at(10_110), LIVE).is_empty());
    }

    #[test]
    fn a_flood_of_instances_is_lumped_together_and_still_holds_elections_back() {
        let mut n = neli();
        n.assigned(1, at(10_000));
        for i in 0..1000u64 {
            n.record(
                100 + i as i64,
                &foreign(1000 + i, 4, None),
                at(10_000),
                LIVE,
            );
        }
        assert!(n.claims.len() <= MAX_TRACKED + 1);
        // Releases of the lumped ones free nothing.
        for i in 0..1000u64 {
            let r = Heartbeat {
                released: true,
                ..foreign(1000 + i, 4, None)
            };
            n.record(2000 + i as i64, &r, at(10_010), LIVE);
        }
        assert!(!n.is_quiet(at(10_020)));
    }

    #[test]
    fn liveness_ends_the_term_and_blocks_the_next() {
        let l = Duration::from_secs(2);
        let mut n = Neli::new(GROUP, ME, H, DRIFT, Some(l));
        n.reading_from(at(0));
        n.assigned(1, at(10_000));
        let hb = send(&mut n, 1, at(10_000), 1);
        assert!(
            n.record(0, &hb, at(10_010), l).is_empty(),
            "no term while the application is silent"
        );
        let hb = send(&mut n, 2, at(10_100), 1);
        n.record(1, &hb, at(10_110), LIVE);
        assert!(n.tick(at(11_000), Duration::from_secs(1), false).is_empty());
        assert_eq!(
            n.tick(at(11_100), l, false),
            vec![Decision::End {
                reason: EndReason::LivenessLost,
                work_deadline: at(10_100) + H + H / 5
            }]
        );
    }

    #[test]
    fn a_fence_caused_by_missing_pulses_is_reported_as_liveness_lost() {
        let mut n = Neli::new(GROUP, ME, H, DRIFT, Some(Duration::from_secs(30)));
        n.reading_from(at(0));
        leader(&mut n, 10_000, 0);
        let d = n.tick(at(15_000), Duration::from_secs(5), true);
        assert!(matches!(
            d.as_slice(),
            [Decision::End {
                reason: EndReason::LivenessLost,
                ..
            }]
        ));
        // The statistics stop with the polls too.
        let mut n = Neli::new(GROUP, ME, H, DRIFT, Some(Duration::from_secs(30)));
        n.reading_from(at(0));
        n.membership(at(9_990), Some(Duration::ZERO));
        leader(&mut n, 10_000, 0);
        let hb = send(&mut n, 2, at(14_000), 1);
        n.record(1, &hb, at(14_010), LIVE);
        let d = n.tick(at(14_990), Duration::from_secs(5), true);
        assert!(matches!(
            d.as_slice(),
            [Decision::End {
                reason: EndReason::LivenessLost,
                ..
            }]
        ));
    }

    #[test]
    fn standing_down_keeps_the_assignment_but_never_leads_or_heartbeats_on_it() {
        let mut n = leading_from(0);
        n.stand_down();
        assert_eq!(n.token(), None);
        assert!(n.is_assigned());
        assert_eq!(n.plan(), None);
        let hb = send(&mut n, 2, at(10_100), 1);
        assert!(n.record(1, &hb, at(10_110), LIVE).is_empty());
    }

    mod pacing {
        use super::*;

        const MIN_POLL: Duration = Duration::from_millis(100);
        const REJOIN: Duration = Duration::from_secs(15);

        fn pacing(coupled: bool) -> Pacing {
            Pacing::new(at(0), MIN_POLL, REJOIN, coupled)
        }

        #[test]
        fn polls_are_a_minimum_interval_apart_and_never_overlap() {
            let mut p = pacing(false);
            let pulse = at(0);
            assert!(p.poll(at(0), pulse), "the first poll is due at once");
            assert!(!p.poll(at(500), pulse), "not while one is in flight");
            p.polled();
            assert!(p.poll(at(500), pulse), "the interval had passed");
            p.polled();
            assert!(!p.poll(at(599), pulse));
            assert!(p.poll(at(600), pulse));
        }

        #[test]
        fn without_coupling_pulses_do_not_matter() {
            let mut p = pacing(false);
            let never = MonoTime::from_nanos(0);
            assert!(!p.starved(never));
            assert_eq!(p.silence(at(60_000), never), Duration::ZERO);
            for i in 0..5 {
                assert!(p.poll(at(i * 100), never));
                p.polled();
            }
        }

        #[test]
        fn with_coupling_a_poll_needs_a_pulse_since_the_last_one() {
            let mut p = pacing(true);
            assert!(p.poll(at(0), at(0)));
            p.polled();
            assert!(p.starved(at(0)), "no pulse since that poll");
            assert!(!p.poll(at(100), at(0)));
            // The interval restarts even for a poll held back.
            assert!(!p.poll(at(150), at(120)));
            assert!(!p.starved(at(120)));
            assert!(p.poll(at(200), at(120)));
            p.polled();
            assert!(p.starved(at(120)));
            assert_eq!(p.silence(at(1_120), at(120)), Duration::from_secs(1));
        }

        #[test]
        fn a_poll_that_never_reached_the_thread_does_not_block_the_next() {
            let mut p = pacing(false);
            assert!(p.poll(at(0), at(0)));
            p.polled();
            assert!(p.poll(at(100), at(0)));
        }

        #[test]
        fn a_candidate_that_left_rejoins_once_after_the_delay_and_leaves_once_meanwhile() {
            let mut p = pacing(false);
            assert!(!p.may_leave(false), "nothing to give up");
            assert!(p.may_leave(true));
            p.left(at(1_000));
            assert!(!p.may_leave(true), "not twice before the rejoin");
            assert_eq!(p.next_wake(at(1_000)), at(1_100), "the next poll first");
            assert_eq!(p.next_wake(at(15_950)), at(16_000), "then the rejoin");
            assert!(!p.rejoin(at(15_999)));
            assert!(p.rejoin(at(16_000)));
            assert!(!p.rejoin(at(16_001)), "once");
            assert!(p.may_leave(true));
            assert_eq!(p.next_wake(at(16_000)), at(16_100));
        }
    }
}
