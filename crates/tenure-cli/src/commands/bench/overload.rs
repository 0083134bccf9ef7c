//! `tenure bench --overload N`: many groups past what the store serves.
//! Two standby processes (`a`, then `b` two terms later) stand in the same
//! N groups on one store, as two replicas of a service would; the bench
//! samples how many groups each leads, four times a term, through three
//! phases: settling (8 terms), a trigger (the store server stopped for
//! `--pause`, if its pid is given) and 10 terms after it, then a SIGKILL of
//! `a` and 10 terms more. The table gives, per run, the plateau before the
//! trigger, the worst count from 3 terms after it on, and what `b` leads
//! from 3 terms after the kill on, with the CPU of both processes and of
//! the store server. A program that prints figures; it asserts nothing.

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cli::{BenchArgs, BenchStandbyArgs};
use crate::commands::bench::procstat::process_cpu;
use crate::commands::bench::scale::{cpu_time, start_groups};
use crate::store_url::StoreUrl;

/// Terms the groups get to settle before the trigger.
const SETTLE_TERMS: u32 = 8;
/// Terms measured after the trigger, and after the kill.
const AFTER_TERMS: u32 = 10;
/// Terms a recovery may take before it counts.
const RECOVERY_TERMS: u32 = 3;

/// One run of one group count on one store.
#[derive(Debug, serde::Serialize)]
pub struct OverloadRun {
    store: String,
    groups: usize,
    run: usize,
    term_s: f64,
    /// Fewest groups led (by both processes) over the two terms before
    /// the trigger.
    plateau: usize,
    /// Fewest led from `RECOVERY_TERMS` after the trigger until the kill.
    worst_after_trigger: usize,
    /// Fewest led over the last 10 s before the kill (by both).
    worst_last_10s: usize,
    /// Fewest led by `b` from `RECOVERY_TERMS` after the kill of `a` on.
    worst_after_kill: usize,
    /// Cores used by `a` and `b` while both stood, and by the store server
    /// (if its pid was given).
    cores_a: f64,
    cores_b: f64,
    cores_store: Option<f64>,
    /// Groups led over time: seconds since `a` started, led by `a`, by `b`.
    series: Vec<(f64, usize, usize)>,
}

/// Runs the overload benchmark for every store, count and run.
pub async fn run(args: &BenchArgs, urls: &[StoreUrl]) -> anyhow::Result<Vec<OverloadRun>> {
    let term = args.term.unwrap_or(Duration::from_secs(2));
    tenure::Config::new(term).validate()?;
    let mut runs = Vec::new();
    for url in urls {
        for &n in &args.overload {
            for run in 1..=args.runs {
                eprintln!(
                    "{url}: {n} groups, term {term:?}, run {run} of {}",
                    args.runs
                );
                let pause = args.pause_pid.map(|pid| (pid, args.pause));
                runs.push(measure(url, n, term, run, pause).await?);
            }
        }
    }
    Ok(runs)
}

/// A standby process and what it last reported.
struct Standby {
    child: tokio::process::Child,
    leading: Arc<AtomicUsize>,
    cpu_ms: Arc<AtomicU64>,
}

impl Standby {
    async fn start(
        url: &StoreUrl,
        prefix: &str,
        n: usize,
        term: Duration,
        id: &str,
    ) -> anyhow::Result<Standby> {
        let exe = std::env::current_exe().context("the tenure executable")?;
        let raw = url.raw().map_or_else(|| url.to_string(), str::to_owned);
        let mut child = tokio::process::Command::new(exe)
            .arg("bench-standby")
            .arg("--prefix")
            .arg(prefix)
            .arg("--count")
            .arg(n.to_string())
            .arg("--term")
            .arg(humantime::format_duration(term).to_string())
            .arg("--id")
            .arg(id)
            // The URL may hold a password: through the environment, not argv.
            .env("TENURE_STORE", raw)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start a standby process")?;
        let stdout = child.stdout.take().context("the standby's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines.next_line().await?.unwrap_or_default();
        if ready.trim() != "ready" {
            bail!("standby {id} did not start: {ready}");
        }
        let leading = Arc::new(AtomicUsize::new(0));
        let cpu_ms = Arc::new(AtomicU64::new(0));
        let (l, c) = (leading.clone(), cpu_ms.clone());
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut words = line.split_whitespace();
                if let (Some("leading"), Some(k), Some(ms)) =
                    (words.next(), words.next(), words.next())
                {
                    l.store(k.parse().unwrap_or(0), Ordering::Relaxed);
                    c.store(ms.parse().unwrap_or(0), Ordering::Relaxed);
                }
            }
            // Gone: it leads nothing.
            l.store(0, Ordering::Relaxed);
        });
        Ok(Standby {
            child,
            leading,
            cpu_ms,
        })
    }

    fn leading(&self) -> usize {
        self.leading.load(Ordering::Relaxed)
    }

    fn cpu(&self) -> Duration {
        Duration::from_millis(self.cpu_ms.load(Ordering::Relaxed))
    }
}

/// Samples both processes every quarter term for `terms` terms.
async fn sample(
    a: &Standby,
    b: Option<&Standby>,
    began: Instant,
    term: Duration,
    terms: u32,
    series: &mut Vec<(f64, usize, usize)>,
) {
    for _ in 0..terms * 4 {
        tokio::time::sleep(term / 4).await;
        let led_b = b.map_or(0, Standby::leading);
        series.push((began.elapsed().as_secs_f64(), a.leading(), led_b));
    }
}

