//! The membership changes and faults of a sharded-tier run, planned up
//! front from the seed; the member they strike is chosen when they fire.

use std::time::Duration;

use rand::Rng;

use crate::elector::plan::Planned as Window;
use crate::faults::{between, PlannedKind};

/// A change or fault to inject at a planned instant.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Planned {
    /// A new member joins.
    Join,
    /// A member leaves gracefully; most come back later.
    Leave,
    /// A member's process dies; it comes back later.
    Crash,
    /// A member's process is frozen for a while.
    Pause,
    /// A window of store trouble for one member (partition, slow, failing,
    /// lost replies), as in the elector tier.
    Window(Window),
}

impl PlannedKind for Planned {
    fn heal_time(self, term: Duration) -> Duration {
        match self {
            // A join needs nothing healed.
            Planned::Join => Duration::ZERO,
            // Draining lasts at most a term; then down for up to 2 terms.
            Planned::Leave => term * 3,
            Planned::Crash => Window::Crash.heal_time(term),
            Planned::Pause => term * 3,
            Planned::Window(w) => w.heal_time(term),
        }
    }
}

/// A pause's length: from a fifth of a term to three terms (the longest a
/// pause takes to heal, above), so 70 % of pauses outlast the term.
pub(crate) fn pause_length(rng: &mut impl Rng, term: Duration) -> Duration {
    between(rng, term / 5, term * 3)
}
