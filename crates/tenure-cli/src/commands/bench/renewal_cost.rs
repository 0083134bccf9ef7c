//! `tenure bench --renewal-cost`: what one renewal costs the client and
//! the store, tenure's engine side by side with the loop a user would
//! write instead, in one run.
//!
//! For each store and count N (`--groups`, default 100,000; term 10 s
//! unless `--term`), one phase per implementation, one after the other in
//! this process: start N leases, time until all are held ("elected in"),
//! let them settle for a term, then measure `--window-terms` terms: this
//! process's CPU (`getrusage`), the renewals made, and the store server's
//! CPU over the same window. On Redis the baseline runs first: one tokio
//! task per lease, a compare-and-set Lua script every third of the term
//! over one multiplexed connection, no fencing, no feed
//! (`tenure_redis::baseline`); the server's CPU is its `INFO cpu`. On
//! other stores only tenure is measured, and the server's CPU is that of
//! the process `--store-pid` and its children (PostgreSQL's backends),
//! from `/proc`. A program that prints a table; it asserts nothing.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::cli::BenchArgs;
use crate::commands::bench::procstat::process_cpu;
use crate::commands::bench::scale::{cpu_time, start_groups};
use crate::store_url::StoreUrl;

/// How long the leases settle after the last is held, in terms.
const SETTLE_TERMS: u32 = 1;

/// One implementation measured on one store at one count.
#[derive(Debug, serde::Serialize)]
pub struct CostRow {
    store: String,
    /// `tenure` or `naive loop`.
    implementation: String,
    groups: usize,
    term_s: f64,
    /// From the first start to every lease held.
    elected_in_s: f64,
    /// Renewals made over the window, per second.
    renewals_per_s: f64,
    /// This process's CPU time over the window per renewal, and over wall
    /// time (1.0 = one core busy).
    client_us_per_renewal: f64,
    client_cores: f64,
    /// The store server's CPU time over the window per renewal, and over
    /// wall time, if it could be read.
    store_us_per_renewal: Option<f64>,
    store_cores: Option<f64>,
    /// Leases held at the end of the window.
    held_at_end: usize,
    /// The host's load average (1, 5, 15 minutes) as the window began.
    load_average: Option<[f64; 3]>,
    /// The runtime's worker threads (`--threads`; 1: one thread).
    threads: u16,
}

/// Where the store server's CPU time is read.
enum ServerCpu {
    /// `INFO cpu` of the Redis at this URL.
    #[cfg(feature = "redis")]
    Redis(String),
    /// This process and its children, from `/proc`.
    Process(u32),
    Unknown,
}

impl ServerCpu {
    async fn read(&self) -> Option<Duration> {
        match self {
            #[cfg(feature = "redis")]
            ServerCpu::Redis(url) => tenure_redis::baseline::server_cpu(url).await.ok(),
            ServerCpu::Process(pid) => Some(tree_cpu(*pid)),
            ServerCpu::Unknown => None,
        }
    }
}

/// The CPU time of `pid` and of its children (one level: a PostgreSQL
/// postmaster's backends and workers).
fn tree_cpu(pid: u32) -> Duration {
    let mut total = process_cpu(pid).unwrap_or_default();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return total;
    };
    for entry in dir.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if parent_of(child) == Some(pid) {
            total += process_cpu(child).unwrap_or_default();
        }
    }
    total
}

/// A process's parent, from `/proc/PID/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The host's load average, from `/proc/loadavg`.
fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut f = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([f.next()??, f.next()??, f.next()??])
}

/// What one phase measured over its window.
struct Window {
    wall: Duration,
    client: Duration,
    server: Option<Duration>,
    renewals: u64,
    load: Option<[f64; 3]>,
}

