//! `tenure watchdog --pgid N` (hidden): started by `tenure run` next to each
//! CMD. It blocks reading a pipe whose write end only `tenure run` holds.
//! When `tenure run` stops the group itself it writes "disarm" first; if the
//! pipe reaches end-of-file without that, `tenure run` died (SIGKILL, OOM,
//! crash) and the watchdog kills CMD's whole process group, so that no
//! grandchild keeps working after its supervisor, and its lease, are gone.
//!
//! It is a separate executable run rather than a fork of tenure, so it
//! inherits none of tenure's descriptors (listening sockets, the database)
//! and needs no care about forking a multi-threaded process.

use std::io::{self, BufRead, Write};

use crate::child::{self, DISARM};
use crate::cli::WatchdogArgs;

/// Runs the watchdog; returns its exit code.
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
    // Terminal signals are for tenure, which disarms us on its way out.
    // SAFETY: setting a signal's disposition to "ignore" installs no handler.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let stdin = io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.trim() == DISARM => return 0,
            Ok(_) => continue,
        }
    }
    if !child::group_gone(args.pgid) {
        child::signal_group(args.pgid, libc::SIGKILL);
        let _ = writeln!(
            io::stderr(),
            "tenure watchdog: the supervising tenure process is gone; killed process group {}",
            args.pgid
        );
    }
    0
}
