//! `tenure`: leader election with fencing tokens, from the command line.
//!
//! This file only wires things up: parse the command line, set up logging
//! and the runtime, run the command, turn its result into an exit code.
//!
//! The rest of the crate: [`cli`] (the command line), [`commands`] (one
//! module per command, with what only it uses), [`process`] (the
//! supervision of CMD), and what several commands share: [`store_url`]
//! and [`connect`] (the store), [`view`] (how a leader is shown), [`out`],
//! [`exit`] (exit codes), [`signals`] (tenure's own stop), [`notify`]
//! (systemd's `sd_notify` protocol), [`logging`], and
//! `kafka` (`kafka://`, which leads through a consumer group).

// CMD's supervision needs Linux: prctl (PR_SET_PDEATHSIG,
// PR_SET_CHILD_SUBREAPER), /proc and CLOCK_BOOTTIME.
#[cfg(not(target_os = "linux"))]
compile_error!(
    "the tenure command builds on Linux only: it supervises CMD with prctl (PR_SET_PDEATHSIG, \
     PR_SET_CHILD_SUBREAPER) and /proc; the tenure library builds on macOS too"
);

mod cli;
mod commands;
mod connect;
mod exit;
#[cfg(feature = "kafka")]
mod kafka;
mod logging;
mod notify;
mod out;
mod process;
mod signals;
mod store_url;
mod view;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use cli::{Cli, Command, HiddenCommand};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(process::gate::SUBCOMMAND)) {
        // CMD's start through the gate: no runtime, no logging, and no
        // parsing of what follows (see the module).
        return ExitCode::from(process::gate::main(args));
    }
    // clap prints its own errors and exits 2 (0 for --help, --version).
    let cli = Cli::parse();
    if let Command::Hidden(HiddenCommand::Watchdog(args)) = &cli.command {
        // The watchdog needs neither a runtime nor logging: it blocks on a
        // pipe and may be the last process of its kind standing.
        return ExitCode::from(process::watchdog::main(args));
    }
    // Before any thread starts: CMD must not inherit systemd's socket.
    notify::capture_env();
    let level = match cli.command {
        // Thousands of elections: one log line each would be the bench.
        Command::Bench(_)
        | Command::Hidden(HiddenCommand::BenchFollowers(_) | HiddenCommand::BenchMember(_)) => {
            "warn"
        }
        // Past capacity many groups fail at once; what counts is the
        // figures on stdout.
        Command::Hidden(HiddenCommand::BenchStandby(_)) => "error",
        _ => "info",
    };
    logging::init(cli.log_format, level);
    // One thread on purpose: PR_SET_PDEATHSIG fires when the *thread* that
    // forked a child exits, so children must be forked from the thread that
    // lives as long as the process. The renewal-cost bench forks nothing,
    // and measures the library as a service runs it: on worker threads.
    let mut builder = match &cli.command {
        Command::Bench(b) if b.renewal_cost && b.threads > 1 => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(usize::from(b.threads));
            builder
        }
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(&anyhow::Error::new(e).context("cannot start the runtime")),
    };
    let result = runtime.block_on(commands::dispatch(cli.command));
    // Blocking store calls still in flight must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => fail(&e),
    }
}

/// Prints a failure as one line and returns its exit code.
fn fail(e: &anyhow::Error) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "tenure: error: {}", exit::one_line(e));
    ExitCode::from(exit::code_of(e))
}
