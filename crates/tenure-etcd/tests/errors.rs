//! Misconfiguration gets a clear, typed error that names the fix, within a
//! bounded time, and never shows the password.

mod common;

use tenure::{LeaseStore, LeaseView, StoreError};
use tenure_etcd::{EtcdStore, EtcdStoreError};
use tenure_testkit as testkit;

const SECRET: &str = "pw-Secret-7f3a";

fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} shows the password: {text}");
}

fn ok(r: (bool, String)) {
    assert!(r.0, "etcdctl failed: {}", r.1);
}

#[tokio::test(flavor = "multi_thread")]
async fn auth_errors_are_misconfigured_and_secret_free() {
    let server = common::Etcd::start();
    ok(server.ctl(&["user", "add", &format!("root:{SECRET}")]));
    ok(server.ctl(&["user", "grant-role", "root", "root"]));
    ok(server.ctl(&["user", "add", "bystander:bystander-pw"]));
    ok(server.ctl(&["auth", "enable"]));
    let url =
        |user: &str, pw: &str| format!("etcd://{user}:{pw}@127.0.0.1:{}?timeout=2s", server.port);

    // Wrong password.
    let err = EtcdStore::connect(&url("root", "wrong-pw-Secret-7f3a"))
        .await
        .unwrap_err();
    assert!(matches!(err, EtcdStoreError::Credentials { .. }), "{err:?}");
    assert!(
        err.to_string().contains("etcd://user:password@host:port"),
        "{err}"
    );
    assert_no_secret("Display", &err.to_string());
    assert_no_secret("Debug", &format!("{err:?}"));
    let store_err = StoreError::from(err);
    assert!(matches!(store_err, StoreError::Misconfigured { .. }));

    // No user at all.
    let err = EtcdStore::connect(&format!("{}?timeout=2s", server.url()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EtcdStoreError::AuthRequired { .. }),
        "{err:?}"
    );

    // A user without a role on the prefix.
    let err = EtcdStore::connect(&url("bystander", "bystander-pw"))
        .await
        .unwrap_err();
    assert!(matches!(err, EtcdStoreError::Permission { .. }), "{err:?}");
    assert!(err.to_string().contains("grant-permission"), "{err}");

    // The right password works, and nothing shows it.
    let store = EtcdStore::connect(&url("root", SECRET)).await.unwrap();
    testkit::assert_store_shown_without_secret(&store, "etcd://root@127.0.0.1:", &[SECRET]);
    let group = testkit::unique_group("auth");
    assert!(store.read(&group).await.unwrap().is_none());
    assert!(matches!(
        store
            .compare_and_swap(&group, None, &testkit::held_by("a", 1))
            .await,
        Ok(tenure::store::CasOutcome::Applied(_))
    ));

    // A user whose role is revoked while it runs: the batched operations
    // and the prefix watch fail as misconfigured, naming the fix, without
    // its password.
    let root = format!("root:{SECRET}");
    let as_root = |args: &[&str]| {
        let mut all = vec!["--user", root.as_str()];
        all.extend_from_slice(args);
        ok(server.ctl(&all));
    };
    as_root(&["role", "add", "lease-writer"]);
    as_root(&[
        "role",
        "grant-permission",
        "lease-writer",
        "--prefix=true",
        "readwrite",
        "tenure/",
    ]);
    as_root(&["user", "add", &format!("writer:{WRITER_SECRET}")]);
    as_root(&["user", "grant-role", "writer", "lease-writer"]);
    let writer = EtcdStore::connect(&url("writer", WRITER_SECRET_ESCAPED))
        .await
        .unwrap();
    let groups = [testkit::unique_group("w1"), testkit::unique_group("w2")];
    let writes: Vec<tenure::store::CasRequest> = groups
        .iter()
        .map(|g| tenure::store::CasRequest {
            group: g.clone(),
            expected: None,
            record: testkit::held_by("w", 1),
        })
        .collect();
    for r in writer.compare_and_swap_many(&writes).await.unwrap() {
        assert!(
            matches!(r, Ok(tenure::store::CasOutcome::Applied(_))),
            "{r:?}"
        );
    }
    drop(writer.watch().await.unwrap().expect("a feed"));
    as_root(&["user", "revoke-role", "writer", "lease-writer"]);
    let mut texts = Vec::new();
    for r in writer.read_many(&groups).await.unwrap() {
        let e = r.unwrap_err();
        assert!(matches!(e, StoreError::Misconfigured { .. }), "{e:?}");
        texts.push(e.to_string());
    }
    let single = writer
        .compare_and_swap(&groups[0], None, &testkit::held_by("w", 2))
        .await
        .unwrap_err();
    assert!(
        matches!(single, StoreError::Misconfigured { .. }),
        "{single:?}"
    );
    texts.push(single.to_string());
    // Batched writes are nested Txns: refused by etcd releases with the 2026
    // fix of the nested-Txn RBAC bypass, carried out by older ones such as
    // the 3.4.23 on this machine (see the crate docs).
    for r in writer.compare_and_swap_many(&writes).await.unwrap() {
        match r {
            Err(e) => {
                assert!(matches!(e, StoreError::Misconfigured { .. }), "{e:?}");
                texts.push(e.to_string());
            }
            Ok(outcome) => {
                eprintln!("this etcd does not check permissions inside nested Txns: {outcome:?}")
            }
        }
    }
    let e = writer.watch().await.unwrap_err();
    assert!(matches!(e, StoreError::Misconfigured { .. }), "{e:?}");
    texts.push(e.to_string());
    for text in texts {
        assert!(text.contains("grant-permission"), "{text}");
        assert!(
            !text.contains("wr1ter-S3cret"),
            "shows the password: {text}"
        );
    }
}

