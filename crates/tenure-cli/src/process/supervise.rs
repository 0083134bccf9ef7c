//! One term's run of CMD: start it in its own process group, pass renewed
//! deadlines to its watchdog, and stop the whole group before the term's
//! deadline when the term ends or tenure is stopped. Shared by `tenure run`
//! for one group, for shards (one CMD per held shard) and for slots.

use std::ffi::OsString;
use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant, UNIX_EPOCH};

use tenure::{Clock, MonoTime, SystemClock, Term};

use crate::process::child::{StopPlan, StopReport, Supervised};
use crate::process::gate::{Answer, Gate};
use crate::signals::Stop;
use crate::view;

/// How long a gate that went silent is given to exit, for its status in
/// the error.
const GATE_EXIT_WAIT: Duration = Duration::from_secs(1);

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
    /// The term ended before CMD started: nothing of it ran (`--once` may
    /// still run it in a later term).
    LostBeforeStart,
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
    let started = Instant::now();
    let mut cmd = match start(plan, stop, term, env).await {
        Ok(cmd) => cmd,
        Err(ended) => return ended,
    };
    tracing::info!(
        pid = cmd.pid(),
        command = %show_command(&plan.command),
        deadline = %view::rfc3339(term.wall_deadline()),
        "leading: started CMD"
    );
    let stop_plan = stop_plan(plan, stop, term);
    let mut follow = follow_ticks(plan);
    enum Why {
        Stop,
        Lost,
        Exited(io::Result<ExitStatus>),
    }
    let mut orphans = tokio::time::interval(ORPHAN_REAP_EVERY);
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

/// Starts CMD under `term`: its process behind the exec gate, its
/// watchdog armed, then through the gate while the term is live. `Err`
/// with how this term's run ended if CMD did not get to run (its group is
/// gone by then), or may have only just (stopped or lost while the gate
/// answered).
async fn start(
    plan: &CmdPlan,
    stop: &Stop,
    term: &Term,
    env: &[(String, String)],
) -> Result<Supervised, Ran> {
    let stop_plan = stop_plan(plan, stop, term);
    loop {
        until_live(plan, stop, term).await?;
        let (mut cmd, gate) = Supervised::spawn(&plan.command, env, term, plan.margin)
            .await
            .map_err(Ran::SpawnFailed)?;
        let Some(ended) =
            open_gate(&mut cmd, gate, plan, stop, term, &mut follow_ticks(plan)).await
        else {
            return Ok(cmd);
        };
        report(&cmd.stop(stop_plan).await);
        match ended {
            // The term's kill instant came while CMD was being started (a
            // stall): start it once the term is renewed past it, if it is.
            Ran::LostBeforeStart => {
                tracing::warn!("the term's deadline came before CMD could start");
            }
            Ran::Stopped => tracing::info!("stopped before CMD started"),
            _ => {}
        }
        if !matches!(ended, Ran::LostBeforeStart) {
            return Err(ended);
        }
    }
}

/// tenure's kill instant for `term`: CMD's group must be dead by then, so
/// CMD must not start after it.
fn start_by(plan: &CmdPlan, term: &Term) -> MonoTime {
    term.deadline_mono() - plan.margin
}

/// Whether `term` is over for starting CMD: lost, or past [`start_by`].
fn too_late_to_start(plan: &CmdPlan, term: &Term) -> bool {
    term.is_cancelled() || SystemClock.now().mono >= start_by(plan, term)
}

/// Returns once the term is live with tenure's kill instant for it still
/// ahead (at once, unless a stall let it come or renewals are late);
/// `Err` if the term or the run ends first. Looks again every follow
/// interval, so a term that nearly ran out never makes a busy loop.
async fn until_live(plan: &CmdPlan, stop: &Stop, term: &Term) -> Result<(), Ran> {
    loop {
        if term.is_cancelled() {
            // Lost between election and here: do not start what must stop.
            return Err(Ran::LostBeforeStart);
        }
        if !too_late_to_start(plan, term) {
            return Ok(());
        }
        tokio::select! {
            biased;
            _ = stop.stopped() => return Err(Ran::Stopped),
            _ = term.cancelled() => return Err(Ran::LostBeforeStart),
            _ = tokio::time::sleep(plan.follow_every) => {}
        }
    }
}

/// How CMD's group is stopped under `term`: SIGTERM, SIGKILL after the
/// grace or before the deadline, sooner on a second signal.
fn stop_plan<'a>(plan: &CmdPlan, stop: &'a Stop, term: &'a Term) -> StopPlan<'a> {
    StopPlan {
        grace: plan.kill_grace,
        term: Some(term),
        margin: plan.margin,
        hurry: Some(stop),
    }
}

/// The ticks on which renewed deadlines are passed to the watchdog.
fn follow_ticks(plan: &CmdPlan) -> tokio::time::Interval {
    let mut follow = tokio::time::interval(plan.follow_every);
    follow.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    follow
}

/// Lets CMD's process pass its gate, following the term meanwhile (the
/// gate may take long to `exec`: a program on a slow file system).
/// `None` once CMD runs; otherwise how this term's run ended, with the
/// group still to be stopped. CMD starts only while the term is live: the
/// gate refuses it once tenure's own kill instant for the term has passed,
/// so a stall between this look and the gate's cannot start work that
/// must already be dead.
async fn open_gate(
    cmd: &mut Supervised,
    gate: Gate,
    plan: &CmdPlan,
    stop: &Stop,
    term: &Term,
    follow: &mut tokio::time::Interval,
) -> Option<Ran> {
    let opening = gate.open(start_by(plan, term));
    tokio::pin!(opening);
    let answer = loop {
        tokio::select! {
            biased;
            // "go" is out: CMD may be running already.
            _ = stop.stopped() => return Some(Ran::Stopped),
            _ = term.cancelled() => return Some(Ran::Lost),
            answer = &mut opening => break answer,
            _ = follow.tick() => cmd.follow(term).await,
        }
    };
    let failed = |why: String| {
        // A gate that died once the term was over was most likely killed
        // by its watchdog at the deadline: the term was lost, nothing
        // failed to start. Either way it never said "exec": CMD never ran.
        if too_late_to_start(plan, term) {
            Ran::LostBeforeStart
        } else {
            Ran::SpawnFailed(io::Error::other(why))
        }
    };
    match answer {
        Answer::Running => None,
        Answer::Late => Some(Ran::LostBeforeStart),
        Answer::ExecFailed(e) => Some(Ran::SpawnFailed(e)),
        Answer::Silent => {
            let status = match tokio::time::timeout(GATE_EXIT_WAIT, cmd.wait()).await {
                Ok(Ok(status)) => status.to_string(),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "still running".to_owned(),
            };
            Some(failed(format!(
                "tenure's exec gate ended before it started the command ({status})"
            )))
        }
        Answer::Garbled => Some(failed(
            "tenure's exec gate answered something that is not its protocol (is /proc/self/exe this tenure?)".to_owned(),
        )),
    }
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
