//! `tenure-sim`: runs many seeds of the election simulation and prints a
//! summary; exits non-zero if any invariant broke. By default it drives the
//! state machine directly (the machine tier); `--elector` runs the real
//! electors on tokio's paused clock instead (the elector tier), and
//! `--shards` sharded sets of real `Shards` members (the sharded tier).
//!
//! ```text
//! cargo run -p tenure-sim --release -- --seeds 1000
//! cargo run -p tenure-sim --release -- --seeds 200 --start-seed 5000 --nodes 3..20
//! cargo run -p tenure-sim --release -- --seed 42 --trace
//! cargo run -p tenure-sim --release -- --elector --seeds 1000
//! cargo run -p tenure-sim --release -- --elector --priorities --seeds 300
//! cargo run -p tenure-sim --release -- --shards --seeds 1000
//! ```

use std::io::Write;
use std::ops::RangeInclusive;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use tenure_sim::elector::{ElectorFaultRates, ElectorParams};
use tenure_sim::shards::ShardParams;
use tenure_sim::{
    FaultPlan, FaultRates, Liveness, Notify, Params, Shared, SimParams, SkewBound, Tier,
    TierReport, TierSummary,
};

/// Deterministic simulation of tenure elections with an invariant checker.
#[derive(Parser, Debug)]
#[command(name = "tenure-sim", version)]
struct Args {
    /// Run the real electors (driver, publisher, terms) over a faulty
    /// in-memory store on tokio's paused clock, instead of the bare machines.
    #[arg(long)]
    elector: bool,
    /// Run sharded sets of real `Shards` members (membership, assignment,
    /// one lease per shard) over a faulty in-memory store on tokio's paused
    /// clock, with members joining, leaving, crashing and pausing.
    #[arg(long, conflicts_with = "elector")]
    shards: bool,
    /// How many seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    start_seed: u64,
    /// Run only this seed (overrides --seeds and --start-seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Print every event of the run (with --seed).
    #[arg(long)]
    trace: bool,
    /// Candidates per seed (members that start, with --shards): `N`, or a
    /// range `A..B` (inclusive), within 2..20 (2..12 with --shards).
    #[arg(long, value_parser = parse_nodes)]
    nodes: Option<RangeInclusive<usize>>,
    /// Shards per set (sharded tier): `N` or `A..B`, within 1..64.
    #[arg(long, value_parser = parse_nodes, requires = "shards")]
    shard_count: Option<RangeInclusive<usize>>,
    /// The most members running at once (sharded tier), up to 16.
    #[arg(long, requires = "shards")]
    max_members: Option<usize>,
    /// The set follows a changing catalog (sharded tier): shards split,
    /// merge, come and go during the fault phase.
    #[arg(long, requires = "shards")]
    catalog: bool,
    /// A negative control for --catalog: the source lists children without
    /// their parents.
    #[arg(long, requires = "catalog", hide = true)]
    catalog_forgets_parents: bool,
    /// Hostile catalog faults (sharded tier, with --catalog), drawn per
    /// seed: names escaped twice where stored, a shard naming 300 parents,
    /// a part 0 claiming 65,536 parts, and at the tail's start the
    /// catalog leader's source failing on that member only.
    #[arg(long, requires = "catalog")]
    catalog_hostile: bool,
    /// A negative control for --catalog-hostile: the source fails on every
    /// member at the tail's start.
    #[arg(long, requires = "catalog_hostile", hide = true)]
    catalog_source_fails_everywhere: bool,
    /// A negative control for --catalog-hostile: the checker expects the
    /// shard naming 300 parents to be held.
    #[arg(long, requires = "catalog_hostile", hide = true)]
    catalog_expects_left_out: bool,
    /// A negative control for --catalog-hostile: the part 0 planted comes
    /// with all 4,096 parts it claims.
    #[arg(long, requires = "catalog_hostile", hide = true)]
    catalog_plants_whole: bool,
    /// Groups every candidate stands in (elector tier): `N` or `A..B`,
    /// within 1..16.
    #[arg(long, value_parser = parse_nodes, requires = "elector")]
    groups: Option<RangeInclusive<usize>>,
    /// Candidate priorities (elector tier): each candidate gets a priority
    /// drawn from the seed (some equal, some none) and higher ones preempt
    /// lower; checks that once every fault has healed the highest-priority
    /// live candidate leads within a derived bound and leadership then
    /// stays put.
    #[arg(long, requires = "elector")]
    priorities: bool,
    /// A negative control for --priorities: the electors are built without
    /// their priorities, while the checker still expects them.
    #[arg(long, requires = "priorities", hide = true)]
    priorities_unset: bool,
    /// A negative control for --priorities: the stale transfer requests of
    /// the tail name a priority above the leader's, so it hands over to a
    /// candidate of no higher priority.
    #[arg(long, requires = "priorities", hide = true)]
    priorities_forge_above: bool,
    /// A negative control for --priorities: in the seeds that run the chain
    /// of priorities under a dead leader, requests without the rewrite
    /// mark are written into its record, delaying the takeover.
    #[arg(long, requires = "priorities", hide = true)]
    priorities_chain_unmarked: bool,
    /// The term in milliseconds.
    #[arg(long)]
    term_ms: Option<u64>,
    /// The configured drift bound (a fraction).
    #[arg(long)]
    drift: Option<f64>,
    /// How far clocks actually drift, if not within the configured bound.
    #[arg(long)]
    actual_drift: Option<f64>,
    /// Wall-clock skew bound: `off`, `on:MS` or `random:MS`.
    #[arg(long, value_parser = parse_skew)]
    skew: Option<SkewBound>,
    /// Change notifications from the store: `off`, `on` or `random`.
    #[arg(long, value_parser = parse_notify)]
    notify: Option<Notify>,
    /// Application liveness timeout: `off`, `on:MS` or `random:MS`.
    #[arg(long, value_parser = parse_liveness)]
    liveness: Option<Liveness>,
    /// Seconds of fault injection before the fault-free tail.
    #[arg(long)]
    fault_secs: Option<u64>,
    /// Ordinary one-way store latency bound in milliseconds.
    #[arg(long)]
    latency_ms: Option<u64>,
    /// How far wall clocks actually stray from true time, in ms, if not
    /// within half the skew bound (a negative control).
    #[arg(long)]
    actual_wall_offset_ms: Option<u64>,
    /// Anchor every leader's deadline at the reply instead of the send (a
    /// deliberately broken machine: a negative control).
    #[arg(long, conflicts_with_all = ["elector", "shards"])]
    anchor_at_receive: bool,
    /// Inject crashes only.
    #[arg(long, conflicts_with_all = ["no_faults", "elector", "shards"])]
    crash_only: bool,
    /// No partitions or storms (elector tier): every store operation
    /// completes or fails, late at worst.
    #[arg(long, requires = "elector", conflicts_with = "no_faults")]
    no_partitions: bool,
    /// Inject no faults at all.
    #[arg(long)]
    no_faults: bool,
}

