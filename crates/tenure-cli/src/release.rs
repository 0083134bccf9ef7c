//! `tenure release`: hand a group's leadership back by writing a released
//! record (no holder, the same token) with compare-and-swap on the version
//! read, so nothing written meanwhile is ever overwritten.
//!
//! Without `--force` the holder must be shown to be gone first, the same way
//! a challenger decides it may take over: the record stays unchanged for its
//! term × (1 + 1 %) counted from when we first saw it. A live holder renews
//! within its term, which changes the version, and we refuse.

use std::io::Write;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use tenure::{
    CasOutcome, Clock, GroupName, LeaseRecord, LeaseStore, Metadata, SystemClock, Versioned,
    WallTime,
};

use crate::cli::ReleaseArgs;
use crate::connect::{self, Connected};
use crate::exit::Refused;
use crate::out;
use crate::view;

/// The clock-drift bound a challenger assumes (the library's default).
const DRIFT: f64 = 0.01;

/// Runs `tenure release`.
pub async fn run(args: ReleaseArgs) -> anyhow::Result<u8> {
    let group = connect::group(&args.group)?;
    let conn = connect::open_shared(args.store.store.as_deref()).await?;
    let Some(first) = read(&conn, &group).await? else {
        out::print(&format!(
            "nothing to release: group {group} has no lease record in {}",
            conn.url
        ))?;
        return Ok(0);
    };
    let Some(holder) = first.record.holder.clone() else {
        out::print(&format!(
            "nothing to release: group {group} is already released (last token {})",
            first.record.token
        ))?;
        return Ok(0);
    };
    if args.force {
        warn(&format!(
            "warning: releasing group {group} held by {} (token {}) without checking that it is gone; \
             a live holder is superseded at its next renewal and told to stop its work then. \
             Fencing still holds: the next leader's token will be higher than {}.",
            holder.id, first.record.token, first.record.token
        ));
    } else {
        let wait = first.record.term.mul_f64(1.0 + DRIFT);
        warn(&format!(
            "group {group} is held by {} (token {}); watching the record for {} to make sure its holder is gone…",
            holder.id,
            first.record.token,
            view::short(wait)
        ));
        if let Some(refusal) = watch_unchanged(&conn, &group, &first, wait).await? {
            return refusal;
        }
    }
    let released = LeaseRecord {
        holder: None,
        token: first.record.token,
        term: first.record.term,
        renewed_at: WallTime::now(),
        expires_at: WallTime::now(),
        metadata: Metadata::new(),
    };
    let outcome = conn
        .store
        .compare_and_swap(&group, Some(first.version), &released)
        .await
        .with_context(|| format!("cannot write group {group} to {}", conn.url))?;
    match outcome {
        CasOutcome::Applied(_) => {
            let now = SystemTime::now();
            out::print(&format!(
                "released group {group}: cleared holder {} (token {}, last renewed {}); the next leader gets a higher token",
                holder.id,
                first.record.token,
                view::relative(now, first.record.renewed_at.to_system_time()),
            ))?;
            Ok(0)
        }
        CasOutcome::Conflict => {
            let now = read(&conn, &group).await?;
            changed(&group, &first, now.as_ref())
        }
    }
}

/// Watches the record for `wait`; `Some(exit)` if it changed meanwhile.
async fn watch_unchanged(
    conn: &Connected,
    group: &GroupName,
    first: &Versioned,
    wait: Duration,
) -> anyhow::Result<Option<anyhow::Result<u8>>> {
    let clock = SystemClock;
    // Counted from after the first read returned, as a challenger counts.
    let until = clock.now().mono + wait;
    let step = (wait / 20).clamp(Duration::from_millis(10), Duration::from_millis(250));
    loop {
        let now = clock.now().mono;
        if now >= until {
            return Ok(None);
        }
        clock.sleep_until((now + step).min(until)).await;
        let current = read(conn, group).await?;
        if current.as_ref().map(|v| v.version) != Some(first.version) {
            return Ok(Some(changed(group, first, current.as_ref())));
        }
    }
}

/// The outcome when the record changed under us.
fn changed(group: &GroupName, first: &Versioned, now: Option<&Versioned>) -> anyhow::Result<u8> {
    let before = first.record.holder_id().unwrap_or("?");
    match now.map(|v| (&v.record.holder, v.record.token)) {
        Some((Some(h), token)) if Some(h) == first.record.holder.as_ref() => {
            Err(Refused(format!(
                "group {group} is held by {} (token {token}), which renewed its lease while tenure watched, so it is alive: stop that process, or use --force to take leadership away from it",
                h.id
            ))
            .into())
        }
        Some((Some(h), token)) => Err(Refused(format!(
            "group {group} changed hands while tenure watched: {before} was replaced by {} (token {token}), which is alive; stop that process, or use --force",
            h.id
        ))
        .into()),
        Some((None, token)) => {
            out::print(&format!(
                "nothing to do: {before} released group {group} itself (last token {token})"
            ))?;
            Ok(0)
        }
        None => Err(Refused(format!(
            "the record of group {group} disappeared while tenure watched; leaving it alone"
        ))
        .into()),
    }
}

async fn read(conn: &Connected, group: &GroupName) -> anyhow::Result<Option<Versioned>> {
    LeaseStore::read(&conn.store, group)
        .await
        .with_context(|| format!("cannot read group {group} from {}", conn.url))
}

/// A note for the person at the terminal, on stderr so stdout stays the
/// result.
fn warn(text: &str) {
    // Nothing useful to do if stderr is gone.
    let _ = writeln!(std::io::stderr(), "{text}");
}
