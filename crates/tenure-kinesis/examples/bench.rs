//! Figures for [`KinesisConsumer`](tenure_kinesis::KinesisConsumer) on
//! real emulators (kinesalite for the stream, dynalite for the leases and
//! the checkpoints), with real `examples/consumer` processes:
//!
//! * records per second per consumer, reading a stream filled beforehand;
//! * the hand-over gap after a SIGKILL, a SIGSTOP past the term and a
//!   SIGTERM of a shard's holder (until another process handles that
//!   shard), the catch-up time (until every record written to the shard
//!   before the signal is handled) and the duplicates per hand-over
//!   (records both processes handled);
//! * the time from a `SplitShard` to each child's first record handled,
//!   and from a `MergeShards` to the merged child's.
//!
//! ```text
//! cargo build --release -p tenure-kinesis --examples
//! target/release/examples/bench [--consumers N] [--rounds N] [--term-ms MS]
//!     [--records N] [--handler-ms MS] [--batch N]
//! ```
//!
//! The emulators' addresses come from `TENURE_TEST_KINESIS` and
//! `TENURE_TEST_DYNAMODB` (`scripts/servers.sh start` writes both). It
//! prints a table; it asserts nothing about time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, StreamStatus};
use aws_sdk_kinesis::Client;
use tenure_kinesis::KinesisShards;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What the bench is told on its command line.
struct Settings {
    consumers: usize,
    rounds: usize,
    term_ms: u64,
    records: usize,
    handler_ms: u64,
    batch: u32,
}

fn settings() -> Result<Settings, Error> {
    let mut s = Settings {
        consumers: 3,
        rounds: 5,
        term_ms: 1000,
        records: 20_000,
        handler_ms: 50,
        batch: 100,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value"))
                .and_then(|v| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}")))
        };
        match flag.as_str() {
            "--consumers" => s.consumers = usize::try_from(value()?)?.max(2),
            "--rounds" => s.rounds = usize::try_from(value()?)?.max(1),
            "--term-ms" => s.term_ms = value()?.max(100),
            "--records" => s.records = usize::try_from(value()?)?.max(1),
            "--handler-ms" => s.handler_ms = value()?,
            "--batch" => s.batch = u32::try_from(value()?)?.clamp(1, 10_000),
            other => {
                return Err(format!(
                    "unknown flag {other}; flags: --consumers N --rounds N --term-ms MS \
                     --records N --handler-ms MS --batch N"
                )
                .into())
            }
        }
    }
    Ok(s)
}

