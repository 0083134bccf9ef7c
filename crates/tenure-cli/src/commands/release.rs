//! `tenure release`: hand a group's leadership back, always with
//! compare-and-swap on the version read, so nothing written meanwhile is
//! ever overwritten.
//!
//! * Without `--force` the holder must be shown to be gone first, the same
//!   way a challenger decides it may take over: the record stays unchanged
//!   for its term × (1 + 1 %) counted from when we first saw it. A live
//!   holder renews within its term, which changes the version, and we
//!   refuse. Then a released record (no holder, the same token) is written.
//! * `--force` takes leadership away from a holder that may be alive
//!   without ever allowing two valid leaders: it writes an **operator
//!   record**, held by [`OPERATOR`] with the next token and the group's
//!   term. The old holder's next renewal conflicts, so it is superseded and
//!   stops; its term ends by its deadline, one term after its last renewal
//!   at the latest. Candidates treat the operator record like any live
//!   holder's and wait it out (term × 1.01 unchanged) before taking over,
//!   by which time the old holder's deadline has passed.
//! * `--unsafe-clear` writes the released record at once instead. A waiting
//!   candidate then takes over within a round trip while the old holder's
//!   term may still run until its next renewal: two leaders act at once,
//!   and only fencing at the resource (tokens) protects the data.

use std::io::Write;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use tenure::store::CasOutcome;
use tenure::{Clock, GroupName, Holder, LeaseRecord, Metadata, SystemClock, Versioned, WallTime};

use crate::cli::ReleaseArgs;
use crate::connect::{self, Connected};
use crate::exit::refused;
use crate::out;
use crate::view;

/// The clock-drift bound a challenger assumes (the library's default).
const DRIFT: f64 = 0.01;

