//! Opens any tenure lease store from a URL, the same URLs and the same
//! errors as the `tenure` command's `--store`:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("tenure-connect-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # let url = format!("sqlite://{}/tenure.db", dir.display());
//! // `url` comes from the application's configuration: sqlite:///var/lib/app/tenure.db,
//! // postgres://app@db/app, redis://cache:6379, etcd://10.0.0.5:2379, …
//! let store = tenure_connect::connect(&url).await?;
//! let elector = tenure::Elector::builder(store, "nightly-billing").start()?;
//! elector.wait_for_leadership().await?;
//! # elector.shutdown().await;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(()) }
//! ```
//!
//! `sqlite://PATH` (feature `sqlite`, on by default) and `memory://` are
//! built in; each networked store is a cargo feature named in [`SCHEMES`]
//! (`all-stores` turns them all on). A URL whose store is not built in is
//! refused naming the feature.
//!
//! Errors are typed, in two kinds: [`ConnectError::Url`], the URL cannot
//! mean a store (a misspelt scheme, a bad option such as `?timeout=abc`:
//! the configuration must change, and the `tenure` command exits 2), and
//! [`ConnectError::Open`], a store the URL names that cannot be opened (not
//! reachable, refused credentials, a missing table: exit 1). URLs may carry
//! secrets (a password in the user info, a token in the query); no error
//! and no [`Display`](std::fmt::Display) of a [`StoreUrl`] ever shows one.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use tenure::error::{error_chain, BoxError};
use tenure::store::url::redact;
use tenure::{LeaseStore, MemoryStore};

/// One networked store: its URL schemes, the cargo feature that builds it,
/// whether this build has it, and its URL form.
#[derive(Debug)]
pub struct Scheme {
    /// The URL schemes that name it, lower-cased; the first is its name.
    pub names: &'static [&'static str],
    /// The cargo feature of this crate that builds it.
    pub feature: &'static str,
    /// Whether this build has it.
    pub built: bool,
    /// Its URL form, for help texts.
    pub form: &'static str,
}

/// The networked lease stores, in the order help texts list them.
pub const SCHEMES: &[Scheme] = &[
    Scheme {
        names: &["postgres", "postgresql"],
        feature: "postgres",
        built: cfg!(feature = "postgres"),
        form: "postgres://[USER[:PASS]@]HOST[:PORT]/DB[?sslmode=..&table=..]",
    },
    Scheme {
        names: &["redis", "rediss"],
        feature: "redis",
        built: cfg!(feature = "redis"),
        form: "redis[s]://[USER:PASS@]HOST[:PORT][/DB]",
    },
    Scheme {
        names: &["etcd", "etcds"],
        feature: "etcd",
        built: cfg!(feature = "etcd"),
        form: "etcd[s]://HOST:PORT[,HOST:PORT]",
    },
    Scheme {
        names: &["dynamodb"],
        feature: "dynamodb",
        built: cfg!(feature = "dynamodb"),
        form: "dynamodb://TABLE?region=..&endpoint=..",
    },
    Scheme {
        names: &["zk", "zookeeper"],
        feature: "zookeeper",
        built: cfg!(feature = "zookeeper"),
        form: "zk://[USER:PASS@]HOST[:PORT][,HOST[:PORT]][/PREFIX]",
    },
    Scheme {
        names: &["nats", "nats+tls"],
        feature: "nats",
        built: cfg!(feature = "nats"),
        form: "nats[+tls]://[USER:PASS@]HOST[:PORT][,HOST[:PORT]]/BUCKET",
    },
    Scheme {
        names: &["s3", "gs", "az"],
        feature: "object-store",
        built: cfg!(feature = "object-store"),
        form: "s3://BUCKET[/PREFIX]?region=..[&endpoint=..], gs://BUCKET[/PREFIX], az://CONTAINER[/PREFIX]?account=..",
    },
    Scheme {
        names: &["mysql", "mariadb"],
        feature: "mysql",
        built: cfg!(feature = "mysql"),
        form: "mysql://[USER[:PASS]@]HOST[:PORT]/DB[?table=..&tls=true&ca=..&cert=..&key=..] (or mariadb://)",
    },
    Scheme {
        names: &["k8s", "kubernetes"],
        feature: "kubernetes",
        built: cfg!(feature = "kubernetes"),
        form: "k8s://NAMESPACE[?context=..&kubeconfig=..&label=KEY=VALUE]",
    },
];

