//! Log lines on stderr, readable or JSON. stdout stays for command output
//! (and for CMD's own output under `tenure run`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the global subscriber. `RUST_LOG` overrides the default level,
/// `info` for most commands (elections, hand-overs, child starts and
/// stops), `warn` where thousands of elections are the point (benchmarks).
pub fn init(format: LogFormat, default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in log files.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    // A second initialisation (never in this binary) would fail harmlessly.
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
