//! What a person meets first, with real `tenure` processes: a mistyped
//! option is refused before anything is taken, `release --to` refuses a
//! candidate it cannot see stand, `list` shows every group, completions
//! and the man page generate, and `tenure run` speaks systemd's
//! notification protocol to a socket the test binds.

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use common::*;

/// Generous bound for a process to start and lead on a loaded machine.
const SLACK: Duration = Duration::from_secs(15);

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_mistyped_option_is_refused_before_anything_is_taken() {
    let s = Scratch::new("strict");
    let store = s.store();
    for args in [
        &[
            "run", "--group", "g", "--store", &store, "--onse", "--", "echo", "hi",
        ][..],
        &[
            "run", "--group", "g", "--onse", "--store", &store, "--", "true",
        ],
        &["run", "--group", "g", "--store", &store, "-x", "true"],
    ] {
        let out = run_to_end(tenure().args(args));
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("unexpected argument"), "{err}");
        assert!(!err.contains("elected"), "{err}");
    }
    assert_eq!(
        status_json(&store, "g")["state"],
        "never",
        "nothing was taken"
    );

    // From the first word on (or after --), everything is CMD's, hyphens
    // and tenure's own option names included.
    let seen = s.path("argv");
    let script = format!("echo \"$@\" > {}", seen.display());
    succeeds(tenure().args([
        "run", "--group", "g", "--store", &store, "--once", "sh", "-c", &script, "sh", "-x",
        "--once", "--", "--term",
    ]));
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap().trim_end(),
        "-x --once -- --term"
    );
}

#[test]
fn release_to_refuses_a_candidate_it_cannot_see_stand() {
    let mut e = Election::new("release-to-nobody");
    let (_a, first) = e.leader("a", &[], SLACK);
    let before = e.status();

    let out = run_to_end(tenure().args([
        "release", "--group", "g", "--to", "nobody", "--store", &e.store,
    ]));
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("--force"), "names the override: {err}");
    let after = e.status();
    assert_eq!(after["leader"]["token"], before["leader"]["token"]);
    assert!(
        after["leader"]["metadata"]
            .get("tenure.transfer-to")
            .is_none(),
        "nothing written: {after}"
    );

    // The holder itself is no candidate to hand to.
    let out =
        run_to_end(tenure().args(["release", "--group", "g", "--to", "a", "--store", &e.store]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));

    // --force: done, with a warning.
    let out = succeeds(tenure().args([
        "release", "--group", "g", "--to", "nobody", "--force", "--store", &e.store,
    ]));
    let err = stderr_of(&out);
    assert!(err.contains("warning") && err.contains("nobody"), "{err}");
    assert_eq!(first.id, "a");
}

