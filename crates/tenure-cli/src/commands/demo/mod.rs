//! `tenure demo`: the README's main job, on this machine, in well under a
//! minute. N candidate processes (this binary, `tenure demo-candidate`)
//! stand for one group on a scratch SQLite file; the orchestrator takes the
//! leader down in turns — SIGTERM (graceful), SIGKILL (crash), SIGSTOP for
//! longer than a term then SIGCONT (pause) — replacing stopped candidates so
//! N keep standing. It prints a live timeline, then measures every
//! hand-over against the bounds the configuration promised, and checks from
//! the candidates' own reports that no two terms were ever valid at once.

mod candidate;
pub(crate) mod report;
mod summary;
mod timeline;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use tenure::{Config, Timing};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

pub use candidate::run as run_candidate;
pub use report::now;
use report::Report;
use summary::{Facts, HandOver, Kind, TermLog};
use timeline::Timeline;

use crate::cli::DemoArgs;
use crate::exit::usage;
use crate::out;
use crate::process::child;
use crate::signals::Stop;
use crate::view;

/// The group the candidates stand for.
const GROUP: &str = "demo";
/// The demo's shortest term: shorter ones drown in process start-up noise.
const MIN_TERM: Duration = Duration::from_millis(200);
/// The demo's longest term: it is meant to finish in about a minute.
const MAX_TERM: Duration = Duration::from_secs(60);
/// Extra patience on top of every promised bound before the demo gives up
/// waiting: processes start slowly on a loaded machine, and the bound is
/// what the summary judges, not the timeout.
const SLACK: Duration = Duration::from_secs(10);

/// Runs `tenure demo`.
pub async fn run(args: DemoArgs) -> anyhow::Result<u8> {
    if !(MIN_TERM..=MAX_TERM).contains(&args.term) {
        return Err(usage(format!(
            "the demo's --term must be between {} and {}: it shows several hand-overs in well under a minute",
            view::short(MIN_TERM),
            view::short(MAX_TERM)
        )));
    }
    let timing = Config::new(args.term).validate().map_err(usage)?;
    let exe = std::env::current_exe()
        .context("cannot find the tenure executable to start the candidates")?;
    let dir = scratch_dir()?;
    let db = dir.join("tenure.db");
    let store = format!("sqlite://{}", db.display());
    let log = std::fs::File::create(dir.join("candidates.log"))
        .with_context(|| format!("cannot create a log file in {}", dir.display()))?;
    let stop = Stop::listen()?;
    let t0 = now();
    let (tx, rx) = mpsc::unbounded_channel();
    let mut demo = Demo {
        exe,
        store,
        log,
        timing,
        stop,
        timeline: Timeline::new(t0, args.json),
        procs: Vec::new(),
        tx: Some(tx),
        rx,
        terms: Vec::new(),
        renewals: Vec::new(),
        handovers: Vec::new(),
        pending: None,
        problems: Vec::new(),
    };
    demo.intro(args.candidates);
    let mut outcome = Ok(());
    for _ in 0..args.candidates {
        if let Err(e) = demo.spawn() {
            outcome = Err(format!("cannot start a candidate: {e:#}"));
            break;
        }
    }
    if outcome.is_ok() {
        outcome = demo.scenario(args.duration).await;
    }
    if let Err(problem) = outcome {
        demo.timeline.at(now(), &format!("!!! {problem}"));
        demo.problems.push(problem);
    }
    demo.finish().await;
    let t_end = now();
    let summary = summary::summarize(Facts {
        timing: &demo.timing,
        terms: &demo.terms,
        handovers: &demo.handovers,
        problems: std::mem::take(&mut demo.problems),
        t0,
        t_end,
        candidates: args.candidates,
        store: demo.store.clone(),
    });
    if args.json {
        out::print(&serde_json::to_string(&summary)?)?;
    } else {
        out::print(&summary::render(&summary))?;
    }
    if summary.ok && !args.keep {
        // Best effort: a leftover scratch directory in /tmp harms nobody.
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        demo.timeline.line(&format!(
            "scratch directory kept: {} (database and candidates.log)",
            dir.display()
        ));
    }
    Ok(u8::from(!summary.ok))
}

