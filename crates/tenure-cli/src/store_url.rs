//! Store URLs: which backend holds the lease records, and where.
//!
//! The lease stores are `tenure-connect`'s, the library entry point that
//! applications use too: the same URLs, parsed by each store crate's own
//! parser before anything connects (so a bad option is a usage error), and
//! the same errors. This module adds what only the command has: `kafka://`
//! (leadership by consumer group, read-only here), the default file in the
//! state directory, and `--help`. URLs may carry secrets (a password in the
//! user info, a token in the query), so the only way to print one is its
//! redacted [`Display`](std::fmt::Display).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use tenure::store::url::redact;
use tenure::{LeaseStore, LeaseView};
use tenure_connect::Scheme;

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

/// `kafka://`: not a lease store (leadership follows a consumer group's
/// assignment), so not `tenure-connect`'s; the command reads it.
pub const KAFKA: Scheme = Scheme {
    names: &["kafka"],
    feature: "kafka",
    built: cfg!(feature = "kafka"),
    form: "kafka://BROKER[,BROKER]/TOPIC",
};

/// Every store the command knows, in the order `--help` lists them: the
/// lease stores of `tenure-connect`, then `kafka://`.
pub fn schemes() -> impl Iterator<Item = &'static Scheme> {
    tenure_connect::SCHEMES
        .iter()
        .chain(std::iter::once(&KAFKA))
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
    /// The right scheme, but the rest does not fit it (the store crate's
    /// parser says why, redacted).
    Invalid {
        /// What is wrong and how to write it instead.
        reason: String,
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
                for name in schemes().flat_map(|s| s.names) {
                    write!(f, ", {name}://")?;
                }
                Ok(())
            }
            UrlError::NotBuiltIn { scheme, feature } => write!(
                f,
                "the {scheme}:// store is not built into this tenure: rebuild with `--features {feature}` (or `--features all-stores`)"
            ),
            UrlError::Invalid { reason } => f.write_str(reason),
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
    /// Parses a URL: a lease store's by `tenure-connect` (its crate's own
    /// parser checks every option), `kafka://` here.
    pub fn parse(url: &str) -> Result<StoreUrl, UrlError> {
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(UrlError::NoScheme { url: redact(url) });
        };
        let scheme = scheme.to_ascii_lowercase();
        if KAFKA.names.contains(&scheme.as_str()) {
            return if KAFKA.built {
                Ok(StoreUrl::Networked {
                    scheme,
                    url: url.to_owned(),
                })
            } else {
                Err(UrlError::NotBuiltIn {
                    scheme,
                    feature: KAFKA.feature,
                })
            };
        }
        match tenure_connect::StoreUrl::parse(url) {
            Ok(tenure_connect::StoreUrl::Sqlite { path }) => Ok(StoreUrl::Sqlite { path }),
            Ok(tenure_connect::StoreUrl::Memory) => Ok(StoreUrl::Memory),
            Ok(tenure_connect::StoreUrl::Networked { scheme, url }) => {
                Ok(StoreUrl::Networked { scheme, url })
            }
            Err(e) => Err(match e {
                tenure_connect::UrlError::NoScheme { url } => UrlError::NoScheme { url },
                tenure_connect::UrlError::UnknownScheme { scheme } => {
                    UrlError::UnknownScheme { scheme }
                }
                tenure_connect::UrlError::NotBuiltIn { scheme, feature } => {
                    UrlError::NotBuiltIn { scheme, feature }
                }
                other => UrlError::Invalid {
                    reason: other.to_string(),
                },
            }),
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
        let lease_store = match self {
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
                tenure_connect::StoreUrl::Sqlite { path: path.clone() }
            }
            StoreUrl::Memory => tenure_connect::StoreUrl::Memory,
            StoreUrl::Networked { scheme, url } if KAFKA.names.contains(&scheme.as_str()) => {
                return open_kafka(url);
            }
            StoreUrl::Networked { scheme, url } => tenure_connect::StoreUrl::Networked {
                scheme: scheme.clone(),
                url: url.clone(),
            },
        };
        match lease_store.open().await {
            Ok(store) => Ok(Backend::Store(store)),
            // The command says "cannot open the store URL" itself.
            Err(tenure_connect::ConnectError::Open { message, .. }) => Err(OpenError { message }),
            Err(other) => Err(OpenError {
                message: other.to_string(),
            }),
        }
    }
}

#[cfg(feature = "kafka")]
fn open_kafka(url: &str) -> Result<Backend, OpenError> {
    crate::kafka::leader_view(url)
        .map(|view| Backend::ReadOnly {
            view,
            why: crate::kafka::READ_ONLY,
        })
        .map_err(|e| OpenError {
            message: tenure::error::error_chain(&*e),
        })
}

#[cfg(not(feature = "kafka"))]
fn open_kafka(_: &str) -> Result<Backend, OpenError> {
    Err(OpenError {
        message: "the kafka:// store is not built into this tenure".into(),
    })
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
    let forms: Vec<&str> = schemes().map(|s| s.form).collect();
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

    /// (How each form of URL is shown redacted is `tenure::store::url`'s to test.)
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
