//! Leader election and leases for Rust services, on the store you already
//! run, with a fencing token for every term.
//!
//! A group of candidates share one role; an [`Elector`] per candidate
//! campaigns through a [`LeaseStore`] (SQLite, PostgreSQL, Redis, etcd,
//! DynamoDB, or the in-process [`MemoryStore`]). The leader's work gets a
//! [`Term`]: a fencing token strictly greater than any earlier term's, and a
//! deadline before which it is told to stop; no other candidate can start a
//! term before that deadline. When the leader stops gracefully it drains its
//! work and releases the lease, so the next candidate takes over at once.
//!
//! ```
//! use std::time::Duration;
//! use tenure::{Elector, MemoryStore, Metadata};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! let elector = Elector::builder(store, "nightly-billing")
//!     .candidate_id("host-a")
//!     .term(Duration::from_secs(10))
//!     .metadata(Metadata::address("10.0.0.7:8080"))
//!     .start()?;
//! # let stopper = elector.clone();
//! # tokio::spawn(async move { tokio::time::sleep(Duration::from_millis(50)).await; stopper.shutdown().await; });
//! elector
//!     .run_while_leader(|term| async move {
//!         // term.token(): the fencing token; term.cancelled() fires before
//!         // term.deadline().
//!         term.cancelled().await;
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Layers
//!
//! * [`Elector`]: the handle users hold, whatever the backend: a role watch
//!   ([`Role`]), an event stream ([`Event`]), [`Elector::run_while_leader`],
//!   [`Elector::run_periodic_while_leader`], [`Elector::pulse`],
//!   [`Elector::resign`], [`Elector::shutdown`]. [`Observer`] follows the
//!   leader without standing.
//! * [`machine`]: every decision, as a pure function of (state, time,
//!   input); no I/O, no clock reads. The guarantees and the timing model are
//!   argued in [`config`].
//! * [`LeaseStore`]: read and compare-and-swap on the store's own version,
//!   and an optional change feed; its read side alone is [`LeaseView`],
//!   all an [`Observer`] needs. [`MemoryStore`] is in this crate; the
//!   others (`tenure-sqlite`, `-postgres`, `-redis`, `-etcd`, `-dynamodb`,
//!   `-zookeeper`, `-nats`, `-object-store`) are crates of their own. A
//!   new store proves itself with the conformance suite of the
//!   `tenure-testkit` crate (a dev-dependency), as every one of those does.
//! * [`Coordinator`]: the seam for backends that decide leadership
//!   themselves (`tenure-kafka`'s consumer-group assignment); they drive the
//!   same [`Elector`] handle through a [`Session`].
//! * [`Clock`]: `CLOCK_BOOTTIME` in production ([`SystemClock`]), tokio's
//!   (pausable) clock in tests ([`TokioClock`]).
//!
//! # Fencing
//!
//! A term's deadline stops a leader that is running; it cannot stop one
//! that is paused (a GC pause, `SIGSTOP`, a frozen VM) and wakes after its
//! term ended with a write still in flight. That write can reach the
//! resource after the next leader's. So pass [`Term::token`] with every
//! write, and let the resource refuse a token lower than the highest it has
//! admitted, in the same atomic step as the write. The rule is
//! [`fence::check`]; a refusal is a [`fence::StaleToken`]. Tested recipes
//! for a PostgreSQL table (a `WHERE fence_token <= $token` guard or a
//! trigger), Redis (a Lua script), etcd (a transaction on a fence key), an
//! S3-style object store (a conditional write) and a local file (a lock and
//! a token file) are in `docs/fencing.md` in the repository, each with an
//! example that runs against the real server.
//!
//! # Features
//!
//! * `model`: [`Machine`](machine::Machine) becomes `Clone` and `Hash`, so a
//!   model checker can keep whole machines in its states (`tenure-model`),
//!   and offers the deliberately broken timing its negative controls use.

#![cfg_attr(docsrs, feature(doc_cfg))]

// The terms are counted on a monotonic clock that keeps counting while the
// machine is suspended (see `SystemClock`): CLOCK_BOOTTIME on Linux,
// CLOCK_MONOTONIC on macOS. Elsewhere no such clock is known to this crate,
// and a clock that stops in suspend would be unsafe.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
compile_error!(
    "tenure builds on Linux and macOS only: it needs a monotonic clock that keeps counting through suspend \
     (CLOCK_BOOTTIME on Linux, CLOCK_MONOTONIC on macOS), and knows of none on this platform"
);

mod admission;

pub mod clock;
pub mod config;
pub mod coordinator;
mod elector;
pub mod engine;
pub mod error;
pub mod fence;
mod health;
mod link;
pub mod machine;
pub mod memory;
pub mod metrics;
mod observer;
mod periodic;
mod publish;
pub mod record;
mod role;
pub mod shards;
pub mod store;
mod term;

pub use clock::{Clock, MonoTime, Now, SystemClock, TokioClock, WallTime};
pub use config::{Bounds, Config, Timing};
pub use coordinator::{Command, Coordinator, Session};
pub use elector::{host_name, Elector, ElectorBuilder, EventStream};
pub use engine::{Engine, EngineBuilder, EngineOptions, EngineSlot, EngineStats};
pub use error::{ConfigError, ElectorError, RecordError, StoreError};
pub use health::{Health, Liveness};
pub use machine::{EndReason, Fault};
pub use memory::{Faults, FaultyStore, MemoryStore};
pub use observer::{Observer, ObserverBuilder};
pub use periodic::Periodic;
pub use record::{GroupName, Holder, LeaseRecord, Metadata, Version, Versioned};
pub use role::{Event, LeaderInfo, Role};
pub use shards::{
    Assignment, Member, ShardEvent, ShardEventStream, ShardHolding, Shards, ShardsBuilder,
};
pub use store::{LeaseStore, LeaseView};
pub use term::{Term, TermGuard};

// What a store author needs lives in `tenure::store` (see its docs). These
// paths at the root are where it lived before; they stay, hidden, so that
// stores written against them keep building (Rust cannot mark a re-export
// deprecated), and go with the first release's breaking changes.
#[doc(hidden)]
pub use store::{
    concurrent, secret, tls, url, BatchResult, CasOutcome, CasRequest, Change, ChangeFeed,
    FeedRelay, FeedsOff, Listed, StoreFeed, StoreFeedSender,
};
