//! Connection options, parsed from a `zk://` URL.
//!
//! Parsed here, not by the client library, so that no error message, log
//! line or `Debug` output can ever echo the password in the URL.

use std::time::Duration;
use tenure::store::secret::Secret;

use crate::error::ZkStoreError;
use crate::names;

/// The node under which the group nodes live when the URL names none.
pub const DEFAULT_PREFIX: &str = "/tenure";

/// The default bound on connecting and on each request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default ZooKeeper session timeout asked of the server (which clamps
/// it to its `minSessionTimeout`..`maxSessionTimeout`, 4 s..40 s with the
/// default `tickTime`).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// ZooKeeper's client port when a host names none.
pub const DEFAULT_PORT: u16 = 2181;

/// The options a ZooKeeper URL takes, in the order its error lists them.
const OPTIONS: &[&str] = &["timeout", "session_timeout"];

/// Where and how to reach ZooKeeper.
///
/// Built from a URL by [`ZkOptions::from_url`]:
///
/// ```text
/// zk://[user:password@]host[:port][,host[:port]...][/prefix/node][?option=value&...]
/// zookeeper://...   (the same)
/// ```
///
/// The hosts are the ensemble's (the client connects to one and moves to
/// another when it fails); the port defaults to 2181. The path is the node
/// under which every group gets a node of its own (`/tenure` when the URL
/// has none), as a chroot would be: `zk://h:2181/services/billing/leases`.
/// User and password are percent-decoded; a password may hold `@` and `+`
/// as they are, but writes `/ ? #` as `%2F %3F %23`, and an `@` after the
/// host is written `%40` (a URL with a raw one there is refused: see
/// [`tenure::store::url`]). When given, they authenticate the session with
/// ZooKeeper's `digest` scheme.
///
/// | option | meaning | default |
/// |---|---|---|
/// | `timeout` | bound on connecting and on each request (`500ms`, `5s`); also how long a silent connection is given before the client moves to another server | `5s` |
/// | `session_timeout` | the ZooKeeper session timeout asked for (the server clamps it) | `30s` |
///
/// ```
/// use tenure_zookeeper::ZkOptions;
/// let o = ZkOptions::from_url("zk://app:s3cret@10.0.0.5,10.0.0.6:2182/services/leases?timeout=2s")?;
/// assert_eq!(o.connect_string(), "10.0.0.5:2181,10.0.0.6:2182");
/// assert_eq!(o.prefix(), "/services/leases");
/// assert!(!format!("{o:?}").contains("s3cret"));
/// assert_eq!(o.describe(), "zk://app@10.0.0.5:2181,10.0.0.6:2182/services/leases");
/// # Ok::<(), tenure_zookeeper::ZkStoreError>(())
/// ```
#[derive(Clone, Debug)]
pub struct ZkOptions {
    pub(crate) hosts: Vec<String>,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<Secret>,
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
    pub(crate) session_timeout: Duration,
}

impl ZkOptions {
    /// Parses a `zk://` or `zookeeper://` URL (see the type's docs). Errors
    /// name the part that is wrong, never the password.
    pub fn from_url(url: &str) -> Result<Self, ZkStoreError> {
        fn bad(reason: impl ToString) -> ZkStoreError {
            ZkStoreError::InvalidUrl {
                reason: reason.to_string(),
            }
        }
        let parts = tenure::store::url::split_store_url(
            url,
            &["zk", "zookeeper"],
            "zk:// (or zookeeper://)",
        )
        .map_err(bad)?;
        let (user, password) =
            tenure::store::url::user_and_password(parts.userinfo, "zk://user:password@host:2181")
                .map_err(bad)?;
        if parts.hosts.is_empty() {
            return Err(bad("no host: write zk://host:2181/prefix"));
        }
        let list = tenure::store::url::host_list(parts.hosts, DEFAULT_PORT, "host").map_err(bad)?;
        let (path, query) = (parts.path, parts.query);
        let prefix = parse_prefix(path).map_err(bad)?;
        let mut options = ZkOptions {
            hosts: list,
            user,
            password,
            prefix,
            timeout: DEFAULT_TIMEOUT,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
        };
        for pair in tenure::store::url::known_query_pairs(query, OPTIONS) {
            let (name, value) = pair.map_err(bad)?;
            match name.as_str() {
                "timeout" => {
                    options.timeout =
                        tenure::store::url::parse_duration(&name, &value).map_err(bad)?
                }
                "session_timeout" => {
                    options.session_timeout =
                        tenure::store::url::parse_duration(&name, &value).map_err(bad)?
                }
                // known_query_pairs passed only the names in OPTIONS: one
                // without an arm here is a bug, refused, never ignored.
                other => return Err(bad(tenure::store::url::unknown_option(other, OPTIONS))),
            }
        }
        options.check().map_err(bad)?;
        Ok(options)
    }

