//! What the machine tests that replay a schedule with explicit times share.

use tenure::machine::{Action, Input, Machine, OpId};
use tenure::{Holder, Metadata, MonoTime, Now, Timing, WallTime};

/// The instant `ms` milliseconds into the schedule, on both clocks.
pub fn at(ms: u64) -> Now {
    Now {
        mono: MonoTime::from_nanos(ms * 1_000_000),
        wall: WallTime::from_millis(1_700_000_000_000 + ms),
    }
}

/// Candidate `a` (incarnation 1) started at 0 ms, and the read it sends at
/// its first tick.
pub fn candidate_a(timing: Timing) -> (Machine, OpId) {
    let me = Holder {
        id: "a".into(),
        incarnation: 1,
    };
    let mut m = Machine::new(timing, me, Metadata::new(), 1, at(0));
    let read = m.step(at(0), Input::Tick);
    let Some(Action::Read { op, .. }) = read.first() else {
        panic!("{read:?}")
    };
    let op = *op;
    (m, op)
}
