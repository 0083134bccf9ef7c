//! A deterministic discrete-event simulation of tenure elections.
//!
//! It runs 3 to 20 candidates, each a [`tenure::machine::Machine`] driven
//! directly: no tokio, no threads, no real time. The store is
//! [`tenure::MemoryStore`]'s synchronous core, a linearizable register. Each
//! node has its own drifting, offset clocks ([`clock`]); faults
//! ([`faults`]) crash, pause and partition nodes, delay, drop and fail store
//! operations, lose replies of applied writes, and make the application
//! resign or shut down. An invariant checker judges every term on the real
//! timeline (see the `checker` module docs in the source, summarized on
//! [`LivenessBounds`]): never two valid terms at once, tokens that rise, and
//! a leader within a derived bound once faults heal or after a leader crash.
//!
//! Everything derives from one `u64` seed, so a failing seed replays
//! exactly:
//!
//! ```
//! use tenure_sim::{run_seed, SimParams};
//! let params = SimParams { fault_phase: std::time::Duration::from_secs(20), ..SimParams::default() };
//! let a = run_seed(7, &params)?;
//! let b = run_seed(7, &params)?;
//! assert_eq!(a.digest, b.digest);
//! assert!(a.violations.is_empty(), "{}", params.replay_command(7));
//! # Ok::<(), tenure_sim::SimError>(())
//! ```
#![deny(missing_docs)]

mod checker;
pub mod clock;
pub mod faults;
pub mod params;
pub mod report;
mod scheduler;
mod trace;
mod world;

pub use checker::LivenessBounds;
pub use clock::{NodeClock, SimTime};
pub use faults::{FaultCounts, FaultKind, FaultRates};
pub use params::{Liveness, Notify, SimError, SimParams, SkewBound};
pub use report::{CrashGap, SimReport, Summary, Violation, ViolationKind};

/// Runs one seed to the end and reports what the checker found.
///
/// Fails only if the parameters are invalid; violations of the election's
/// invariants are in [`SimReport::violations`].
pub fn run_seed(seed: u64, params: &SimParams) -> Result<SimReport, SimError> {
    Ok(world::World::new(seed, params)?.run())
}
