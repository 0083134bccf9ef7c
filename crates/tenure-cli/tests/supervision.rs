//! How `tenure run` holds CMD to its term when tenure itself misbehaves or
//! CMD's group does: a frozen tenure (the watchdog enforces the deadline), a
//! group member tenure may not signal (the stop is bounded), `--once` after
//! a lost term, and what CMD and the watchdog may see of tenure's secrets.

mod common;

use std::os::unix::process::CommandExt;
use std::time::Duration;

use common::*;

/// Process start-up and a loaded machine, on top of promised bounds; only
/// liveness gets slack, never the safety comparisons.
const SLACK: Duration = Duration::from_secs(5);

/// Issue 10, item 13, exactly as measured there: two candidates on SQLite
/// with a 2 s term; the leader's tenure process alone (not CMD) is
/// SIGSTOPped for 6 s. The other takes over meanwhile; the old CMD must be
/// dead before the new one starts. Both CMDs stamp `CLOCK_BOOTTIME` every
/// 20 ms while they run, so the comparison is of what they did, not of when
/// the test looked.
#[test]
fn a_frozen_tenure_cannot_keep_cmd_past_its_deadline() {
    frozen_leader_is_replaced_on(Election::new("frozen"));
}

/// `TENURE_STORE` may carry a password: CMD does not inherit it, and the
/// watchdog runs with an empty environment.
#[test]
fn cmd_and_the_watchdog_never_see_the_store_url() {
    let s = Scratch::new("env");
    let log = s.path("children.log");
    let env_file = s.path("cmd.env");
    let child = s.script(
        "env.sh",
        &format!(
            r#"env > "{env}"
echo "$TENURE_ID $$ $TENURE_TOKEN" >> "{log}"
sleep 1000"#,
            env = env_file.display(),
            log = log.display()
        ),
    );
    let mut cmd = tenure();
    cmd.args(["run", "--group", "g", "--term", "2s", "--id", "a", "--"])
        .arg(&child)
        .env("TENURE_STORE", s.store())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(s.path("a.log")).expect("log"));
    let a = Running::spawn(&mut cmd);
    let mut groups = Groups::default();
    groups.started(&log, 0, SLACK).expect("a leads");
    let env = std::fs::read_to_string(&env_file).expect("CMD's environment");
    assert!(env.contains("TENURE_TOKEN=1"), "{env}");
    assert!(!env.contains("TENURE_STORE"), "{env}");
    assert!(!env.contains("tenure.db"), "{env}");

    let watchdog = wait_for(SLACK, || {
        children_of(a.pid()).into_iter().find(|&p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("watchdog"))
        })
    })
    .expect("the watchdog runs");
    let environ = std::fs::read(format!("/proc/{watchdog}/environ")).expect("its environment");
    assert!(environ.is_empty(), "{}", String::from_utf8_lossy(&environ));
}

/// `--once` starts CMD at most once: after a lost term CMD is stopped and
/// tenure exits 75 instead of running it a second time.
#[test]
fn once_never_runs_cmd_twice_after_a_lost_term() {
    let mut e = Election::new("once-lost");
    let (mut a, first) = e.leader("a", &["--once"], SLACK);

    succeeds(tenure().args(["release", "--group", "g", "--force", "--store", &e.store]));
    let status = a
        .wait_timeout(bounds().takeover_wait + SLACK)
        .expect("tenure exits after losing its term");
    assert_eq!(status.code(), Some(75), "{status:?}");
    assert!(group_members(first.pgid).is_empty());
    // Long enough for a second term, had tenure stood again.
    std::thread::sleep(bounds().takeover_wait);
    assert_eq!(e.starts().len(), 1, "CMD ran once");
}

/// A member of CMD's group that tenure may not signal, as a setuid program
/// that switched users would be (`kill` fails with EPERM): tenure runs as
/// `nobody`, and the test puts a process of root's into CMD's group. The
/// stop gives up on it after SIGKILL plus its bound, logs it, and tenure
/// still releases and exits.
///
/// Needs root, to run tenure as another user: under CI=true a non-root run
/// fails rather than skipping.
#[test]
#[allow(unsafe_code, reason = "std has no call for the effective user id")]
fn a_member_tenure_may_not_signal_does_not_hang_the_stop() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "this test needs root (to run tenure as nobody) and CI=true"
        );
        eprintln!("skipped: needs root to run tenure as another user");
        return;
    }
    let s = Scratch::new("eperm");
    // nobody must write the database and the log there.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&s.dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let child = recording_child(&s);
    let log = s.path("children.log");
    let mut cmd = run_cmd(&s, "a", &["--kill-grace", "500ms"], &child);
    cmd.uid(65534).gid(65534);
    let mut a = Running::spawn(&mut cmd);
    let mut groups = Groups::default();
    let first = groups.started(&log, 0, SLACK).expect("a leads");

    // Root's process in CMD's group: the test shares tenure's session, so it
    // may move its own child there.
    let mut intruder = std::process::Command::new("sleep");
    intruder.arg("1000").process_group(first.pgid);
    let intruder = Running {
        child: intruder.spawn().expect("spawn the intruder"),
    };
    assert!(group_members(first.pgid).contains(&intruder.pid()));

    a.signal(libc::SIGTERM);
    let status = a
        .wait_timeout(Duration::from_millis(500) + Duration::from_secs(1) + SLACK)
        .expect("tenure exits although a member of CMD's group survives SIGKILL");
    assert!(status.success(), "{status:?}");
    let reported = logged(
        &s.path("a.log"),
        "members of CMD's process group survived SIGKILL (tenure may not signal them, e.g. a setuid program that switched users, or they do not die); they may outlive the term: stop them by other means",
    );
    assert_eq!(reported.len(), 1, "{:?}", log_lines(&s.path("a.log")));
    assert!(
        reported[0]["fields"]["stuck"]
            .as_str()
            .is_some_and(|v| v.contains(&intruder.pid().to_string())),
        "{}",
        reported[0]
    );
    // The lease was released on the way out.
    let v = status_json(&s.store(), "g");
    assert_eq!(v["state"], "released", "{v}");
}
