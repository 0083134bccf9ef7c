//! The watchdog next to each CMD, both sides of it: [`Watchdog`] is what
//! `tenure run` holds, [`main`] is the hidden `tenure watchdog` process.
#![allow(
    unsafe_code,
    reason = "signal dispositions, the process name and poll(2) on stdin with a timeout, which std does not offer"
)]
//!
//! The watchdog enforces two things whatever state `tenure run` is in
//! (killed, frozen by SIGSTOP, wedged, starved of CPU):
//!
//! * **the term's deadline**: it knows the instant CMD's group must be dead
//!   by (the term's deadline minus tenure's kill margin, on
//!   `CLOCK_BOOTTIME`, which every process of the host shares), and tenure
//!   tells it each later one as renewals extend the term. If that instant
//!   passes without an extension, it kills the whole group. A supervisor
//!   that cannot run cannot stop CMD itself, so without this a frozen
//!   `tenure` would leave CMD working while another candidate's CMD starts;
//! * **tenure's death**: it blocks reading a pipe whose write end only
//!   `tenure run` holds; end-of-file without a "disarm" first means tenure
//!   died (SIGKILL, OOM, crash), and it kills the group at once.
//!
//! Protocol, one line each on the pipe: `kill-at <nanos>` (a new deadline
//! instant, `CLOCK_BOOTTIME` nanoseconds) and `disarm` (the group is gone,
//! exit without killing). The watchdog says `armed` on its stdout once it
//! runs and has taken its arguments; CMD starts only after that.
//!
//! It is a separate executable run rather than a fork of tenure, so it
//! inherits none of tenure's descriptors (listening sockets, the database)
//! and needs no care about forking a multi-threaded process; and it runs
//! with an empty environment, so no store URL or other secret of tenure's
//! reaches it.

use std::io::{self, Write};
use std::process::Stdio;
use std::time::Duration;

use tenure::{Clock, MonoTime, SystemClock};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::cli::WatchdogArgs;
use crate::process::child;

/// The line that makes the watchdog exit without killing.
const DISARM: &str = "disarm";
/// The prefix of a line carrying a new kill instant.
const KILL_AT: &str = "kill-at ";
/// What the watchdog says once it runs and has taken its arguments.
const ARMED: &str = "armed";
/// The longest the watchdog sleeps between looks at the clock, so that
/// time spent in system suspend (which `poll`'s timeout does not count) is
/// noticed within this much.
const SLICE: Duration = Duration::from_millis(100);
/// How long tenure waits to hand the watchdog a line before dropping it:
/// a watchdog that does not read is stuck, and tenure must not be.
const WRITE_WAIT: Duration = Duration::from_millis(100);
/// Longest line the watchdog keeps; longer ones are garbage and dropped.
const MAX_LINE: usize = 256;

/// The `tenure watchdog` process guarding one group, as tenure holds it.
pub struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Where it says it is armed; read once, then dropped.
    stdout: Option<ChildStdout>,
    /// The last kill instant the watchdog was told.
    kill_at: MonoTime,
}

impl Watchdog {
    /// Starts a watchdog for group `pgid` that kills it at `kill_at` unless
    /// told a later instant first.
    pub fn spawn(pgid: libc::pid_t, kill_at: MonoTime) -> io::Result<Watchdog> {
        let mut child = child::tenure_itself()?
            .arg("watchdog")
            .arg("--pgid")
            .arg(pgid.to_string())
            .arg("--kill-at")
            .arg(kill_at.as_nanos().to_string())
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // Its own group: neither the terminal's ^C nor the SIGTERM sent to
            // CMD's group reaches it.
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        Ok(Watchdog {
            child,
            stdin,
            stdout,
            kill_at,
        })
    }

    /// Waits (at most `within`) until the watchdog says it is armed: it
    /// runs, and it is this tenure's watchdog (a process that cannot start,
    /// or another program at tenure's path, never says so).
    pub async fn armed(&mut self, within: Duration) -> io::Result<()> {
        let stdout = self
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("its stdout is not piped"))?;
        let mut line = String::new();
        let mut stdout = BufReader::new(stdout.take(MAX_LINE as u64));
        match tokio::time::timeout(within, stdout.read_line(&mut line)).await {
            Ok(Ok(_)) if line.trim_end() == ARMED => Ok(()),
            Ok(Ok(_)) => Err(io::Error::other(
                "it exited without saying it is armed (is /proc/self/exe this tenure?)",
            )),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("it did not say it is armed within {within:?}"),
            )),
        }
    }

    /// Tells the watchdog a later kill instant (renewals moved the term's
    /// deadline); earlier or equal instants are not sent.
    pub async fn extend(&mut self, kill_at: MonoTime) {
        if kill_at <= self.kill_at {
            return;
        }
        self.kill_at = kill_at;
        let line = format!("{KILL_AT}{}\n", kill_at.as_nanos());
        self.send(&line).await;
    }

    /// Tells the watchdog the group is gone, and reaps it.
    pub async fn disarm(mut self) {
        self.send(&format!("{DISARM}\n")).await;
        self.stdin = None;
        // tokio reaps it in the background if it takes longer.
        let _ = tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await;
    }

    async fn send(&mut self, line: &str) {
        let Some(stdin) = self.stdin.as_mut() else {
            return;
        };
        let write = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        };
        match tokio::time::timeout(WRITE_WAIT, write).await {
            Ok(Ok(())) => {}
            // It exited (having killed the group at a deadline): nothing
            // left to tell it.
            Ok(Err(_)) => self.stdin = None,
            Err(_) => tracing::warn!(
                "the watchdog does not read its pipe; a deadline extension was dropped"
            ),
        }
    }
}

