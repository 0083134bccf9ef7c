//! placeholder, replaced below
#![deny(missing_docs)]
pub mod clock;
pub mod config;
pub mod error;
pub mod machine;
pub mod memory;
pub mod record;
pub mod store;

pub use clock::{Clock, MonoTime, Now, SystemClock, TokioClock, WallTime};
pub use config::{Bounds, Config, Timing};
pub use error::{ConfigError, ElectorError, RecordError, RunError, StoreError};
pub use memory::{Faults, FaultyStore, MemoryStore};
pub use record::{GroupName, Holder, LeaseRecord, Metadata, Version, Versioned};
pub use store::{CasOutcome, ChangeFeed, LeaseStore};