/// The fewest groups led in `series` from `from` seconds on (by `a` and
/// `b`, or by `b` alone).
fn fewest(series: &[(f64, usize, usize)], from: f64, until: f64, b_only: bool) -> usize {
    series
        .iter()
        .filter(|(t, _, _)| *t >= from && *t < until)
        .map(|(_, a, b)| if b_only { *b } else { a + b })
        .min()
        .unwrap_or(0)
}

async fn measure(
    url: &StoreUrl,
    n: usize,
    term: Duration,
    run: usize,
    pause: Option<(u32, Duration)>,
) -> anyhow::Result<OverloadRun> {
    let prefix = format!("overload-{:016x}", rand::random::<u64>());
    let began = Instant::now();
    let mut series = Vec::new();
    let mut a = Standby::start(url, &prefix, n, term, "a").await?;
    sample(&a, None, began, term, 2, &mut series).await;
    let mut b = Standby::start(url, &prefix, n, term, "b").await?;
    let (cpu_a0, store0, wall0) = (
        a.cpu(),
        pause.and_then(|(pid, _)| process_cpu(pid)),
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cpu_b0 = b.cpu();
    sample(&a, Some(&b), began, term, SETTLE_TERMS - 2, &mut series).await;
    let trigger = began.elapsed().as_secs_f64();
    if let Some((pid, stopped_for)) = pause {
        signal(pid, libc::SIGSTOP)?;
        tokio::time::sleep(stopped_for).await;
        signal(pid, libc::SIGCONT)?;
    }
    sample(&a, Some(&b), began, term, AFTER_TERMS, &mut series).await;
    let wall = wall0.elapsed().as_secs_f64();
    let cores_a = a.cpu().saturating_sub(cpu_a0).as_secs_f64() / wall;
    let cores_b = b.cpu().saturating_sub(cpu_b0).as_secs_f64() / wall;
    let cores_store = pause
        .and_then(|(pid, _)| Some((process_cpu(pid)?, store0?)))
        .map(|(now, then)| now.saturating_sub(then).as_secs_f64() / wall);
    let killed = began.elapsed().as_secs_f64();
    a.child.start_kill().context("cannot kill standby a")?;
    let _ = a.child.wait().await;
    sample(&a, Some(&b), began, term, AFTER_TERMS, &mut series).await;
    let _ = b.child.start_kill();
    let _ = b.child.wait().await;
    let t = term.as_secs_f64();
    let recovery = f64::from(RECOVERY_TERMS) * t;
    Ok(OverloadRun {
        store: url.scheme().to_owned(),
        groups: n,
        run,
        term_s: t,
        plateau: fewest(&series, trigger - 2.0 * t, trigger, false),
        worst_after_trigger: fewest(&series, trigger + recovery, killed, false),
        worst_last_10s: fewest(&series, killed - 10.0, killed, false),
        worst_after_kill: fewest(&series, killed + recovery, f64::MAX, true),
        cores_a,
        cores_b,
        cores_store,
        series,
    })
}

/// Sends `sig` to the store server.
#[allow(unsafe_code, reason = "std has no call to send a signal to a process")]
fn signal(pid: u32, sig: libc::c_int) -> anyhow::Result<()> {
    let pid = libc::pid_t::try_from(pid).context("the store server's pid is out of range")?;
    // SAFETY: kill has no memory preconditions; a wrong pid is an error.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 {
        bail!(
            "cannot signal the store server (pid {pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// `tenure bench-standby` (internal): stands in every group as `--id`,
/// says `ready`, then prints `leading K CPU_MS` four times a term until it
/// is killed.
pub async fn standby(args: BenchStandbyArgs) -> anyhow::Result<u8> {
    let url = StoreUrl::resolve(args.store.store.as_deref())?;
    let store = url
        .open()
        .await
        .with_context(|| format!("cannot open {url}"))?;
    let electors = start_groups(store, &args.prefix, args.count, &args.id, args.term)?;
    println!("ready");
    loop {
        tokio::time::sleep(args.term / 4).await;
        let leading = electors.iter().filter(|e| e.is_leader()).count();
        println!("leading {leading} {}", cpu_time().as_millis());
    }
}

/// The table, one row per run, then each run's series.
pub fn table(runs: &[OverloadRun]) -> String {
    let mut out = String::new();
    out.push_str("| store | groups | term | run | plateau before the trigger | worst from 3 terms after it | worst over the last 10 s before the kill | b alone, worst from 3 terms after a's SIGKILL | cores a / b | store server cores |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in runs {
        out.push_str(&format!(
            "| {} | {} | {} s | {} | {} | {} | {} | {} | {:.2} / {:.2} | {} |\n",
            r.store,
            r.groups,
            r.term_s,
            r.run,
            r.plateau,
            r.worst_after_trigger,
            r.worst_last_10s,
            r.worst_after_kill,
            r.cores_a,
            r.cores_b,
            r.cores_store
                .map_or_else(|| "n/a".to_owned(), |c| format!("{c:.2}")),
        ));
    }
    for r in runs {
        out.push_str(&format!(
            "\n{} groups on {}, run {}: led by a + b, every quarter term\n",
            r.groups, r.store, r.run
        ));
        for chunk in r.series.chunks(8) {
            let line: Vec<String> = chunk
                .iter()
                .map(|(t, a, b)| format!("{t:5.1}s {a}+{b}"))
                .collect();
            out.push_str(&line.join("  "));
            out.push('\n');
        }
    }
    out
}
