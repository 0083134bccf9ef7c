//! `tenure bench --shards` runs to completion on SQLite: a sharded set of
//! member processes sees a join, a graceful leave and a kill, each moves
//! exactly the shards it must, and the members' own reports show no shard
//! worked by two members at once. (It prints times; this test checks none.)

mod common;

use common::*;

#[test]
fn the_shard_bench_measures_every_event_and_finds_no_overlap() {
    let scratch = Scratch::new("shard-bench");
    let out = run_to_end(tenure().args([
        "bench",
        "--shards",
        "8",
        "--members",
        "3",
        "--rounds",
        "1",
        "--term",
        "2s",
        "--json",
        "--store",
        &scratch.store(),
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(v["shards"], 8, "{v:#}");
    let rows = v["rows"].as_array().expect("rows");
    for event in ["start", "join", "leave", "kill"] {
        let row = rows
            .iter()
            .find(|r| r["event"] == event)
            .unwrap_or_else(|| panic!("no {event} row: {v:#}"));
        assert_eq!(row["store"], "sqlite", "{row}");
        assert_eq!(row["balanced"]["n"], 1, "{row}");
        if event != "start" {
            // A join moves the newcomer's share (8 over 4: 2), a leave or a
            // kill the leaver's shards (8 over 4 or 3: 2 or 3).
            assert_eq!(row["moved"], row["minimum"], "{row}");
            assert!(
                (2..=3).contains(&row["minimum"].as_u64().unwrap_or(0)),
                "{row}"
            );
        }
    }
    let stores = v["stores"].as_array().expect("stores");
    assert_eq!(stores.len(), 1, "{v:#}");
    assert!(stores[0]["skipped"].is_null(), "{v:#}");
    assert!(stores[0]["spans"].as_u64().unwrap_or(0) >= 8, "{v:#}");
    assert_eq!(
        stores[0]["overlaps"].as_array().map(Vec::len),
        Some(0),
        "{v:#}"
    );
}

#[test]
fn the_shard_bench_refuses_a_store_its_members_cannot_share() {
    let out = run_to_end(tenure().args(["bench", "--shards", "8", "--store", "memory://"]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("separate processes"), "{stderr}");
}

/// `tenure bench --catalog` follows an added, a split and a removed shard
/// on SQLite, and reports each change once, with no shard held twice.
#[test]
fn the_catalog_bench_follows_every_change_and_finds_no_overlap() {
    let scratch = Scratch::new("catalog-bench");
    let out = run_to_end(tenure().args([
        "bench",
        "--catalog",
        "--members",
        "3",
        "--rounds",
        "2",
        "--term",
        "1s",
        "--json",
        "--store",
        &scratch.store(),
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let row = &v[0];
    assert_eq!(row["members"], 3, "{v:#}");
    for change in ["added", "split", "removed"] {
        assert_eq!(row[change]["n"], 2, "{change}: {v:#}");
    }
    assert_eq!(row["overlaps"], 0, "{v:#}");
}
