//! The gate CMD passes through, both sides of it: [`Gate`] is what
//! `tenure run` holds, [`main`] is the hidden `tenure exec-gate` process.
//!
//! CMD must not run a single instruction before its watchdog
//! ([`watchdog`](super::watchdog)) is armed: a `tenure` killed in between
//! would leave CMD's own children with nobody to end them while another
//! candidate takes over (CMD itself would die through the parent-death
//! signal, its children would not). But the watchdog must be told CMD's
//! process group, which exists only once CMD's process does. So tenure
//! starts CMD's process as this gate: the gate is the process group's
//! first process, waits until tenure has armed the watchdog with its group
//! and says "go", and only then becomes CMD by `exec` (same pid, same
//! group, same parent, same parent-death signal).
//!
//! The protocol is the gate's stdin, a Unix socket pair. tenure writes
//! `go <instant>`: the instant (`CLOCK_BOOTTIME` nanoseconds) after which
//! CMD must not start, tenure's own kill instant for the term. The gate
//! answers one line and ends:
//!
//! * `late`: its clock had passed the instant (a stall between tenure's
//!   look at the term and the gate's read), so CMD is not started;
//! * `exec`: it is about to `exec` CMD. Its end of the stream is
//!   close-on-exec, so if nothing follows, CMD runs. If `exec` fails,
//!   `exec-failed <errno>` (or `0 <text>`) follows, and tenure reports it
//!   as CMD failing to start, exactly as a failed spawn was reported
//!   before the gate ("No such file or directory").
//!
//! A stream that ends without a word means the gate died (killed by the
//! watchdog at the deadline, by a signal, or it was not tenure's gate):
//! never that CMD runs. If tenure dies before "go", the gate sees the end
//! of the stream and exits without running CMD (the parent-death signal
//! would kill it too). CMD's stdin is `/dev/null`, as without the gate.
#![allow(
    unsafe_code,
    reason = "fcntl(2) to keep the gate's end of the stream across the stdin swap but not across exec, and prctl(2) for the process name"
)]

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;

use tenure::{Clock, MonoTime, SystemClock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::process::child;

/// The hidden subcommand that runs the gate. It is read before clap sees
/// the command line: what follows is CMD, arbitrary bytes that must reach
/// `exec` untouched, and no option of tenure's (nor its environment
/// variables, which CMD inherits) may have a say in it.
pub const SUBCOMMAND: &str = "exec-gate";
/// What tenure writes once the watchdog is armed, before the instant.
const GO: &str = "go ";
/// The longest "go" line the gate reads.
const MAX_GO: usize = 64;
/// The gate's answer when it is about to `exec` CMD.
const EXEC: &str = "exec";
/// The gate's answer when the instant had passed.
const LATE: &str = "late";
/// What follows [`EXEC`] when `exec` failed: the OS error number (or 0
/// and the error's text when it has none).
const EXEC_FAILED: &str = "exec-failed ";
/// The most of an answer tenure reads; a longer one is not the gate's.
const MAX_ANSWER: u64 = 4096;
/// The exit code of a gate whose `exec` failed because the program is
/// missing, as shells and `env` use it.
const NOT_FOUND: u8 = 127;
/// The exit code of a gate whose `exec` failed for another reason (not
/// executable, a bad argument).
const CANNOT_EXECUTE: u8 = 126;
/// The exit code of a gate that did not start CMD: no "go", or too late.
const NO_GO: u8 = 1;

/// tenure's end of a started gate.
pub struct Gate {
    stream: tokio::net::UnixStream,
}

/// How a gate answered "go".
#[derive(Debug)]
pub enum Answer {
    /// CMD runs.
    Running,
    /// The gate's clock had passed the instant: CMD was not started.
    Late,
    /// CMD's `exec` failed with this error.
    ExecFailed(io::Error),
    /// The gate ended (or the stream failed) without a word: it died
    /// before starting CMD.
    Silent,
    /// Something that is not the gate's protocol: the program started as
    /// the gate is not this tenure.
    Garbled,
}

/// A command that starts `argv` through the gate, not yet spawned, and
/// tenure's end of it. Everything else about CMD's process (environment,
/// process group, parent-death signal) is set on the command as for CMD
/// itself: `exec` keeps all of it. Its stdin is the gate's stream; do not
/// set another.
///
/// The command must be dropped once spawned, before [`Gate::open`]: it
/// holds a copy of the gate's end, and the stream's end is how tenure
/// learns that `exec` succeeded.
pub fn command(argv: &[OsString]) -> io::Result<(Command, Gate)> {
    if argv.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no command given",
        ));
    }
    let mut cmd = child::tenure_itself()?;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    let stream = tokio::net::UnixStream::from_std(ours)?;
    cmd.arg(SUBCOMMAND)
        .arg("--")
        .args(argv)
        .stdin(Stdio::from(OwnedFd::from(theirs)));
    Ok((cmd, Gate { stream }))
}

