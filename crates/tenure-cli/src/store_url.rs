//! Store URLs: which backend holds the lease records, and where.
//!
//! One enum variant per scheme, so that PostgreSQL, Redis, etcd, DynamoDB
//! and Kafka slot in as their crates land: parse the URL here, open it in
//! [`StoreUrl::open`]. URLs may carry secrets (a password in the user info,
//! a token in the query), so the only way to print one is its redacted
//! [`Display`](std::fmt::Display).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use tenure::{LeaseStore, MemoryStore};

/// The schemes of networked stores and the cargo feature that builds each.
const NETWORKED: &[(&str, &str)] = &[
    ("postgres", "postgres"),
    ("postgresql", "postgres"),
    ("redis", "redis"),
    ("rediss", "redis"),
    ("etcd", "etcd"),
    ("etcds", "etcd"),
    ("dynamodb", "dynamodb"),
    ("kafka", "kafka"),
];

/// Whether this binary was built with the store behind `feature`.
fn built_in(feature: &str) -> bool {
    const BUILT: &[(&str, bool)] = &[
        ("postgres", cfg!(feature = "postgres")),
        ("redis", cfg!(feature = "redis")),
        ("etcd", cfg!(feature = "etcd")),
        ("dynamodb", cfg!(feature = "dynamodb")),
        ("kafka", cfg!(feature = "kafka")),
    ];
    BUILT.iter().any(|(f, built)| *f == feature && *built)
}

/// A parsed store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sqlite://PATH`: one database file shared by the processes of a host.
    /// `sqlite:///var/lib/x.db` is absolute, `sqlite://x.db` relative to the
    /// working directory.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// `memory://`: a store inside this process only, for in-process demos
    /// and tests; useless to commands that coordinate several processes.
    Memory,
    /// A networked store, opened by its crate from the whole URL:
    /// `postgres://`, `redis://`, `rediss://`, `etcd://`, `etcds://`,
    /// `dynamodb://`, `kafka://`.
    Networked {
        /// The scheme, lower-cased.
        scheme: String,
        /// The URL as given (it may hold a password: display it redacted).
        url: String,
    },
}

/// Why a store URL was refused. Every message names the URL redacted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlError {
    /// No `scheme://`.
    NoScheme {
        /// The URL, redacted.
        url: String,
    },
    /// A scheme no tenure store uses.
    UnknownScheme {
        /// The scheme.
        scheme: String,
    },
    /// A scheme whose store is not built into this binary.
    NotBuiltIn {
        /// The scheme.
        scheme: String,
        /// The cargo feature that builds it.
        feature: &'static str,
    },
    /// The right scheme, but the rest does not fit it.
    Malformed {
        /// The URL, redacted.
        url: String,
        /// What is wrong and how to write it instead.
        reason: &'static str,
    },
    /// No URL was given and no default location could be found.
    NoDefault,
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlError::NoScheme { url } => write!(
                f,
                "store URL `{url}` has no scheme: write it as sqlite:///path/to/tenure.db"
            ),
            UrlError::UnknownScheme { scheme } => write!(
                f,
                "store URL scheme `{scheme}://` is not a tenure store: use sqlite://, postgres://, redis://, etcd://, dynamodb:// or kafka://"
            ),
            UrlError::NotBuiltIn { scheme, feature } => write!(
                f,
                "the {scheme}:// store is not built into this tenure: rebuild with `--features {feature}` (or `--features all-stores`)"
            ),
            UrlError::Malformed { url, reason } => write!(f, "store URL `{url}`: {reason}"),
            UrlError::NoDefault => f.write_str(
                "no store given and no default location: neither XDG_STATE_HOME nor HOME is set; pass --store sqlite://PATH or set TENURE_STORE",
            ),
        }
    }
}

impl std::error::Error for UrlError {}