/// The entry of [`SCHEMES`] that `scheme` (lower-cased) names.
pub fn scheme_named(scheme: &str) -> Option<&'static Scheme> {
    SCHEMES.iter().find(|s| s.names.contains(&scheme))
}

/// A parsed store URL; its [`Display`](fmt::Display) is redacted.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sqlite://PATH`: one database file shared by the processes of a host.
    /// `sqlite:///var/lib/x.db` is absolute, `sqlite://x.db` relative to the
    /// working directory.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// `memory://`: a store inside this process only.
    Memory,
    /// A networked store of [`SCHEMES`], built into this crate, whose URL
    /// its crate's parser accepted.
    Networked {
        /// The scheme, lower-cased.
        scheme: String,
        /// The URL as given (it may hold a password: display it redacted).
        url: String,
    },
}

/// Never the URL as given: it may hold a password.
impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // An absolute path already starts with '/', giving sqlite:///x.
            StoreUrl::Sqlite { path } => write!(f, "sqlite://{}", path.display()),
            StoreUrl::Memory => f.write_str("memory://"),
            StoreUrl::Networked { url, .. } => f.write_str(&redact(url)),
        }
    }
}

/// Why a URL cannot mean a store. Every message shows the URL redacted, and
/// names the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// No `scheme://`.
    #[error("store URL `{url}` has no scheme: write it as sqlite:///path/to/tenure.db")]
    NoScheme {
        /// The URL, redacted.
        url: String,
    },
    /// A scheme no tenure lease store uses.
    #[error(
        "store URL scheme `{scheme}://` is not a tenure store: use sqlite://, memory://{}",
        all_schemes()
    )]
    UnknownScheme {
        /// The scheme as given, lower-cased.
        scheme: String,
    },
    /// A store this build does not have.
    #[error("the {scheme}:// store is not built in: rebuild with the `{feature}` cargo feature (or `all-stores`)")]
    NotBuiltIn {
        /// The scheme as given, lower-cased.
        scheme: String,
        /// The cargo feature that builds it.
        feature: &'static str,
    },
    /// The right scheme, but the rest does not fit it: the store's own
    /// parser's words (a bad option, a missing host), redacted.
    #[error("{reason}")]
    Invalid {
        /// The scheme, lower-cased.
        scheme: String,
        /// What is wrong and how to write it, with the URL redacted.
        reason: String,
    },
}

fn all_schemes() -> String {
    let mut out = String::new();
    for name in SCHEMES.iter().flat_map(|s| s.names) {
        out.push_str(", ");
        out.push_str(name);
        out.push_str("://");
    }
    out
}

/// Why [`connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL cannot mean a store: change the configuration.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// The store the URL names cannot be opened (unreachable, credentials
    /// refused, a missing table, …); the message is the store's, redacted.
    #[error("cannot open the store {url}: {message}")]
    Open {
        /// The URL, redacted.
        url: String,
        /// The store's error and its causes, as one line.
        message: String,
        /// The store's error.
        #[source]
        source: BoxError,
    },
}

impl ConnectError {
    /// Whether the URL is at fault (the configuration must change), rather
    /// than the store it names: a command line's usage error.
    pub fn is_usage(&self) -> bool {
        matches!(self, ConnectError::Url(_))
    }
}

