//! ZooKeeper lease store for [tenure]: leader election with fencing tokens
//! on the ZooKeeper ensemble you already run (the store behind Curator).
//!
//! (docs to come)
#![deny(missing_docs)]

mod error;
mod feed;
mod names;
mod options;
mod session;
mod store;
mod watch;

pub use error::ZkStoreError;
pub use options::{
    ZkOptions, DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_SESSION_TIMEOUT, DEFAULT_TIMEOUT,
};
pub use store::ZkStore;
