//! `tenure release` without --force: it clears the lease of a holder that is
//! gone, and refuses (exit 3, naming the holder) when the holder is alive.

mod common;

use std::time::{Duration, Instant};

use common::*;

const SLACK: Duration = Duration::from_secs(5);

fn release(e: &Election) -> (Option<i32>, String, String) {
    let out = run_to_end(tenure().args(["release", "--group", "g", "--store", &e.store]));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn refuses_while_the_holder_is_alive() {
    let mut e = Election::new("release-alive");
    let (_a, line) = e.leader("a", &[], SLACK);

    let (code, stdout, stderr) = release(&e);
    assert_eq!(code, Some(3), "{stdout}{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("tenure: error: "), "{stderr}");
    assert!(
        last.contains("held by a") && last.contains("--force"),
        "{stderr}"
    );
    // Nothing was written: a still leads with its token, and its child runs.
    assert!(!group_members(line.pgid).is_empty());
    assert_eq!(e.starts().len(), 1);
}

#[test]
fn clears_the_lease_of_a_dead_holder_keeping_the_token() {
    let mut e = Election::new("release-dead");
    let (a, _) = e.leader("a", &[], SLACK);
    a.signal(libc::SIGKILL);

    let started = Instant::now();
    let (code, stdout, stderr) = release(&e);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it watched the record for a whole term first"
    );
    assert!(stdout.contains("cleared holder a (token 1"), "{stdout}");

    let v = e.status();
    assert_eq!(v["state"], "released");
    assert_eq!(v["token"], 1);

    // Nothing left to release now.
    let (code, stdout, _) = release(&e);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("nothing to release"), "{stdout}");
}

/// `release --force` against two live candidates on `store`: the leader is
/// superseded and stops, the other candidates wait the operator record out
/// for a term, and the next leader's CMD starts only after the old one's
/// last act (an instant clear would allow two leaders).
fn forced_release_never_yields_two_leaders(store: &str, label: &str) {
    let group = format!("g-{:x}", rand::random::<u64>());
    let mut e = Election::on(Scratch::new(label), store, &group).stamping();
    let (_a, _b, first) = e.two_candidates(bounds().crash_failover + SLACK);
    std::thread::sleep(Duration::from_millis(700));

    let out =
        run_to_end(tenure().args(["release", "--group", &group, "--force", "--store", store]));
    let forced_at = uptime();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let status = e.status();

    let next = e
        .started(1, bounds().crash_failover + SLACK)
        .expect("the next leader");
    std::thread::sleep(Duration::from_millis(300));
    let spans = stamp_spans(&e.s);
    let (old, new) = (spans[&first.token], spans[&next.token]);
    eprintln!(
        "{label}: old CMD's last stamp {:.2} s, next CMD's first {:.2} s (gap {:.0} ms), {:.2} s after the release",
        old.1,
        new.0,
        (new.0 - old.1) * 1000.0,
        new.0 - forced_at
    );
    assert!(
        old.1 < new.0,
        "the old leader's CMD worked until {} s, the next one started at {} s",
        old.1,
        new.0
    );
    assert!(
        new.0 - forced_at >= 1.9,
        "candidates waited the operator record out (2 s × 1.01): the next CMD started {:.2} s after the release",
        new.0 - forced_at
    );
    assert!(group_members(first.pgid).is_empty());
    assert_eq!(next.token, first.token + 2, "{next:?}");
    assert!(
        stdout.contains(&format!("operator record (token {})", first.token + 1)),
        "{stdout}"
    );
    let v = status;
    assert_eq!(
        v["leader"]["candidate"], "operator:tenure-release-force",
        "{v}"
    );
    assert_eq!(v["token"], first.token + 1, "{v}");
}

#[test]
fn force_supersedes_a_live_holder_without_two_leaders() {
    let s = Scratch::new("force-sqlite-db");
    forced_release_never_yields_two_leaders(&s.store(), "force-sqlite");
}

#[cfg(feature = "postgres")]
#[test]
fn force_supersedes_a_live_holder_without_two_leaders_on_postgres() {
    let Some(url) = tenure_testkit::server_url("TENURE_TEST_POSTGRES") else {
        return;
    };
    forced_release_never_yields_two_leaders(&url, "force-postgres");
}

/// `--unsafe-clear` keeps today's instant clear, loudly.
#[test]
fn unsafe_clear_releases_at_once_and_says_what_it_risks() {
    let mut e = Election::new("unsafe-clear");
    let _a = e.leader("a", &[], SLACK);
    let started = Instant::now();
    let out = run_to_end(tenure().args([
        "release",
        "--group",
        "g",
        "--unsafe-clear",
        "--store",
        &e.store,
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(2), "at once");
    assert!(stderr.contains("TWO LEADERS AT ONCE"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("cleared holder a (token 1"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
