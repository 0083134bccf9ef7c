//! Store URLs: which backend holds the lease records, and where.
//!
//! `sqlite://` (the embedded default) and `memory://` are built in; every
//! networked store is one entry of [`SCHEMES`]: its URL schemes, the cargo
//! feature that builds it, its URL form for `--help` and errors, and its
//! opener. Adding a store to the command is adding an entry. URLs may carry
//! secrets (a password in the user info, a token in the query), so the only
//! way to print one is its redacted [`Display`](std::fmt::Display).

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use tenure::error::error_chain;
use tenure::url::redact;
use tenure::{LeaseStore, LeaseView, MemoryStore};

/// What a store URL opens.
#[derive(Clone)]
pub enum Backend {
    /// A lease store: it reads and writes lease records.
    Store(Arc<dyn LeaseStore>),
    /// Leadership decided by something else (Kafka's consumer group), seen
    /// through reads only: `status` and `watch` work, `release` cannot.
    #[cfg_attr(
        not(feature = "kafka"),
        allow(dead_code, reason = "only kafka:// opens a read-only backend")
    )]
    ReadOnly {
        /// What `status` and `watch` read from.
        view: Arc<dyn LeaseView>,
        /// Why nothing can be written, and what to do instead.
        why: &'static str,
    },
}

impl Backend {
    /// The store, for commands that write; fails with the reason on a
    /// read-only backend.
    pub fn store(&self) -> Result<Arc<dyn LeaseStore>, OpenError> {
        match self {
            Backend::Store(s) => Ok(s.clone()),
            Backend::ReadOnly { why, .. } => Err(OpenError {
                message: (*why).to_owned(),
            }),
        }
    }

    /// The reads, for commands that only look.
    pub fn view(&self) -> Arc<dyn LeaseView> {
        match self {
            // An `Arc<dyn LeaseStore>` is a view itself; wrapping it once
            // more stands in for trait upcasting (Rust 1.86, above our MSRV).
            Backend::Store(s) => Arc::new(s.clone()),
            Backend::ReadOnly { view, .. } => view.clone(),
        }
    }
}

/// What opening a store yields.
type Opened = Result<Backend, OpenError>;

/// Opens a store from its whole URL.
type Opener = for<'a> fn(&'a str) -> Pin<Box<dyn Future<Output = Opened> + Send + 'a>>;

/// Everything the command knows about one networked store.
pub struct Scheme {
    /// The URL schemes that name it, lower-cased; the first is its name.
    pub names: &'static [&'static str],
    /// The cargo feature that builds it into `tenure`.
    pub feature: &'static str,
    /// Whether this binary was built with it.
    pub built: bool,
    /// Its URL form, for `--help`.
    pub form: &'static str,
    /// Opens it (fails naming the feature when it is not built).
    pub open: Opener,
}

/// One [`SCHEMES`] entry: the URL schemes that name the store, the cargo
/// feature that builds it, its URL form, and how it opens: the lease store
/// type whose `connect(url)` opens it, or `|url| …`, an async body that
/// opens something else. The feature is named once: the entry counts as
/// built, and its opener is compiled, exactly when the feature is on;
/// without it the opener fails naming the feature.
macro_rules! scheme {
    ($names:expr, $feature:literal, $form:expr, $store:path) => {
        scheme!($names, $feature, $form, |url| opened(
            <$store>::connect(url).await
        ))
    };
    ($names:expr, $feature:literal, $form:expr, |$url:ident| $open:expr) => {
        Scheme {
            names: &$names,
            feature: $feature,
            built: cfg!(feature = $feature),
            form: $form,
            open: |$url| {
                Box::pin(async move {
                    #[cfg(feature = $feature)]
                    return $open;
                    #[cfg(not(feature = $feature))]
                    {
                        let _ = $url;
                        not_built($feature)
                    }
                })
            },
        }
    };
}

