//! The command line: clap types only. Parsing values that need more than
//! clap (store URLs, timing rules) happens in the commands, so their errors
//! can name the rule that was broken.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::store_url;

/// `tenure`: run a command as a singleton across hosts, with a fencing token.
#[derive(Debug, Parser)]
#[command(
    name = "tenure",
    version,
    about = "Leader election with fencing tokens: run a command only while this candidate leads",
    after_help = MAIN_EXAMPLES,
    propagate_version = true
)]
pub struct Cli {
    /// How log lines on stderr look.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = LogFormat::Human,
        env = "TENURE_LOG_FORMAT"
    )]
    pub log_format: LogFormat,

    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    Human,
    /// One JSON object per line, for log shippers.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run CMD only while this candidate leads GROUP; stand again after losing.
    Run(RunArgs),
    /// Show who leads GROUP right now.
    Status(StatusArgs),
    /// Print one line per change of GROUP's leader, as it happens.
    Watch(WatchArgs),
    /// Hand GROUP's leadership back when its holder is gone (or at once with --force).
    Release(ReleaseArgs),
    /// Show fail-over on this machine: candidates on a scratch SQLite file,
    /// the leader taken down in turns, every hand-over measured and checked.
    Demo(DemoArgs),
    /// Measure hand-over and crash fail-over on real stores, against
    /// `etcdctl elect` as the reference; prints a table.
    Bench(BenchArgs),
    /// List every group in a store (or those starting with --prefix) with
    /// its holder, token and expiry.
    List(ListArgs),
    /// Print a shell completion script for SHELL on stdout.
    Completions(CompletionsArgs),
    /// Print tenure's man page (roff) on stdout.
    Man,
    /// The hidden subcommands, flattened: each is typed as a subcommand of
    /// its own, `tenure demo-candidate` and so on.
    #[command(flatten)]
    Hidden(HiddenCommand),
}

/// The hidden subcommands: processes that `tenure` starts itself (the
/// demo's candidates, CMD's watchdog, the benchmarks' helpers), not meant
/// to be typed. Flattened into [`Command`], so their names on the command
/// line are those of subcommands of `tenure` itself.
#[derive(Debug, Subcommand)]
pub enum HiddenCommand {
    /// One candidate of `tenure demo`, reporting its terms as JSON lines.
    #[command(hide = true)]
    DemoCandidate(DemoCandidateArgs),
    /// Kills a child's process group if the supervising `tenure run` dies.
    #[command(hide = true)]
    Watchdog(WatchdogArgs),
    /// The follower process of `tenure bench --groups`.
    #[command(hide = true)]
    BenchFollowers(BenchFollowersArgs),
    /// One member process of `tenure bench --shards`, reporting the shards
    /// it holds as JSON lines.
    #[command(hide = true)]
    BenchMember(BenchMemberArgs),
    /// A standby process of `tenure bench --overload`, reporting how many
    /// groups it leads.
    #[command(hide = true)]
    BenchStandby(BenchStandbyArgs),
}

/// Where the lease records live.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// The store URL [default: $TENURE_STORE, else a file in the state directory; see --help]
    #[arg(
        long,
        value_name = "URL",
        env = "TENURE_STORE",
        // A URL may carry a password: never echo the variable's value in --help.
        hide_env_values = true,
        long_help = store_url::long_help()
    )]
    pub store: Option<String>,
}

/// `tenure run`.
#[derive(Debug, Args)]
#[command(after_help = RUN_EXAMPLES)]
pub struct RunArgs {
    /// The group (role) to lead.
    #[arg(long, value_name = "NAME")]
    pub group: String,

    #[command(flatten)]
    pub store: StoreArgs,

    /// This candidate's id [default: HOSTNAME-PID].
    #[arg(long, value_name = "ID", env = "TENURE_ID")]
    pub id: Option<String>,

    /// How long one successful write keeps the lease; renewals, retries and
    /// the fail-over bounds derive from it [default: 10s]. On kafka:// it is
    /// the heartbeat timeout: the leader is fenced when none of its
    /// heartbeats of the last term came back, and the group's session is 3
    /// terms (a crashed leader is replaced after about 3 terms and a
    /// rebalance); without --term, the URL's heartbeat_timeout (default 5s)
    /// applies.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub term: Option<Duration>,

