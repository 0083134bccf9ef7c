//! Fencing a Redis key: a leader whose term has ended cannot overwrite its
//! successor's work.
//!
//! Leader A takes term n and writes a report; A then stalls (a GC pause, a
//! `SIGSTOP`) with a second write in flight, its term ends, and B takes
//! term n+1 and writes. When A's late write arrives with token n, the Lua
//! script of `tenure_redis::fence::fenced_set` refuses it: the fence key
//! already holds n+1.
//!
//! Run: `cargo run -p tenure-redis --example fencing_redis -- redis://127.0.0.1:6379`
//! (or set `TENURE_TEST_REDIS`). `tests/fencing.rs` runs this same code
//! against the test server. The recipe is explained in `docs/fencing.md`.

use std::time::{SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use tenure::Elector;
use tenure_redis::{fence, RedisStore};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("TENURE_TEST_REDIS").ok())
        .ok_or("give a Redis URL as the first argument or in TENURE_TEST_REDIS")?;
    run(&url).await
}

/// Runs the story against the server at `url`; fails if the stale write is
/// admitted, or anything else goes differently.
pub async fn run(url: &str) -> Result<(), Error> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let run_id = unique_id();
    // The hash tag keeps both keys in one slot on a Redis Cluster.
    let fence_key = format!("fencing-example:{{{run_id}}}:fence");
    let report = format!("fencing-example:{{{run_id}}}:report");

    // Two candidates, as two processes would be, each with its own store.
    // The leases live under a prefix of their own, new, which the first
    // store declares so the first election need not wait out the data-loss
    // quarantine (see the crate docs); an established prefix needs neither.
    let separator = if url.contains('?') { '&' } else { '?' };
    let store_url = format!("{url}{separator}prefix=fencing-example-{run_id}:");
    let store_a = RedisStore::connect(&store_url).await?;
    store_a.adopt_empty().await?;
    let group = "reports";
    let a = Elector::builder(store_a, group).candidate_id("a").start()?;
    let term_a = a.wait_for_leadership().await?;
    let b = Elector::builder(RedisStore::connect(&store_url).await?, group)
        .candidate_id("b")
        .start()?;
    println!("A leads with token {}", term_a.token());
    fence::fenced_set(&mut conn, &fence_key, term_a.token(), &[(&report, b"by A")])
        .await?
        .map_err(|e| format!("A's write on time was refused: {e}"))?;
    println!("A wrote with token {}", term_a.token());

    // A stalls here with its next write in flight. Its term ends: in this
    // example it steps down, so that B need not wait out a whole term; to
    // Redis, a pause past the deadline looks the same.
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
    fence::fenced_set(&mut conn, &fence_key, term_b.token(), &[(&report, b"by B")])
        .await?
        .map_err(|e| format!("B's write was refused: {e}"))?;
    println!("B wrote with token {}", term_b.token());

    // A wakes up and its write arrives.
    match fence::fenced_set(
        &mut conn,
        &fence_key,
        term_a.token(),
        &[(&report, b"by A, late")],
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
    let body: Vec<u8> = conn.get(&report).await?;
    if body != b"by B" {
        return Err(format!(
            "{report} holds {:?}, not B's write",
            String::from_utf8_lossy(&body)
        )
        .into());
    }
    b.shutdown().await;
    let _: () = conn.del(&[&fence_key, &report]).await?;
    Ok(())
}

/// Distinct per run, so runs against a shared server never meet.
fn unique_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}
