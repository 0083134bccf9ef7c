//! Connection options: a `mysql://` or `mariadb://` URL and tenure's own
//! parameters.

use std::fmt;
use std::time::Duration;

use tenure::store::secret::Secret;
use tenure::store::tls::TlsPaths;

use crate::error::MysqlStoreError;

/// The default bound on connecting and on each reply.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the change feed polls the table by default.
pub const DEFAULT_POLL: Duration = Duration::from_millis(250);

/// The least poll interval.
const MIN_POLL: Duration = Duration::from_millis(10);

/// The default number of connections for operations.
pub(crate) const DEFAULT_POOL: usize = 4;

/// The most connections a store may be told to use.
pub(crate) const MAX_POOL: usize = 64;

/// The options a URL may carry, in the order the refusal lists them.
const OPTIONS: &[&str] = &[
    "table", "timeout", "pool", "poll", "tls", "ca", "cert", "key",
];

/// The port MySQL and MariaDB listen on unless told otherwise.
const DEFAULT_PORT: u16 = 3306;

/// Where and how to connect, parsed from a URL such as
/// `mysql://app:secret@db.internal:3306/app?table=tenure_leases&tls=true`
/// (`mariadb://` is the same).
///
/// The path names the database (required). The options:
///
/// | option | meaning | default |
/// |---|---|---|
/// | `table` | the lease table, a plain identifier | `tenure_leases` |
/// | `timeout` | bound on connecting and on waiting for each reply; the server gets a lock wait and a statement time below it (see [the crate docs](crate#timeouts)) | `5s` |
/// | `pool` | most connections for operations (1 to 64), opened as needed; each change feed has one more | `4` |
/// | `poll` | how often the change feed reads what changed (a hand-over between processes waits up to this long) | `250ms` |
/// | `tls` | `true`: TLS, verifying the server's certificate and name against the public web roots (or `ca`) | `false` |
/// | `ca` | a PEM file of CA certificates to trust (implies `tls=true`) | web roots |
/// | `cert`, `key` | a client certificate chain and its key, PEM (implies `tls=true`) | none |
///
/// Any other option is refused, naming the list. The user info is found
/// before the host only: a password writes `/ ? # @` as `%2F %3F %23 %40`
/// (`%` as `%25`; `+` stays a plus); see [`tenure::store::url`]. The password never
/// appears in an error, a log line, `Debug` output or
/// [`redacted_url`](MysqlOptions::redacted_url):
///
/// ```
/// use tenure_mysql::MysqlOptions;
/// let o = MysqlOptions::from_url("mysql://app:pa%2Fss%40w@db.internal/app?table=leases")?;
/// assert_eq!(o.table(), "leases");
/// assert_eq!(o.redacted_url(), "mysql://app:***@db.internal/app?table=leases");
/// # Ok::<(), tenure_mysql::MysqlStoreError>(())
/// ```
#[derive(Clone)]
pub struct MysqlOptions {
    pub(crate) scheme: &'static str,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<Secret>,
    pub(crate) database: String,
    pub(crate) table: Table,
    pub(crate) timeout: Duration,
    pub(crate) pool: usize,
    pub(crate) poll: Duration,
    pub(crate) tls: Option<TlsPaths>,
    redacted: String,
}

/// A validated table name, quoted for SQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Table {
    /// As written, for messages.
    pub(crate) name: String,
    /// Quoted with backticks.
    pub(crate) quoted: String,
}

