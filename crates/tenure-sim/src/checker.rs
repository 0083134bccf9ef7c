//! The invariant checker. It sees every term the machines announce and
//! judges them on the *real* (simulated) timeline, which no node can see.
//!
//! # Validity of a term
//!
//! A term becomes valid at its `Action::Elected` and stays valid while all of
//! these hold:
//!
//! * its holder's own monotonic clock reads before the term's deadline (as
//!   last extended by `Action::Renewed`). The holder may be paused, or even
//!   crashed, and its machine not yet aware: the clock keeps counting, and
//!   validity is judged by that clock, not by what the machine believes;
//! * if the term ended (`Action::EndTerm`), its holder's clock reads before
//!   the end's `work_deadline`;
//! * its work has not reported `Input::Drained`: once the work is gone the
//!   term protects nothing, and a graceful hand-over (drain, release, next
//!   candidate takes over at once) legitimately starts the next term before
//!   the old deadline.
//!
//! A crash does *not* end validity: the checker assumes the worst, that the
//! crashed process's work could still act until its deadline. That is a
//! stronger property than the design needs, and the machine meets it.
//!
//! A renewal whose reply is processed after the deadline lapsed (possible
//! when the holder was paused with the reply already in its socket) makes
//! the term valid again; the checker treats that as a new piece of validity
//! and checks it like an election.
//!
//! # What is checked
//!
//! 1. At every instant a term becomes valid (election, renewal) no other
//!    term is valid. Two validity intervals overlap exactly when one starts
//!    inside the other, so checking at starts is complete.
//! 2. Tokens of successive elections strictly rise in real-time order;
//!    renewals keep the token; the token stored in the record never falls.
//! 3. Liveness, against [`LivenessBounds`]: after an undisturbed leader
//!    crash the next term starts within the crash bound; once all faults
//!    have healed a term is valid within the heal bound.
//! 4. The machine's own contract: no election while already leading, a
//!    renewal only for the current term, every record written decodes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tenure::{MonoTime, Timing};

use crate::clock::{NodeClock, SimTime};
use crate::report::{CrashGap, ViolationKind, Violations};

/// The liveness bounds the simulation checks, derived from the timing and
/// the store latency. All are real (simulated) durations.
///
/// Notation: `T` term, `ρ` drift bound, `R` retry interval, `J` retry
/// jitter, `O` operation timeout, `L` the ordinary one-way latency bound,
/// `rtt = 2L`, `S` the slowest a faulty request may be. A node's local
/// duration `x` lasts at most `x / (1 − ρ)` real time.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LivenessBounds {
    /// From a leader's crash to the next election, when nothing else is
    /// going wrong:
    ///
    /// `crash = L + (R + J)/(1 − ρ) + T(1 + ρ)/(1 − ρ) + 4·rtt`
    ///
    /// * `L`: a renewal the leader sent just before dying still applies up
    ///   to one latency after the crash (call that instant `a`);
    /// * `(R + J)/(1 − ρ) + 2·rtt`: a polling candidate sends a read at most
    ///   one poll period plus one round trip after its previous one, so some
    ///   read sent after `a` returns within this time, and the candidate's
    ///   observation of the final record starts then;
    /// * `T(1 + ρ)/(1 − ρ)`: the takeover wait on the candidate's clock;
    /// * `rtt`: a read may be in flight when the wait ends;
    /// * `rtt`: the taking-over compare-and-swap.
    ///
    /// This is [`tenure::Bounds::crash_failover`] (`T(1+ρ)/(1−ρ) + R + J`)
    /// with the poll stretched by the slowest clock, plus the store round
    /// trips the library's bound leaves out.
    pub crash: Duration,
    /// From the instant every fault has healed to a valid term:
    ///
    /// `heal = max(S, O/(1 − ρ)) + (R + J)/(1 − ρ) + T(1 + ρ)/(1 − ρ) + 4·rtt`
    ///
    /// As for `crash`, except that the last write may be a slow request
    /// still applying `S` after the heal, and candidates may first have to
    /// time out an operation lost in a fault (`O`) before they read again.
    /// A former leader stepping down is covered too: its deadline is at most
    /// `T` after its last send, and it re-acquires its own record at once.
    pub heal: Duration,
    /// How long before a leader crash nothing else may have gone wrong for
    /// the crash to be checked against `crash`: long enough for every
    /// after-effect of an earlier fault (a timed-out operation, a back-off,
    /// an ended term's work, a resignation's hold-off) to be over:
    /// `quiet = (T + O + R + J)/(1 − ρ) + 4·rtt`.
    pub quiet: Duration,
}

