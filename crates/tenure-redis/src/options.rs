//! Connection options, parsed from a `redis://` or `rediss://` URL.
//!
//! The URL is parsed here rather than by the `redis` crate so that no error
//! message, log line or `Debug` output can ever echo the password in it.

use std::time::Duration;
use tenure::store::secret::Secret;

use tenure::store::tls::TlsPaths;

use crate::error::RedisStoreError;

/// The default key prefix: group `jobs` lives at key `tenure:jobs`.
pub const DEFAULT_PREFIX: &str = "tenure:";

/// The default bound on connecting and on each command.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The options a Redis URL takes, in the order its error lists them.
const OPTIONS: &[&str] = &["prefix", "timeout", "quarantine", "ca", "cert", "key"];

/// Where and how to reach Redis.
///
/// Built from a URL by [`RedisOptions::from_url`]:
///
/// ```text
/// redis://[user[:password]@]host[:port][/db][?option=value&...]
/// rediss://...                      (TLS)
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
/// | `prefix` | prepended to every group name to form its key | `tenure:` |
/// | `timeout` | bound on connecting and on each command (`500ms`, `5s`) | `5s` |
/// | `quarantine` | least time no lease is created after Redis lost its data (see the crate docs) | twice the term |
/// | `ca` | PEM file of the CA that signed the server's certificate (`rediss://` only) | web PKI roots |
/// | `cert`, `key` | PEM files of a client certificate and its key, for mutual TLS (`rediss://` only) | none |
///
/// ```
/// use tenure_redis::RedisOptions;
/// let o = RedisOptions::from_url("redis://app:s3cret@10.0.0.5:6380/2?prefix=billing:")?;
/// assert_eq!(o.prefix(), "billing:");
/// // The password never shows.
/// assert!(!format!("{o:?}").contains("s3cret"));
/// assert_eq!(o.describe(), "redis://app@10.0.0.5:6380/2 (prefix \"billing:\")");
/// # Ok::<(), tenure_redis::RedisStoreError>(())
/// ```
#[derive(Clone, Debug)]
pub struct RedisOptions {
    pub(crate) tls: bool,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) db: i64,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<Secret>,
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
    pub(crate) quarantine: Option<Duration>,
    pub(crate) tls_files: TlsPaths,
}

