//! Checks on a store-wide change feed ([`LeaseView::watch`](tenure::LeaseView::watch))
//! for store tests: the next change within a bound, the shape a change
//! must have, silence, and the end of the tasks a dropped feed leaves.

use std::future::Future;
use std::time::Duration;

use tenure::record::{GroupName, LeaseRecord, Metadata, Version, Versioned};
use tenure::store::{Change, LeaseStore, StoreFeed};

/// How long [`expect_quiet`] listens.
const QUIET_FOR: Duration = Duration::from_millis(500);

/// The next change on `feed`, waiting up to `within`; panics, naming
/// `what`, if none arrives in time or the feed ends.
pub async fn next_change(feed: &mut StoreFeed, within: Duration, what: &str) -> Change {
    tokio::time::timeout(within, feed.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: no change within {within:?}"))
        .unwrap_or_else(|| panic!("{what}: the feed ended"))
}

/// Panics, naming `what`, if anything arrives on `feed` within half a
/// second (a feed that repeats or invents changes).
pub async fn expect_quiet(feed: &mut StoreFeed, what: &str) {
    if let Ok(change) = tokio::time::timeout(QUIET_FOR, feed.next()).await {
        panic!("{what}: unexpected {change:?}");
    }
}

/// Panics unless `change` carries the write of `group` at `version` held
/// by `holder`.
///
/// ```
/// use tenure_testkit::{expect_written, held_by};
/// use tenure::{Change, GroupName, Version, Versioned};
///
/// let g = GroupName::new("g").unwrap();
/// let current = Versioned { version: Version(7), record: held_by("a", 1) };
/// expect_written(Change::Written { group: g.clone(), current }, &g, Version(7), "a");
/// ```
pub fn expect_written(change: Change, group: &GroupName, version: Version, holder: &str) {
    match change {
        Change::Written { group: g, current }
            if &g == group
                && current.version == version
                && current.record.holder_id() == Some(holder) => {}
        other => panic!("expected {group} at {version} held by {holder}, got {other:?}"),
    }
}

/// Panics, naming `what`, unless `change` is a hint for `group` (what a
/// feed reports for a write it cannot decode, or a deletion).
pub fn expect_hint(change: Change, group: &GroupName, what: &str) {
    match change {
        Change::Hint { group: g } if &g == group => {}
        other => panic!("{what}: expected a hint for {group}, got {other:?}"),
    }
}

/// Opens feeds with `open`, drops what it returned and waits up to
/// `within` for the tasks it started to end: a feed must not leave a task
/// (a watch, a poller) running behind it. Returns how many tasks opening
/// started; panics if it started none or one outlives the bound.
pub async fn tasks_end_with_feed<T>(open: impl Future<Output = T>, within: Duration) -> usize {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let feeds = open.await;
    let started = metrics.num_alive_tasks().saturating_sub(before);
    assert!(
        started > 0,
        "opening the feed started no task to forward it"
    );
    drop(feeds);
    let deadline = std::time::Instant::now() + within;
    while metrics.num_alive_tasks() > before {
        assert!(
            std::time::Instant::now() < deadline,
            "a task outlived its feed by {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    started
}

/// How long [`write_seen_on_feed`] waits for the feed to carry a write.
pub const FEED_WITHIN: Duration = Duration::from_secs(10);

/// Writes `group` held by `holder` through `store`, expecting `expected`
/// (the write must apply), and checks that the next change on `feed`,
/// within [`FEED_WITHIN`], carries that write; returns the new version.
pub async fn write_seen_on_feed<S: LeaseStore + ?Sized>(
    store: &S,
    feed: &mut StoreFeed,
    group: &GroupName,
    expected: Option<Version>,
    holder: &str,
) -> Version {
    let version = super::applied(store, group, expected, &super::held_by(holder, 1)).await;
    let what = format!("{group} written by {holder}");
    let change = next_change(feed, FEED_WITHIN, &what).await;
    expect_written(change, group, version, holder);
    version
}

/// The next change on `feed` about `group`, skipping changes to other
/// groups (tests share servers), within [`FEED_WITHIN`].
pub async fn next_change_about(feed: &mut StoreFeed, group: &GroupName) -> Change {
    tokio::time::timeout(FEED_WITHIN, async {
        loop {
            match feed.next().await.expect("the feed is open") {
                Change::Written { group: g, .. } | Change::Hint { group: g } if &g != group => {}
                change => return change,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no change about {group} within {FEED_WITHIN:?}"))
}

/// Writes a record whose metadata holds an address and characters beyond
/// ASCII to `group` through `writer` (creating it) and checks the next
/// change on `feed` about the group carries that record, whole, at the
/// version the write returned: followers need no read. Returns both.
pub async fn write_carried_whole<S: LeaseStore + ?Sized>(
    writer: &S,
    feed: &mut StoreFeed,
    group: &GroupName,
) -> (LeaseRecord, Version) {
    let mut record = super::held_by("a", 1);
    record.metadata = Metadata::address("10.0.0.7:80").with("ünï", "☃ 🦀");
    let version = super::applied(writer, group, None, &record).await;
    let current = Versioned {
        record: record.clone(),
        version,
    };
    assert_eq!(
        next_change_about(feed, group).await,
        Change::Written {
            group: group.clone(),
            current
        }
    );
    (record, version)
}

/// How long [`resyncs_then_carries_writes`] waits for the resync: a feed
/// that lost its connection opens a new one and subscribes again, which a
/// loaded machine may take seconds to do.
pub const RESYNC_WITHIN: Duration = Duration::from_secs(15);

/// Waits up to [`RESYNC_WITHIN`] for `feed` to say [`Change::Resync`]
/// (skipping what comes first), then checks that it goes on carrying
/// writes: one to a fresh group (`label`) through `writer`. What a feed
/// must do after it lost its connection, since what was sent meanwhile is
/// gone.
pub async fn resyncs_then_carries_writes<S: LeaseStore + ?Sized>(
    feed: &mut StoreFeed,
    writer: &S,
    label: &str,
) {
    let resynced = tokio::time::timeout(RESYNC_WITHIN, async {
        while feed.next().await.expect("the feed stays open") != Change::Resync {}
    })
    .await;
    assert!(resynced.is_ok(), "no resync within {RESYNC_WITHIN:?}");
    let group = super::unique_group(label);
    let version = super::applied(writer, &group, None, &super::held_by("a", 1)).await;
    match next_change_about(feed, &group).await {
        Change::Written { current, .. } => assert_eq!(current.version, version),
        other => panic!("after the resync: {other:?}"),
    }
}

/// Values a foreign program might leave for a group (bytes that are no
/// record, JSON that is no record), by group name: what store tests plant
/// to check that a feed reports them as hints and goes on.
pub const FOREIGN_VALUES: [(&str, &[u8]); 2] = [
    ("bad", b"\x00not a record"),
    ("json", br#"{"v":1,"token":"many"}"#),
];

/// Expects the next changes on `feed` to be hints for the groups of
/// [`FOREIGN_VALUES`], in that order (planted in that order).
///
/// # Panics
///
/// If a change is missing, late or another than that hint.
pub async fn expect_foreign_values_hinted(feed: &mut StoreFeed) {
    for (name, _) in FOREIGN_VALUES {
        // The names are the constants above, all valid group names.
        let group = GroupName::new(name).expect("a valid group name");
        let what = format!("the foreign value of {name}");
        expect_hint(next_change(feed, FEED_WITHIN, &what).await, &group, &what);
    }
}