    /// Published in the lease record for `status` and `watch` (repeatable).
    #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub metadata: Vec<(String, String)>,

    /// Start CMD at most once: when it finishes, release and exit with its
    /// status. If leadership is lost while it runs, CMD is stopped and
    /// tenure exits 75 (EX_TEMPFAIL) without running it again.
    #[arg(long, conflicts_with_all = ["shards", "slots"])]
    pub once: bool,

    /// Give up if not leading within this long: release and exit 4. `0`
    /// tries once (one look at the lease, and one attempt if it is free).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with_all = ["shards", "slots"])]
    pub wait: Option<Duration>,

    /// This candidate's priority: while a candidate of lower priority (one
    /// without --priority is 0) leads, this one asks it to hand over after
    /// --preempt-after, and it drains its CMD and hands over. Equal
    /// priorities never preempt. Not with --shards, --slots or kafka://.
    #[arg(long, value_name = "N", conflicts_with_all = ["shards", "slots"])]
    pub priority: Option<u32>,

    /// With --priority: how long this candidate stands under a
    /// lower-priority leader before it asks, and between requests
    /// [default: the term].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "priority")]
    pub preempt_after: Option<Duration>,

    /// Split the group into N shards spread over every `tenure run --shards
    /// N` process of the group, and run one CMD per shard this process
    /// holds, with TENURE_SHARD (0..N-1) and TENURE_SHARDS set. Each shard
    /// is a lease of its own (its own token and deadline).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536), conflicts_with = "slots")]
    pub shards: Option<u32>,

    /// Keep at most N instances of CMD running across all the processes of
    /// the group, at most one per process, each with its own slot lease
    /// (TENURE_SLOT, TENURE_SLOTS, and that slot's TENURE_TOKEN).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub slots: Option<u32>,

    /// Publish the KEY=VALUE lines of this file as metadata (with any
    /// --metadata), and publish them again when the file changes or tenure
    /// gets SIGUSR1: a leader writes the new values at once.
    #[arg(long, value_name = "PATH")]
    pub metadata_file: Option<std::path::PathBuf>,

    /// Time between SIGTERM and SIGKILL for CMD's process group; cut short so
    /// the group is dead before the term's deadline.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub kill_grace: Duration,

    /// First wait before standing again after CMD exited on its own; doubles
    /// while CMD keeps exiting quickly, up to 1 minute.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub backoff: Duration,

    /// Serve /metrics, /healthz, /readyz (200 only on the leader) and /leader
    /// over HTTP on this address.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,

    /// The command and its arguments: everything after `--`, or from the
    /// first word that is no option of tenure's on. An unknown option
    /// before it (`--onse`) is a usage error, never CMD.
    #[arg(value_name = "CMD", required = true, num_args = 1.., trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// `tenure status`.
#[derive(Debug, Args)]
#[command(after_help = STATUS_EXAMPLES)]
pub struct StatusArgs {
    /// The group to inspect.
    #[arg(long, value_name = "NAME")]
    pub group: String,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `tenure list`.
#[derive(Debug, Args)]
#[command(after_help = LIST_EXAMPLES)]
pub struct ListArgs {
    /// Only groups whose name starts with this (byte for byte, no
    /// wildcards).
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub prefix: String,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `tenure completions`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tenure completions bash > /etc/bash_completion.d/tenure
  tenure completions zsh > \"${fpath[1]}/_tenure\"
  tenure completions fish > ~/.config/fish/completions/tenure.fish")]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `tenure watch`.
#[derive(Debug, Args)]
#[command(after_help = WATCH_EXAMPLES)]
pub struct WatchArgs {
    /// The group to watch.
    #[arg(long, value_name = "NAME")]
    pub group: String,

    #[command(flatten)]
    pub store: StoreArgs,