const WRITER_SECRET: &str = "wr1ter-S3cret/?#@+x";
/// [`WRITER_SECRET`] as a URL carries it: a raw `/ ? #` is refused.
const WRITER_SECRET_ESCAPED: &str = "wr1ter-S3cret%2F%3F%23%40+x";

#[tokio::test(flavor = "multi_thread")]
async fn tls_to_a_plain_server_fails_clearly_and_quickly() {
    let server = common::Etcd::start();
    let err = testkit::tls_to_a_plain_server_fails(
        EtcdStore::connect(&format!(
            "etcds://root:{SECRET}@127.0.0.1:{}?timeout=1s&ca=/etc/ssl/certs/ca-certificates.crt",
            server.port
        )),
        "use etcd:// instead of etcds://",
        SECRET,
    )
    .await;
    assert!(matches!(err, EtcdStoreError::Tls { .. }), "{err:?}");

    let err = EtcdStore::connect(&format!(
        "etcds://127.0.0.1:{}?ca=/nonexistent/ca.pem",
        server.port
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, EtcdStoreError::TlsFile { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_absent_server_is_unavailable_within_the_timeout() {
    testkit::unreachable_is_unavailable(
        |at| async move { EtcdStore::connect(&format!("etcd://{at}?timeout=1s")).await },
        EtcdStoreError::is_transient,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_value_is_a_record_error_and_never_overwritten() {
    let Some(url) = testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    let store = EtcdStore::connect(&url).await.unwrap();
    let group = testkit::unique_group("foreign");
    let key = store.key(&group);
    let raw = etcd_client::Client::connect([url.trim_start_matches("http://")], None)
        .await
        .unwrap();
    raw.kv_client()
        .put(key.clone(), "locked by cron", None)
        .await
        .unwrap();
    assert!(matches!(
        store.read(&group).await,
        Err(StoreError::Record { .. })
    ));
    assert_eq!(
        store
            .compare_and_swap(&group, None, &testkit::held_by("a", 1))
            .await
            .unwrap(),
        tenure::store::CasOutcome::Conflict
    );
    let resp = raw.kv_client().get(key, None).await.unwrap();
    assert_eq!(resp.kvs()[0].value(), b"locked by cron");
}
