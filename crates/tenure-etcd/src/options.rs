//! Connection options, parsed from an `etcd://` or `etcds://` URL.
//!
//! Parsed here, not by the client library, so that no error message, log
//! line or `Debug` output can ever echo the password in the URL.

use std::time::Duration;
use tenure::store::secret::Secret;

use tenure::store::tls::TlsPaths;

use crate::error::EtcdStoreError;

/// The default key prefix: group `jobs` lives at key `tenure/jobs`.
pub const DEFAULT_PREFIX: &str = "tenure/";

/// The default bound on connecting and on each request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The options an etcd URL takes, in the order its error lists them.
const OPTIONS: &[&str] = &["prefix", "timeout", "ca", "cert", "key"];

/// Where and how to reach etcd.
///
/// Built from a URL by [`EtcdOptions::from_url`]:
///
/// ```text
/// etcd://[user:password@]host:port[,host:port...][?option=value&...]
/// etcds://...                 (TLS)
/// http://host:port, https://host:port   (etcd's own endpoint form, one endpoint)
/// ```
///
/// User and password are percent-decoded; a password may hold `@` and `+`
/// as they are, but writes `/ ? #` as `%2F %3F %23`, and an `@` after the
/// host is written `%40` (a URL with a raw one there is refused: see
/// [`tenure::store::url`]). Query
/// options:
///
/// | option | meaning | default |
/// |---|---|---|
/// | `prefix` | prepended to every group name to form its key | `tenure/` |
/// | `timeout` | bound on connecting and on each request (`500ms`, `5s`) | `5s` |
/// | `ca` | PEM file of the CA that signed the servers' certificates (required with TLS) | none |
/// | `cert`, `key` | PEM files of a client certificate and its key, for mutual TLS | none |
///
/// ```
/// use tenure_etcd::EtcdOptions;
/// let o = EtcdOptions::from_url("etcds://app:s3cret@10.0.0.5:2379,10.0.0.6:2379?ca=/etc/etcd/ca.pem")?;
/// assert_eq!(o.endpoints(), ["https://10.0.0.5:2379", "https://10.0.0.6:2379"]);
/// assert!(!format!("{o:?}").contains("s3cret"));
/// assert_eq!(o.describe(), "etcds://app@10.0.0.5:2379,10.0.0.6:2379 (prefix \"tenure/\")");
/// # Ok::<(), tenure_etcd::EtcdStoreError>(())
/// ```
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    pub(crate) tls: bool,
    pub(crate) hosts: Vec<String>,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<Secret>,
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
    pub(crate) tls_files: TlsPaths,
}

impl EtcdOptions {
    /// Parses an `etcd://`, `etcds://`, `http://` or `https://` URL (see the
    /// type's docs). Errors name the part that is wrong, never the password.
    pub fn from_url(url: &str) -> Result<Self, EtcdStoreError> {
        fn bad(reason: impl ToString) -> EtcdStoreError {
            EtcdStoreError::InvalidUrl {
                reason: reason.to_string(),
            }
        }
        let parts = tenure::store::url::split_store_url(
            url,
            &["etcd", "etcds", "http", "https"],
            "etcd:// or etcds:// (TLS)",
        )
        .map_err(bad)?;
        let tls = matches!(parts.scheme, "etcds" | "https");
        let single = matches!(parts.scheme, "http" | "https");
        if !matches!(parts.path, "" | "/") {
            return Err(bad(
                "a path is not allowed: set the key prefix with ?prefix=...",
            ));
        }
        let (user, password) =
            tenure::store::url::user_and_password(parts.userinfo, "etcd://user:password@host:port")
                .map_err(bad)?;
        if parts.hosts.is_empty() {
            return Err(bad("no endpoint: write etcd://host:2379"));
        }
        // No default port (0 marks none given): etcd serves on 2379 and,
        // often on the same hosts, peers on 2380.
        let list = tenure::store::url::host_list(parts.hosts, 0, "endpoint").map_err(bad)?;
        if let Some(i) = list.iter().position(|h| h.ends_with(":0")) {
            return Err(bad(format!(
                "endpoint {} has no port: write host:2379",
                i + 1
            )));
        }
        if single && list.len() > 1 {
            return Err(bad(
                "several endpoints need etcd:// or etcds://, not http(s)://",
            ));
        }
        let (tls_files, others) =
            TlsPaths::from_options(parts.query, OPTIONS, tls, "etcds:// instead of etcd://")
                .map_err(bad)?;
        let mut options = EtcdOptions {
            tls,
            hosts: list,
            user,
            password,
            prefix: DEFAULT_PREFIX.into(),
            timeout: DEFAULT_TIMEOUT,
            tls_files,
        };
        for (name, value) in others {
            match name.as_str() {
                "prefix" => options = options.with_prefix(value),
                "timeout" => {
                    options.timeout =
                        tenure::store::url::parse_timeout(&name, &value).map_err(bad)?
                }
                // from_options passed only the names in OPTIONS: one
                // without an arm here is a bug, refused, never ignored.
                other => return Err(bad(tenure::store::url::unknown_option(other, OPTIONS))),
            }
        }
        if tls && options.tls_files.ca.is_none() {
            return Err(bad("TLS needs the CA that signed the etcd servers' certificates: add ?ca=/path/to/ca.pem"));
        }
        Ok(options)
    }

