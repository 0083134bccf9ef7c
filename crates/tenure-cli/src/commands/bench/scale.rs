//! `tenure bench --groups N`: many groups in one process. This process
//! leads N groups (one engine); a second `tenure` process stands in every
//! group as a follower. Both measure the same steady window and the table
//! shows, per store and N: time to elect all, CPU and memory per process,
//! store operations per group per term, batched round trips per second, and
//! what `Elector::is_leader` costs. A program that prints a table; it
//! asserts nothing about time.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tenure::{Config, Elector, Engine, EngineStats, Faults, LeaseStore};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cli::{BenchArgs, BenchFollowersArgs};
use crate::store_url::StoreUrl;

/// How long the renewals get to settle into their batches before measuring.
const SETTLE_TERMS: u32 = 1;

/// One row of the scale table.
#[derive(Debug, serde::Serialize)]
pub struct ScaleRow {
    store: String,
    groups: usize,
    elect_all_ms: f64,
    leaders: ProcessFigures,
    followers: Option<ProcessFigures>,
    is_leader_ns: f64,
}

/// What one process measured over the window.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ProcessFigures {
    /// CPU time over wall time (1.0 = one core busy).
    cores: f64,
    /// Resident memory added by the groups, per group.
    rss_per_group_bytes: f64,
    reads_per_group_term: f64,
    writes_per_group_term: f64,
    /// Batches sent (each one store request) per second.
    round_trips_per_s: f64,
    /// How many of its candidates led at the end of the window.
    leading: usize,
}

/// Runs the scale benchmark for every store and group count.
pub async fn run(args: &BenchArgs, urls: &[StoreUrl]) -> anyhow::Result<Vec<ScaleRow>> {
    let term = args.term.unwrap_or(Duration::from_secs(10));
    Config::new(term).validate()?;
    let mut rows = Vec::new();
    for url in urls {
        for &n in &args.groups {
            eprintln!("{url}: {n} groups, term {term:?}");
            rows.push(measure(url, n, term, args.window_terms).await?);
        }
    }
    Ok(rows)
}

