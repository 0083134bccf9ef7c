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

use redis::AsyncCommands;
use tenure_redis::{fence, RedisStore};
use tenure_testkit::{unique_suffix, url_argument, HandOver};

type Error = tenure_testkit::StoryError;

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(&url_argument("TENURE_TEST_REDIS", "a Redis URL")?).await
}

/// Runs the story against the server at `url`; fails if the stale write is
/// admitted, or anything else goes differently.
pub async fn run(url: &str) -> Result<(), Error> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    // Distinct per run, so runs against a shared server never meet.
    let run_id = format!("{:x}", unique_suffix());
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
    let story = HandOver::start(store_a, "reports").await?;
    let mut story = story.and_b(RedisStore::connect(&store_url).await?)?;
    let token_a = story.token_a();
    let written = fence::fenced_set(&mut conn, &fence_key, token_a, &[(&report, b"by A")]).await?;
    story.a_wrote("", written)?;
    let token_b = story.a_stalls().await?;
    let written = fence::fenced_set(&mut conn, &fence_key, token_b, &[(&report, b"by B")]).await?;
    story.b_wrote("", written)?;
    // A wakes up and its write arrives.
    let body = b"by A, late";
    let late = fence::fenced_set(&mut conn, &fence_key, token_a, &[(&report, body)]).await?;
    story.a_late_write_refused("", late)?;
    let body: Vec<u8> = conn.get(&report).await?;
    if body != b"by B" {
        return Err(format!(
            "{report} holds {:?}, not B's write",
            String::from_utf8_lossy(&body)
        )
        .into());
    }
    story.finish().await;
    let _: () = conn.del(&[&fence_key, &report]).await?;
    Ok(())
}