impl LivenessBounds {
    /// The longest a slow request or reply takes in every tier's runs, with
    /// `timing`: 1.5 operation timeouts, so that some writes apply after
    /// their sender has given up on them.
    pub fn slow_op(timing: &Timing) -> Duration {
        timing.op_timeout.mul_f64(1.5)
    }

    /// The bounds for `timing`, ordinary one-way latency up to `latency`, and
    /// slow requests up to `slow` (in every tier's runs,
    /// [`slow_op`](Self::slow_op)).
    pub fn new(timing: &Timing, latency: Duration, slow: Duration) -> Self {
        let BoundTerms { rtt, poll, wait } = BoundTerms::new(timing, latency);
        let stretch = |d| BoundTerms::stretch(timing, d);
        // One extra millisecond absorbs the rounding of durations to
        // nanoseconds and of wall times to milliseconds.
        let slack = Duration::from_millis(1);
        LivenessBounds {
            crash: latency + poll + wait + rtt * 4 + slack,
            heal: slow.max(stretch(timing.op_timeout)) + poll + wait + rtt * 4 + slack,
            quiet: stretch(timing.term + timing.op_timeout) + poll + rtt * 4 + slack,
        }
    }
}

/// The terms every derived liveness bound (the machine and elector tiers'
/// [`LivenessBounds`], the sharded tier's bounds) is a sum of, for a timing
/// and an ordinary one-way latency.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BoundTerms {
    /// A store round trip: `2·L`.
    pub(crate) rtt: Duration,
    /// A polling candidate's longest gap between reads, on the slowest
    /// clock allowed: `(R + J)/(1 − ρ)`.
    pub(crate) poll: Duration,
    /// The takeover wait: the term, measured on the fastest clock and
    /// waited out on the slowest, `T(1 + ρ)/(1 − ρ)`.
    pub(crate) wait: Duration,
}

impl BoundTerms {
    /// The terms for `timing` and ordinary one-way latency up to `latency`.
    pub(crate) fn new(timing: &Timing, latency: Duration) -> Self {
        let rho = timing.drift;
        BoundTerms {
            rtt: latency * 2,
            poll: Self::stretch(timing, timing.retry_interval + timing.retry_jitter),
            wait: timing.term.mul_f64((1.0 + rho) / (1.0 - rho)),
        }
    }

    /// How long `d` of a clock's time can take in real time, on the slowest
    /// clock `timing`'s drift bound allows: `d/(1 − ρ)`.
    pub(crate) fn stretch(timing: &Timing, d: Duration) -> Duration {
        d.mul_f64(1.0 / (1.0 - timing.drift))
    }
}

#[derive(Clone, Debug)]
struct Term {
    node: usize,
    token: u64,
    start: SimTime,
    deadline: MonoTime,
    /// When the holder's clock reaches `deadline`.
    deadline_real: SimTime,
    /// When the holder's clock reaches the end's work deadline.
    work_end: Option<SimTime>,
    drained: Option<SimTime>,
    /// Ended by the machine, or its process crashed: no more renewals.
    closed: bool,
}

impl Term {
    fn end(&self) -> SimTime {
        let mut end = self.deadline_real;
        if let Some(w) = self.work_end {
            end = end.min(w);
        }
        if let Some(d) = self.drained {
            end = end.min(d);
        }
        end
    }

    fn valid_at(&self, t: SimTime) -> bool {
        self.start <= t && t < self.end()
    }
}

/// Counts of things the machine did that are allowed but worth knowing.
pub(crate) type Notes = BTreeMap<&'static str, u64>;