/// The networked stores, in the order `--help` lists them.
pub const SCHEMES: &[Scheme] = &[
    scheme!(
        ["postgres", "postgresql"],
        "postgres",
        "postgres://[USER[:PASS]@]HOST[:PORT]/DB[?sslmode=..&table=..]",
        tenure_postgres::PostgresStore
    ),
    scheme!(
        ["redis", "rediss"],
        "redis",
        "redis[s]://[USER:PASS@]HOST[:PORT][/DB]",
        tenure_redis::RedisStore
    ),
    scheme!(
        ["etcd", "etcds"],
        "etcd",
        "etcd[s]://HOST:PORT[,HOST:PORT]",
        tenure_etcd::EtcdStore
    ),
    scheme!(
        ["dynamodb"],
        "dynamodb",
        "dynamodb://TABLE?region=..&endpoint=..",
        tenure_dynamodb::DynamoDbStore
    ),
    scheme!(
        ["zk", "zookeeper"],
        "zookeeper",
        "zk://[USER:PASS@]HOST[:PORT][,HOST[:PORT]][/PREFIX]",
        tenure_zookeeper::ZkStore
    ),
    scheme!(
        ["nats", "nats+tls"],
        "nats",
        "nats[+tls]://[USER:PASS@]HOST[:PORT][,HOST[:PORT]]/BUCKET",
        tenure_nats::NatsStore
    ),
    scheme!(
        ["s3", "gs", "az"],
        "object-store",
        "s3://BUCKET[/PREFIX]?region=..[&endpoint=..], gs://BUCKET[/PREFIX], az://CONTAINER[/PREFIX]?account=..",
        tenure_object_store::BucketStore
    ),
    scheme!(
        ["mysql", "mariadb"],
        "mysql",
        "mysql://[USER[:PASS]@]HOST[:PORT]/DB[?table=..&tls=true&ca=..&cert=..&key=..] (or mariadb://)",
        tenure_mysql::MysqlStore
    ),
    scheme!(
        ["k8s", "kubernetes"],
        "kubernetes",
        "k8s://NAMESPACE[?context=..&kubeconfig=..&label=KEY=VALUE]",
        tenure_kubernetes::KubernetesStore
    ),
    scheme!(
        ["kafka"],
        "kafka",
        "kafka://BROKER[,BROKER]/TOPIC",
        |url| crate::kafka::leader_view(url)
            .map(|view| Backend::ReadOnly {
                view,
                why: crate::kafka::READ_ONLY,
            })
            .map_err(|e| open_error(&*e))
    ),
];

fn scheme_named(name: &str) -> Option<&'static Scheme> {
    SCHEMES.iter().find(|s| s.names.contains(&name))
}

#[allow(dead_code, reason = "unused when no networked lease store is built")]
fn opened<S: LeaseStore, E: std::error::Error>(r: Result<S, E>) -> Opened {
    r.map(|s| Backend::Store(Arc::new(s)))
        .map_err(|e| open_error(&e))
}

