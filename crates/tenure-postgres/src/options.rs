//! Connection options: a libpq-style URL plus tenure's own parameters.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::PostgresStoreError;
use crate::pool::{DEFAULT_POOL, MAX_POOL};

/// The default bound on connecting and on each statement.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest TCP user timeout set (twice `timeout`, at most this).
const MAX_TCP_USER_TIMEOUT: Duration = Duration::from_secs(3600);

/// Where and how to connect, parsed from a URL such as
/// `postgres://user:secret@db.internal:5432/app?sslmode=require&table=tenure_leases`.
///
/// Besides everything `tokio-postgres` understands (`sslmode`,
/// `connect_timeout`, `keepalives_idle`, `application_name`, …) three
/// parameters are tenure's:
///
/// | parameter | meaning | default |
/// |---|---|---|
/// | `table` | the lease table, optionally schema-qualified | `tenure_leases` |
/// | `ca` (or libpq's `sslrootcert`) | a PEM file of CA certificates to trust instead of the public web roots | web roots |
/// | `timeout` | bound on connecting and on waiting for each reply; the server gets `lock_timeout` = ½ and `statement_timeout` = ¾ of it (`500ms`, `5s`) | `5s` |
/// | `pool` | most connections for operations (1 to 64), opened as needed; the change feed has one more | `4` |
///
/// Dead connections are found by TCP keepalive (idle 5 s, then 3 probes
/// 1 s apart, unless the URL sets `keepalives_*`) and by a TCP user timeout
/// of twice `timeout`, at most an hour (unless the URL sets `tcp_user_timeout`).
///
/// The user info is found before the host only: a password may hold `@`
/// or `+` as they are, but writes `/ ? #` as `%2F %3F %23`; `%XX` escapes
/// are decoded (write `%` as `%25`), and an `@` after the host must be
/// written `%40` (a URL with a raw one there is refused, not guessed at:
/// see [`tenure::store::url`]). The password
/// never appears in an error, a log line, `Debug` output or
/// [`redacted_url`](PostgresOptions::redacted_url):
///
/// ```
/// use tenure_postgres::PostgresOptions;
/// let o = PostgresOptions::from_url("postgres://app:pa%2Fss%3Fw%23rd@db.internal:5432/app?table=ops.leases")?;
/// assert_eq!(o.table(), "ops.leases");
/// assert_eq!(o.redacted_url(), "postgres://app:***@db.internal:5432/app?table=ops.leases");
/// # Ok::<(), tenure_postgres::PostgresStoreError>(())
/// ```
#[derive(Clone)]
pub struct PostgresOptions {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) table: Table,
    /// The CA file, and the option that named it (`ca` or `sslrootcert`).
    pub(crate) ca: Option<(&'static str, PathBuf)>,
    pub(crate) timeout: Duration,
    pub(crate) pool: usize,
    redacted: String,
}

/// A validated, quoted table name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Table {
    /// As written, for messages.
    pub(crate) name: String,
    /// Quoted for SQL.
    pub(crate) quoted: String,
}

impl fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("url", &self.redacted)
            .field("table", &self.table.name)
            .field("timeout", &self.timeout)
            .field("pool", &self.pool)
            .finish()
    }
}