/// `examples/consumer`, built beside this binary.
fn consumer_bin() -> Result<PathBuf, Error> {
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .ok_or("the bench's own path has no directory")?
        .join("consumer");
    if !bin.exists() {
        return Err(format!(
            "{} missing: build both examples with `cargo build --release -p tenure-kinesis \
             --examples`",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

/// A line a consumer printed for a record: `REC MEMBER SHARD TOKEN SEQ N`.
#[derive(Clone)]
struct Handled {
    at: Duration,
    member: String,
    shard: String,
    n: u64,
}

/// The consumers of one stream, and every record line they printed.
struct Fleet {
    bin: PathBuf,
    kinesis_url: String,
    leases_url: String,
    cp_table: String,
    term_ms: String,
    handler_ms: String,
    batch: String,
    t0: Instant,
    handled: Arc<Mutex<Vec<Handled>>>,
    stale: Arc<Mutex<Vec<String>>>,
    procs: Vec<(String, Child)>,
    spawned: usize,
}

impl Fleet {
    fn spawn(&mut self) -> Result<(), Error> {
        self.spawned += 1;
        let name = format!("c{}", self.spawned);
        let mut child = Command::new(&self.bin)
            .args([
                &self.kinesis_url,
                &self.leases_url,
                &self.cp_table,
                &name,
                &self.term_ms,
            ])
            .env("CONSUMER_HANDLER_DELAY_MS", &self.handler_ms)
            .env("CONSUMER_BATCH", &self.batch)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let (handled, stale, t0) = (self.handled.clone(), self.stale.clone(), self.t0);
        tokio::spawn(async move {
            let mut out = BufReader::new(out).lines();
            while let Ok(Some(line)) = out.next_line().await {
                let at = t0.elapsed();
                if let Some(rest) = line.strip_prefix("REC ") {
                    let f: Vec<&str> = rest.split(' ').collect();
                    if let [member, shard, _token, _seq, n] = f.as_slice() {
                        if let Ok(n) = n.parse() {
                            handled.lock().unwrap().push(Handled {
                                at,
                                member: (*member).to_owned(),
                                shard: (*shard).to_owned(),
                                n,
                            });
                        }
                    }
                } else if line.starts_with("STALE ") {
                    stale.lock().unwrap().push(line);
                }
            }
        });
        self.procs.push((name, child));
        Ok(())
    }

    fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    /// The process that handled a record of `shard` last, if it runs.
    fn holder_of(&self, shard: &str) -> Option<usize> {
        let handled = self.handled.lock().unwrap();
        let member = handled
            .iter()
            .rev()
            .find(|h| h.shard == shard)?
            .member
            .clone();
        self.procs.iter().position(|(name, _)| *name == member)
    }

    async fn stop_all(&mut self) {
        for (_, child) in &self.procs {
            if let Some(pid) = child.id() {
                signal(pid, "-TERM");
            }
        }
        for (_, mut child) in self.procs.drain(..) {
            if tokio::time::timeout(Duration::from_secs(20), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
        // Let the readers take the last lines.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status();
}

async fn wait_active(client: &Client, stream: &str) -> Result<(), Error> {
    let start = Instant::now();
    loop {
        let d = client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await?;
        if d.stream_description_summary().map(|s| s.stream_status()) == Some(&StreamStatus::Active)
        {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err(format!("stream {stream} never became ACTIVE").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Hash keys spread evenly over the key space, so every shard, and every
/// child of a split or a merge, gets records.
fn spread_keys(count: u32) -> Vec<String> {
    (0..count)
        .map(|i| ((u128::MAX / u128::from(count)) * u128::from(i) + (1 << 64)).to_string())
        .collect()
}

/// A stream of `shards` shards, its consumers' tables, and the fleet.
async fn setup(
    s: &Settings,
    bin: &Path,
    kinesis: &str,
    dynamo: &str,
    label: &str,
    shards: i32,
) -> Result<(Client, String, Fleet), Error> {
    let pid = std::process::id();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let stream = format!("bench-{label}-{stamp:x}-{pid:x}");
    let kinesis_url = format!(
        "kinesis://{stream}?endpoint={kinesis}&region=us-east-1\
         &access_key_id=local&secret_access_key=local"
    );
    let leases_url = format!(
        "dynamodb://tenure_bench_leases_{label}_{stamp:x}?endpoint={dynamo}&region=local\
         &access_key_id=local&secret_access_key=local&create=true"
    );
    let source = KinesisShards::connect(&kinesis_url).await?;
    let client = source.client().clone();
    client
        .create_stream()
        .stream_name(&stream)
        .shard_count(shards)
        .send()
        .await?;
    wait_active(&client, &stream).await?;
    let fleet = Fleet {
        bin: bin.to_path_buf(),
        kinesis_url,
        leases_url,
        cp_table: format!("tenure_bench_cp_{label}_{stamp:x}"),
        term_ms: s.term_ms.to_string(),
        handler_ms: s.handler_ms.to_string(),
        batch: s.batch.to_string(),
        t0: Instant::now(),
        handled: Arc::default(),
        stale: Arc::default(),
        procs: Vec::new(),
        spawned: 0,
    };
    Ok((client, stream, fleet))
}

/// Writes numbered records, round robin over `keys`, until told to stop;
/// remembers each one's shard and when it was written.
struct Producer {
    written: Arc<Mutex<Vec<(u64, String, Duration)>>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

fn produce(client: Client, stream: String, keys: Vec<String>, t0: Instant) -> Producer {
    let written: Arc<Mutex<Vec<(u64, String, Duration)>>> = Arc::default();
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let log = written.clone();
    let task = tokio::spawn(async move {
        let mut n: u64 = 0;
        while !*stopped.borrow() {
            let key = &keys[usize::try_from(n).unwrap_or(0) % keys.len()];
            let put = client
                .put_record()
                .stream_name(&stream)
                .partition_key("k")
                .explicit_hash_key(key)
                .data(Blob::new(n.to_string()))
                .send()
                .await;
            if let Ok(out) = put {
                log.lock()
                    .unwrap()
                    .push((n, out.shard_id().to_owned(), t0.elapsed()));
                n += 1;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                _ = stopped.changed() => {}
            }
        }
    });
    Producer {
        written,
        stop,
        task,
    }
}

impl Producer {
    async fn finish(self) -> Vec<(u64, String, Duration)> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let written = self.written.lock().unwrap().clone();
        written
    }
}

fn percentile(values: &mut [f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    // Nearest rank.
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2} s"))
}

/// Records per second per consumer, reading `s.records` written before
/// the consumers start.
async fn throughput(
    s: &Settings,
    bin: &Path,
    kinesis: &str,
    dynamo: &str,
) -> Result<(usize, Duration, BTreeMap<String, usize>), Error> {
    let shards = i32::try_from(s.consumers * 2)?;
    let (client, stream, mut fleet) = setup(s, bin, kinesis, dynamo, "rate", shards).await?;
    let keys = spread_keys(64);
    eprintln!("throughput: writing {} records…", s.records);
    for chunk in (0..s.records).collect::<Vec<_>>().chunks(500) {
        let entries = chunk
            .iter()
            .map(|n| {
                PutRecordsRequestEntry::builder()
                    .data(Blob::new(n.to_string()))
                    .partition_key("k")
                    .explicit_hash_key(&keys[n % keys.len()])
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = client
            .put_records()
            .stream_name(&stream)
            .set_records(Some(entries))
            .send()
            .await?;
        if out.failed_record_count().unwrap_or(0) > 0 {
            return Err("PutRecords refused some records; run again".into());
        }
    }
    eprintln!("throughput: {} consumers reading…", s.consumers);
    let start = fleet.now();
    for _ in 0..s.consumers {
        fleet.spawn()?;
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    let done = loop {
        let distinct: BTreeSet<u64> = fleet.handled.lock().unwrap().iter().map(|h| h.n).collect();
        if distinct.len() >= s.records {
            break fleet.now();
        }
        if Instant::now() > deadline {
            return Err(format!(
                "throughput: only {} of {} records handled in 300 s",
                distinct.len(),
                s.records
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    fleet.stop_all().await;
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for h in fleet.handled.lock().unwrap().iter() {
        *per.entry(h.member.clone()).or_default() += 1;
    }
    let _ = client.delete_stream().stream_name(&stream).send().await;
    Ok((s.records, done.saturating_sub(start), per))
}

/// One hand-over's figures.
struct HandOver {
    gap: Option<f64>,
    catch_up: Option<f64>,
    duplicates: usize,
}

/// Signals a shard's holder `s.rounds` times per kind, the producer
/// writing throughout.
async fn hand_overs(
    s: &Settings,
    bin: &Path,
    kinesis: &str,
    dynamo: &str,
) -> Result<(BTreeMap<&'static str, Vec<HandOver>>, Vec<String>), Error> {
    let shards = i32::try_from(s.consumers)?;
    let (client, stream, mut fleet) = setup(s, bin, kinesis, dynamo, "handover", shards).await?;
    for _ in 0..s.consumers {
        fleet.spawn()?;
    }
    let producer = produce(client.clone(), stream.clone(), spread_keys(16), fleet.t0);
    let term = Duration::from_millis(s.term_ms);
    let settle = term * 3;
    tokio::time::sleep(settle).await;
    let mut figures: BTreeMap<&'static str, Vec<HandOver>> = BTreeMap::new();
    let shard_ids: Vec<String> = (0..shards).map(|n| format!("shardId-{n:012}")).collect();
    for round in 0..s.rounds {
        for kind in ["SIGKILL", "SIGSTOP", "SIGTERM"] {
            let shard = &shard_ids[round % shard_ids.len()];
            let Some(index) = fleet.holder_of(shard) else {
                eprintln!("hand-over: nobody holds {shard} now; round skipped");
                continue;
            };
            let (victim, child) = &fleet.procs[index];
            let victim = victim.clone();
            let pid = child.id().ok_or("a consumer ended early")?;
            eprintln!("hand-over {}/{}: {kind} {victim}…", round + 1, s.rounds);
            let at = fleet.now();
            signal(pid, &format!("-{}", kind.trim_start_matches("SIG")));
            // Long enough for the term to run out and another to read.
            tokio::time::sleep(term * 4).await;
            let written = producer.written.lock().unwrap().clone();
            let handled = fleet.handled.lock().unwrap().clone();
            // Every shard the victim handled in the second before.
            let held: BTreeSet<String> = handled
                .iter()
                .filter(|h| {
                    h.member == victim
                        && h.at <= at
                        && at.saturating_sub(h.at) < Duration::from_secs(1)
                })
                .map(|h| h.shard.clone())
                .collect();
            for shard in held {
                // Everything the victim handled of the shard, before the
                // signal or while it drained.
                let victims: BTreeSet<u64> = handled
                    .iter()
                    .filter(|h| h.member == victim && h.shard == shard)
                    .map(|h| h.n)
                    .collect();
                let after: Vec<&Handled> = handled
                    .iter()
                    .filter(|h| h.member != victim && h.shard == shard && h.at > at)
                    .collect();
                let gap = after.first().map(|h| h.at.saturating_sub(at).as_secs_f64());
                // What the others owe: written before the signal, handled
                // by nobody before it, nor by the victim ever.
                let done: BTreeSet<u64> = handled
                    .iter()
                    .filter(|h| h.shard == shard && h.at <= at)
                    .map(|h| h.n)
                    .chain(victims.iter().copied())
                    .collect();
                let owed: Vec<u64> = written
                    .iter()
                    .filter(|(n, sh, t)| *sh == shard && *t <= at && !done.contains(n))
                    .map(|(n, ..)| *n)
                    .collect();
                let catch_up = if owed.is_empty() {
                    gap
                } else {
                    owed.iter()
                        .map(|n| {
                            after
                                .iter()
                                .find(|h| h.n == *n)
                                .map(|h| h.at.saturating_sub(at))
                        })
                        .try_fold(Duration::ZERO, |max, t| t.map(|t| max.max(t)))
                        .map(|t| t.as_secs_f64())
                };
                let duplicates = after.iter().filter(|h| victims.contains(&h.n)).count();
                figures.entry(kind).or_default().push(HandOver {
                    gap,
                    catch_up,
                    duplicates,
                });
            }
            match kind {
                "SIGSTOP" => {
                    // Woken past its term: it finds its leases gone.
                    signal(pid, "-CONT");
                }
                _ => {
                    let (_, mut child) = fleet.procs.remove(index);
                    let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
                    fleet.spawn()?;
                }
            }
            tokio::time::sleep(settle).await;
        }
    }
    producer.finish().await;
    fleet.stop_all().await;
    let stale = fleet.stale.lock().unwrap().clone();
    let _ = client.delete_stream().stream_name(&stream).send().await;
    Ok((figures, stale))
}

/// The open shards of the stream, with their hash key ranges.
async fn open_shards(client: &Client, stream: &str) -> Result<Vec<(String, u128, u128)>, Error> {
    let out = client.list_shards().stream_name(stream).send().await?;
    let mut open = Vec::new();
    for shard in out.shards() {
        let closed = shard
            .sequence_number_range()
            .and_then(|r| r.ending_sequence_number())
            .is_some();
        let range = shard.hash_key_range();
        if let (false, Some(range)) = (closed, range) {
            open.push((
                shard.shard_id().to_owned(),
                range.starting_hash_key().parse()?,
                range.ending_hash_key().parse()?,
            ));
        }
    }
    Ok(open)
}

/// Waits (up to a minute) until every one of `shards` had a record
/// handled after `at`.
async fn wait_read(handled: &Mutex<Vec<Handled>>, shards: &[String], at: Duration) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let seen: BTreeSet<String> = handled
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.at >= at)
            .map(|h| h.shard.clone())
            .collect();
        if shards.iter().all(|c| seen.contains(c)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Splits the first open shard and then merges its two children, `rounds`
/// times; returns the seconds from each split to each child's first
/// record handled, and from each merge to the merged child's.
async fn reshards(
    s: &Settings,
    bin: &Path,
    kinesis: &str,
    dynamo: &str,
) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let (client, stream, mut fleet) = setup(s, bin, kinesis, dynamo, "reshard", 2).await?;
    for _ in 0..s.consumers {
        fleet.spawn()?;
    }
    let producer = produce(client.clone(), stream.clone(), spread_keys(32), fleet.t0);
    let settle = Duration::from_millis(s.term_ms) * 3;
    tokio::time::sleep(settle).await;
    let first_read = |fleet: &Fleet, shard: &str, after: Duration| -> Option<Duration> {
        fleet
            .handled
            .lock()
            .unwrap()
            .iter()
            .find(|h| h.shard == shard && h.at >= after)
            .map(|h| h.at.saturating_sub(after))
    };
    let (mut split_times, mut merge_times) = (Vec::new(), Vec::new());
    for round in 0..s.rounds {
        let before: BTreeSet<String> = open_shards(&client, &stream)
            .await?
            .into_iter()
            .map(|s| s.0)
            .collect();
        let (parent, low, high) = open_shards(&client, &stream)
            .await?
            .into_iter()
            .next()
            .ok_or("no open shard")?;
        eprintln!("reshard {}/{}: SplitShard {parent}…", round + 1, s.rounds);
        let at = fleet.now();
        client
            .split_shard()
            .stream_name(&stream)
            .shard_to_split(&parent)
            .new_starting_hash_key((low / 2 + high / 2).to_string())
            .send()
            .await?;
        wait_active(&client, &stream).await?;
        let children: Vec<String> = open_shards(&client, &stream)
            .await?
            .into_iter()
            .map(|s| s.0)
            .filter(|s| !before.contains(s))
            .collect();
        wait_read(&fleet.handled, &children, at).await;
        for child in &children {
            if let Some(t) = first_read(&fleet, child, at) {
                split_times.push(t.as_secs_f64());
            }
        }
        tokio::time::sleep(settle).await;
        let [a, b] = children.as_slice() else {
            return Err(format!("a split made {} children", children.len()).into());
        };
        eprintln!("reshard {}/{}: MergeShards {a} {b}…", round + 1, s.rounds);
        let before: BTreeSet<String> = open_shards(&client, &stream)
            .await?
            .into_iter()
            .map(|s| s.0)
            .collect();
        let at = fleet.now();
        client
            .merge_shards()
            .stream_name(&stream)
            .shard_to_merge(a)
            .adjacent_shard_to_merge(b)
            .send()
            .await?;
        wait_active(&client, &stream).await?;
        let merged: Vec<String> = open_shards(&client, &stream)
            .await?
            .into_iter()
            .map(|s| s.0)
            .filter(|s| !before.contains(s))
            .collect();
        wait_read(&fleet.handled, &merged, at).await;
        for child in &merged {
            if let Some(t) = first_read(&fleet, child, at) {
                merge_times.push(t.as_secs_f64());
            }
        }
        tokio::time::sleep(settle).await;
    }
    producer.finish().await;
    fleet.stop_all().await;
    let _ = client.delete_stream().stream_name(&stream).send().await;
    Ok((split_times, merge_times))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let s = settings()?;
    let bin = consumer_bin()?;
    let kinesis = std::env::var("TENURE_TEST_KINESIS")
        .map_err(|_| "TENURE_TEST_KINESIS is not set (scripts/servers.sh start, then source /tmp/tenure-servers/env)")?;
    let dynamo = std::env::var("TENURE_TEST_DYNAMODB")
        .map_err(|_| "TENURE_TEST_DYNAMODB is not set (scripts/servers.sh start, then source /tmp/tenure-servers/env)")?;

    let (records, took, per) = throughput(&s, &bin, &kinesis, &dynamo).await?;
    let (handovers, stale) = hand_overs(&s, &bin, &kinesis, &dynamo).await?;
    let (mut splits, mut merges) = reshards(&s, &bin, &kinesis, &dynamo).await?;

    println!(
        "consumers {}, term {} ms, handler {} ms per page, batch {}, rounds {}",
        s.consumers, s.term_ms, s.handler_ms, s.batch, s.rounds
    );
    println!();
    let rate = records as f64 / took.as_secs_f64();
    println!(
        "throughput: {records} records in {:.2} s = {rate:.0} records/s, {:.0} per consumer; \
         handled per consumer {per:?}",
        took.as_secs_f64(),
        rate / s.consumers as f64
    );
    println!();
    println!(
        "{:<9} {:>10} {:>9} {:>9} {:>13} {:>13} {:>16}",
        "kind",
        "hand-overs",
        "gap p50",
        "gap max",
        "catch-up p50",
        "catch-up max",
        "duplicates mean"
    );
    for (kind, list) in &handovers {
        let mut gaps: Vec<f64> = list.iter().filter_map(|h| h.gap).collect();
        let mut catch: Vec<f64> = list.iter().filter_map(|h| h.catch_up).collect();
        let dups = list.iter().map(|h| h.duplicates).sum::<usize>() as f64 / list.len() as f64;
        let missing = list.iter().filter(|h| h.gap.is_none()).count();
        println!(
            "{kind:<9} {:>10} {:>9} {:>9} {:>13} {:>13} {dups:>16.1}{}",
            list.len(),
            secs(percentile(&mut gaps, 0.5)),
            secs(gaps.last().copied()),
            secs(percentile(&mut catch, 0.5)),
            secs(catch.last().copied()),
            if missing > 0 {
                format!("  ({missing} not handed over within 4 terms)")
            } else {
                String::new()
            }
        );
    }
    // Each process prints its count when it leaves (SIGTERM); a killed
    // one prints none.
    let refusals: u64 = stale
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    println!(
        "stale checkpoint refusals: {refusals} (counted by the {} processes that left by SIGTERM)",
        stale.len()
    );
    println!();
    println!("{:<34} {:>6} {:>9} {:>9}", "reshard", "reads", "p50", "max");
    let split_n = splits.len();
    let merge_n = merges.len();
    println!(
        "{:<34} {split_n:>6} {:>9} {:>9}",
        "SplitShard -> a child's first read",
        secs(percentile(&mut splits, 0.5)),
        secs(splits.last().copied())
    );
    println!(
        "{:<34} {merge_n:>6} {:>9} {:>9}",
        "MergeShards -> the child's first",
        secs(percentile(&mut merges, 0.5)),
        secs(merges.last().copied())
    );
    Ok(())
}
