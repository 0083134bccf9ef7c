//! What the clustered-store tests (`cluster_etcd.rs`, `cluster_zookeeper.rs`)
//! share: the 3-member cluster `scripts/servers.sh` starts (its members'
//! pids and start scripts), a fenced resource that every leader's CMD
//! writes to, and the figures each fault is reported with.
//!
//! The fenced resource is `stamps.log`: the CMD of every term appends
//! `TOKEN UPTIME` to it every 20 ms ([`common::stamping_child`]), and
//! appends land in the order they were made. Read in that order it is the
//! write log of a resource that refuses a token lower than one it has
//! seen: [`refused_writes`] are the writes it would have refused, each one
//! a leader acting after a newer term began (two valid terms, or a token
//! that went back). [`fault_figures`] reads the same log for the gap with
//! no valid term across each fault, and whether the term survived it.

#![allow(dead_code, reason = "each test binary uses a different part")]

pub mod peer_proxy;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{unique, uptime, wait_for, ChildLine, Election, Running, Scratch};

/// The term every candidate runs with: 2 s, or `TENURE_CLUSTER_TERM`
/// (`6s`) to measure another (docs/benchmarks.md).
pub fn term() -> String {
    std::env::var("TENURE_CLUSTER_TERM").unwrap_or_else(|_| "2s".to_owned())
}

/// The bounds [`term`] promises.
pub fn term_bounds() -> tenure::Bounds {
    let term = humantime::parse_duration(&term()).expect("TENURE_CLUSTER_TERM is a duration");
    tenure::Config::new(term)
        .validate()
        .expect("a valid term")
        .bounds()
}

/// How long the store's own cluster may go without a leader across a
/// fault for tenure's leader still to be expected to keep its term. A
/// renewal due when the store fails leaves the term `validity - renew
/// interval` to run (1.31 s at a 2 s term); a failed renewal is tried
/// again after about half a retry interval and repeatedly, so the term
/// keeps if the store serves again a little before it runs out. The bound
/// allows a whole retry interval and its jitter (0.7 s) and 0.2 s to
/// reconnect to a member that serves: conservative, for a loaded machine.
/// 0.41 s at a 2 s term; at longer stretches whether the term keeps is
/// only reported.
pub fn keeps_term_below() -> f64 {
    let term = humantime::parse_duration(&term()).expect("TENURE_CLUSTER_TERM is a duration");
    let timing = tenure::Config::new(term).validate().expect("a valid term");
    let left = timing
        .bounds()
        .leader_validity
        .saturating_sub(timing.renew_interval)
        .saturating_sub(timing.retry_interval + timing.retry_jitter);
    left.as_secs_f64() - 0.2
}

/// Polls `leader` until `done`, from just before a fault: the longest
/// stretch without a leader, from the last poll that saw one to the next
/// that did (so a bound from above, by a poll's length).
pub fn longest_leaderless(leader: impl Fn() -> bool, done: &std::sync::atomic::AtomicBool) -> f64 {
    let mut last_led = uptime();
    let mut longest: f64 = 0.0;
    let mut led_before = true;
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        let led = leader();
        let now = uptime();
        if led {
            if !led_before {
                longest = longest.max(now - last_led);
            }
            last_led = now;
        }
        led_before = led;
        std::thread::sleep(Duration::from_millis(20));
    }
    if !led_before {
        longest = longest.max(uptime() - last_led);
    }
    longest
}

/// One member of a cluster `scripts/servers.sh` started: its client
/// address and its directory (`pid`, `start`, `server.log`).
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub client: SocketAddr,
    pub dir: PathBuf,
}

impl Member {
    /// The pid of the running member, as its start script recorded it.
    pub fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir.join("pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Whether its process exists (a stopped one included; a zombie,
    /// killed but not yet reaped by whoever adopted it, is gone).
    pub fn alive(&self) -> bool {
        self.pid().is_some_and(crate::common::running)
    }

    /// Whether its pid file names a process that is gone (a member a test
    /// killed); false for one without a pid file (a private cluster's).
    pub fn known_dead(&self) -> bool {
        self.pid().is_some_and(|pid| !crate::common::running(pid))
    }

    /// Sends `sig` to the member's process.
    pub fn signal(&self, sig: i32) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("{}: no pid file", self.name));
        tenure_testkit::signal(pid, sig)
            .unwrap_or_else(|e| panic!("{}: signal {sig} to {pid}: {e}", self.name));
    }

    /// SIGKILLs it and waits until it is gone.
    pub fn kill(&self) {
        self.signal(libc::SIGKILL);
        wait_for(Duration::from_secs(10), || (!self.alive()).then_some(()))
            .unwrap_or_else(|| panic!("{} did not die", self.name));
    }

    /// Starts it again on its data (its start script) and waits for its
    /// client port.
    pub fn start(&self) {
        let status = Command::new(self.dir.join("start"))
            .status()
            .unwrap_or_else(|e| panic!("{}: run its start script: {e}", self.name));
        assert!(status.success(), "{}: start script: {status}", self.name);
        wait_for(Duration::from_secs(30), || {
            std::net::TcpStream::connect_timeout(&self.client, Duration::from_millis(500))
                .ok()
                .map(drop)
        })
        .unwrap_or_else(|| panic!("{} did not listen again; see {}", self.name, self.log()));
    }

    fn log(&self) -> String {
        self.dir.join("server.log").display().to_string()
    }
}

