//! Exit codes, and the errors that carry them out of the commands.
//!
//! Commands return `anyhow::Result<u8>`: `Ok(code)` for a normal exit (0, or
//! a child's status), `Err` for a failure. A failure made by [`usage`] exits
//! 2 like clap's own errors; one made by [`refused`] exits 3; anything else
//! exits 1.
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

/// A failure that exits with a code of its own, [`USAGE`] or [`REFUSED`],
/// rather than [`FAILURE`]; the message says why.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct Coded {
    code: u8,
    message: String,
}

impl Coded {
    fn error(code: u8, message: impl fmt::Display) -> anyhow::Error {
        anyhow::Error::new(Coded {
            code,
            message: message.to_string(),
        })
    }
}

/// Wraps any displayable error as a usage error: the user must change the
/// command line.
pub fn usage(e: impl fmt::Display) -> anyhow::Error {
    Coded::error(USAGE, e)
}

/// An operation refused for the reason `why` explains.
pub fn refused(why: impl fmt::Display) -> anyhow::Error {
    Coded::error(REFUSED, why)
}

/// An elector or sharded set that could not start: a bad configuration is
/// the user's to fix (a usage error), anything else a failure.
pub fn start_error(e: tenure::ElectorError) -> anyhow::Error {
    match e {
        tenure::ElectorError::Config(c) => usage(c),
        e @ tenure::ElectorError::Unsupported { .. } => usage(e),
        other => anyhow::Error::new(other),
    }
}

/// The exit code for a failure.
pub fn code_of(e: &anyhow::Error) -> u8 {
    e.downcast_ref::<Coded>().map_or(FAILURE, |c| c.code)
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