impl Gate {
    /// Lets CMD run unless the gate's clock has passed `not_after`, and
    /// waits for the gate's answer. Cancel-safe in the sense that matters:
    /// dropped, it leaves the gate to be killed with its group.
    pub async fn open(mut self, not_after: MonoTime) -> Answer {
        let go = format!("{GO}{}\n", not_after.as_nanos());
        if self.stream.write_all(go.as_bytes()).await.is_err() {
            // EPIPE or a reset: the gate is gone.
            return Answer::Silent;
        }
        let mut answer = Vec::new();
        if (&mut self.stream)
            .take(MAX_ANSWER)
            .read_to_end(&mut answer)
            .await
            .is_err()
        {
            return Answer::Silent;
        }
        parse_answer(&answer)
    }
}

/// What a gate's whole answer means.
fn parse_answer(answer: &[u8]) -> Answer {
    let Ok(text) = std::str::from_utf8(answer) else {
        return Answer::Garbled;
    };
    let mut lines = text.split_terminator('\n');
    match (lines.next(), lines.next(), lines.next()) {
        (None, ..) => Answer::Silent,
        (Some(LATE), None, _) => Answer::Late,
        (Some(EXEC), None, _) => Answer::Running,
        (Some(EXEC), Some(failed), None) => failed
            .strip_prefix(EXEC_FAILED)
            .and_then(exec_error)
            .map_or(Answer::Garbled, Answer::ExecFailed),
        _ => Answer::Garbled,
    }
}

/// The error an `exec-failed` line reports: an OS error number, or 0 and
/// a text; `None` for anything else (a report without a cause is none).
fn exec_error(rest: &str) -> Option<io::Error> {
    let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
    match code.parse::<i32>() {
        Ok(n) if n > 0 && message.is_empty() => Some(io::Error::from_raw_os_error(n)),
        Ok(0) if !message.is_empty() => Some(io::Error::other(message.to_owned())),
        _ => None,
    }
}

/// Runs the gate process: `args` is the command line after
/// [`SUBCOMMAND`], that is `--` and CMD. Returns an exit code only if CMD
/// was not started.
pub fn main(mut args: impl Iterator<Item = OsString>) -> u8 {
    if args.next().as_deref() != Some(OsStr::new("--")) {
        let _ = writeln!(
            io::stderr(),
            "tenure {SUBCOMMAND}: internal; started by `tenure run` only"
        );
        return crate::exit::USAGE;
    }
    let Some(program) = args.next() else {
        return crate::exit::USAGE;
    };
    // Started as /proc/self/exe, the kernel names this process "exe"
    // until it becomes CMD; `ps` should say tenure meanwhile.
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
    let Ok(mut stream) = keep_stdin_until_exec() else {
        return NO_GO;
    };
    // tenure gone, or a line that is not "go": CMD must not start.
    let Some(not_after) = read_go(&mut stream) else {
        return NO_GO;
    };
    if SystemClock.now().mono >= not_after {
        let _ = writeln!(stream, "{LATE}");
        return NO_GO;
    }
    if writeln!(stream, "{EXEC}").is_err() {
        // Nobody is listening: tenure is gone.
        return NO_GO;
    }
    let error = std::process::Command::new(&program)
        .args(args)
        .stdin(Stdio::null())
        .exec();
    let answer = match error.raw_os_error() {
        Some(n) => format!("{EXEC_FAILED}{n}\n"),
        None => format!("{EXEC_FAILED}0 {}\n", error.to_string().replace('\n', " ")),
    };
    let _ = stream.write_all(answer.as_bytes());
    if error.kind() == io::ErrorKind::NotFound {
        NOT_FOUND
    } else {
        CANNOT_EXECUTE
    }
}

