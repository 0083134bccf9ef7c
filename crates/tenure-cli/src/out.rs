//! Writing command output to stdout without panicking when the reader goes
//! away (`tenure watch | head -1`): Rust ignores SIGPIPE, so `println!`
//! would panic on a closed pipe.

use std::io::{self, Write};

/// Writes one line to stdout and flushes it, so that a pipe reader sees each
/// line as it happens. A closed pipe is reported as `BrokenPipe`.
pub fn line(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Like [`line`], but a reader that has gone away is not an error: the
/// output was for it alone.
pub fn print(text: &str) -> io::Result<()> {
    match line(text) {
        Err(e) if !is_closed(&e) => Err(e),
        _ => Ok(()),
    }
}

/// Whether an error means the reader of stdout has gone away.
pub fn is_closed(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}