/// The checker of one run.
pub(crate) struct Checker {
    clocks: Vec<NodeClock>,
    terms: Vec<Term>,
    /// Terms that may still be valid now or later.
    active: Vec<usize>,
    /// Per node, the open term of its live machine.
    current: Vec<Option<usize>>,
    last_elected: Option<(u64, usize)>,
    store_token: u64,
    reported: BTreeSet<(u64, u64)>,
    pub(crate) violations: Violations,
    pub(crate) notes: Notes,
    pub(crate) elections: u64,
    pub(crate) handovers: u64,
    pub(crate) renewals: u64,
    bounds: LivenessBounds,
    pub(crate) crashes: Vec<CrashGap>,
    pending_crash: Option<usize>,
    last_disturbance: Option<SimTime>,
    tail_start: Option<SimTime>,
    pub(crate) heal_gap: Option<Duration>,
    /// The least real time between a term's end and the next election.
    pub(crate) closest: Option<Duration>,
}

impl Checker {
    pub(crate) fn new(seed: u64, clocks: Vec<NodeClock>, bounds: LivenessBounds) -> Self {
        let n = clocks.len();
        Checker {
            clocks,
            terms: Vec::new(),
            active: Vec::new(),
            current: vec![None; n],
            last_elected: None,
            store_token: 0,
            reported: BTreeSet::new(),
            violations: Violations::new(seed),
            notes: Notes::new(),
            elections: 0,
            handovers: 0,
            renewals: 0,
            bounds,
            crashes: Vec::new(),
            pending_crash: None,
            last_disturbance: None,
            tail_start: None,
            heal_gap: None,
            closest: None,
        }
    }

    pub(crate) fn note(&mut self, what: &'static str) {
        *self.notes.entry(what).or_insert(0) += 1;
    }

    /// Reports every other term valid at `t` as overlapping term `idx`.
    fn check_overlap(&mut self, idx: usize, t: SimTime, why: &str) {
        let me = self.terms[idx].clone();
        let others: Vec<Term> = self
            .active
            .iter()
            .filter(|&&i| i != idx)
            .map(|&i| self.terms[i].clone())
            .filter(|o| o.valid_at(t))
            .collect();
        for o in others {
            let pair = (o.token.min(me.token), o.token.max(me.token));
            if !self.reported.insert(pair) {
                continue;
            }
            let o_clock = &self.clocks[o.node];
            let detail = format!(
                "node {} {why} token {} while node {} still held token {} (elected at {}, its clock reads {} of deadline {}: {:.6}s left; clock rate error {:+.4} vs configured bound)",
                me.node,
                me.token,
                o.node,
                o.token,
                o.start,
                o_clock.mono(t).as_nanos(),
                o.deadline.as_nanos(),
                o.end().since(t).as_secs_f64(),
                o_clock.rate_error(),
            );
            self.violations.add(
                ViolationKind::Overlap,
                t,
                vec![o.node, me.node],
                vec![o.token, me.token],
                detail,
            );
        }
    }

    /// Drops terms that are over and can never become valid again.
    fn retire(&mut self, t: SimTime) {
        let terms = &self.terms;
        self.active
            .retain(|&i| !(terms[i].closed && terms[i].end() <= t));
    }

    /// `Action::Elected` from `node` at `t`.
    pub(crate) fn elected(&mut self, t: SimTime, node: usize, token: u64, deadline: MonoTime) {
        // How close the previous term's end came to this start.
        let prev_end = self
            .active
            .iter()
            .map(|&i| &self.terms[i])
            .filter(|term| term.start < t && term.end() <= t)
            .map(Term::end)
            .max();
        if let Some(end) = prev_end {
            let margin = t.since(end);
            self.closest = Some(self.closest.map_or(margin, |c| c.min(margin)));
        }
        self.retire(t);
        self.elections += 1;
        if let Some(i) = self.current[node] {
            let old = self.terms[i].token;
            self.violations.add(
                ViolationKind::Contract,
                t,
                vec![node],
                vec![old, token],
                format!(
                    "node {node} elected with token {token} while its term {old} has not ended"
                ),
            );
        }
        if let Some((last, last_node)) = self.last_elected {
            if token <= last {
                self.violations.add(
                    ViolationKind::TokenOrder,
                    t,
                    vec![last_node, node],
                    vec![last, token],
                    format!(
                        "node {node} elected with token {token}, not above the previous election's token {last} (node {last_node})"
                    ),
                );
            }
            if last_node != node {
                self.handovers += 1;
            }
        }
        self.last_elected = Some((token, node));
        let deadline_real = self.clocks[node].real_at(deadline);
        if deadline_real <= t {
            self.violations.add(
                ViolationKind::Contract,
                t,
                vec![node],
                vec![token],
                format!("node {node} elected with token {token} whose deadline already passed"),
            );
        }
        let idx = self.terms.len();
        self.terms.push(Term {
            node,
            token,
            start: t,
            deadline,
            deadline_real,
            work_end: None,
            drained: None,
            closed: false,
        });
        self.active.push(idx);
        self.current[node] = Some(idx);
        self.check_overlap(idx, t, "was elected with");
        if let Some(p) = self.pending_crash.take() {
            let c = &mut self.crashes[p];
            c.gap = Some(t.since(c.at));
        }
        if let Some(tail) = self.tail_start {
            if self.heal_gap.is_none() && t >= tail {
                self.heal_gap = Some(t.since(tail));
            }
        }
    }

