//! Bad input: a one-line error naming the problem, and the documented exit
//! code (2 for usage errors, as clap's own; 1 for a store that cannot be
//! opened). Secrets in URLs never appear.

mod common;

use common::*;

fn fails(args: &[&str]) -> (i32, String) {
    let out = run_to_end(tenure().args(args));
    let err = String::from_utf8_lossy(&out.stderr).trim_end().to_owned();
    (out.status.code().expect("exit code"), err)
}

/// Runs `tenure ARGS`, which must exit `code` with a one-line error that
/// says each of `says` and never shows the password "hunter2".
fn fails_saying(args: &[&str], code: i32, says: &[&str]) {
    let (got, err) = fails(args);
    assert_eq!(got, code, "{err}");
    one_line(&err);
    for s in says {
        assert!(err.contains(s), "{err}");
    }
    assert!(!err.contains("hunter2"), "a password leaked: {err}");
}

fn one_line(err: &str) {
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("tenure: error: "), "{err:?}");
}

#[test]
fn bad_store_urls_are_usage_errors() {
    for (url, needle) in [
        ("ftp://host/x", "ftp"),
        ("/var/lib/tenure.db", "no scheme"),
        ("sqlite://", "no file path"),
        ("sqlite:///tmp/x.db?mode=ro", "query"),
        ("pstgres://app:hunter2@db:5432/x", "not a tenure store"),
        ("memory://", "memory://"),
    ] {
        fails_saying(&["status", "--group", "g", "--store", url], 2, &[needle]);
    }
    // The same through the environment, for another command.
    let out = run_to_end(
        tenure()
            .args(["release", "--group", "g"])
            .env("TENURE_STORE", "nosuch://:s3cret@cache:6379"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

/// A networked store that is built in but cannot be reached is a failure
/// (exit 1), not a usage error; one that is not built in names the cargo
/// feature (exit 2). Either way the password stays hidden.
#[test]
fn networked_stores_fail_cleanly_without_leaking_passwords() {
    for (url, feature_on) in [
        (
            "postgres://app:hunter2@no-such-host.invalid:5432/x",
            cfg!(feature = "postgres"),
        ),
        (
            "redis://app:hunter2@no-such-host.invalid:6379",
            cfg!(feature = "redis"),
        ),
        ("etcd://app:hunter2@127.0.0.1:1", cfg!(feature = "etcd")),
    ] {
        let args = ["status", "--group", "g", "--store", url];
        if feature_on {
            fails_saying(&args, 1, &["cannot open the store"]);
            // People read this line: no Debug text of a client library
            // (tonic's and hyper's transport errors print their causes so).
            let (_, err) = fails(&args);
            for debug in [
                "Os {",
                "ConnectError(",
                "kind:",
                "Status {",
                "MetadataMap",
                "Some(",
            ] {
                assert!(!err.contains(debug), "Debug text ({debug}) in: {err}");
            }
        } else {
            fails_saying(&args, 2, &["--features"]);
        }
    }
}

/// A URL option the store cannot read is a usage error (exit 2), found by
/// the store crate's parser before anything connects (port 1 would refuse
/// at once, which would be exit 1), and shows no password.
#[test]
fn a_bad_url_option_is_a_usage_error() {
    for (url, feature_on) in [
        (
            "redis://app:hunter2@127.0.0.1:1?timeout=abc",
            cfg!(feature = "redis"),
        ),
        (
            "postgres://app:hunter2@127.0.0.1:1/x?timeout=abc",
            cfg!(feature = "postgres"),
        ),
        (
            "etcd://app:hunter2@127.0.0.1:1?timeout=abc",
            cfg!(feature = "etcd"),
        ),
        (
            "mysql://app:hunter2@127.0.0.1:1/x?nosuch=1",
            cfg!(feature = "mysql"),
        ),
    ] {
        let (code, err) = fails(&["status", "--group", "g", "--store", url]);
        assert_eq!(code, 2, "{url}: {err}");
        one_line(&err);
        assert!(!err.contains("hunter2"), "{err}");
        assert!(!err.contains("cannot open"), "nothing was opened: {err}");
        if feature_on {
            assert!(err.contains("timeout") || err.contains("nosuch"), "{err}");
        }
    }
}

#[test]
fn a_store_that_cannot_be_opened_is_a_one_line_failure() {
    let s = Scratch::new("unopenable");
    let missing = format!("sqlite://{}/missing-dir/x.db", s.dir.display());
    fails_saying(
        &["status", "--group", "g", "--store", &missing],
        1,
        &["missing-dir"],
    );

    let not_db = s.path("notes.txt");
    std::fs::write(
        &not_db,
        "this is not a database, just text long enough to look like a file",
    )
    .unwrap();
    let not_db = format!("sqlite://{}", not_db.display());
    fails_saying(
        &["status", "--group", "g", "--store", &not_db],
        1,
        &["not a SQLite database"],
    );
}

#[test]
fn bad_timing_and_names_are_usage_errors() {
    let s = Scratch::new("usage");
    let store = s.store();
    fails_saying(
        &[
            "run", "--group", "g", "--store", &store, "--term", "0s", "--", "true",
        ],
        2,
        &["term is zero"],
    );

    let (code, err) = fails(&["run", "--group", "", "--store", &store, "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("group name is empty"), "{err}");

    // clap's own errors exit 2 too.
    let (code, err) = fails(&["run", "--group", "g", "--term", "soon", "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a duration"), "{err}");
    let (code, _) = fails(&["run", "--group", "g"]);
    assert_eq!(code, 2);

    // Below the floor the timing model can honour on a real store: refused
    // naming the smallest term, before anything is taken.
    for short in ["1ms", "99ms", "1ns"] {
        fails_saying(
            &[
                "run", "--group", "g", "--store", &store, "--term", short, "--", "true",
            ],
            2,
            &["too short", "at least 100ms"],
        );
    }
    assert_eq!(
        status_json(&store, "g")["state"],
        "never",
        "nothing was taken"
    );
}

/// On kafka:// the term is the heartbeat timeout: a URL that sets another
/// one is refused, naming both, before anything connects.
#[cfg(feature = "kafka")]
#[test]
fn kafka_term_and_heartbeat_timeout_must_agree() {
    let store = "kafka://127.0.0.1:9/t?heartbeat_timeout=5s&sasl.password=hunter2";
    fails_saying(
        &[
            "run", "--group", "g", "--store", store, "--term", "2s", "--", "true",
        ],
        2,
        &["--term 2s", "heartbeat_timeout=5s"],
    );
}

/// On kafka:// leadership follows the consumer group's assignment: there
/// is no lease record to write, so `release` is refused at once (before
/// any read), naming what to do instead, rather than failing at its write.
#[cfg(feature = "kafka")]
#[test]
fn kafka_release_is_refused_as_there_is_no_lease_to_write() {
    let store = "kafka://127.0.0.1:9/t?sasl.password=hunter2";
    for extra in [&[][..], &["--force"], &["--to", "b"]] {
        let mut args = vec!["release", "--group", "g", "--store", store];
        args.extend_from_slice(extra);
        fails_saying(
            &args,
            2,
            &["no lease to write", "stop or restart the leader"],
        );
    }
}

#[test]
fn help_has_examples_everywhere() {
    for cmd in ["run", "status", "watch", "release", "demo"] {
        let out = run_to_end(tenure().args([cmd, "--help"]));
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Examples:"), "{cmd}: {text}");
        assert!(text.contains(&format!("tenure {cmd}")), "{cmd}: {text}");
    }
}