/// Runs the watchdog process; returns its exit code.
pub fn main(args: &WatchdogArgs) -> u8 {
    if args.pgid <= 1 {
        // kill(-1) would hit every process; refuse outright.
        let _ = writeln!(
            io::stderr(),
            "tenure watchdog: refusing process group {}",
            args.pgid
        );
        return crate::exit::USAGE;
    }
    // Started as /proc/self/exe (see `child::tenure_itself`), the kernel
    // names this process "exe"; `ps` and `top` should say tenure.
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe {
        libc::prctl(
            libc::PR_SET_NAME,
            c"tenure".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    // Terminal signals are for tenure, which disarms us on its way out.
    // SAFETY: setting a signal's disposition to "ignore" installs no handler.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    // Armed from here on: tenure lets CMD start once it reads this. A
    // tenure gone meanwhile shows as the end of stdin below.
    let mut stdout = io::stdout();
    let _ = writeln!(stdout, "{ARMED}").and_then(|()| stdout.flush());
    let mut kill_at = args.kill_at.map(MonoTime::from_nanos);
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let now = SystemClock.now().mono;
        if let Some(at) = kill_at {
            if now >= at {
                kill(
                    args.pgid,
                    "the term's deadline passed and the supervising tenure process did not extend it (frozen or wedged)",
                );
                return 0;
            }
        }
        let wait = kill_at.map(|at| at.saturating_since(now).min(SLICE));
        match read_some(wait) {
            Read::Timeout => continue,
            Read::Closed => {
                kill(args.pgid, "the supervising tenure process is gone");
                return 0;
            }
            Read::Data(bytes) => {
                pending.extend_from_slice(&bytes);
                while let Some(i) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=i).collect();
                    let line = String::from_utf8_lossy(&line);
                    let line = line.trim();
                    if line == DISARM {
                        return 0;
                    }
                    if let Some(at) = line
                        .strip_prefix(KILL_AT)
                        .and_then(|n| n.parse::<u64>().ok())
                    {
                        kill_at = Some(MonoTime::from_nanos(at));
                    }
                }
                if pending.len() > MAX_LINE {
                    pending.clear();
                }
            }
        }
    }
}

/// Kills the group if any of it is left, and says why on stderr.
fn kill(pgid: libc::pid_t, why: &str) {
    if child::group_gone(pgid) {
        return;
    }
    child::signal_group(pgid, libc::SIGKILL);
    let _ = writeln!(
        io::stderr(),
        "tenure watchdog: {why}; killed process group {pgid}"
    );
}

/// What one wait on stdin gave.
enum Read {
    /// Nothing within the wait.
    Timeout,
    /// End of file, or the pipe failed.
    Closed,
    /// Bytes read from tenure (deadline updates or its goodbye).
    Data(Vec<u8>),
}

/// Waits up to `wait` (forever if `None`) for stdin, and reads what is
/// there.
fn read_some(wait: Option<Duration>) -> Read {
    let timeout_ms: libc::c_int = match wait {
        None => -1,
        // Rounded up, so that the deadline is not polled for in a busy loop.
        Some(d) => libc::c_int::try_from(d.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX),
    };
    let mut fds = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, and its count.
    let rc = unsafe { libc::poll(&raw mut fds, 1, timeout_ms) };
    if rc == 0 {
        return Read::Timeout;
    }
    if rc < 0 {
        return if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            Read::Timeout
        } else {
            Read::Closed
        };
    }
    let mut buf = [0u8; 512];
    // SAFETY: reads at most buf.len() bytes into buf.
    let n = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
    match n {
        n if n > 0 => Read::Data(buf[..usize::try_from(n).unwrap_or(0)].to_vec()),
        0 => Read::Closed,
        _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => Read::Timeout,
        _ => Read::Closed,
    }
}
