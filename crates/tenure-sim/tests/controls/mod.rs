//! The negative controls every tier's checker is tried with: each breaks
//! one clock assumption of the timing argument on purpose, so that the
//! tier's checker must report the overlap that follows. The tiers' tests
//! apply them to their own parameters' [`Shared`] settings.

use std::time::Duration;

use tenure_sim::{Shared, SkewBound};

/// The skew bound (and how far wall clocks stray) in the wall-clock control.
pub const SKEW: Duration = Duration::from_millis(400);

/// One clock control: what it breaks, how, and what the replay command of a
/// run under it must say.
pub struct ClockControl {
    /// What it breaks, for a failure message.
    pub name: &'static str,
    /// Breaks it in a tier's shared settings.
    pub apply: fn(&mut Shared),
    /// The flags a replay command of a run under it carries.
    pub flags: &'static str,
}

/// Clocks drifting 30 % under a configured 1 % bound, with no skew bound, so
/// that the overlap can come from the drift argument alone and not from
/// the wall-clock early takeover.
pub const DRIFT: ClockControl = ClockControl {
    name: "clocks drifting 30 % under a 1 % bound",
    apply: clocks_30_percent_off,
    flags: "--actual-drift 0.3 --skew off",
};

/// Every wall clock within [`SKEW`] of true time, so two of them differ by
/// up to twice what a skew bound of [`SKEW`] allows; drift stays within its
/// bound, so only the wall-clock early takeover can cause the overlap.
pub const WALL_CLOCKS: ClockControl = ClockControl {
    name: "wall clocks twice the skew bound apart",
    apply: wall_clocks_beyond_half_the_skew_bound,
    flags: "--skew on:400 --actual-wall-offset-ms 400",
};

/// Both clock controls, for a tier's test that every one is caught.
#[allow(
    dead_code,
    reason = "every test binary compiles this module; checker_fails.rs names each control"
)]
pub const CLOCK_CONTROLS: [ClockControl; 2] = [DRIFT, WALL_CLOCKS];

fn clocks_30_percent_off(shared: &mut Shared) {
    shared.drift = 0.01;
    shared.actual_drift = Some(0.3);
    shared.skew = SkewBound::Off;
}

fn wall_clocks_beyond_half_the_skew_bound(shared: &mut Shared) {
    shared.skew = SkewBound::On(SKEW);
    shared.actual_wall_offset = Some(SKEW);
}