    /// `Action::Renewed` from `node` at `t`.
    pub(crate) fn renewed(&mut self, t: SimTime, node: usize, token: u64, deadline: MonoTime) {
        self.renewals += 1;
        let Some(idx) = self.current[node] else {
            self.violations.add(
                ViolationKind::Contract,
                t,
                vec![node],
                vec![token],
                format!("node {node} renewed token {token} without holding a term"),
            );
            return;
        };
        let held = self.terms[idx].token;
        if held != token {
            self.violations.add(
                ViolationKind::TokenOrder,
                t,
                vec![node],
                vec![held, token],
                format!("node {node} renewed its term {held} as token {token}"),
            );
        }
        let was_valid = self.terms[idx].valid_at(t);
        if deadline < self.terms[idx].deadline {
            self.note("renewal shortened the deadline");
            return;
        }
        self.terms[idx].deadline = deadline;
        self.terms[idx].deadline_real = self.clocks[node].real_at(deadline);
        if self.terms[idx].valid_at(t) {
            if !was_valid {
                self.note(
                    "term valid again after its deadline lapsed (renewal reply processed late)",
                );
            }
            self.check_overlap(idx, t, "renewed");
        }
    }

    /// `Action::EndTerm` from `node` at `t`.
    pub(crate) fn end_term(
        &mut self,
        t: SimTime,
        node: usize,
        token: u64,
        work_deadline: MonoTime,
    ) {
        let Some(idx) = self.current[node].take() else {
            self.violations.add(
                ViolationKind::Contract,
                t,
                vec![node],
                vec![token],
                format!("node {node} ended term {token} without holding one"),
            );
            return;
        };
        let term = &mut self.terms[idx];
        if term.token != token {
            let held = term.token;
            self.violations.add(
                ViolationKind::Contract,
                t,
                vec![node],
                vec![held, token],
                format!("node {node} ended term {token} but holds {held}"),
            );
            return;
        }
        term.closed = true;
        term.work_end = Some(self.clocks[node].real_at(work_deadline));
        let deadline = term.deadline;
        if work_deadline > deadline {
            // The checker keeps judging the term by its deadline, so no
            // overlap follows from this alone; but the work was told it may
            // act longer than the term lasts, which a real elector's work
            // would do.
            self.violations.add(
                ViolationKind::WorkPastDeadline,
                t,
                vec![node],
                vec![token],
                format!(
                    "node {node} ended term {token} with work deadline {} past the term's deadline {} ({:.6}s late on its clock)",
                    work_deadline.as_nanos(),
                    deadline.as_nanos(),
                    work_deadline.saturating_since(deadline).as_secs_f64()
                ),
            );
        }
    }

    /// `node` asked to be woken at an instant already past at `t`, and ticks
    /// there kept changing nothing: it busy-waits.
    pub(crate) fn busy_wait(&mut self, t: SimTime, node: usize, detail: String) {
        self.violations
            .add(ViolationKind::BusyWait, t, vec![node], vec![], detail);
    }

    /// `Input::Drained` was fed to `node` at `t`: the work of `token` is gone.
    pub(crate) fn drained(&mut self, t: SimTime, node: usize, token: u64) {
        let terms = &mut self.terms;
        if let Some(&i) = self
            .active
            .iter()
            .find(|&&i| terms[i].node == node && terms[i].token == token)
        {
            let term = &mut terms[i];
            term.drained = Some(term.drained.map_or(t, |d| d.min(t)));
        }
    }

