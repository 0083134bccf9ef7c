//! `tenure bench --priority`: on each store, a leader of no priority and,
//! once it leads, a candidate of higher priority started beside it (each
//! on a handle of its own, as separate processes would be). The table
//! shows the time from the higher candidate's start to its election
//! (its preemption delay, then the leader's look at the request, its drain
//! and the reserved hand-over) and the gap between the two terms, in which
//! nobody leads. A program that prints a table; it asserts nothing about
//! time.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tenure::{Config, Elector, Event};

use crate::cli::BenchArgs;
use crate::commands::bench::{separate_handles, Stats};
use crate::exit::usage;
use crate::store_url::StoreUrl;

/// One store's figures.
#[derive(Debug, serde::Serialize)]
pub struct PriorityRow {
    store: String,
    term_ms: f64,
    delay_ms: f64,
    /// From the higher candidate's start to its election.
    elected: Stats,
    /// From the old leader's term ending to the new one's beginning.
    gap: Stats,
    /// Rounds in which the new term began while the old one was not yet
    /// told to end (a broken guarantee).
    overlaps: usize,
    /// Rounds in which the old term ended otherwise than by the hand-over
    /// (a failed renewal, say): their times are not in the figures.
    not_handed_over: usize,
}

impl PriorityRow {
    /// Whether two terms overlapped.
    pub fn overlapped(&self) -> bool {
        self.overlaps > 0
    }
}

/// Runs the rounds on every store.
pub async fn run(args: &BenchArgs, urls: &[StoreUrl]) -> anyhow::Result<Vec<PriorityRow>> {
    let term = separate_handles(urls, "--priority", "candidate", args.term)?;
    Config::new(term).validate().map_err(usage)?;
    let mut rows = Vec::new();
    for url in urls {
        eprintln!("{url}: {} rounds of a preemption", args.rounds.max(1));
        rows.push(measure(url, args.rounds.max(1), term).await?);
    }
    Ok(rows)
}

/// Watches `events` from now on, and tells when the term of `token`
/// ended (as it happened, not when it is asked), and whether by a
/// hand-over.
fn watch_end(
    mut events: tenure::EventStream,
    token: u64,
) -> tokio::task::JoinHandle<Option<(Instant, bool)>> {
    tokio::spawn(async move {
        while let Some(e) = events.next().await {
            if let Event::Ousted { token: t, reason } = e {
                if t == token {
                    let handed = matches!(reason, tenure::EndReason::Transferred { .. });
                    return Some((Instant::now(), handed));
                }
            }
        }
        None
    })
}

async fn measure(url: &StoreUrl, rounds: usize, term: Duration) -> anyhow::Result<PriorityRow> {
    let delay = term;
    let within = delay + term * 10;
    let (mut elected, mut gaps) = (Vec::new(), Vec::new());
    let (mut overlaps, mut not_handed_over) = (0, 0);
    for _ in 0..rounds {
        let group = format!("bench-priority-{:08x}", rand::random::<u32>());
        let low = Elector::builder(url.open().await?, &group)
            .candidate_id("low")
            .config(Config::new(term))
            .start()?;
        let first = tokio::time::timeout(within, low.wait_for_leadership())
            .await
            .context("the first leader was not elected")??;
        let low_end = watch_end(low.events(), first.token());
        let store = url.open().await?;
        let started = Instant::now();
        let high = Elector::builder(store, &group)
            .candidate_id("high")
            .config(Config::new(term))
            .priority(10)
            .preempt_after(delay)
            .start()?;
        let term_of_high = tokio::time::timeout(within, high.wait_for_leadership())
            .await
            .context("the higher-priority candidate was not elected")??;
        let won = Instant::now();
        // The old term is told to end when its drain begins, before the
        // release the new term is taken from: by now it must be.
        if !first.is_cancelled() {
            overlaps += 1;
        }
        if term_of_high.token() <= first.token() {
            bail!("the token did not rise");
        }
        let (old_end, handed) = tokio::time::timeout(term, low_end)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .context("the old leader's term did not end")?;
        if handed {
            elected.push(won.duration_since(started));
            // Two tasks' instants: a new term seen first by a hair is
            // scheduling, not an overlap (that is checked above).
            gaps.push(won.saturating_duration_since(old_end));
        } else {
            not_handed_over += 1;
        }
        high.shutdown().await;
        low.shutdown().await;
    }
    Ok(PriorityRow {
        store: url.scheme().to_owned(),
        term_ms: term.as_secs_f64() * 1e3,
        delay_ms: delay.as_secs_f64() * 1e3,
        elected: Stats::of(elected),
        gap: Stats::of(gaps),
        overlaps,
        not_handed_over,
    })
}

/// The table `tenure bench --priority` prints.
pub fn table(rows: &[PriorityRow]) -> String {
    let mut out = format!(
        "{:<12}{:>6}  {:>6}  {:<36}{:>3}  {:>10}  {:>8}\n",
        "store", "term", "delay", "what", "n", "median", "max"
    );
    for r in rows {
        for (what, s) in [
            ("higher candidate started → elected", &r.elected),
            ("old term ended → new term (no leader)", &r.gap),
        ] {
            out += &format!(
                "{:<12}{:>5.1}s  {:>5.1}s  {:<36}{:>3}  {:>7.0} ms  {:>5.0} ms\n",
                r.store,
                r.term_ms / 1e3,
                r.delay_ms / 1e3,
                what,
                s.n,
                s.median_ms,
                s.max_ms
            );
        }
        if r.overlaps > 0 {
            out += &format!(
                "{}: in {} rounds the new term began before the old one was told to end\n",
                r.store, r.overlaps
            );
        }
        if r.not_handed_over > 0 {
            out += &format!(
                "{}: in {} rounds the old term ended otherwise than by the hand-over (not in the figures)\n",
                r.store, r.not_handed_over
            );
        }
    }
    out
}