    fn check(&self) -> Result<(), String> {
        if self.timeout.is_zero() {
            return Err("timeout is zero: give a positive duration such as 5s".into());
        }
        if self.session_timeout < Duration::from_millis(100)
            || self.session_timeout > Duration::from_secs(3600)
        {
            return Err(
                "session_timeout must be between 100ms and 1h (the server clamps it further)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Replaces the node under which the groups live (an absolute
    /// ZooKeeper path such as `/tenure`).
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self, ZkStoreError> {
        self.prefix = parse_prefix(prefix).map_err(|reason| ZkStoreError::InvalidUrl { reason })?;
        Ok(self)
    }

    /// Replaces the bound on connecting and on each request.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Replaces the session timeout asked of the server.
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// The node under which every group has its node.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bound on connecting and on each request.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The session timeout asked of the server.
    pub fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// The digest user, if any (the password is never exposed).
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The hosts as the client library takes them: `host:port,host:port`.
    pub fn connect_string(&self) -> String {
        self.hosts.join(",")
    }

    /// The URL without the password: what
    /// [`describe`](tenure::LeaseView::describe) shows.
    pub fn describe(&self) -> String {
        let user = tenure::store::url::shown_user(self.user.as_deref());
        format!("zk://{user}{}{}", self.connect_string(), self.prefix)
    }
}

/// The prefix node from the URL's path: `/` or nothing is the default
/// node; otherwise every segment must be a valid ZooKeeper node name
/// (%-escapes are decoded), and the prefix may not be ZooKeeper's own
/// `/zookeeper` tree or the root.
fn parse_prefix(path: &str) -> Result<String, String> {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(DEFAULT_PREFIX.to_owned());
    }
    let Some(inner) = trimmed.strip_prefix('/') else {
        return Err("the prefix must be an absolute path such as /tenure".into());
    };
    let mut prefix = String::with_capacity(trimmed.len());
    for segment in inner.split('/') {
        let decoded = tenure::store::url::percent_decode(segment).ok_or_else(|| {
            "the prefix path has an invalid %-escape or is not UTF-8 (write % as %25)".to_owned()
        })?;
        if decoded.is_empty() {
            return Err("the prefix path has an empty segment (//): write /a/b".into());
        }
        if decoded.contains('/') {
            return Err("a prefix segment may not hold an escaped / (%2F)".into());
        }
        if !names::is_valid_node_name(&decoded) {
            return Err(
                "a prefix segment is not a valid ZooKeeper node name (., .., or characters ZooKeeper refuses)"
                    .into(),
            );
        }
        prefix.push('/');
        prefix.push_str(&decoded);
    }
    if prefix == "/zookeeper" || prefix.starts_with("/zookeeper/") {
        return Err(
            "/zookeeper is ZooKeeper's own tree: choose another prefix such as /tenure".into(),
        );
    }
    Ok(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_testkit::{assert_hostile_password_handled, assert_url_refusals};

    #[test]
    fn parses_the_forms_users_write() {
        let o = ZkOptions::from_url("zk://127.0.0.1:2181").unwrap();
        assert_eq!(o.connect_string(), "127.0.0.1:2181");
        assert_eq!(o.prefix(), DEFAULT_PREFIX);
        assert_eq!(o.user(), None);
        let o = ZkOptions::from_url(
            "ZooKeeper://u:p%40ss@a,b:2182,[::1]:3/x/y%20z/?timeout=250ms&session_timeout=8s",
        )
        .unwrap();
        assert_eq!(o.connect_string(), "a:2181,b:2182,[::1]:3");
        assert_eq!(
            (o.user.as_deref(), o.password.as_ref().map(Secret::expose)),
            (Some("u"), Some("p@ss"))
        );
        assert_eq!(o.prefix(), "/x/y z");
        assert_eq!(o.timeout(), Duration::from_millis(250));
        assert_eq!(o.session_timeout(), Duration::from_secs(8));
        assert_eq!(ZkOptions::from_url("zk://h/").unwrap().prefix(), "/tenure");
    }

    #[test]
    fn errors_name_the_part_and_never_the_password() {
        assert_url_refusals(
            ZkOptions::from_url,
            &[
                ("etcd://u:pw-secret@h:1", "scheme"),
                ("zk://u:pw-secret@h:0", "port"),
                ("zk://u:pw-secret@h:99999", "port"),
                ("zk://u:pw-secret@h:1//x", "empty segment"),
                ("zk://u:pw-secret@h:1/a/../b", "not a valid"),
                ("zk://u:pw-secret@h:1/zookeeper/x", "ZooKeeper's own"),
                ("zk://u:pw-secret@h:1/a%2Fb", "%2F"),
                ("zk://u:pw-secret@h:1/a%zz", "%-escape"),
                (
                    "zk://u:pw-secret@h:1?bogus=1",
                    r#"unknown option "bogus": the options are timeout, session_timeout"#,
                ),
                ("zk://u:pw-secret@h:1?timeout=0s", "zero"),
                (
                    "zk://u:pw-secret@h:1?session_timeout=1ms",
                    "session_timeout",
                ),
                ("zk://user@h:1", "without a password"),
                ("zk://:pw-secret@h:1", "empty user"),
                ("zk:///x", "no host"),
                ("zk://u:pw-secret@h:1,,g:2", "host 2"),
                ("h:2181", "no scheme"),
            ],
        );
    }

    #[test]
    fn passwords_with_url_delimiters_parse_escaped_are_refused_raw_and_never_show() {
        let o = assert_hostile_password_handled(
            ZkOptions::from_url,
            "zk://u:{P}@h:1,g:2/p?timeout=2s",
            |o| o.password.as_ref().map(Secret::expose),
            ZkOptions::describe,
        );
        assert_eq!((o.hosts.len(), o.prefix()), (2, "/p"));
    }
}
