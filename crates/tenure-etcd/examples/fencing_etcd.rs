//! Fencing etcd keys: a leader whose term has ended cannot overwrite its
//! successor's work.
//!
//! Leader A takes term n and writes a report; A then stalls (a GC pause, a
//! `SIGSTOP`) with a second write in flight, its term ends, and B takes
//! term n+1 and writes. When A's late write arrives with token n, the
//! transaction of `tenure_etcd::fence::fenced_txn` refuses it: the fence
//! key already holds n+1.
//!
//! Run: `cargo run -p tenure-etcd --example fencing_etcd -- http://127.0.0.1:2379`
//! (or set `TENURE_TEST_ETCD`). `tests/fencing.rs` runs this same code
//! against the test server. The recipe is explained in `docs/fencing.md`.

use std::time::{SystemTime, UNIX_EPOCH};

use etcd_client::{Client, DeleteOptions, TxnOp};
use tenure::fence::StaleToken;
use tenure::Elector;
use tenure_etcd::{fence, EtcdOptions, EtcdStore};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("TENURE_TEST_ETCD").ok())
        .ok_or("give an etcd URL as the first argument or in TENURE_TEST_ETCD")?;
    run(&url).await
}

/// A leader's write: the report, fenced by the fence key.
async fn write(
    client: &mut Client,
    fence_key: &str,
    report: &str,
    body: &str,
    token: u64,
) -> Result<Result<(), StaleToken>, Error> {
    let writes = vec![TxnOp::put(report, body, None)];
    Ok(fence::fenced_txn(client, fence_key, token, writes)
        .await?
        .map(drop))
}

/// Runs the story against the server at `url`; fails if the stale write is
/// admitted, or anything else goes differently.
pub async fn run(url: &str) -> Result<(), Error> {
    // The example's own client, for the data (no TLS or password here).
    let mut client = Client::connect(EtcdOptions::from_url(url)?.endpoints(), None).await?;
    let run_id = unique_id();
    let fence_key = format!("fencing-example/{run_id}/fence");
    let report = format!("fencing-example/{run_id}/report");

    // Two candidates, as two processes would be, each with its own store.
    let group = format!("fencing-example-{run_id}");
    let a = Elector::builder(EtcdStore::connect(url).await?, &group)
        .candidate_id("a")
        .start()?;
    let term_a = a.wait_for_leadership().await?;
    let b = Elector::builder(EtcdStore::connect(url).await?, &group)
        .candidate_id("b")
        .start()?;
    println!("A leads with token {}", term_a.token());
    write(&mut client, &fence_key, &report, "by A", term_a.token())
        .await?
        .map_err(|e| format!("A's write on time was refused: {e}"))?;
    println!("A wrote with token {}", term_a.token());

    // A stalls here with its next write in flight. Its term ends: in this
    // example it steps down, so that B need not wait out a whole term; to
    // etcd, a pause past the deadline looks the same.
    a.shutdown().await;
    let term_b = b.wait_for_leadership().await?;
    if term_b.token() <= term_a.token() {
        return Err(format!(
            "B's token {} is not above A's {}",
            term_b.token(),
            term_a.token()
        )
        .into());
    }
    println!("B leads with token {}", term_b.token());
    write(&mut client, &fence_key, &report, "by B", term_b.token())
        .await?
        .map_err(|e| format!("B's write was refused: {e}"))?;
    println!("B wrote with token {}", term_b.token());

    // A wakes up and its write arrives.
    match write(
        &mut client,
        &fence_key,
        &report,
        "by A, late",
        term_a.token(),
    )
    .await?
    {
        Err(stale) if stale.highest == term_b.token() => {
            println!("A's late write refused: {stale}")
        }
        other => {
            return Err(format!(
                "A's late write with token {} was not refused: {other:?}",
                term_a.token()
            )
            .into())
        }
    }
    let got = client.get(report.as_str(), None).await?;
    let body = got.kvs().first().map(|kv| kv.value().to_vec());
    if body.as_deref() != Some(b"by B".as_slice()) {
        return Err(format!("{report} holds {body:?}, not B's write").into());
    }
    b.shutdown().await;
    let example_keys = format!("fencing-example/{run_id}/");
    client
        .delete(example_keys, Some(DeleteOptions::new().with_prefix()))
        .await?;
    Ok(())
}

/// Distinct per run, so runs against a shared server never meet.
fn unique_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}