impl fmt::Debug for MysqlOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlOptions")
            .field("url", &self.redacted)
            .field("table", &self.table.name)
            .field("timeout", &self.timeout)
            .field("pool", &self.pool)
            .field("poll", &self.poll)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl MysqlOptions {
    /// Parses a `mysql://` or `mariadb://` URL.
    pub fn from_url(url: &str) -> Result<Self, MysqlStoreError> {
        let redacted = tenure::store::url::redact(url);
        let bad = |reason: String| MysqlStoreError::InvalidUrl {
            url: redacted.clone(),
            reason,
        };
        let parts = tenure::store::url::split_store_url(
            url,
            &["mysql", "mariadb"],
            "mysql:// or mariadb://",
        )
        .map_err(|e| bad(e.to_string()))?;
        let scheme = if parts.scheme == "mariadb" {
            "mariadb"
        } else {
            "mysql"
        };
        let (user, password) = match parts.userinfo {
            None => (None, None),
            Some(info) => {
                let (u, p) =
                    tenure::store::url::decode_userinfo(info).map_err(|e| bad(e.to_string()))?;
                if u.is_empty() {
                    return Err(bad(format!(
                        "an empty user name: write {scheme}://user:password@host/database"
                    )));
                }
                (Some(u), p.map(Secret::new))
            }
        };
        if parts.hosts.contains(',') {
            return Err(bad(
                "one host only: point the URL at the primary (or at a proxy in front of it)".into(),
            ));
        }
        if parts.hosts.is_empty() {
            return Err(bad("no host given".into()));
        }
        let (host, port) = tenure::store::url::split_host_port(parts.hosts, DEFAULT_PORT)
            .map_err(|e| bad(e.to_string()))?;
        let database = tenure::store::url::percent_decode(parts.path.trim_start_matches('/'))
            .ok_or_else(|| bad("the database name has an invalid %-escape".into()))?;
        if database.is_empty() || database.contains('/') {
            return Err(bad(format!(
                "name the database in the path: {scheme}://user:password@host:3306/DATABASE"
            )));
        }
        let (files, others) =
            TlsPaths::from_options(parts.query, OPTIONS, true, "tls=true").map_err(bad)?;
        let mut table = "tenure_leases".to_owned();
        let mut timeout = DEFAULT_TIMEOUT;
        let mut pool = DEFAULT_POOL;
        let mut poll = DEFAULT_POLL;
        let mut tls = files != TlsPaths::default();
        for (name, value) in others {
            match name.as_str() {
                "table" => table = value,
                "timeout" => {
                    timeout = tenure::store::url::parse_timeout(&name, &value)
                        .map_err(|e| bad(e.to_string()))?;
                }
                "poll" => {
                    poll = tenure::store::url::parse_timeout(&name, &value)
                        .map_err(|e| bad(e.to_string()))?;
                    if poll < MIN_POLL {
                        return Err(bad(format!(
                            "poll must be at least {MIN_POLL:?}: each poll is a statement on the server"
                        )));
                    }
                }
                "pool" => {
                    pool = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_POOL).contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "pool must be a number of connections from 1 to {MAX_POOL}"
                            ))
                        })?;
                }
                "tls" => {
                    let on = tenure::store::url::parse_bool(&name, &value)
                        .map_err(|e| bad(e.to_string()))?;
                    if !on && tls {
                        return Err(bad(
                            "tls=false with ca, cert or key: drop the files or the tls=false"
                                .into(),
                        ));
                    }
                    tls = on;
                }
                // The list given to from_options holds no other name.
                other => {
                    return Err(bad(
                        tenure::store::url::unknown_option(other, OPTIONS).to_string()
                    ))
                }
            }
        }
        Ok(MysqlOptions {
            scheme,
            host,
            port,
            user,
            password,
            database,
            table: Table::parse(&table).map_err(bad)?,
            timeout,
            pool,
            poll,
            tls: tls.then_some(files),
            redacted,
        })
    }

    /// The URL with any password replaced by `***`, for logs.
    pub fn redacted_url(&self) -> &str {
        &self.redacted
    }

    /// The URL's scheme: `mysql` or `mariadb` (the same protocol).
    pub fn scheme(&self) -> &'static str {
        self.scheme
    }

    /// The table the leases live in.
    pub fn table(&self) -> &str {
        &self.table.name
    }

    /// The database named in the URL's path.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The bound on connecting and on each reply.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The most connections operations use at once.
    pub fn pool(&self) -> usize {
        self.pool
    }

    /// How often the change feed polls.
    pub fn poll(&self) -> Duration {
        self.poll
    }

    /// Whether connections use TLS.
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The password the URL carried, for tests of the URL rules.
    #[doc(hidden)]
    pub fn password_for_tests(&self) -> Option<&str> {
        self.password.as_ref().map(Secret::expose)
    }

    /// `host:port`, for messages.
    pub(crate) fn server(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl Table {
    fn parse(name: &str) -> Result<Table, String> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!(
                "table {name:?} is not a plain identifier: use up to 64 letters, digits and _ \
                 (the table lives in the URL's database)"
            ));
        }
        Ok(Table {
            name: name.to_owned(),
            quoted: format!("`{name}`"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_options_and_refuses_the_rest_naming_the_list() {
        let o = MysqlOptions::from_url(
            "mariadb://app:s3cret@db:3307/leases?table=ops_leases&timeout=2s&pool=2&poll=100ms",
        )
        .unwrap();
        assert_eq!(o.scheme, "mariadb");
        assert_eq!((o.host.as_str(), o.port), ("db", 3307));
        assert_eq!(o.database(), "leases");
        assert_eq!(o.table.quoted, "`ops_leases`");
        assert_eq!(o.timeout(), Duration::from_secs(2));
        assert_eq!(o.pool(), 2);
        assert_eq!(o.poll(), Duration::from_millis(100));
        assert!(!o.tls());
        assert!(!format!("{o:?}").contains("s3cret"));
        let d = MysqlOptions::from_url("MySQL://db/x").unwrap();
        assert_eq!(
            (d.port, d.timeout, d.pool, d.poll),
            (3306, DEFAULT_TIMEOUT, DEFAULT_POOL, DEFAULT_POLL)
        );
        assert!(d.user.is_none() && d.password.is_none());
        let t = MysqlOptions::from_url("mysql://db/x?ca=/etc/ca%20dir/ca.pem").unwrap();
        assert!(t.tls());
        assert!(MysqlOptions::from_url("mysql://db/x?tls=yes")
            .unwrap()
            .tls());
        tenure_testkit::assert_url_refusals(
            MysqlOptions::from_url,
            &[
                (
                    "mysql://u:pw-secret@h/db?bogus=1",
                    "the options are table, timeout",
                ),
                (
                    "mysql://u:pw-secret@h/db?table=a;drop",
                    "not a plain identifier",
                ),
                (
                    "mysql://u:pw-secret@h/db?table=a.b",
                    "not a plain identifier",
                ),
                ("mysql://u:pw-secret@h", "name the database"),
                ("mysql://u:pw-secret@h/", "name the database"),
                ("mysql://u:pw-secret@h/a/b", "name the database"),
                ("mysql://u:pw-secret@a,b/db", "one host only"),
                ("mysql://u:pw-secret@/db", "no host"),
                ("mysql://u:pw-secret@h:0/db", "port"),
                ("mysql://u:pw-secret@h:99999/db", "port"),
                ("mysql://:pw-secret@h/db", "empty user name"),
                ("postgres://u:pw-secret@h/db", "mysql:// or mariadb://"),
                ("u:pw-secret://pw-secret@h/db", "mysql://"),
                ("mysql://u:pw-secret@h/db?pool=0", "pool must be"),
                ("mysql://u:pw-secret@h/db?pool=65", "pool must be"),
                ("mysql://u:pw-secret@h/db?timeout=0s", "timeout"),
                ("mysql://u:pw-secret@h/db?timeout=soon", "timeout"),
                ("mysql://u:pw-secret@h/db?poll=0s", "poll"),
                ("mysql://u:pw-secret@h/db?poll=1ms", "poll must be at least"),
                ("mysql://u:pw-secret@h/db?tls=maybe", "tls"),
                ("mysql://u:pw-secret@h/db?tls=false&ca=/c.pem", "tls=false"),
                (
                    "mysql://u:pw-secret@h/db?cert=/c.pem",
                    "cert and key go together",
                ),
                ("mysql://u:pw-secret@h/db?timeout", "without a value"),
                (
                    "mysql://u:pw-secret@h/db?password=pw-secret",
                    "unknown option",
                ),
            ],
        );
    }

    #[test]
    fn a_hostile_password_parses_escaped_is_refused_raw_and_never_shows() {
        let o = tenure_testkit::assert_hostile_password_handled(
            MysqlOptions::from_url,
            "mysql://app:{P}@db:3306/leases?table=t",
            MysqlOptions::password_for_tests,
            |o| o.redacted_url().to_owned(),
        );
        assert_eq!(o.user.as_deref(), Some("app"));
        assert_eq!(o.database(), "leases");
        assert_eq!(o.redacted_url(), "mysql://app:***@db:3306/leases?table=t");
        // A password holding '%' as %25.
        let o = MysqlOptions::from_url("mysql://app:100%25%2F@db/x").unwrap();
        assert_eq!(o.password_for_tests(), Some("100%/"));
    }

    #[test]
    fn absurd_timeouts_are_refused_or_kept_never_panic() {
        assert!(MysqlOptions::from_url("mysql://h/db?timeout=1e400").is_err());
        let o = MysqlOptions::from_url("mysql://h/db?timeout=100000000s").unwrap();
        assert_eq!(o.timeout(), Duration::from_secs(100_000_000));
    }
}
