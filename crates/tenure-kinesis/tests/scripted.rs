//! `KinesisConsumer` against a scripted Kinesis (an HTTP server answering
//! from a script, for the replies kinesalite never sends) and a real
//! dynalite (`TENURE_TEST_DYNAMODB`) for the checkpoints: throttling is
//! backed off, an expired iterator is got again from the checkpoint, and a
//! shard whose page has no `NextShardIterator` is finished.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure::MemoryStore;
use tenure_kinesis::{Checkpoints, KinesisConsumer};

mod common;

/// One request as the server saw it: its operation, body, and when.
type Seen = Arc<Mutex<Vec<(String, String, Instant)>>>;

/// The pages the handler got: each record's sequence number and data.
type Pages = Arc<Mutex<Vec<Vec<(String, Vec<u8>)>>>>;

/// The script: ListShards lists one shard; GetShardIterator answers
/// `it-N`; GetRecords answers, in turn, a page with record 1, a
/// throttling error, an expired iterator, then a page with record 2 and no
/// next iterator (the shard is closed).
fn reply(op: &str, records_calls: usize) -> (u16, String) {
    match op {
        "ListShards" => (
            200,
            r#"{"Shards":[{"ShardId":"shard-a","HashKeyRange":{"StartingHashKey":"0","EndingHashKey":"1"},"SequenceNumberRange":{"StartingSequenceNumber":"1"}}]}"#
                .into(),
        ),
        "GetShardIterator" => (200, r#"{"ShardIterator":"it"}"#.into()),
        "GetRecords" => match records_calls {
            0 => (
                200,
                r#"{"Records":[{"SequenceNumber":"1","Data":"b25l","PartitionKey":"k"}],"NextShardIterator":"it","MillisBehindLatest":0}"#
                    .into(),
            ),
            1 => (
                400,
                r#"{"__type":"ProvisionedThroughputExceededException","message":"slow down"}"#
                    .into(),
            ),
            2 => (
                400,
                r#"{"__type":"ExpiredIteratorException","message":"expired"}"#.into(),
            ),
            _ => (
                200,
                r#"{"Records":[{"SequenceNumber":"2","Data":"dHdv","PartitionKey":"k"}],"MillisBehindLatest":0}"#
                    .into(),
            ),
        },
        _ => (
            400,
            r#"{"__type":"InvalidArgumentException","message":"not scripted"}"#.into(),
        ),
    }
}

async fn scripted_kinesis() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let endpoint = common::scripted(move |op, body| {
        let mut log = log.lock().unwrap();
        let calls = log.iter().filter(|(o, ..)| o == "GetRecords").count();
        log.push((op.to_owned(), body.to_owned(), Instant::now()));
        reply(op, calls)
    })
    .await;
    (endpoint, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_backs_off_an_expired_iterator_resumes_from_the_checkpoint_and_the_end_finishes()
{
    let Some(dynamo) = tenure_testkit::server_url("TENURE_TEST_DYNAMODB") else {
        return;
    };
    let (endpoint, seen) = scripted_kinesis().await;
    let (source, _) = common::source(&endpoint, "scripted").await;
    let store = common::dynalite(&dynamo).await;
    let table = format!("tenure_cp_scripted_{:x}", tenure_testkit::unique_suffix());
    let checkpoints = Checkpoints::new(store.client().clone(), &table);
    checkpoints.create_table_if_missing().await.unwrap();

    let consumer = KinesisConsumer::builder(source, MemoryStore::new(), checkpoints.clone())
        .set(format!("scripted-{table}"))
        .term(Duration::from_secs(2))
        .refresh(Duration::from_millis(300))
        .start()
        .expect("start");
    let pages: Pages = Arc::default();
    let (runner, got) = (consumer.clone(), pages.clone());
    let task = tokio::spawn(async move {
        runner
            .run(move |shard, records, _| {
                let got = got.clone();
                async move {
                    assert_eq!(shard, "shard-a");
                    got.lock().unwrap().push(
                        records
                            .into_iter()
                            .map(|r| (r.sequence_number, r.data))
                            .collect(),
                    );
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
    });
    let start = Instant::now();
    loop {
        let cp = checkpoints.load("shard-a").await.unwrap();
        if cp.as_ref().is_some_and(|c| c.finished) {
            assert_eq!(cp.unwrap().sequence.as_deref(), Some("2"));
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never finished: {cp:?}, {:#?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    consumer.shutdown().await;
    task.await.unwrap().expect("the run ends cleanly");

    assert_eq!(
        *pages.lock().unwrap(),
        [
            vec![("1".to_owned(), b"one".to_vec())],
            vec![("2".to_owned(), b"two".to_vec())]
        ]
    );
    let seen = seen.lock().unwrap().clone();
    let iterators: Vec<&String> = seen
        .iter()
        .filter(|(op, ..)| op == "GetShardIterator")
        .map(|(_, body, _)| body)
        .collect();
    assert_eq!(iterators.len(), 2, "{seen:#?}");
    assert!(
        iterators[0].contains("TRIM_HORIZON"),
        "without a checkpoint: {}",
        iterators[0]
    );
    assert!(
        iterators[1].contains("AFTER_SEQUENCE_NUMBER")
            && iterators[1].contains(r#""StartingSequenceNumber":"1""#),
        "after the expired iterator, from the checkpoint: {}",
        iterators[1]
    );
    // The reply after the throttling came only after a back-off.
    let records: Vec<Instant> = seen
        .iter()
        .filter(|(op, ..)| op == "GetRecords")
        .map(|(.., at)| *at)
        .collect();
    assert!(records.len() >= 4, "{seen:#?}");
    let waited = records[2].duration_since(records[1]);
    assert!(
        waited >= Duration::from_millis(90),
        "the next GetRecords {waited:?} after throttling"
    );
}
