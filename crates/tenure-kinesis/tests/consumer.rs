//! `KinesisConsumer` against kinesalite (`TENURE_TEST_KINESIS`) and
//! dynalite (`TENURE_TEST_DYNAMODB`), both from `scripts/servers.sh`: two
//! consumers sharing one lease store read a stream of two shards while a
//! producer writes numbered records to every shard, the first shard is
//! split, and one consumer is shut down mid-run and another started.
//!
//! Checked: every record is handled at least once; within a shard and a
//! term, in order; a child's first record only after its parent's
//! finished mark is in the lease store; the checkpoint table never moves
//! back (polled throughout); the parent ends finished. The stale
//! checkpoint refusals and duplicates are counted and printed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure::store::LeaseView;
use tenure::{GroupName, MemoryStore};
use tenure_kinesis::checkpoint::compare_sequences;
use tenure_kinesis::{Checkpoints, KinesisConsumer, Record};

mod common;
use common::wait_active;

const RECORDS: u64 = 240;
const SPLIT_AT: u64 = 80;
const STOP_A_AT: u64 = 150;
const START_C_AT: u64 = 190;
const SET: &str = "consumer-test";

fn id(n: u32) -> String {
    format!("shardId-{n:012}")
}

/// One page as a handler saw it.
#[derive(Clone, Debug)]
struct Page {
    consumer: &'static str,
    shard: String,
    token: u64,
    records: Vec<Record>,
}