    /// How often to re-read the record when the store sends no change hints.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub poll: Duration,

    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `tenure release`.
#[derive(Debug, Args)]
#[command(after_help = RELEASE_EXAMPLES)]
pub struct ReleaseArgs {
    /// The group whose lease to release.
    #[arg(long, value_name = "NAME")]
    pub group: String,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Take leadership away from a holder that may be alive: write an
    /// operator record (the next token, the group's term) that the holder
    /// loses at its next renewal and candidates wait out for one term, so
    /// the old holder stops before the next one starts.
    #[arg(long)]
    pub force: bool,

    /// DANGEROUS: clear the lease at once, even if its holder is alive. A
    /// waiting candidate takes over within a round trip while the old
    /// holder acts until its next renewal: two leaders at once, with only
    /// fencing tokens at the resource to protect the data.
    #[arg(long)]
    pub unsafe_clear: bool,

    /// Hand leadership to the candidate with this id instead: the leader
    /// is asked (through its record) to drain its work and release the
    /// lease reserved for ID for one term, so ID takes over at once and
    /// nobody else does meanwhile. Safe with a live leader: it stops first.
    /// Refused (exit 3) unless the store shows ID standing, which only a
    /// candidate asking by --priority does: a waiting candidate only reads.
    /// With --force, done anyway with a warning; a hand-over to a candidate
    /// that is not running leaves the group leaderless for a term.
    #[arg(long, value_name = "ID", conflicts_with = "unsafe_clear")]
    pub to: Option<String>,
}

/// `tenure demo`.
#[derive(Debug, Args)]
#[command(after_help = DEMO_EXAMPLES)]
pub struct DemoArgs {
    /// How many candidate processes stand at a time (2 to 9).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u8).range(2..=9))]
    pub candidates: u8,

    /// Roughly how long to run; one round of each kind of take-down always runs.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,

    /// The candidates' term.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub term: Duration,

    /// Print the summary as one JSON object on stdout (the timeline goes to stderr).
    #[arg(long)]
    pub json: bool,

    /// Keep the scratch directory (database, candidate logs) afterwards.
    #[arg(long)]
    pub keep: bool,
}

/// The term of `tenure run` when --term is not given.
pub const DEFAULT_TERM: Duration = Duration::from_secs(10);

impl RunArgs {
    /// The term in force: --term, or [`DEFAULT_TERM`].
    pub fn term(&self) -> Duration {
        self.term.unwrap_or(DEFAULT_TERM)
    }
}

/// `tenure demo-candidate` (internal).
#[derive(Debug, Args)]
pub struct DemoCandidateArgs {
    /// The group to stand for (every candidate of the group uses the same name).
    #[arg(long)]
    pub group: String,
    /// The store URL.
    #[arg(long)]
    pub store: String,
    /// The candidate id.
    #[arg(long)]
    pub id: String,
    /// The term.
    #[arg(long, value_parser = parse_duration)]
    pub term: Duration,
}

/// `tenure bench-followers` (internal).
#[derive(Debug, Args)]
pub struct BenchFollowersArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The groups are PREFIX-0 .. PREFIX-(COUNT-1).
    #[arg(long)]
    pub prefix: String,
    /// How many groups.
    #[arg(long)]
    pub count: usize,
    /// The term.
    #[arg(long, value_parser = parse_duration)]
    pub term: Duration,
    /// How long to measure.
    #[arg(long, value_parser = parse_duration)]
    pub window: Duration,
}

/// `tenure bench-standby` (internal).
#[derive(Debug, Args)]
pub struct BenchStandbyArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The groups are PREFIX-0 .. PREFIX-(COUNT-1).
    #[arg(long)]
    pub prefix: String,
    /// How many groups.
    #[arg(long)]
    pub count: usize,
    /// The term.
    #[arg(long, value_parser = parse_duration)]
    pub term: Duration,
    /// This process's candidate id.
    #[arg(long)]
    pub id: String,
}

/// `tenure bench-member` (internal).
#[derive(Debug, Args)]
pub struct BenchMemberArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The sharded set.
    #[arg(long)]
    pub set: String,
    /// How many shards it has.
    #[arg(long)]
    pub shards: usize,
    /// This member's id.
    #[arg(long)]
    pub id: String,
    /// The term of every lease.
    #[arg(long, value_parser = parse_duration)]
    pub term: Duration,
}

/// `tenure watchdog` (internal).
#[derive(Debug, Args)]
pub struct WatchdogArgs {
    /// The process group to kill when stdin closes without "disarm".
    #[arg(long, allow_hyphen_values = true)]
    pub pgid: i32,
    /// Kill the group at this `CLOCK_BOOTTIME` instant (nanoseconds) unless
    /// a later one arrives on stdin first.
    #[arg(long)]
    pub kill_at: Option<u64>,
}

/// Parses "10s", "500ms", "1m 30s".
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration ({e}); write it like 10s, 500ms or 1m30s"))
}