#[test]
fn list_shows_every_group_with_its_holder() {
    let mut e = Election::new("list");
    let (_a, _) = e.leader("a", &[], SLACK);
    // A second group, released, and one outside the prefix.
    succeeds(tenure().args([
        "run", "--group", "g2", "--store", &e.store, "--id", "b", "--once", "--", "true",
    ]));
    succeeds(tenure().args([
        "run", "--group", "other", "--store", &e.store, "--id", "c", "--once", "--", "true",
    ]));

    let out = succeeds(tenure().args(["list", "--store", &e.store, "--prefix", "g", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let groups = v["groups"].as_array().unwrap();
    let names: Vec<&str> = groups
        .iter()
        .map(|g| g["group"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["g", "g2"], "{v}");
    assert_eq!(groups[0]["state"], "held");
    assert_eq!(groups[0]["holder"], "a");
    assert_eq!(groups[0]["token"], 1);
    assert!(groups[0]["expires_in_ms"].as_i64().unwrap() > 0);
    assert_eq!(groups[1]["state"], "released");
    assert!(groups[1]["holder"].is_null());

    let out = succeeds(tenure().args(["list", "--store", &e.store]));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.ends_with('\n'), "{text:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three groups: {text}");
    assert!(lines[0].starts_with("GROUP"), "{text}");
    assert!(
        lines[1].starts_with("g ") && lines[1].contains(" a "),
        "{text}"
    );
    assert!(lines[3].starts_with("other"), "{text}");

    let out = succeeds(tenure().args(["list", "--store", &e.store, "--prefix", "zz"]));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("no groups starting with zz"));

    // status ends its output with a newline, as every command does.
    for json in [false, true] {
        let mut cmd = tenure();
        cmd.args(["status", "--group", "g", "--store", &e.store]);
        if json {
            cmd.arg("--json");
        }
        let out = succeeds(&mut cmd);
        assert!(
            out.stdout.ends_with(b"\n"),
            "{:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn completions_and_the_man_page_generate() {
    for (shell, needle) in [
        ("bash", "_tenure()"),
        ("zsh", "#compdef tenure"),
        ("fish", "complete -c tenure"),
        ("elvish", "tenure"),
        ("powershell", "tenure"),
    ] {
        let out = succeeds(tenure().args(["completions", shell]));
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(needle), "{shell}: {script}");
        assert!(
            script.contains("metrics-addr"),
            "{shell} completes run's options"
        );
    }
    let out = run_to_end(tenure().args(["completions", "tcsh"]));
    assert_eq!(out.status.code(), Some(2));

    let out = succeeds(tenure().arg("man"));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(
        page.starts_with(".ie") || page.contains(".TH tenure"),
        "{page}"
    );
    assert!(page.contains("leader"), "{page}");
    for cmd in ["run", "status", "list", "release", "completions"] {
        assert!(page.contains(cmd), "the man page lists {cmd}");
    }
    assert!(
        !page.contains("demo-candidate"),
        "hidden commands stay out of the man page"
    );
}

#[test]
fn help_shows_one_exit_code_table_everywhere() {
    for cmd in [
        &[][..],
        &["run"],
        &["status"],
        &["watch"],
        &["release"],
        &["list"],
    ] {
        let out = succeeds(tenure().args(cmd).arg("--help"));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("Exit codes (every command):"), "{cmd:?}");
        for code in [
            "  2   usage error",
            "  3   refused",
            "  4   `run --wait`",
            "  75  ",
        ] {
            assert!(text.contains(code), "{cmd:?} lacks {code:?}: {text}");
        }
    }
}

/// Reads notifications from the fake socket until `done` says so or
/// `within` passes.
fn collect(
    sock: &UnixDatagram,
    within: Duration,
    mut done: impl FnMut(&[String]) -> bool,
) -> Vec<String> {
    let until = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < until && !done(&got) {
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    got
}

#[test]
fn run_speaks_sd_notify_to_the_notify_socket() {
    let s = Scratch::new("notify");
    let path = s.path("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    let seen_env = s.path("env");
    let script = format!(
        "echo \"${{NOTIFY_SOCKET:-none}} ${{WATCHDOG_USEC:-none}}\" > {}; sleep 30",
        seen_env.display()
    );
    let mut run = Running::spawn(
        tenure()
            .args([
                "run",
                "--group",
                "g",
                "--store",
                &s.store(),
                "--term",
                "2s",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .env("NOTIFY_SOCKET", &path)
            .env("WATCHDOG_USEC", "200000")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    let got = collect(&sock, SLACK, |got| {
        got.iter().any(|m| m.contains("STATUS=leading"))
            && got.iter().filter(|m| *m == "WATCHDOG=1").count() >= 3
    });
    let ready = got
        .iter()
        .position(|m| m.contains("READY=1"))
        .expect("READY=1");
    assert_eq!(
        got.iter().filter(|m| m.contains("READY=1")).count(),
        1,
        "{got:?}"
    );
    assert!(
        got[ready].contains("STATUS="),
        "READY=1 comes with the role: {got:?}"
    );
    assert!(
        got.iter()
            .any(|m| m.contains("STATUS=leading group g with token 1")),
        "{got:?}"
    );
    assert!(
        got.iter().filter(|m| *m == "WATCHDOG=1").count() >= 3,
        "{got:?}"
    );
    // CMD neither inherits the socket nor the watchdog.
    let env = wait_for(SLACK, || {
        std::fs::read_to_string(&seen_env)
            .ok()
            .filter(|t| t.ends_with('\n'))
    })
    .expect("CMD ran");
    assert_eq!(env.trim_end(), "none none");

    run.signal(libc::SIGTERM);
    let got = collect(&sock, SLACK, |got| {
        got.iter().any(|m| m.contains("STOPPING=1"))
    });
    assert!(got.iter().any(|m| m.contains("STOPPING=1")), "{got:?}");
    let status = run.wait_timeout(SLACK).expect("tenure exits");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_missing_or_bad_notify_socket_is_no_failure() {
    let s = Scratch::new("notify-missing");
    for socket in [
        s.path("nobody-listens.sock").display().to_string(),
        "relative/path".to_owned(),
        "@".to_owned(),
        "@tenure-test-no-such-abstract-socket".to_owned(),
    ] {
        let out = run_to_end(
            tenure()
                .args([
                    "run",
                    "--group",
                    "g",
                    "--store",
                    &s.store(),
                    "--once",
                    "--",
                    "true",
                ])
                .env("NOTIFY_SOCKET", &socket)
                .env("WATCHDOG_USEC", "not-a-number"),
        );
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{socket}: {err}");
        assert!(
            err.contains("NOTIFY_SOCKET") || err.contains("notify"),
            "{socket}: warned: {err}"
        );
    }
}

#[test]
fn an_abstract_notify_socket_is_reached() {
    use std::os::linux::net::SocketAddrExt;
    let s = Scratch::new("notify-abstract");
    let name = format!("tenure-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = UnixDatagram::bind_addr(&addr).unwrap();
    let _run = Running::spawn(
        tenure()
            .args([
                "run",
                "--group",
                "g",
                "--store",
                &s.store(),
                "--",
                "sleep",
                "30",
            ])
            .env("NOTIFY_SOCKET", format!("@{name}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    let got = collect(&sock, SLACK, |got| {
        got.iter().any(|m| m.contains("READY=1"))
    });
    assert!(got.iter().any(|m| m.contains("READY=1")), "{got:?}");
}