impl StoreUrl {
    /// Parses `url`, a networked one by its store crate's own parser (no
    /// connection is made), so that every option is checked.
    pub fn parse(url: &str) -> Result<StoreUrl, UrlError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(UrlError::NoScheme { url: redact(url) });
        };
        let scheme = scheme.to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => parse_sqlite(url, rest),
            "memory" if rest.is_empty() => Ok(StoreUrl::Memory),
            "memory" => Err(UrlError::Invalid {
                scheme,
                reason: "memory:// takes nothing after the scheme".into(),
            }),
            s => match scheme_named(s) {
                Some(known) if known.built => {
                    check_networked(known.names[0], url).map_err(|reason| UrlError::Invalid {
                        scheme: scheme.clone(),
                        reason,
                    })?;
                    Ok(StoreUrl::Networked {
                        scheme,
                        url: url.to_owned(),
                    })
                }
                Some(known) => Err(UrlError::NotBuiltIn {
                    scheme,
                    feature: known.feature,
                }),
                None if tenure::store::url::is_scheme(&scheme) => {
                    Err(UrlError::UnknownScheme { scheme })
                }
                // Text before "://" that is no scheme may be a password
                // holding "://": shown only as redact shows the whole URL.
                None => Err(UrlError::NoScheme { url: redact(url) }),
            },
        }
    }

    /// The scheme, for labels (`sqlite`, `memory`, `postgres`, …).
    pub fn scheme(&self) -> &str {
        match self {
            StoreUrl::Sqlite { .. } => "sqlite",
            StoreUrl::Memory => "memory",
            StoreUrl::Networked { scheme, .. } => scheme,
        }
    }

    /// Whether several processes can share this store (all but `memory://`).
    pub fn is_shared(&self) -> bool {
        !matches!(self, StoreUrl::Memory)
    }

    /// Opens the store. Runs inside a tokio runtime.
    pub async fn open(&self) -> Result<Arc<dyn LeaseStore>, ConnectError> {
        let opened = match self {
            StoreUrl::Memory => return Ok(Arc::new(MemoryStore::new())),
            StoreUrl::Sqlite { path } => open_sqlite(path).await,
            StoreUrl::Networked { scheme, url } => match scheme_named(scheme) {
                Some(s) => open_networked(s.names[0], url).await,
                None => Err(Box::new(UrlError::UnknownScheme {
                    scheme: scheme.clone(),
                }) as BoxError),
            },
        };
        opened.map_err(|source| ConnectError::Open {
            url: self.to_string(),
            message: error_chain(&*source),
            source,
        })
    }
}

/// Parses `url` and opens the store it names: the one call an application
/// that reads its store from configuration needs. Runs inside a tokio
/// runtime.
pub async fn connect(url: &str) -> Result<Arc<dyn LeaseStore>, ConnectError> {
    StoreUrl::parse(url)?.open().await
}

fn parse_sqlite(url: &str, rest: &str) -> Result<StoreUrl, UrlError> {
    let bad = |reason: &str| UrlError::Invalid {
        scheme: "sqlite".into(),
        reason: format!("store URL `{}`: {reason}", redact(url)),
    };
    if rest.is_empty() {
        return Err(bad(
            "no file path: write sqlite:///absolute/path.db or sqlite://relative/path.db",
        ));
    }
    if rest.contains(['?', '#']) {
        return Err(bad(
            "sqlite URLs take no query or fragment: give just the file path",
        ));
    }
    if rest.ends_with('/') {
        return Err(bad(
            "the path names a directory: give the database file, such as sqlite:///var/lib/tenure/tenure.db",
        ));
    }
    Ok(StoreUrl::Sqlite {
        path: PathBuf::from(rest),
    })
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(path: &std::path::Path) -> Result<Arc<dyn LeaseStore>, BoxError> {
    let store = tenure_sqlite::SqliteStore::connect(path).await?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite(_: &std::path::Path) -> Result<Arc<dyn LeaseStore>, BoxError> {
    Err(Box::new(UrlError::NotBuiltIn {
        scheme: "sqlite".into(),
        feature: "sqlite",
    }))
}

/// The store crate's own parse of `url`, for the store named `name` (the
/// first of its [`Scheme::names`]): its error, which never shows a
/// password, as the reason.
#[allow(
    clippy::unnecessary_wraps,
    reason = "without networked stores every URL reaching here is fine"
)]
fn check_networked(name: &str, url: &str) -> Result<(), String> {
    let _ = url;
    match name {
        #[cfg(feature = "postgres")]
        "postgres" => tenure_postgres::PostgresOptions::from_url(url)
            .map(drop)
            .map_err(|e| e.to_string()),
        #[cfg(feature = "redis")]
        "redis" => tenure_redis::RedisOptions::from_url(url)
            .map(drop)
            .map_err(|e| e.to_string()),
        #[cfg(feature = "etcd")]
        "etcd" => tenure_etcd::EtcdOptions::from_url(url)
            .map(drop)
            .map_err(|e| e.to_string()),
        #[cfg(feature = "dynamodb")]
        "dynamodb" => tenure_dynamodb::DynamoDbOptions::from_url(url)
            .map(drop)
            .map_err(|e| e.to_string()),
        #[cfg(feature = "zookeeper")]
        "zk" => tenure_zookeeper::ZkOptions::from_url(url)
            .map(drop)
            .map_err(|e| e.to_string()),
        #[cfg(feature = "nats")]
        "nats" => tenure_nats::NatsOptions::from_url(url)
            .map(drop)
            .map_err(|e| e.to_string()),
        #[cfg(feature = "object-store")]
        "s3" => tenure_object_store::BucketOptions::from_url(url)
            .map(drop)
            .map_err(|e| e.to_string()),
        #[cfg(feature = "mysql")]
        "mysql" => tenure_mysql::MysqlOptions::from_url(url)
            .map(drop)
            .map_err(|e| e.to_string()),
        #[cfg(feature = "kubernetes")]
        "k8s" => tenure_kubernetes::KubernetesOptions::from_url(url)
            .map(drop)
            .map_err(|e| e.to_string()),
        _ => Ok(()),
    }
}

