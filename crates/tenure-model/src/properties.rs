//! The properties every explored state is judged by.
//!
//! Safety (`always`):
//!
//! * **one valid term**: at most one term is valid at the state's real
//!   instant. A term is valid from its `Elected` until its holder's own
//!   clock reaches its deadline (as renewed), or its work deadline once
//!   `EndTerm` set one, or until its work reports `Drained`; a crash does
//!   not end it (the work may outlive the machine). Intervals are
//!   right-open and every start is a state, so checking every state finds
//!   every overlap.
//! * **tokens rise**: every election's token exceeds the previous
//!   election's, renewals keep the token, no write lowers the stored token.
//! * **stop in time**: a running leader's clock never passes
//!   `deadline − stop_grace` with its term not ended, and no `EndTerm`
//!   gives the work a deadline past the term's.
//! * **no busy wait**: a tick at a due wake-up always does something.
//! * **contract**: no election while holding a term or with a deadline
//!   already past, no renewal or end of a term not held, no fatal fault, no
//!   undecodable record.
//!
//! Liveness, bounded by the horizon:
//!
//! * `eventually` **leads after faults**: on every path, some term is valid
//!   at some instant after the faults stopped. The path's fact is kept in
//!   the state ([`Ghost::led_after_faults`](crate::state::Ghost)), so a
//!   path that merges into another's state has the same fact, and every
//!   path ends at the horizon (time always advances and the horizon bounds
//!   it), where stateright judges `eventually` properties.
//! * `always` **leads within the heal bound**: no state lies more than
//!   [`ModelBounds::heal`](crate::params::ModelBounds) after the faults'
//!   end without a term having been valid since.
//! * `always` **release hands over within the bound**: after a graceful
//!   release applies at the store (with nothing gone wrong for
//!   [`ModelBounds::quiet`](crate::params::ModelBounds) before it, and
//!   nothing after), a term starts within
//!   [`ModelBounds::release`](crate::params::ModelBounds); after a
//!   shutdown it is the waiting node's.
//!
//! Reachability (`sometimes`, so a check that passes is not vacuous):
//! leadership changes hands; a graceful release applies; a resigning node
//! takes its own released lease back before the waiting node does; with
//! priorities, a leader hands over to a candidate of higher priority that
//! asked.

use stateright::Property;

use crate::clock;
use crate::model::ElectionModel;
use crate::state::{Flaw, GhostTerm, Node, State};

/// Names of the properties, for tests and reports.
pub mod names {
    /// At most one valid term at any real instant.
    pub const ONE_VALID_TERM: &str = "at most one valid term";
    /// Tokens strictly rise.
    pub const TOKENS_RISE: &str = "tokens of successive terms strictly rise";
    /// Work told to stop in time.
    pub const STOP_IN_TIME: &str = "work told to stop by deadline minus stop grace";
    /// No busy wait.
    pub const NO_BUSY_WAIT: &str = "no busy wait";
    /// The machine's contract.
    pub const CONTRACT: &str = "machine contract";
    /// Leads once faults stop (eventually).
    pub const LEADS_AFTER_FAULTS: &str = "some node leads once faults stop";
    /// Leads within the heal bound.
    pub const LEADS_IN_HEAL_BOUND: &str = "some node leads within the heal bound";
    /// Release hands over within the bound.
    pub const RELEASE_HANDS_OVER: &str = "a graceful release hands over within the bound";
    /// Leadership changes hands.
    pub const HANDOVER: &str = "leadership changes hands";
    /// A graceful release applies.
    pub const RELEASED: &str = "a graceful release applies";
    /// The resigner takes the lease back.
    pub const RESIGNER_RETAKES: &str = "a resigning node takes its released lease back";
    /// With priorities, a leader hands over to a higher one that asked.
    pub const PREEMPTED: &str = "a leader hands over to a higher priority that asked";
}

/// Whether `term` is valid at real time `t`, judged on its holder's clock.
pub fn term_valid(term: &GhostTerm, holder: &Node, i: usize, t: u64) -> bool {
    let mono = clock::mono(holder, i, t);
    !term.drained && mono < term.deadline && term.work_deadline.is_none_or(|w| mono < w)
}

/// How many terms are valid at the state's instant.
pub fn valid_terms(s: &State) -> usize {
    s.ghost
        .terms
        .iter()
        .filter(|t| {
            let i = usize::from(t.node);
            term_valid(t, &s.nodes[i], i, s.now)
        })
        .count()
}

/// Every property of the model.
pub fn all() -> Vec<Property<ElectionModel>> {
    use names::*;
    vec![
        Property::always(ONE_VALID_TERM, |_: &ElectionModel, s: &State| {
            valid_terms(s) <= 1
        }),
        Property::always(TOKENS_RISE, |_: &ElectionModel, s: &State| {
            !(s.ghost.has(Flaw::TokenOrder)
                || s.ghost.has(Flaw::RenewToken)
                || s.ghost.has(Flaw::StoreToken))
        }),
        Property::always(STOP_IN_TIME, |_: &ElectionModel, s: &State| {
            !(s.ghost.has(Flaw::LateStop) || s.ghost.has(Flaw::WorkPastDeadline))
        }),
        Property::always(NO_BUSY_WAIT, |_: &ElectionModel, s: &State| {
            !s.ghost.has(Flaw::BusyWait)
        }),
        Property::always(CONTRACT, |_: &ElectionModel, s: &State| {
            !s.ghost.has(Flaw::Contract)
        }),
        // Judged only when the horizon leaves room for the heal bound.
        Property::eventually(LEADS_AFTER_FAULTS, |m: &ElectionModel, s: &State| {
            s.ghost.led_after_faults || !m.judges_liveness()
        }),
        Property::always(LEADS_IN_HEAL_BOUND, |m: &ElectionModel, s: &State| {
            let limit = m.fault_end().saturating_add(nanos(m.bounds.heal));
            s.ghost.led_after_faults || s.now <= limit
        }),
        Property::always(RELEASE_HANDS_OVER, |m: &ElectionModel, s: &State| {
            s.ghost
                .release
                .is_none_or(|w| s.now <= w.at.saturating_add(nanos(m.bounds.release)))
        }),
        Property::sometimes(HANDOVER, |_: &ElectionModel, s: &State| s.ghost.handover),
        Property::sometimes(RELEASED, |_: &ElectionModel, s: &State| s.ghost.released),
        Property::sometimes(RESIGNER_RETAKES, |_: &ElectionModel, s: &State| {
            s.ghost.resigner_retook
        }),
        // Reached at once without priorities, so that it says nothing there.
        Property::sometimes(PREEMPTED, |m: &ElectionModel, s: &State| {
            m.preempts() == s.ghost.preempted
        }),
    ]
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