/// A fresh directory under the system's temporary directory.
fn scratch_dir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir();
    let dir = base.join(format!("tenure-demo-{}-{}", std::process::id(), now()));
    std::fs::create_dir(&dir)
        .with_context(|| format!("cannot create a scratch directory in {}", base.display()))?;
    Ok(dir)
}

/// A candidate process.
struct Proc {
    id: String,
    pid: libc::pid_t,
    child: Child,
    paused: bool,
    eof: bool,
    exited: bool,
}

/// What the stdout readers send.
enum Msg {
    Line(usize, String),
    Eof(usize),
}

struct Demo {
    exe: PathBuf,
    store: String,
    log: std::fs::File,
    timing: Timing,
    stop: Stop,
    timeline: Timeline,
    procs: Vec<Proc>,
    /// Cloned into every reader; dropped at the end so `rx` drains.
    tx: Option<mpsc::UnboundedSender<Msg>>,
    rx: mpsc::UnboundedReceiver<Msg>,
    terms: Vec<TermLog>,
    /// Renewals seen per term, parallel to `terms`.
    renewals: Vec<u32>,
    handovers: Vec<HandOver>,
    /// The hand-over waiting for its next term.
    pending: Option<usize>,
    problems: Vec<String>,
}

impl Demo {
    fn intro(&self, n: u8) {
        let b = self.timing.bounds();
        self.timeline.line(&format!(
            "tenure demo: {n} candidate processes stand for group {GROUP:?} on {}",
            self.store
        ));
        self.timeline.line(&format!(
            "term {}: a leader is valid {} per renewal and renews every {}; promised fail-over: \
             crash or pause <= {}, graceful <= {} polling (one round trip with notifications)",
            view::short(self.timing.term),
            view::secs(b.leader_validity),
            view::secs(self.timing.renew_interval),
            view::secs(b.crash_failover),
            view::secs(b.graceful_failover_polling),
        ));
        self.timeline.line("");
    }

