//! `tenure completions SHELL` and `tenure man`: generated from the clap
//! definition, so they never drift from the options `tenure` accepts.

use std::io::Write;

use anyhow::Context;
use clap::CommandFactory;

use crate::cli::Cli;
use crate::out;

/// Writes the completion script for `shell` to stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "tenure", &mut script);
    write_all(&script)
}

/// Writes the man page, tenure(1) in roff, to stdout.
pub fn man() -> anyhow::Result<u8> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .context("cannot render the man page")?;
    write_all(&page)
}

/// Writes `bytes` to stdout; a reader that went away (`| head`) is no error.
fn write_all(bytes: &[u8]) -> anyhow::Result<u8> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if !out::is_closed(&e) => {
            Err(anyhow::Error::new(e).context("cannot write to stdout"))
        }
        _ => Ok(0),
    }
}
