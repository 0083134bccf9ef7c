//! Helpers shared by the integration tests: scratch directories, the real
//! `tenure` binary, and guards that kill everything a test started, even
//! when it fails half-way.

#![allow(dead_code, reason = "each test binary uses a different part")]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

/// The binary under test.
pub fn tenure() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tenure"))
}

/// A directory of its own for one test, removed afterwards.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tenure-cli-test-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        Scratch { dir }
    }

    /// A fresh SQLite store URL in this directory.
    pub fn store(&self) -> String {
        format!("sqlite://{}", self.dir.join("tenure.db").display())
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes an executable shell script.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.path(name);
        fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write script");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A process started by a test, in its own process group; killed (with
/// its group) when dropped.
pub struct Running {
    pub child: Child,
}

impl Running {
    /// Starts `cmd` with stdin closed, in a new process group.
    pub fn spawn(cmd: &mut Command) -> Running {
        cmd.stdin(Stdio::null()).process_group(0);
        Running {
            child: cmd.spawn().expect("spawn"),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `sig` to this process only.
    pub fn signal(&self, sig: i32) {
        let _ = tenure_testkit::signal(self.pid(), sig);
    }

    /// Waits for exit, up to `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return Some(s);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // Its group (it leads one), then itself.
            let _ = tenure_testkit::signal(-self.pid(), libc::SIGKILL);
            let _ = tenure_testkit::signal(self.pid(), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// Process groups a test learned about (children of `tenure run`); all
/// killed when dropped, in case a test failed before tenure cleaned up.
#[derive(Default)]
pub struct Groups(pub Vec<i32>);

impl Groups {
    pub fn add(&mut self, pgid: i32) {
        if pgid > 1 && !self.0.contains(&pgid) {
            self.0.push(pgid);
        }
    }

    /// Waits up to `within` for CMD start number `n` (from 0) in the
    /// children log `log`, and adds that CMD's process group, so that it
    /// is killed even when the test fails.
    pub fn started(&mut self, log: &Path, n: usize, within: Duration) -> Option<ChildLine> {
        let line = wait_for(within, || child_lines(log).into_iter().nth(n))?;
        self.add(line.pgid);
        Some(line)
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        for &g in &self.0 {
            if g > 1 {
                let _ = tenure_testkit::signal(-g, libc::SIGKILL);
            }
        }
    }
}

/// Polls `f` every 20 ms until it returns `Some`, or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every process in /proc, with the fields of its `stat` after the
/// command name: state, parent, process group, … Read from /proc so the
/// answers do not depend on whether PID 1 reaps orphans promptly.
fn processes() -> Vec<(i32, Vec<String>)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<i32>().ok()?;
            Some((pid, stat_fields(pid)?))
        })
        .collect()
}

/// The fields of `/proc/PID/stat` after the command name.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Whether `pid` has not exited: it exists and is no zombie (a killed
/// process reparented to init is reaped whenever init gets to it).
pub fn running(pid: i32) -> bool {
    stat_fields(pid)
        .and_then(|f| f.first().cloned())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// Live (not zombie) members of process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(_, f)| f.len() > 2 && f[0] != "Z" && f[2].parse() == Ok(pgid))
        .map(|(pid, _)| pid)
        .collect()
}

/// The parent of `pid`, from /proc.
pub fn parent_of(pid: i32) -> Option<i32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// Children of `ppid`, from /proc.
pub fn children_of(ppid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(_, f)| f.len() > 1 && f[1].parse() == Ok(ppid))
        .map(|(pid, _)| pid)
        .collect()
}

/// Zombie children of `ppid`, from /proc.
pub fn zombies_of(ppid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(_, f)| f.len() > 1 && f[0] == "Z" && f[1].parse() == Ok(ppid))
        .map(|(pid, _)| pid)
        .collect()
}

/// One line a test child appends to its log: "ID PGID TOKEN [DEADLINE_MS]".
#[derive(Debug, Clone, PartialEq)]
pub struct ChildLine {
    pub id: String,
    pub pgid: i32,
    pub token: u64,
}