impl PostgresOptions {
    /// Parses a `postgres://` or `postgresql://` URL.
    pub fn from_url(url: &str) -> Result<Self, PostgresStoreError> {
        let redacted = tenure::store::url::redact(url);
        let bad = |why: String| PostgresStoreError::InvalidUrl {
            store: "PostgreSQL",
            url: redacted.clone(),
            reason: why,
        };
        let Some((scheme, rest)) = url.split_once("://").filter(|(s, _)| {
            s.eq_ignore_ascii_case("postgres") || s.eq_ignore_ascii_case("postgresql")
        }) else {
            return Err(bad("it must start with postgres:// or postgresql://".into()));
        };
        // Split off the user info ourselves: tokio-postgres could show
        // pieces of a password in its errors. Found in the authority only;
        // a URL with a raw '@' after the host is refused rather than
        // guessed at (a password's '/ ? #' written raw, or an '@' in the
        // query).
        let (userinfo, rest) =
            tenure::store::url::split_userinfo(rest).map_err(|e| bad(e.to_string()))?;
        let (user, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (u, p) =
                    tenure::store::url::decode_userinfo(info).map_err(|e| bad(e.to_string()))?;
                ((!u.is_empty()).then_some(u), p)
            }
        };
        let (base, query) = match rest.split_once('?') {
            Some((b, q)) => (b, q),
            None => (rest, ""),
        };
        let mut table = "tenure_leases".to_owned();
        let mut ca = None;
        let mut timeout = DEFAULT_TIMEOUT;
        let mut pool = DEFAULT_POOL;
        let mut passthrough = Vec::new();
        let mut given = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            // A word without '=' is most likely the tail of a secret
            // holding an unescaped '&' (tokio-postgres would name it).
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| bad(tenure::store::url::BARE_WORD.into()))?;
            let decoded = || {
                tenure::store::url::percent_decode(v).ok_or_else(|| {
                    bad(format!(
                        "option {k}: the value has an invalid %-escape or is not UTF-8"
                    ))
                })
            };
            match k {
                "table" => table = decoded()?,
                "ca" => ca = Some(("ca", PathBuf::from(decoded()?))),
                "sslrootcert" => ca = Some(("sslrootcert", PathBuf::from(decoded()?))),
                "timeout" => {
                    timeout = tenure::store::url::parse_timeout(k, &decoded()?)
                        .map_err(|e| bad(e.to_string()))?
                }
                "pool" => {
                    pool = decoded()?
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_POOL).contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "pool must be a number of connections from 1 to {MAX_POOL}"
                            ))
                        })?
                }
                _ => {
                    given.push(k);
                    passthrough.push(pair);
                }
            }
        }
        let libpq = if passthrough.is_empty() {
            format!("{scheme}://{base}")
        } else {
            format!("{scheme}://{base}?{}", passthrough.join("&"))
        };
        let mut config: tokio_postgres::Config = libpq
            .parse()
            .map_err(|e: tokio_postgres::Error| bad(e.to_string()))?;
        if let Some(user) = user {
            config.user(user);
        }
        if let Some(password) = password {
            config.password(password);
        }
        if config.get_hosts().is_empty() {
            return Err(bad("no host given".into()));
        }
        if !given.contains(&"connect_timeout") {
            config.connect_timeout(timeout);
        }
        if !given.contains(&"keepalives") {
            config.keepalives(true);
        }
        if !given.contains(&"keepalives_idle") {
            config.keepalives_idle(Duration::from_secs(5));
        }
        if !given.contains(&"keepalives_interval") {
            config.keepalives_interval(Duration::from_secs(1));
        }
        if !given.contains(&"keepalives_retries") {
            config.keepalives_retries(3);
        }
        if !given.contains(&"tcp_user_timeout") {
            // The kernel takes milliseconds in 32 bits; an hour is plenty.
            config.tcp_user_timeout(timeout.saturating_mul(2).min(MAX_TCP_USER_TIMEOUT));
        }
        Ok(PostgresOptions {
            config,
            table: Table::parse(&table).map_err(bad)?,
            ca,
            timeout,
            pool,
            redacted,
        })
    }

    /// The URL with any password replaced by `***`, for logs.
    pub fn redacted_url(&self) -> &str {
        &self.redacted
    }

    /// The table the leases live in.
    pub fn table(&self) -> &str {
        &self.table.name
    }

    /// The bound on connecting and on each statement.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The most connections operations use at once.
    pub fn pool(&self) -> usize {
        self.pool
    }
}

