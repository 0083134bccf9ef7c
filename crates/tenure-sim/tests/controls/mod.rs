//! The negative controls every tier's checker is tried with: each breaks
//! one clock assumption of the timing argument on purpose, so that the
//! tier's checker must report the overlap that follows. The tiers' tests
//! apply them to their own parameters' [`Shared`] settings.

use std::time::Duration;

use tenure_sim::{Shared, SkewBound};

/// The skew bound (and how far wall clocks stray) in the wall-clock control.
pub const SKEW: Duration = Duration::from_millis(400);

/// Clocks drifting 30 % under a configured 1 % bound, with no skew bound, so
/// that the overlap can come from the drift argument alone and not from
/// the wall-clock early takeover.
pub fn clocks_30_percent_off(shared: &mut Shared) {
    shared.drift = 0.01;
    shared.actual_drift = Some(0.3);
    shared.skew = SkewBound::Off;
}

/// Every wall clock within [`SKEW`] of true time, so two of them differ by
/// up to twice what a skew bound of [`SKEW`] allows; drift stays within its
/// bound, so only the wall-clock early takeover can cause the overlap.
pub fn wall_clocks_beyond_half_the_skew_bound(shared: &mut Shared) {
    shared.skew = SkewBound::On(SKEW);
    shared.actual_wall_offset = Some(SKEW);
}
