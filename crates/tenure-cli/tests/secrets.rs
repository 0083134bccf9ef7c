//! Passwords holding `/ ? # @ +` in store URLs, pasted as they are (a URL
//! with a raw `/ ? #` in its password is ambiguous and refused) or
//! percent-encoded: on every scheme, against unreachable ports and against
//! the real servers (wrong credentials, or accepted ones), no output and no
//! log line of any command shows any piece of them.

mod common;

use common::*;

/// A password holding every URL delimiter; each piece is distinctive, so a
/// password cut into a host, a path and a query is caught piece by piece.
const PASSWORD: &str = "Qa1/Qb2?Qc3#Qd4@Qe5+Qf6";
const PIECES: [&str; 6] = ["Qa1", "Qb2", "Qc3", "Qd4", "Qe5", "Qf6"];
/// The same password as a URL's user info carries it.
const ESCAPED: &str = "Qa1%2FQb2%3FQc3%23Qd4%40Qe5+Qf6";

/// Runs a tenure command to the end and checks that nothing it printed
/// shows any piece of the password (`what` names it in a failure): its
/// exit code and all it printed.
fn prints_no_secret(what: &str, cmd: &mut std::process::Command) -> (Option<i32>, String) {
    let out = run_to_end(cmd);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for p in PIECES {
        assert!(!text.contains(p), "{what} showed {p}: {text}");
    }
    (out.status.code(), text)
}

/// Runs `tenure ARGS` with JSON and human logs, and checks everything it
/// printed.
fn shows_no_secret(args: &[&str]) -> (Option<i32>, String) {
    let mut all = String::new();
    let mut code = None;
    for format in ["human", "json"] {
        let (c, text) = prints_no_secret(
            &format!("`tenure {args:?}`"),
            tenure().args(["--log-format", format]).args(args),
        );
        code = c;
        all.push_str(&text);
    }
    (code, all)
}

/// `tenure status` of group "g" on `url`, checked by [`shows_no_secret`].
fn status_shows_no_secret(url: &str) -> (Option<i32>, String) {
    shows_no_secret(&["status", "--group", "g", "--store", url])
}

/// Every command that opens a store, on `url`.
fn every_command(url: &str) {
    let s = Scratch::new("secrets");
    shows_no_secret(&["status", "--group", "g", "--store", url]);
    shows_no_secret(&["status", "--group", "g", "--json", "--store", url]);
    shows_no_secret(&["release", "--group", "g", "--store", url]);
    // Through the environment, as an operator would pass a secret.
    prints_no_secret(
        "`tenure run`",
        tenure()
            .args(["run", "--group", "g", "--once", "--term", "2s", "--"])
            .arg(s.script("true.sh", "exit 0"))
            .env("TENURE_STORE", url),
    );
}

/// A URL whose secret the server accepts: `status` succeeds, and no
/// command shows the secret.
#[cfg(any(feature = "zookeeper", feature = "nats"))]
fn accepted_and_never_shown(url: &str) {
    let (code, text) = status_shows_no_secret(url);
    assert_eq!(code, Some(0), "{text}");
    every_command(url);
}

/// A URL refused for a raw delimiter in its secret: `status` fails naming
/// the fix (`escape`, the delimiter percent-encoded), and does not show
/// the secret. Returns its exit code.
#[cfg(any(feature = "zookeeper", feature = "nats", feature = "kafka"))]
fn refused_naming(url: &str, escape: &str) -> Option<i32> {
    let (code, text) = status_shows_no_secret(url);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains(escape), "{text}");
    code
}

/// [`every_command`] on the URL `url` makes of each form of the password:
/// raw (refused as ambiguous) and percent-encoded (refused by the server).
#[cfg(any(
    feature = "postgres",
    feature = "redis",
    feature = "etcd",
    feature = "mysql"
))]
fn every_command_with_each_password(url: impl Fn(&str) -> String) {
    for password in [PASSWORD, ESCAPED] {
        every_command(&url(password));
    }
}

