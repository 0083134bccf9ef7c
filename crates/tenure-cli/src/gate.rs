//! The gate CMD passes through, both sides of it: [`Gate`] is what
//! `tenure run` holds, [`main`] is the hidden `tenure exec-gate` process.
//!
//! CMD must not run a single instruction before its watchdog
//! ([`crate::watchdog`]) is armed: a `tenure` killed in between would
//! leave CMD's own children with nobody to end them while another
//! candidate takes over (CMD itself would die through the parent-death
//! signal, its children would not). But the watchdog must be told CMD's
//! process group, which exists only once CMD's process does. So tenure
//! starts CMD's process as this gate: the gate is the process group's
//! first process, waits until tenure has armed the watchdog with its group
//! and says "go", and only then becomes CMD by `exec` (same pid, same
//! group, same parent, same parent-death signal).
//!
//! If tenure dies before "go", the gate sees the end of the stream and
//! exits without running CMD (the parent-death signal would kill it too).
//! If `exec` fails (no such program, not executable), the gate writes the
//! error back on the same stream and exits, and tenure reports it as CMD
//! failing to start, exactly as a failed spawn was reported before the
//! gate. On success the stream closes without a word (the gate's end is
//! close-on-exec), so tenure knows CMD is running.
//!
//! The protocol is the gate's stdin, a Unix socket pair: tenure writes
//! [`GO`], the gate answers nothing (exec succeeded) or one
//! [`EXEC_FAILED`] line. CMD's stdin is `/dev/null`, as without the gate.
#![allow(
    unsafe_code,
    reason = "fcntl(2) to keep the gate's end of the stream across the stdin swap but not across exec"
)]

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::child;

/// The hidden subcommand that runs the gate. It is read before clap sees
/// the command line: what follows is CMD, arbitrary bytes that must reach
/// `exec` untouched, and no option of tenure's (nor its environment
/// variables, which CMD inherits) may have a say in it.
pub const SUBCOMMAND: &str = "exec-gate";
/// What tenure writes once the watchdog is armed.
const GO: &[u8] = b"go\n";
/// The gate's answer when `exec` failed, followed by the OS error number
/// (or 0 and the error's text when it has none).
const EXEC_FAILED: &str = "exec-failed ";
/// The most of an answer tenure reads; a longer one is not the gate's.
const MAX_ANSWER: u64 = 4096;
/// The exit code of a gate whose `exec` failed because the program is
/// missing, as shells and `env` use it.
const NOT_FOUND: u8 = 127;
/// The exit code of a gate whose `exec` failed for another reason (not
/// executable, a bad argument).
const CANNOT_EXECUTE: u8 = 126;
/// The exit code of a gate told nothing before its stream ended.
const NO_GO: u8 = 1;

/// tenure's end of a started gate.
pub struct Gate {
    stream: tokio::net::UnixStream,
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
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    let stream = tokio::net::UnixStream::from_std(ours)?;
    let mut cmd = child::tenure_itself();
    cmd.arg(SUBCOMMAND)
        .arg("--")
        .args(argv)
        .stdin(Stdio::from(OwnedFd::from(theirs)));
    Ok((cmd, Gate { stream }))
}

impl Gate {
    /// Lets CMD run, and waits until it runs: `Ok` once `exec` succeeded,
    /// the `exec` error if it failed (so a missing program reads as it
    /// always did: "No such file or directory").
    pub async fn open(mut self) -> io::Result<()> {
        self.stream.write_all(GO).await?;
        let mut answer = Vec::new();
        (&mut self.stream)
            .take(MAX_ANSWER)
            .read_to_end(&mut answer)
            .await?;
        match parse_answer(&answer) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// The error a gate's answer reports, or `None` for the empty answer of a
/// successful `exec`.
fn parse_answer(answer: &[u8]) -> Option<io::Error> {
    if answer.is_empty() {
        return None;
    }
    let text = String::from_utf8_lossy(answer);
    let Some(rest) = text.trim_end().strip_prefix(EXEC_FAILED) else {
        return Some(io::Error::other(
            "the exec gate answered something that is not its protocol",
        ));
    };
    let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
    Some(match code.parse::<i32>() {
        Ok(n) if n > 0 => io::Error::from_raw_os_error(n),
        _ => io::Error::other(message.to_owned()),
    })
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
    let Ok(mut stream) = keep_stdin_until_exec() else {
        return NO_GO;
    };
    let mut go = [0u8; GO.len()];
    if stream.read_exact(&mut go).is_err() || go != GO {
        // tenure is gone (or never meant it): CMD must not start.
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

    #[test]
    fn an_empty_answer_means_cmd_runs() {
        assert!(parse_answer(b"").is_none());
    }

    #[test]
    fn an_exec_error_comes_back_as_the_os_error() {
        let e = parse_answer(b"exec-failed 2\n").expect("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(e.raw_os_error(), Some(2));
        let e = parse_answer(b"exec-failed 13\n").expect("an error");
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn an_error_without_a_number_keeps_its_text() {
        let e = parse_answer(b"exec-failed 0 nul byte found in provided data\n").expect("an error");
        assert_eq!(e.to_string(), "nul byte found in provided data");
    }

    #[test]
    fn anything_else_is_an_error_not_a_start() {
        for answer in [&b"garbage"[..], b"exec-failed", b"exec-failed -5", b"\0\0"] {
            assert!(parse_answer(answer).is_some(), "{answer:?}");
        }
    }
}
