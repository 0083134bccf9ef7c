//! How a term gives the lease back: the drain that lets the work stop,
//! then the release that clears this node from the record (reserved for a
//! successor on a transfer), retried until it is done, the record proves
//! not to be ours, or the lease would have lapsed anyway. A shutdown ends
//! here too.

use std::time::Duration;

use super::{Action, EndReason, Machine, OpKind, ReadPurpose, State, WritePurpose};
use crate::clock::{MonoTime, Now};
use crate::error::StoreError;
use crate::record::{LeaseRecord, Metadata, Version, Versioned, DUTY_PREFIX, TRANSFER_TO_KEY};
use crate::store::CasOutcome;

/// What a node does once its lease is given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum After {
    /// Stand again as a candidate.
    Stand,
    /// Stop for good (a shutdown).
    Stop,
}

/// Clearing this node's holder from the record, retried until it is done,
/// the record turns out not to be ours, or `until` passes.
#[derive(Clone, Debug, Hash)]
pub(super) struct Release {
    /// What follows: stand again, or stop.
    pub(super) then: After,
    /// Only a record with this node as holder and this token is ours to
    /// clear; anything else is left alone.
    pub(super) token: u64,
    /// The term written into the released record.
    pub(super) term: Duration,
    /// The candidate the released record reserves the lease for.
    pub(super) successor: Option<String>,
    /// The successor asked for the lease in the record (a request, not
    /// this node's own transfer): it is reserved for only while the
    /// record still names it (a candidate that withdrew is leaving).
    pub(super) requested: bool,
    /// Reserved metadata the release carries forward to the next term (a
    /// periodic duty's last run).
    pub(super) carried: Metadata,
    /// The version to clear; `None` until a verifying read finds it.
    pub(super) version: Option<Version>,
    /// The next attempt, after a failed one.
    pub(super) retry_at: MonoTime,
    /// When to give up (the lease then lapses on its own).
    pub(super) until: MonoTime,
}

