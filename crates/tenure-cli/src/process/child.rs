//! Process-group supervision: CMD runs as the leader of its own process
//! group, and "stop CMD" means the whole group, grandchildren included, is
//! gone — not just the one process we started (consul #2022: a shell's
//! background jobs outlived it; #9788: the stop came far too late).
//!
//! Three layers, because no single one covers every way tenure can end:
//!
//! * tenure alive: [`Supervised::stop`] sends SIGTERM to the group, then
//!   SIGKILL at the earlier of the grace and the term's deadline minus a
//!   margin, and waits until no process of the group is left;
//! * tenure killed, frozen or wedged: CMD itself dies with tenure through
//!   `PR_SET_PDEATHSIG` (set between fork and exec), and a small watchdog
//!   process ([`watchdog`](super::watchdog)) kills the whole group when
//!   tenure dies or when the term's deadline minus half the kill margin
//!   passes without tenure having told it a later one (half: a working
//!   tenure kills at the deadline minus the whole margin, so the watchdog
//!   only ever acts for a tenure that could not). CMD's process starts as
//!   an exec gate ([`gate`]) that becomes CMD only once the watchdog is
//!   armed, so no instant exists in which CMD could start children that
//!   nothing would end;
//! * orphans: tenure is a child subreaper, so grandchildren whose parent
//!   exited are re-parented to tenure and reaped here, even where PID 1 does
//!   not reap (containers), and "the group is gone" can be observed.
//!
//! A process that leaves the group (setsid, setpgid) escapes all three, as
//! it escapes any process-group supervisor; a cgroup is the tool for that.
//! So does a member tenure may not signal (a setuid program that switched
//! its real user, such as `su` or `sudo`: `kill` fails with EPERM) or one
//! that does not die (uninterruptible sleep): [`Supervised::stop`] waits
//! for such a group only [`KILL_WAIT`] after SIGKILL, then reports the
//! members left and returns, so tenure still releases and exits.
//!
//! CMD never sees the store URL: `TENURE_STORE` (which may carry a
//! password) is removed from its environment.
//!
//! This module (with [`watchdog`](super::watchdog)) is where the command's
//! unsafe code lives: std has no call for process groups' signals,
//! subreaping, the parent-death signal or `waitid`, so they are libc calls
//! here, each with why it is sound; the rest of the command signals and
//! spawns through the helpers below.
#![allow(
    unsafe_code,
    reason = "the process-group, signal and reaping system calls std does not offer"
)]

use std::ffi::OsString;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;
use tenure::{Clock, MonoTime, SystemClock, Term};
use tokio::process::{Child, ChildStdout, Command};

use crate::process::gate::{self, Gate};
use crate::process::watchdog::Watchdog;
use crate::signals::Stop;

/// How often a stopping group is checked for remaining processes.
const POLL: Duration = Duration::from_millis(5);

/// How long a new watchdog may take to say it is armed: it only has to
/// start and read its arguments, so this much means the machine cannot run
/// it, and CMD must not start unguarded.
pub const ARM_WAIT: Duration = Duration::from_secs(5);

/// How long after SIGKILL a stop waits for the group to be gone before it
/// gives up on members it may not signal or that do not die.
pub const KILL_WAIT: Duration = Duration::from_secs(1);

/// Variables of tenure's own environment that CMD must not inherit: the
/// store URL may carry a password.
const WITHHELD_FROM_CMD: &[&str] = &["TENURE_STORE"];

/// Makes this process the reaper of its orphaned descendants.
pub fn become_subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and touches no
    // memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        tracing::warn!(error = %io::Error::last_os_error(), "cannot become a child subreaper; orphaned grandchildren are left to init");
    }
}

/// How to stop a group.
#[derive(Clone, Copy)]
pub struct StopPlan<'a> {
    /// Time from SIGTERM to SIGKILL, if the term allows it.
    pub grace: Duration,
    /// The term the work ran under: SIGKILL lands no later than its
    /// deadline minus `margin`. The deadline is read afresh while stopping,
    /// since renewals move it later until the term ends.
    pub term: Option<&'a Term>,
    /// How long before the deadline the group must be dead.
    pub margin: Duration,
    /// A second SIGINT/SIGTERM to tenure skips the rest of the grace.
    pub hurry: Option<&'a Stop>,
}