fn parse_nodes(s: &str) -> Result<RangeInclusive<usize>, String> {
    let num = |x: &str| {
        x.trim()
            .parse::<usize>()
            .map_err(|e| format!("{x:?} is not a node count: {e}"))
    };
    if let Some((a, b)) = s.split_once("..") {
        let b = b.strip_prefix('=').unwrap_or(b);
        Ok(num(a)?..=num(b)?)
    } else {
        let n = num(s)?;
        Ok(n..=n)
    }
}

fn parse_skew(s: &str) -> Result<SkewBound, String> {
    let ms = |x: &str| {
        x.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|e| format!("{x:?} is not milliseconds: {e}"))
    };
    match s.split_once(':') {
        None if s == "off" => Ok(SkewBound::Off),
        Some(("on", x)) => Ok(SkewBound::On(ms(x)?)),
        Some(("random", x)) => Ok(SkewBound::Random(ms(x)?)),
        _ => Err(format!("{s:?}: use off, on:MS or random:MS")),
    }
}

fn parse_liveness(s: &str) -> Result<Liveness, String> {
    match parse_skew(s)? {
        SkewBound::Off => Ok(Liveness::Off),
        SkewBound::On(d) => Ok(Liveness::On(d)),
        SkewBound::Random(d) => Ok(Liveness::Random(d)),
    }
}

fn parse_notify(s: &str) -> Result<Notify, String> {
    match s {
        "off" => Ok(Notify::Off),
        "on" => Ok(Notify::On),
        "random" => Ok(Notify::Random),
        _ => Err(format!("{s:?}: use off, on or random")),
    }
}