/// The three members of a cluster, in the order of its endpoints.
#[derive(Debug)]
pub struct Cluster {
    pub members: Vec<Member>,
}

impl Cluster {
    /// The cluster named by `endpoints_var` (comma-separated `host:port`,
    /// any `http://` or `zk://` scheme ignored) and `dir_var` (the members'
    /// directories, `prefix1`, `prefix2`, `prefix3` in endpoint order):
    /// `None` (skip) when missing outside CI, a failure under `CI=true`.
    pub fn from_env(endpoints_var: &str, dir_var: &str, prefix: &str) -> Option<Cluster> {
        let endpoints = tenure_testkit::server_url(endpoints_var)?;
        let dir = PathBuf::from(tenure_testkit::server_url(dir_var)?);
        let list = endpoints.trim_start_matches("zk://");
        let members: Vec<Member> = list
            .split(',')
            .enumerate()
            .map(|(i, e)| Member {
                name: format!("{prefix}{}", i + 1),
                client: e
                    .trim_start_matches("http://")
                    .trim_end_matches('/')
                    .parse()
                    .unwrap_or_else(|_| panic!("{endpoints_var}: {e} is no host:port")),
                dir: dir.join(format!("{prefix}{}", i + 1)),
            })
            .collect();
        assert_eq!(members.len(), 3, "{endpoints_var} names three members");
        Some(Cluster { members })
    }

    /// `host:port,host:port,host:port`.
    pub fn hosts(&self) -> String {
        let list: Vec<String> = self.members.iter().map(|m| m.client.to_string()).collect();
        list.join(",")
    }

    /// Makes every member run again (SIGCONT, and a start for a dead one):
    /// what a test leaves behind, even when it fails half-way.
    pub fn heal(&self) {
        for m in &self.members {
            if let Some(pid) = m.pid() {
                let _ = tenure_testkit::signal(pid, libc::SIGCONT);
            }
            if !m.alive() {
                m.start();
            }
        }
    }
}

/// Heals the cluster when dropped.
pub struct Healed<'a>(pub &'a Cluster);

impl Drop for Healed<'_> {
    fn drop(&mut self) {
        self.0.heal();
    }
}

/// One stamp: the token of the CMD that wrote it and `CLOCK_BOOTTIME`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stamp {
    pub token: u64,
    pub at: f64,
}

/// The stamps in `path`, in the order they were written.
pub fn stamps(path: &Path) -> Vec<Stamp> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (t, up) = l.split_once(' ')?;
            Some(Stamp {
                token: t.parse().ok()?,
                at: up.trim().parse().ok()?,
            })
        })
        .collect()
}

/// The writes a resource that refuses a token lower than the highest it
/// has admitted would refuse, each with the token it had admitted.
pub fn refused_writes(stamps: &[Stamp]) -> Vec<(Stamp, u64)> {
    let mut highest = 0;
    let mut refused = Vec::new();
    for s in stamps {
        if s.token < highest {
            refused.push((*s, highest));
        }
        highest = highest.max(s.token);
    }
    refused
}

/// CMD starts whose token is not above every earlier start's.
pub fn tokens_not_rising(starts: &[ChildLine]) -> Vec<(ChildLine, u64)> {
    let mut highest = 0;
    let mut bad = Vec::new();
    for s in starts {
        if s.token <= highest {
            bad.push((s.clone(), highest));
        }
        highest = highest.max(s.token);
    }
    bad
}