/// Opens the store named `name` (the first of its [`Scheme::names`]).
async fn open_networked(name: &str, url: &str) -> Result<Arc<dyn LeaseStore>, BoxError> {
    fn boxed<S: LeaseStore, E: std::error::Error + Send + Sync + 'static>(
        r: Result<S, E>,
    ) -> Result<Arc<dyn LeaseStore>, BoxError> {
        match r {
            Ok(s) => Ok(Arc::new(s)),
            Err(e) => Err(Box::new(e)),
        }
    }
    let _ = (url, boxed::<MemoryStore, UrlError>);
    match name {
        #[cfg(feature = "postgres")]
        "postgres" => boxed(tenure_postgres::PostgresStore::connect(url).await),
        #[cfg(feature = "redis")]
        "redis" => boxed(tenure_redis::RedisStore::connect(url).await),
        #[cfg(feature = "etcd")]
        "etcd" => boxed(tenure_etcd::EtcdStore::connect(url).await),
        #[cfg(feature = "dynamodb")]
        "dynamodb" => boxed(tenure_dynamodb::DynamoDbStore::connect(url).await),
        #[cfg(feature = "zookeeper")]
        "zk" => boxed(tenure_zookeeper::ZkStore::connect(url).await),
        #[cfg(feature = "nats")]
        "nats" => boxed(tenure_nats::NatsStore::connect(url).await),
        #[cfg(feature = "object-store")]
        "s3" => boxed(tenure_object_store::BucketStore::connect(url).await),
        #[cfg(feature = "mysql")]
        "mysql" => boxed(tenure_mysql::MysqlStore::connect(url).await),
        #[cfg(feature = "kubernetes")]
        "k8s" => boxed(tenure_kubernetes::KubernetesStore::connect(url).await),
        other => Err(Box::new(UrlError::NotBuiltIn {
            scheme: other.to_owned(),
            feature: scheme_named(other).map_or("all-stores", |s| s.feature),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_paths() {
        assert_eq!(
            StoreUrl::parse("sqlite:///var/lib/t.db").unwrap(),
            StoreUrl::Sqlite {
                path: "/var/lib/t.db".into()
            }
        );
        assert_eq!(
            StoreUrl::parse("SQLITE://rel/t.db").unwrap().to_string(),
            "sqlite://rel/t.db"
        );
        for bad in ["sqlite://", "sqlite:///x.db?mode=ro", "sqlite:///var/lib/"] {
            assert!(
                matches!(StoreUrl::parse(bad), Err(UrlError::Invalid { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn refusals_are_typed_and_show_no_secret() {
        assert!(matches!(
            StoreUrl::parse("ftp://x"),
            Err(UrlError::UnknownScheme { .. })
        ));
        assert!(matches!(
            StoreUrl::parse("/var/lib/t.db"),
            Err(UrlError::NoScheme { .. })
        ));
        assert!(matches!(
            StoreUrl::parse("memory://x"),
            Err(UrlError::Invalid { .. })
        ));
        assert_eq!(StoreUrl::parse("memory://").unwrap(), StoreUrl::Memory);
        for url in [
            "app:Qa1://Qb2@h:6379",
            "pstgres://app:Qa1@db/x",
            "nope:Qa1@x",
        ] {
            let e = StoreUrl::parse(url).unwrap_err().to_string();
            assert!(!e.contains("Qa1") && !e.contains("Qb2"), "{url}: {e}");
        }
    }

    #[test]
    fn stores_not_built_name_their_feature() {
        for s in SCHEMES.iter().filter(|s| !s.built) {
            let url = format!("{}://x", s.names[0]);
            match StoreUrl::parse(&url) {
                Err(UrlError::NotBuiltIn { feature, .. }) => assert_eq!(feature, s.feature),
                other => panic!("{url}: {other:?}"),
            }
        }
    }
}
