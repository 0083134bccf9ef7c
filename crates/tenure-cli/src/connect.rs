//! Turning `--store` and `--group` into an open store and a checked group
//! name, with the exit codes the commands share: a bad URL, scheme or group
//! name is a usage error (2); a store that cannot be opened is a failure (1).

use std::sync::Arc;

use anyhow::Context;
use tenure::{GroupName, LeaseStore, LeaseView};

use crate::exit::usage;
use crate::store_url::{Backend, StoreUrl};

/// An open store and what it was opened from.
pub struct Connected {
    /// The URL, for redacted display.
    pub url: StoreUrl,
    /// The store, or a read-only view where nothing can be written.
    pub backend: Backend,
}

impl Connected {
    /// The store, for commands that write: a usage error on a read-only
    /// backend (`kafka://`), naming what to do instead.
    pub fn store(&self) -> anyhow::Result<Arc<dyn LeaseStore>> {
        self.backend.store().map_err(usage)
    }

    /// The reads, for commands that only look.
    pub fn view(&self) -> Arc<dyn LeaseView> {
        self.backend.view()
    }
}

/// Parses and opens a store that several processes share.
pub async fn open_shared(given: Option<&str>) -> anyhow::Result<Connected> {
    let url = StoreUrl::resolve(given).map_err(usage)?;
    if !url.is_shared() {
        return Err(usage(
            "memory:// lives inside one process, so other tenure processes cannot see it: use a shared store such as sqlite://PATH",
        ));
    }
    let backend = url
        .open_backend()
        .await
        .with_context(|| format!("cannot open the store {url}"))?;
    Ok(Connected { url, backend })
}

/// Checks a group name.
pub fn group(name: &str) -> anyhow::Result<GroupName> {
    GroupName::new(name).map_err(usage)
}