/// The error of a scheme whose store is not built into this binary (only
/// reachable if parsing let it through).
#[allow(dead_code, reason = "used only when a store is left out of the build")]
fn not_built(feature: &str) -> Opened {
    Err(OpenError {
        message: format!("the {feature} store is not built into this tenure"),
    })
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
    /// `dynamodb://`, `zk://`, `nats://`, `nats+tls://`, `s3://`, `gs://`, `az://`,
    /// `mysql://`, `mariadb://`, `k8s://`, `kubernetes://`, `kafka://`.
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
        /// The scheme as given, lower-cased.
        scheme: String,
    },
    /// A scheme whose store is not built into this binary.
    NotBuiltIn {
        /// The scheme as given, lower-cased.
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
            UrlError::UnknownScheme { scheme } => {
                write!(f, "store URL scheme `{scheme}://` is not a tenure store: use sqlite://")?;
                for name in SCHEMES.iter().flat_map(|s| s.names) {
                    write!(f, ", {name}://")?;
                }
                Ok(())
            }
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
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct OpenError {
    message: String,
}

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
            s => match scheme_named(s) {
                Some(known) if known.built => Ok(StoreUrl::Networked {
                    scheme,
                    url: url.to_owned(),
                }),
                Some(known) => Err(UrlError::NotBuiltIn {
                    scheme,
                    feature: known.feature,
                }),
                None if tenure::url::is_scheme(&scheme) => Err(UrlError::UnknownScheme { scheme }),
                // Text before "://" that is no scheme may be a password
                // holding "://": shown only as redact shows the whole URL.
                None => Err(UrlError::NoScheme { url: redact(url) }),
            },
        }
    }

    /// The URL as given, for a backend that parses it itself (secrets
    /// included: never print it).
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

    /// Opens the store for commands that write (fails on a read-only
    /// backend, naming what to do instead). Runs inside a tokio runtime.
    pub async fn open(&self) -> Result<Arc<dyn LeaseStore>, OpenError> {
        self.open_backend().await?.store()
    }

    /// Opens the store or read-only view. Runs inside a tokio runtime.
    pub async fn open_backend(&self) -> Result<Backend, OpenError> {
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
                let store = tenure_sqlite::SqliteStore::connect(path)
                    .await
                    .map_err(|e| OpenError {
                        message: error_chain(&e),
                    })?;
                Ok(Backend::Store(Arc::new(store)))
            }
            StoreUrl::Memory => Ok(Backend::Store(Arc::new(MemoryStore::new()))),
            StoreUrl::Networked { scheme, url } => open_networked(scheme, url).await,
        }
    }
}

fn open_error(e: &dyn std::error::Error) -> OpenError {
    OpenError {
        message: error_chain(e),
    }
}

/// Opens a networked store by its scheme's entry.
async fn open_networked(scheme: &str, url: &str) -> Opened {
    match scheme_named(scheme) {
        Some(s) => (s.open)(url).await,
        None => Err(OpenError {
            message: format!("the {scheme}:// store is not built into this tenure"),
        }),
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
    let forms: Vec<&str> = SCHEMES.iter().map(|s| s.form).collect();
    format!(
        "The store URL: sqlite://PATH, {} (networked stores need their cargo feature; postgres and redis are built by default). \
         Passwords in URLs are never printed; they may hold @ and + as they are, but write / ? # as %2F %3F %23, and an @ \
         after the host (or anywhere in a kafka:// URL) is written %40: a URL with a raw one there is refused, not guessed at. Pass a URL with a password in TENURE_STORE rather than --store: other users can read \
         command lines (ps), and tenure run does not hand TENURE_STORE on to CMD.\n\n\
         Default when neither --store nor TENURE_STORE is given: {default}",
        forms.join(", ")
    )
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
        // A failure shows what the parser made of the URL.
        let unknown = StoreUrl::parse("ftp://x");
        assert!(
            matches!(unknown, Err(UrlError::UnknownScheme { .. })),
            "{unknown:?}"
        );
        let path = StoreUrl::parse("/var/lib/t.db");
        assert!(matches!(path, Err(UrlError::NoScheme { .. })), "{path:?}");
    }

    #[test]
    fn a_url_without_a_scheme_never_shows_a_password_holding_colon_slash_slash() {
        for url in [
            "app:Qa1://Qb2@h:6379",
            "app:Qa1@h://x",
            "redis:/app:Qa1://Qb2@h",
        ] {
            let e = StoreUrl::parse(url).unwrap_err().to_string().to_lowercase();
            assert!(!e.contains("qa1") && !e.contains("qb2"), "{url}: {e}");
        }
    }

    /// (How each form of URL is shown redacted is `tenure::url`'s to test.)
    #[test]
    fn a_refused_url_never_shows_its_secret() {
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