/// One fault the test made, from `from` (uptime, s) until the cluster
/// served again and settled (`to`).
#[derive(Debug, Clone)]
pub struct Fault {
    pub what: String,
    pub from: f64,
    pub to: f64,
    /// The longest stretch the store's cluster had no leader, where
    /// measured: below [`keeps_term_below`], tenure's term must keep.
    pub leaderless: Option<f64>,
}

/// What the fenced resource saw across one fault.
#[derive(Debug, Clone)]
pub struct Figures {
    pub what: String,
    /// The longest interval between two writes from just before the fault
    /// to its end: the gap with no valid term, plus up to one stamp
    /// interval (some 20-40 ms).
    pub gap: f64,
    /// When that interval began, in seconds after the fault began.
    pub gap_at: f64,
    /// The token writing just before the fault, and the last within it.
    pub before: Option<u64>,
    pub after: Option<u64>,
    /// The store's longest stretch without a leader, where measured.
    pub leaderless: Option<f64>,
}

impl Figures {
    /// Whether the term that led before the fault still led at its end.
    pub fn kept(&self) -> bool {
        self.before.is_some() && self.before == self.after
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tokens = match (self.before, self.after) {
            (Some(b), Some(a)) if a == b => format!("kept (token {b})"),
            (Some(b), Some(a)) => format!("moved (token {b} -> {a})"),
            (b, a) => format!("? (tokens {b:?} -> {a:?})"),
        };
        write!(
            f,
            "{}: longest interval without a write {:.2} s (from {:+.1} s); term {tokens}",
            self.what, self.gap, self.gap_at
        )?;
        match self.leaderless {
            Some(l) => write!(f, "; the store had no leader for up to {l:.2} s"),
            None => Ok(()),
        }
    }
}

/// The figures of each fault from the fenced resource's log.
pub fn fault_figures(stamps: &[Stamp], faults: &[Fault]) -> Vec<Figures> {
    faults
        .iter()
        .map(|fault| {
            let before = stamps.iter().rev().find(|s| s.at <= fault.from).copied();
            let within: Vec<Stamp> = stamps
                .iter()
                .filter(|s| s.at > fault.from && s.at <= fault.to)
                .copied()
                .collect();
            let (mut gap, mut gap_from): (f64, f64) = (0.0, fault.from);
            let mut last = before.map_or(fault.from, |s| s.at);
            for at in within.iter().map(|s| s.at).chain([fault.to]) {
                if at - last > gap {
                    (gap, gap_from) = (at - last, last);
                }
                last = at;
            }
            Figures {
                what: fault.what.clone(),
                gap,
                gap_at: gap_from - fault.from,
                before: before.map(|s| s.token),
                after: within.last().map(|s| s.token),
                leaderless: fault.leaderless,
            }
        })
        .collect()
}

/// Checks what every clustered-store test checks once its faults are
/// over, and prints each fault's figures:
///
/// * the fenced resource refused no write (never two valid terms, no
///   token went back), and every CMD start had a higher token than the
///   ones before;
/// * a term leads again once the cluster is whole: a write within the
///   last second, waited for up to `recover_within`;
/// * where the store's own cluster was measured to lead again within
///   [`keeps_term_below`] (a killed leader's successor elected that fast),
///   tenure's term kept.
pub fn check_and_report(
    store: &str,
    stamps_log: &Path,
    starts: &[ChildLine],
    faults: &[Fault],
    recover_within: Duration,
) -> Vec<Figures> {
    let leads_again = wait_for(recover_within, || {
        let now = uptime();
        stamps(stamps_log)
            .last()
            .filter(|s| now - s.at < 1.0)
            .copied()
    });
    let all = stamps(stamps_log);
    let figures = fault_figures(&all, faults);
    let holder = |token: Option<u64>| {
        token
            .and_then(|t| starts.iter().find(|s| s.token == t))
            .map_or("?", |s| s.id.as_str())
    };
    for f in &figures {
        eprintln!(
            "{store}: {f} (candidate {} -> {})",
            holder(f.before),
            holder(f.after)
        );
    }
    let refused = refused_writes(&all);
    assert!(
        refused.is_empty(),
        "{store}: the fenced resource refused {} writes (a leader acted after a newer term began), first: {:?}",
        refused.len(),
        refused.first()
    );
    let bad = tokens_not_rising(starts);
    assert!(
        bad.is_empty(),
        "{store}: CMD starts whose token did not rise: {bad:?}"
    );
    let within = keeps_term_below();
    let lost: Vec<&Figures> = figures
        .iter()
        .filter(|f| f.leaderless.is_some_and(|l| l < within) && !f.kept())
        .collect();
    assert!(
        lost.is_empty(),
        "{store}: tenure's term did not keep although the store had a leader again within {within:.2} s: {lost:?}"
    );
    assert!(
        starts.len() < 20,
        "{store}: {} terms in one test: leadership flapped",
        starts.len()
    );
    assert!(
        leads_again.is_some(),
        "{store}: no term led within {recover_within:?} of the cluster being whole again (last write {:?})",
        all.last()
    );
    figures
}

