//! `tenure status --group SET` on a sharded set: the members, who holds
//! which shard, and a summary, for people and in JSON; records planted by
//! hand (hostile ids, huge tokens, undecodable bytes, names tenure would
//! refuse) do not make it fail or reach the terminal raw.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use tenure::{GroupName, LeaseStore, Metadata, Shards};
use tenure_sqlite::SqliteStore;

const SHARDS: usize = 12;
const SETTLE: Duration = Duration::from_secs(30);

/// `tenure status --group GROUP` (with `extra`) on `store`: its stdout,
/// having checked that it exited 0.
fn status(store: &str, group: &str, extra: &[&str]) -> String {
    let out = succeeds(
        tenure()
            .args(["status", "--group", group, "--store", store])
            .args(extra),
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The rows of the table whose header line starts with `header`, up to
/// the next header or the end.
fn table<'a>(text: &'a str, header: &str) -> Vec<Vec<&'a str>> {
    text.lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(1)
        .take_while(|l| !l.starts_with("shard ") && !l.starts_with("undecodable"))
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// Three `tenure::Shards` members m0..m2 share 12 shards on a SQLite file;
/// m3 joined and left (its member record is released); and the set's own
/// name once ran as a plain group (`tenure run --group cs --once`), which
/// left a released lease under `cs`: the case where status used to say
/// "no leader for group cs (released …)". Status shows the live members
/// with their addresses, the one gone, every shard in numeric order with
/// the holder the library reports, and the loads.
#[test]
fn status_shows_a_sharded_sets_members_and_who_holds_each_shard() {
    let s = Scratch::new("set-status");
    let store = s.store();
    let db = s.path("tenure.db");
    succeeds(tenure().args([
        "run", "--group", "cs", "--once", "--term", "2s", "--store", &store, "--", "true",
    ]));

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let member = |id: &str, address: &str| {
        let db = db.clone();
        let (id, address) = (id.to_owned(), address.to_owned());
        rt.block_on(async move {
            Shards::builder(SqliteStore::connect(&db).await.expect("open"), "cs")
                .member_id(id)
                .shards(SHARDS)
                .term(Duration::from_secs(2))
                .metadata(Metadata::new().with("address", address))
                .start()
                .expect("join the set")
        })
    };
    let leaver = member("m3", "10.0.0.3:80");
    wait_for(SETTLE, || leaver.is_member().then_some(())).expect("m3 joins");
    rt.block_on(leaver.shutdown());
    let members: Vec<Shards> = (0..3)
        .map(|i| member(&format!("m{i}"), &format!("10.0.0.{i}:80")))
        .collect();
    let held = || -> BTreeMap<String, String> {
        members
            .iter()
            .flat_map(|m| {
                m.held()
                    .into_keys()
                    .map(|shard| (shard, m.member_id().to_owned()))
            })
            .collect()
    };
    let start = Instant::now();
    let settled = wait_for(SETTLE, || {
        let h = held();
        (h.len() == SHARDS
            && members
                .iter()
                .all(|m| m.members().len() == 3 && m.held().len() == SHARDS / 3))
        .then_some(h)
    })
    .unwrap_or_else(|| panic!("not settled in {SETTLE:?}: {:?}", held()));
    eprintln!("settled in {:?}", start.elapsed());

    let text = status(&store, "cs", &[]);
    eprintln!("{text}");
    assert_eq!(
        text.lines().next(),
        Some("sharded set cs: 3 members (1 gone), 12 shards, 12 held; loads m0=4 m1=4 m2=4"),
        "{text}"
    );
    assert!(
        text.contains("group cs also has a single lease of its own (released"),
        "{text}"
    );
    let rows = table(&text, "member ");
    let ids: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(ids, ["m0", "m1", "m2", "m3"], "{text}");
    for (i, r) in rows.iter().take(3).enumerate() {
        assert_eq!(r[1..3], ["live", "4"], "{text}");
        assert_eq!(r.last(), Some(&format!("address=10.0.0.{i}:80").as_str()));
    }
    assert_eq!(rows[3][1], "released", "{text}");
    let shards = table(&text, "shard ");
    let names: Vec<String> = shards.iter().map(|r| r[0].to_owned()).collect();
    let numeric: Vec<String> = (0..SHARDS).map(|i| i.to_string()).collect();
    assert_eq!(names, numeric, "numeric order: {text}");
    for r in &shards {
        assert_eq!(Some(&r[1].to_owned()), settled.get(r[0]), "{text}");
        assert!(r[2].parse::<u64>().is_ok_and(|t| t >= 1), "{text}");
        assert_eq!(r[3], "in", "{text}");
    }

    let v: serde_json::Value =
        serde_json::from_str(&status(&store, "cs", &["--json"])).expect("JSON");
    assert_eq!(v["group"], "cs");
    assert_eq!(v["store"], store);
    assert_eq!(v["kind"], "sharded");
    assert_eq!(v["summary"]["members"], 3);
    assert_eq!(v["summary"]["members_gone"], 1);
    assert_eq!(v["summary"]["leases"], SHARDS);
    assert_eq!(v["summary"]["held"], SHARDS);
    for i in 0..3 {
        assert_eq!(v["summary"]["loads"][format!("m{i}")], 4, "{v}");
        let m = &v["members"][i];
        assert_eq!(m["id"], format!("m{i}"));
        assert_eq!(m["state"], "live");
        assert_eq!(m["holds"], 4);
        assert_eq!(m["metadata"]["address"], format!("10.0.0.{i}:80"));
        assert!(m["expires_in_ms"].as_i64().is_some_and(|ms| ms > 0), "{m}");
    }
    assert_eq!(v["members"][3]["id"], "m3");
    assert_eq!(v["members"][3]["state"], "released");
    assert!(v["members"][3]["expires_in_ms"].is_null());
    let leases = v["leases"].as_array().expect("leases");
    assert_eq!(leases.len(), SHARDS);
    for (i, l) in leases.iter().enumerate() {
        assert_eq!(l["name"], i.to_string());
        assert_eq!(l["state"], "held");
        assert_eq!(
            l["holder"].as_str(),
            settled.get(&i.to_string()).map(String::as_str)
        );
    }
    assert_eq!(v["group_lease"]["state"], "released");
    assert_eq!(v["group_lease"]["token"], 1);

    // A plain group keeps its output.
    let text = status(&store, "cs/shards/0", &[]);
    assert!(
        text.starts_with("group:    cs/shards/0\nleader:   m"),
        "{text}"
    );

    rt.block_on(async {
        for m in &members {
            m.shutdown().await;
        }
    });
    let v: serde_json::Value =
        serde_json::from_str(&status(&store, "cs", &["--json"])).expect("JSON");
    assert_eq!(v["summary"]["members"], 0, "{v}");
    assert_eq!(v["summary"]["members_gone"], 4, "{v}");
    assert_eq!(v["summary"]["held"], 0, "{v}");
}

/// Writes `bytes` as the record of `name`, as an operator's `sqlite3`
/// shell could: tenure checks neither.
fn plant_raw(db: &Path, name: &str, bytes: &[u8]) {
    rusqlite::Connection::open(db)
        .expect("open raw")
        .execute(
            "INSERT INTO tenure_leases (group_name, version, record) VALUES (?1, 1, ?2)",
            rusqlite::params![name, bytes],
        )
        .expect("plant raw");
}

/// Records no tenure writes: a member and a holder whose ids carry
/// terminal escapes and forged lines, the largest token and expiry, a
/// shard with an empty name, bytes that are no record, a name tenure
/// refuses (a control character). Status shows what it can, escaped, names
/// the undecodable record, and exits 0; JSON carries the exact ids.
#[test]
fn status_of_a_set_survives_hostile_records() {
    let s = Scratch::new("set-status-hostile");
    let store = s.store();
    let db = s.path("tenure.db");
    let hostile = "evil\x1b[2J\r\nsharded set cs: forged\u{202e}\u{9b}31m\x07";
    let now = tenure::WallTime::now();
    let record =
        |holder: Option<&str>, token: u64, expires: tenure::WallTime| tenure::LeaseRecord {
            holder: holder.map(|id| tenure::Holder {
                id: id.to_owned(),
                incarnation: 1,
            }),
            token,
            term: Duration::from_secs(60),
            renewed_at: now,
            expires_at: expires,
            metadata: Metadata::new().with("k\x1b]0;title\x07", "v\nforged: line"),
        };
    let far = tenure::WallTime::from_millis(u64::MAX);
    let soon = now + Duration::from_secs(60);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let s = SqliteStore::connect(&db).await.expect("open");
        for (group, r) in [
            ("cs/members/evil", record(Some(hostile), 1, soon)),
            ("cs/members/m0", record(Some("m0"), 1, soon)),
            ("cs/shards/p10", record(Some(hostile), u64::MAX, far)),
            ("cs/shards/p9", record(Some("m0"), 3, soon)),
            ("cs/shards/", record(None, 2, now)),
        ] {
            let g = GroupName::new(group).expect("group");
            s.compare_and_swap(&g, None, &r).await.expect("plant");
        }
    });
    plant_raw(&db, "cs/shards/bad", b"\x00not a tenure record");
    plant_raw(&db, "cs/shards/\x1b[31m", b"\x00not even a name");
    let clean = |what: &str, text: &str| {
        for bad in ['\x1b', '\r', '\x07', '\u{9b}', '\u{202e}'] {
            assert!(!text.contains(bad), "{what} printed {bad:?} raw: {text:?}");
        }
        for line in text.lines().skip(1) {
            assert!(
                !line.starts_with("sharded set cs: forged") && !line.starts_with("forged: line"),
                "{what} printed a forged line: {text:?}"
            );
        }
    };

    let text = status(&store, "cs", &[]);
    eprintln!("{text}");
    clean("status", &text);
    assert!(
        text.starts_with("sharded set cs: 2 members, 3 shards, 2 held; loads "),
        "{text}"
    );
    let escaped = "evil\\u{1b}[2J\\u{d}\\u{a}sharded set cs: forged";
    assert!(text.contains(escaped), "{text}");
    assert!(text.contains(&u64::MAX.to_string()), "{text}");
    let names: Vec<&str> = table(&text, "shard ").iter().map(|r| r[0]).collect();
    assert_eq!(names, ["\"\"", "p9", "p10"], "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("undecodable: cs/shards/bad: ")),
        "{text}"
    );

    let out = status(&store, "cs", &["--json"]);
    clean("status --json", &out);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["members"][0]["id"], "evil");
    assert_eq!(v["leases"][2]["name"], "p10");
    assert_eq!(
        v["leases"][2]["holder"], hostile,
        "JSON carries the exact id"
    );
    assert_eq!(v["leases"][2]["token"], u64::MAX);
    assert_eq!(v["summary"]["loads"][hostile], 1);
    assert_eq!(v["undecodable"][0]["group"], "cs/shards/bad");
    assert_eq!(v["undecodable"].as_array().map(Vec::len), Some(1));
}
