//! `tenure run` end to end: the real binary, a real SQLite file, real
//! processes. Terms are 2 s; every wait is bounded by what the configuration
//! promises plus generous slack for starting processes on a busy machine.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Slack for process start-up and a loaded CI machine, on top of promised
/// bounds. Safety properties are never given slack; only liveness is.
const SLACK: Duration = Duration::from_secs(5);

#[test]
fn two_candidates_run_exactly_one_child() {
    let mut e = Election::new("one-child");
    let (_a, _b, first) = e.two_candidates(bounds().crash_failover + SLACK);
    // Three terms: any second leader would have started its child by now.
    std::thread::sleep(Duration::from_secs(6));
    let lines = e.starts();
    assert_eq!(lines.len(), 1, "exactly one child ever started: {lines:?}");
    assert!(
        !group_members(first.pgid).is_empty(),
        "the leader's child still runs"
    );
    assert_eq!(first.token, 1);
    assert_eq!(e.status()["leader"]["candidate"], first.id.as_str());
}

#[test]
fn sigkill_of_the_leader_kills_its_group_and_the_other_takes_over() {
    let mut e = Election::new("crash");
    let (a, b, first) = e.two_candidates(bounds().crash_failover + SLACK);
    // The child is `sh` with a `sleep` grandchild in its group.
    assert!(
        wait_for(SLACK, || (group_members(first.pgid).len() >= 2)
            .then_some(()))
        .is_some(),
        "child and grandchild both run"
    );
    let leader = if first.id == "a" { &a } else { &b };

    let killed = Instant::now();
    leader.signal(libc::SIGKILL);

    // The dead leader's whole group goes at once (PDEATHSIG for the child,
    // the watchdog for the grandchild), long before anyone could take over.
    let gone = wait_for(bounds().crash_failover, || {
        group_members(first.pgid).is_empty().then(Instant::now)
    })
    .expect("the dead leader's process group is gone");
    assert!(
        gone - killed < bounds().takeover_wait,
        "group gone {:?} after the kill",
        gone - killed
    );

    let next = e
        .started(1, bounds().crash_failover + SLACK)
        .expect("the other candidate's child started");
    let took = killed.elapsed();
    assert_ne!(next.id, first.id);
    assert!(next.token > first.token, "{next:?} after {first:?}");
    assert!(
        took <= bounds().crash_failover + SLACK,
        "took over after {took:?}; promised {:?} (+ slack)",
        bounds().crash_failover
    );
}

#[test]
fn graceful_stop_hands_over_fast_and_stops_the_child_first() {
    graceful_handover(
        Election::new("graceful"),
        bounds().takeover_wait,
        "a released, so b did not wait out the term",
    );
}