/// How a stop went.
#[derive(Debug, Clone)]
pub struct StopReport {
    /// The exit status of the process tenure started.
    pub status: Option<ExitStatus>,
    /// Whether SIGKILL was needed.
    pub killed: bool,
    /// From SIGTERM to the group being gone.
    pub took: Duration,
    /// Time left before the term's deadline when the group was gone
    /// (`Some(ZERO)`: at or after it).
    pub left: Option<Duration>,
    /// Members still alive when the stop gave up ([`KILL_WAIT`] after
    /// SIGKILL): processes tenure may not signal, or that do not die.
    /// Empty when the group is gone.
    pub stuck: Vec<libc::pid_t>,
}

/// CMD and its process group.
pub struct Supervised {
    child: Child,
    pgid: libc::pid_t,
    status: Option<ExitStatus>,
    watchdog: Option<Watchdog>,
    /// How long before the term's deadline the watchdog kills the group:
    /// half of tenure's own margin.
    watchdog_margin: Duration,
    gone: bool,
}

impl Supervised {
    /// Starts `argv` in a new process group with `env` added (and
    /// `TENURE_STORE` removed), stdin closed, guarded by a watchdog that
    /// kills the group at `term`'s deadline minus half of `margin` unless
    /// [`follow`](Supervised::follow) tells it of a later deadline.
    ///
    /// CMD runs no instruction before the watchdog is armed: its process
    /// starts as the [`gate`], and this returns once the watchdog has said
    /// it is armed, with the gate still closed. [`Gate::open`] lets CMD
    /// run. Dropping the returned [`Supervised`] kills the group. A
    /// watchdog that cannot start or arm (within [`ARM_WAIT`]) fails the
    /// start: CMD never runs without one.
    pub async fn spawn(
        argv: &[OsString],
        env: &[(String, String)],
        term: &Term,
        margin: Duration,
    ) -> io::Result<(Supervised, Gate)> {
        let (mut cmd, gate) = gate::command(argv)?;
        for var in WITHHELD_FROM_CMD {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)))
            .process_group(0)
            // Covers error paths that drop the handle; the group is handled
            // by `Drop` below.
            .kill_on_drop(true);
        dies_with_us(&mut cmd);
        let child = cmd.spawn().map_err(|e| {
            io::Error::new(e.kind(), format!("cannot start tenure's exec gate: {e}"))
        })?;
        // The command holds a copy of the gate's end of the stream, which
        // must close when CMD starts.
        drop(cmd);
        let pgid = child
            .id()
            .and_then(|p| libc::pid_t::try_from(p).ok())
            .ok_or_else(|| io::Error::other("the exec gate exited before its pid was known"))?;
        let watchdog_margin = margin / 2;
        // From here on, an early return drops this and kills the group.
        let mut supervised = Supervised {
            child,
            pgid,
            status: None,
            watchdog: None,
            watchdog_margin,
            gone: false,
        };
        let unguarded = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("the watchdog that enforces the term's deadline did not start: {e}"),
            )
        };
        let mut watchdog =
            Watchdog::spawn(pgid, term.deadline_mono() - watchdog_margin).map_err(unguarded)?;
        watchdog.armed(ARM_WAIT).await.map_err(unguarded)?;
        supervised.watchdog = Some(watchdog);
        Ok((supervised, gate))
    }

    /// Passes the term's current deadline on to the watchdog, if renewals
    /// moved it. Call it often (well within a renewal interval).
    pub async fn follow(&mut self, term: &Term) {
        let kill_at = term.deadline_mono() - self.watchdog_margin;
        if let Some(w) = self.watchdog.as_mut() {
            w.extend(kill_at).await;
        }
    }

    /// The pid of the process tenure started, which is also the group id.
    pub fn pid(&self) -> libc::pid_t {
        self.pgid
    }

    /// Waits for the started process to exit (the rest of the group may
    /// live on). Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let s = self.child.wait().await?;
        self.status = Some(s);
        Ok(s)
    }

    /// Reaps members of the group that were orphaned (their parent exited)
    /// and have since exited themselves. As a subreaper tenure inherits
    /// them; left alone they would pile up as zombies while CMD runs. The
    /// started process itself is left to tokio.
    pub fn reap_orphans(&mut self) {
        loop {
            // SAFETY: an all-zero siginfo_t is a valid value; waitid writes
            // into it, and WNOWAIT only peeks, so nothing is reaped here.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `info` is a valid out-pointer; P_PGID takes the group
            // id as an integer.
            let rc = unsafe {
                libc::waitid(
                    libc::P_PGID,
                    self.pgid as libc::id_t,
                    &raw mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            // SAFETY: after a successful waitid with WEXITED, si_pid is the
            // field that is set (0 when no child has exited).
            let pid = if rc == 0 { unsafe { info.si_pid() } } else { 0 };
            if pid <= 0 || pid == self.pgid {
                return;
            }
            let mut status = 0;
            // SAFETY: reaps exactly the exited orphan just peeked at.
            unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
        }
    }

    /// Stops the whole group as `plan` says and returns once no process of
    /// it is left.
    ///
    /// Bounded: [`KILL_WAIT`] after SIGKILL it stops waiting for members
    /// that are still there (tenure may not signal them, or they do not
    /// die) and reports them in [`StopReport::stuck`].
    pub async fn stop(&mut self, plan: StopPlan<'_>) -> StopReport {
        let clock = SystemClock;
        let start = clock.now().mono;
        let grace_end = start + plan.grace;
        signal_group(self.pgid, libc::SIGTERM);
        let mut killed_at: Option<MonoTime> = None;
        loop {
            self.reap();
            if let Some(term) = plan.term {
                // Renewals during a graceful stop move the deadline, and
                // the watchdog must not cut the grace at a stale one.
                self.follow(term).await;
            }
            let now = clock.now().mono;
            let gone = self.status.is_some() && group_gone(self.pgid);
            let given_up = killed_at.is_some_and(|at| now >= at + KILL_WAIT);
            if gone || given_up {
                let stuck = if gone {
                    Vec::new()
                } else {
                    live_members(self.pgid)
                };
                // Members left are beyond the watchdog's reach too.
                self.gone = true;
                self.disarm().await;
                let left = plan
                    .term
                    .map(|t| t.deadline_mono().saturating_since(clock.now().mono));
                return StopReport {
                    status: self.status,
                    killed: killed_at.is_some(),
                    took: now.saturating_since(start),
                    left,
                    stuck,
                };
            }
            let killed = killed_at.is_some();
            let kill_at = kill_instant(&plan, grace_end);
            if !killed && now >= kill_at {
                signal_group(self.pgid, libc::SIGKILL);
                killed_at = Some(now);
                continue;
            }
            let wake = if killed {
                now + POLL
            } else {
                (now + POLL).min(kill_at)
            };
            clock.sleep_until(wake).await;
        }
    }

    /// Collects exit statuses: the started process through tokio (which
    /// owns it), then any group members re-parented to us.
    fn reap(&mut self) {
        if self.status.is_none() {
            match self.child.try_wait() {
                Ok(Some(s)) => self.status = Some(s),
                Ok(None) => {}
                Err(e) => {
                    // Not ours to wait for any more; treat it as gone.
                    tracing::warn!(error = %e, pid = self.pgid, "cannot wait for the child");
                    self.status = Some(ExitStatus::default());
                }
            }
        }
        // Only after tokio has the started process's status: waitpid on the
        // group would otherwise take it from under tokio.
        if self.status.is_some() {
            reap_group(self.pgid);
        }
    }

    async fn disarm(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.disarm().await;
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // Reached without a completed stop only on error paths: leave
        // nothing running.
        if !self.gone {
            signal_group(self.pgid, libc::SIGKILL);
        }
    }
}

/// When SIGKILL must be sent: the grace's end, the term's deadline minus
/// the margin, or now after a second signal, whichever comes first.
fn kill_instant(plan: &StopPlan<'_>, grace_end: MonoTime) -> MonoTime {
    let mut at = grace_end;
    if let Some(term) = plan.term {
        at = at.min(term.deadline_mono() - plan.margin);
    }
    if plan.hurry.is_some_and(Stop::is_hurried) {
        at = MonoTime::from_nanos(0);
    }
    at
}

/// Runs in the forked child before exec: die with tenure, and do not start
/// at all if tenure is already gone (the signal is only armed from now on).
pub fn die_with_parent(parent: u32) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number; getppid has
    // no arguments. Both are async-signal-safe.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        if u32::try_from(libc::getppid()).ok() != Some(parent) {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// Has `cmd`'s process die with this one (and not start at all if this one
/// is already gone), for the candidate and member processes the demo and
/// the benchmarks start.
pub fn dies_with_us(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || die_with_parent(parent));
    }
}