impl RedisOptions {
    /// Parses a `redis://` or `rediss://` URL (see the type's docs).
    ///
    /// Errors name the part of the URL that is wrong, never its password.
    pub fn from_url(url: &str) -> Result<Self, RedisStoreError> {
        fn bad(reason: impl ToString) -> RedisStoreError {
            RedisStoreError::InvalidUrl {
                reason: reason.to_string(),
            }
        }
        let parts = tenure::store::url::split_store_url(
            url,
            &["redis", "rediss"],
            "redis:// or rediss:// (TLS)",
        )
        .map_err(bad)?;
        let tls = parts.scheme == "rediss";
        let (userinfo, hostport, query) = (parts.userinfo, parts.hosts, parts.query);
        let path = parts.path.strip_prefix('/').unwrap_or("");
        let (user, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (u, p) = tenure::store::url::decode_userinfo(info).map_err(bad)?;
                ((!u.is_empty()).then_some(u), p.filter(|p| !p.is_empty()))
            }
        };
        if user.is_some() && password.is_none() {
            return Err(bad(
                "a user name without a password: write redis://user:password@host",
            ));
        }
        let (host, port) = tenure::store::url::split_host_port(hostport, 6379)
            .map_err(|e| bad(format!("{e} (redis://host:port)")))?;
        let db = if path.is_empty() {
            0
        } else {
            path.parse::<i64>()
                .ok()
                .filter(|d| *d >= 0)
                .ok_or_else(|| {
                    bad(format!(
                        "the path {path:?} is not a database number: write /0, /1, ..."
                    ))
                })?
        };
        let (tls_files, others) =
            TlsPaths::from_options(query, OPTIONS, tls, "rediss:// instead of redis://")
                .map_err(bad)?;
        let mut options = RedisOptions {
            tls,
            host,
            port,
            db,
            user,
            password: password.map(Secret::from),
            prefix: DEFAULT_PREFIX.into(),
            timeout: DEFAULT_TIMEOUT,
            quarantine: None,
            tls_files,
        };
        for (name, value) in others {
            match name.as_str() {
                "prefix" => options = options.with_prefix(value)?,
                "timeout" => {
                    options.timeout =
                        tenure::store::url::parse_timeout(&name, &value).map_err(bad)?
                }
                "quarantine" => {
                    options.quarantine =
                        Some(tenure::store::url::parse_duration(&name, &value).map_err(bad)?)
                }
                // from_options passed only the names in OPTIONS: one
                // without an arm here is a bug, refused, never ignored.
                other => return Err(bad(tenure::store::url::unknown_option(other, OPTIONS))),
            }
        }
        Ok(options)
    }

    /// Replaces the key prefix. It must be non-empty: the bare prefix is the
    /// key of the data-set marker (see the crate docs).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Result<Self, RedisStoreError> {
        let prefix = prefix.into();
        if prefix.is_empty() {
            return Err(RedisStoreError::InvalidUrl {
                reason: "the key prefix is empty: give one such as tenure: (the bare prefix is the key of tenure's data-set marker)".into(),
            });
        }
        self.prefix = prefix;
        Ok(self)
    }

    /// Replaces the bound on connecting and on each command.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the least time no lease is created after Redis lost its data
    /// (the default is twice the term of the lease being created).
    pub fn with_quarantine(mut self, quarantine: Duration) -> Self {
        self.quarantine = Some(quarantine);
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bound on connecting and on each command.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The configured quarantine, if any.
    pub fn quarantine(&self) -> Option<Duration> {
        self.quarantine
    }

    /// Whether the connection uses TLS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The ACL user, if any (the password is never exposed).
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// `host:port`, for messages.
    pub fn target(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The URL without the password, and the prefix: what
    /// [`describe`](tenure::LeaseView::describe) shows.
    pub fn describe(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let user = tenure::store::url::shown_user(self.user.as_deref());
        format!(
            "{scheme}://{user}{}/{} (prefix {:?})",
            self.target(),
            self.db,
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
        let o = RedisOptions::from_url("redis://127.0.0.1:56379").unwrap();
        assert_eq!(
            (o.host.as_str(), o.port, o.db, o.tls),
            ("127.0.0.1", 56379, 0, false)
        );
        assert_eq!(o.prefix, "tenure:");
        let o =
            RedisOptions::from_url("rediss://u:p%40ss@h/3?prefix=x%3A&timeout=250ms&quarantine=1m")
                .unwrap();
        assert_eq!((o.port, o.db, o.tls), (6379, 3, true));
        assert_eq!(o.user.as_deref(), Some("u"));
        assert_eq!(o.password.as_ref().map(Secret::expose), Some("p@ss"));
        assert_eq!(o.prefix, "x:");
        assert_eq!(o.timeout, Duration::from_millis(250));
        assert_eq!(o.quarantine, Some(Duration::from_secs(60)));
        let o = RedisOptions::from_url("redis://:only-password@[::1]:7000").unwrap();
        assert_eq!((o.host.as_str(), o.port), ("::1", 7000));
        assert_eq!(o.user, None);
        assert_eq!(o.target(), "[::1]:7000");
        // An unescaped '@' in the password still parses.
        let o = RedisOptions::from_url("redis://u:a@b@h:1").unwrap();
        assert_eq!(o.password.as_ref().map(Secret::expose), Some("a@b"));
    }

    #[test]
    fn errors_name_the_part_and_never_the_password() {
        assert_url_refusals(
            RedisOptions::from_url,
            &[
                ("http://h", "scheme"),
                // No scheme, a password holding "://": never named.
                ("u:pw-secret://h:1", "scheme"),
                ("redis://u:pw-secret@h:99999", "port"),
                ("redis://u:pw-secret@h:1/x", "database number"),
                ("redis://u:pw-secret@h:1?prefix=", "prefix is empty"),
                ("redis://u:pw-secret@h:1?ca=/x", "rediss://"),
                ("rediss://u:pw-secret@h:1?cert=/x", "cert and key"),
                (
                    "redis://u:pw-secret@h:1?bogus=1",
                    r#"unknown option "bogus": the options are prefix, timeout, quarantine, ca, cert, key"#,
                ),
                ("redis://u:pw-secret@h:1?timeout=5parsecs", "not a duration"),
                ("redis://user@h:1", "without a password"),
                ("redis://", "no host"),
            ],
        );
    }

    #[test]
    fn passwords_with_url_delimiters_parse_escaped_are_refused_raw_and_never_show() {
        let o = assert_hostile_password_handled(
            RedisOptions::from_url,
            "redis://u:{P}@h:1/2?prefix=x",
            |o| o.password.as_ref().map(Secret::expose),
            RedisOptions::describe,
        );
        assert_eq!((o.port, o.db, o.prefix.as_str()), (1, 2, "x"));
    }
}