    /// Starts one more candidate process.
    fn spawn(&mut self) -> anyhow::Result<()> {
        let idx = self.procs.len();
        let id = format!("c{}", idx + 1);
        let mut cmd = Command::new(&self.exe);
        cmd.arg("demo-candidate")
            .args(["--store", &self.store, "--group", GROUP, "--id", &id])
            .arg("--term")
            .arg(humantime::format_duration(self.timing.term).to_string())
            .stderr(self.log.try_clone()?);
        let child::Helper { child, pid, stdout } = child::spawn_helper(&mut cmd, "candidate")?;
        let tx = self.tx.clone().context("the demo is finishing")?;
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send(Msg::Line(idx, line)).is_err() {
                    return;
                }
            }
            let _ = tx.send(Msg::Eof(idx));
        });
        self.procs.push(Proc {
            id,
            pid,
            child,
            paused: false,
            eof: false,
            exited: false,
        });
        Ok(())
    }

    /// Takes leaders down in turns until the duration is used up, after at
    /// least one round of each kind.
    async fn scenario(&mut self, duration: Duration) -> Result<(), String> {
        let started = Instant::now();
        let b = self.timing.bounds();
        if !self
            .wait_for(b.crash_failover + SLACK, |d| d.leader().is_some())
            .await
        {
            return Err(self.why_not("no candidate became leader"));
        }
        let kinds = [Kind::Graceful, Kind::Crash, Kind::Pause];
        for round in 0usize.. {
            let kind = kinds[round % kinds.len()];
            if round >= kinds.len() && started.elapsed() + self.estimate(kind) > duration {
                return Ok(());
            }
            // Let the leader lead (and renew) for a moment.
            self.wait_for(self.timing.term / 2, |_| false).await;
            if self.stop.is_stopped() {
                return Err("interrupted".into());
            }
            self.take_down(kind).await?;
        }
        Ok(())
    }

    /// How long a round of `kind` takes, roughly.
    fn estimate(&self, kind: Kind) -> Duration {
        let b = self.timing.bounds();
        self.timing.term / 2
            + self.timing.renew_interval
            + match kind {
                Kind::Graceful => b.graceful_failover_polling + Duration::from_millis(500),
                Kind::Crash => b.crash_failover + Duration::from_millis(500),
                Kind::Pause => self.pause_length() + self.timing.term,
            }
    }

    /// Longer than a term, and long enough that a challenger surely takes
    /// over while the leader is frozen.
    fn pause_length(&self) -> Duration {
        let b = self.timing.bounds();
        (self.timing.term * 3 / 2).max(b.crash_failover + Duration::from_millis(250))
    }

    async fn take_down(&mut self, kind: Kind) -> Result<(), String> {
        let (t, token, idx) = self.leader_just_renewed(kind).await?;
        let (pid, at) = self.strike(kind, idx, token);
        self.await_takeover(kind, token).await?;
        self.restore(kind, t, idx, pid, at).await
    }

    /// Waits for a leader, then for its next renewal: struck right after
    /// one, it cannot have renewed again unseen before a SIGKILL, and its
    /// last deadline is exact. Returns its term's index, token and process.
    async fn leader_just_renewed(&mut self, kind: Kind) -> Result<(usize, u64, usize), String> {
        let b = self.timing.bounds();
        if !self
            .wait_for(b.crash_failover + SLACK, |d| d.leader().is_some())
            .await
        {
            return Err(self.why_not("no leader to take down"));
        }
        let Some((t, token)) = self.leader() else {
            return Err("no leader to take down".into());
        };
        let idx = self.proc_of(t).ok_or("the leader's process is unknown")?;
        let seen = self.renewals[t];
        self.wait_for(
            self.timing.renew_interval * 2 + Duration::from_secs(1),
            |d| d.renewals[t] > seen || d.leader().map(|l| l.1) != Some(token),
        )
        .await;
        if self.leader().map(|l| l.1) != Some(token) {
            return Err(format!(
                "token {token} ended before the {} take-down",
                kind.name()
            ));
        }
        Ok((t, token, idx))
    }

    /// Signals the leader's process and records the take-down: in the
    /// timeline, as a pending hand-over, and (for a crash) as the end of
    /// its terms' work. Returns the pid and the instant.
    fn strike(&mut self, kind: Kind, idx: usize, token: u64) -> (libc::pid_t, u64) {
        let (sig, name, what) = match kind {
            Kind::Graceful => (libc::SIGTERM, "SIGTERM", "graceful stop"),
            Kind::Crash => (libc::SIGKILL, "SIGKILL", "crash"),
            Kind::Pause => (libc::SIGSTOP, "SIGSTOP", "pause"),
        };
        let pid = self.procs[idx].pid;
        let at = now();
        signal(pid, sig);
        match kind {
            Kind::Crash => {
                for term in &mut self.terms {
                    if term.candidate == self.procs[idx].id && term.ended_at.is_none() {
                        term.killed_at = Some(at);
                    }
                }
            }
            Kind::Pause => self.procs[idx].paused = true,
            Kind::Graceful => {}
        }
        self.timeline.at(
            at,
            &format!(
                "==> {name} {} ({what}; it leads with token {token})",
                self.procs[idx].id
            ),
        );
        self.handovers.push(HandOver {
            kind,
            from_token: token,
            signalled_at: at,
            released_at: None,
            to_token: None,
        });
        self.pending = Some(self.handovers.len() - 1);
        (pid, at)
    }

    /// Waits for another candidate to take over within the bound the
    /// configuration promises for this kind of take-down.
    async fn await_takeover(&mut self, kind: Kind, token: u64) -> Result<(), String> {
        let b = self.timing.bounds();
        let bound = match kind {
            Kind::Graceful => b.graceful_failover_polling,
            Kind::Crash | Kind::Pause => b.crash_failover,
        };
        let took_over = self
            .wait_for(bound + SLACK, |d| d.latest_token() > token)
            .await;
        self.pending = None;
        if !took_over {
            let what = match kind {
                Kind::Graceful => "graceful stop",
                Kind::Crash => "crash",
                Kind::Pause => "pause",
            };
            return Err(self.why_not(&format!(
                "no candidate took over within {} of the {what}",
                view::short(bound + SLACK)
            )));
        }
        Ok(())
    }

    /// Brings the group back to full strength: a replacement for a stopped
    /// or killed candidate; the paused one resumed after its pause.
    async fn restore(
        &mut self,
        kind: Kind,
        t: usize,
        idx: usize,
        pid: libc::pid_t,
        at: u64,
    ) -> Result<(), String> {
        match kind {
            Kind::Graceful | Kind::Crash => {
                self.reap(idx).await;
                self.spawn()
                    .map_err(|e| format!("cannot start a replacement candidate: {e:#}"))?;
            }
            Kind::Pause => {
                let pause = self.pause_length();
                let resume = Instant::now()
                    + pause.saturating_sub(Duration::from_nanos(now().saturating_sub(at)));
                self.wait_until(resume).await;
                let cont = now();
                signal(pid, libc::SIGCONT);
                self.procs[idx].paused = false;
                self.timeline.at(
                    cont,
                    &format!(
                        "==> SIGCONT {} (frozen for {}, longer than its term)",
                        self.procs[idx].id,
                        view::short(Duration::from_nanos(cont.saturating_sub(at)))
                    ),
                );
                // It finds its term long over, says so, and stands again.
                self.wait_for(self.timing.term + SLACK, |d| d.terms[t].ended_at.is_some())
                    .await;
            }
        }
        Ok(())
    }

    /// Waits for a stopped candidate's last lines and its exit.
    async fn reap(&mut self, idx: usize) {
        let patience = self.timing.term * 2 + SLACK;
        self.wait_for(patience, |d| d.procs[idx].eof).await;
        let p = &mut self.procs[idx];
        let status = match tokio::time::timeout(patience, p.child.wait()).await {
            Ok(Ok(s)) => s.to_string(),
            Ok(Err(e)) => format!("status unknown: {e}"),
            Err(_) => {
                signal(p.pid, libc::SIGKILL);
                let _ = p.child.wait().await;
                "did not exit; killed".to_owned()
            }
        };
        p.exited = true;
        let line = format!("{} exited ({status})", p.id);
        self.timeline.at(now(), &line);
    }

    /// Stops every candidate gracefully (SIGKILL after a patience) and
    /// collects their last reports.
    async fn finish(&mut self) {
        self.timeline
            .at(now(), "==> SIGTERM to every candidate: end of the demo");
        for p in self.procs.iter_mut().filter(|p| !p.exited) {
            if p.paused {
                signal(p.pid, libc::SIGCONT);
                p.paused = false;
            }
            signal(p.pid, libc::SIGTERM);
        }
        let patience = self.timing.term * 2 + SLACK;
        self.wait_for(patience, |d| d.procs.iter().all(|p| p.eof || p.exited))
            .await;
        let at = now();
        for p in self.procs.iter_mut().filter(|p| !(p.eof || p.exited)) {
            signal(p.pid, libc::SIGKILL);
            for term in &mut self.terms {
                if term.candidate == p.id && term.ended_at.is_none() {
                    term.killed_at = Some(at);
                }
            }
            self.problems
                .push(format!("{} did not stop on SIGTERM; killed", p.id));
        }
        // Drain what the readers still hold; they end with the pipes.
        self.tx = None;
        let drain_until = Instant::now() + Duration::from_secs(2);
        while let Ok(Some(msg)) = tokio::time::timeout_at(drain_until.into(), self.rx.recv()).await
        {
            self.apply(msg);
        }
        for p in self.procs.iter_mut().filter(|p| !p.exited) {
            let _ = tokio::time::timeout(Duration::from_secs(2), p.child.wait()).await;
            p.exited = true;
        }
    }

    /// Handles reports until `done` holds or `timeout` passes; returns
    /// whether `done` holds. A signal to the demo ends the wait early.
    async fn wait_for(&mut self, timeout: Duration, done: impl Fn(&Demo) -> bool) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if done(self) {
                return true;
            }
            tokio::select! {
                msg = self.rx.recv() => match msg {
                    Some(m) => self.apply(m),
                    None => return done(self),
                },
                _ = tokio::time::sleep_until(until.into()) => return done(self),
                _ = self.stop.stopped() => return done(self),
            }
        }
    }

    async fn wait_until(&mut self, until: Instant) {
        let left = until.saturating_duration_since(Instant::now());
        self.wait_for(left, |_| false).await;
    }

    fn why_not(&self, what: &str) -> String {
        if self.stop.is_stopped() {
            "interrupted".into()
        } else {
            what.to_owned()
        }
    }

    /// The newest term not known to have ended: (index, token).
    fn leader(&self) -> Option<(usize, u64)> {
        let (i, t) = self.terms.iter().enumerate().max_by_key(|(_, t)| t.token)?;
        (t.ended_at.is_none() && t.reason.is_none() && t.killed_at.is_none())
            .then_some((i, t.token))
    }

    fn latest_token(&self) -> u64 {
        self.terms.iter().map(|t| t.token).max().unwrap_or(0)
    }

    fn proc_of(&self, term: usize) -> Option<usize> {
        let id = &self.terms.get(term)?.candidate;
        self.procs.iter().position(|p| &p.id == id)
    }

    fn apply(&mut self, msg: Msg) {
        match msg {
            Msg::Eof(i) => {
                if let Some(p) = self.procs.get_mut(i) {
                    p.eof = true;
                }
            }
            Msg::Line(i, text) => match serde_json::from_str::<Report>(&text) {
                Ok(r) => self.on_report(i, r),
                Err(_) => {
                    let id = self.procs.get(i).map_or("?", |p| p.id.as_str());
                    self.timeline
                        .at(now(), &format!("{id}: unexpected output: {text}"));
                }
            },
        }
    }

    fn on_report(&mut self, i: usize, r: Report) {
        let id = self
            .procs
            .get(i)
            .map_or_else(|| "?".into(), |p| p.id.clone());
        match r {
            Report::Started { pid, at, .. } => {
                self.timeline.at(at, &format!("{id} stands (pid {pid})"));
            }
            Report::Elected {
                token,
                at,
                deadline_mono,
            } => {
                self.terms.push(TermLog {
                    token,
                    candidate: id.clone(),
                    elected_at: at,
                    deadline: deadline_mono,
                    ended_at: None,
                    reason: None,
                    killed_at: None,
                });
                self.renewals.push(0);
                let mut line = format!("{id} LEADS with token {token}");
                if let Some(h) = self.pending.and_then(|p| self.handovers.get_mut(p)) {
                    if token > h.from_token && h.to_token.is_none() {
                        h.to_token = Some(token);
                        let (from, what) = match (h.kind, h.released_at) {
                            (Kind::Graceful, Some(r)) => (r, "the release"),
                            (Kind::Graceful, None) => (h.signalled_at, "SIGTERM"),
                            (Kind::Crash, _) => (h.signalled_at, "SIGKILL"),
                            (Kind::Pause, _) => (h.signalled_at, "SIGSTOP"),
                        };
                        line.push_str(&format!(
                            "   ({} hand-over, {} after {what})",
                            h.kind.name(),
                            view::secs(Duration::from_nanos(at.saturating_sub(from)))
                        ));
                    }
                }
                self.timeline.at(at, &line);
            }
            Report::Renewed {
                token,
                deadline_mono,
                ..
            } => {
                if let Some(k) = self.terms.iter().position(|t| t.token == token) {
                    let t = &mut self.terms[k];
                    t.deadline = t.deadline.max(deadline_mono);
                    self.renewals[k] += 1;
                }
            }
            Report::Ousted { token, at, reason } => {
                if let Some(t) = self.terms.iter_mut().find(|t| t.token == token) {
                    t.reason = Some(reason.clone());
                }
                self.timeline
                    .at(at, &format!("{id}'s term {token} ended: {reason}"));
            }
            Report::Ended { token, at, reason } => {
                if let Some(t) = self.terms.iter_mut().find(|t| t.token == token) {
                    t.ended_at = Some(at);
                    t.reason.get_or_insert(reason);
                }
            }
            Report::Released { at } => {
                self.timeline.at(at, &format!("{id} released the lease"));
                let tokens: Vec<u64> = self
                    .terms
                    .iter()
                    .filter(|t| t.candidate == id)
                    .map(|t| t.token)
                    .collect();
                if let Some(h) = self.handovers.iter_mut().rev().find(|h| {
                    h.kind == Kind::Graceful
                        && h.released_at.is_none()
                        && tokens.contains(&h.from_token)
                }) {
                    h.released_at = Some(at);
                }
            }
        }
    }
}

/// Sends a signal to one candidate process.
fn signal(pid: libc::pid_t, sig: libc::c_int) {
    child::signal_child(pid, sig);
}