impl Window {
    fn row(
        self,
        url: &StoreUrl,
        implementation: &str,
        n: usize,
        term: Duration,
        elected_in: Duration,
        held_at_end: usize,
    ) -> CostRow {
        let wall = self.wall.as_secs_f64().max(f64::MIN_POSITIVE);
        let renewals = self.renewals.max(1) as f64;
        let us = |d: Duration| d.as_secs_f64() * 1e6 / renewals;
        CostRow {
            store: url.scheme().to_owned(),
            implementation: implementation.to_owned(),
            groups: n,
            term_s: term.as_secs_f64(),
            elected_in_s: elected_in.as_secs_f64(),
            renewals_per_s: self.renewals as f64 / wall,
            client_us_per_renewal: us(self.client),
            client_cores: self.client.as_secs_f64() / wall,
            store_us_per_renewal: self.server.map(us),
            store_cores: self.server.map(|d| d.as_secs_f64() / wall),
            held_at_end,
            load_average: self.load,
            threads: 1,
        }
    }
}

/// Measures `window` of this process and the server, `renewals` counting
/// what was renewed so far.
async fn measure_window(
    server: &ServerCpu,
    window: Duration,
    renewals: impl Fn() -> u64,
) -> Window {
    let load = load_average();
    let (r0, c0, s0, t0) = (renewals(), cpu_time(), server.read().await, Instant::now());
    tokio::time::sleep(window).await;
    let (r1, c1, s1, t1) = (renewals(), cpu_time(), server.read().await, Instant::now());
    Window {
        wall: t1.duration_since(t0),
        client: c1.saturating_sub(c0),
        server: s0.zip(s1).map(|(a, b)| b.saturating_sub(a)),
        renewals: r1.saturating_sub(r0),
        load,
    }
}

/// Runs the comparison for every store and count.
pub async fn run(args: &BenchArgs, urls: &[StoreUrl]) -> anyhow::Result<Vec<CostRow>> {
    let term = args.term.unwrap_or(Duration::from_secs(10));
    tenure::Config::new(term).validate()?;
    let counts = if args.groups.is_empty() {
        vec![100_000]
    } else {
        args.groups.clone()
    };
    let mut rows = Vec::new();
    for url in urls {
        for &n in &counts {
            let server = server_cpu(url, args.store_pid);
            let on_threads = |row: CostRow| CostRow {
                threads: args.threads,
                ..row
            };
            if let Some(raw) = redis_url(url) {
                eprintln!("{url}: the naive loop, {n} leases, term {term:?}");
                let row = naive(url, raw, n, term, args.window_terms, &server).await?;
                rows.push(on_threads(row));
            }
            eprintln!("{url}: tenure, {n} groups, term {term:?}");
            let row = engine(url, n, term, args.window_terms, &server).await?;
            rows.push(on_threads(row));
        }
    }
    Ok(rows)
}

/// The URL of a Redis store, whose baseline this bench runs.
fn redis_url(url: &StoreUrl) -> Option<&str> {
    if cfg!(feature = "redis") && matches!(url.scheme(), "redis" | "rediss") {
        url.raw()
    } else {
        None
    }
}

fn server_cpu(url: &StoreUrl, pid: Option<u32>) -> ServerCpu {
    if let Some(pid) = pid {
        return ServerCpu::Process(pid);
    }
    #[cfg(feature = "redis")]
    if let Some(raw) = redis_url(url) {
        return ServerCpu::Redis(raw.to_owned());
    }
    let _ = url;
    ServerCpu::Unknown
}

