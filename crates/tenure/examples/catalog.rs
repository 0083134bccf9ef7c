//! The README's sharded-set snippet ("Shards that change at runtime"),
//! compiled as written by `cargo clippy --all-targets` in CI, and run here
//! for two seconds on the in-process store: `cargo run -p tenure --example
//! catalog`.

use std::time::Duration;

use tenure::shards::{ShardSource, SourceError, SourceShard};
use tenure::{ElectorError, MemoryStore, Shards};

/// What the work returns: anything an `ElectorError` converts into.
type MyError = ElectorError;

// --- the README's snippet, from here ---
struct Stream;

#[async_trait::async_trait]
impl ShardSource for Stream {
    async fn list(&self) -> Result<Vec<SourceShard>, SourceError> {
        Ok(vec![
            SourceShard::new("shard-0"),
            SourceShard::new("shard-1").after(["shard-0"]), // a split's children
            SourceShard::new("shard-2").after(["shard-0"]),
        ])
    }
}

async fn member(store: MemoryStore) -> Result<(), MyError> {
    let shards = Shards::builder(store, "ingest")
        .catalog(Stream, Duration::from_secs(60))
        .start()?;
    shards
        .run_per_shard(|shard, term| async move {
            // read `shard` to its end, fencing writes with term.token(), then:
            // shards.mark_finished(&shard, &term).await?;
            println!("holding {shard} with token {}", term.token());
            Ok::<(), MyError>(())
        })
        .await?;
    Ok(())
}
// --- to here ---

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let ran = tokio::time::timeout(Duration::from_secs(2), member(MemoryStore::new())).await;
    if let Ok(Err(e)) = ran {
        eprintln!("the member failed: {e}");
        std::process::exit(1);
    }
}
