//! What the unit tests that need the shared ZooKeeper server share.

/// The `zk://` URL of a prefix of its own, named after `label`, on the
/// shared test server (`TENURE_TEST_ZOOKEEPER`, which `scripts/servers.sh`
/// exports); `None` (skip) when it is missing outside CI.
pub(crate) fn own_prefix_url(label: &str) -> Option<String> {
    let server = tenure_testkit::server_url("TENURE_TEST_ZOOKEEPER")?;
    Some(format!(
        "{server}/tenure-{label}-{:x}",
        tenure_testkit::unique_suffix()
    ))
}
