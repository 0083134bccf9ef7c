//! Real processes: three `examples/consumer` processes (leases and
//! checkpoints in dynalite, the stream in kinesalite) read a stream of two
//! shards while this test writes numbered records to every shard, splits
//! a shard, merges the split's children, and SIGKILLs, SIGSTOPs past the
//! term and SIGTERMs consumers in turns (each replaced by a new process).
//!
//! Checked: every record handled at least once; within a shard and a
//! term, in order; no child record before its parents' checkpoints say
//! finished (each process checks, printing `EARLY`); the checkpoint table
//! never moves back (polled throughout). The duplicates and the stale
//! checkpoint refusals (from the process stopped past its term) are
//! printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure_dynamodb::{DynamoDbOptions, DynamoDbStore};
use tenure_kinesis::checkpoint::compare_sequences;
use tenure_kinesis::{Checkpoints, KinesisShards};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

mod common;
use common::wait_active;

const RECORDS: u64 = 420;
const TERM_MS: &str = "1000";

fn id(n: u32) -> String {
    format!("shardId-{n:012}")
}

/// `examples/consumer`, built by cargo beside this test's binary.
fn consumer_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let debug = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let bin = debug.join("examples").join("consumer");
    let built = |p: &std::path::Path| p.metadata().and_then(|m| m.modified()).ok();
    let example = built(&bin).unwrap_or_else(|| {
        panic!(
            "{} missing: cargo builds the examples with the tests unless a --test filter is \
             given (run `cargo nextest run -p tenure-kinesis`, or build it with --example consumer)",
            bin.display()
        )
    });
    // An example older than this crate's sources is stale (a --test
    // filter skips building examples).
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = std::fs::read_dir(crate_dir.join("src"))
        .expect("src")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .chain([crate_dir.join("examples").join("consumer.rs")]);
    for source in sources {
        let changed = built(&source).expect("a source file's time");
        assert!(
            example >= changed,
            "{} is older than {}: build it again (cargo nextest run -p tenure-kinesis without \
             --test, or cargo build -p tenure-kinesis --example consumer)",
            bin.display(),
            source.display()
        );
    }
    bin
}

struct Proc {
    name: String,
    child: Child,
}

fn signal(p: &Proc, sig: &str) {
    let pid = p.child.id().expect("running").to_string();
    let ok = std::process::Command::new("kill")
        .args([sig, &pid])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {sig} {}", p.name);
}

