//! The leader's room: renewing the term, checking a conflict or a feed
//! delivery with a read, and ending the term (superseded, renewals
//! failed, resigned, transferred, shut down).

use std::time::Duration;

use super::{Action, After, EndReason, Machine, OpKind, ReadPurpose, State, WritePurpose};
use crate::clock::{MonoTime, Now, WallTime};
use crate::error::StoreError;
use crate::record::{LeaseRecord, Metadata, Version, Versioned};
use crate::store::CasOutcome;

/// What a renewal in flight writes, beside the term's record it renews
/// ([`Lead::record`], whose holder and token it keeps): the rest of the
/// record it wrote. Kept instead of a copy of the whole record, whose
/// holder id and metadata were copied (allocated, and freed when the
/// reply came) for every renewal.
#[derive(Clone, Debug, Hash)]
pub(super) struct Renewal {
    term: Duration,
    renewed_at: WallTime,
    expires_at: WallTime,
    /// The metadata written, if it is not the term's record's own.
    metadata: Option<Metadata>,
}

impl Renewal {
    /// What `written`, a renewal of the term's `record`, changes in it.
    fn of(record: &LeaseRecord, written: &LeaseRecord) -> Renewal {
        Renewal {
            term: written.term,
            renewed_at: written.renewed_at,
            expires_at: written.expires_at,
            metadata: (written.metadata != record.metadata).then(|| written.metadata.clone()),
        }
    }

    /// The term's `record` as this renewal wrote it.
    fn apply(self, record: &mut LeaseRecord) {
        record.term = self.term;
        record.renewed_at = self.renewed_at;
        record.expires_at = self.expires_at;
        if let Some(metadata) = self.metadata {
            record.metadata = metadata;
        }
    }
}

/// The record a renewal's reply is about: kept whole, or as what it
/// changed in the term's record.
pub(super) enum Written {
    Record(LeaseRecord),
    Renewal(Renewal),
}

impl Written {
    /// Makes `record`, the term's record, the one written.
    fn store_into(self, record: &mut LeaseRecord) {
        match self {
            Written::Record(written) => *record = written,
            Written::Renewal(renewal) => renewal.apply(record),
        }
    }
}

/// A term this node holds.
#[derive(Clone, Debug, Hash)]
pub(super) struct Lead {
    /// The term's fencing token, fixed for its life.
    pub(super) token: u64,
    /// The version of the term's last write known to have applied: the
    /// next renewal expects it.
    pub(super) version: Version,
    /// The record that write stored.
    pub(super) record: LeaseRecord,
    /// When the term's validity ends: only ever moved later, by a renewal
    /// counted from its send.
    pub(super) deadline: MonoTime,
    /// When the next renewal goes out.
    pub(super) next_renew: MonoTime,
    /// A renewal conflicted; a read is checking whether it was our own
    /// earlier write that applied after its reply was lost.
    pub(super) verifying: bool,
}

impl Machine {
    pub(super) fn advance_leader(&mut self, now: Now, out: &mut Vec<Action>) {
        let State::Leader(lead) = &self.state else {
            return;
        };
        let (token, deadline, version) = (lead.token, lead.deadline, lead.version);
        let (next_renew, verifying) = (lead.next_renew, lead.verifying);
        if now.mono >= deadline - self.timing.stop_grace {
            let (record, version) = (lead.record.clone(), lead.version);
            // The term's record goes with the term: a renewal still in
            // flight keeps the whole record it writes from here on.
            if let Some(pending) = self.op.as_mut() {
                if let OpKind::Renew(renewal) = &pending.kind {
                    let mut written = record.clone();
                    renewal.clone().apply(&mut written);
                    pending.kind = OpKind::Write(WritePurpose::Renew, written);
                }
            }
            self.end_term(token, EndReason::RenewalFailed, deadline, deadline, out);
            self.state = State::Candidate;
            self.observe_own(now, record, version);
            self.stand.next_read = now.mono;
            return;
        }
        if !self.is_live(now) {
            self.begin_drain(EndReason::LivenessLost, After::Stand, out);
            return self.advance_draining(now, out);
        }
        if self.op.is_some() || (now.mono < next_renew && !self.metadata_dirty) {
            return;
        }
        let op_deadline = (now.mono + self.timing.op_timeout).min(deadline);
        if verifying {
            self.read(ReadPurpose::Verify, now, op_deadline, out);
        } else {
            self.metadata_dirty = false;
            let record = self.lease_record(token, now);
            let State::Leader(lead) = &self.state else {
                return;
            };
            let renewal = Renewal::of(&lead.record, &record);
            let op = self.new_op(OpKind::Renew(renewal), now);
            out.push(Action::Cas {
                op,
                purpose: WritePurpose::Renew,
                expected: Some(version),
                record,
                deadline: op_deadline,
            });
        }
    }