impl Table {
    fn parse(name: &str) -> Result<Table, String> {
        let parts: Vec<&str> = name.split('.').collect();
        let ok = |p: &str| {
            !p.is_empty()
                && p.len() <= 63
                && p.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if parts.len() > 2 || !parts.iter().all(|p| ok(p)) {
            return Err(format!(
                "table {name:?} is not a plain identifier: use letters, digits and _ (optionally schema.table)"
            ));
        }
        let quoted = parts
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(".");
        Ok(Table {
            name: name.to_owned(),
            quoted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_before_colon_slash_slash_that_is_no_scheme_never_shows() {
        // The password is "pw-secret://pw-secret": neither piece may show.
        tenure_testkit::assert_url_refusals(
            PostgresOptions::from_url,
            &[("app:pw-secret://pw-secret@127.0.0.1:5432/db", "postgres://")],
        );
    }

    #[test]
    fn parses_tenure_parameters_and_passes_the_rest_through() {
        let o = PostgresOptions::from_url(
            "postgres://app:s3cret@db:5433/leases?sslmode=require&table=ops.tenure&sslrootcert=/ca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(o.table.quoted, "\"ops\".\"tenure\"");
        assert_eq!(o.ca, Some(("sslrootcert", PathBuf::from("/ca.pem"))));
        // `ca` is the name every tenure store uses; libpq's is an alias.
        let c = PostgresOptions::from_url("postgres://db/x?ca=/etc/ca%20dir/ca.pem").unwrap();
        assert_eq!(c.ca, Some(("ca", PathBuf::from("/etc/ca dir/ca.pem"))));
        assert_eq!(
            o.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        assert_eq!(o.config.get_dbname(), Some("leases"));
        assert!(!format!("{o:?}").contains("s3cret"));
        assert_eq!(o.redacted_url(), "postgres://app:***@db:5433/leases?sslmode=require&table=ops.tenure&sslrootcert=/ca.pem&application_name=x");
        assert_eq!(o.timeout, DEFAULT_TIMEOUT);
        assert!(o.config.get_keepalives());
        assert_eq!(o.config.get_connect_timeout(), Some(&DEFAULT_TIMEOUT));
        let o = PostgresOptions::from_url(
            "postgres://h/db?timeout=750ms&keepalives_idle=30&connect_timeout=9",
        )
        .unwrap();
        assert_eq!(o.timeout, Duration::from_millis(750));
        assert_eq!(o.pool, DEFAULT_POOL);
        assert_eq!(
            PostgresOptions::from_url("postgres://h/db?pool=2")
                .unwrap()
                .pool(),
            2
        );
        for bad in ["0", "65", "x", ""] {
            let e = PostgresOptions::from_url(&format!("postgres://u:pw@h/db?pool={bad}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("pool must be") && !e.contains("pw@"), "{e}");
        }
        assert_eq!(o.config.get_keepalives_idle(), Duration::from_secs(30));
        assert_eq!(
            o.config.get_connect_timeout(),
            Some(&Duration::from_secs(9))
        );
    }

    #[test]
    fn absurd_timeouts_are_refused_or_clamped_never_panic() {
        assert!(PostgresOptions::from_url("postgres://h/db?timeout=0s").is_err());
        assert!(PostgresOptions::from_url("postgres://h/db?timeout=1e400").is_err());
        let o = PostgresOptions::from_url("postgres://h/db?timeout=100000000s").unwrap();
        assert_eq!(o.timeout, Duration::from_secs(100_000_000));
    }

    /// libpq's key=value form is no URL: refused, without its password;
    /// a password in the query holding a raw '&' leaves its tail as a
    /// word that neither tenure nor tokio-postgres may name.
    #[test]
    fn conninfo_strings_and_ampersand_tails_never_show() {
        for text in [
            "host=127.0.0.1 user=app password=Qa1/Qb2 dbname=x",
            "host=127.0.0.1 password='Qa1 Qb2' user=app",
            "postgres://app@127.0.0.1/db?password=Qa1&Qb2&sslmode=disable",
            "postgres://app@127.0.0.1/db?password=Qa1&Qb2",
        ] {
            let e = PostgresOptions::from_url(text).unwrap_err().to_string();
            for p in ["Qa1", "Qb2"] {
                assert!(!e.contains(p), "{text}: {e}");
            }
        }
    }

    #[test]
    fn passwords_with_url_delimiters_parse_escaped_are_refused_raw_and_never_show() {
        let pieces = ["Qa1", "Qb2", "Qc3", "Qd4", "Qe5", "Qf6"];
        let password = "Qa1/Qb2?Qc3#Qd4@Qe5+Qf6";
        let escaped = "Qa1%2FQb2%3FQc3%23Qd4%40Qe5+Qf6";
        let o =
            PostgresOptions::from_url(&format!("postgres://app:{escaped}@db:5433/leases?table=t"))
                .unwrap();
        assert_eq!(o.config.get_password(), Some(password.as_bytes()));
        assert_eq!(o.config.get_user(), Some("app"));
        assert_eq!(o.config.get_dbname(), Some("leases"));
        assert_eq!(o.table(), "t");
        let e = PostgresOptions::from_url(&format!(
            "postgres://app:{password}@db:5433/leases?sslmode=sometimes"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("%2F"),
            "raw, the password is refused naming the fix: {e}"
        );
        for shown in [e, format!("{o:?}"), o.redacted_url().to_owned()] {
            for p in pieces {
                assert!(!shown.contains(p), "{shown}");
            }
        }
        // Escaped forms decode; '+' is a plus.
        let o = PostgresOptions::from_url("postgres://app:a%2Fb+c@db/x").unwrap();
        assert_eq!(o.config.get_password(), Some("a/b+c".as_bytes()));
    }

    #[test]
    fn rejects_bad_urls_with_the_reason_and_without_the_secret() {
        for (url, why) in [
            ("mysql://u:pw@h/db", "must start with postgres://"),
            (
                "postgres://u:pw@h/db?table=a;drop",
                "not a plain identifier",
            ),
            (
                "postgres://u:pw@h/db?sslmode=sometimes",
                "bad PostgreSQL URL",
            ),
        ] {
            let e = PostgresOptions::from_url(url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
            assert!(!e.contains("pw@"), "secret leaked: {e}");
        }
    }
}
