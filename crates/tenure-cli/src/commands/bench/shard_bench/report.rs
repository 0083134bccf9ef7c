//! What a bench member reports, one JSON object per line on its stdout.
//!
//! Every timestamp is nanoseconds of `CLOCK_BOOTTIME` (as the demo's
//! candidates report): one clock for every process on the host, so the
//! orchestrator can compare the members' instants.

use serde::{Deserialize, Serialize};
pub use tenure::store::OpCounts;

/// One line of a member's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum MemberReport {
    /// The member joined the set (`Shards::start` returned).
    Started {
        /// Its pid, to take it down.
        pid: u32,
        /// When it joined.
        at: u64,
    },
    /// It holds the shard: the term's work starts now.
    Acquired {
        /// The shard it began to work.
        shard: String,
        /// The term's fencing token.
        token: u64,
        /// When the work started.
        at: u64,
    },
    /// The shard's work stopped (told to, or dropped at the deadline):
    /// reported before the term's guard is dropped, hence before any
    /// release.
    Ended {
        /// The shard it stopped working.
        shard: String,
        /// The term's fencing token.
        token: u64,
        /// When the work stopped.
        at: u64,
    },
    /// The live members, as this member sees them, changed.
    Members {
        /// Their ids, sorted.
        ids: Vec<String>,
        /// When the view changed.
        at: u64,
    },
    /// The store operations it sent so far, every quarter second.
    Ops {
        /// The totals.
        #[serde(flatten)]
        counts: OpCounts,
        /// When counted.
        at: u64,
    },
    /// The member left gracefully: `Shards::shutdown` returned.
    Left {
        /// When it left.
        at: u64,
    },
}
