//! `tenure run --shards` and `--slots`, and the run options
//! (`--wait`, `release --to`, `--metadata-file`), end to end: the real
//! binary, real processes, a real SQLite file, 2 s terms. Every CMD checks,
//! the moment it starts, that the previous CMD of its shard is gone (its
//! process group no longer exists), so "never two at once" is checked at the
//! instant it matters, not sampled.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use tenure_testkit::holders::{held_by, loads, moved, Holders};

const SLACK: Duration = Duration::from_secs(8);
const SHARDS: usize = 16;

/// A CMD that records its start and, first, whether the previous holder of
/// its shard (or slot) still had a live process group. Live, not zombie:
/// the CMD of a SIGKILLed `tenure run` is reparented to PID 1, which may
/// reap it a second or more after it died (`kill -0 -PGID` succeeds on a
/// group of zombies; `group_members` skips them for the same reason).
fn checking_child(s: &Scratch, key: &str) -> PathBuf {
    let log = s.path("starts.log");
    let dir = s.path("");
    s.script(
        "child.sh",
        &format!(
            r#"f="{dir}/{key}-${key_var}.pgid"
if [ -f "$f" ]; then
  old=$(cat "$f")
  for st in /proc/[0-9]*/stat; do
    read -r line < "$st" 2>/dev/null || continue
    set -- ${{line##*) }}
    if [ "$1" != Z ] && [ "$3" = "$old" ]; then echo "OVERLAP ${key_var} $old $$" >> "{log}"; break; fi
  done
fi
echo $$ > "$f"
echo "start $TENURE_ID ${key_var} $TENURE_TOKEN $$" >> "{log}"
sleep 1000 &
wait"#,
            dir = dir.display(),
            log = log.display(),
            key = key,
            key_var = if key == "shard" { "TENURE_SHARD" } else { "TENURE_SLOT" },
        ),
    )
}

#[derive(Debug, Clone)]
struct Start {
    id: String,
    key: String,
    token: u64,
    pgid: i32,
}

fn starts(log: &Path) -> Vec<Start> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        !text.contains("OVERLAP"),
        "a CMD started while the previous one of its shard still ran:\n{text}"
    );
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"start")).then(|| Start {
                id: f[1].to_owned(),
                key: f[2].to_owned(),
                token: f[3].parse().unwrap_or(0),
                pgid: f[4].parse().unwrap_or(0),
            })
        })
        .collect()
}

/// Who runs each shard now (live process groups only).
fn running(log: &Path) -> Holders {
    let mut out = Holders::new();
    for s in starts(log) {
        if !group_members(s.pgid).is_empty() {
            if let Some(other) = out.insert(s.key.clone(), s.id.clone()) {
                panic!("{} runs twice: {other} and {}", s.key, s.id);
            }
        }
    }
    out
}

fn member(s: &Scratch, id: &str, child: &Path, extra: &[&str]) -> Running {
    Running::spawn(&mut run_on(s, &s.store(), "ingest", id, extra, child))
}

/// Waits until `done` holds of who runs what, checking every 50 ms.
fn until(log: &Path, within: Duration, mut done: impl FnMut(&Holders) -> bool) -> Duration {
    let start = Instant::now();
    loop {
        let r = running(log);
        if done(&r) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "not settled in {within:?}: {:?}",
            loads(&r)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn four_processes_share_sixteen_shards_and_a_crash_or_a_join_moves_only_what_it_must() {
    let s = Scratch::new("shards");
    let store = s.store();
    four_processes_share_sixteen_shards_on(&s, &store, "ingest");
}

#[cfg(feature = "postgres")]
#[test]
fn four_processes_share_sixteen_shards_on_postgres() {
    let Some(url) = tenure_testkit::server_url("TENURE_TEST_POSTGRES") else {
        return;
    };
    let s = Scratch::new("shards-postgres");
    let group = format!("ingest-{:x}", rand::random::<u64>());
    four_processes_share_sixteen_shards_on(&s, &url, &group);
}

/// Four `tenure run --shards 16` settle at 4 CMDs each; a SIGKILL moves
/// exactly the killed process's shards, within the documented bound; a
/// fifth process takes its share and nothing else moves; no shard's CMD
/// ever runs twice (the checking child) and tokens rise per shard.
fn four_processes_share_sixteen_shards_on(s: &Scratch, store: &str, group: &str) {
    let child = checking_child(s, "shard");
    let log = s.path("starts.log");
    let member = |id: &str| {
        Running::spawn(&mut run_on(
            s,
            store,
            group,
            id,
            &["--shards", "16"],
            &child,
        ))
    };
    let mut members: BTreeMap<&str, Running> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|id| (id, member(id)))
        .collect();
    let timing = tenure::Config::new(Duration::from_secs(2))
        .validate()
        .unwrap();
    let crash_bound =
        (timing.bounds().crash_failover + timing.retry_interval + timing.retry_jitter) * 2;
    until(&log, crash_bound + SLACK, |r| {
        r.len() == SHARDS && loads(r).values().all(|&l| l == 4) && loads(r).len() == 4
    });
    let before = running(&log);

    // status shows the set.
    let v = status_json(store, group);
    assert_eq!(v["kind"], "sharded");
    assert_eq!(v["members"].as_array().map(Vec::len), Some(4));
    assert_eq!(v["leases"].as_array().map(Vec::len), Some(SHARDS));

    // SIGKILL d: only its shards move, within the documented bound.
    members.get("d").unwrap().signal(libc::SIGKILL);
    let took = until(&log, crash_bound + SLACK, |r| {
        r.len() == SHARDS && !r.values().any(|id| id == "d")
    });
    let after = running(&log);
    let had = held_by(&before, "d");
    assert_eq!(moved(&before, &after), had, "only d's shards moved");
    eprintln!(
        "crash: {} shards moved in {took:?} (bound {crash_bound:?} + process slack)",
        had.len()
    );

    // e joins: it takes its share; nothing else moves; nothing ever runs twice.
    members.insert("e", member("e"));
    until(&log, crash_bound + SLACK, |r| {
        r.len() == SHARDS && loads(r).get("e") == Some(&4) && loads(r).values().all(|&l| l == 4)
    });
    let joined = running(&log);
    assert_eq!(moved(&after, &joined).len(), 4, "only e's share moved");
    // Tokens rise per shard.
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for st in starts(&log) {
        if let Some(prev) = last.insert(st.key.clone(), st.token) {
            assert!(
                st.token > prev,
                "shard {} token {} after {}",
                st.key,
                st.token,
                prev
            );
        }
    }
    for m in members.values() {
        m.signal(libc::SIGTERM);
    }
}

#[test]
fn slots_run_at_most_n_copies_one_per_process() {
    let s = Scratch::new("slots");
    let child = checking_child(&s, "slot");
    let log = s.path("starts.log");
    let members: Vec<Running> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|id| member(&s, id, &child, &["--slots", "3"]))
        .collect();
    until(&log, bounds().crash_failover + SLACK, |r| r.len() == 3);
    std::thread::sleep(Duration::from_secs(4));
    let r = running(&log);
    assert_eq!(r.len(), 3, "three copies: {r:?}");
    assert!(
        loads(&r).values().all(|&l| l == 1),
        "one per process: {r:?}"
    );
    // Kill one holder: the spare process takes its slot.
    let victim = r.values().next().unwrap().clone();
    let idx = ["a", "b", "c", "d"]
        .iter()
        .position(|id| *id == victim)
        .unwrap();
    members[idx].signal(libc::SIGKILL);
    until(&log, bounds().crash_failover * 2 + SLACK, |r| {
        r.len() == 3 && !r.values().any(|id| *id == victim)
    });
    for m in &members {
        m.signal(libc::SIGTERM);
    }
}