    /// A renewal's reply: `written` is the record it wrote (see
    /// [`Renewal`]), sent at `sent`.
    pub(super) fn on_renew(
        &mut self,
        now: Now,
        written: Written,
        sent: MonoTime,
        result: Result<CasOutcome, StoreError>,
        out: &mut Vec<Action>,
    ) {
        // Drawn only for a failure, so that the jitter's stream moves only
        // when a retry uses it.
        let retry = match &result {
            Err(_) => self.renewal_retry(),
            Ok(_) => Duration::ZERO,
        };
        let anchor = self.anchor(sent, now);
        match &mut self.state {
            State::Leader(lead) => match result {
                Ok(CasOutcome::Applied(version)) => {
                    lead.version = version;
                    written.store_into(&mut lead.record);
                    lead.deadline = lead.deadline.max(anchor + self.timing.leader_validity);
                    lead.next_renew = sent + self.timing.renew_interval;
                    out.push(Action::Renewed {
                        token: lead.token,
                        deadline: lead.deadline,
                        latency: now.mono.saturating_since(sent),
                    });
                }
                Ok(CasOutcome::Conflict) => {
                    lead.verifying = true;
                    lead.next_renew = now.mono;
                }
                Err(_) => lead.next_renew = now.mono + retry,
            },
            // The term already ended; the release that follows verifies
            // what is stored, so only a known new version matters here.
            State::Draining { lead, .. } => {
                if let Ok(CasOutcome::Applied(version)) = result {
                    lead.version = version;
                    written.store_into(&mut lead.record);
                }
            }
            State::Candidate => match (result, written) {
                (Ok(CasOutcome::Applied(version)), Written::Record(record)) => {
                    // A renewal that outlived its term still wrote our
                    // record: a write that came back too late.
                    self.stand.own_write_failures = self.stand.own_write_failures.saturating_add(1);
                    self.observe_own(now, record, version);
                }
                // Never so: a renewal in flight is made whole when its
                // term ends (see `advance_leader`). Were it so, what was
                // written is unknown here: a write of ours that came back
                // too late, and a read to look.
                (Ok(CasOutcome::Applied(_)), Written::Renewal(_)) => {
                    self.stand.own_write_failures = self.stand.own_write_failures.saturating_add(1);
                    self.observed = None;
                    self.stand.next_read = now.mono;
                }
                _ => self.stand.next_read = now.mono,
            },
            State::Releasing(_) | State::Withdrawing(_) | State::Stopped => {}
        }
    }

