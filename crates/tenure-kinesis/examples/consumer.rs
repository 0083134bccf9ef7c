//! A Kinesis consumer process, for the chaos test (`tests/chaos.rs`) and
//! as an example of [`KinesisConsumer`] with its leases and checkpoints in
//! DynamoDB.
//!
//! ```text
//! consumer KINESIS_URL LEASES_URL CHECKPOINT_TABLE MEMBER_ID TERM_MS
//! ```
//!
//! `KINESIS_URL` is a `kinesis://STREAM?…` URL, `LEASES_URL` a
//! `dynamodb://TABLE?…` URL of the lease table (its client also writes the
//! checkpoint table, created if missing). Prints one line per record
//! handled, `REC MEMBER SHARD TOKEN SEQUENCE DATA`, a line
//! `EARLY MEMBER CHILD PARENT` if a child's record comes before its
//! parent's checkpoint says finished, and on SIGTERM leaves the set and
//! prints `STALE MEMBER N`, the stale checkpoint refusals.
//! `CONSUMER_HANDLER_DELAY_MS` makes the handler wait that long after each
//! page, before its checkpoint is saved; `CONSUMER_BATCH` sets the
//! records per `GetRecords` page (10 unless set).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_dynamodb::DynamoDbStore;
use tenure_kinesis::{Checkpoints, KinesisConsumer, KinesisShards};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kinesis, leases, table, member, term_ms] = args.as_slice() else {
        return Err(
            "usage: consumer KINESIS_URL LEASES_URL CHECKPOINT_TABLE MEMBER_ID TERM_MS".into(),
        );
    };
    let term = Duration::from_millis(term_ms.parse()?);
    // A pause in the handler before each page's checkpoint (the chaos
    // test's SIGSTOP then lands inside it, and the save goes out late).
    let delay = Duration::from_millis(
        std::env::var("CONSUMER_HANDLER_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    let batch: i32 = std::env::var("CONSUMER_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let source = KinesisShards::connect(kinesis).await?;
    let store = DynamoDbStore::connect(leases).await?;
    let checkpoints = Checkpoints::new(store.client().clone(), table.as_str());
    checkpoints.create_table_if_missing().await?;
    let consumer = KinesisConsumer::builder(source.clone(), store, checkpoints.clone())
        .member_id(member.as_str())
        .term(term)
        .refresh(Duration::from_millis(300))
        .idle(Duration::from_millis(50))
        .batch(batch)
        .start()?;
    let stopper = consumer.clone();
    tokio::spawn(async move {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            term.recv().await;
        }
        stopper.shutdown().await;
    });
    // Each shard's parents, from ListShards (closed parents stay listed).
    let parents: Arc<Mutex<BTreeMap<String, Vec<String>>>> = Arc::default();
    let name = member.clone();
    consumer
        .run(move |shard, records, term| {
            let (source, checkpoints, parents, name) = (
                source.clone(),
                checkpoints.clone(),
                parents.clone(),
                name.clone(),
            );
            async move {
                let known = parents.lock().unwrap().get(&shard).cloned();
                let mine = match known {
                    Some(p) => p,
                    None => {
                        let listed = source.list_shards().await?;
                        let mut map = parents.lock().unwrap();
                        for s in listed {
                            map.insert(s.name, s.parents.into_iter().collect());
                        }
                        map.get(&shard).cloned().unwrap_or_default()
                    }
                };
                for parent in mine {
                    let done = checkpoints.load(&parent).await?.is_some_and(|c| c.finished);
                    if !done {
                        println!("EARLY {name} {shard} {parent}");
                    }
                }
                {
                    let mut out = std::io::stdout().lock();
                    for r in &records {
                        writeln!(
                            out,
                            "REC {name} {shard} {} {} {}",
                            term.token(),
                            r.sequence_number,
                            String::from_utf8_lossy(&r.data)
                        )?;
                    }
                    out.flush()?;
                }
                tokio::time::sleep(delay).await;
                Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
            }
        })
        .await?;
    println!("STALE {member} {}", consumer.checkpoints().stale_refusals());
    Ok(())
}
