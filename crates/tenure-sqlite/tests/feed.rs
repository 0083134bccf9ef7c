//! The change feed: a write on another connection reaches a watcher within
//! about one poll, writes to other groups do not wake it, and dropping the
//! feed ends its poller.

mod common;

use std::time::{Duration, Instant};

use common::Scratch;
use tenure::store::CasOutcome;
use tenure::{LeaseStore, LeaseView};
use tenure_sqlite::SqliteStore;
use tenure_testkit::{held_by, released, unique_group};

async fn next_hint(feed: &mut tenure::store::ChangeFeed, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    match tokio::time::timeout(within, feed.changed()).await {
        Ok(Some(())) => Some(started.elapsed()),
        Ok(None) => panic!("the feed ended"),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_on_another_handle_wakes_the_watcher() {
    let scratch = Scratch::new("feed");
    let path = scratch.path("leases.db");
    let watcher = SqliteStore::connect(&path).await.unwrap();
    let writer = SqliteStore::connect(&path).await.unwrap();
    let g = unique_group("watched");
    let other = unique_group("other");

    let mut feed = watcher
        .changes(&g)
        .await
        .unwrap()
        .expect("sqlite has a feed");
    assert_eq!(
        next_hint(&mut feed, Duration::from_millis(300)).await,
        None,
        "a hint before any write"
    );

    // Writes to another group in the same file do not wake this group.
    writer
        .compare_and_swap(&other, None, &held_by("x", 1))
        .await
        .unwrap();
    assert_eq!(
        next_hint(&mut feed, Duration::from_millis(300)).await,
        None,
        "a write to another group woke the watcher"
    );

    let mut version = None;
    let mut latencies = Vec::new();
    for i in 0..5u64 {
        let rec = if i % 2 == 0 {
            held_by("w", i / 2 + 1)
        } else {
            released(i / 2 + 1)
        };
        let CasOutcome::Applied(v) = writer.compare_and_swap(&g, version, &rec).await.unwrap()
        else {
            panic!("conflict")
        };
        version = Some(v);
        let latency = next_hint(&mut feed, Duration::from_secs(2))
            .await
            .unwrap_or_else(|| panic!("no hint within 2 s of write {i}"));
        latencies.push(latency);
        // The watcher sees the write when it re-reads.
        assert_eq!(watcher.read(&g).await.unwrap().unwrap().version, v);
    }
    eprintln!("hint latencies after a write on another connection: {latencies:.1?}");
    assert!(
        latencies.iter().all(|l| *l < Duration::from_millis(500)),
        "{latencies:?}"
    );

    // The watcher's own writes are hinted too (its feed has its own
    // connection); extra hints are harmless to the elector.
    watcher
        .compare_and_swap(&g, version, &held_by("watcher", 4))
        .await
        .unwrap();
    assert!(next_hint(&mut feed, Duration::from_secs(2)).await.is_some());
}

#[tokio::test(flavor = "current_thread")]
async fn dropping_the_feed_ends_its_poller() {
    let scratch = Scratch::new("feed-drop");
    let (_, store) = scratch.store().await;
    let g = unique_group("g");
    let feed = async { store.changes(&g).await.unwrap().unwrap() };
    let started = tenure_testkit::tasks_end_with_feed(feed, Duration::from_secs(2)).await;
    assert_eq!(started, 1, "one poller per feed");
}