    /// A renewal conflicted and this read tells whether the record is still
    /// ours (an earlier renewal applied after its reply was lost) or taken.
    pub(super) fn on_verify(
        &mut self,
        now: Now,
        token: u64,
        result: Result<Option<Versioned>, StoreError>,
        out: &mut Vec<Action>,
    ) {
        let retry = match &result {
            Err(_) => self.renewal_retry(),
            Ok(_) => Duration::ZERO,
        };
        let old_deadline = match &self.state {
            State::Leader(lead) => lead.deadline,
            _ => now.mono,
        };
        match result {
            Ok(Some(v)) if self.is_mine(&v.record) && v.record.token == token => {
                let request = v
                    .record
                    .transfer_to()
                    .filter(|_| self.honours(&v.record))
                    .map(str::to_owned);
                if let State::Leader(lead) = &mut self.state {
                    lead.version = v.version;
                    lead.record = v.record;
                    lead.verifying = false;
                    lead.next_renew = now.mono;
                }
                // An operator, or a candidate of higher priority, asked
                // this leader to hand over. A request declined is gone at
                // the next renewal, which writes this leader's own record.
                if let Some(to) = request {
                    self.transfer(to, out);
                }
            }
            Ok(current) => {
                let by = current
                    .as_ref()
                    .and_then(|v| v.record.holder_id().map(str::to_owned));
                self.end_term(
                    token,
                    EndReason::Superseded { by },
                    now.mono,
                    old_deadline,
                    out,
                );
                self.state = State::Candidate;
                self.reported = None;
                let delay = self.poll_delay();
                self.stand.next_read = now.mono + delay;
                self.observe(now, current, out);
            }
            Err(_) => {
                if let State::Leader(lead) = &mut self.state {
                    lead.next_renew = now.mono + retry;
                }
            }
        }
    }

    /// Ends a term. Its work must be gone by `work_deadline` (never after
    /// the term's own deadline); this node stands again only once that work
    /// has drained or `old_deadline` has passed, so two of its terms never
    /// overlap, even when the work is cut short because the lease was taken.
    fn end_term(
        &mut self,
        token: u64,
        reason: EndReason,
        work_deadline: MonoTime,
        old_deadline: MonoTime,
        out: &mut Vec<Action>,
    ) {
        let work_deadline = work_deadline.min(old_deadline);
        self.stand.ended = Some((token, old_deadline));
        // Renewals are over: their buffer goes (see `recycle`).
        self.spare = None;
        out.push(Action::EndTerm {
            token,
            reason,
            work_deadline,
        });
    }

    pub(super) fn begin_drain(&mut self, reason: EndReason, then: After, out: &mut Vec<Action>) {
        self.drain_to(reason, then, None, out);
    }

    fn drain_to(
        &mut self,
        reason: EndReason,
        then: After,
        successor: Option<String>,
        out: &mut Vec<Action>,
    ) {
        let State::Leader(lead) = &self.state else {
            return;
        };
        let lead = lead.clone();
        let deadline = lead.deadline;
        self.end_term(lead.token, reason, deadline, deadline, out);
        self.state = State::Draining {
            lead,
            then,
            drained: false,
            successor,
        };
    }

    /// Whether this leader honours the transfer request in `record`, its
    /// own record rewritten by someone else: an operator's (no priority
    /// given) always; a preemption only if the priority it names is above
    /// this leader's own. The request is a hint: it is this check, on a
    /// read of the leader's own record, that ends the term.
    pub(super) fn honours(&self, record: &LeaseRecord) -> bool {
        match record.request_priority() {
            None => true,
            Some(asked) => asked.is_some_and(|asked| asked > self.metadata.priority()),
        }
    }

    /// Hands the lease to `to`: drain, then a release reserved for it.
    pub(super) fn transfer(&mut self, to: String, out: &mut Vec<Action>) {
        if to == self.me.id {
            return; // Handing the lease to oneself changes nothing.
        }
        let reason = EndReason::Transferred { to: to.clone() };
        self.drain_to(reason, After::Stand, Some(to), out);
    }

    /// A record the change feed delivered while this node leads.
    pub(super) fn on_delivery_while_leading(&mut self, now: Now, current: &Versioned) {
        let State::Leader(lead) = &self.state else {
            return;
        };
        let ours = self.is_mine(&current.record) && current.record.token == lead.token;
        // Our record rewritten by someone else keeping holder and
        // token (a transfer request), or replaced by another
        // writer. A feed can be forged (a foreign publisher on the
        // channel), so neither hands over nor ends the term by
        // itself: a read decides (`on_verify`), as a renewal's
        // conflict would have.
        let request = ours && current.record.transfer_to().is_some();
        if (request || !ours) && current.version > lead.version && !lead.verifying {
            if let State::Leader(lead) = &mut self.state {
                lead.verifying = true;
                if self.op.is_none() {
                    lead.next_renew = now.mono;
                }
            }
        }
    }
}