/// A command that runs this very tenure executable again (for the exec
/// gate and the watchdog): `/proc/self/exe` names the file this process
/// runs even after a package upgrade replaced or removed it at its path,
/// where the path it was started from would name a file that is gone or a
/// different version. `ps` shows that path. Never a `tenure` looked up on
/// `PATH`, which may be another version or nothing at all: without
/// `/proc`, this fails naming the cause.
pub fn tenure_itself() -> io::Result<Command> {
    const PROC_SELF: &str = "/proc/self/exe";
    if !std::path::Path::new(PROC_SELF).exists() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "cannot run tenure's own executable: {PROC_SELF} is missing (is /proc mounted?)"
            ),
        ));
    }
    let mut cmd = Command::new(PROC_SELF);
    if let Ok(path) = std::env::current_exe() {
        cmd.arg0(path);
    }
    Ok(cmd)
}

/// A helper process this one started (a demo candidate, a benchmark
/// member): its handle, its pid, and its stdout to read reports from.
pub struct Helper {
    pub child: Child,
    pub pid: libc::pid_t,
    pub stdout: ChildStdout,
}

/// Starts `cmd` as a helper of this process (`what` names it in errors):
/// stdin closed, stdout piped to us, killed when its handle is dropped, and
/// dying with this process ([`dies_with_us`]).
pub fn spawn_helper(cmd: &mut Command, what: &str) -> anyhow::Result<Helper> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    dies_with_us(cmd);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start a {what} process"))?;
    let pid = child
        .id()
        .and_then(|p| libc::pid_t::try_from(p).ok())
        .with_context(|| format!("a {what} exited at once"))?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    Ok(Helper { child, pid, stdout })
}

