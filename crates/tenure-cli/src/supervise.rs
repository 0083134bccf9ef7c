//! One term's run of CMD: start it in its own process group, pass renewed
//! deadlines to its watchdog, and stop the whole group before the term's
//! deadline when the term ends or tenure is stopped. Shared by `tenure run`
//! for one group, for shards (one CMD per held shard) and for slots.

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant, UNIX_EPOCH};

use tenure::Term;

use crate::child::{StopPlan, StopReport, Supervised};
use crate::signals::Stop;
use crate::view;

/// How often exited orphans of CMD's group are reaped while CMD runs.
const ORPHAN_REAP_EVERY: Duration = Duration::from_secs(1);

/// What runs under a term, and how it is stopped.
#[derive(Clone, Debug)]
pub struct CmdPlan {
    /// CMD and its arguments.
    pub command: Vec<OsString>,
    /// SIGTERM to SIGKILL, cut short by the deadline.
    pub kill_grace: Duration,
    /// How long before the deadline the group must be dead.
    pub margin: Duration,
    /// How often renewed deadlines reach the watchdog.
    pub follow_every: Duration,
}

/// How one term's run of CMD ended.
pub enum Ran {
    /// tenure was told to stop; the group is gone.
    Stopped,
    /// The term ended first; the group is gone.
    Lost,
    /// CMD exited on its own after `ran`; the rest of its group is gone.
    Exited { status: ExitStatus, ran: Duration },
    /// CMD could not be started.
    SpawnFailed(io::Error),
}

/// Runs CMD for one term with `env` added.
pub async fn run_term(plan: &CmdPlan, stop: &Stop, term: &Term, env: &[(String, String)]) -> Ran {
    // Held until CMD's group is gone: a graceful hand-over releases the
    // lease only after that.
    let guard = term.hold();
    if term.is_cancelled() {
        // Lost between election and here: do not start what must stop.
        return Ran::Lost;
    }
    let started = Instant::now();
    let mut cmd = match Supervised::spawn(&plan.command, env, term, plan.margin).await {
        Ok(c) => c,
        Err(e) => return Ran::SpawnFailed(e),
    };
    tracing::info!(
        pid = cmd.pid(),
        command = %show_command(&plan.command),
        deadline = %view::rfc3339(term.wall_deadline()),
        "leading: started CMD"
    );
    enum Why {
        Stop,
        Lost,
        Exited(io::Result<ExitStatus>),
    }
    let mut orphans = tokio::time::interval(ORPHAN_REAP_EVERY);
    let mut follow = tokio::time::interval(plan.follow_every);
    follow.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let why = loop {
        tokio::select! {
            biased;
            _ = stop.stopped() => break Why::Stop,
            _ = term.cancelled() => break Why::Lost,
            status = cmd.wait() => break Why::Exited(status),
            _ = follow.tick() => cmd.follow(term).await,
            _ = orphans.tick() => cmd.reap_orphans(),
        }
    };
    let stop_plan = StopPlan {
        grace: plan.kill_grace,
        term: Some(term),
        margin: plan.margin,
        hurry: Some(stop),
    };
    let ran = match why {
        Why::Stop => {
            tracing::info!(pid = cmd.pid(), "stopping CMD's process group");
            report(&cmd.stop(stop_plan).await);
            Ran::Stopped
        }
        Why::Lost => {
            tracing::warn!(
                pid = cmd.pid(),
                left_ms = millis(term.remaining()),
                "leadership ended: stopping CMD's process group before the term's deadline"
            );
            report(&cmd.stop(stop_plan).await);
            Ran::Lost
        }
        Why::Exited(status) => {
            let ran = started.elapsed();
            // Background jobs CMD left behind still run in its group and
            // must not outlive the lease either.
            let stopped = cmd.stop(stop_plan).await;
            let status = match status {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read CMD's exit status");
                    stopped.status.unwrap_or_default()
                }
            };
            Ran::Exited { status, ran }
        }
    };
    drop(guard);
    ran
}

/// The variables every CMD gets about its term.
pub fn term_env(
    group: &str,
    id: &str,
    term: &Term,
    term_length: Duration,
) -> Vec<(String, String)> {
    let deadline = term.wall_deadline();
    let deadline_ms = deadline
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    vec![
        ("TENURE_GROUP".into(), group.to_owned()),
        ("TENURE_ID".into(), id.to_owned()),
        ("TENURE_TOKEN".into(), term.token().to_string()),
        ("TENURE_TERM_MS".into(), term_length.as_millis().to_string()),
        ("TENURE_DEADLINE".into(), view::rfc3339(deadline)),
        ("TENURE_DEADLINE_UNIX_MS".into(), deadline_ms.to_string()),
    ]
}

/// How often the term's deadline is passed on to the watchdog: a
/// twentieth of the term, within [10 ms, 250 ms]. Renewals come every third
/// of a term and the watchdog's instant lies two thirds of a term after
/// the previous one, so an extension reaches it long before it would fire.
pub fn follow_every(term: Duration) -> Duration {
    (term / 20).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

/// Logs how a stop went; the `left_ms` field is how long before the term's
/// deadline the group was gone.
fn report(r: &StopReport) {
    let left = r.left.map(millis);
    if !r.stuck.is_empty() {
        tracing::error!(
            took_ms = millis(r.took),
            stuck = ?r.stuck,
            "members of CMD's process group survived SIGKILL (tenure may not signal them, e.g. a setuid program that switched users, or they do not die); they may outlive the term: stop them by other means"
        );
    } else if r.left.is_some_and(|l| l.is_zero()) {
        tracing::error!(
            took_ms = millis(r.took),
            killed = r.killed,
            "CMD's process group outlived the term's deadline"
        );
    } else {
        tracing::info!(
            took_ms = millis(r.took),
            killed = r.killed,
            left_ms = left,
            status = %r.status.map_or_else(|| "unknown".to_owned(), |s| s.to_string()),
            "CMD's process group is gone"
        );
    }
}

pub fn show_command(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