/// Losing the lease is simulated with `tenure release --force` from a third
/// process. That exercises the real path: the leader's next renewal
/// conflicts, the library ends the term (superseded), and `tenure run` must
/// stop CMD's group before the term's deadline, cutting a long kill grace
/// short. SIGSTOPping the leader's tenure instead would not test tenure at
/// all: a frozen supervisor cannot act, so CMD would outlive the deadline
/// whatever tenure did — the case only fencing tokens cover.
#[test]
fn lost_lease_stops_the_group_before_the_deadline() {
    let s = Scratch::new("lost");
    let log = s.path("children.log");
    let term_marks = s.path("term.log");
    // Ignores SIGTERM (and so does its grandchild), so only the SIGKILL at
    // the deadline minus the margin can end it: the 30 s grace must be cut.
    let child = start_recording_script(
        &s,
        "stubborn.sh",
        &format!(
            r#"trap 'echo "TERM $$" >> "{}"' TERM
( trap '' TERM; exec sleep 1000 ) &
while :; do wait; done"#,
            term_marks.display()
        ),
    );
    let _a = Running::spawn(&mut run_cmd(&s, "a", &["--kill-grace", "30s"], &child));
    let mut groups = Groups::default();
    let first = groups.started(&log, 0, SLACK).expect("a leads");
    std::thread::sleep(Duration::from_millis(500));

    let out =
        succeeds(tenure().args(["release", "--group", "g", "--force", "--store", &s.store()]));
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning"));
    // The leader's last successful renewal was sent before this instant, so
    // its deadline is at most one term later.
    let released = Instant::now();

    let gone = wait_for(Duration::from_secs(2) + SLACK, || {
        group_members(first.pgid).is_empty().then(Instant::now)
    })
    .expect("the group is gone");
    assert!(
        std::fs::read_to_string(&term_marks)
            .unwrap_or_default()
            .contains(&format!("TERM {}", first.pgid)),
        "CMD got SIGTERM first"
    );
    assert!(
        gone - released < Duration::from_secs(2) + Duration::from_secs(1),
        "gone {:?} after the release: the 30 s grace was cut to the term's deadline",
        gone - released
    );
    // tenure's own measurement, on the clock the deadline is kept on.
    let a_log = s.path("a.log");
    let stop =
        wait_logged(&a_log, "CMD's process group is gone", SLACK).expect("a logged the stop");
    assert_eq!(stop["fields"]["killed"], true, "{stop}");
    assert!(
        stop["fields"]["left_ms"].as_u64().is_some_and(|ms| ms > 0),
        "dead before the deadline: {stop}"
    );
    assert!(logged(&a_log, "CMD's process group outlived the term's deadline").is_empty());

    // a keeps standing, wins again with a higher token, and runs CMD again.
    let again = groups
        .started(&log, 1, bounds().crash_failover + SLACK)
        .expect("a leads again");
    assert_eq!(again.id, "a");
    assert!(again.token > first.token);
}

#[test]
fn once_exits_with_the_child_status_and_releases() {
    let s = Scratch::new("once");
    let once = |cmd: &[&str]| {
        run_to_end(
            tenure()
                .args(["run", "--group", "g", "--term", "2s", "--once"])
                .args(["--store", &s.store(), "--"])
                .args(cmd),
        )
    };
    let out = once(&["sh", "-c", "test -n \"$TENURE_TOKEN\" && exit 7"]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let v = status_json(&s.store(), "g");
    assert_eq!(v["state"], "released", "{v}");
    assert_eq!(v["token"], 1);

    // Killed by a signal: 128 + the signal, as shells report it.
    let out = once(&["sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));

    let out = once(&["true"]);
    assert_eq!(out.status.code(), Some(0));
}

/// tenure is a child subreaper (so it can see a whole group die even where
/// PID 1 does not reap); orphans of CMD that exit while CMD runs must not
/// pile up as its zombies.
#[test]
fn orphans_of_the_child_are_reaped_while_it_runs() {
    let s = Scratch::new("orphans");
    let log = s.path("children.log");
    let child = start_recording_script(
        &s,
        "orphaner.sh",
        "for i in 1 2 3 4 5; do ( sleep 2 & ) ; done\nsleep 1000",
    );
    let a = Running::spawn(&mut run_cmd(&s, "a", &[], &child));
    let mut groups = Groups::default();
    let line = groups.started(&log, 0, SLACK).expect("a leads");
    // The subshells exit at once, so their `sleep 2`s are re-parented to
    // tenure, the subreaper.
    let adopted = wait_for(SLACK, || {
        let n = group_members(line.pgid)
            .into_iter()
            .filter(|&p| parent_of(p) == Some(a.pid()) && p != line.pgid)
            .count();
        (n == 5).then_some(())
    });
    assert!(adopted.is_some(), "the orphans were adopted by tenure");
    // They exit after 2 s and are reaped (tenure checks every second).
    std::thread::sleep(Duration::from_secs(2));
    let clean = wait_for(SLACK, || zombies_of(a.pid()).is_empty().then_some(()));
    assert!(clean.is_some(), "zombies left: {:?}", zombies_of(a.pid()));
    assert!(
        !group_members(line.pgid).is_empty(),
        "CMD itself still runs"
    );
}