    /// `node`'s process crashed at `t`; returns the token of the term it
    /// held valid at that instant, if any (a leader crash).
    pub(crate) fn crashed(&mut self, t: SimTime, node: usize) -> Option<u64> {
        let idx = self.current[node].take()?;
        let term = &mut self.terms[idx];
        term.closed = true;
        term.valid_at(t).then_some(term.token)
    }

    /// The node and token of the term valid at `t`, if any.
    pub(crate) fn leader_at(&self, t: SimTime) -> Option<(usize, u64)> {
        self.active
            .iter()
            .map(|&i| &self.terms[i])
            .find(|term| term.valid_at(t))
            .map(|term| (term.node, term.token))
    }

    /// A write of `node` with `token` was applied by the store at `t`.
    pub(crate) fn store_write(&mut self, t: SimTime, node: usize, token: u64) {
        if token < self.store_token {
            let before = self.store_token;
            self.violations.add(
                ViolationKind::TokenOrder,
                t,
                vec![node],
                vec![before, token],
                format!(
                    "node {node} wrote token {token} over token {before}: the stored token fell"
                ),
            );
        }
        self.store_token = self.store_token.max(token);
    }

    /// The store could not decode its own record.
    pub(crate) fn bad_record(&mut self, t: SimTime, node: usize, detail: String) {
        self.violations.add(
            ViolationKind::Contract,
            t,
            vec![node],
            vec![],
            format!("a read by node {node} failed to decode the stored record: {detail}"),
        );
    }

    /// Something went wrong at `t` that may slow a failover down.
    pub(crate) fn disturb(&mut self, t: SimTime) {
        self.last_disturbance = Some(t);
        if let Some(p) = self.pending_crash {
            self.crashes[p].clean = false;
        }
    }

    /// The leader `node` (term `token`) crashed at `t`. The failover is
    /// checked if nothing disturbed the cluster for [`LivenessBounds::quiet`]
    /// before and nothing does until the next election, and some other
    /// node is healthy (up, not paused, not partitioned). Returns the crash's index for [`Checker::crash_deadline`].
    pub(crate) fn leader_crash(
        &mut self,
        t: SimTime,
        node: usize,
        token: u64,
        healthy: bool,
        tail: bool,
    ) -> usize {
        let quiet = self
            .last_disturbance
            .is_none_or(|d| d <= t.before(self.bounds.quiet));
        if let Some(p) = self.pending_crash {
            self.crashes[p].clean = false;
        }
        let idx = self.crashes.len();
        self.crashes.push(CrashGap {
            at: t,
            node,
            token,
            gap: None,
            clean: quiet && healthy && t.as_duration() >= self.bounds.quiet,
            tail,
        });
        self.pending_crash = Some(idx);
        idx
    }

    /// The crash bound after crash `idx` has passed at `t`.
    pub(crate) fn crash_deadline(&mut self, t: SimTime, idx: usize) {
        if self.pending_crash != Some(idx) || !self.crashes[idx].clean {
            return;
        }
        let c = self.crashes[idx].clone();
        let bound = self.bounds.crash;
        self.violations.add(
            ViolationKind::Liveness,
            t,
            vec![c.node],
            vec![c.token],
            format!(
                "leader node {} (token {}) crashed at {} with nothing else going wrong, and no term started within the crash failover bound {:.3?}",
                c.node, c.token, c.at, bound
            ),
        );
    }

    /// Every fault has healed at `t`: the fault-free tail begins.
    pub(crate) fn tail_start(&mut self, t: SimTime) {
        self.tail_start = Some(t);
        if self.leader_at(t).is_some() {
            self.heal_gap = Some(Duration::ZERO);
        }
    }

    /// The heal bound has passed at `t`: a term must be valid now. Returns
    /// the valid term, if any.
    pub(crate) fn heal_deadline(&mut self, t: SimTime) -> Option<(usize, u64)> {
        let leader = self.leader_at(t);
        if leader.is_none() {
            let bound = self.bounds.heal;
            self.violations.add(
                ViolationKind::Liveness,
                t,
                vec![],
                vec![],
                format!("no valid term {bound:.3?} (the heal bound) after every fault had healed"),
            );
        }
        leader
    }