/// Sets what every tier shares from the command line. The skew bound and
/// liveness timeout scale with the term unless given: the defaults are a
/// fifth of a 2 s term and one term.
fn apply_shared(args: &Args, s: &mut Shared) {
    if let Some(ms) = args.term_ms {
        s.term = Duration::from_millis(ms);
        s.skew = SkewBound::Random(s.term / 5);
        s.liveness = s.liveness.map(|_| Liveness::Random(s.term));
    }
    if let Some(d) = args.drift {
        s.drift = d;
    }
    s.actual_drift = args.actual_drift;
    if let Some(k) = args.skew {
        s.skew = k;
    }
    s.actual_wall_offset = args.actual_wall_offset_ms.map(Duration::from_millis);
    if let Some(n) = args.notify {
        s.notify = n;
    }
    if let (Some(l), Some(_)) = (args.liveness, s.liveness) {
        s.liveness = Some(l);
    }
    if let Some(secs) = args.fault_secs {
        s.fault_phase = Duration::from_secs(secs);
    }
    if let Some(ms) = args.latency_ms {
        s.latency = Duration::from_millis(ms);
    }
    s.trace = args.trace && args.seed.is_some();
}

/// The parameters of tier `T` the arguments ask for: the tier's defaults,
/// then what `tier` sets from the arguments of that tier alone, then the
/// shared settings and `--no-faults`.
fn params<T: Tier>(args: &Args, tier: impl FnOnce(&mut Params<T>)) -> Params<T> {
    let mut p = Params::<T>::default();
    tier(&mut p);
    apply_shared(args, &mut p.shared);
    if args.no_faults {
        p.faults = T::Faults::none();
    }
    p
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.shards {
        let sets = params(&args, |p: &mut ShardParams| {
            if let Some(n) = &args.nodes {
                p.tier.members = n.clone();
                p.tier.max_members = p.tier.max_members.max(*n.end());
            }
            if let Some(m) = args.max_members {
                p.tier.max_members = m;
            }
            if let Some(s) = &args.shard_count {
                p.tier.shards = s.clone();
            }
            p.tier.catalog |= args.catalog;
            p.tier.catalog_forgets_parents |= args.catalog_forgets_parents;
            p.tier.catalog_hostile |= args.catalog_hostile;
            p.tier.catalog_source_fails_everywhere |= args.catalog_source_fails_everywhere;
            p.tier.catalog_expects_left_out |= args.catalog_expects_left_out;
            p.tier.catalog_plants_whole |= args.catalog_plants_whole;
        });
        drive(&args, sets)
    } else if args.elector {
        let electors = params(&args, |p: &mut ElectorParams| {
            if let Some(n) = &args.nodes {
                p.tier.nodes = n.clone();
            }
            if let Some(g) = &args.groups {
                p.tier.groups = g.clone();
            }
            p.tier.priorities = args.priorities;
            p.tier.priorities_unset = args.priorities_unset;
            p.tier.priorities_forge_above = args.priorities_forge_above;
            p.tier.priorities_chain_unmarked = args.priorities_chain_unmarked;
            if args.no_partitions {
                p.faults = ElectorFaultRates::without_partitions();
            }
        });
        drive(&args, electors)
    } else {
        let machines = params(&args, |p: &mut SimParams| {
            if let Some(n) = &args.nodes {
                p.tier.nodes = n.clone();
            }
            p.tier.anchor_at_receive = args.anchor_at_receive;
            if args.crash_only {
                p.faults = FaultRates::crash_only();
            }
        });
        drive(&args, machines)
    }
}

/// Runs the seeds the arguments ask for on `tier` and prints the summary.
fn drive<T: Tier>(args: &Args, tier: Params<T>) -> ExitCode {
    if let Err(e) = tier.check() {
        eprintln!("tenure-sim: {e}");
        return ExitCode::from(2);
    }
    let (first, count) = match args.seed {
        Some(s) => (s, 1),
        None => (args.start_seed, args.seeds),
    };
    let started = Instant::now();
    let mut summary = T::Summary::default();
    let step = (count / 20).max(1);
    for (i, seed) in (first..first.saturating_add(count)).enumerate() {
        let report = match tier.run(seed) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("tenure-sim: seed {seed}: {e}");
                return ExitCode::from(2);
            }
        };
        let run = report.record();
        if args.seed.is_some() {
            for l in &run.trace {
                println!("{l}");
            }
            println!("{report}");
        }
        for v in &run.violations {
            println!("VIOLATION {v}");
            println!("  replay: {}", tier.replay_command(seed));
        }
        summary.add(&report);
        let done = i as u64 + 1;
        if count > 1 && (done % step == 0 || done == count) {
            eprint!(
                "\r{done}/{count} seeds, {} violations, {:.1?} elapsed   ",
                summary.totals().violations.len(),
                started.elapsed()
            );
            let _ = std::io::stderr().flush();
        }
    }
    if count > 1 {
        eprintln!();
    }
    println!("{summary}");
    println!(
        "wall time                                {:.2?}",
        started.elapsed()
    );
    if summary.totals().violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
