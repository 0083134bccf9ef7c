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
        let _ = tenure::testkit::signal(self.pid(), sig);
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
            let _ = tenure::testkit::signal(-self.pid(), libc::SIGKILL);
            let _ = tenure::testkit::signal(self.pid(), libc::SIGKILL);
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
}

impl Drop for Groups {
    fn drop(&mut self) {
        for &g in &self.0 {
            if g > 1 {
                let _ = tenure::testkit::signal(-g, libc::SIGKILL);
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

/// Live (not zombie) members of process group `pgid`, from /proc, so the
/// answer does not depend on whether PID 1 reaps orphans promptly.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse::<i32>() == Ok(pgid) {
            out.push(pid);
        }
    }
    out
}

/// The parent of `pid`, from /proc.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Zombie children of `ppid`, from /proc.
pub fn zombies_of(ppid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 1 && fields[0] == "Z" && fields[1].parse::<i32>() == Ok(ppid) {
            out.push(pid);
        }
    }
    out
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

/// The script most tests run as CMD: records itself, then waits on a
/// grandchild so that "the whole group" is more than one process.
pub fn recording_child(scratch: &Scratch) -> PathBuf {
    let log = scratch.path("children.log");
    scratch.script(
        "child.sh",
        &format!(
            r#"echo "$TENURE_ID $$ $TENURE_TOKEN $TENURE_DEADLINE_UNIX_MS" >> "{}"
sleep 1000 &
wait"#,
            log.display()
        ),
    )
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

/// The JSON log lines of a `tenure --log-format json` process.
pub fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
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
pub fn stamping_child(s: &Scratch) -> std::path::PathBuf {
    s.script(
        "stamper.sh",
        &format!(
            r#"echo "$TENURE_ID $$ $TENURE_TOKEN" >> "{log}"
while :; do
  read up rest < /proc/uptime
  echo "$TENURE_TOKEN $up" >> "{stamps}"
  sleep 0.02
done"#,
            log = s.path("children.log").display(),
            stamps = s.path("stamps.log").display()
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

/// Two `tenure run` candidates on `store` (2 s term); the leader's tenure
/// process alone (not CMD) is SIGSTOPped for 6 s. The other takes over
/// meanwhile; the old CMD must be dead before the new one starts, killed
/// by the watchdog at the deadline. Both CMDs stamp `CLOCK_BOOTTIME` every
/// 20 ms while they run, so the comparison is of what they did, not of
/// when the test looked. Returns the takeover's gap between the CMDs.
pub fn frozen_leader_is_replaced_on(s: &Scratch, store: &str, group: &str) -> Duration {
    let log = s.path("children.log");
    let child = stamping_child(s);
    let a = Running::spawn(&mut run_on(s, store, group, "a", &[], &child));
    let b = Running::spawn(&mut run_on(s, store, group, "b", &[], &child));
    let mut groups = Groups::default();
    let first = wait_for(bounds().crash_failover + Duration::from_secs(5), || {
        child_lines(&log).into_iter().next()
    })
    .expect("a child started");
    groups.add(first.pgid);
    let (leader, leader_log) = if first.id == "a" {
        (&a, s.path("a.log"))
    } else {
        (&b, s.path("b.log"))
    };
    // Let it renew a few times first.
    std::thread::sleep(Duration::from_secs(1));

    leader.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(6));
    let resumed_at = uptime();
    leader.signal(libc::SIGCONT);

    let next = wait_for(Duration::from_secs(5), || {
        child_lines(&log).into_iter().nth(1)
    })
    .expect("the other candidate took over while the leader was frozen");
    groups.add(next.pgid);
    assert_ne!(next.id, first.id);
    assert!(next.token > first.token);
    // Let the new CMD stamp a little more, then compare.
    std::thread::sleep(Duration::from_millis(500));
    let spans = stamp_spans(s);
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
