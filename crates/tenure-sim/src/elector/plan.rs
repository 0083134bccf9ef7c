//! The faults of an elector-tier run, planned up front from the seed; the
//! target candidate is chosen when a fault fires.

use std::time::Duration;

use rand::Rng;

use crate::faults::{FaultKind, PlannedKind};

/// A fault to inject at a planned instant.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Planned {
    /// The process dies; a new incarnation starts later.
    Crash,
    /// Cut off from the store for a while.
    Partition,
    /// Slow store operations for a while.
    Slow,
    /// Failing store operations for a while.
    Failing,
    /// Writes apply, replies are lost, for a while.
    LostReplies,
    /// The application resigns.
    Resign,
    /// The application shuts the elector down; a new one starts later.
    Shutdown,
    /// The application stops pulsing for a while.
    Stall,
}

impl Planned {
    /// The fault kind it is counted as.
    pub(crate) fn kind(self) -> FaultKind {
        match self {
            Planned::Crash => FaultKind::Crash,
            Planned::Partition => FaultKind::Partition,
            Planned::Slow => FaultKind::SlowOp,
            Planned::Failing => FaultKind::StoreFailure,
            Planned::LostReplies => FaultKind::LostReply,
            Planned::Resign => FaultKind::Resign,
            Planned::Shutdown => FaultKind::Shutdown,
            Planned::Stall => FaultKind::Stall,
        }
    }

    /// How long a window of trouble of this kind lasts.
    pub(crate) fn window(self, rng: &mut impl Rng, term: Duration) -> Duration {
        let (lo, hi) = match self {
            Planned::Partition => (term / 5, term * 4),
            Planned::Slow | Planned::Failing => (term / 10, term * 2),
            Planned::LostReplies => (term / 10, term),
            Planned::Stall => (term / 2, term * 3),
            Planned::Crash | Planned::Resign | Planned::Shutdown => {
                (Duration::ZERO, Duration::ZERO)
            }
        };
        crate::faults::between(rng, lo, hi)
    }
}

impl PlannedKind for Planned {
    fn heal_time(self, term: Duration) -> Duration {
        match self {
            // Down for up to 3 terms.
            Planned::Crash => term * 3,
            Planned::Partition => term * 4,
            Planned::Slow | Planned::Failing => term * 2,
            Planned::LostReplies => term,
            // Draining lasts at most one term, the release one more.
            Planned::Resign => term * 2,
            // Drain and release, then down for up to 2 terms.
            Planned::Shutdown => term * 4,
            Planned::Stall => term * 3,
        }
    }
}
