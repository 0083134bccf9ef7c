//! `tenure run --metadata-file PATH`: metadata kept in a file, published
//! again when the file changes or tenure gets SIGUSR1 (an address that
//! moved, a version that was deployed), so a leader need not restart to
//! tell its followers.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use tenure::{Elector, Metadata};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// How often the file's modification time is checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Reads `KEY=VALUE` lines (blank lines and `#` comments skipped) on top of
/// `base`.
pub fn read(path: &Path, base: &Metadata) -> anyhow::Result<Metadata> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the metadata file {}", path.display()))?;
    let mut md = base.clone();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .with_context(|| format!("{} line {}: expected KEY=VALUE", path.display(), n + 1))?;
        md.insert(key.trim(), value.trim());
    }
    md.validate_published()
        .with_context(|| format!("the metadata in {}", path.display()))?;
    Ok(md)
}

/// Publishes the file's metadata through whichever elector is current,
/// whenever the file changes or SIGUSR1 arrives. Runs until the runtime
/// ends.
pub async fn follow(path: PathBuf, base: Metadata, electors: watch::Receiver<Option<Elector>>) {
    let mut usr1 = match signal(SignalKind::user_defined1()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGUSR1; the metadata file is still checked for changes");
            None
        }
    };
    let mut seen = modified(&path);
    let mut ticks = tokio::time::interval(CHECK_EVERY);
    loop {
        let forced = tokio::select! {
            _ = ticks.tick() => false,
            Some(()) = async { match usr1.as_mut() { Some(s) => s.recv().await, None => std::future::pending().await } } => true,
        };
        let now = modified(&path);
        if !forced && now == seen {
            continue;
        }
        seen = now;
        match read(&path, &base) {
            Ok(md) => {
                let current = electors.borrow().clone();
                if let Some(elector) = current {
                    match elector.set_metadata(md) {
                        Ok(()) => {
                            tracing::info!(path = %path.display(), "published the metadata file")
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot publish the metadata file"),
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "keeping the metadata published before")
            }
        }
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