/// The lines children appended to `path` so far.
pub fn child_lines(path: &Path) -> Vec<ChildLine> {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some(ChildLine {
                id: f.next()?.to_owned(),
                pgid: f.next()?.parse().ok()?,
                token: f.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// A CMD script `name` that first records its start in children.log (the
/// line [`child_lines`] reads), then runs `body`.
pub fn start_recording_script(scratch: &Scratch, name: &str, body: &str) -> PathBuf {
    let log = scratch.path("children.log");
    scratch.script(
        name,
        &format!(
            "echo \"$TENURE_ID $$ $TENURE_TOKEN $TENURE_DEADLINE_UNIX_MS\" >> \"{}\"\n{body}",
            log.display()
        ),
    )
}

/// The script most tests run as CMD: records itself, then waits on a
/// grandchild so that "the whole group" is more than one process.
pub fn recording_child(scratch: &Scratch) -> PathBuf {
    start_recording_script(scratch, "child.sh", "sleep 1000 &\nwait")
}

/// A name of the test's own (a group, key prefix, table or bucket path),
/// kept apart from every other run's on a shared server.
pub fn unique(label: &str) -> String {
    format!("tenure-cli-{label}-{:x}", rand::random::<u64>())
}

/// `tenure run` for `id` on `store` with a 2 s term, logging JSON to
/// `<id>.log` in the scratch directory.
pub fn run_cmd(scratch: &Scratch, id: &str, extra: &[&str], child: &Path) -> Command {
    run_on(scratch, &scratch.store(), "g", id, extra, child)
}

/// `tenure run` like [`run_cmd`], on any store and group.
pub fn run_on(
    scratch: &Scratch,
    store: &str,
    group: &str,
    id: &str,
    extra: &[&str],
    child: &Path,
) -> Command {
    run_with_term(scratch, store, group, id, "2s", extra, child)
}

/// `tenure run` like [`run_on`], with another term.
pub fn run_with_term(
    scratch: &Scratch,
    store: &str,
    group: &str,
    id: &str,
    term: &str,
    extra: &[&str],
    child: &Path,
) -> Command {
    let mut cmd = tenure();
    cmd.args([
        "--log-format",
        "json",
        "run",
        "--group",
        group,
        "--term",
        term,
    ])
    .args(["--store", store, "--id", id])
    .args(extra)
    .arg("--")
    .arg(child)
    .stdout(Stdio::null())
    .stderr(fs::File::create(scratch.path(&format!("{id}.log"))).expect("log file"));
    cmd
}

/// Runs a short tenure command to completion; killed after 30 s.
pub fn run_to_end(cmd: &mut Command) -> Output {
    use std::io::Read;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut r = Running::spawn(cmd);
    let mut out = r.child.stdout.take().expect("stdout");
    let mut err = r.child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = r
        .wait_timeout(Duration::from_secs(30))
        .expect("command did not finish within 30 s");
    Output {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    }
}

/// Runs a short tenure command to completion like [`run_to_end`], and
/// checks that it exited 0 (showing its stderr if not).
pub fn succeeds(cmd: &mut Command) -> Output {
    let out = run_to_end(cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `tenure status --json` of `group` on `store`, which must succeed.
pub fn status_json(store: &str, group: &str) -> serde_json::Value {
    let out = succeeds(tenure().args(["status", "--group", group, "--json", "--store", store]));
    serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
}

/// One election under test: `tenure run` candidates for `group` on
/// `store`, all running `child`, which logs each start to `log` (as
/// [`recording_child`] and [`stamping_child`] do). Every CMD group seen
/// through [`Election::started`] is killed when this is dropped, and the
/// scratch directory removed.
pub struct Election {
    /// Dropped first: the CMD groups go before their directory.
    pub groups: Groups,
    pub store: String,
    pub group: String,
    /// The candidates' `--term`: 2 s unless a test sets another.
    pub term: String,
    pub child: PathBuf,
    pub log: PathBuf,
    pub s: Scratch,
}

impl Election {
    /// Group "g" on a fresh SQLite store, the candidates running
    /// [`recording_child`].
    pub fn new(name: &str) -> Election {
        let s = Scratch::new(name);
        let store = s.store();
        Election::on(s, &store, "g")
    }

    /// `group` on `store`, the candidates running [`recording_child`].
    pub fn on(s: Scratch, store: &str, group: &str) -> Election {
        Election {
            child: recording_child(&s),
            log: s.path("children.log"),
            store: store.to_owned(),
            group: group.to_owned(),
            term: "2s".to_owned(),
            groups: Groups::default(),
            s,
        }
    }

    /// The same, the candidates running [`stamping_child`] instead.
    pub fn stamping(mut self) -> Election {
        self.child = stamping_child(&self.s);
        self
    }

    /// Starts candidate `id` with `extra` flags.
    pub fn candidate(&self, id: &str, extra: &[&str]) -> Running {
        Running::spawn(&mut run_with_term(
            &self.s,
            &self.store,
            &self.group,
            id,
            &self.term,
            extra,
            &self.child,
        ))
    }

    /// Starts candidate `id` with `extra` flags as the election's first,
    /// and waits up to `within` for its CMD to start: the process, and
    /// that start.
    pub fn leader(&mut self, id: &str, extra: &[&str], within: Duration) -> (Running, ChildLine) {
        let candidate = self.candidate(id, extra);
        let start = self.started(0, within).unwrap_or_else(|| {
            panic!(
                "{id} did not lead within {within:?}; see {id}.log in {}",
                self.s.dir.display()
            )
        });
        (candidate, start)
    }

    /// Starts candidates "a" and "b", and waits up to `within` for the
    /// first CMD to start: the two, and that start.
    pub fn two_candidates(&mut self, within: Duration) -> (Running, Running, ChildLine) {
        let a = self.candidate("a", &[]);
        let b = self.candidate("b", &[]);
        let first = self
            .started(0, within)
            .unwrap_or_else(|| panic!("no CMD started within {within:?}\n{}", self.logs()));
        (a, b, first)
    }

    /// The last lines of candidate "a"'s and "b"'s logs, for a failure
    /// message (the scratch directory is gone once the test ends).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for id in ["a", "b"] {
            let text = fs::read_to_string(self.s.path(&format!("{id}.log"))).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- {id}.log (last 30 lines) ---\n"));
            for line in &lines[lines.len().saturating_sub(30)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Waits up to `within` for CMD start number `n` (from 0), and keeps
    /// its process group to kill.
    pub fn started(&mut self, n: usize, within: Duration) -> Option<ChildLine> {
        self.groups.started(&self.log, n, within)
    }

    /// Every CMD start so far.
    pub fn starts(&self) -> Vec<ChildLine> {
        child_lines(&self.log)
    }

    /// `tenure status --json` of the group.
    pub fn status(&self) -> serde_json::Value {
        status_json(&self.store, &self.group)
    }
}

/// The JSON log lines of a `tenure --log-format json` process.
pub fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits up to `within` for a log line whose message is `msg` in the
/// JSON log at `path`.
pub fn wait_logged(path: &Path, msg: &str, within: Duration) -> Option<serde_json::Value> {
    wait_for(within, || logged(path, msg).into_iter().next())
}

/// The log lines whose message is `msg`.
pub fn logged(path: &Path, msg: &str) -> Vec<serde_json::Value> {
    log_lines(path)
        .into_iter()
        .filter(|v| v["fields"]["message"] == msg)
        .collect()
}

/// The bounds a 2 s term promises.
pub fn bounds() -> tenure::Bounds {
    tenure::Config::new(Duration::from_secs(2))
        .validate()
        .expect("valid")
        .bounds()
}

/// Seconds since boot on `CLOCK_BOOTTIME`, as `/proc/uptime` shows it.
pub fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/uptime")
}

/// A CMD that stamps `CLOCK_BOOTTIME` every 20 ms with its token while it
/// runs, so tests compare what two leaders did rather than when they looked.
pub fn stamping_child(s: &Scratch) -> PathBuf {
    start_recording_script(
        s,
        "stamper.sh",
        &format!(
            r#"while :; do
  read up rest < /proc/uptime
  echo "$TENURE_TOKEN $up" >> "{}"
  sleep 0.02
done"#,
            s.path("stamps.log").display()
        ),
    )
}

/// The first and last stamp of each token.
pub fn stamp_spans(s: &Scratch) -> std::collections::BTreeMap<u64, (f64, f64)> {
    let mut spans = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(s.path("stamps.log"))
        .unwrap_or_default()
        .lines()
    {
        let Some((t, up)) = line.split_once(' ') else {
            continue;
        };
        let (Ok(t), Ok(up)) = (t.parse::<u64>(), up.trim().parse::<f64>()) else {
            continue;
        };
        let e = spans.entry(t).or_insert((up, up));
        e.0 = e.0.min(up);
        e.1 = e.1.max(up);
    }
    spans
}

/// Two `tenure run` candidates of `e` (2 s term), both running
/// [`stamping_child`]; the leader's tenure process alone (not CMD) is
/// SIGSTOPped for 6 s. The other takes over meanwhile; the old CMD must be
/// dead before the new one starts, killed by the watchdog at the deadline.
/// Both CMDs stamp `CLOCK_BOOTTIME` every 20 ms while they run, so the
/// comparison is of what they did, not of when the test looked. Returns
/// the takeover's gap between the CMDs.
pub fn frozen_leader_is_replaced_on(e: Election) -> Duration {
    let mut e = e.stamping();
    let (a, b, first) = e.two_candidates(bounds().crash_failover + Duration::from_secs(5));
    let (leader, leader_log) = if first.id == "a" {
        (&a, e.s.path("a.log"))
    } else {
        (&b, e.s.path("b.log"))
    };
    // Let it renew a few times first.
    std::thread::sleep(Duration::from_secs(1));

    leader.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(6));
    let resumed_at = uptime();
    leader.signal(libc::SIGCONT);

    let next = e
        .started(1, Duration::from_secs(5))
        .expect("the other candidate took over while the leader was frozen");
    assert_ne!(next.id, first.id);
    assert!(next.token > first.token);
    // Let the new CMD stamp a little more, then compare.
    std::thread::sleep(Duration::from_millis(500));
    let spans = stamp_spans(&e.s);
    let (Some(old), Some(new)) = (spans.get(&first.token), spans.get(&next.token)) else {
        panic!("both CMDs stamped: {spans:?}");
    };
    let (old_last, new_first) = (old.1, new.0);
    eprintln!(
        "frozen leader: old CMD's last stamp {old_last:.2} s, new CMD's first {new_first:.2} s \
         (gap {:.0} ms), old tenure resumed at {resumed_at:.2} s",
        (new_first - old_last) * 1000.0
    );
    assert!(
        new_first < resumed_at,
        "the new CMD started while the old tenure was still frozen (new at {new_first}, resumed at {resumed_at})"
    );
    assert!(
        old_last < new_first,
        "the old CMD (token {}) was still working at {old_last} s after the new one (token {}) started at {new_first} s",
        first.token,
        next.token
    );
    assert!(
        group_members(first.pgid).is_empty(),
        "the old CMD's group is gone"
    );
    let said = std::fs::read_to_string(&leader_log).unwrap_or_default();
    assert!(
        said.contains("tenure watchdog: the term's deadline passed"),
        "the watchdog did it: {said}"
    );
    Duration::from_secs_f64(new_first - old_last)
}

/// Two `tenure run` candidates of `e`; SIGTERM to the leader "a" once "b"
/// has settled as a follower: a stops its CMD's group, releases and exits
/// 0, and b's CMD must start within `within` of the signal, with the next
/// token (`otherwise` says what a slower hand-over means). Returns how
/// long it took.
pub fn graceful_handover(mut e: Election, within: Duration, otherwise: &str) -> Duration {
    let slack = Duration::from_secs(8);
    let mut a = e.candidate("a", &[]);
    let first = e
        .started(0, slack)
        .unwrap_or_else(|| panic!("a did not lead; see a.log in {}", e.s.dir.display()));
    let _b = e.candidate("b", &[]);
    // Let b settle as a follower, its feed open or its polls under way.
    std::thread::sleep(Duration::from_secs(2));

    let stopped = Instant::now();
    a.signal(libc::SIGTERM);
    let status = a.wait_timeout(slack).expect("a exits after SIGTERM");
    assert!(status.success(), "{status:?}");
    assert!(
        group_members(first.pgid).is_empty(),
        "a's child group was stopped before a exited"
    );
    let next = e.started(1, within + slack).expect("b took over");
    let took = stopped.elapsed();
    eprintln!(
        "{}: b's CMD started {took:?} after SIGTERM to a ({} term)",
        e.group, e.term
    );
    assert_eq!(next.id, "b");
    assert_eq!(next.token, first.token + 1);
    assert!(took < within, "{took:?}: {otherwise}");
    took
}

/// The path of `tool` (looked up on `PATH`) for a test that needs it; a
/// missing one fails the test when `CI=true` (scripts/servers.sh installs
/// it) and skips it otherwise.
pub fn required_tool(tool: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(tool))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{tool} is not installed: scripts/servers.sh installs it"
        );
        eprintln!("skipped: {tool} is not installed");
    }
    found
}
