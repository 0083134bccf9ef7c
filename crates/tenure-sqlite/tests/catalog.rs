//! A sharded set following a changing catalog on one SQLite file, each
//! member on its own connection as separate processes would be: a split
//! waits for its parent to finish, a removed shard is released.

mod common;

use std::time::Duration;

use common::Scratch;
use tenure_sqlite::SqliteStore;
use tenure_testkit::catalog;

#[tokio::test(flavor = "multi_thread")]
async fn three_members_follow_a_split_and_a_removal() {
    let scratch = Scratch::new("catalog");
    let path = scratch.path("leases.db");
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(SqliteStore::connect(&path).await.unwrap());
    }
    catalog::follows_a_split_and_a_removal(handles, "stream", Duration::from_secs(1)).await;
}
