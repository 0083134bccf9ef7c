//! `tenure bench --shards N --members M`: a sharded set of M member
//! processes (this binary, `tenure bench-member`, each one
//! `tenure::Shards` member) on each store. In every round a member joins,
//! one leaves gracefully (SIGTERM, so `Shards::shutdown`) and one is killed
//! (SIGKILL); the table shows how long until every shard is held again with
//! every member at `⌊N/M⌋` or `⌈N/M⌉` shards, and how many shards moved
//! against the fewest any balanced assignment must move. The members
//! report their work on `CLOCK_BOOTTIME`, and the run checks from those
//! reports that no shard was ever worked by two members at once. Once the
//! set first balances, its steady cost is measured over
//! [`COST_TERMS`] terms: the store operations each member sends (counted
//! in the member by [`tenure::store::Counted`]), its CPU time and its
//! resident memory.
//! A program that prints a table; it asserts nothing about time.

mod ledger;
mod member;
mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::Rng;
use tenure::{Config, StoreError};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::cli::BenchArgs;
use crate::commands::bench::procstat::{process_cpu, process_rss};
use crate::commands::bench::Stats;
use crate::commands::demo::now;
use crate::exit::usage;
use crate::process::child;
use crate::store_url::StoreUrl;
use ledger::Ledger;
pub use member::member;
use report::{MemberReport, OpCounts};

/// The window, in terms, over which the steady cost is measured: longer
/// than a member's slow refresh (every 4 terms and a jitter), so that the
/// figures include its share of one.
const COST_TERMS: u32 = 6;

/// What `tenure bench --shards` measured.
#[derive(Debug, serde::Serialize)]
pub struct ShardBench {
    shards: usize,
    members: usize,
    rounds: usize,
    term_ms: f64,
    /// The library's documented bound after a crash,
    /// `2·(T(1+ρ)/(1−ρ) + P)`.
    crash_bound_ms: f64,
    rows: Vec<EventRow>,
    costs: Vec<CostRow>,
    stores: Vec<StoreCheck>,
}

/// One store's steady cost, per member, once the set first balanced.
#[derive(Debug, serde::Serialize)]
struct CostRow {
    store: String,
    /// Per member per term, the mean over the members.
    lists: f64,
    reads: f64,
    read_items: f64,
    writes: f64,
    write_items: f64,
    /// Of one core, the mean over the members, and the busiest.
    cpu_mean: f64,
    cpu_max: f64,
    /// Resident memory, the mean over the members, and the largest.
    rss_mean_mb: f64,
    rss_max_mb: f64,
}

impl ShardBench {
    /// Pairs of members found working one shard at once, over all stores.
    pub fn overlaps(&self) -> usize {
        self.stores.iter().map(|s| s.overlaps.len()).sum()
    }
}

/// The kinds of event measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Event {
    /// Every member starts at once.
    Start,
    /// One more member joins.
    Join,
    /// A member leaves gracefully on SIGTERM.
    Leave,
    /// A member is killed with SIGKILL.
    Kill,
}

/// One store's figures for one kind of event.
#[derive(Debug, serde::Serialize)]
struct EventRow {
    store: String,
    event: Event,
    /// From the event to the set balanced again.
    balanced: Stats,
    /// Shards whose holder changed, summed over the samples.
    moved: usize,
    /// The fewest that had to move, summed over the samples.
    minimum: usize,
}

/// One store's check of the members' reports, or why it was skipped.
#[derive(Debug, serde::Serialize)]
struct StoreCheck {
    store: String,
    skipped: Option<String>,
    /// Work spans reported.
    spans: usize,
    /// Spans of two members on one shard that overlap in time.
    overlaps: Vec<String>,
}

