//! `tenure_connect::connect` on the stores this build has: a bad option is a
//! URL error (the configuration is at fault), an unreachable store an open
//! error, and neither shows a password. Real servers come from
//! scripts/servers.sh's environment where a test needs one.

use tenure_connect::{connect, ConnectError, UrlError};

#[tokio::test]
async fn sqlite_and_memory_open() {
    let dir = std::env::temp_dir().join(format!("tenure-connect-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}/t.db", dir.display());
    let store = connect(&url).await.expect("opens");
    assert!(store.describe().contains("t.db"));
    connect("memory://").await.expect("opens");
    let missing = format!("sqlite://{}/no-such-dir/t.db", dir.display());
    let e = connect(&missing).await.map(drop).unwrap_err();
    assert!(
        matches!(e, ConnectError::Open { .. }) && !e.is_usage(),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_bad_option_is_a_url_error_never_a_connection() {
    // Port 1 refuses at once: were the URL accepted, the error would be Open.
    for url in [
        "redis://app:hunter2@127.0.0.1:1?timeout=abc",
        "postgres://app:hunter2@127.0.0.1:1/x?timeout=abc",
        "etcd://app:hunter2@127.0.0.1:1?timeout=abc",
        "mysql://app:hunter2@127.0.0.1:1/x?timeout=abc",
        "zk://app:hunter2@127.0.0.1:1/p?timeout=abc",
        "nats://app:hunter2@127.0.0.1:1/b?timeout=abc",
    ] {
        let scheme = url.split("://").next().unwrap();
        let built = tenure_connect::scheme_named(scheme).is_some_and(|s| s.built);
        let e = connect(url).await.map(drop).unwrap_err();
        let text = e.to_string();
        assert!(e.is_usage(), "{url}: {text}");
        assert!(!text.contains("hunter2"), "{url}: {text}");
        if built {
            assert!(
                matches!(e, ConnectError::Url(UrlError::Invalid { .. })),
                "{url}: {e:?}"
            );
            assert!(text.contains("timeout"), "{url}: {text}");
        } else {
            assert!(
                matches!(e, ConnectError::Url(UrlError::NotBuiltIn { .. })),
                "{url}: {e:?}"
            );
        }
    }
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn an_unreachable_store_is_an_open_error_without_its_password() {
    let e = connect("redis://app:hunter2@127.0.0.1:1?timeout=500ms")
        .await
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(e, ConnectError::Open { .. }) && !e.is_usage(),
        "{e}"
    );
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(!format!("{e:?}").contains("hunter2"), "{e:?}");
    let parsed = tenure_connect::StoreUrl::parse("redis://app:hunter2@127.0.0.1:1").unwrap();
    assert!(!format!("{parsed} {parsed:?}").contains("hunter2"));
}
