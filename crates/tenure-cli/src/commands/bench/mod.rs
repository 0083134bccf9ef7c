//! `tenure bench`: hand-over and crash fail-over times, and store operations
//! per term, on real stores, side by side with `etcdctl elect` (etcd's own
//! election) as the reference. A program that prints a table; it asserts
//! nothing about time.
//!
//! A "crash" cuts the leader off from the store (its operations hang, as if
//! the process or its host died): the others can only wait out its lease.
//!
//! The other measurements are modules beside it: [`scale`] (`--groups`,
//! with the hidden `tenure bench-followers`), [`shard_bench`] (`--shards`,
//! with `tenure bench-member`), [`catalog`] (`--catalog`), [`priority`]
//! (`--priority`), [`overload`] (`--overload`, with
//! `tenure bench-standby`), [`renewal_cost`] (`--renewal-cost`, tenure
//! beside a naive loop), `kafka` (hand-overs on `kafka://`) and
//! [`procstat`] (what they read of a process from `/proc`).

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tenure::store::{Counted, OpCounters};

use anyhow::{bail, Context};
use tenure::{Config, Elector, Faults, GroupName};
use tokio::io::{AsyncBufReadExt, BufReader};

pub(crate) mod catalog;
#[cfg(feature = "kafka")]
mod kafka;
pub(crate) mod overload;
pub(crate) mod priority;
mod procstat;
pub(crate) mod renewal_cost;
pub(crate) mod scale;
pub(crate) mod shard_bench;

use crate::cli::BenchArgs;
use crate::exit::usage;
use crate::store_url::StoreUrl;

/// For a mode whose `who` (members, candidates) each open a handle of
/// their own: refuses `memory://` (it lives in one handle), and returns
/// the term (2 s unless `--term` says).
pub(crate) fn separate_handles(
    urls: &[StoreUrl],
    flag: &str,
    who: &str,
    term: Option<Duration>,
) -> anyhow::Result<Duration> {
    if urls.iter().any(|u| !u.is_shared()) {
        return Err(usage(format!(
            "{flag} needs a real store: each {who} opens its own handle, and memory:// lives in one"
        )));
    }
    Ok(term.unwrap_or(Duration::from_secs(2)))
}

/// Runs `tenure bench`.
pub async fn run(args: BenchArgs) -> anyhow::Result<u8> {
    if args.stores.is_empty() && args.etcdctl.is_none() {
        return Err(usage(
            "nothing to measure: give --store URL (repeatable) and/or --etcdctl ENDPOINT",
        ));
    }
    let urls = args
        .stores
        .iter()
        .map(|u| StoreUrl::parse(u).map_err(usage))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if args.renewal_cost {
        let rows = renewal_cost::run(&args, &urls).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            print!("{}", renewal_cost::table(&rows));
        }
        return Ok(0);
    }
    if args.catalog {
        let rows = catalog::run(&args, &urls).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            print!("{}", catalog::table(&rows));
        }
        // A shard worked by two members at once is a broken guarantee.
        return Ok(u8::from(rows.iter().any(catalog::CatalogRow::overlapped)));
    }
    if args.priority {
        let rows = priority::run(&args, &urls).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            print!("{}", priority::table(&rows));
        }
        // Two terms at once is a broken guarantee.
        return Ok(u8::from(rows.iter().any(priority::PriorityRow::overlapped)));
    }
    if let Some(shards) = args.shards {
        let bench = shard_bench::run(&args, &urls, shards).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&bench)?);
        } else {
            print!("{}", shard_bench::table(&bench));
        }
        // A shard worked by two members at once is a broken guarantee.
        return Ok(u8::from(bench.overlaps() != 0));
    }
    if !args.overload.is_empty() {
        if args.overload.contains(&0) {
            return Err(usage("--overload counts must be positive"));
        }
        if urls.iter().any(|u| !u.is_shared()) {
            return Err(usage(
                "--overload needs a real store: memory:// lives in one process",
            ));
        }
        let runs = overload::run(&args, &urls).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&runs)?);
        } else {
            print!("{}", overload::table(&runs));
        }
        return Ok(0);
    }
    if !args.groups.is_empty() {
        if args.groups.contains(&0) {
            return Err(usage("--groups counts must be positive"));
        }
        let rows = scale::run(&args, &urls).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            print!("{}", scale::table(&rows));
        }
        return Ok(0);
    }
    if urls.iter().any(|u| !u.is_shared()) {
        return Err(usage(
            "memory:// is not a store to benchmark: give a real one",
        ));
    }
    Config::new(hand_over_term(&args))
        .validate()
        .map_err(usage)?;
    let mut rows = Vec::new();
    for url in &urls {
        rows.push(measure_store(url, &args).await?);
    }
    if let Some(endpoint) = &args.etcdctl {
        rows.push(measure_etcdctl(endpoint, &args).await?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", table(&rows, &args));
    }
    Ok(0)
}

/// The term of the hand-over measurements: short, so crash fail-overs
/// finish soon.
fn hand_over_term(args: &BenchArgs) -> Duration {
    args.term.unwrap_or(Duration::from_secs(2))
}

