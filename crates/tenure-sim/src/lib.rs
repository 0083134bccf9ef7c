//! A deterministic discrete-event simulation of tenure elections.
//!
//! It runs 2 to 20 candidates, each a [`tenure::machine::Machine`] driven
//! directly: no tokio, no threads, no real time. The store is
//! [`tenure::MemoryStore`]'s synchronous core, a linearizable register.
//! That is the machine tier, described below; the [`elector`] tier runs the
//! real electors around the machines on tokio's paused clock instead, and
//! the [`shards`] tier runs sharded sets ([`tenure::Shards`]) the same way.
//!
//! * **Clocks** ([`clock`]): each node's monotonic clock runs at `1 + d`
//!   with `|d|` within the configured drift bound (a third of the nodes
//!   exactly on the edge) and an arbitrary origin; its wall clock has the
//!   same rate and its own offset, kept within half the skew bound by
//!   periodic NTP steps when a bound is configured. Clocks keep counting
//!   through pauses and crashes, like `CLOCK_BOOTTIME`.
//! * **Faults** ([`faults`]): crashes and restarts (a new incarnation),
//!   pauses shorter and longer than a term, partitions from the store,
//!   dropped requests, lost replies of applied writes, store failures, slow
//!   requests that apply after their sender timed out, resignations,
//!   shutdowns, stalled liveness pulses, and a cluster-wide storm at the end
//!   of the fault phase. A fault-free tail follows.
//! * **Checker** (summarized on [`LivenessBounds`] and [`ViolationKind`]):
//!   on the real timeline, never two valid terms at once (a term is valid
//!   from `Elected` until its holder's own clock reaches the deadline, its
//!   end's work deadline, or its work reports `Drained`); tokens rise across
//!   elections and never change on renewal; after an undisturbed leader
//!   crash the next term starts within [`LivenessBounds::crash`]; once all
//!   faults have healed a term is valid within [`LivenessBounds::heal`] and
//!   stays valid; no node busy-waits (asks again and again to be woken at
//!   an instant already past while nothing changes); no ended term gives
//!   its work more time than the term had left.
//! * **Early takeovers**: in seeds with a skew bound the report counts the
//!   takeovers that only the wall-clock rule allowed
//!   ([`SimReport::early_takeovers`]), so those seeds demonstrably exercise
//!   it.
//! * **Negative controls** ([`Shared::actual_drift`],
//!   [`Shared::actual_wall_offset`], [`MachineTier::anchor_at_receive`])
//!   break one assumption of the timing argument each; the checker must
//!   then report overlaps.
//!
//! Everything derives from one `u64` seed, so a failing seed replays
//! exactly, and every violation names its seed; the binary prints the
//! replay command (`cargo run -p tenure-sim --release -- --seed N --trace`).
//!
//! ```
//! use tenure_sim::{run_seed, SimParams};
//! let mut params = SimParams::default();
//! params.shared.fault_phase = std::time::Duration::from_secs(20);
//! let a = run_seed(7, &params)?;
//! let b = run_seed(7, &params)?;
//! assert_eq!(a.run.digest, b.run.digest);
//! assert!(a.run.violations.is_empty(), "{}", params.replay_command(7));
//! # Ok::<(), tenure_sim::SimError>(())
//! ```

mod checker;
pub mod clock;
pub mod elector;
pub mod faults;
pub mod params;
mod paused;
pub mod report;
mod scheduler;
pub mod shards;
mod spin;
pub mod tier;
mod trace;
mod world;

pub use checker::LivenessBounds;
pub use clock::{NodeClock, SimTime};
pub use faults::{FaultCounts, FaultKind, FaultRates, OpFaultOdds};
pub use params::{Liveness, MachineTier, Notify, Shared, SimError, SimParams, SkewBound};
pub use report::{CrashGap, RunRecord, SimReport, Summary, Totals, Violation, ViolationKind};
pub use tier::{FaultPlan, Params, Tier, TierReport, TierSummary};

/// Runs one seed to the end and reports what the checker found.
///
/// Fails only if the parameters are invalid; violations of the election's
/// invariants are in the report's [`RunRecord::violations`].
pub fn run_seed(seed: u64, params: &SimParams) -> Result<SimReport, SimError> {
    Ok(world::World::new(seed, params)?.run())
}
