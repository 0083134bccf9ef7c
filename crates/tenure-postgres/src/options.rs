//! Connection options: a libpq-style URL plus tenure's own parameters.

use std::fmt;
use std::path::PathBuf;

use tenure::StoreError;

/// Where and how to connect, parsed from a URL such as
/// `postgres://user:secret@db.internal:5432/app?sslmode=require&table=tenure_leases`.
///
/// Besides everything `tokio-postgres` understands (`sslmode`,
/// `connect_timeout`, `application_name`, …) two parameters are tenure's:
/// `table` (default `tenure_leases`, optionally schema-qualified) and
/// `sslrootcert` (a PEM file of CA certificates to trust instead of the
/// public web roots).
#[derive(Clone)]
pub struct PostgresOptions {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) table: Table,
    pub(crate) root_cert: Option<PathBuf>,
    redacted: String,
}

/// A validated, quoted table name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Table {
    /// As written, for messages and the notification channel.
    pub(crate) name: String,
    /// Quoted for SQL.
    pub(crate) quoted: String,
}

impl fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("url", &self.redacted)
            .field("table", &self.table.name)
            .finish()
    }
}

impl PostgresOptions {
    /// Parses a `postgres://` or `postgresql://` URL.
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        let redacted = tenure::url::redact(url);
        let bad = |why: String| StoreError::Misconfigured {
            message: format!("bad PostgreSQL URL {redacted}: {why}"),
            source: None,
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad("it must start with postgres:// or postgresql://".into()));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, q),
            None => (url, ""),
        };
        let mut table = "tenure_leases".to_owned();
        let mut root_cert = None;
        let mut passthrough = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "table" => table = v.to_owned(),
                "sslrootcert" => root_cert = Some(PathBuf::from(v)),
                _ => passthrough.push(pair),
            }
        }
        let libpq = if passthrough.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", passthrough.join("&"))
        };
        let config: tokio_postgres::Config = libpq
            .parse()
            .map_err(|e: tokio_postgres::Error| bad(e.to_string()))?;
        if config.get_hosts().is_empty() {
            return Err(bad("no host given".into()));
        }
        Ok(PostgresOptions {
            config,
            table: Table::parse(&table).map_err(bad)?,
            root_cert,
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
    fn parses_tenure_parameters_and_passes_the_rest_through() {
        let o = PostgresOptions::from_url(
            "postgres://app:s3cret@db:5433/leases?sslmode=require&table=ops.tenure&sslrootcert=/ca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(o.table.quoted, "\"ops\".\"tenure\"");
        assert_eq!(o.root_cert, Some(PathBuf::from("/ca.pem")));
        assert_eq!(
            o.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        assert_eq!(o.config.get_dbname(), Some("leases"));
        assert!(!format!("{o:?}").contains("s3cret"));
        assert_eq!(o.redacted_url(), "postgres://app:***@db:5433/leases?sslmode=require&table=ops.tenure&sslrootcert=/ca.pem&application_name=x");
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