/// Waits until `held()` reaches `n`, polling; fails after `within`.
async fn wait_held(n: usize, within: Duration, held: impl Fn() -> usize) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let now = held();
        if now >= n {
            return Ok(());
        }
        if start.elapsed() > within {
            bail!("only {now} of {n} leases held after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(feature = "redis")]
async fn naive(
    url: &StoreUrl,
    raw: &str,
    n: usize,
    term: Duration,
    window_terms: u32,
    server: &ServerCpu,
) -> anyhow::Result<CostRow> {
    let prefix = format!("naive-{:016x}-", rand::random::<u64>());
    let began = Instant::now();
    let naive = tenure_redis::baseline::NaiveLoop::start(raw, &prefix, "bench", n, term)
        .await
        .map_err(|e| anyhow::anyhow!(tenure::error::error_chain(&e)))
        .with_context(|| format!("cannot start the naive loop on {url}"))?;
    wait_held(n, term * 20, || naive.held()).await?;
    let elected_in = began.elapsed();
    eprintln!("  all {n} held in {elected_in:.2?}");
    tokio::time::sleep(term * SETTLE_TERMS).await;
    let window = measure_window(server, term * window_terms, || naive.renewals()).await;
    let held = naive.held();
    naive.stop().await;
    Ok(window.row(url, "naive loop", n, term, elected_in, held))
}

#[cfg(not(feature = "redis"))]
async fn naive(
    _url: &StoreUrl,
    _raw: &str,
    _n: usize,
    _term: Duration,
    _window_terms: u32,
    _server: &ServerCpu,
) -> anyhow::Result<CostRow> {
    bail!("the naive loop runs on Redis, which this tenure is built without")
}

async fn engine(
    url: &StoreUrl,
    n: usize,
    term: Duration,
    window_terms: u32,
    server: &ServerCpu,
) -> anyhow::Result<CostRow> {
    #[cfg(feature = "redis")]
    if let Some(raw) = redis_url(url) {
        // A data set never marked would make the first election wait out
        // the quarantine (see tenure-redis, "When Redis loses its data").
        let store = tenure_redis::RedisStore::connect(raw)
            .await
            .map_err(|e| anyhow::anyhow!(tenure::error::error_chain(&e)))?;
        store
            .adopt_empty()
            .await
            .map_err(|e| anyhow::anyhow!(tenure::error::error_chain(&e)))?;
    }
    let store = url
        .open()
        .await
        .with_context(|| format!("cannot open {url}"))?;
    let prefix = format!("cost-{:016x}", rand::random::<u64>());
    let began = Instant::now();
    let electors = start_groups(store, &prefix, n, "leader", term)?;
    let leading = || electors.iter().filter(|e| e.is_leader()).count();
    wait_held(n, term * 20, leading).await?;
    let elected_in = began.elapsed();
    eprintln!("  all {n} elected in {elected_in:.2?}");
    let engine = electors[0]
        .engine()
        .context("a lease elector has an engine")?;
    tokio::time::sleep(term * SETTLE_TERMS).await;
    // Every write in the steady window is a renewal.
    let window = measure_window(server, term * window_terms, || engine.stats().writes).await;
    let held = leading();
    // All at once: one after another, each release would wait for a batch
    // of its own.
    let mut stopping = tokio::task::JoinSet::new();
    for e in electors {
        stopping.spawn(async move { e.shutdown().await });
    }
    while stopping.join_next().await.is_some() {}
    Ok(window.row(url, "tenure", n, term, elected_in, held))
}

/// The table, one row per implementation, store and count.
pub fn table(rows: &[CostRow]) -> String {
    let mut out = String::new();
    out.push_str("| store | implementation | leases | term | elected in | renewals/s | client CPU per renewal (cores) | store CPU per renewal (cores) | held at end | threads | load average |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for r in rows {
        let store = match (r.store_us_per_renewal, r.store_cores) {
            (Some(us), Some(c)) => format!("{us:.1} µs ({c:.2})"),
            _ => "n/a".to_owned(),
        };
        let load = r.load_average.map_or_else(
            || "n/a".to_owned(),
            |[a, b, c]| format!("{a:.2} {b:.2} {c:.2}"),
        );
        out.push_str(&format!(
            "| {} | {} | {} | {} s | {:.2} s | {:.0} | {:.1} µs ({:.2}) | {} | {} | {} | {} |\n",
            r.store,
            r.implementation,
            r.groups,
            r.term_s,
            r.elected_in_s,
            r.renewals_per_s,
            r.client_us_per_renewal,
            r.client_cores,
            store,
            r.held_at_end,
            r.threads,
            load,
        ));
    }
    out
}