/// Why a store could not be opened.
#[derive(Debug)]
pub struct OpenError {
    message: String,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpenError {}

impl StoreUrl {
    /// Parses a URL.
    pub fn parse(url: &str) -> Result<StoreUrl, UrlError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(UrlError::NoScheme { url: redact(url) });
        };
        let scheme = scheme.to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => parse_sqlite(url, rest),
            "memory" => {
                if rest.is_empty() {
                    Ok(StoreUrl::Memory)
                } else {
                    Err(UrlError::Malformed {
                        url: redact(url),
                        reason: "memory:// takes nothing after the scheme",
                    })
                }
            }
            s => match NETWORKED.iter().find(|(name, _)| *name == s) {
                Some((_, feature)) if built_in(feature) => Ok(StoreUrl::Networked {
                    scheme,
                    url: url.to_owned(),
                }),
                Some((_, feature)) => Err(UrlError::NotBuiltIn { scheme, feature }),
                None => Err(UrlError::UnknownScheme {
                    scheme: redact(&scheme),
                }),
            },
        }
    }

    /// The URL as given, for a backend that parses it itself (secrets
    /// included: never print it).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub fn raw(&self) -> Option<&str> {
        match self {
            StoreUrl::Networked { url, .. } => Some(url),
            _ => None,
        }
    }

    /// The scheme, for labels (`sqlite`, `postgres`, …).
    pub fn scheme(&self) -> &str {
        match self {
            StoreUrl::Sqlite { .. } => "sqlite",
            StoreUrl::Memory => "memory",
            StoreUrl::Networked { scheme, .. } => scheme,
        }
    }

    /// The URL given, else the default file in the user's state directory.
    pub fn resolve(given: Option<&str>) -> Result<StoreUrl, UrlError> {
        match given {
            Some(url) => StoreUrl::parse(url),
            None => Ok(StoreUrl::Sqlite {
                path: default_path().ok_or(UrlError::NoDefault)?,
            }),
        }
    }

    /// Whether several processes can share this store.
    pub fn is_shared(&self) -> bool {
        !matches!(self, StoreUrl::Memory)
    }

    /// Opens the store. Runs inside a tokio runtime.
    pub async fn open(&self) -> Result<Arc<dyn LeaseStore>, OpenError> {
        match self {
            StoreUrl::Sqlite { path } => {
                if Some(path) == default_path().as_ref() {
                    // The default lives in a directory that may not exist
                    // yet; a path the user chose is theirs to prepare.
                    if let Some(dir) = path.parent() {
                        std::fs::create_dir_all(dir).map_err(|e| OpenError {
                            message: format!(
                                "cannot create the state directory {}: {e}",
                                dir.display()
                            ),
                        })?;
                    }
                }
                let store =
                    tenure_sqlite::SqliteStore::open(path)
                        .await
                        .map_err(|e| OpenError {
                            message: error_chain(&e),
                        })?;
                Ok(Arc::new(store))
            }
            StoreUrl::Memory => Ok(Arc::new(MemoryStore::new())),
            StoreUrl::Networked { scheme, url } => open_networked(scheme, url).await,
        }
    }
}

fn open_error(e: &dyn std::error::Error) -> OpenError {
    OpenError {
        message: error_chain(e),
    }
}

/// Opens a networked store by its scheme. Only schemes built in reach here.
async fn open_networked(scheme: &str, url: &str) -> Result<Arc<dyn LeaseStore>, OpenError> {
    match scheme {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => tenure_postgres::PostgresStore::connect(url)
            .await
            .map(|s| Arc::new(s) as Arc<dyn LeaseStore>)
            .map_err(|e| open_error(&e)),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => tenure_redis::RedisStore::connect(url)
            .await
            .map(|s| Arc::new(s) as Arc<dyn LeaseStore>)
            .map_err(|e| open_error(&e)),
        #[cfg(feature = "etcd")]
        "etcd" | "etcds" => tenure_etcd::EtcdStore::connect(url)
            .await
            .map(|s| Arc::new(s) as Arc<dyn LeaseStore>)
            .map_err(|e| open_error(&e)),
        #[cfg(feature = "dynamodb")]
        "dynamodb" => tenure_dynamodb::DynamoDbStore::connect(url)
            .await
            .map(|s| Arc::new(s) as Arc<dyn LeaseStore>)
            .map_err(|e| open_error(&e)),
        #[cfg(feature = "kafka")]
        "kafka" => crate::kafka::leader_view(url).map_err(|e| open_error(&*e)),
        _ => {
            let _ = url;
            Err(OpenError {
                message: format!("the {scheme}:// store is not built into this tenure"),
            })
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Sqlite { path } => {
                // An absolute path already starts with '/', giving sqlite:///x.
                write!(f, "sqlite://{}", path.display())
            }
            StoreUrl::Memory => f.write_str("memory://"),
            StoreUrl::Networked { url, .. } => f.write_str(&redact(url)),
        }
    }
}

fn parse_sqlite(url: &str, rest: &str) -> Result<StoreUrl, UrlError> {
    if rest.is_empty() {
        return Err(UrlError::Malformed {
            url: redact(url),
            reason: "no file path: write sqlite:///absolute/path.db or sqlite://relative/path.db",
        });
    }
    if rest.contains(['?', '#']) {
        return Err(UrlError::Malformed {
            url: redact(url),
            reason: "sqlite URLs take no query or fragment: give just the file path",
        });
    }
    if rest.ends_with('/') {
        return Err(UrlError::Malformed {
            url: redact(url),
            reason: "the path names a directory: give the database file, such as sqlite:///var/lib/tenure/tenure.db",
        });
    }
    Ok(StoreUrl::Sqlite {
        path: PathBuf::from(rest),
    })
}