/// The index in `procs` of the process that handled a record last (a
/// shard's holder, so that a signal hits one), else 0.
fn holder(procs: &[Proc], lines: &Mutex<Vec<String>>) -> usize {
    let lines = lines.lock().unwrap();
    lines
        .iter()
        .rev()
        .filter_map(|l| l.strip_prefix("REC ")?.split(' ').next())
        .find_map(|member| procs.iter().position(|p| p.name == member))
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_processes_killed_stopped_and_terminated_in_turns_across_a_split_and_a_merge() {
    let kinesis = tenure_testkit::server_url("TENURE_TEST_KINESIS");
    let dynamo = tenure_testkit::server_url("TENURE_TEST_DYNAMODB");
    let (Some(kinesis), Some(dynamo)) = (kinesis, dynamo) else {
        return;
    };
    let bin = consumer_bin();
    let suffix = tenure_testkit::unique_suffix();
    let stream = format!("chaos-{suffix:x}");
    let kinesis_url = format!(
        "kinesis://{stream}?endpoint={kinesis}&region=us-east-1\
         &access_key_id=local&secret_access_key=local"
    );
    let lease_table = format!("tenure_chaos_leases_{suffix:x}");
    let leases_url = format!(
        "dynamodb://{lease_table}?endpoint={dynamo}&region=local\
         &access_key_id=local&secret_access_key=local&create=true"
    );
    let cp_table = format!("tenure_chaos_cp_{suffix:x}");
    let source = KinesisShards::connect(&kinesis_url).await.expect("kinesis");
    let client = source.client().clone();
    client
        .create_stream()
        .stream_name(&stream)
        .shard_count(2)
        .send()
        .await
        .expect("create stream");
    wait_active(&client, &stream).await;
    let store = DynamoDbStore::connect_with(
        DynamoDbOptions::new(&lease_table)
            .unwrap()
            .region("local")
            .endpoint(&dynamo)
            .static_credentials("local", "local")
            .create_if_missing(true),
    )
    .await
    .expect("dynalite");
    let table = Checkpoints::new(store.client().clone(), &cp_table);
    table.create_table_if_missing().await.unwrap();

    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    // The same lines with when they arrived, for the hand-over figures.
    let t0 = Instant::now();
    let timed: Arc<Mutex<Vec<(Duration, String)>>> = Arc::default();
    let spawn = |name: &str| {
        let mut child = Command::new(&bin)
            .args([&kinesis_url, &leases_url, &cp_table, name, TERM_MS])
            .env("CONSUMER_HANDLER_DELAY_MS", "150")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn consumer");
        let out = child.stdout.take().expect("stdout");
        let (lines, timed) = (lines.clone(), timed.clone());
        tokio::spawn(async move {
            let mut out = BufReader::new(out).lines();
            while let Ok(Some(line)) = out.next_line().await {
                timed.lock().unwrap().push((t0.elapsed(), line.clone()));
                lines.lock().unwrap().push(line);
            }
        });
        Proc {
            name: name.to_owned(),
            child,
        }
    };

    // The table watcher: no checkpoint ever moves back.
    let watching = Arc::new(AtomicBool::new(true));
    let moved_back: Arc<Mutex<Vec<String>>> = Arc::default();
    let watcher = {
        let (t, watching, moved_back) = (table.clone(), watching.clone(), moved_back.clone());
        tokio::spawn(async move {
            let mut seen: BTreeMap<String, (u64, String)> = BTreeMap::new();
            while watching.load(Ordering::Relaxed) {
                for n in 0..5 {
                    let Ok(Some(cp)) = t.load(&id(n)).await else {
                        continue;
                    };
                    let seq = cp.sequence.clone().unwrap_or_default();
                    if let Some((token, before)) = seen.get(&cp.shard) {
                        if cp.token < *token || compare_sequences(&seq, before).is_lt() {
                            moved_back.lock().unwrap().push(format!(
                                "{}: ({token}, {before}) then ({}, {seq})",
                                cp.shard, cp.token
                            ));
                        }
                    }
                    seen.insert(cp.shard, (cp.token, seq));
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        })
    };

    let mut procs: Vec<Proc> = ["c1", "c2", "c3"].into_iter().map(spawn).collect();
    let keys = [
        "1".to_owned(),
        ((1u128 << 126) + 1).to_string(),
        ((1u128 << 127) + 1).to_string(),
    ];
    let mut stopped: Option<Proc> = None;
    let mut ended: Vec<Proc> = Vec::new();
    let mut events = Vec::new();
    // (when, signal, process) of each SIGKILL, SIGSTOP and SIGTERM.
    let mut hits: Vec<(Duration, &str, String)> = Vec::new();
    let started = Instant::now();
    for n in 0..RECORDS {
        common::put_numbered(&client, &stream, &keys[usize::try_from(n % 3).unwrap()], n).await;
        let at = started.elapsed();
        match n {
            60 => {
                let p = procs.remove(holder(&procs, &lines));
                signal(&p, "-KILL");
                events.push(format!("{at:?} SIGKILL {}", p.name));
                hits.push((t0.elapsed(), "SIGKILL", p.name.clone()));
                ended.push(p);
                procs.push(spawn("c4"));
            }
            120 => {
                client
                    .split_shard()
                    .stream_name(&stream)
                    .shard_to_split(id(0))
                    .new_starting_hash_key((1u128 << 126).to_string())
                    .send()
                    .await
                    .expect("split");
                wait_active(&client, &stream).await;
                events.push(format!("{at:?} SplitShard {}", id(0)));
            }
            170 => {
                let p = procs.remove(holder(&procs, &lines));
                signal(&p, "-STOP");
                events.push(format!("{at:?} SIGSTOP {}", p.name));
                hits.push((t0.elapsed(), "SIGSTOP", p.name.clone()));
                stopped = Some(p);
            }
            300 => {
                let p = stopped.take().expect("stopped");
                signal(&p, "-CONT");
                events.push(format!("{at:?} SIGCONT {}", p.name));
                procs.push(p);
            }
            320 => {
                let p = procs.remove(holder(&procs, &lines));
                signal(&p, "-TERM");
                events.push(format!("{at:?} SIGTERM {}", p.name));
                hits.push((t0.elapsed(), "SIGTERM", p.name.clone()));
                ended.push(p);
                procs.push(spawn("c5"));
            }
            360 => {
                client
                    .merge_shards()
                    .stream_name(&stream)
                    .shard_to_merge(id(2))
                    .adjacent_shard_to_merge(id(3))
                    .send()
                    .await
                    .expect("merge");
                wait_active(&client, &stream).await;
                events.push(format!("{at:?} MergeShards {} {}", id(2), id(3)));
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let handled = |lines: &[String]| -> BTreeSet<u64> {
        lines
            .iter()
            .filter_map(|l| l.strip_prefix("REC "))
            .filter_map(|l| l.split(' ').nth(4)?.parse().ok())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = handled(&lines.lock().unwrap());
        if got.len() == usize::try_from(RECORDS).unwrap() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "records never handled: {:?}\nevents: {events:#?}",
            (0..RECORDS)
                .filter(|n| !got.contains(n))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let caught_up = started.elapsed();
    for p in &procs {
        signal(p, "-TERM");
    }
    for mut p in procs.into_iter().chain(ended) {
        let status = tokio::time::timeout(Duration::from_secs(20), p.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit after SIGTERM", p.name))
            .expect("wait");
        let killed = events
            .iter()
            .any(|e| e.ends_with(&format!("SIGKILL {}", p.name)));
        assert!(killed || status.success(), "{} exited {status}", p.name);
    }
    watching.store(false, Ordering::Relaxed);
    watcher.await.unwrap();
    // Let the readers take the last lines.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let lines = lines.lock().unwrap().clone();
    let early: Vec<&String> = lines.iter().filter(|l| l.starts_with("EARLY")).collect();
    assert!(
        early.is_empty(),
        "children read before their parents finished: {early:#?}"
    );
    let moved_back = moved_back.lock().unwrap().clone();
    assert!(
        moved_back.is_empty(),
        "checkpoints moved back: {moved_back:#?}"
    );

    // In order within a shard and a term of one process.
    let mut runs: BTreeMap<(String, String, String), Vec<(String, u64)>> = BTreeMap::new();
    for l in lines.iter().filter_map(|l| l.strip_prefix("REC ")) {
        let f: Vec<&str> = l.split(' ').collect();
        let [member, shard, token, seq, data] = f[..] else {
            panic!("bad line {l}")
        };
        runs.entry((member.into(), shard.into(), token.into()))
            .or_default()
            .push((seq.into(), data.parse().unwrap()));
    }
    for ((member, shard, token), recs) in &runs {
        for pair in recs.windows(2) {
            assert!(
                compare_sequences(&pair[0].0, &pair[1].0).is_lt() && pair[0].1 < pair[1].1,
                "{member} read {shard} (token {token}) out of order: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
    }
    let shards: BTreeSet<&str> = runs.keys().map(|(_, s, _)| s.as_str()).collect();
    assert_eq!(shards.len(), 5, "{shards:?}");
    for parent in [0, 2, 3] {
        let cp = table.load(&id(parent)).await.unwrap().expect("checkpoint");
        assert!(cp.finished, "{cp:?}");
    }
    let total = lines.iter().filter(|l| l.starts_with("REC ")).count();
    let stale: Vec<&String> = lines.iter().filter(|l| l.starts_with("STALE")).collect();
    println!(
        "records {RECORDS}, handled {total} ({} duplicates) in {caught_up:?}, terms {}; \
         stale refusals per process: {stale:?}\nevents: {events:#?}",
        total - usize::try_from(RECORDS).unwrap(),
        runs.len()
    );
    // Per signal: for each shard its victim handled in the second before,
    // the gap until another process handled it, and the records both did.
    let timed = timed.lock().unwrap().clone();
    let recs: Vec<(Duration, &str, &str, u64)> = timed
        .iter()
        .filter_map(|(t, l)| {
            let f: Vec<&str> = l.strip_prefix("REC ")?.split(' ').collect();
            Some((*t, *f.first()?, *f.get(1)?, f.get(4)?.parse().ok()?))
        })
        .collect();
    for (at, sig, victim) in &hits {
        let shards: BTreeSet<&str> = recs
            .iter()
            .filter(|(t, m, ..)| {
                m == victim && at.saturating_sub(*t) < Duration::from_secs(1) && *t <= *at
            })
            .map(|r| r.2)
            .collect();
        for shard in shards {
            let before: BTreeSet<u64> = recs
                .iter()
                .filter(|(t, m, s, _)| m == victim && *s == shard && *t <= *at)
                .map(|r| r.3)
                .collect();
            let after: Vec<&(Duration, &str, &str, u64)> = recs
                .iter()
                .filter(|(t, m, s, _)| m != victim && *s == shard && *t > *at)
                .collect();
            let gap = after.first().map(|r| r.0.saturating_sub(*at));
            let dups = after.iter().filter(|r| before.contains(&r.3)).count();
            println!(
                "{sig} {victim}: {shard} next handled by another process after {gap:?}, \
                 {dups} duplicates"
            );
        }
    }
    common::delete_stream(&client, &stream).await;
}