/// Parses `KEY=VALUE`.
fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// The exit codes of every command, one table for `--help` (each
/// command's ends with it) and the README.
macro_rules! exit_codes {
    () => {
        "Exit codes (every command):
  0   success; `run` stopped by SIGINT, SIGTERM or SIGHUP (CMD stopped,
      lease released)
  1   runtime failure: store unreachable, CMD failed to start, demo or bench
      found a problem
  2   usage error: bad option, URL, URL option, timing or name; nothing was
      taken or written
  3   refused: `release` found the holder alive, or cannot see the --to
      candidate stand (add --force)
  4   `run --wait`: not leading within the wait; released
  75  `run --once`: leadership lost while CMD ran; CMD was stopped and is
      not run again (EX_TEMPFAIL)
  `run --once` otherwise exits with CMD's status, or 128+N when tenure
  itself was stopped by signal N."
    };
}

const MAIN_EXAMPLES: &str = concat!(
    "\
Examples:
  tenure run --group nightly-billing -- ./bill --all
  tenure status --group nightly-billing
  tenure watch --group nightly-billing --json
  tenure release --group nightly-billing
  tenure list --prefix nightly-
  tenure demo
  tenure bench --store postgres://app:secret@db/app --etcdctl http://127.0.0.1:2379
  tenure completions bash > /etc/bash_completion.d/tenure
  tenure man > /usr/local/share/man/man1/tenure.1

",
    exit_codes!()
);

const RUN_EXAMPLES: &str = concat!(
    "\
Examples:
  # Run the billing job on exactly one of the hosts that run this line:
  tenure run --group nightly-billing --term 10s -- ./bill --all

  # Run once, wherever leadership lands, and pass on the job's exit status:
  tenure run --group migrate --once -- ./migrate.sh

  # Publish an address and serve Prometheus metrics and a health check:
  tenure run --group outbox --metadata address=10.0.0.7:8080 \\
      --metrics-addr 127.0.0.1:9464 -- ./relay

  # Lead within 30 s or give up (exit 4); --wait 0 tries once:
  tenure run --group migrate --wait 30s --once -- ./migrate.sh

  # 16 shards over however many hosts run this; one ./consume per shard held:
  tenure run --group ingest --shards 16 -- sh -c './consume --partition \"$TENURE_SHARD\"'

  # At most 3 copies of the crawler across all hosts:
  tenure run --group crawl --slots 3 -- ./crawler

  # Publish what a file says, again whenever it changes (or on SIGUSR1):
  tenure run --group api --metadata-file /run/api/endpoint.env -- ./api

CMD gets TENURE_GROUP, TENURE_ID, TENURE_TOKEN (the fencing token: pass it to
everything CMD writes), TENURE_TERM_MS, and the term's deadline as of CMD's
start, TENURE_DEADLINE (RFC 3339) and TENURE_DEADLINE_UNIX_MS; the lease is
renewed while CMD runs. CMD does not get TENURE_STORE (the store URL may hold a
password); the rest of tenure's environment it inherits. CMD runs in its own
process group with stdin closed. When leadership ends (lost, superseded, or
tenure is told to stop) the whole group gets SIGTERM, then SIGKILL after
--kill-grace, cut short so that the group is dead before the term's deadline.
A watchdog process enforces that deadline even if tenure is frozen or wedged
(it kills the group unless tenure tells it of a renewal in time), and kills the
group at once if tenure dies; CMD starts only once its watchdog is armed.
Members tenure may not signal (a setuid program
that switched users) are reported and left after SIGKILL. SIGINT, SIGTERM or
SIGHUP to tenure: stop CMD, release, exit 0 (128+signal with --once). A second
signal skips the grace.

--once is for a job (a migration, a nightly batch: run it once, wherever
leadership lands, and exit with its status, as `flock` and `consul lock`
do); without it CMD is a daemon: restarted after a back-off whenever it
exits, for as long as this candidate leads.

HTTP endpoints (--metrics-addr): GET /metrics (Prometheus text: HELP and TYPE
for every series, labelled by group, the renewal latency a histogram),
GET /healthz (200 while tenure works; 503 while this process leads on a term
past due: restart it), GET /readyz (200 only on the leader with a term in
force, else 503: a readiness probe), GET /leader (JSON of the leader as this
process sees it).

Under systemd (Type=notify): READY=1 once standing, STATUS= with the role,
WATCHDOG=1 every WatchdogSec/2 while tenure works, STOPPING=1 on stop;
NOTIFY_SOCKET and WATCHDOG_* are not passed on to CMD.

",
    exit_codes!()
);