/// One row of the table.
#[derive(Debug, serde::Serialize)]
struct Row {
    system: String,
    graceful: Stats,
    crash: Stats,
    crash_bound_ms: Option<f64>,
    leader_ops_per_term: Option<f64>,
    candidate_ops_per_term: Option<f64>,
}

/// A sample's summary, in milliseconds.
#[derive(Debug, Default, serde::Serialize)]
pub struct Stats {
    pub n: usize,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Stats {
    pub fn of(mut samples: Vec<Duration>) -> Stats {
        samples.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        // Nearest rank: the smallest sample with at least q of them at or below.
        let rank = |q: f64| {
            let n = samples.len();
            let i = ((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
            samples.get(i).map_or(0.0, |d| ms(*d))
        };
        Stats {
            n: samples.len(),
            median_ms: rank(0.5),
            p99_ms: rank(0.99),
            max_ms: samples.last().map_or(0.0, |d| ms(*d)),
        }
    }
}

struct Candidate {
    elector: Elector,
    ops: Arc<OpCounters>,
}

impl Candidate {
    /// The records it read and wrote so far.
    fn ops(&self) -> u64 {
        let counts = self.ops.snapshot();
        counts.read_items + counts.write_items
    }
}

/// Candidates of one group on one store, each on its own connection.
struct Pool<'a> {
    url: &'a StoreUrl,
    group: GroupName,
    config: Config,
    faults: Faults,
    started: usize,
}

impl Pool<'_> {
    async fn candidate(&mut self) -> anyhow::Result<Candidate> {
        self.started += 1;
        let id = format!("bench-{}", self.started);
        let store = self
            .url
            .open()
            .await
            .with_context(|| format!("cannot open {}", self.url))?;
        let ops = Arc::new(OpCounters::default());
        let counting = Counted::new(store).counting_into(ops.clone());
        let elector = Elector::builder(self.faults.wrap(counting, id.clone()), self.group.as_str())
            .candidate_id(id)
            .config(self.config.clone())
            .start()?;
        Ok(Candidate { elector, ops })
    }

    fn patience(&self) -> Duration {
        self.config.term * 10
    }

    /// Hand-overs of one kind: a crash cuts the leader off, otherwise the
    /// leader shuts down gracefully. Two candidates stand throughout.
    async fn handovers(&mut self, n: usize, crash: bool) -> anyhow::Result<Vec<Duration>> {
        let mut pool = vec![self.candidate().await?, self.candidate().await?];
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let i = wait_for(self.patience(), || {
                pool.iter().position(|c| c.elector.is_leader())
            })
            .await?;
            // Let the follower read the record and subscribe, as in steady state.
            tokio::time::sleep(self.config.term / 4).await;
            let old = pool.remove(i);
            let t0 = Instant::now();
            if crash {
                self.faults.partition(old.elector.candidate_id());
            } else {
                old.elector.shutdown().await;
            }
            wait_for(self.patience(), || {
                pool.iter().position(|c| c.elector.is_leader())
            })
            .await?;
            samples.push(t0.elapsed());
            // A cut-off leader is gone for good; its driver gives up alone.
            drop(old);
            pool.push(self.candidate().await?);
        }
        for c in pool {
            c.elector.shutdown().await;
        }
        Ok(samples)
    }

    /// Store operations per term of a steady leader and a waiting candidate.
    async fn ops_per_term(&mut self) -> anyhow::Result<(f64, f64)> {
        let pool = [self.candidate().await?, self.candidate().await?];
        let leader = wait_for(self.patience(), || {
            pool.iter().position(|c| c.elector.is_leader())
        })
        .await?;
        tokio::time::sleep(self.config.term).await;
        let before: Vec<u64> = pool.iter().map(Candidate::ops).collect();
        let terms = 10u32;
        tokio::time::sleep(self.config.term * terms).await;
        let per_term = |j: usize| pool[j].ops().saturating_sub(before[j]) as f64 / f64::from(terms);
        let figures = (per_term(leader), per_term(1 - leader));
        for c in pool {
            c.elector.shutdown().await;
        }
        Ok(figures)
    }
}

