//! The commands, one module each: what `tenure COMMAND` does, and what only
//! that command uses. What several commands share stays at the top of the
//! crate (the store URL, connecting, output, exit codes, how a leader is
//! shown), and the supervision of CMD is in [`crate::process`].

mod bench;
mod demo;
mod generated;
mod list;
mod release;
mod run;
mod status;
mod watch;

use crate::cli::{Command, HiddenCommand};
use crate::process::watchdog;

/// Runs `command`; its `Ok` is the exit code.
pub async fn dispatch(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Run(args) => run::run(args).await,
        Command::Status(args) => status::run(args).await,
        Command::Watch(args) => watch::run(args).await,
        Command::Release(args) => release::run(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::List(args) => list::run(args).await,
        Command::Completions(args) => generated::completions(args.shell),
        Command::Man => generated::man(),
        Command::Hidden(hidden) => match hidden {
            HiddenCommand::DemoCandidate(args) => demo::run_candidate(args).await,
            HiddenCommand::Watchdog(args) => Ok(watchdog::main(&args)),
            HiddenCommand::BenchFollowers(args) => bench::scale::followers(args).await,
            HiddenCommand::BenchMember(args) => bench::shard_bench::member(args).await,
            HiddenCommand::BenchStandby(args) => bench::overload::standby(args).await,
        },
    }
}
