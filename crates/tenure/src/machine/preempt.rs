//! The preemption room: a waiting candidate of higher priority than the
//! leader asks it to hand over, and withdraws its request when it stops.
//!
//! The request is the one an operator makes with `tenure release --to`:
//! the leader's own record rewritten with holder, token and times kept,
//! naming this candidate and its priority, and marked as a rewrite of the
//! leader's own write ([`LeaseRecord::with_request`]). It is a hint,
//! never authority: the leader reads its record, honours the request only
//! if the priority named is above its own, and hands over through the
//! transfer path. The mark makes the request count as no renewal for every
//! candidate that saw the version it rewrote, so requests written into a
//! dead leader's record do not delay its takeover.
//!
//! The decisions, all on explicit time and replies like the rest of the
//! machine:
//!
//! * **When to ask.** Only once this candidate has stood for the delay
//!   under one lower-priority term, and again only a delay (and a term at
//!   least) after each look: a candidate that flaps never takes over by
//!   preemption, equal priorities never preempt, and a declined or lost
//!   request is never repeated in a loop.
//! * **Whether the leader lives.** A look reads the record, waits a renewal
//!   interval and an operation timeout, and reads again: only a record the
//!   holder wrote again in between gets a request. Another candidate's
//!   request changes the version but names the same holder's write
//!   ([`Versioned::rewrite_base`]), so it is no sign of life; the record's
//!   times are not compared (a holder whose wall clock stands still still
//!   renews).
//! * **Whom.** The leader a read or the change feed showed, never one of
//!   this candidate's own id (an earlier process of its own); only a read
//!   makes it forget a request it made (a forged feed delivery cannot make
//!   it stop without withdrawing).
//! * **Who may ask.** A candidate whose liveness pulse lapsed does not (it
//!   could not take the lease); an operator's request, or another
//!   candidate's of at least this priority, stays.
//! * **Withdrawing.** A candidate that stops with its request still in the
//!   record takes it out (bounded, best effort): a request nobody takes up
//!   costs the reservation, a term with no leader.

use std::time::Duration;

use super::{Action, Machine, ReadPurpose, State, WritePurpose};
use crate::clock::{MonoTime, Now};
use crate::error::StoreError;
use crate::record::{
    Holder, LeaseRecord, Version, Versioned, TRANSFER_PRIORITY_KEY, TRANSFER_TO_KEY,
};
use crate::store::CasOutcome;

/// How many times a request is written again after a conflict in one look
/// (the leader renews every third of its term, so the version read may be
/// gone), and how many times a withdrawal is.
const ATTEMPTS: u8 = 3;

/// A term: its holder and fencing token.
type TermKey = (Holder, u64);

/// A candidate's preemption state.
#[derive(Clone, Debug, Hash)]
pub(super) struct Preempt {
    /// How long this candidate stands under one lower-priority term before
    /// it asks.
    delay: Duration,
    /// The lower-priority term this candidate waits under.
    under: Option<TermKey>,
    /// When the next look begins.
    due: MonoTime,
    /// A look in progress.
    look: Option<Look>,
    /// Requests written again in this look after a conflict.
    attempts: u8,
    /// The term whose record holds this candidate's request (written, or
    /// of unknown fate), until this candidate leads or the term changes.
    asked: Option<TermKey>,
    /// When the last read's reply came: a look acts only on what a read
    /// showed after it began.
    last_read: MonoTime,
}

/// A look for a renewal.
#[derive(Clone, Debug, Hash)]
struct Look {
    /// The holder's write the record stemmed from when the look began.
    base: Version,
    /// When the look ends: a live leader has renewed by then.
    until: MonoTime,
}

/// Taking this candidate's request out of the record as it stops.
#[derive(Clone, Debug, Hash)]
pub(super) struct Withdraw {
    /// The term whose record holds the request.
    from: TermKey,
    /// The record read, while it still holds the request.
    current: Option<Versioned>,
    /// Writes tried.
    attempts: u8,
    /// The next attempt.
    retry_at: MonoTime,
    /// When to give up.
    until: MonoTime,
}

