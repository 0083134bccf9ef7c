//! Exit codes, and the errors that carry them out of the commands.
//!
//! Commands return `anyhow::Result<u8>`: `Ok(code)` for a normal exit (0, or
//! a child's status), `Err` for a failure. A failure wrapping [`Usage`] exits
//! 2 like clap's own errors; [`Refused`] exits 3; anything else exits 1.
//! `run --wait` that does not lead in time exits [`NOT_LEADING`] (4).

use std::fmt;

/// Bad flags, URL or timing: exit code 2, as for clap's own errors.
pub const USAGE: u8 = 2;
/// A runtime failure: exit code 1.
pub const FAILURE: u8 = 1;
/// `release` refused because the holder is alive: exit code 3.
pub const REFUSED: u8 = 3;
/// `run --wait`: not leading within the wait.
pub const NOT_LEADING: u8 = 4;
/// `run --once`: leadership was lost while CMD ran, so CMD was stopped
/// before it finished and was not run again. 75 is `EX_TEMPFAIL`
/// (sysexits.h): try again later.
pub const LOST: u8 = 75;

/// A usage error: the user must change the command line.
#[derive(Debug)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Wraps any displayable error as a usage error.
pub fn usage(e: impl fmt::Display) -> anyhow::Error {
    anyhow::Error::new(Usage(e.to_string()))
}

/// An operation refused for a reason the message explains.
#[derive(Debug)]
pub struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The exit code for a failure.
pub fn code_of(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<Usage>().is_some() {
        USAGE
    } else if e.downcast_ref::<Refused>().is_some() {
        REFUSED
    } else {
        FAILURE
    }
}

/// A failure as one line: the error and its causes joined by ": ", with any
/// line breaks flattened, so scripts and log collectors see one record.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out.replace(['\n', '\r'], " ")
}

/// The exit code that reports a child's exit status the way shells do:
/// its code, or 128 + the signal that killed it.
pub fn of_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        // Exit codes are 0..=255 on Unix; the cast keeps the low byte as the
        // shell would report it.
        (code & 0xff) as u8
    } else if let Some(sig) = status.signal() {
        128u8.saturating_add((sig & 0x7f) as u8)
    } else {
        FAILURE
    }
}