/// Polls `found` every millisecond until it yields, or fails after `within`.
async fn wait_for<T>(within: Duration, mut found: impl FnMut() -> Option<T>) -> anyhow::Result<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = found() {
            return Ok(v);
        }
        if start.elapsed() > within {
            bail!("nobody was elected within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn measure_store(url: &StoreUrl, args: &BenchArgs) -> anyhow::Result<Row> {
    #[cfg(feature = "kafka")]
    if let (true, Some(raw)) = (url.scheme() == "kafka", url.raw()) {
        let term = hand_over_term(args);
        eprintln!(
            "{url}: {} graceful hand-overs, then {} crash fail-overs, between candidate processes",
            args.handovers, args.handovers
        );
        let (graceful, crash) = kafka::handovers(raw, term, args.handovers).await?;
        return Ok(Row {
            system: "tenure on kafka".into(),
            graceful: Stats::of(graceful),
            crash: Stats::of(crash),
            // The rebalance after the session timeout has no bound tenure
            // can promise.
            crash_bound_ms: None,
            leader_ops_per_term: None,
            candidate_ops_per_term: None,
        });
    }
    let config = Config::new(hand_over_term(args));
    let bound = config.validate()?.bounds().crash_failover;
    let mut pool = Pool {
        url,
        group: GroupName::new(format!("bench-{:016x}", rand::random::<u64>()))?,
        config,
        faults: Faults::new(),
        started: 0,
    };
    eprintln!("{url}: {} graceful hand-overs", args.handovers);
    let graceful = pool.handovers(args.handovers, false).await?;
    eprintln!("{url}: {} crash fail-overs", args.handovers);
    let crash = pool.handovers(args.handovers, true).await?;
    eprintln!("{url}: store operations over 10 terms");
    let (leader, candidate) = pool.ops_per_term().await?;
    Ok(Row {
        system: format!("tenure on {}", url.scheme()),
        graceful: Stats::of(graceful),
        crash: Stats::of(crash),
        crash_bound_ms: Some(bound.as_secs_f64() * 1000.0),
        leader_ops_per_term: Some(leader),
        candidate_ops_per_term: Some(candidate),
    })
}

/// One `etcdctl elect` candidate; it prints its proposal once elected.
struct Etcdctl {
    child: tokio::process::Child,
    elected: tokio::sync::watch::Receiver<bool>,
}

impl Etcdctl {
    fn spawn(endpoint: &str, election: &str, proposal: String) -> anyhow::Result<Etcdctl> {
        let mut child = tokio::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoint, "elect", election, &proposal])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("cannot run etcdctl (Debian: apt-get install etcd-client)")?;
        let stdout = child.stdout.take().context("etcdctl has no stdout")?;
        let (tx, elected) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line == proposal {
                    let _ = tx.send(true);
                }
            }
        });
        Ok(Etcdctl { child, elected })
    }

    fn is_leader(&self) -> bool {
        *self.elected.borrow()
    }

    fn signal(&self, signal: i32) {
        crate::process::child::signal_tokio_child(&self.child, signal);
    }
}

/// `etcdctl elect` hand-overs: SIGINT makes the leader resign, SIGKILL
/// leaves its session lease (60 s) to expire.
async fn etcdctl_handovers(
    endpoint: &str,
    samples: usize,
    signal: i32,
) -> anyhow::Result<Vec<Duration>> {
    let election = format!("bench-{:016x}", rand::random::<u64>());
    let mut started = 0;
    let mut spawn = || {
        started += 1;
        Etcdctl::spawn(endpoint, &election, format!("p{started}"))
    };
    let patience = Duration::from_secs(120);
    let mut pool = vec![spawn()?, spawn()?];
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let i = wait_for(patience, || pool.iter().position(Etcdctl::is_leader)).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut old = pool.remove(i);
        let t0 = Instant::now();
        old.signal(signal);
        wait_for(patience, || pool.iter().position(Etcdctl::is_leader)).await?;
        out.push(t0.elapsed());
        let _ = old.child.wait().await;
        pool.push(spawn()?);
    }
    Ok(out)
}

async fn measure_etcdctl(endpoint: &str, args: &BenchArgs) -> anyhow::Result<Row> {
    eprintln!("etcdctl elect: {} graceful hand-overs", args.handovers);
    let graceful = etcdctl_handovers(endpoint, args.handovers, libc::SIGINT).await?;
    eprintln!(
        "etcdctl elect: {} crash fail-overs (each waits out the 60 s session lease)",
        args.etcdctl_crash_samples
    );
    let crash = etcdctl_handovers(endpoint, args.etcdctl_crash_samples, libc::SIGKILL).await?;
    Ok(Row {
        system: "etcdctl elect (reference)".into(),
        graceful: Stats::of(graceful),
        crash: Stats::of(crash),
        crash_bound_ms: Some(60_000.0),
        leader_ops_per_term: None,
        candidate_ops_per_term: None,
    })
}

fn table(rows: &[Row], args: &BenchArgs) -> String {
    let mut out = format!(
        "\nterm {:?}; per store {} graceful hand-overs and {} crash fail-overs (etcdctl elect: {} crashes)\n\n",
        hand_over_term(args),
        args.handovers,
        args.handovers,
        args.etcdctl_crash_samples
    );
    out.push_str("| system | graceful median | graceful p99 | crash median | crash p99 | crash bound | leader ops/term | candidate ops/term |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    let ops = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.1}"));
    for r in rows {
        out.push_str(&format!(
            "| {} | {:.1} ms | {:.1} ms | {:.0} ms | {:.0} ms | {} | {} | {} |\n",
            r.system,
            r.graceful.median_ms,
            r.graceful.p99_ms,
            r.crash.median_ms,
            r.crash.p99_ms,
            r.crash_bound_ms
                .map_or("n/a".to_owned(), |b| format!("{b:.0} ms")),
            ops(r.leader_ops_per_term),
            ops(r.candidate_ops_per_term),
        ));
    }
    out
}