impl Preempt {
    pub(super) fn new(delay: Duration, now: Now) -> Self {
        Preempt {
            delay,
            under: None,
            due: now.mono,
            look: None,
            attempts: 0,
            asked: None,
            last_read: MonoTime::from_nanos(0),
        }
    }
}

impl Machine {
    /// Turns preemption on: a candidate whose metadata publish a priority
    /// above 0 ([`PRIORITY_KEY`](crate::record::PRIORITY_KEY)) asks a
    /// leader of lower priority to hand over once it has stood for `delay`
    /// under its term, and again only a delay (a term at least) after each
    /// look; it asks only a leader seen to renew, and withdraws a request
    /// still in the record when it stops.
    pub fn preempt_after(&mut self, delay: Duration, now: Now) {
        self.preempt = Some(Preempt::new(delay, now));
    }

    /// This candidate's own priority, 0 without one.
    fn own_priority(&self) -> u32 {
        self.metadata.priority()
    }

    /// Follows the leader: a new lower-priority term starts the delay
    /// again; none stops waiting; nothing known (a failed read) changes
    /// nothing. The change feed counts here (a candidate that follows the
    /// feed does not poll), but only a read forgets a request this
    /// candidate made: a forged delivery may restart the delay, never make
    /// it leave its request behind when it stops.
    fn track_leader(&mut self, now: Now) {
        let mine = self.own_priority();
        let Some(o) = self.observed.as_ref() else {
            return;
        };
        let confirmed = o.confirmed;
        let lower = o
            .current
            .as_ref()
            .map(|v| &v.record)
            .filter(|r| r.holder_id().is_some_and(|id| id != self.me.id) && r.priority() < mine)
            .and_then(|r| Some((r.holder.clone()?, r.token)));
        let Some(p) = &mut self.preempt else {
            return;
        };
        if p.under != lower {
            if confirmed && p.asked.is_some() && p.asked != lower {
                p.asked = None;
            }
            p.under = lower;
            p.look = None;
            p.attempts = 0;
            p.due = now.mono + p.delay;
        }
    }

    /// A read's reply came at `now` (a look may act on it).
    pub(super) fn preempt_read_done(&mut self, now: Now) {
        if let Some(p) = &mut self.preempt {
            p.last_read = now.mono;
        }
    }

    /// This candidate leads: nothing of its own to ask or withdraw.
    pub(super) fn preempt_elected(&mut self) {
        if let Some(p) = &mut self.preempt {
            p.under = None;
            p.look = None;
            p.asked = None;
        }
    }

    /// When a waiting candidate's preemption next needs a tick, if ever.
    pub(super) fn preempt_wake(&self) -> Option<MonoTime> {
        let p = self.preempt.as_ref()?;
        p.under.as_ref()?;
        Some(p.look.as_ref().map_or(p.due, |l| l.until))
    }