/// Runs the sharded benchmark on every store.
pub async fn run(args: &BenchArgs, urls: &[StoreUrl], shards: usize) -> anyhow::Result<ShardBench> {
    if shards == 0 || args.members == 0 || args.rounds == 0 {
        return Err(usage("--shards, --members and --rounds must be positive"));
    }
    if let Some(u) = urls.iter().find(|u| !u.is_shared()) {
        return Err(usage(format!(
            "{u}: the members are separate processes: give a store they can share"
        )));
    }
    let term = args.term.unwrap_or(Duration::from_secs(2));
    let timing = Config::new(term).validate().map_err(usage)?;
    let exe = std::env::current_exe().context("cannot find the tenure executable")?;
    let mut bench = ShardBench {
        shards,
        members: args.members,
        rounds: args.rounds,
        term_ms: term.as_secs_f64() * 1000.0,
        crash_bound_ms: (timing.bounds().crash_failover * 2).as_secs_f64() * 1000.0,
        rows: Vec::new(),
        costs: Vec::new(),
        stores: Vec::new(),
    };
    for url in urls {
        let set = format!("bench-{:016x}", rand::random::<u64>());
        if let Some(reason) = lacks_list(url, &set).await? {
            eprintln!("{url}: skipped: {reason}");
            bench.stores.push(StoreCheck {
                store: url.scheme().to_owned(),
                skipped: Some(reason),
                spans: 0,
                overlaps: Vec::new(),
            });
            continue;
        }
        let mut run = Run {
            exe: exe.clone(),
            url,
            set,
            shards,
            term,
            procs: BTreeMap::new(),
            started: 0,
            ledger: Arc::default(),
        };
        let result = run.measure(args.members, args.rounds).await;
        let end = now();
        run.finish().await;
        let (samples, cost) = result?;
        bench.costs.push(cost);
        let ledger = lock(&run.ledger);
        for (event, samples) in samples {
            bench.rows.push(EventRow {
                store: url.scheme().to_owned(),
                event,
                balanced: Stats::of(samples.iter().map(|s| s.took).collect()),
                moved: samples.iter().map(|s| s.moved).sum(),
                minimum: samples.iter().map(|s| s.minimum).sum(),
            });
        }
        bench.stores.push(StoreCheck {
            store: url.scheme().to_owned(),
            skipped: None,
            spans: ledger.span_count(),
            overlaps: ledger.overlaps(end),
        });
    }
    Ok(bench)
}

/// Why the store cannot host a sharded set, if it cannot: it does not list
/// groups by prefix. Other failures are errors.
async fn lacks_list(url: &StoreUrl, set: &str) -> anyhow::Result<Option<String>> {
    let store = url
        .open()
        .await
        .with_context(|| format!("cannot open {url}"))?;
    match store
        .list(&tenure::shards::layout::member_prefix(set))
        .await
    {
        Ok(_) => Ok(None),
        Err(e @ StoreError::Unsupported { .. }) => Ok(Some(e.to_string())),
        Err(e) => Err(e).with_context(|| format!("{url}: cannot list the members")),
    }
}

fn lock(ledger: &Mutex<Ledger>) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|p| p.into_inner())
}

/// One measured event.
struct Sample {
    took: Duration,
    moved: usize,
    minimum: usize,
}

/// Who holds each shard (member, since when).
type Holders = BTreeMap<String, (String, u64)>;

/// A member process.
struct Proc {
    pid: libc::pid_t,
    child: Child,
    /// Reads its reports into the ledger; ends at the pipe's end.
    reader: tokio::task::JoinHandle<()>,
}

impl Proc {
    /// Waits until the process has exited and every line it wrote is in
    /// the ledger.
    async fn gone(mut self) {
        let _ = self.child.wait().await;
        let _ = self.reader.await;
    }
}

/// One store's run.
struct Run<'a> {
    exe: PathBuf,
    url: &'a StoreUrl,
    set: String,
    shards: usize,
    term: Duration,
    /// The running members, by id.
    procs: BTreeMap<String, Proc>,
    /// Members started so far (for their ids).
    started: usize,
    ledger: Arc<Mutex<Ledger>>,
}