#[test]
fn wait_gives_up_with_exit_4_when_another_leads() {
    let mut e = Election::new("wait");
    let _a = e.leader("a", &[], bounds().crash_failover + SLACK);
    for wait in ["0", "1s"] {
        let began = Instant::now();
        let out = run_to_end(&mut run_cmd(&e.s, "b", &["--wait", wait], &e.child));
        assert_eq!(out.status.code(), Some(4), "--wait {wait}");
        assert!(began.elapsed() < Duration::from_secs(10));
    }
    assert_eq!(e.starts().len(), 1, "b never ran CMD");
}

#[test]
fn release_to_hands_leadership_to_the_named_candidate() {
    let mut e = Election::new("release-to");
    let _a = e.leader("a", &[], bounds().crash_failover + SLACK);
    let _b = e.candidate("b", &[]);
    let _c = e.candidate("c", &[]);
    std::thread::sleep(Duration::from_secs(1));
    // No store shows a waiting candidate (c only reads), so --to needs
    // --force (tests/conventions.rs: refused without it).
    succeeds(tenure().args([
        "release", "--group", "g", "--to", "c", "--force", "--store", &e.store,
    ]));
    let next = e
        .started(1, Duration::from_secs(2) + SLACK)
        .expect("a second CMD started");
    assert_eq!(next.id, "c");
    assert_eq!(next.token, 2);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(e.starts().len(), 2, "b never took it");
}

#[test]
fn a_higher_priority_candidate_takes_over_after_its_delay_and_keeps_leading() {
    let mut e = Election::new("priority");
    let _a = e.leader("a", &[], bounds().crash_failover + SLACK);
    let _low = e.candidate("c", &["--priority", "0"]);
    let began = Instant::now();
    let _b = e.candidate("b", &["--priority", "5", "--preempt-after", "2s"]);
    let next = e
        .started(1, Duration::from_secs(2) + bounds().crash_failover + SLACK)
        .expect("the higher-priority candidate's CMD started");
    assert_eq!(next.id, "b");
    assert_eq!(next.token, 2);
    assert!(
        began.elapsed() >= Duration::from_secs(2),
        "before its delay"
    );
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(e.starts().len(), 2, "leadership moved again");
}

#[test]
fn a_changed_metadata_file_is_published_while_leading() {
    let s = Scratch::new("metadata-file");
    let child = recording_child(&s);
    let md = s.path("endpoint.env");
    std::fs::write(&md, "address=10.0.0.1:80\n# a comment\n").unwrap();
    let _a = Running::spawn(&mut run_cmd(
        &s,
        "a",
        &["--metadata-file", md.to_str().unwrap()],
        &child,
    ));
    let address = || {
        let out =
            run_to_end(tenure().args(["status", "--group", "g", "--json", "--store", &s.store()]));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v["leader"]["metadata"]["address"]
            .as_str()
            .map(str::to_owned)
    };
    let first = wait_for(bounds().crash_failover + SLACK, &address).expect("published");
    assert_eq!(first, "10.0.0.1:80");
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(&md, "address=10.0.0.2:80\n").unwrap();
    let moved = wait_for(SLACK, || address().filter(|a| a == "10.0.0.2:80"));
    assert!(moved.is_some(), "the new address was not published");
}
