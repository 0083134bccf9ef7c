//! Exhaustive model checking of the election machine with
//! [stateright](https://docs.rs/stateright).
//!
//! [`tenure-sim`](../tenure_sim/index.html) samples schedules; this crate
//! explores *every* schedule of a small cluster within bounds, and either
//! finds no violation or returns a path to one. The model is the
//! real [`tenure::machine::Machine`] (2 or 3 of them), not a restatement:
//! each node is a machine with a drifting clock and the driver the elector
//! puts around it (operation deadlines, discarded late replies), over one
//! linearizable register holding the encoded record. See [`model`] for the
//! steps and how time moves, [`properties`] for what is checked, and
//! [`params`] for the bounds.
//!
//! States hold whole machines, which with the `model` feature are `Clone`
//! and `Hash`: the state's fingerprint is built from the machines' own
//! fingerprints, so two interleavings that leave every machine, the store,
//! the network and the ghost state alike are explored once.
//!
//! ```
//! use tenure_model::{check, Params};
//! let params = Params { horizon: Some(std::time::Duration::from_secs(3)), ..Params::default() };
//! let outcome = check(params, 1)?;
//! assert!(outcome.failures.is_empty(), "{outcome}");
//! assert!(outcome.unique_states > 10);
//! # Ok::<(), tenure_model::ParamsError>(())
//! ```

pub mod clock;
pub mod model;
pub mod params;
pub mod properties;
pub mod run;
pub mod state;

pub use model::{ElectionModel, Step};
pub use params::{Budget, FaultKind, ModelBounds, Params, ParamsError, Rate, ReleaseKind, Skew};
pub use run::{check, check_until_failure, Outcome};