/// Reads the "go" line and returns its instant; `None` for anything else
/// (the stream's end included).
fn read_go(stream: &mut std::fs::File) -> Option<MonoTime> {
    let mut line = Vec::with_capacity(MAX_GO);
    let mut byte = [0u8; 1];
    while line.len() < MAX_GO {
        match stream.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => {
                let text = std::str::from_utf8(&line).ok()?;
                let nanos = text.strip_prefix(GO)?.parse::<u64>().ok()?;
                return Some(MonoTime::from_nanos(nanos));
            }
            Ok(1) => line.push(byte[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            _ => return None,
        }
    }
    None
}

/// A copy of stdin (the gate's stream) that is closed by a successful
/// `exec`: stdin itself becomes `/dev/null` for CMD, and the copy must not
/// reach CMD either, or tenure would never see the stream end.
fn keep_stdin_until_exec() -> io::Result<std::fs::File> {
    // SAFETY: F_DUPFD_CLOEXEC takes a descriptor and a lowest number and
    // returns a new descriptor, touching no memory of ours.
    let fd = unsafe { libc::fcntl(libc::STDIN_FILENO, libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by fcntl and is owned by nothing else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an answer means, in words a table can hold.
    fn meaning(answer: &Answer) -> String {
        match answer {
            Answer::Running => "running".into(),
            Answer::Late => "late".into(),
            Answer::Silent => "silent".into(),
            Answer::Garbled => "garbled".into(),
            Answer::ExecFailed(e) => match e.raw_os_error() {
                Some(n) => format!("exec failed: errno {n}, {:?}", e.kind()),
                None => format!("exec failed: {e}"),
            },
        }
    }

    /// Only "exec" and then the stream's end mean CMD runs; a failed exec
    /// comes back as its OS error; anything else is never a start.
    #[test]
    fn every_answer_means_what_the_protocol_says() {
        for (answer, means) in [
            (&b"exec\n"[..], "running"),
            (b"late\n", "late"),
            (b"", "silent"),
            (b"exec\nexec-failed 2\n", "exec failed: errno 2, NotFound"),
            (
                b"exec\nexec-failed 13\n",
                "exec failed: errno 13, PermissionDenied",
            ),
            (
                b"exec\nexec-failed 0 nul byte found in provided data\n",
                "exec failed: nul byte found in provided data",
            ),
            (b"garbage", "garbled"),
            (b"exec-failed", "garbled"),
            (b"exec\nexec-failed -5\n", "garbled"),
            (b"exec\nexec-failed 0\n", "garbled"),
            (b"exec\nexec-failed x\n", "garbled"),
            (b"exec-failed 2\n", "garbled"),
            (b"exec\nexec\n", "garbled"),
            (b"exec\ngarbage\n", "garbled"),
            (b"late\nexec\n", "garbled"),
            (b"exec\nexec-failed 2\nmore\n", "garbled"),
            (b"\xff\xfe", "garbled"),
            (b"\0\0", "garbled"),
        ] {
            assert_eq!(meaning(&parse_answer(answer)), means, "{answer:?}");
        }
    }
}