    /// The look's next step, for a waiting candidate with no operation in
    /// flight that may stand; `true` if it started an operation.
    pub(super) fn advance_preempt(&mut self, now: Now, out: &mut Vec<Action>) -> bool {
        self.track_leader(now);
        let Some(p) = &self.preempt else {
            return false;
        };
        if p.under.is_none() || now.mono < p.due {
            return false;
        }
        let since = p.look.as_ref().map_or(p.due, |l| l.until);
        if now.mono < since {
            return false;
        }
        if p.last_read < since {
            // Act only on what a read shows from here on.
            let deadline = now.mono + self.timing.op_timeout;
            self.read(ReadPurpose::Poll, now, deadline, out);
            return true;
        }
        let seen = self
            .observed
            .as_ref()
            .filter(|o| o.confirmed)
            .and_then(|o| o.current.clone())
            .filter(|v| {
                p.under.as_ref().is_some_and(|(h, t)| {
                    v.record.holder.as_ref() == Some(h) && v.record.token == *t
                })
            });
        let Some(v) = seen else {
            self.end_look(now);
            return false;
        };
        let base = v.rewrite_base();
        let Some(look) = &p.look else {
            let until = now.mono + self.timing.renew_interval + self.timing.op_timeout;
            if let Some(p) = &mut self.preempt {
                p.look = Some(Look { base, until });
            }
            return false;
        };
        if look.base == base {
            // Not renewed for a renewal interval: not a live leader (what
            // changed, if anything, was a request).
            self.end_look(now);
            return false;
        }
        match self.request_for(&v) {
            Some(record) => {
                let deadline = now.mono + self.timing.op_timeout;
                self.write(
                    WritePurpose::Request,
                    Some(v.version),
                    record,
                    now,
                    deadline,
                    out,
                );
                true
            }
            None => {
                self.end_look(now);
                false
            }
        }
    }

    /// The request to write into `v`, the leader's record, or `None` if
    /// none should be: the leader's priority is not below this
    /// candidate's, its record already names this candidate (noted as
    /// asked), holds an operator's or a higher candidate's request, or has
    /// no room for one.
    fn request_for(&mut self, v: &Versioned) -> Option<LeaseRecord> {
        let mine = self.own_priority();
        let record = &v.record;
        if record.priority() >= mine {
            return None;
        }
        if let Some(to) = record.transfer_to() {
            if to == self.me.id {
                if let Some(p) = &mut self.preempt {
                    p.asked.clone_from(&p.under);
                }
                return None;
            }
            if record
                .request_priority()
                .flatten()
                .is_none_or(|p| p >= mine)
            {
                return None;
            }
        }
        let asked = record.with_request(v.rewrite_base(), &self.me.id, Some(mine));
        // A request that cannot fit is not asked; the look ends, and the
        // next is a delay away (no busy loop).
        asked.metadata.validate().ok()?;
        Some(asked)
    }

    /// Ends the look: the next begins a delay (a term at least) from now.
    fn end_look(&mut self, now: Now) {
        let term = self.timing.term;
        if let Some(p) = &mut self.preempt {
            p.look = None;
            p.attempts = 0;
            p.due = now.mono + p.delay.max(term);
        }
    }

    /// A request's reply.
    pub(super) fn on_request(
        &mut self,
        now: Now,
        record: LeaseRecord,
        result: Result<CasOutcome, StoreError>,
        out: &mut Vec<Action>,
    ) {
        if !matches!(self.state, State::Candidate) {
            return;
        }
        match result {
            Ok(CasOutcome::Applied(version)) => {
                if let Some(p) = &mut self.preempt {
                    p.asked.clone_from(&p.under);
                }
                // What the store holds now, as a read would show it: a
                // rewrite of what this node saw, so its wait goes on.
                self.observe(now, Some(Versioned { record, version }), out);
                self.end_look(now);
            }
            Ok(CasOutcome::Conflict) => {
                let retry = self.preempt.as_mut().and_then(|p| {
                    p.attempts += 1;
                    let look = p.look.as_mut().filter(|_| p.attempts < ATTEMPTS)?;
                    // Read again and decide on what it shows.
                    look.until = now.mono;
                    Some(())
                });
                if retry.is_none() {
                    self.end_look(now);
                }
            }
            Err(e) => {
                if !e.not_applied() {
                    // It may have applied: withdraw it if this node stops.
                    if let Some(p) = &mut self.preempt {
                        p.asked.clone_from(&p.under);
                    }
                }
                self.end_look(now);
            }
        }
    }

