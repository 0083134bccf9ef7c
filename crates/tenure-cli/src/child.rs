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
//! * tenure killed: CMD itself dies through `PR_SET_PDEATHSIG` (set between
//!   fork and exec), and a small watchdog process, which holds the read end
//!   of a pipe from tenure, sees end-of-file and kills the rest of the group;
//! * orphans: tenure is a child subreaper, so grandchildren whose parent
//!   exited are re-parented to tenure and reaped here, even where PID 1 does
//!   not reap (containers), and "the group is gone" can be observed.
//!
//! A process that leaves the group (setsid, setpgid) escapes all three, as
//! it escapes any process-group supervisor; a cgroup is the tool for that.

use std::ffi::OsString;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tenure::{Clock, MonoTime, SystemClock, Term};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};

use crate::signals::Stop;

/// How often a stopping group is checked for remaining processes.
const POLL: Duration = Duration::from_millis(5);

/// What the watchdog reads on stdin to exit without killing.
pub const DISARM: &str = "disarm";

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
}

/// CMD and its process group.
pub struct Supervised {
    child: Child,
    pgid: libc::pid_t,
    status: Option<ExitStatus>,
    watchdog: Option<Watchdog>,
    gone: bool,
}

impl Supervised {
    /// Starts `argv` in a new process group with `env` added, stdin closed.
    pub fn spawn(argv: &[OsString], env: &[(String, String)]) -> io::Result<Supervised> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command given"))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            // A child in its own process group that reads the terminal
            // would be stopped by SIGTTIN; supervised work gets no stdin.
            .stdin(Stdio::null())
            .process_group(0)
            // Covers error paths that drop the handle; the group is handled
            // by `Drop` below.
            .kill_on_drop(true);
        let parent = std::process::id();
        // SAFETY: the closure runs between fork and exec and calls only
        // async-signal-safe functions (prctl, getppid); it allocates nothing.
        unsafe {
            cmd.pre_exec(move || die_with_parent(parent));
        }
        let child = cmd.spawn()?;
        let pgid = child
            .id()
            .and_then(|p| libc::pid_t::try_from(p).ok())
            .ok_or_else(|| io::Error::other("the child exited before its pid was known"))?;
        let watchdog = match Watchdog::spawn(pgid) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, pgid, "cannot start the watchdog: if tenure is killed, CMD dies but its own children may survive");
                None
            }
        };
        Ok(Supervised {
            child,
            pgid,
            status: None,
            watchdog,
            gone: false,
        })
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
            let rc = unsafe {
                libc::waitid(
                    libc::P_PGID,
                    self.pgid as libc::id_t,
                    &mut info,
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
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        }
    }

    /// Stops the whole group as `plan` says and returns once no process of
    /// it is left.
    pub async fn stop(&mut self, plan: StopPlan<'_>) -> StopReport {
        let clock = SystemClock;
        let start = clock.now().mono;
        let grace_end = start + plan.grace;
        signal_group(self.pgid, libc::SIGTERM);
        let mut killed = false;
        loop {
            self.reap();
            let now = clock.now().mono;
            if self.status.is_some() && group_gone(self.pgid) {
                self.gone = true;
                self.disarm().await;
                let left = plan
                    .term
                    .map(|t| t.deadline_mono().saturating_since(clock.now().mono));
                return StopReport {
                    status: self.status,
                    killed,
                    took: now.saturating_since(start),
                    left,
                };
            }
            let kill_at = kill_instant(&plan, grace_end);
            if !killed && now >= kill_at {
                signal_group(self.pgid, libc::SIGKILL);
                killed = true;
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
        let rc = unsafe { libc::waitpid(-pgid, &mut status, libc::WNOHANG) };
        if rc <= 0 {
            return;
        }
    }
}

/// The `tenure watchdog` process guarding one group.
struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    fn spawn(pgid: libc::pid_t) -> io::Result<Watchdog> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .arg("watchdog")
            .arg("--pgid")
            .arg(pgid.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // Its own group: neither the terminal's ^C nor the SIGTERM sent to
            // CMD's group reaches it.
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Tells the watchdog the group is gone, and reaps it.
    async fn disarm(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(format!("{DISARM}\n").as_bytes()).await;
            let _ = stdin.flush().await;
        }
        // tokio reaps it in the background if it takes longer.
        let _ = tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await;
    }
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