/// The hash keys the producer cycles through: the lower quarter (shard 0,
/// after the split its first child), the second quarter (shard 0, then
/// its second child), the upper half (shard 1).
fn hash_keys() -> [String; 3] {
    [
        "1".to_owned(),
        ((1u128 << 126) + 1).to_string(),
        ((1u128 << 127) + 1).to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_consumers_read_every_record_in_order_across_a_split_and_a_shutdown() {
    let kinesis = tenure_testkit::server_url("TENURE_TEST_KINESIS");
    let dynamo = tenure_testkit::server_url("TENURE_TEST_DYNAMODB");
    let (Some(kinesis), Some(dynamo)) = (kinesis, dynamo) else {
        return;
    };
    let stream = format!("consume-{:x}", tenure_testkit::unique_suffix());
    let (source, client) = common::source(&kinesis, &stream).await;
    common::create_stream(&client, &stream, 2).await;

    let dynamo_store = common::dynalite(&dynamo).await;
    let table = format!("tenure_cp_consumer_{:x}", tenure_testkit::unique_suffix());
    let table_handle = Checkpoints::new(dynamo_store.client().clone(), &table);
    table_handle.create_table_if_missing().await.unwrap();

    let store = MemoryStore::new();
    let pages: Arc<Mutex<Vec<Page>>> = Arc::default();
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();

    let start_consumer = |name: &'static str| {
        let checkpoints = Checkpoints::new(dynamo_store.client().clone(), &table);
        let consumer = KinesisConsumer::builder(source.clone(), store.clone(), checkpoints)
            .set(SET)
            .member_id(name)
            .term(Duration::from_secs(1))
            .refresh(Duration::from_millis(300))
            .idle(Duration::from_millis(50))
            .batch(10)
            .start()
            .expect("start consumer");
        let (pages, violations, store) = (pages.clone(), violations.clone(), store.clone());
        let parents: BTreeMap<String, String> =
            [(id(2), id(0)), (id(3), id(0))].into_iter().collect();
        let runner = consumer.clone();
        let task = tokio::spawn(async move {
            runner
                .run(move |shard, records, term| {
                    let (pages, violations, store) =
                        (pages.clone(), violations.clone(), store.clone());
                    let parent = parents.get(&shard).cloned();
                    async move {
                        if let Some(parent) = parent {
                            let mark = GroupName::new(format!("{SET}/finished/{parent}")).unwrap();
                            if store.read(&mark).await.unwrap().is_none() {
                                violations.lock().unwrap().push(format!(
                                    "{name} handled child {shard} before {parent} was marked finished"
                                ));
                            }
                        }
                        pages.lock().unwrap().push(Page {
                            consumer: name,
                            shard,
                            token: term.token(),
                            records,
                        });
                        Ok::<(), std::io::Error>(())
                    }
                })
                .await
        });
        (consumer, task)
    };

    // The table watcher: no shard's checkpoint ever moves back.
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (t, watching, violations) = (
            Checkpoints::new(dynamo_store.client().clone(), &table),
            watching.clone(),
            violations.clone(),
        );
        tokio::spawn(async move {
            let mut seen: BTreeMap<String, (u64, String)> = BTreeMap::new();
            let mut reads = 0u64;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                for n in 0..4 {
                    let Some(cp) = t.load(&id(n)).await.unwrap() else {
                        continue;
                    };
                    reads += 1;
                    let seq = cp.sequence.clone().unwrap_or_default();
                    if let Some((token, before)) = seen.get(&cp.shard) {
                        if cp.token < *token || compare_sequences(&seq, before).is_lt() {
                            violations.lock().unwrap().push(format!(
                                "checkpoint of {} moved back: ({token}, {before}) then ({}, {seq})",
                                cp.shard, cp.token
                            ));
                        }
                    }
                    seen.insert(cp.shard, (cp.token, seq));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            reads
        })
    };

    let (a, a_task) = start_consumer("a");
    let mut a_task = Some(a_task);
    let (b, b_task) = start_consumer("b");
    let mut c = None;

    // The producer: numbered records, every shard in turn, explicit hash
    // keys; the split, the shutdown and the new consumer along the way.
    let keys = hash_keys();
    let mut stale_a = 0;
    for n in 0..RECORDS {
        common::put_numbered(&client, &stream, &keys[usize::try_from(n % 3).unwrap()], n).await;
        if n == SPLIT_AT {
            client
                .split_shard()
                .stream_name(&stream)
                .shard_to_split(id(0))
                .new_starting_hash_key((1u128 << 126).to_string())
                .send()
                .await
                .expect("split");
            wait_active(&client, &stream).await;
        }
        if n == STOP_A_AT {
            a.shutdown().await;
            let task = a_task.take().expect("a runs");
            task.await.unwrap().expect("a's run");
            stale_a = a.checkpoints().stale_refusals();
        }
        if n == START_C_AT {
            c = Some(start_consumer("c"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Every record handled, within a generous bound.
    let handled = |pages: &[Page]| -> BTreeSet<u64> {
        pages
            .iter()
            .flat_map(|p| &p.records)
            .map(|r| std::str::from_utf8(&r.data).unwrap().parse().unwrap())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = handled(&pages.lock().unwrap());
        if got.len() == usize::try_from(RECORDS).unwrap() {
            break;
        }
        // A consumer whose run ended early failed: show why.
        for (name, task) in [("b", Some(&b_task)), ("c", c.as_ref().map(|c| &c.1))] {
            assert!(
                !task.is_some_and(tokio::task::JoinHandle::is_finished),
                "consumer {name}'s run ended while records were still coming"
            );
        }
        assert!(
            Instant::now() < deadline,
            "records never handled: {:?}",
            (0..RECORDS)
                .filter(|n| !got.contains(n))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The parent was read to its end and finished.
    let parent = table_handle
        .load(&id(0))
        .await
        .unwrap()
        .expect("parent checkpoint");
    assert!(parent.finished, "{parent:?}");

    b.shutdown().await;
    b_task.await.unwrap().expect("b's run");
    let (c, c_task) = c.expect("c started");
    c.shutdown().await;
    c_task.await.unwrap().expect("c's run");
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let reads = watcher.await.unwrap();
    assert!(reads > 0, "the watcher read no checkpoint");

    let pages = pages.lock().unwrap().clone();
    let violations = violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:#?}");

    // In order within a shard and a term (sequence numbers and the
    // producer's numbers both rising), across a term's pages.
    let mut runs: BTreeMap<(String, u64, &str), Vec<&Record>> = BTreeMap::new();
    for p in &pages {
        runs.entry((p.shard.clone(), p.token, p.consumer))
            .or_default()
            .extend(&p.records);
    }
    for ((shard, token, consumer), records) in &runs {
        for pair in records.windows(2) {
            assert!(
                compare_sequences(&pair[0].sequence_number, &pair[1].sequence_number).is_lt(),
                "{consumer} read {shard} (token {token}) out of order: {} then {}",
                pair[0].sequence_number,
                pair[1].sequence_number
            );
            let (x, y): (u64, u64) = (
                std::str::from_utf8(&pair[0].data).unwrap().parse().unwrap(),
                std::str::from_utf8(&pair[1].data).unwrap().parse().unwrap(),
            );
            assert!(
                x < y,
                "{consumer} read {shard} out of order: record {x} then {y}"
            );
        }
    }
    // Every shard had records; the children were read.
    let shards: BTreeSet<&str> = pages.iter().map(|p| p.shard.as_str()).collect();
    assert_eq!(
        shards,
        BTreeSet::from([id(0), id(1), id(2), id(3)].each_ref().map(String::as_str)),
    );
    let total: usize = pages.iter().map(|p| p.records.len()).sum();
    let stale = stale_a + b.checkpoints().stale_refusals() + c.checkpoints().stale_refusals();
    println!(
        "records {RECORDS}, handled {total} ({} duplicates), terms {}, stale checkpoint refusals {stale} \
         (a, shut down mid-run: {stale_a})",
        total - usize::try_from(RECORDS).unwrap(),
        runs.len()
    );
    common::delete_stream(&client, &stream).await;
}

/// A checkpoint under a higher token than the consumer's term (a newer
/// holder's, as far as the table can tell) is never overwritten: the
/// consumer's claim is refused as stale, counted, and the shard's work
/// ends without handling a record; the run still ends cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_token_in_the_table_stops_the_shards_work() {
    let kinesis = tenure_testkit::server_url("TENURE_TEST_KINESIS");
    let dynamo = tenure_testkit::server_url("TENURE_TEST_DYNAMODB");
    let (Some(kinesis), Some(dynamo)) = (kinesis, dynamo) else {
        return;
    };
    let stream = format!("stale-{:x}", tenure_testkit::unique_suffix());
    let (source, client) = common::source(&kinesis, &stream).await;
    common::create_stream(&client, &stream, 1).await;
    for n in 0..5 {
        common::put_numbered(&client, &stream, "1", n).await;
    }
    let dynamo_store = common::dynalite(&dynamo).await;
    let table = format!("tenure_cp_stale_{:x}", tenure_testkit::unique_suffix());
    let checkpoints = Checkpoints::new(dynamo_store.client().clone(), &table);
    checkpoints.create_table_if_missing().await.unwrap();
    let seeded = checkpoints.claim(&id(0), 1_000_000).await.unwrap();

    let consumer = KinesisConsumer::builder(source, MemoryStore::new(), checkpoints.clone())
        .member_id("low")
        .term(Duration::from_secs(1))
        .refresh(Duration::from_millis(300))
        .start()
        .expect("start");
    let handled = Arc::new(Mutex::new(0usize));
    let runner = consumer.clone();
    let count = handled.clone();
    let task = tokio::spawn(async move {
        runner
            .run(move |_, records, _| {
                let count = count.clone();
                async move {
                    *count.lock().unwrap() += records.len();
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
    });
    let start = Instant::now();
    while checkpoints.stale_refusals() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the claim was never refused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    consumer.shutdown().await;
    task.await.unwrap().expect("the run ends cleanly");
    assert_eq!(
        *handled.lock().unwrap(),
        0,
        "records handled under a stale term"
    );
    assert_eq!(
        checkpoints.load(&id(0)).await.unwrap(),
        Some(seeded),
        "the newer checkpoint was overwritten"
    );
    println!("stale refusals: {}", checkpoints.stale_refusals());
    common::delete_stream(&client, &stream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_whose_handler_fails_leaves_and_the_other_reads_its_shards() {
    let kinesis = tenure_testkit::server_url("TENURE_TEST_KINESIS");
    let dynamo = tenure_testkit::server_url("TENURE_TEST_DYNAMODB");
    let (Some(kinesis), Some(dynamo)) = (kinesis, dynamo) else {
        return;
    };
    let stream = format!("fail-{:x}", tenure_testkit::unique_suffix());
    let (source, client) = common::source(&kinesis, &stream).await;
    common::create_stream(&client, &stream, 2).await;
    let keys = hash_keys();
    for n in 0..20u64 {
        common::put_numbered(&client, &stream, &keys[if n % 2 == 0 { 0 } else { 2 }], n).await;
    }
    let dynamo_store = common::dynalite(&dynamo).await;
    let table = format!("tenure_cp_fail_{:x}", tenure_testkit::unique_suffix());
    Checkpoints::new(dynamo_store.client().clone(), &table)
        .create_table_if_missing()
        .await
        .unwrap();
    let store = MemoryStore::new();
    let start = |name: &str| {
        KinesisConsumer::builder(
            source.clone(),
            store.clone(),
            Checkpoints::new(dynamo_store.client().clone(), &table),
        )
        .set("fail-test")
        .member_id(name)
        .term(Duration::from_secs(1))
        .refresh(Duration::from_millis(300))
        .idle(Duration::from_millis(50))
        .start()
        .expect("start consumer")
    };
    // `a` alone takes both shards, and fails on its first page.
    let a = start("a");
    let failed = tokio::time::timeout(
        Duration::from_secs(30),
        a.run(|_, _, _| async { Err::<(), _>(std::io::Error::other("handler failed")) }),
    )
    .await
    .expect("a's run returns once its handler fails");
    assert!(failed.is_err(), "{failed:?}");
    // `a`'s handle is kept: its shards must still go to `b`.
    let b = start("b");
    let seen: Arc<Mutex<BTreeSet<u64>>> = Arc::default();
    let runner = b.clone();
    let got = seen.clone();
    let task = tokio::spawn(async move {
        runner
            .run(move |_, records, _| {
                let got = got.clone();
                async move {
                    for r in records {
                        got.lock()
                            .unwrap()
                            .insert(String::from_utf8_lossy(&r.data).parse().unwrap());
                    }
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().len() < 20 {
        assert!(
            Instant::now() < deadline,
            "b handled only {:?} while a's handle lives",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.shutdown().await;
    task.await.unwrap().unwrap();
    drop(a);
    common::delete_stream(&client, &stream).await;
}