    /// A candidate stops: withdraw its request if one may be in the
    /// record (or is being written). `false` if there is nothing to
    /// withdraw.
    pub(super) fn begin_withdraw(&mut self, now: Now) -> bool {
        let in_flight = matches!(
            self.op.as_ref().map(|p| &p.kind),
            Some(super::OpKind::Write(WritePurpose::Request, _))
        );
        let Some(p) = &self.preempt else {
            return false;
        };
        let from = match (&p.asked, in_flight) {
            (Some(asked), _) => asked.clone(),
            (None, true) => match &p.under {
                Some(under) => under.clone(),
                None => return false,
            },
            (None, false) => return false,
        };
        self.state = State::Withdrawing(Withdraw {
            from,
            current: None,
            attempts: 0,
            retry_at: now.mono,
            until: now.mono + self.timing.op_timeout * 4,
        });
        true
    }

    /// When a withdrawal next acts.
    pub(super) fn withdraw_at(w: &Withdraw) -> MonoTime {
        w.retry_at.min(w.until)
    }

    pub(super) fn advance_withdrawing(&mut self, now: Now, out: &mut Vec<Action>) {
        let State::Withdrawing(w) = &self.state else {
            return;
        };
        if self.op.is_some() || now.mono < Self::withdraw_at(w) {
            return;
        }
        if now.mono >= w.until || w.attempts >= ATTEMPTS {
            return self.stop(out);
        }
        let deadline = (now.mono + self.timing.op_timeout).min(w.until);
        match &w.current {
            Some(v) => {
                let record = match v.record.holder {
                    Some(_) => v.record.without_request(v.rewrite_base()),
                    // The leader honoured the request already and released
                    // the lease reserved for this candidate, which is
                    // leaving: a plain release, so that the others need not
                    // wait the reservation out.
                    None => {
                        let mut released = v.record.clone();
                        released.metadata.remove(TRANSFER_TO_KEY);
                        released.metadata.remove(TRANSFER_PRIORITY_KEY);
                        released.expires_at = now.wall;
                        released
                    }
                };
                let expected = Some(v.version);
                self.write(WritePurpose::Withdraw, expected, record, now, deadline, out);
            }
            // A best-effort read: deferred like a poll under load.
            None => self.read(ReadPurpose::Poll, now, deadline, out),
        }
    }

    /// A read while withdrawing: is the request still there?
    pub(super) fn on_withdraw_read(
        &mut self,
        now: Now,
        result: Result<Option<Versioned>, StoreError>,
        out: &mut Vec<Action>,
    ) {
        let retry = self.leader_retry();
        let me = self.me.id.clone();
        let State::Withdrawing(w) = &mut self.state else {
            return;
        };
        match result {
            // The request still in the leader's record, or the lease
            // already released reserved for this candidate.
            Ok(Some(v))
                if v.record.token == w.from.1
                    && v.record.transfer_to() == Some(me.as_str())
                    && v.record
                        .holder
                        .as_ref()
                        .is_none_or(|holder| *holder == w.from.0) =>
            {
                w.current = Some(v);
                w.retry_at = now.mono;
            }
            // Gone already (honoured, overwritten, the term over).
            Ok(_) => self.stop(out),
            Err(_) => w.retry_at = now.mono + retry,
        }
    }

    /// A write's reply while withdrawing: the withdrawal, or the request
    /// that was in flight when the candidate stopped.
    pub(super) fn on_withdraw_write(
        &mut self,
        now: Now,
        purpose: WritePurpose,
        result: Result<CasOutcome, StoreError>,
        out: &mut Vec<Action>,
    ) {
        let retry = self.leader_retry();
        let State::Withdrawing(w) = &mut self.state else {
            return;
        };
        if purpose == WritePurpose::Withdraw {
            w.attempts += 1;
            if let Ok(CasOutcome::Applied(_)) = result {
                return self.stop(out);
            }
        }
        // Look again at what the record holds.
        w.current = None;
        w.retry_at = match result {
            Err(_) => now.mono + retry,
            Ok(_) => now.mono,
        };
    }
}
