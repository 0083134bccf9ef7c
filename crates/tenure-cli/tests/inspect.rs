//! `status`, `watch` and the HTTP endpoints, parsed the way a script or a
//! scraper would.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use common::*;

const SLACK: Duration = Duration::from_secs(5);

#[test]
fn status_json_has_the_documented_fields() {
    let mut e = Election::new("status");
    let v = e.status();
    assert_eq!(v["state"], "never");
    assert!(v["leader"].is_null() && v["token"].is_null());
    assert_eq!(v["group"], "g");

    let (mut a, _) = e.leader("a", &["--metadata", "address=10.0.0.7:8080"], SLACK);
    let v = e.status();
    assert_eq!(v["state"], "held");
    assert_eq!(v["token"], 1);
    assert_eq!(v["store"], e.store);
    let l = &v["leader"];
    assert_eq!(l["candidate"], "a");
    assert_eq!(l["token"], 1);
    assert_eq!(l["metadata"]["address"], "10.0.0.7:8080");
    for f in ["renewed_at", "expires_at"] {
        assert!(l[f].as_str().is_some_and(|t| t.ends_with('Z')), "{f}: {l}");
    }
    assert!(
        l["renewed_ago_ms"]
            .as_i64()
            .is_some_and(|ms| (0..=2000).contains(&ms)),
        "{l}"
    );
    assert!(
        l["expires_in_ms"]
            .as_i64()
            .is_some_and(|ms| ms > 0 && ms <= 2000),
        "{l}"
    );

    // The human form names the leader too.
    let out = run_to_end(tenure().args(["status", "--group", "g", "--store", &e.store]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("leader:   a") && text.contains("token:    1"),
        "{text}"
    );

    a.signal(libc::SIGTERM);
    a.wait_timeout(SLACK).expect("a stops");
    let v = e.status();
    assert_eq!(v["state"], "released");
    assert_eq!(v["token"], 1, "a release keeps the token");
    let out = run_to_end(tenure().args(["status", "--group", "g", "--store", &e.store]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no leader"));
}

#[test]
fn watch_json_prints_each_change_of_leader() {
    let mut e = Election::new("watch");
    let mut w = Running::spawn(
        tenure()
            .args([
                "watch", "--group", "g", "--json", "--poll", "100ms", "--store", &e.store,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = w.child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let next = || -> serde_json::Value {
        let line = rx.recv_timeout(SLACK * 2).expect("a watch line");
        let v: serde_json::Value = serde_json::from_str(&line).expect("watch --json line is JSON");
        assert_eq!(v["group"], "g");
        assert!(v["at"].as_str().is_some_and(|t| t.ends_with('Z')), "{v}");
        v
    };
    assert!(next()["leader"].is_null(), "nobody leads at first");

    let mut a = e.candidate("a", &[]);
    let v = next();
    assert_eq!(v["leader"]["candidate"], "a", "{v}");
    assert_eq!(v["leader"]["token"], 1);
    for f in ["renewed_at", "expires_at"] {
        assert!(v["leader"][f].is_string(), "{v}");
    }
    if let Some(l) = e.starts().first() {
        e.groups.add(l.pgid);
    }

    a.signal(libc::SIGTERM);
    a.wait_timeout(SLACK).expect("a stops");
    assert!(next()["leader"].is_null(), "the release shows as no leader");
    w.signal(libc::SIGTERM);
    assert!(w.wait_timeout(SLACK).expect("watch stops").success());
}

/// A raw HTTP/1.1 GET.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(SLACK)).expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Candidate "a" with its HTTP endpoints on a port of their own, once it
/// serves them and leads: the process, the address, and its CMD's start.
fn leader_serving_http(e: &mut Election) -> (Running, String, ChildLine) {
    let a = e.candidate("a", &["--metrics-addr", "127.0.0.1:0"]);
    let served = wait_logged(
        &e.s.path("a.log"),
        "serving /metrics, /healthz, /readyz and /leader",
        SLACK,
    )
    .expect("the server started");
    let addr = served["fields"]["addr"].as_str().expect("addr").to_owned();
    let line = e.started(0, SLACK).expect("a leads");
    (a, addr, line)
}

/// The /metrics text as a Prometheus text-format parser reads it: every
/// series with `# HELP` and `# TYPE`, the renewal latency a histogram (not
/// a summary), and no label whose value changes on every restart (the
/// candidate id).
fn prometheus_conventions(text: &str) {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("the Prometheus text format");
    assert!(!scrape.samples.is_empty(), "{text}");
    let mut latency = false;
    for sample in &scrape.samples {
        let family = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| {
                let base = sample.metric.strip_suffix(suffix)?;
                text.contains(&format!("# TYPE {base} ")).then_some(base)
            })
            .unwrap_or(&sample.metric);
        assert!(
            scrape.docs.contains_key(family),
            "no # HELP for {family}: {text}"
        );
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "no # TYPE for {family}: {text}"
        );
        // A histogram's _sum and _count read as untyped samples of their
        // own; every other sample has its family's type.
        assert!(
            family != sample.metric || !matches!(sample.value, prometheus_parse::Value::Untyped(_)),
            "{family} is untyped: {text}"
        );
        assert!(
            sample.labels.get("candidate").is_none(),
            "{family} is labelled by the candidate id, which changes on every restart: {text}"
        );
        if sample.metric == "tenure_renew_latency_seconds" {
            latency = true;
            assert!(
                matches!(sample.value, prometheus_parse::Value::Histogram(_)),
                "the renewal latency is a histogram: {:?}\n{text}",
                sample.value
            );
        }
    }
    assert!(latency, "{text}");
    assert!(
        text.contains("# TYPE tenure_renew_latency_seconds histogram"),
        "{text}"
    );
}

#[test]
fn metrics_healthz_and_leader_over_http() {
    let mut e = Election::new("http");
    let (_a, addr, _) = leader_serving_http(&mut e);

    let metrics = wait_for(SLACK, || {
        let (code, body) = get(&addr, "/metrics");
        (code == 200 && body.contains("tenure_renew_latency_seconds_count")).then_some(body)
    })
    .expect("metrics with a renewal in them");
    assert!(
        metrics.contains(r#"tenure_is_leader{group="g"} 1"#),
        "{metrics}"
    );
    prometheus_conventions(&metrics);
    assert!(metrics.contains("tenure_transitions_total"), "{metrics}");
    assert!(
        metrics.contains("tenure_term_remaining_seconds"),
        "{metrics}"
    );

    let (code, body) = get(&addr, "/healthz");
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    let (code, body) = get(&addr, "/readyz");
    assert_eq!(code, 200, "the leader is ready: {body}");

    let (code, body) = get(&addr, "/leader");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).expect("/leader is JSON");
    assert_eq!(v["role"], "leader");
    assert_eq!(v["leader"]["candidate"], "a");
    assert_eq!(v["leader"]["is_self"], true);
    assert_eq!(v["term"]["token"], 1);

    assert_eq!(get(&addr, "/nope").0, 404);
}

/// A holder id and metadata full of terminal escapes, line breaks and
/// bidirectional overrides, written straight into the store as anyone with
/// write access could: text output shows them escaped (no byte reaches the
/// terminal that could move the cursor, forge a line or reorder text),
/// JSON output carries them exactly.
#[test]
fn hostile_holder_ids_and_metadata_are_escaped_in_text_output() {
    let s = Scratch::new("hostile");
    let hostile_id = "evil\x1b[2J\r\nleader:   forged\u{202e}\u{9b}31m\x07";
    let record = tenure::LeaseRecord {
        holder: Some(tenure::Holder {
            id: hostile_id.to_owned(),
            incarnation: 1,
        }),
        token: 7,
        term: Duration::from_secs(60),
        renewed_at: tenure::WallTime::now(),
        expires_at: tenure::WallTime::now() + Duration::from_secs(60),
        metadata: tenure::Metadata::new().with("k\x1b]0;title\x07", "v\nforged: line"),
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        use tenure::LeaseStore;
        let store = tenure_sqlite::SqliteStore::connect(s.dir.join("tenure.db"))
            .await
            .expect("open");
        let group = tenure::GroupName::new("g").expect("group");
        store
            .compare_and_swap(&group, None, &record)
            .await
            .expect("plant");
    });
    let clean = |what: &str, text: &str| {
        for bad in ['\x1b', '\r', '\x07', '\u{9b}', '\u{202e}'] {
            assert!(!text.contains(bad), "{what} printed {bad:?} raw: {text:?}");
        }
        for line in text.lines() {
            assert!(
                !line.starts_with("leader:   forged") && !line.starts_with("forged: line"),
                "{what} printed a forged line: {text:?}"
            );
        }
    };

    let out = run_to_end(tenure().args(["status", "--group", "g", "--store", &s.store()]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    clean("status", &text);
    assert!(
        text.contains("evil\\u{1b}[2J\\u{d}\\u{a}leader:   forged"),
        "{text}"
    );
    assert!(
        text.contains("k\\u{1b}]0;title\\u{7}=v\\u{a}forged: line"),
        "{text}"
    );

    let out =
        run_to_end(tenure().args(["status", "--group", "g", "--json", "--store", &s.store()]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        v["leader"]["candidate"], hostile_id,
        "JSON carries the exact id"
    );
    clean("status --json", &String::from_utf8_lossy(&out.stdout));

    let mut w = Running::spawn(
        tenure()
            .args(["watch", "--group", "g", "--store", &s.store()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let mut first = String::new();
    BufReader::new(w.child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("a watch line");
    w.signal(libc::SIGTERM);
    clean("watch", &first);
    assert!(first.contains("leader evil\\u{1b}[2J"), "{first}");

    let out =
        run_to_end(tenure().args(["release", "--group", "g", "--force", "--store", &s.store()]));
    assert!(out.status.success());
    clean("release stdout", &String::from_utf8_lossy(&out.stdout));
    clean("release stderr", &String::from_utf8_lossy(&out.stderr));
}

/// Open descriptors of process `pid`.
fn fds_of(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// A flood of connections that never send a request: the leader keeps its
/// descriptors bounded (a connection beyond the cap is answered 503 and
/// closed at once), keeps its term, and serves again once the idle ones
/// have timed out.
#[test]
fn a_flood_of_idle_connections_cannot_exhaust_the_leader() {
    let mut e = Election::new("flood");
    let (a, addr, line) = leader_serving_http(&mut e);
    let baseline = fds_of(a.pid());

    let flood: Vec<TcpStream> = (0..400)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    assert!(flood.len() >= 300, "only {} connections", flood.len());
    std::thread::sleep(Duration::from_millis(500));
    let during = fds_of(a.pid());
    assert!(
        during <= baseline + 32 + 8,
        "{during} descriptors with the flood, {baseline} before: the cap is 32 connections"
    );
    // The idle connections are dropped after the read timeout (2 s); the
    // endpoint serves again, and the term was never in danger.
    let healthy = wait_for(SLACK, || {
        let mut c = TcpStream::connect(&addr).ok()?;
        c.set_read_timeout(Some(SLACK)).ok()?;
        write!(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut resp = String::new();
        c.read_to_string(&mut resp).ok()?;
        resp.starts_with("HTTP/1.1 200").then_some(())
    });
    assert!(healthy.is_some(), "served again after the flood timed out");
    drop(flood);
    assert!(logged(
        &e.s.path("a.log"),
        "leadership ended: stopping CMD's process group before the term's deadline"
    )
    .is_empty());
    assert_eq!(e.starts().len(), 1);
    assert!(!group_members(line.pgid).is_empty(), "CMD still runs");
}
