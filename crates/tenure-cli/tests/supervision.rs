//! How `tenure run` holds CMD to its term when tenure itself misbehaves or
//! CMD's group does: a frozen tenure (the watchdog enforces the deadline), a
//! group member tenure may not signal (the stop is bounded), `--once` after
//! a lost term, what CMD and the watchdog may see of tenure's secrets, and
//! the exec gate that keeps CMD from running before its watchdog.

mod common;

use std::os::unix::process::CommandExt;
use std::time::Duration;

use common::*;

/// Process start-up and a loaded machine, on top of promised bounds; only
/// liveness gets slack, never the safety comparisons.
const SLACK: Duration = Duration::from_secs(5);

/// Two candidates on SQLite with a 2 s term; the leader's tenure process alone (not CMD) is
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

/// CMD runs no instruction before its watchdog is armed (a `tenure`
/// SIGKILLed in between would leave CMD's own children with nothing to end
/// them). CMD's first act here, in shell builtins only (nothing forked, so
/// as early as a shell can look), is to look through every process for a
/// child of tenure's that is the watchdog naming CMD's own group (not
/// through /proc/PID/task/*/children, which proc(5) calls unreliable while
/// children come and go).
#[test]
fn cmd_starts_only_once_its_watchdog_is_armed() {
    use std::os::unix::fs::PermissionsExt;
    const RUNS: usize = 20;
    let s = Scratch::new("armed");
    let log = s.path("armed.log");
    let check = s.path("check.sh");
    std::fs::write(
        &check,
        format!(
            r#"#!/bin/bash
armed=no
for dir in /proc/[0-9]*; do
  read -r stat < "$dir/stat" 2>/dev/null || continue
  fields=(${{stat##*) }})
  [[ ${{fields[1]}} == "$PPID" ]] || continue
  mapfile -d '' -t argv < "$dir/cmdline" 2>/dev/null || continue
  if [[ ${{argv[1]}} == watchdog && ${{argv[3]}} == "$$" ]]; then armed=yes; fi
done
echo "$armed" >> "{log}"
"#,
            log = log.display()
        ),
    )
    .expect("write the check");
    std::fs::set_permissions(&check, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for _ in 0..RUNS {
        succeeds(
            tenure()
                .args(["run", "--group", "g", "--term", "2s", "--id", "a", "--once"])
                .args(["--store", &s.store(), "--"])
                .arg(&check),
        );
    }
    let seen = std::fs::read_to_string(&log).expect("the checks' log");
    let seen: Vec<&str> = seen.lines().collect();
    assert_eq!(seen.len(), RUNS, "{seen:?}");
    assert!(
        seen.iter().all(|&a| a == "yes"),
        "CMD ran before its watchdog: {seen:?}"
    );
}

/// A CMD that cannot be started is reported as before the exec gate: by
/// the OS's own words, exit 1, and the lease released.
#[test]
fn a_cmd_that_cannot_start_is_reported_and_released() {
    let s = Scratch::new("no-cmd");
    let not_executable = s.path("plain.txt");
    std::fs::write(&not_executable, "not a program").expect("write");
    let missing = s.path("missing");
    for (cmd, says) in [
        (&missing, "No such file or directory"),
        (&not_executable, "Permission denied"),
    ] {
        let out = run_to_end(
            tenure()
                .args(["run", "--group", "g", "--term", "2s", "--id", "a", "--once"])
                .args(["--store", &s.store(), "--"])
                .arg(cmd),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let expected = format!("tenure: error: cannot start {}: {says}", cmd.display());
        assert!(stderr.contains(&expected), "{stderr}");
        let v = status_json(&s.store(), "g");
        assert_eq!(v["state"], "released", "{v}");
    }
}

/// The gate's own protocol, driven by the test as tenure would: CMD runs
/// only after "go" with an instant still to come, never when the stream
/// ends first, says anything else, or names an instant already past; it
/// says "exec" just before it starts CMD, and a failed exec comes back as
/// its OS error number.
#[test]
fn the_exec_gate_runs_cmd_only_when_told() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let s = Scratch::new("gate");
    let ran = s.path("ran");
    let marker = format!("echo ran > '{}'", ran.display());
    // Writes `said` to a gate for `argv`, then reads its whole answer.
    let gate = |argv: &[&str], said: &[u8]| {
        let (mut ours, theirs) = UnixStream::pair().expect("socket pair");
        let mut child = tenure()
            .arg("exec-gate")
            .arg("--")
            .args(argv)
            .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                theirs,
            )))
            .spawn()
            .expect("start the gate");
        ours.write_all(said).expect("write");
        ours.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let mut answer = String::new();
        ours.read_to_string(&mut answer).expect("read");
        (answer, child.wait().expect("wait").code())
    };
    let never = format!("go {}\n", u64::MAX);

    // Each refusal: what tenure said, what the gate answered, its exit code.
    for (said, answer_is, code_is) in [
        (&b""[..], "", Some(1)),
        (b"no\n", "", Some(1)),
        (b"stop", "", Some(1)),
        (b"go\n", "", Some(1)),
        (b"go soon\n", "", Some(1)),
        (b"go 18446744073709551615", "", Some(1)),
        (b"go 1\n", "late\n", Some(1)),
    ] {
        let (answer, code) = gate(&["sh", "-c", &marker], said);
        assert_eq!((answer.as_str(), code), (answer_is, code_is), "{said:?}");
        assert!(!ran.exists(), "CMD ran after {said:?}");
    }

    let (answer, code) = gate(&["sh", "-c", &marker], never.as_bytes());
    assert_eq!(answer, "exec\n", "a started CMD adds nothing to its exec");
    assert_eq!(code, Some(0));
    assert!(ran.exists(), "CMD ran after go");

    for (argv, answer_is, code_is) in [
        (&["/nonexistent/program"][..], "exec\nexec-failed 2\n", 127),
        (&["/dev/null"][..], "exec\nexec-failed 13\n", 126),
    ] {
        let (answer, code) = gate(argv, never.as_bytes());
        assert_eq!(
            (answer.as_str(), code),
            (answer_is, Some(code_is)),
            "{argv:?}"
        );
    }
}

/// A tenure stalled (paused, starved) after CMD's watchdog started and
/// before it let CMD through its gate, until past the term's deadline: the
/// watchdog ends the waiting gate, the term is lost before CMD ever ran,
/// and tenure stands again, so even with `--once` CMD runs, once, in the
/// next term. (Before, the failed "go" was taken for CMD failing to start:
/// tenure exited 1 with "cannot start sh: Broken pipe".) The stall is
/// strace delaying tenure's first socket write, the "go", by 3 s against a
/// 1 s term; strace follows only tenure's main thread, which runs its whole
/// runtime, and none of the processes it starts.
#[test]
fn a_stall_before_cmd_starts_loses_the_term_and_cmd_runs_in_the_next() {
    let Some(strace) = required_tool("strace") else {
        return;
    };
    let s = Scratch::new("stall");
    let log = s.path("ran.log");
    let out = run_to_end(
        std::process::Command::new(strace)
            .args(["-o", "/dev/null", "-e", "trace=sendto"])
            .args(["-e", "inject=sendto:delay_enter=3000000:when=1"])
            .arg(env!("CARGO_BIN_EXE_tenure"))
            .args(["run", "--group", "g", "--term", "1s", "--id", "a", "--once"])
            .args(["--store", &s.store(), "--"])
            .args(["sh", "-c", &format!("echo ran >> '{}'", log.display())]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("the term's deadline came before CMD could start"),
        "{stderr}"
    );
    let ran = std::fs::read_to_string(&log).expect("CMD ran");
    assert_eq!(ran, "ran\n", "{stderr}");
}
