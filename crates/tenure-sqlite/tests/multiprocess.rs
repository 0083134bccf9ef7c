//! Sixteen OS processes race one compare-and-swap on a fresh file: the
//! atomicity that matters on one host is between processes, not tasks.
//!
//! The test re-runs its own binary: `race_child` does nothing unless
//! `TENURE_RACE_CHILD` is set, in which case it is one racer.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tenure::store::CasOutcome;
use tenure::{GroupName, LeaseStore, LeaseView, Version};
use tenure_sqlite::{SqliteOptions, SqliteStore};
use tenure_testkit::{self as testkit, held_by};

const RACERS: usize = 16;
/// How long a racer waits for the write lock.
const RACER_BUSY_TIMEOUT: Duration = Duration::from_secs(30);
const CHILD_ENV: &str = "TENURE_RACE_CHILD";
const RESULT: &str = "TENURE_RACE_RESULT";

/// One racer: waits for the start signal (a file), then opens the store
/// (on a fresh file, racing the schema creation too) and races its
/// compare-and-swap.
/// Prints one `TENURE_RACE_RESULT` line.
#[tokio::test(flavor = "multi_thread")]
async fn race_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // a normal test run: nothing to do
    };
    // id|expected version ("none" or a number)|dir|group
    let mut parts = spec.splitn(4, '|');
    let id = parts.next().unwrap().to_owned();
    let expected = match parts.next().unwrap() {
        "none" => None,
        v => Some(Version(v.parse().unwrap())),
    };
    let dir = PathBuf::from(parts.next().unwrap());
    let group = GroupName::new(parts.next().unwrap()).unwrap();
    let token = expected.map_or(1, |_| 2);
    std::fs::write(dir.join(format!("ready-{id}")), b"").unwrap();
    let go = dir.join("go");
    let give_up = Instant::now() + Duration::from_secs(60);
    while !go.exists() {
        assert!(Instant::now() < give_up, "no start signal within 60 s");
        std::thread::sleep(Duration::from_micros(500));
    }
    let started = Instant::now();
    // Sixteen processes queue for one write lock on a machine that may be
    // busy with other tests: the default busy timeout (1 s) measures the
    // machine, not the store. What is tested is who wins, not how fast.
    let options = SqliteOptions::default().with_busy_timeout(RACER_BUSY_TIMEOUT);
    let store = SqliteStore::connect_with(dir.join("leases.db"), options)
        .await
        .unwrap();
    let outcome = store
        .compare_and_swap(&group, expected, &held_by(&format!("proc-{id}"), token))
        .await;
    let line = match outcome {
        Ok(CasOutcome::Applied(v)) => format!("applied {}", v.0),
        Ok(CasOutcome::Conflict) => "conflict".to_owned(),
        Err(e) => format!("error {e}"),
    };
    println!("{RESULT} {id} {} {line}", started.elapsed().as_micros());
}

fn spawn_racer(
    exe: &Path,
    id: usize,
    expected: Option<Version>,
    dir: &Path,
    group: &GroupName,
) -> std::process::Child {
    let expected = expected.map_or("none".to_owned(), |v| v.0.to_string());
    Command::new(exe)
        .args([
            "--exact",
            "race_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(
            CHILD_ENV,
            format!("{id}|{expected}|{}|{}", dir.display(), group.as_str()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Races `RACERS` processes on `dir/leases.db` and checks that exactly one
/// applied; returns the winner's id and version.
async fn race(
    round: &str,
    dir: &Path,
    group: &GroupName,
    expected: Option<Version>,
) -> (String, u64) {
    let exe = std::env::current_exe().unwrap();
    let spawned = Instant::now();
    let children: Vec<_> = (0..RACERS)
        .map(|id| spawn_racer(&exe, id, expected, dir, group))
        .collect();
    // Release them together, once every process is up.
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..RACERS).any(|id| !dir.join(format!("ready-{id}")).exists()) {
        assert!(
            Instant::now() < deadline,
            "racers did not start within 60 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let ready = spawned.elapsed();
    let go = Instant::now();
    std::fs::write(dir.join("go"), b"").unwrap();

    let mut applied = Vec::new();
    let mut conflicts = 0;
    let mut slowest = 0u128;
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "a racer failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            // libtest prints `test race_child ... ` on the same line.
            .find_map(|l| l.find(RESULT).map(|i| &l[i + RESULT.len()..]))
            .unwrap_or_else(|| panic!("a racer printed no result:\n{stdout}"));
        let fields: Vec<_> = line.split_whitespace().collect();
        slowest = slowest.max(fields[1].parse().unwrap());
        match fields[2] {
            "applied" => applied.push((fields[0].to_owned(), fields[3].parse::<u64>().unwrap())),
            "conflict" => conflicts += 1,
            _ => panic!("racer {} got an error: {line}", fields[0]),
        }
    }
    eprintln!(
        "{round}: {RACERS} processes up in {ready:.1?}; all finished {:.1?} after the start signal \
         (slowest racer: open + CAS in {:.1} ms); winner {applied:?}, {conflicts} conflicts",
        go.elapsed(),
        slowest as f64 / 1000.0
    );
    assert_eq!(
        applied.len(),
        1,
        "exactly one process must win: {applied:?}"
    );
    assert_eq!(conflicts, RACERS - 1);

    // The file agrees with the winner.
    let store = SqliteStore::connect(dir.join("leases.db")).await.unwrap();
    let got = store.read(group).await.unwrap().unwrap();
    let (winner, version) = applied.pop().unwrap();
    assert_eq!(
        got.record.holder_id(),
        Some(format!("proc-{winner}").as_str())
    );
    assert_eq!(got.version, Version(version));
    (winner, version)
}

/// CAS(None) on a fresh file (which also races creating the schema), three
/// times; then a takeover race over an existing record's version, watched
/// through the parent's change feed.
#[tokio::test(flavor = "multi_thread")]
async fn sixteen_processes_race() {
    if std::env::var(CHILD_ENV).is_ok() {
        return; // never recurse from a child
    }
    let scratch = common::Scratch::new("multiprocess");
    for round in 0..3 {
        let dir = scratch.path(&format!("fresh-{round}"));
        std::fs::create_dir_all(&dir).unwrap();
        let group = tenure_testkit::unique_group("multi-process");
        race(
            &format!("fresh file {round}, CAS(None)"),
            &dir,
            &group,
            None,
        )
        .await;
    }
    let dir = scratch.path("takeover");
    std::fs::create_dir_all(&dir).unwrap();
    let group = tenure_testkit::unique_group("multi-process");
    let store = SqliteStore::connect(dir.join("leases.db")).await.unwrap();
    let v = testkit::applied(&store, &group, None, &held_by("first", 1)).await;
    // The parent watches: a commit by another process reaches its feed.
    let mut feed = store.changes(&group).await.unwrap().unwrap();
    race("existing record, CAS(Some(v))", &dir, &group, Some(v)).await;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(2), feed.changed())
        .await
        .expect("no change hint within 2 s of another process's write")
        .expect("the feed ended");
    eprintln!(
        "the parent's change feed hinted {:.1?} after the race ended",
        started.elapsed()
    );
}
