//! `tenure release` without --force: it clears the lease of a holder that is
//! gone, and refuses (exit 3, naming the holder) when the holder is alive.

mod common;

use std::time::{Duration, Instant};

use common::*;

const SLACK: Duration = Duration::from_secs(5);

fn release(s: &Scratch) -> (Option<i32>, String, String) {
    let out = run_to_end(tenure().args(["release", "--group", "g", "--store", &s.store()]));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn refuses_while_the_holder_is_alive() {
    let s = Scratch::new("release-alive");
    let child = recording_child(&s);
    let _a = Running::spawn(&mut run_cmd(&s, "a", &[], &child));
    let mut groups = Groups::default();
    let line = wait_for(SLACK, || {
        child_lines(&s.path("children.log")).into_iter().next()
    })
    .expect("a leads");
    groups.add(line.pgid);

    let (code, stdout, stderr) = release(&s);
    assert_eq!(code, Some(3), "{stdout}{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("tenure: error: "), "{stderr}");
    assert!(
        last.contains("held by a") && last.contains("--force"),
        "{stderr}"
    );
    // Nothing was written: a still leads with its token, and its child runs.
    assert!(!group_members(line.pgid).is_empty());
    assert_eq!(child_lines(&s.path("children.log")).len(), 1);
}

#[test]
fn clears_the_lease_of_a_dead_holder_keeping_the_token() {
    let s = Scratch::new("release-dead");
    let child = recording_child(&s);
    let a = Running::spawn(&mut run_cmd(&s, "a", &[], &child));
    let mut groups = Groups::default();
    let line = wait_for(SLACK, || {
        child_lines(&s.path("children.log")).into_iter().next()
    })
    .expect("a leads");
    groups.add(line.pgid);
    a.signal(libc::SIGKILL);

    let started = Instant::now();
    let (code, stdout, stderr) = release(&s);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it watched the record for a whole term first"
    );
    assert!(stdout.contains("cleared holder a (token 1"), "{stdout}");

    let out =
        run_to_end(tenure().args(["status", "--group", "g", "--json", "--store", &s.store()]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["state"], "released");
    assert_eq!(v["token"], 1);

    // Nothing left to release now.
    let (code, stdout, _) = release(&s);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("nothing to release"), "{stdout}");
}