/// Runs `tenure release`.
pub async fn run(args: ReleaseArgs) -> anyhow::Result<u8> {
    let group = connect::group(&args.group)?;
    let conn = connect::open_shared(args.store.store.as_deref()).await?;
    // Refuse a backend that cannot be written (kafka://) before reading.
    conn.store()?;
    let Some(first) = read(&conn, &group).await? else {
        out::print(&format!(
            "nothing to release: group {group} has no lease record in {}",
            conn.url
        ))?;
        return Ok(0);
    };
    let Some(holder) = first.record.holder.clone() else {
        if let Some(to) = &args.to {
            return transfer(&conn, &group, &first, to, args.force).await;
        }
        out::print(&format!(
            "nothing to release: group {group} is already released (last token {})",
            first.record.token
        ))?;
        return Ok(0);
    };
    let holder_id = view::escape(&holder.id);
    if let Some(to) = &args.to {
        return transfer(&conn, &group, &first, to, args.force).await;
    }
    if args.unsafe_clear {
        warn(&format!(
            "WARNING: --unsafe-clear: clearing group {group} held by {holder_id} (token {}) at once. \
             If that holder is alive, it keeps acting until its next renewal while the next candidate \
             takes over within a round trip: TWO LEADERS AT ONCE. Only fencing at the resource \
             (the next token is higher than {}) protects your data.",
            first.record.token, first.record.token
        ));
    } else if args.force {
        return force(&conn, &group, &first).await;
    } else {
        let wait = first.record.term.mul_f64(1.0 + DRIFT);
        warn(&format!(
            "group {group} is held by {} (token {}); watching the record for {} to make sure its holder is gone…",
            holder_id,
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
        .store()?
        .compare_and_swap(&group, Some(first.version), &released)
        .await
        .with_context(|| format!("cannot write group {group} to {}", conn.url))?;
    match outcome {
        CasOutcome::Applied(_) => {
            let now = SystemTime::now();
            out::print(&format!(
                "released group {group}: cleared holder {} (token {}, last renewed {}); the next leader gets a higher token",
                holder_id,
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

/// `--to ID`: asks the holder to hand over to ID by writing the request
/// into its record (holder and token kept, so its term goes on until it has
/// drained), or, if nobody holds the lease, reserves it for ID for one term.
async fn transfer(
    conn: &Connected,
    group: &GroupName,
    first: &Versioned,
    to: &str,
    force: bool,
) -> anyhow::Result<u8> {
    if to.is_empty() || to.len() > 255 || to.chars().any(char::is_control) {
        return Err(crate::exit::usage(
            "--to: give a candidate id of 1 to 255 bytes without control characters",
        ));
    }
    let to_shown = view::escape(to);
    if first.record.holder_id() == Some(to) {
        return Err(crate::exit::usage(format!(
            "--to {to_shown}: {to_shown} already holds group {group}; name another candidate"
        )));
    }
    if !is_standing(&first.record, to) {
        if !force {
            return Err(refused(format!(
                "--to {to_shown}: tenure cannot see that {to_shown} stands for group {group}: a waiting candidate only reads the store, so no store shows it \
                 (only one asking to preempt by --priority does), and a hand-over to a candidate that is not running leaves the group without a leader for a whole term \
                 ({}); check that {to_shown} runs, then add --force",
                view::short(first.record.term)
            )));
        }
        warn(&format!(
            "warning: --force: handing group {group} to {to_shown} without seeing it stand; if it is not running, the group has no leader for {}",
            view::short(first.record.term)
        ));
    }
    // A live holder renews every third of its term, so the version read
    // may be gone by the time the write arrives: read again and retry.
    let mut current = first.clone();
    for _ in 0..FORCE_ATTEMPTS {
        // An operator's request, not a candidate's preemption (no
        // priority: one a candidate's request left there would let a
        // candidate of higher priority overwrite the operator's choice),
        // marked as a rewrite so that it delays no takeover.
        let mut record = current
            .record
            .with_request(current.rewrite_base(), to, None);
        if record.holder.is_none() {
            // A reservation lasts one term from now (a release's record,
            // not a rewrite of a holder's).
            record.metadata.remove(tenure::record::REWRITTEN_OVER_KEY);
            record.renewed_at = WallTime::now();
            record.expires_at = WallTime::now() + record.term;
        }
        let outcome = conn
            .store()?
            .compare_and_swap(group, Some(current.version), &record)
            .await
            .with_context(|| format!("cannot write group {group} to {}", conn.url))?;
        match (outcome, &current.record.holder) {
            (CasOutcome::Applied(_), Some(holder)) => {
                out::print(&format!(
                    "asked {} (token {}) to hand group {group} over to {to_shown}: it drains its work and releases the lease reserved for {to_shown} at its next look (within a third of its term, at once with a change feed)",
                    view::escape(&holder.id),
                    current.record.token
                ))?;
                return Ok(0);
            }
            (CasOutcome::Applied(_), None) => {
                out::print(&format!(
                    "reserved group {group} for {to_shown} for one term ({}); after that anyone may take it",
                    view::short(current.record.term)
                ))?;
                return Ok(0);
            }
            (CasOutcome::Conflict, _) => match read(conn, group).await? {
                Some(now) => current = now,
                None => return changed(group, first, None),
            },
        }
    }
    let now = read(conn, group).await?;
    changed(group, first, now.as_ref())
}

/// Whether the store shows that candidate `to` stands: only a candidate
/// asking the holder to hand over by its priority (the preemption room)
/// leaves a trace; a candidate that waits only reads.
fn is_standing(record: &LeaseRecord, to: &str) -> bool {
    record.transfer_to() == Some(to)
        && record
            .metadata
            .get(tenure::record::TRANSFER_PRIORITY_KEY)
            .is_some()
}

/// The holder of the record `--force` writes.
pub const OPERATOR: &str = "operator:tenure-release-force";

/// `--force`: supersedes the holder with an operator record that candidates
/// wait out for one term, so the old holder stops before anyone starts.
async fn force(conn: &Connected, group: &GroupName, first: &Versioned) -> anyhow::Result<u8> {
    // A live holder renews every third of its term, so the version read may
    // be gone by the time the write arrives: read again and retry, a few
    // times, as long as someone holds the lease.
    let mut current = first.clone();
    for _ in 0..FORCE_ATTEMPTS {
        let old = &current.record;
        let Some(holder) = old.holder.as_ref() else {
            out::print(&format!(
                "nothing to do: group {group} was released meanwhile (last token {})",
                old.token
            ))?;
            return Ok(0);
        };
        let old_id = view::escape(&holder.id);
        let Some(token) = old.token.checked_add(1) else {
            anyhow::bail!(
                "group {group} is at the largest fencing token ({}); no later term can be fenced: \
                 move the group to a new name",
                old.token
            );
        };
        let now = WallTime::now();
        let operator = LeaseRecord {
            holder: Some(Holder {
                id: OPERATOR.to_owned(),
                incarnation: rand::random(),
            }),
            token,
            term: old.term,
            renewed_at: now,
            expires_at: now + old.term,
            metadata: Metadata::new().with("reason", "tenure release --force"),
        };
        let outcome = conn
            .store()?
            .compare_and_swap(group, Some(current.version), &operator)
            .await
            .with_context(|| format!("cannot write group {group} to {}", conn.url))?;
        if let CasOutcome::Applied(_) = outcome {
            let wait = old.term.mul_f64(1.0 + DRIFT);
            warn(&format!(
                "warning: took group {group} away from {old_id} (token {}) without checking that it is gone: \
                 a live holder is superseded at its next renewal and stops its work by its deadline.",
                old.token
            ));
            out::print(&format!(
                "forced group {group}: {old_id} (token {}) is superseded by an operator record (token {token}); \
                 candidates wait it out for {} before the next one takes over with a higher token, \
                 so the old holder's term has ended first",
                old.token,
                view::short(wait)
            ))?;
            return Ok(0);
        }
        match read(conn, group).await? {
            Some(v) => current = v,
            None => {
                return Err(refused(format!(
                "the record of group {group} disappeared while tenure wrote it; leaving it alone"
            )))
            }
        }
    }
    Err(refused(format!(
        "group {group} changed {FORCE_ATTEMPTS} times while tenure tried to write it; try again"
    )))
}

/// How often `--force` retries a write that a renewal beat.
const FORCE_ATTEMPTS: usize = 5;

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
    let before = view::escape(first.record.holder_id().unwrap_or("?"));
    match now.map(|v| (&v.record.holder, v.record.token)) {
        Some((Some(h), token)) if Some(h) == first.record.holder.as_ref() => {
            Err(refused(format!(
                "group {group} is held by {} (token {token}), which renewed its lease while tenure watched, so it is alive: stop that process, or use --force to take leadership away from it",
                view::escape(&h.id)
            )))
        }
        Some((Some(h), token)) => Err(refused(format!(
            "group {group} changed hands while tenure watched: {before} was replaced by {} (token {token}), which is alive; stop that process, or use --force",
            view::escape(&h.id)
        ))),
        Some((None, token)) => {
            out::print(&format!(
                "nothing to do: {before} released group {group} itself (last token {token})"
            ))?;
            Ok(0)
        }
        None => Err(refused(format!(
            "the record of group {group} disappeared while tenure watched; leaving it alone"
        ))),
    }
}

async fn read(conn: &Connected, group: &GroupName) -> anyhow::Result<Option<Versioned>> {
    conn.view()
        .read(group)
        .await
        .with_context(|| format!("cannot read group {group} from {}", conn.url))
}

/// A note for the person at the terminal, on stderr so stdout stays the
/// result.
fn warn(text: &str) {
    // Nothing useful to do if stderr is gone.
    let _ = writeln!(std::io::stderr(), "{text}");
}