/// The reserved metadata a release carries forward to the next term: what
/// must survive a hand-over (a periodic duty's last run), not the leader's
/// own address or a transfer's successor.
pub(super) fn carried_forward(metadata: &Metadata) -> Metadata {
    metadata
        .iter()
        .filter(|(k, _)| k.starts_with(DUTY_PREFIX))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

impl Machine {
    pub(super) fn shutdown(&mut self, now: Now, out: &mut Vec<Action>) {
        match &mut self.state {
            State::Candidate => {
                // A write in flight may apply after this node has gone and
                // leave the lease held for a whole crash fail-over: wait for
                // it, and release what it wrote.
                let in_flight = match self.op.as_ref().map(|p| &p.kind) {
                    Some(OpKind::Write(purpose, record)) if *purpose != WritePurpose::Request => {
                        Some((record.token, record.term))
                    }
                    _ => None,
                };
                match in_flight {
                    Some((token, term)) => {
                        self.state = State::Releasing(Release {
                            then: After::Stop,
                            token,
                            term,
                            successor: None,
                            requested: false,
                            carried: Metadata::new(),
                            version: None,
                            retry_at: now.mono,
                            until: now.mono + self.timing.op_timeout * 2,
                        });
                    }
                    None if self.begin_withdraw(now) => {}
                    None => self.stop(out),
                }
            }
            State::Leader(_) => self.begin_drain(EndReason::Shutdown, After::Stop, out),
            State::Draining { then, .. } => *then = After::Stop,
            State::Releasing(r) => r.then = After::Stop,
            State::Withdrawing(_) | State::Stopped => {}
        }
    }

    pub(super) fn advance_draining(&mut self, now: Now, out: &mut Vec<Action>) {
        let State::Draining {
            lead,
            then,
            drained,
            successor,
        } = &self.state
        else {
            return;
        };
        if !(*drained || now.mono >= lead.deadline) || self.op.is_some() {
            return;
        }
        // Keep trying while the lease is still ours to give up, and at
        // least twice.
        let until = lead.deadline.max(now.mono + self.timing.op_timeout * 2);
        let requested = successor.is_some() && lead.record.transfer_to() == successor.as_deref();
        self.state = State::Releasing(Release {
            then: *then,
            token: lead.token,
            term: lead.record.term,
            successor: successor.clone(),
            requested,
            carried: carried_forward(&lead.record.metadata),
            version: Some(lead.version),
            retry_at: now.mono,
            until,
        });
        self.advance_releasing(now, out);
    }

    /// When a release may go out: once asked to, and once the ended term's
    /// work is gone; never later than the point of giving up.
    pub(super) fn release_at(&self, r: &Release) -> MonoTime {
        r.retry_at
            .max(self.stand.work_gone_at(r.retry_at))
            .min(r.until)
    }

    pub(super) fn advance_releasing(&mut self, now: Now, out: &mut Vec<Action>) {
        let State::Releasing(r) = &self.state else {
            return;
        };
        if self.op.is_some() || now.mono < self.release_at(r) {
            return;
        }
        if now.mono >= r.until {
            let then = r.then;
            return self.finish_release(now, then, out);
        }
        let deadline = (now.mono + self.timing.op_timeout).min(r.until);
        match r.version {
            Some(version) => {
                let mut metadata = r.carried.clone();
                if let Some(to) = &r.successor {
                    metadata.insert(TRANSFER_TO_KEY, to.clone());
                    if metadata.validate().is_err() {
                        // The duties' last runs and the successor do not
                        // fit in one record: a record over the limit is one
                        // every reader refuses as corrupt and no candidate
                        // overwrites (the group would be lost for good).
                        // The successor is kept; the duties' periods start
                        // again with the next leader.
                        metadata = Metadata::new().with(TRANSFER_TO_KEY, to.clone());
                    }
                }
                let record = LeaseRecord {
                    holder: None,
                    token: r.token,
                    term: r.term,
                    renewed_at: now.wall,
                    // A reservation lasts one term; a plain release ends now.
                    expires_at: if r.successor.is_some() {
                        now.wall + r.term
                    } else {
                        now.wall
                    },
                    metadata,
                };
                self.write(
                    WritePurpose::Release,
                    Some(version),
                    record,
                    now,
                    deadline,
                    out,
                );
            }
            None => self.read(ReadPurpose::Verify, now, deadline, out),
        }
    }

    /// A write's reply while releasing: the release itself, or a write that
    /// was in flight when shutdown began.
    pub(super) fn on_release_write(
        &mut self,
        now: Now,
        purpose: WritePurpose,
        result: Result<CasOutcome, StoreError>,
        out: &mut Vec<Action>,
    ) {
        let retry = self.leader_retry();
        let State::Releasing(r) = &mut self.state else {
            return;
        };
        match result {
            Ok(CasOutcome::Applied(_)) if purpose == WritePurpose::Release => {
                let then = r.then;
                self.finish_release(now, then, out);
            }
            Ok(CasOutcome::Applied(version)) => {
                // A write in flight at shutdown applied: release it.
                r.version = Some(version);
                r.retry_at = now.mono;
            }
            Ok(CasOutcome::Conflict) => {
                // Not the version we thought: is the record still ours?
                r.version = None;
                r.retry_at = now.mono;
            }
            Err(_) => {
                r.version = None;
                r.retry_at = now.mono + retry;
            }
        }
    }

    pub(super) fn on_release_verify(
        &mut self,
        now: Now,
        result: Result<Option<Versioned>, StoreError>,
        out: &mut Vec<Action>,
    ) {
        let retry = self.leader_retry();
        let mine = self.me.clone();
        // A successor that asked in the record is reserved for only while
        // the record still asks for it: one that took its request back is
        // leaving (a plain release), and a request of a higher priority
        // that replaced it, which this leader honours, is the successor now.
        let asked = match &result {
            Ok(Some(v)) => v
                .record
                .transfer_to()
                .filter(|_| self.honours(&v.record))
                .map(str::to_owned),
            _ => None,
        };
        let State::Releasing(r) = &mut self.state else {
            return;
        };
        match result {
            Ok(Some(v)) if v.record.holder.as_ref() == Some(&mine) && v.record.token == r.token => {
                r.version = Some(v.version);
                r.retry_at = now.mono;
                if r.requested && v.record.transfer_to() != r.successor.as_deref() {
                    r.successor = asked;
                }
            }
            Ok(current) => {
                // Released already, or taken by another: nothing of ours
                // to clear.
                let then = r.then;
                self.finish_release(now, then, out);
                if then == After::Stand {
                    self.observe(now, current, out);
                }
            }
            Err(_) => r.retry_at = now.mono + retry,
        }
    }

    fn finish_release(&mut self, now: Now, then: After, out: &mut Vec<Action>) {
        match then {
            After::Stop => self.stop(out),
            After::Stand => {
                self.state = State::Candidate;
                self.reported = None;
                self.observed = None;
                // Give polling peers one full poll period to see the release
                // before this node stands again.
                let hold = self.timing.retry_interval + self.timing.retry_jitter;
                self.stand.hold_off_until = now.mono + hold;
                self.stand.next_read = self.stand.hold_off_until;
            }
        }
    }
}
