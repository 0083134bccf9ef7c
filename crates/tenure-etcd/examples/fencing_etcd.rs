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

use etcd_client::{Client, DeleteOptions, TxnOp};
use tenure::fence::StaleToken;
use tenure_etcd::{fence, EtcdOptions, EtcdStore};
use tenure_testkit::{unique_suffix, url_argument, HandOver};

type Error = tenure_testkit::StoryError;

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(&url_argument("TENURE_TEST_ETCD", "an etcd URL")?).await
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
    // Distinct per run, so runs against a shared server never meet.
    let run_id = format!("{:x}", unique_suffix());
    let fence_key = format!("fencing-example/{run_id}/fence");
    let report = format!("fencing-example/{run_id}/report");

    // Two candidates, as two processes would be, each with its own store.
    let group = format!("fencing-example-{run_id}");
    let story = HandOver::start(EtcdStore::connect(url).await?, &group).await?;
    let mut story = story.and_b(EtcdStore::connect(url).await?)?;
    let written = write(&mut client, &fence_key, &report, "by A", story.token_a()).await?;
    story.a_wrote("", written)?;
    let token_b = story.a_stalls().await?;
    let written = write(&mut client, &fence_key, &report, "by B", token_b).await?;
    story.b_wrote("", written)?;
    // A wakes up and its write arrives.
    let late = write(
        &mut client,
        &fence_key,
        &report,
        "by A, late",
        story.token_a(),
    )
    .await?;
    story.a_late_write_refused("", late)?;
    let got = client.get(report.as_str(), None).await?;
    let body = got.kvs().first().map(|kv| kv.value().to_vec());
    if body.as_deref() != Some(b"by B".as_slice()) {
        return Err(format!("{report} holds {body:?}, not B's write").into());
    }
    story.finish().await;
    let example_keys = format!("fencing-example/{run_id}/");
    client
        .delete(example_keys, Some(DeleteOptions::new().with_prefix()))
        .await?;
    Ok(())
}