/// A clustered store under test: its cluster and how to ask it who leads.
pub struct Store<'a> {
    /// `etcd`, `zookeeper`: for messages.
    pub name: &'static str,
    pub cluster: &'a Cluster,
    /// The member leading the store's own cluster, if one does.
    pub leader: fn(&Cluster) -> Option<usize>,
    /// Whether every member serves again, under one leader.
    pub whole: fn(&Cluster) -> bool,
    /// The `tenure run --store` URL for `hosts` (`host:port,...`), a key
    /// prefix or node of the test's own (`own`), and query options
    /// (`timeout=1s`, or empty).
    pub url: fn(hosts: &str, own: &str, options: &str) -> String,
}

/// How long a killed or stopped member stays down.
const DOWN: Duration = Duration::from_secs(3);
/// How long a test waits, after a member serves again, before the next
/// fault: the store's and tenure's dust settles.
const SETTLE: Duration = Duration::from_secs(2);

impl Store<'_> {
    fn leading_member(&self) -> usize {
        wait_for(Duration::from_secs(20), || (self.leader)(self.cluster))
            .unwrap_or_else(|| panic!("{}: no member of the cluster leads", self.name))
    }

    /// Waits until every member serves under one leader (first starting
    /// any that an earlier test left dead, and waking any it left stopped).
    fn wait_whole(&self) {
        self.cluster.heal();
        wait_for(Duration::from_secs(30), || {
            (self.whole)(self.cluster).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "{}: the cluster did not serve again with one leader within 30 s",
                self.name
            )
        });
    }

    /// Three `tenure run` candidates (a, b, c; 2 s term) on `url`, all
    /// running the stamping CMD, once the first CMD started.
    pub fn election(&self, label: &str, url: &str) -> (Election, Vec<Running>) {
        let group = unique(label);
        let mut e = Election::on(Scratch::new(label), url, &group).stamping();
        e.term = term();
        let candidates: Vec<Running> = ["a", "b", "c"]
            .iter()
            .map(|id| e.candidate(id, &[]))
            .collect();
        e.started(0, term_bounds().crash_failover + Duration::from_secs(20))
            .unwrap_or_else(|| {
                panic!("{}: no candidate led; see {}", self.name, e.s.dir.display())
            });
        // A few renewals first.
        std::thread::sleep(Duration::from_secs(2));
        (e, candidates)
    }

    /// SIGKILL of the member leading the store's cluster while tenure's
    /// leader renews, restarted on its data `DOWN` later, `rounds` times.
    /// The candidates reach every member directly, with the URL's default
    /// request timeout (what a user writes).
    pub fn kill_the_leading_member(&self, rounds: usize) -> Vec<Figures> {
        let label = format!("{}-cluster-kill", self.name);
        let own = unique(&label);
        let url = (self.url)(&self.cluster.hosts(), &own, "");
        let _healed = Healed(self.cluster);
        self.wait_whole();
        let (mut e, candidates) = self.election(&label, &url);
        let mut faults = Vec::new();
        for round in 1..=rounds {
            let m = &self.cluster.members[self.leading_member()];
            let done = std::sync::atomic::AtomicBool::new(false);
            let (from, leaderless) = std::thread::scope(|scope| {
                let poll = scope
                    .spawn(|| longest_leaderless(|| (self.leader)(self.cluster).is_some(), &done));
                // The poller stops however this ends: a panic below must
                // not leave the scope waiting for it (and the candidates
                // running) until nextest's timeout.
                let _stop = StopOnDrop(&done);
                // The poller's first look, before the kill.
                std::thread::sleep(Duration::from_millis(200));
                let from = uptime();
                m.kill();
                std::thread::sleep(DOWN);
                m.start();
                self.wait_whole();
                std::thread::sleep(SETTLE);
                done.store(true, std::sync::atomic::Ordering::Relaxed);
                (from, poll.join().expect("the leader poller"))
            });
            faults.push(Fault {
                leaderless: Some(leaderless),
                what: format!(
                    "SIGKILL of the leading member {} (round {round}), restarted {DOWN:?} later",
                    m.name
                ),
                from,
                to: uptime(),
            });
        }
        self.finish(&mut e, candidates, &faults)
    }

    /// Each member in turn cut off from tenure's clients (its client
    /// proxy goes silent, the member itself still in its cluster), then
    /// frozen (SIGSTOP: it answers neither its clients nor its peers), for
    /// `DOWN` each. The candidates reach the members through the proxies,
    /// with a request timeout of 1 s (half the term), so that a client on
    /// the member can move to another before its term ends.
    pub fn cut_off_each_member(&self) -> Vec<Figures> {
        let label = format!("{}-cluster-cut", self.name);
        let own = unique(&label);
        let _healed = Healed(self.cluster);
        self.wait_whole();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let proxies: Vec<tenure_testkit::TcpProxy> = self
            .cluster
            .members
            .iter()
            .map(|m| {
                rt.block_on(tenure_testkit::TcpProxy::start(m.client))
                    .expect("proxy")
            })
            .collect();
        let hosts: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
        let url = (self.url)(&hosts.join(","), &own, "timeout=1s");
        let (mut e, candidates) = self.election(&label, &url);
        let mut faults = Vec::new();
        for (i, m) in self.cluster.members.iter().enumerate() {
            let role = |store: &Store| {
                if (store.leader)(store.cluster) == Some(i) {
                    "leading"
                } else {
                    "following"
                }
            };
            let was = role(self);
            let from = uptime();
            proxies[i].cut();
            std::thread::sleep(DOWN);
            proxies[i].heal();
            std::thread::sleep(SETTLE);
            faults.push(Fault {
                leaderless: None,
                what: format!(
                    "{} ({was}) cut off from tenure's clients for {DOWN:?}",
                    m.name
                ),
                from,
                to: uptime(),
            });
            let was = role(self);
            let from = uptime();
            m.signal(libc::SIGSTOP);
            std::thread::sleep(DOWN);
            m.signal(libc::SIGCONT);
            self.wait_whole();
            std::thread::sleep(SETTLE);
            faults.push(Fault {
                leaderless: None,
                what: format!("{} ({was}) frozen (SIGSTOP) for {DOWN:?}", m.name),
                from,
                to: uptime(),
            });
        }
        let figures = self.finish(&mut e, candidates, &faults);
        drop(proxies);
        figures
    }

    pub fn finish(
        &self,
        e: &mut Election,
        candidates: Vec<Running>,
        faults: &[Fault],
    ) -> Vec<Figures> {
        let figures = check_and_report(
            self.name,
            &e.s.path("stamps.log"),
            &e.starts(),
            faults,
            term_bounds().crash_failover + Duration::from_secs(10),
        );
        let moved = figures.iter().filter(|f| !f.kept()).count();
        let worst = figures.iter().map(|f| f.gap).fold(0.0, f64::max);
        eprintln!(
            "{} (term {}): {} faults, the term moved across {moved}, longest interval without a write {worst:.2} s, {} terms in all",
            self.name,
            term(),
            faults.len(),
            e.starts().len()
        );
        drop(candidates);
        figures
    }
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod checks {
    use super::*;

    fn s(token: u64, at: f64) -> Stamp {
        Stamp { token, at }
    }

    #[test]
    fn a_lower_token_after_a_higher_one_is_refused() {
        let log = [s(3, 1.0), s(3, 1.1), s(4, 1.5), s(3, 1.52), s(4, 1.6)];
        assert_eq!(refused_writes(&log), vec![(s(3, 1.52), 4)]);
        assert!(refused_writes(&log[..3]).is_empty());
    }

    #[test]
    fn figures_find_the_gap_and_whether_the_term_moved() {
        let log = [s(3, 1.0), s(3, 1.02), s(4, 2.5), s(4, 2.52), s(4, 3.9)];
        let faults = [
            Fault {
                what: "kill".into(),
                from: 1.01,
                to: 3.0,
                leaderless: None,
            },
            Fault {
                what: "late".into(),
                from: 2.51,
                to: 4.0,
                leaderless: Some(0.2),
            },
        ];
        let f = fault_figures(&log, &faults);
        assert!((f[0].gap - 1.48).abs() < 1e-9, "{:?}", f[0]);
        assert!((f[0].gap_at - 0.01).abs() < 1e-9, "{:?}", f[0]);
        assert_eq!(
            (f[0].before, f[0].after, f[0].kept()),
            (Some(3), Some(4), false)
        );
        assert!((f[1].gap - 1.38).abs() < 1e-9, "{:?}", f[1]);
        assert!(f[1].kept());
    }
}