    /// Replaces the key prefix. An empty prefix is allowed (keys are then
    /// the bare group names) but shares the key space with everything else.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Replaces the bound on connecting and on each request.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bound on connecting and on each request.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the connection uses TLS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The etcd user, if any (the password is never exposed).
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The endpoints as the client library takes them
    /// (`http://host:port` or `https://host:port`).
    pub fn endpoints(&self) -> Vec<String> {
        let scheme = if self.tls { "https" } else { "http" };
        self.hosts
            .iter()
            .map(|h| format!("{scheme}://{h}"))
            .collect()
    }

    /// The endpoints joined by commas, for messages.
    pub fn target(&self) -> String {
        self.hosts.join(",")
    }

    /// The URL without the password, and the prefix: what
    /// [`describe`](tenure::LeaseView::describe) shows.
    pub fn describe(&self) -> String {
        let scheme = if self.tls { "etcds" } else { "etcd" };
        let user = tenure::store::url::shown_user(self.user.as_deref());
        format!(
            "{scheme}://{user}{} (prefix {:?})",
            self.target(),
            self.prefix
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_testkit::{assert_hostile_password_handled, assert_url_refusals};

    #[test]
    fn parses_the_forms_users_write() {
        let o = EtcdOptions::from_url("http://127.0.0.1:52379").unwrap();
        assert_eq!(o.endpoints(), ["http://127.0.0.1:52379"]);
        assert_eq!(o.prefix, "tenure/");
        let o =
            EtcdOptions::from_url("etcd://u:p%40ss@a:1,[::1]:2/?prefix=x/&timeout=250ms").unwrap();
        assert_eq!(o.endpoints(), ["http://a:1", "http://[::1]:2"]);
        assert_eq!(
            (o.user.as_deref(), o.password.as_ref().map(Secret::expose)),
            (Some("u"), Some("p@ss"))
        );
        assert_eq!(o.prefix, "x/");
        assert_eq!(o.timeout, Duration::from_millis(250));
        let o = EtcdOptions::from_url("etcds://h:2379?ca=/ca.pem&cert=/c.pem&key=/k.pem").unwrap();
        assert!(o.tls && o.tls_files.key.is_some());
    }

    #[test]
    fn errors_name_the_part_and_never_the_password() {
        assert_url_refusals(
            EtcdOptions::from_url,
            &[
                ("redis://h:1", "scheme"),
                // No scheme, a password holding "://": never named.
                ("u:pw-secret://h:1", "scheme"),
                ("etcd://u:pw-secret@h", "no port"),
                ("etcd://u:pw-secret@h:0", "port"),
                // No '@': "u:pw-secret" is a host and a port, never echoed.
                ("etcd://u:pw-secret", "port"),
                ("etcd://::1:2379", "brackets"),
                ("etcd://u:pw-secret@h:1/path", "path"),
                ("etcd://u:pw-secret@h:1?ca=/x", "etcds://"),
                ("etcds://u:pw-secret@h:1", "?ca="),
                ("etcds://u:pw-secret@h:1?ca=/c&cert=/x", "cert and key"),
                (
                    "etcd://u:pw-secret@h:1?bogus=1",
                    r#"unknown option "bogus": the options are prefix, timeout, ca, cert, key"#,
                ),
                ("etcd://user@h:1", "without a password"),
                ("http://a:1,b:2", "several endpoints"),
                ("etcd://", "no endpoint"),
            ],
        );
    }

    #[test]
    fn passwords_with_url_delimiters_parse_escaped_are_refused_raw_and_never_show() {
        let o = assert_hostile_password_handled(
            EtcdOptions::from_url,
            "etcd://u:{P}@h:1,g:2?prefix=x",
            |o| o.password.as_ref().map(Secret::expose),
            EtcdOptions::describe,
        );
        assert_eq!((o.hosts.len(), o.prefix.as_str()), (2, "x"));
    }
}
