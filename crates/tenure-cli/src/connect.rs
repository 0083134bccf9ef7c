//! Turning `--store` and `--group` into an open store and a checked group
//! name, with the exit codes the commands share: a bad URL, scheme or group
//! name is a usage error (2); a store that cannot be opened is a failure (1).

use std::sync::Arc;

use anyhow::Context;
use tenure::{GroupName, LeaseStore};

use crate::exit::usage;
use crate::store_url::StoreUrl;

/// An open store and what it was opened from.
pub struct Connected {
    /// The URL, for redacted display.
    pub url: StoreUrl,
    /// The store.
    pub store: Arc<dyn LeaseStore>,
}

/// Parses and opens a store that several processes share.
pub async fn open_shared(given: Option<&str>) -> anyhow::Result<Connected> {
    let url = StoreUrl::resolve(given).map_err(usage)?;
    if !url.is_shared() {
        return Err(usage(
            "memory:// lives inside one process, so other tenure processes cannot see it: use a shared store such as sqlite://PATH",
        ));
    }
    let store = url
        .open()
        .await
        .with_context(|| format!("cannot open the store {url}"))?;
    Ok(Connected { url, store })
}

/// Checks a group name.
pub fn group(name: &str) -> anyhow::Result<GroupName> {
    GroupName::new(name).map_err(usage)
}