const STATUS_EXAMPLES: &str = concat!(
    "\
Examples:
  tenure status --group nightly-billing
  tenure status --group nightly-billing --store sqlite:///var/lib/tenure/tenure.db --json
  # a set run with `tenure run --group ingest --shards 16` (or tenure::Shards):
  tenure status --group ingest

JSON fields: group, store, state (\"held\", \"expired\": held but not renewed in
time by its holder's clock, \"released\", \"never\": no record), token (the
latest fencing token, null if never), leader (null, or {candidate, token,
metadata, renewed_at, expires_at (RFC 3339), renewed_ago_ms, expires_in_ms
(negative once expired)}).

Sharded sets (--shards) and slotted groups (--slots) keep no lease under
their own name: their members are the groups SET/members/ID, their shards
SET/shards/SHARD (slots SET/slots/K). When the group itself is not held,
status lists those and, if it finds any, shows the set instead: a summary
(\"sharded set ingest: 4 members, 16 shards, 16 held; loads a=4 b=4 ...\"),
each member (live, expired or released, by its record's expiry; its
metadata), and each shard in natural order (2 before 10) with its holder or
\"unheld\", token and expiry. Only shards that were ever held have a record.
JSON fields then: group, store, kind (\"sharded\" or \"slots\"), summary
{members (live), members_gone, leases, held, loads {ID: shards held}},
members [{id, state (\"live\", \"expired\", \"released\"), metadata, token,
expires_in_ms (null once released), holds}], leases [{name, state (\"held\",
\"expired\", \"released\"), holder (null if unheld), token, expires_in_ms}],
undecodable [{group, error}] (records that are not tenure leases),
catalog_unreadable [{member, reason}] (live members of a set that follows a
shard catalog which cannot read it, and so stand for no shard they have not
read in one; shown as a warning line for people), group_lease (null, or
{state, holder, token}: a plain lease under the set's own name, which the set
does not use). A store that cannot list groups
(kafka://) shows the group alone, with a warning on stderr saying so.

",
    exit_codes!()
);

const LIST_EXAMPLES: &str = concat!(
    "\
Examples:
  tenure list
  tenure list --prefix nightly- --store postgres://app@db/app
  tenure list --json | jq '.groups[] | select(.state == \"held\") | .group'

One row per group: its name, state (held, expired: held but not renewed in
time by its holder's clock, released), holder, fencing token and expiry. A
sharded set shows as its member and shard groups (SET/members/ID,
SET/shards/N); `tenure status --group SET` sums them up. JSON fields: store,
prefix, groups [{group, state, holder (null if released), token, metadata,
expires_at (RFC 3339), expires_in_ms (negative once expired)}], undecodable
[{group, error}] (records that are not tenure leases). A store that cannot
list its groups (kafka://) is refused with exit 2.

",
    exit_codes!()
);

const WATCH_EXAMPLES: &str = concat!(
    "\
Examples:
  tenure watch --group nightly-billing
  tenure watch --group nightly-billing --json | jq .leader.candidate

Prints the leader at start, then one line per change. A leader counts as gone
once its record stayed unchanged for its term × 1.01. JSON fields per line:
at (RFC 3339), group, leader (null, or {candidate, token, metadata,
renewed_at, expires_at}).

",
    exit_codes!()
);

const RELEASE_EXAMPLES: &str = concat!(
    "\
Examples:
  # Clear the lease of a crashed holder (waits one term to make sure):
  tenure release --group nightly-billing

  # Take leadership away from a live holder, safely:
  tenure release --group nightly-billing --force

Without --force, tenure watches the record for its term × 1.01; if it stays
unchanged the holder is gone, and the record is released (holder cleared, the
fencing token kept). If the holder renews meanwhile, nothing is written and
tenure exits 3.

With --force, tenure writes an operator record (holder
operator:tenure-release-force, the next fencing token, the group's term) at
once. A live holder's next renewal fails: it is superseded and stops its work
by its deadline. Candidates wait the operator record out for its term × 1.01
before the next one takes over with a higher token, so the old holder has
stopped first: never two leaders.

--unsafe-clear (DANGEROUS) clears the lease at once instead: a waiting
candidate takes over within a round trip while a live holder keeps acting
until its next renewal. Two leaders act at once; only fencing tokens checked
by the resource protect the data. For a holder known to be dead and a group
that cannot wait one term.

",
    exit_codes!()
);

const DEMO_EXAMPLES: &str = "\
Examples:
  tenure demo
  tenure demo --candidates 5 --duration 1m
  tenure demo --json | jq .handovers

Starts N `tenure demo-candidate` processes on a fresh SQLite file, then takes
the leader down in turns: SIGTERM (graceful stop), SIGKILL (crash), SIGSTOP for
longer than a term then SIGCONT (pause). Every candidate reports its terms
with CLOCK_BOOTTIME timestamps; the demo checks that no two terms' validity
intervals overlap and that tokens strictly rise, and exits 1 if either fails.";

const BENCH_EXAMPLES: &str = "Examples:
  # tenure on PostgreSQL and Redis, then etcd's own election as the reference
  tenure bench --store postgres://app:secret@db/app --store redis://cache:6379 \\
      --etcdctl http://127.0.0.1:2379
  # more hand-overs, a longer term, as JSON
  tenure bench --store etcd://127.0.0.1:2379 --handovers 50 --term 5s --json
  # many groups in one process (and followers in a second): 100, 1000, 10000
  tenure bench --groups 100,1000,10000 --store sqlite:///tmp/scale.db --store memory://
  # a sharded set: 64 shards over 8 member processes; a 9th joins, one leaves
  # (SIGTERM), one is killed (SIGKILL), three rounds
  tenure bench --shards 64 --members 8 --store sqlite:///tmp/shards.db
  # a sharded set following a changing catalog: added, split, removed shards
  tenure bench --catalog --members 4 --store sqlite:///tmp/catalog.db
  # preemption: a higher-priority candidate's start to its election
  tenure bench --priority --rounds 5 --store sqlite:///tmp/priority.db";

/// `tenure bench`.
#[derive(Debug, Args)]
#[command(after_help = BENCH_EXAMPLES)]
pub struct BenchArgs {
    /// A store to measure (repeat for several).
    #[arg(long = "store", value_name = "URL")]
    pub stores: Vec<String>,
    /// Graceful hand-overs and crash fail-overs to measure per store.
    #[arg(long, default_value_t = 20)]
    pub handovers: usize,
    /// The term the candidates use [default: 2s for hand-overs and
    /// --shards, so crash fail-overs finish soon; 10s with --groups].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub term: Option<std::time::Duration>,
    /// Measure many groups in one process instead of hand-overs: for each
    /// count (comma-separated), this process leads that many groups and a
    /// second process follows them all. `memory://` is allowed here (its
    /// followers run in this process).
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    pub groups: Vec<usize>,
    /// With --groups: how many terms the steady-state window lasts.
    #[arg(long, value_name = "TERMS", default_value_t = 3)]
    pub window_terms: u32,
    /// Measure a sharded set instead of hand-overs: this many shards over
    /// --members member processes (`tenure::Shards`); in each of --rounds
    /// rounds a member joins, one leaves gracefully (SIGTERM) and one is
    /// killed (SIGKILL), and the table shows how long until every shard is
    /// held and the load balanced again, and how many shards moved.
    #[arg(long, value_name = "N", conflicts_with_all = ["groups", "etcdctl"])]
    pub shards: Option<usize>,
    /// With --shards: how many member processes the set starts with; with
    /// --catalog, how many members (on handles of their own).
    #[arg(long, value_name = "M", default_value_t = 8)]
    pub members: usize,
    /// With --shards: how many rounds of join, graceful leave and kill;
    /// with --catalog, of a shard added, one split and one removed; with
    /// --priority, of a preemption.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rounds: usize,
    /// Measure a sharded set that follows a changing catalog instead of
    /// hand-overs: --members members on each store; in each of --rounds
    /// rounds a shard is added, a held shard splits (its children wait for
    /// its holder to mark it finished) and one is removed, and the table
    /// shows how long each change took to be followed.
    #[arg(long, conflicts_with_all = ["groups", "shards", "overload", "etcdctl"])]
    pub catalog: bool,
    /// Measure preemption instead of hand-overs: on each store, a leader of
    /// no priority and then a candidate of higher priority (preemption
    /// delay: one term); the table shows the time from the higher
    /// candidate's start to its election, and the gap with no leader.
    #[arg(long, conflicts_with_all = ["groups", "shards", "overload", "etcdctl", "catalog"])]
    pub priority: bool,
    /// An etcd endpoint to measure `etcdctl elect` on, as the reference.
    #[arg(long, value_name = "ENDPOINT")]
    pub etcdctl: Option<String>,
    /// Crash samples for `etcdctl elect`; each waits out its 60 s session lease.
    #[arg(long, default_value_t = 3)]
    pub etcdctl_crash_samples: usize,
    /// Measure many groups past what the store serves instead of
    /// hand-overs: for each count (comma-separated), two standby processes
    /// stand in every group; the table shows how many groups stay led over
    /// time, through a pause of the store server (--pause-pid) and a
    /// SIGKILL of the process that led.
    #[arg(long, value_name = "N,...", value_delimiter = ',', conflicts_with_all = ["groups", "shards", "etcdctl"])]
    pub overload: Vec<usize>,
    /// With --overload: the store server's pid, stopped (SIGSTOP) for
    /// --pause once the groups have settled, then continued; its CPU is
    /// reported too.
    #[arg(long, value_name = "PID", requires = "overload")]
    pub pause_pid: Option<u32>,
    /// With --overload and --pause-pid: how long the store server stays
    /// stopped.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "1.5s")]
    pub pause: std::time::Duration,
    /// With --overload: how many runs per count (the table shows each, and
    /// the worst).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "overload")]
    pub runs: usize,
    /// Measure what one renewal costs instead of hand-overs: on each
    /// store, N leases (--groups, default 100,000; term 10s unless --term)
    /// held by tenure and, on Redis, by the loop a user would write
    /// instead (a task per lease, a compare-and-set script every third of
    /// the term); the table shows the client's and the store server's CPU
    /// per renewal and the time to hold them all.
    #[arg(long, conflicts_with_all = ["shards", "overload", "etcdctl", "catalog", "priority"])]
    pub renewal_cost: bool,
    /// With --renewal-cost: the store server's pid, whose CPU (with its
    /// children's, e.g. PostgreSQL's backends) is read from /proc; Redis's
    /// is read from its INFO without it.
    #[arg(long, value_name = "PID", requires = "renewal_cost")]
    pub store_pid: Option<u32>,
    /// With --renewal-cost: the runtime's worker threads, as a service
    /// built on `#[tokio::main]` has one per core; 1 runs everything on
    /// one thread, as every other command does.
    #[arg(long, value_name = "N", default_value_t = 2, requires = "renewal_cost",
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
}