/// Sends `sig` to one process of ours, `pid`: a child we spawned and have
/// not reaped, so its pid cannot have been reused. Ids that would reach
/// more than one process (0, -1, a group) are refused.
pub fn signal_child(pid: libc::pid_t, sig: libc::c_int) {
    if pid > 1 {
        // SAFETY: kill takes plain integers.
        let _ = unsafe { libc::kill(pid, sig) };
    }
}

/// [`signal_child`] for a tokio child, if it has not been reaped.
pub fn signal_tokio_child(child: &Child, sig: libc::c_int) {
    if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
        signal_child(pid, sig);
    }
}

/// Sends `sig` to every process of group `pgid`.
pub fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    // kill(-1) would signal every process we may signal, and kill(0) our
    // own group: never let a bad id get there.
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill takes plain integers.
    let _ = unsafe { libc::kill(-pgid, sig) };
}

/// Whether no process of group `pgid` exists any more (zombies count as
/// existing until reaped).
pub fn group_gone(pgid: libc::pid_t) -> bool {
    if pgid <= 1 {
        return true;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(-pgid, 0) };
    rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Reaps exited members of group `pgid` that are our children (re-parented
/// orphans, thanks to the subreaper flag).
fn reap_group(pgid: libc::pid_t) {
    if pgid <= 1 {
        return;
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`.
        let rc = unsafe { libc::waitpid(-pgid, &raw mut status, libc::WNOHANG) };
        if rc <= 0 {
            return;
        }
    }
}

/// Live (not zombie) members of group `pgid`, from /proc, for reporting
/// the ones a stop could not end.
fn live_members(pgid: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<libc::pid_t>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse::<libc::pid_t>() == Ok(pgid) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_signals_everything() {
        // These must be no-ops; if they were not, this test process (and
        // more) would be killed.
        signal_group(-1, 0);
        signal_group(0, 0);
        signal_group(1, 0);
        assert!(group_gone(0));
        assert!(group_gone(-5));
    }

    #[test]
    fn kill_instant_respects_grace_and_hurry() {
        let plan = StopPlan {
            grace: Duration::from_secs(2),
            term: None,
            margin: Duration::from_millis(50),
            hurry: None,
        };
        let end = MonoTime::from_nanos(5_000);
        assert_eq!(kill_instant(&plan, end), end);
    }
}
