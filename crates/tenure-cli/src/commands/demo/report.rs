//! What a demo candidate reports, one JSON object per line on its stdout.
//!
//! Every timestamp is nanoseconds of `CLOCK_BOOTTIME` ([`tenure::SystemClock`]'s
//! monotonic clock): one clock for every process on the host, so the
//! orchestrator can compare instants across candidates.

use serde::{Deserialize, Serialize};
use tenure::{Clock, SystemClock};

/// One line of a candidate's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Report {
    /// The candidate stands.
    Started {
        /// Its candidate id.
        id: String,
        /// Its pid, to take it down.
        pid: u32,
        /// When it started standing.
        at: u64,
    },
    /// It leads: the term's work starts now.
    Elected {
        /// The fencing token.
        token: u64,
        /// When the candidate learned it leads.
        at: u64,
        /// The term's deadline.
        deadline_mono: u64,
    },
    /// A renewal moved the deadline.
    Renewed {
        /// The fencing token.
        token: u64,
        /// When the candidate saw the new deadline.
        at: u64,
        /// The new deadline.
        deadline_mono: u64,
    },
    /// The library ended the term (the elector's `Ousted` event).
    Ousted {
        /// The fencing token.
        token: u64,
        /// When the event arrived.
        at: u64,
        /// Why the term ended.
        reason: String,
    },
    /// The term's work stopped: from here on the candidate does nothing as
    /// leader. Reported before the term's guard is dropped, hence before any
    /// release.
    Ended {
        /// The fencing token.
        token: u64,
        /// When the work stopped.
        at: u64,
        /// Why the term ended (as in [`Report::Ousted`]).
        reason: String,
    },
    /// The candidate shut down while leading and its release was written.
    Released {
        /// When shutdown returned.
        at: u64,
    },
}

/// Now, on the shared clock.
pub fn now() -> u64 {
    SystemClock.now().mono.as_nanos()
}