async fn measure(
    url: &StoreUrl,
    n: usize,
    term: Duration,
    window_terms: u32,
) -> anyhow::Result<ScaleRow> {
    let store = url
        .open()
        .await
        .with_context(|| format!("cannot open {url}"))?;
    let prefix = format!("scale-{:016x}", rand::random::<u64>());
    let rss_before = rss_bytes();
    let began = Instant::now();
    let leaders = start_groups(store.clone(), &prefix, n, "leader", term)?;
    wait_all(&leaders, term * 20, "leading").await?;
    let elect_all = began.elapsed();
    eprintln!("  all {n} elected in {elect_all:.2?}");
    let engine = leaders[0]
        .engine()
        .context("a lease elector has an engine")?;
    let window = term * window_terms;
    let (leader_figures, follower_figures) = if url.is_shared() {
        let mut child = spawn_followers(url, &prefix, n, term, window)?;
        let stdout = child.stdout.take().context("the followers' stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        // The followers say when they stand and have settled.
        let ready = lines.next_line().await?.unwrap_or_default();
        if ready.trim() != "ready" {
            bail!("the follower process did not start: {ready}");
        }
        let leaders_figures = window_figures(&engine, &leaders, n, term, window, rss_before).await;
        let report = lines.next_line().await?.unwrap_or_default();
        let followers: ProcessFigures = serde_json::from_str(&report)
            .with_context(|| format!("the follower process reported {report:?}"))?;
        let _ = child.wait().await;
        (leaders_figures, Some(followers))
    } else {
        // memory://: followers on a second engine in this process (its CPU
        // and memory are counted with the leaders').
        let faults = Faults::new();
        let view: Arc<dyn LeaseStore> = Arc::new(faults.wrap(store.clone(), "followers"));
        let followers = start_groups(view, &prefix, n, "follower", term)?;
        tokio::time::sleep(term * SETTLE_TERMS).await;
        let figures = window_figures(&engine, &leaders, n, term, window, rss_before).await;
        shutdown_all(followers).await;
        (figures, None)
    };
    let is_leader_ns = is_leader_cost(&leaders[0]);
    shutdown_all(leaders).await;
    Ok(ScaleRow {
        store: url.scheme().to_owned(),
        groups: n,
        elect_all_ms: elect_all.as_secs_f64() * 1000.0,
        leaders: leader_figures,
        followers: follower_figures,
        is_leader_ns,
    })
}

pub(crate) fn start_groups(
    store: Arc<dyn LeaseStore>,
    prefix: &str,
    n: usize,
    id: &str,
    term: Duration,
) -> anyhow::Result<Vec<Elector>> {
    (0..n)
        .map(|i| {
            Elector::builder(store.clone(), format!("{prefix}-{i}"))
                .candidate_id(id)
                .config(Config::new(term))
                .start()
                .map_err(Into::into)
        })
        .collect()
}

async fn wait_all(electors: &[Elector], within: Duration, what: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let done = electors.iter().filter(|e| e.is_leader()).count();
        if done == electors.len() {
            return Ok(());
        }
        if start.elapsed() > within {
            bail!("only {done} of {} {what} after {within:?}", electors.len());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Measures this process over `window`.
async fn window_figures(
    engine: &Engine,
    electors: &[Elector],
    n: usize,
    term: Duration,
    window: Duration,
    rss_before: u64,
) -> ProcessFigures {
    let before = (engine.stats(), cpu_time(), Instant::now());
    tokio::time::sleep(window).await;
    let after = (engine.stats(), cpu_time(), Instant::now());
    figures(before, after, n, term, rss_before, electors)
}

fn figures(
    before: (EngineStats, Duration, Instant),
    after: (EngineStats, Duration, Instant),
    n: usize,
    term: Duration,
    rss_before: u64,
    electors: &[Elector],
) -> ProcessFigures {
    let wall = after.2.duration_since(before.2).as_secs_f64();
    let terms = wall / term.as_secs_f64();
    let per_group_term = |d: u64| d as f64 / n as f64 / terms;
    let (a, b) = (after.0, before.0);
    ProcessFigures {
        cores: (after.1.saturating_sub(before.1)).as_secs_f64() / wall,
        rss_per_group_bytes: rss_bytes().saturating_sub(rss_before) as f64 / n as f64,
        reads_per_group_term: per_group_term(a.reads - b.reads),
        writes_per_group_term: per_group_term(a.writes - b.writes),
        round_trips_per_s: ((a.read_batches - b.read_batches) + (a.write_batches - b.write_batches))
            as f64
            / wall,
        leading: electors.iter().filter(|e| e.is_leader()).count(),
    }
}

fn spawn_followers(
    url: &StoreUrl,
    prefix: &str,
    n: usize,
    term: Duration,
    window: Duration,
) -> anyhow::Result<tokio::process::Child> {
    let exe = std::env::current_exe().context("the tenure executable")?;
    // The whole URL, secrets included: a networked one as given, a file's
    // as displayed (it holds none).
    let raw = url.raw().map_or_else(|| url.to_string(), str::to_owned);
    tokio::process::Command::new(exe)
        .arg("bench-followers")
        .arg("--prefix")
        .arg(prefix)
        .arg("--count")
        .arg(n.to_string())
        .arg("--term")
        .arg(humantime::format_duration(term).to_string())
        .arg("--window")
        .arg(humantime::format_duration(window).to_string())
        // The URL may hold a password: through the environment, not argv.
        .env("TENURE_STORE", raw)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start the follower process")
}

/// `tenure bench-followers` (internal): stands in every group as a
/// follower, says `ready` once settled, measures the window and prints its
/// figures as one JSON line.
pub async fn followers(args: BenchFollowersArgs) -> anyhow::Result<u8> {
    let url = StoreUrl::resolve(args.store.store.as_deref())?;
    let store = url
        .open()
        .await
        .with_context(|| format!("cannot open {url}"))?;
    let rss_before = rss_bytes();
    let electors = start_groups(store, &args.prefix, args.count, "follower", args.term)?;
    let engine = electors[0]
        .engine()
        .context("a lease elector has an engine")?;
    tokio::time::sleep(args.term * SETTLE_TERMS).await;
    println!("ready");
    let figures = window_figures(
        &engine,
        &electors,
        args.count,
        args.term,
        args.window,
        rss_before,
    )
    .await;
    println!("{}", serde_json::to_string(&figures)?);
    shutdown_all(electors).await;
    Ok(0)
}

/// Shuts every elector down at once: one after another, each release
/// waits for a batch of its own (on a store whose round trip is 100 ms,
/// 5,000 groups took minutes).
async fn shutdown_all(electors: Vec<Elector>) {
    let mut stopping = tokio::task::JoinSet::new();
    for e in electors {
        stopping.spawn(async move { e.shutdown().await });
    }
    while stopping.join_next().await.is_some() {}
}

/// Nanoseconds per `is_leader()` call on a leading elector.
fn is_leader_cost(elector: &Elector) -> f64 {
    const CALLS: u32 = 2_000_000;
    let start = Instant::now();
    let mut yes = 0u32;
    for _ in 0..CALLS {
        yes += u32::from(std::hint::black_box(elector).is_leader());
    }
    std::hint::black_box(yes);
    start.elapsed().as_nanos() as f64 / f64::from(CALLS)
}

/// This process's CPU time (user + system).
#[allow(unsafe_code, reason = "std has no call for a process's CPU time")]
pub(crate) fn cpu_time() -> Duration {
    // SAFETY: getrusage writes only into the zeroed struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF is valid and `usage` is a valid out-pointer.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut usage) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// This process's resident memory, from `/proc/self/statm`.
#[allow(unsafe_code, reason = "std has no call for the page size")]
fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// The table, one row per store and group count.
pub fn table(rows: &[ScaleRow]) -> String {
    let mut out = String::new();
    out.push_str(
        "| store | groups | elect all | leaders: cores | followers: cores | RSS/group (leaders / followers) | leader reads + writes /group/term | follower reads + writes /group/term | round trips/s (leaders / followers) | is_leader() |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let f = r.followers.as_ref();
        let dash = || "in-process".to_owned();
        out.push_str(&format!(
            "| {} | {} | {:.2} s | {:.3} | {} | {:.1} KB / {} | {:.2} + {:.2} | {} | {:.0} / {} | {:.1} ns |\n",
            r.store,
            r.groups,
            r.elect_all_ms / 1000.0,
            r.leaders.cores,
            f.map_or_else(dash, |f| format!("{:.3}", f.cores)),
            r.leaders.rss_per_group_bytes / 1024.0,
            f.map_or_else(dash, |f| format!("{:.1} KB", f.rss_per_group_bytes / 1024.0)),
            r.leaders.reads_per_group_term,
            r.leaders.writes_per_group_term,
            f.map_or_else(dash, |f| format!(
                "{:.2} + {:.2}",
                f.reads_per_group_term, f.writes_per_group_term
            )),
            r.leaders.round_trips_per_s,
            f.map_or_else(dash, |f| format!("{:.0}", f.round_trips_per_s)),
            r.is_leader_ns,
        ));
    }
    out
}