/// `$XDG_STATE_HOME/tenure/tenure.db`, else `~/.local/state/tenure/tenure.db`.
pub fn default_path() -> Option<PathBuf> {
    let absolute = |v: std::ffi::OsString| {
        let p = PathBuf::from(v);
        p.is_absolute().then_some(p)
    };
    // The XDG spec says to ignore relative values.
    let state = std::env::var_os("XDG_STATE_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".local").join("state"))
        })?;
    Some(state.join("tenure").join("tenure.db"))
}

/// The `--store` help, naming the default file of the user running it.
pub fn long_help() -> String {
    let default = match default_path() {
        Some(p) => format!("sqlite://{}", p.display()),
        None => "none (set XDG_STATE_HOME or HOME)".to_owned(),
    };
    format!(
        "The store URL: sqlite://PATH, postgres://[USER[:PASS]@]HOST[:PORT]/DB[?sslmode=..&table=..], \
         redis[s]://[USER:PASS@]HOST[:PORT][/DB], etcd[s]://HOST:PORT[,HOST:PORT], dynamodb://TABLE?region=..&endpoint=.., \
         kafka://BROKER[,BROKER]/TOPIC (networked stores need their cargo feature; postgres and redis are built by default). \
         Passwords in URLs are never printed, and may hold / ? # @ + as they are (an @ after the host, or in a kafka:// \
         URL, is written %40). Pass a URL with a password in TENURE_STORE rather than --store: other users can read \
         command lines (ps), and tenure run does not hand TENURE_STORE on to CMD.\n\n\
         Default when neither --store nor TENURE_STORE is given: {default}"
    )
}

/// Renders `url` with its user info (up to the *last* `@`, however many
/// `/ ? # @` a pasted password holds) and secret-looking query values
/// replaced by `***`, so it can appear in logs and error messages: the one
/// redaction every store shares, [`tenure::url::redact`].
pub fn redact(url: &str) -> String {
    tenure::url::redact(url)
}

/// An error and its causes on one line, for one-line error output.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out.replace('\n', " ")
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
            StoreUrl::parse("SQLITE://rel/t.db").unwrap(),
            StoreUrl::Sqlite {
                path: "rel/t.db".into()
            }
        );
        assert_eq!(
            StoreUrl::parse("sqlite:///var/lib/t.db")
                .unwrap()
                .to_string(),
            "sqlite:///var/lib/t.db"
        );
        assert!(StoreUrl::parse("sqlite://").is_err());
        assert!(StoreUrl::parse("sqlite:///x.db?mode=ro").is_err());
        assert!(StoreUrl::parse("sqlite:///var/lib/").is_err());
    }

    #[test]
    fn schemes() {
        assert_eq!(StoreUrl::parse("memory://").unwrap(), StoreUrl::Memory);
        let pg = StoreUrl::parse("postgres://u:pw@db/x");
        if cfg!(feature = "postgres") {
            assert_eq!(pg.unwrap().to_string(), "postgres://u:***@db/x");
        } else {
            assert!(matches!(
                pg,
                Err(UrlError::NotBuiltIn {
                    feature: "postgres",
                    ..
                })
            ));
        }
        assert!(matches!(
            StoreUrl::parse("ftp://x"),
            Err(UrlError::UnknownScheme { .. })
        ));
        assert!(matches!(
            StoreUrl::parse("/var/lib/t.db"),
            Err(UrlError::NoScheme { .. })
        ));
    }

    #[test]
    fn secrets_never_show() {
        assert_eq!(
            redact("postgres://app:hunter2@db:5432/x?sslmode=require&password=pw2"),
            "postgres://app:***@db:5432/x?sslmode=require&password=***"
        );
        assert_eq!(redact("redis://tok3n@cache:6379"), "redis://***@cache:6379");
        assert_eq!(redact("etcd://node1:2379"), "etcd://node1:2379");
        assert_eq!(redact("user:pw@host"), "user:***@host");
        assert_eq!(
            redact("postgres://app:pa/ss@127.0.0.1:55432/postgres"),
            "postgres://app:***@127.0.0.1:55432/postgres"
        );
        let err = StoreUrl::parse("nope:hunter2@x").unwrap_err().to_string();
        assert!(!err.contains("hunter2"), "{err}");
        let err = StoreUrl::parse("pstgres://app:hunter2@db/x")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn default_is_in_the_state_directory() {
        if let Some(p) = default_path() {
            assert!(p.ends_with("tenure/tenure.db"), "{p:?}");
        }
    }
}
