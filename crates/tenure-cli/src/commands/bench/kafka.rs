//! `tenure bench` on `kafka://`: leadership follows a consumer group, whose
//! members are processes, so the candidates are `tenure demo-candidate`
//! processes (the heartbeat timeout is the term, as for `tenure run`). A
//! graceful hand-over is SIGTERM to the leader (it drains, releases and
//! leaves the group); a crash is SIGKILL (the group waits out its session,
//! three terms). Each sample runs from the signal to the other candidate's
//! election, both on the boot clock the candidates report on.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::commands::demo::report::{now, Report};

/// How long the group must have been unchanged before a take-down, in
/// terms: a newcomer's join rebalances the group (the eager assignors
/// revoke partition 0 and assign it anew) a few seconds after it starts.
const SETTLE_TERMS: u32 = 3;

/// How long a take-down may take before the run fails.
const PATIENCE: Duration = Duration::from_secs(90);

/// Graceful hand-overs and crash fail-overs, `n` of each, on `url`.
pub async fn handovers(
    url: &str,
    term: Duration,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let mut pool = Pool::new(url, term)?;
    pool.spawn()?;
    pool.spawn()?;
    let mut graceful = Vec::with_capacity(n);
    for _ in 0..n {
        graceful.push(pool.take_down(libc::SIGTERM).await?);
    }
    let mut crash = Vec::with_capacity(n);
    for _ in 0..n {
        crash.push(pool.take_down(libc::SIGKILL).await?);
    }
    pool.stop().await;
    Ok((graceful, crash))
}

struct Candidate {
    child: Child,
    leading: bool,
}

/// Candidate processes of one group, and what they report.
struct Pool {
    exe: std::path::PathBuf,
    url: String,
    group: String,
    term: Duration,
    started: usize,
    candidates: HashMap<usize, Candidate>,
    reports: mpsc::UnboundedReceiver<(usize, Report)>,
    tx: mpsc::UnboundedSender<(usize, Report)>,
    /// When a candidate last started or ended a term.
    changed: Instant,
}

impl Pool {
    fn new(url: &str, term: Duration) -> anyhow::Result<Pool> {
        let (tx, reports) = mpsc::unbounded_channel();
        Ok(Pool {
            exe: std::env::current_exe().context("cannot find the tenure binary")?,
            url: url.to_owned(),
            group: format!("bench-{:016x}", rand::random::<u64>()),
            term,
            started: 0,
            candidates: HashMap::new(),
            reports,
            tx,
            changed: Instant::now(),
        })
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        self.started += 1;
        let idx = self.started;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("demo-candidate")
            .args(["--store", &self.url, "--group", &self.group])
            .args(["--id", &format!("bench-{idx}")])
            .arg("--term")
            .arg(humantime::format_duration(self.term).to_string())
            .stderr(Stdio::null());
        let crate::process::child::Helper { child, stdout, .. } =
            crate::process::child::spawn_helper(&mut cmd, "candidate")?;
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(report) = serde_json::from_str::<Report>(&line) {
                    if tx.send((idx, report)).is_err() {
                        return;
                    }
                }
            }
        });
        self.candidates.insert(
            idx,
            Candidate {
                child,
                leading: false,
            },
        );
        self.changed = Instant::now();
        Ok(())
    }

    /// Reads the reports that arrived; returns the elections among them
    /// (candidate, boot-clock instant).
    fn pump(&mut self) -> Vec<(usize, u64)> {
        let mut elections = Vec::new();
        while let Ok((idx, report)) = self.reports.try_recv() {
            let Some(c) = self.candidates.get_mut(&idx) else {
                continue;
            };
            match report {
                Report::Elected { at, .. } => {
                    c.leading = true;
                    self.changed = Instant::now();
                    elections.push((idx, at));
                }
                Report::Ended { .. } | Report::Ousted { .. } => {
                    c.leading = false;
                    self.changed = Instant::now();
                }
                _ => {}
            }
        }
        elections
    }

    /// Waits until one candidate leads and nothing changed for
    /// [`SETTLE_TERMS`] terms; returns it.
    async fn settled(&mut self) -> anyhow::Result<usize> {
        let start = Instant::now();
        loop {
            self.pump();
            let leaders: Vec<usize> = self
                .candidates
                .iter()
                .filter(|(_, c)| c.leading)
                .map(|(i, _)| *i)
                .collect();
            if leaders.len() == 1 && self.changed.elapsed() >= self.term * SETTLE_TERMS {
                return Ok(leaders[0]);
            }
            if start.elapsed() > PATIENCE {
                bail!("the group did not settle on one leader within {PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Signals the settled leader and measures until another candidate is
    /// elected; a new candidate then takes the old one's place.
    async fn take_down(&mut self, signal: i32) -> anyhow::Result<Duration> {
        let leader = self.settled().await?;
        let mut old = self
            .candidates
            .remove(&leader)
            .context("the leader vanished")?;
        let t0 = now();
        crate::process::child::signal_tokio_child(&old.child, signal);
        let start = Instant::now();
        let took = loop {
            if let Some((_, at)) = self
                .pump()
                .into_iter()
                .find(|(i, at)| *i != leader && *at >= t0)
            {
                break Duration::from_nanos(at - t0);
            }
            if start.elapsed() > PATIENCE {
                bail!("nobody was elected within {PATIENCE:?} of taking the leader down");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let _ = tokio::time::timeout(PATIENCE, old.child.wait()).await;
        self.spawn()?;
        Ok(took)
    }

    async fn stop(mut self) {
        for c in self.candidates.values() {
            crate::process::child::signal_tokio_child(&c.child, libc::SIGTERM);
        }
        for (_, mut c) in self.candidates.drain() {
            let _ = tokio::time::timeout(PATIENCE, c.child.wait()).await;
        }
    }
}
