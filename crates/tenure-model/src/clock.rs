//! Node clocks on the model's real timeline, in exact integer arithmetic.
//!
//! A node's monotonic clock reads `origin + ⌊t · num / den⌋` at real time
//! `t` (nanoseconds) and keeps running while the node is paused or crashed,
//! like `CLOCK_BOOTTIME`. Its wall clock reads true time plus a fixed
//! offset, in milliseconds.

use tenure::{MonoTime, Now, WallTime};

use crate::state::Node;

/// The Unix time, in milliseconds, at the model's real time zero.
pub const EPOCH_MS: u64 = 1_700_000_000_000;

/// Node `i`'s monotonic origin: distinct per node, so that a mix-up of two
/// nodes' instants cannot go unnoticed.
fn origin(i: usize) -> u64 {
    (i as u64 + 1) * 1_000_000_000_000
}

/// Node `i`'s monotonic clock at real time `t`.
pub fn mono(node: &Node, i: usize, t: u64) -> MonoTime {
    let ticks = u128::from(t) * u128::from(node.rate.num) / u128::from(node.rate.den);
    MonoTime::from_nanos(origin(i).saturating_add(u64::try_from(ticks).unwrap_or(u64::MAX)))
}

/// Node `i`'s reading of both clocks at real time `t`.
pub fn now(node: &Node, i: usize, t: u64) -> Now {
    let wall = (EPOCH_MS + t / 1_000_000).saturating_add_signed(node.wall_offset_ms);
    Now {
        mono: mono(node, i, t),
        wall: WallTime::from_millis(wall),
    }
}

/// The first real instant at or after `from` at which node `i`'s clock
/// reads at least `at`; `None` if never (an instant at the end of time).
pub fn real_at(node: &Node, i: usize, at: MonoTime, from: u64) -> Option<u64> {
    if mono(node, i, from) >= at {
        return Some(from);
    }
    let ticks = u128::from(at.as_nanos() - origin(i));
    let (num, den) = (u128::from(node.rate.num), u128::from(node.rate.den));
    let t = (ticks * den).div_ceil(num);
    u64::try_from(t).ok().filter(|&t| t < u64::MAX / 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Rate;

    fn node(num: u64, den: u64) -> Node {
        Node {
            rate: Rate::new(num, den),
            wall_offset_ms: -3,
            incarnation: 1,
            process: None,
        }
    }

    #[test]
    fn real_at_is_the_first_instant_the_clock_reaches() {
        for n in [node(7, 8), node(9, 8), node(1, 1), node(3, 4)] {
            for at in [1u64, 7, 8, 9, 1_000_000_007, 8_000_000_000] {
                let target = MonoTime::from_nanos(origin(1) + at);
                let t = real_at(&n, 1, target, 0).unwrap();
                assert!(mono(&n, 1, t) >= target, "{n:?} {at}");
                assert!(mono(&n, 1, t - 1) < target, "{n:?} {at}");
                assert!(mono(&n, 1, t) <= target + std::time::Duration::from_nanos(1));
            }
        }
        let n = node(7, 8);
        assert_eq!(now(&n, 0, 2_000_000).wall.as_millis(), EPOCH_MS + 2 - 3);
    }
}