impl Run<'_> {
    /// How long to wait for the set to balance before giving up: far
    /// beyond any bound, since the table, not the wait, judges the time.
    fn patience(&self) -> Duration {
        (self.term * 20).max(Duration::from_secs(30))
    }

    fn members(&self) -> Vec<String> {
        self.procs.keys().cloned().collect()
    }

    async fn measure(
        &mut self,
        members: usize,
        rounds: usize,
    ) -> anyhow::Result<(Vec<(Event, Vec<Sample>)>, CostRow)> {
        let url = self.url;
        eprintln!("{url}: {} shards over {members} members", self.shards);
        let mut ids = Vec::new();
        for _ in 0..members {
            ids.push(self.spawn()?);
        }
        let mut starts = Vec::new();
        for id in &ids {
            starts.push(self.started_at(id).await?);
        }
        let t0 = starts.iter().copied().min().unwrap_or(0);
        let last = starts.iter().copied().max().unwrap_or(0);
        eprintln!(
            "{url}: the {members} members started within {:.2} s",
            Duration::from_nanos(last - t0).as_secs_f64()
        );
        let start = self.sample(t0, &Holders::new(), None).await?;
        let mut samples: BTreeMap<Event, Vec<Sample>> = BTreeMap::new();
        samples.entry(Event::Start).or_default().push(Sample {
            minimum: 0,
            moved: 0,
            ..start
        });
        let cost = self.cost().await?;
        for round in 1..=rounds {
            eprintln!("{url}: round {round} of {rounds}");
            // Join: the newcomer's start to balanced.
            let before = self.steady().await?;
            let id = self.spawn()?;
            let t0 = self.started_at(&id).await?;
            let s = self.sample(t0, &before, None).await?;
            samples.entry(Event::Join).or_default().push(s);
            // Graceful leave.
            let before = self.steady().await?;
            let victim = self.victim();
            let t0 = self.signal(&victim, libc::SIGTERM);
            let gone = self.procs.remove(&victim);
            let s = self.sample(t0, &before, Some(&victim)).await?;
            samples.entry(Event::Leave).or_default().push(s);
            if let Some(p) = gone {
                let _ = tokio::time::timeout(self.patience(), p.gone()).await;
            }
            // Kill.
            let before = self.steady().await?;
            let victim = self.victim();
            let t0 = self.signal(&victim, libc::SIGKILL);
            let dead = now();
            if let Some(p) = self.procs.remove(&victim) {
                // Lines it wrote before it died may still be in the pipe:
                // all of them first, then whatever it was working on ends
                // at its death.
                p.gone().await;
            }
            lock(&self.ledger).killed(&victim, dead);
            let s = self.sample(t0, &before, Some(&victim)).await?;
            samples.entry(Event::Kill).or_default().push(s);
            // Back to the set's size, unmeasured.
            self.spawn()?;
            self.balanced().await?;
        }
        Ok((samples.into_iter().collect(), cost))
    }

    /// The steady cost of the balanced set, over [`COST_TERMS`] terms.
    async fn cost(&self) -> anyhow::Result<CostRow> {
        self.steady().await?;
        let eprint = |what: &str| eprintln!("{}: {what}", self.url);
        eprint(&format!(
            "measuring the steady cost over {COST_TERMS} terms"
        ));
        let pids: Vec<(String, u32)> = self
            .procs
            .iter()
            .filter_map(|(id, p)| Some((id.clone(), u32::try_from(p.pid).ok()?)))
            .collect();
        let snapshot = |ledger: &Ledger| -> Vec<(OpCounts, Duration)> {
            pids.iter()
                .map(|(id, pid)| {
                    let ops = ledger.ops.get(id).copied().unwrap_or_default();
                    (ops, process_cpu(*pid).unwrap_or_default())
                })
                .collect()
        };
        let before = snapshot(&lock(&self.ledger));
        let started = Instant::now();
        tokio::time::sleep(self.term * COST_TERMS).await;
        let after = snapshot(&lock(&self.ledger));
        let window = started.elapsed();
        let terms = window.as_secs_f64() / self.term.as_secs_f64();
        let n = before.len().max(1) as f64;
        let mut sent = OpCounts::default();
        let mut cpu = Vec::new();
        for ((ops0, cpu0), (ops1, cpu1)) in before.iter().zip(&after) {
            let d = ops1.since(ops0);
            sent.lists += d.lists;
            sent.reads += d.reads;
            sent.read_items += d.read_items;
            sent.writes += d.writes;
            sent.write_items += d.write_items;
            cpu.push(cpu1.saturating_sub(*cpu0).as_secs_f64() / window.as_secs_f64());
        }
        let rss: Vec<f64> = pids
            .iter()
            .filter_map(|(_, pid)| process_rss(*pid))
            .map(|b| b as f64 / 1e6)
            .collect();
        let per = |total: u64| total as f64 / n / terms;
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let row = CostRow {
            store: self.url.scheme().to_owned(),
            lists: per(sent.lists),
            reads: per(sent.reads),
            read_items: per(sent.read_items),
            writes: per(sent.writes),
            write_items: per(sent.write_items),
            cpu_mean: mean(&cpu),
            cpu_max: max(&cpu),
            rss_mean_mb: mean(&rss),
            rss_max_mb: max(&rss),
        };
        // Now, not only in the table: a round that fails later still
        // leaves the steady cost on record.
        eprint(&format!(
            "steady cost per member per term: {:.2} lists, {:.2} reads ({:.1} records), {:.2} writes ({:.1} records); CPU {:.1} % mean, {:.1} % busiest; RSS {:.0} MB mean",
            row.lists,
            row.reads,
            row.read_items,
            row.writes,
            row.write_items,
            row.cpu_mean * 100.0,
            row.cpu_max * 100.0,
            row.rss_mean_mb
        ));
        Ok(row)
    }

    /// Starts one more member process; returns its id.
    fn spawn(&mut self) -> anyhow::Result<String> {
        self.started += 1;
        let id = format!("m{}", self.started);
        // The whole URL, secrets included, through the environment: a
        // networked one as given, a file's as displayed (it holds none).
        let raw = self
            .url
            .raw()
            .map_or_else(|| self.url.to_string(), str::to_owned);
        let mut cmd = Command::new(&self.exe);
        cmd.arg("bench-member")
            .args(["--set", &self.set, "--id", &id])
            .arg("--shards")
            .arg(self.shards.to_string())
            .arg("--term")
            .arg(humantime::format_duration(self.term).to_string())
            .env("TENURE_STORE", raw);
        let child::Helper { child, pid, stdout } = child::spawn_helper(&mut cmd, "member")?;
        let ledger = self.ledger.clone();
        let member = id.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(report) = serde_json::from_str::<MemberReport>(&line) {
                    lock(&ledger).apply(&member, report);
                }
            }
        });
        self.procs.insert(id.clone(), Proc { pid, child, reader });
        Ok(id)
    }

    /// When member `id` joined the set, once it has said so.
    async fn started_at(&self, id: &str) -> anyhow::Result<u64> {
        self.wait(|l| l.started.get(id).copied(), "a member to start")
            .await
    }

    /// Polls the ledger until `found` yields.
    async fn wait<T>(
        &self,
        mut found: impl FnMut(&Ledger) -> Option<T>,
        what: &str,
    ) -> anyhow::Result<T> {
        let start = Instant::now();
        loop {
            if let Some(v) = found(&lock(&self.ledger)) {
                return Ok(v);
            }
            if start.elapsed() > self.patience() {
                bail!("{}: waited {:?} for {what}", self.url, self.patience());
            }
            // Times come from the members' stamps, not from this poll:
            // polling faster only takes CPU from the members (a check is a
            // pass over every shard's spans).
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the running members hold every shard, balanced.
    async fn balanced(&self) -> anyhow::Result<Holders> {
        let members = self.members();
        let shards = self.shards;
        let waited = self
            .wait(
                |l| l.balanced(shards, &members),
                "every shard held and the load balanced",
            )
            .await;
        waited.map_err(|e| anyhow::anyhow!("{e} ({})", lock(&self.ledger).progress(&members)))
    }

    /// A balanced set in steady state (renewing, listing), before an event.
    async fn steady(&self) -> anyhow::Result<Holders> {
        self.balanced().await?;
        tokio::time::sleep(self.term / 2).await;
        self.balanced().await
    }

    /// A random running member.
    fn victim(&self) -> String {
        let ids = self.members();
        ids[rand::thread_rng().gen_range(0..ids.len())].clone()
    }

    /// Sends `sig` to member `id`; returns the instant just before.
    fn signal(&self, id: &str, sig: libc::c_int) -> u64 {
        let t0 = now();
        if let Some(p) = self.procs.get(id) {
            child::signal_child(p.pid, sig);
        }
        t0
    }

    /// Waits for the set to balance after an event at `t0`: how long it
    /// took (until the last shard's current work started), how many shards
    /// changed holder since `before`, and how many had to (the leaver's, or
    /// the newcomer's share).
    async fn sample(
        &self,
        t0: u64,
        before: &Holders,
        leaver: Option<&str>,
    ) -> anyhow::Result<Sample> {
        let after = self.balanced().await?;
        let last = after.values().map(|(_, since)| *since).max().unwrap_or(t0);
        let took = Duration::from_nanos(last.saturating_sub(t0));
        let moved = after
            .iter()
            .filter(|(s, (h, _))| before.get(*s).is_some_and(|(b, _)| b != h))
            .count();
        let minimum = match leaver {
            Some(x) => before.values().filter(|(h, _)| h == x).count(),
            // A join: the newcomer's share, the members new to `after`.
            None => after
                .values()
                .filter(|(h, _)| !before.values().any(|(b, _)| b == h))
                .count(),
        };
        Ok(Sample {
            took,
            moved,
            minimum,
        })
    }

    /// Stops every member gracefully (killing any that does not stop).
    async fn finish(&mut self) {
        for id in self.members() {
            self.signal(&id, libc::SIGTERM);
        }
        let patience = self.patience();
        for (id, mut p) in std::mem::take(&mut self.procs) {
            if tokio::time::timeout(patience, p.child.wait())
                .await
                .is_err()
            {
                eprintln!("{}: member {id} did not stop; killing it", self.url);
                let _ = p.child.kill().await;
                let dead = now();
                p.gone().await;
                lock(&self.ledger).killed(&id, dead);
            } else {
                p.gone().await;
            }
        }
    }
}

/// The table.
pub fn table(b: &ShardBench) -> String {
    let mut out = format!(
        "\n{} shards over {} member processes (tenure::Shards), term {:?}, {} rounds per store.\n\
         Balanced: every shard held again, each member holding ⌊N/M⌋ or ⌈N/M⌉ of them, timed on the\n\
         members' CLOCK_BOOTTIME stamps from the event (start: the first member's start; join: the\n\
         newcomer's Shards::start; leave: SIGTERM; kill: SIGKILL) to the last shard's work starting.\n\
         Moved: shards whose holder changed (the fewest any balanced assignment moves).\n\n",
        b.shards,
        b.members,
        Duration::from_secs_f64(b.term_ms / 1000.0),
        b.rounds
    );
    out.push_str(
        "| store | event | n | balanced: median | max | bound | shards moved (minimum) |\n",
    );
    out.push_str("|---|---|---:|---:|---:|---:|---:|\n");
    for r in &b.rows {
        let (event, bound) = match r.event {
            Event::Start => (format!("start ({} members)", b.members), String::new()),
            Event::Join => (format!("join (member {})", b.members + 1), String::new()),
            Event::Leave => ("graceful leave (SIGTERM)".to_owned(), String::new()),
            Event::Kill => (
                "crash (SIGKILL)".to_owned(),
                format!("{:.2} s", b.crash_bound_ms / 1000.0),
            ),
        };
        let moved = if r.event == Event::Start {
            "—".to_owned()
        } else {
            format!("{} ({})", r.moved, r.minimum)
        };
        out.push_str(&format!(
            "| {} | {event} | {} | {:.2} s | {:.2} s | {bound} | {moved} |\n",
            r.store,
            r.balanced.n,
            r.balanced.median_ms / 1000.0,
            r.balanced.max_ms / 1000.0,
        ));
    }
    out.push_str(&format!(
        "\nSteady cost once first balanced, over {COST_TERMS} terms: store calls per member per term \
         (a batch is one call; records in it in brackets), CPU of one core and resident memory per \
         member (mean / largest).\n\n"
    ));
    out.push_str("| store | lists | reads (records) | writes (records) | CPU | RSS |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|\n");
    for c in &b.costs {
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} ({:.1}) | {:.2} ({:.1}) | {:.1} % / {:.1} % | {:.0} / {:.0} MB |\n",
            c.store,
            c.lists,
            c.reads,
            c.read_items,
            c.writes,
            c.write_items,
            c.cpu_mean * 100.0,
            c.cpu_max * 100.0,
            c.rss_mean_mb,
            c.rss_max_mb,
        ));
    }
    out.push_str("\n| store | work spans reported | a shard worked by two members at once |\n");
    out.push_str("|---|---:|---|\n");
    for s in &b.stores {
        match &s.skipped {
            Some(reason) => out.push_str(&format!("| {} | — | skipped: {reason} |\n", s.store)),
            None if s.overlaps.is_empty() => {
                out.push_str(&format!("| {} | {} | never |\n", s.store, s.spans))
            }
            None => out.push_str(&format!(
                "| {} | {} | {} times: {} |\n",
                s.store,
                s.spans,
                s.overlaps.len(),
                s.overlaps.join("; ")
            )),
        }
    }
    out
}