    /// A leader that should have kept its term in the fault-free tail did not.
    pub(crate) fn unstable(
        &mut self,
        t: SimTime,
        node: usize,
        token: u64,
        now: Option<(usize, u64)>,
    ) {
        self.violations.add(
            ViolationKind::Liveness,
            t,
            vec![node],
            vec![token],
            format!(
                "node {node} led with token {token} in the fault-free tail but lost its term without a fault (now: {now:?})"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> SimTime {
        SimTime::from_duration(Duration::from_millis(x))
    }

    fn mono(x: u64) -> MonoTime {
        MonoTime::from_nanos(x * 1_000_000)
    }

    fn checker(clocks: Vec<NodeClock>) -> Checker {
        let timing = tenure::Config::new(Duration::from_secs(2))
            .validate()
            .unwrap();
        let b = LivenessBounds::new(
            &timing,
            Duration::from_millis(10),
            Duration::from_millis(500),
        );
        Checker::new(9, clocks, b)
    }

    #[test]
    fn overlapping_terms_are_reported_once_with_both_tokens() {
        let mut c = checker(vec![NodeClock::perfect(), NodeClock::perfect()]);
        c.elected(ms(0), 0, 1, mono(1980));
        c.elected(ms(1000), 1, 2, mono(2980));
        c.renewed(ms(1100), 1, 2, mono(3080));
        assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
        let v = &c.violations[0];
        assert_eq!(v.kind, ViolationKind::Overlap);
        assert_eq!(
            (v.nodes.clone(), v.tokens.clone()),
            (vec![0, 1], vec![1, 2])
        );
    }

    #[test]
    fn validity_follows_the_holders_clock_not_its_machine() {
        // Node 0's clock runs 10 % fast: deadline 1980 on its clock is
        // reached at 1800 ms real, even if its machine never steps down.
        let mut c = checker(vec![NodeClock::with_rate(0.1), NodeClock::perfect()]);
        c.elected(ms(0), 0, 1, mono(1980));
        c.elected(ms(1801), 1, 2, mono(3000));
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        let mut c = checker(vec![NodeClock::with_rate(-0.1), NodeClock::perfect()]);
        c.elected(ms(0), 0, 1, mono(1980));
        c.elected(ms(2000), 1, 2, mono(3000));
        assert_eq!(c.violations.len(), 1, "a slow clock keeps its term longer");
    }

    #[test]
    fn drained_work_ends_the_term_and_tokens_must_rise() {
        let mut c = checker(vec![NodeClock::perfect(), NodeClock::perfect()]);
        c.elected(ms(0), 0, 5, mono(1980));
        c.end_term(ms(100), 0, 5, mono(1980));
        c.drained(ms(150), 0, 5);
        c.elected(ms(200), 1, 5, mono(2100));
        assert_eq!(c.violations.len(), 1);
        assert_eq!(c.violations[0].kind, ViolationKind::TokenOrder);
    }

    #[test]
    fn work_allowed_past_the_terms_deadline_is_a_violation() {
        let mut c = checker(vec![NodeClock::perfect(), NodeClock::perfect()]);
        c.elected(ms(0), 0, 1, mono(1980));
        c.end_term(ms(100), 0, 1, mono(1980));
        assert!(c.violations.is_empty(), "up to the deadline is fine");
        c.elected(ms(3000), 1, 2, mono(4980));
        c.renewed(ms(3500), 1, 2, mono(5480));
        c.end_term(ms(3600), 1, 2, mono(5481));
        assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
        assert_eq!(c.violations[0].kind, ViolationKind::WorkPastDeadline);
        assert_eq!(c.violations[0].tokens, vec![2]);
    }

    #[test]
    fn crash_failover_is_checked_only_when_undisturbed() {
        let mut c = checker(vec![NodeClock::perfect(), NodeClock::perfect()]);
        let i = c.leader_crash(ms(60_000), 0, 3, true, false);
        c.crash_deadline(ms(70_000), i);
        assert_eq!(c.violations.len(), 1);
        let j = c.leader_crash(ms(80_000), 0, 4, true, false);
        c.disturb(ms(80_500));
        c.crash_deadline(ms(90_000), j);
        assert_eq!(c.violations.len(), 1, "a disturbed failover is not judged");
    }
}