/// The `HOST:PORT` of the test server whose URL `var` holds, as
/// `SCHEME://HOST:PORT/`; `None` when it is missing outside CI.
#[cfg(any(
    feature = "redis",
    feature = "etcd",
    feature = "zookeeper",
    feature = "nats"
))]
fn server_host(var: &str, scheme: &str) -> Option<String> {
    let url = tenure_testkit::server_url(var)?;
    Some(
        url.trim_start_matches(scheme)
            .trim_end_matches('/')
            .to_owned(),
    )
}

#[test]
fn unreachable_stores_never_show_the_password() {
    let mut urls = Vec::new();
    if cfg!(feature = "postgres") {
        urls.push(format!("postgres://app:{PASSWORD}@127.0.0.1:1/db"));
        urls.push(format!(
            "postgresql://app:{PASSWORD}@127.0.0.1:1/db?sslmode=sometimes"
        ));
    }
    if cfg!(feature = "redis") {
        urls.push(format!("redis://app:{PASSWORD}@127.0.0.1:1/0"));
        urls.push(format!("rediss://:{PASSWORD}@127.0.0.1:1"));
        urls.push(format!("redis://app:{PASSWORD}@127.0.0.1:99999"));
    }
    if cfg!(feature = "etcd") {
        urls.push(format!("etcd://app:{PASSWORD}@127.0.0.1:1"));
        urls.push(format!("etcd://app:{PASSWORD}@127.0.0.1"));
    }
    if cfg!(feature = "dynamodb") {
        urls.push(format!(
            "dynamodb://tbl?endpoint=http://127.0.0.1:1&region=x&access_key_id=AKIDQz9&secret_access_key={PASSWORD}"
        ));
        urls.push(format!(
            "dynamodb://tbl?region=x&access_key_id=AKIDQz9&secret_access_key={PASSWORD}&bogus=1"
        ));
    }
    if cfg!(feature = "zookeeper") {
        urls.push(format!("zk://app:{PASSWORD}@127.0.0.1:1/tenure"));
        urls.push(format!("zk://app:{PASSWORD}@127.0.0.1:1,127.0.0.1:2"));
        urls.push(format!("zookeeper://app:{PASSWORD}@127.0.0.1:99999"));
        urls.push(format!("zk://app:{PASSWORD}@127.0.0.1:1?bogus=1"));
    }
    if cfg!(feature = "nats") {
        urls.push(format!("nats://app:{PASSWORD}@127.0.0.1:1/b"));
        urls.push(format!("nats://{PASSWORD}@127.0.0.1:1/b"));
        urls.push(format!(
            "nats+tls://app:{PASSWORD}@127.0.0.1:1/b?ca=/nonexistent"
        ));
        urls.push(format!("nats://app:{PASSWORD}@127.0.0.1:1/b?bogus=1"));
    }
    if cfg!(feature = "object-store") {
        urls.push(format!(
            "s3://bkt/p?region=us-east-1&endpoint=http://127.0.0.1:1&access_key_id=AKIDQz9&secret_access_key={PASSWORD}"
        ));
        urls.push(format!(
            "s3://bkt?endpoint=http://127.0.0.1:1&access_key_id=AKIDQz9&secret_access_key=x&session_token={PASSWORD}"
        ));
        urls.push(format!(
            "s3://bkt?access_key_id=AKIDQz9&secret_access_key={PASSWORD}&bogus=1"
        ));
        // Keys pasted before the bucket, as in other schemes' user info.
        urls.push(format!("s3://AKIDQz9:{PASSWORD}@bkt/p"));
        urls.push(format!(
            "az://cont?account=acct&endpoint=http://127.0.0.1:1&access_key={PASSWORD}"
        ));
    }
    if cfg!(feature = "mysql") {
        urls.push(format!("mysql://app:{PASSWORD}@127.0.0.1:1/db"));
        urls.push(format!(
            "mariadb://app:{PASSWORD}@127.0.0.1:1/db?tls=true&ca=/nonexistent"
        ));
        urls.push(format!("mysql://app:{PASSWORD}@127.0.0.1:1/db?bogus=1"));
        urls.push(format!("mysql://app:{PASSWORD}@127.0.0.1:1"));
    }
    if cfg!(feature = "kafka") {
        urls.push(format!("kafka://app:{PASSWORD}@127.0.0.1:1/t"));
        urls.push(format!(
            "kafka://127.0.0.1:1/t?sasl.password={PASSWORD}&bogus"
        ));
    }
    // Misspelled schemes and missing ones are parsed by the command itself.
    urls.push(format!("postgress://app:{PASSWORD}@127.0.0.1:1/db"));
    urls.push(format!("app:{PASSWORD}@127.0.0.1:1/db"));
    // libpq's key=value form is no URL.
    urls.push(format!(
        "host=127.0.0.1 port=1 user=app password={PASSWORD} dbname=x"
    ));
    urls.push("host=127.0.0.1 port=1 password=Qa1Qb2Qc3 user=app".into());
    urls.push("host=127.0.0.1 password='Qa1 Qb2' user=app".into());
    // A secret in the query holding a raw '&' leaves its tail as a word
    // without '=': refused, never named.
    if cfg!(feature = "postgres") {
        urls.push("postgres://app@127.0.0.1:1/db?password=Qa1&Qb2&sslmode=disable".into());
    }
    if cfg!(feature = "dynamodb") {
        urls.push("dynamodb://tbl?access_key_id=AKIDQz9&secret_access_key=Qa1&Qb2&region=x".into());
    }
    if cfg!(feature = "object-store") {
        urls.push("s3://bkt?access_key_id=AKIDQz9&secret_access_key=Qa1&Qb2&region=x".into());
    }
    if cfg!(feature = "kafka") {
        urls.push("kafka://127.0.0.1:1/t?sasl.password=Qa1&Qb2&group=g".into());
    }
    for url in urls {
        let (code, text) = status_shows_no_secret(&url);
        assert_ne!(code, Some(0), "{url}: {text}");
    }
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_with_a_wrong_password_never_shows_it() {
    let Some(url) = tenure_testkit::server_url("TENURE_TEST_POSTGRES") else {
        return;
    };
    let (user, host) = user_and_host(&url);
    every_command_with_each_password(|p| format!("postgres://{user}:{p}@{host}/postgres"));
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_with_a_wrong_password_never_shows_it() {
    let Some(url) = tenure_testkit::server_url("TENURE_TEST_MYSQL") else {
        return;
    };
    let (user, host) = user_and_host(&url);
    every_command_with_each_password(|p| format!("mysql://{user}:{p}@{host}/tenure"));
    every_command_with_each_password(|p| format!("mariadb://{user}:{p}@{host}/tenure"));
}

#[cfg(feature = "redis")]
#[test]
fn redis_with_a_wrong_password_never_shows_it() {
    let Some(host) = server_host("TENURE_TEST_REDIS", "redis://") else {
        return;
    };
    every_command_with_each_password(|p| format!("redis://app:{p}@{host}"));
    every_command_with_each_password(|p| format!("redis://:{p}@{host}"));
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_with_a_password_it_refuses_never_shows_it() {
    let Some(host) = server_host("TENURE_TEST_ETCD", "http://") else {
        return;
    };
    every_command_with_each_password(|p| format!("etcd://app:{p}@{host}"));
}

/// ZooKeeper's digest scheme accepts any user and password (they decide
/// only which ACLs the session passes), so here the store works with the
/// percent-encoded password: success output must not show it either; the
/// raw one is refused, naming the fix.
#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_with_a_digest_password_never_shows_it() {
    let Some(host) = server_host("TENURE_TEST_ZOOKEEPER", "zk://") else {
        return;
    };
    let node = unique("secrets");
    accepted_and_never_shown(&format!("zk://app:{ESCAPED}@{host}/{node}"));
    refused_naming(&format!("zk://app:{PASSWORD}@{host}/{node}"), "%2F");
}

/// dynalite accepts any key, so here the secret is accepted and the store
/// works: success output must not show it either.
#[cfg(feature = "dynamodb")]
#[test]
fn dynamodb_with_a_secret_key_it_accepts_never_shows_it() {
    let Some(endpoint) = tenure_testkit::server_url("TENURE_TEST_DYNAMODB") else {
        return;
    };
    let table = unique("secrets");
    every_command(&format!(
        "dynamodb://{table}?endpoint={endpoint}&region=us-east-1&create=true&access_key_id=AKIDQz9&secret_access_key={PASSWORD}"
    ));
}

/// The shared nats-server has no authorization, so it accepts any user,
/// password or token: success output must not show them either (with the
/// secret percent-encoded; raw, it is refused naming the fix).
#[cfg(feature = "nats")]
#[test]
fn nats_with_a_password_or_token_it_accepts_never_shows_it() {
    let Some(host) = server_host("TENURE_TEST_NATS", "nats://") else {
        return;
    };
    for url in [
        format!("nats://app:{ESCAPED}@{host}/tenure-secrets"),
        format!("nats://{ESCAPED}@{host}/tenure-secrets"),
    ] {
        accepted_and_never_shown(&url);
    }
    for url in [
        format!("nats://app:{PASSWORD}@{host}/tenure-secrets"),
        format!("nats://{PASSWORD}@{host}/tenure-secrets"),
    ] {
        refused_naming(&url, "%2F");
    }
}

/// moto accepts any keys, so here the secret (and a session token, both
/// holding `/ ? # @ +` as they are) is accepted and the store works:
/// success output must not show them either, nor more of the access key
/// id than its last four characters.
#[cfg(feature = "object-store")]
#[test]
fn s3_with_keys_it_accepts_never_shows_them() {
    let Some(endpoint) = tenure_testkit::server_url("TENURE_TEST_S3") else {
        return;
    };
    let prefix = unique("secrets");
    every_command(&format!(
        "s3://tenure-test/{prefix}?region=us-east-1&endpoint={endpoint}&access_key_id=Qa1IDQz9&secret_access_key={PASSWORD}"
    ));
    every_command(&format!(
        "s3://tenure-test/{prefix}?region=us-east-1&endpoint={endpoint}&access_key_id=Qa1IDQz9&secret_access_key=k&session_token={PASSWORD}"
    ));
}

/// A kafka:// URL takes credentials as parameters only, and refuses any
/// raw `@` (so a password pasted before the host is never cut up): with the
/// `@` escaped the SASL password works, unescaped it is refused, and
/// neither shows it.
#[cfg(feature = "kafka")]
#[test]
fn kafka_with_a_sasl_password_never_shows_it() {
    let Some(brokers) = tenure_testkit::server_url("TENURE_TEST_KAFKA") else {
        return;
    };
    let topic = unique("secrets");
    let escaped = PASSWORD.replace('@', "%40");
    let (code, text) = status_shows_no_secret(&format!(
        "kafka://{brokers}/{topic}?sasl.password={escaped}"
    ));
    assert_eq!(code, Some(0), "{text}");
    for url in [
        format!("kafka://{brokers}/{topic}?sasl.password={PASSWORD}"),
        format!("kafka://app:{PASSWORD}@{brokers}/{topic}"),
    ] {
        assert_eq!(
            refused_naming(&url, "%40"),
            Some(1),
            "a failure, not a usage error"
        );
    }
}

/// Connecting to an existing table logs nothing at INFO (the
/// server's "relation already exists, skipping" notice went to the log on
/// every start).
#[cfg(feature = "postgres")]
#[test]
fn postgres_connects_quietly_to_an_existing_table() {
    let Some(url) = tenure_testkit::server_url("TENURE_TEST_POSTGRES") else {
        return;
    };
    let url = format!("{url}?table=tenure_quiet_{:x}", rand::random::<u32>());
    for _ in 0..2 {
        let out = run_to_end(tenure().args(["status", "--group", "g", "--store", &url]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            !stderr.contains("already exists") && !stderr.contains("INFO"),
            "{stderr}"
        );
    }
}

/// The user and `host:port` of the test server's
/// `postgres://USER:PASS@HOST:PORT/DB` (or `mysql://`).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn user_and_host(url: &str) -> (String, String) {
    let rest = url.split_once("://").expect("scheme").1;
    let (info, after) = rest.rsplit_once('@').expect("user info");
    let user = info.split(':').next().unwrap_or("postgres").to_owned();
    let host = after.split(['/', '?']).next().expect("host").to_owned();
    (user, host)
}
