//! Connection options, parsed from a `nats://` or `nats+tls://` URL.
//!
//! Parsed here, not by the client library, so that no error message, log
//! line or `Debug` output can ever echo the password or token in the URL:
//! the client gets the servers' addresses without them, and the
//! credentials through its options.

use std::fmt;
use std::time::Duration;

use tenure::store::tls::TlsPaths;

use crate::error::NatsStoreError;

/// The bucket when the URL names none.
pub const DEFAULT_BUCKET: &str = "tenure";

/// The default bound on connecting and on each request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The NATS client port.
const DEFAULT_PORT: u16 = 4222;

/// The options a NATS URL takes, in the order its error lists them.
const OPTIONS: &[&str] = &["timeout", "ca", "cert", "key"];

/// How the client proves who it is.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Auth {
    None,
    UserPassword { user: String, password: String },
    Token(String),
}

/// Where and how to reach NATS, and which key-value bucket holds the
/// leases.
///
/// Built from a URL by [`NatsOptions::from_url`]:
///
/// ```text
/// nats://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/BUCKET][?option=value&...]
/// nats://TOKEN@HOST[:PORT]/BUCKET             (token authentication)
/// nats+tls://...                              (TLS required)
/// ```
///
/// The port defaults to 4222 and the bucket to `tenure`.
///
/// **User and password, or token:** a raw `:` in the user info always
/// separates a user from a password, so `nats://tok:en@host` is the user
/// `tok` with the password `en`; user info without a raw `:` is a token. A
/// token holding `:` writes it `%3A`: `nats://tok%3Aen@host` is the token
/// `tok:en`. User, password and token are percent-decoded; they may hold
/// `@` and `+` as they are, but write `/ ? #` as `%2F %3F %23`, and an `@`
/// after the host is written `%40` (a URL with a raw one there is
/// refused, not guessed at: see [`tenure::store::url`]). Query options:
///
/// | option | meaning | default |
/// |---|---|---|
/// | `timeout` | bound on connecting and on each request (`500ms`, `5s`) | `5s` |
/// | `ca` | PEM file of the CA that signed the server's certificate (TLS only; else the system's roots) | none |
/// | `cert`, `key` | PEM files of a client certificate and its key, for mutual TLS | none |
///
/// ```
/// use tenure_nats::NatsOptions;
/// let o = NatsOptions::from_url("nats+tls://app:s3cret@10.0.0.5,10.0.0.6:4223/leases?ca=/etc/nats/ca.pem")?;
/// assert_eq!(o.servers(), ["nats://10.0.0.5:4222", "nats://10.0.0.6:4223"]);
/// assert_eq!(o.bucket(), "leases");
/// assert!(!format!("{o:?}").contains("s3cret"));
/// assert_eq!(o.describe(), "nats+tls://app@10.0.0.5:4222,10.0.0.6:4223/leases");
/// # Ok::<(), tenure_nats::NatsStoreError>(())
/// ```
#[derive(Clone)]
pub struct NatsOptions {
    pub(crate) tls: bool,
    pub(crate) hosts: Vec<String>,
    pub(crate) auth: Auth,
    pub(crate) bucket: String,
    pub(crate) timeout: Duration,
    pub(crate) tls_files: TlsPaths,
}

impl fmt::Debug for NatsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.auth {
            Auth::None => "none".to_owned(),
            Auth::UserPassword { user, .. } => format!("user {user:?}, password <redacted>"),
            Auth::Token(_) => "token <redacted>".to_owned(),
        };
        f.debug_struct("NatsOptions")
            .field("tls", &self.tls)
            .field("hosts", &self.hosts)
            .field("auth", &auth)
            .field("bucket", &self.bucket)
            .field("timeout", &self.timeout)
            .field("tls_files", &self.tls_files)
            .finish()
    }
}

impl NatsOptions {
    /// Parses a `nats://` or `nats+tls://` URL (see the type's docs).
    /// Errors name the part that is wrong, never the password or token.
    pub fn from_url(url: &str) -> Result<Self, NatsStoreError> {
        fn bad(reason: impl ToString) -> NatsStoreError {
            NatsStoreError::InvalidUrl {
                reason: reason.to_string(),
            }
        }
        let parts = tenure::store::url::split_store_url(
            url,
            &["nats", "nats+tls"],
            "nats:// or nats+tls:// (TLS)",
        )
        .map_err(bad)?;
        let tls = parts.scheme == "nats+tls";
        let bucket = parts.path.strip_prefix('/').unwrap_or("");
        let bucket = if bucket.is_empty() {
            DEFAULT_BUCKET.to_owned()
        } else {
            check_bucket(bucket).map_err(bad)?
        };
        let auth = match parts.userinfo {
            None => Auth::None,
            Some(info) => {
                let (user, password) = tenure::store::url::decode_userinfo(info).map_err(bad)?;
                match password {
                    // nats://TOKEN@host: user info without a raw ':'
                    // is a token (one holding ':' writes it %3A).
                    None if user.is_empty() => {
                        return Err(bad(
                            "an empty token: write nats://TOKEN@host or nats://user:password@host",
                        ))
                    }
                    None => Auth::Token(user),
                    Some(_) if user.is_empty() => {
                        return Err(bad(
                            "an empty user name: write nats://user:password@host:port",
                        ))
                    }
                    Some(password) => Auth::UserPassword { user, password },
                }
            }
        };
        let list =
            tenure::store::url::host_list(parts.hosts, DEFAULT_PORT, "server").map_err(bad)?;
        let (tls_files, others) =
            TlsPaths::from_options(parts.query, OPTIONS, tls, "nats+tls:// instead of nats://")
                .map_err(bad)?;
        let mut options = NatsOptions {
            tls,
            hosts: list,
            auth,
            bucket,
            timeout: DEFAULT_TIMEOUT,
            tls_files,
        };
        // from_options passed only the names in OPTIONS, and took the TLS
        // files: one without an arm here is a bug, refused, never ignored.
        for (name, value) in others {
            if name != "timeout" {
                return Err(bad(tenure::store::url::unknown_option(&name, OPTIONS)));
            }
            options.timeout = tenure::store::url::parse_timeout(&name, &value).map_err(bad)?;
        }
        Ok(options)
    }

    /// Replaces the bound on connecting and on each request.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The key-value bucket that holds the leases.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The bound on connecting and on each request.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the connection requires TLS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The user name, if any (the password and a token are never exposed).
    pub fn user(&self) -> Option<&str> {
        match &self.auth {
            Auth::UserPassword { user, .. } => Some(user),
            _ => None,
        }
    }

    /// The servers as the client library takes them, without credentials.
    pub fn servers(&self) -> Vec<String> {
        self.hosts.iter().map(|h| format!("nats://{h}")).collect()
    }

    /// The servers joined by commas, for messages.
    pub fn target(&self) -> String {
        self.hosts.join(",")
    }

    /// Who the client is, for messages: `user "app"`, `a token` or
    /// `no credentials`.
    pub(crate) fn who(&self) -> String {
        match &self.auth {
            Auth::None => "no credentials".into(),
            Auth::UserPassword { user, .. } => format!("user {user:?}"),
            Auth::Token(_) => "a token".into(),
        }
    }

    /// The URL without password or token: what
    /// [`describe`](tenure::LeaseView::describe) shows.
    pub fn describe(&self) -> String {
        let scheme = if self.tls { "nats+tls" } else { "nats" };
        let user = match &self.auth {
            Auth::None => String::new(),
            Auth::UserPassword { user, .. } => format!("{user}@"),
            Auth::Token(_) => "***@".into(),
        };
        format!("{scheme}://{user}{}/{}", self.target(), self.bucket)
    }
}

/// A JetStream key-value bucket name: `A-Z a-z 0-9 - _`.
fn check_bucket(bucket: &str) -> Result<String, String> {
    if bucket.contains('/') {
        return Err("a path of more than one part: write nats://host:port/BUCKET".into());
    }
    if !bucket
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "bucket {bucket:?}: a bucket name holds only letters, digits, - and _"
        ));
    }
    Ok(bucket.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_testkit::{assert_hostile_password_handled, assert_url_refusals};

    /// Whether `o` authenticates with `user` and `password`.
    fn signs_in_as(o: &NatsOptions, user: &str, password: &str) -> bool {
        o.auth
            == Auth::UserPassword {
                user: user.into(),
                password: password.into(),
            }
    }

    #[test]
    fn parses_the_forms_users_write() {
        let o = NatsOptions::from_url("nats://127.0.0.1:54222/leases").unwrap();
        assert_eq!(o.servers(), ["nats://127.0.0.1:54222"]);
        assert_eq!((o.bucket(), o.auth == Auth::None), ("leases", true));
        let o = NatsOptions::from_url("nats://h").unwrap();
        assert_eq!(
            (o.servers(), o.bucket()),
            (vec!["nats://h:4222".into()], "tenure")
        );
        let o = NatsOptions::from_url("nats://u:p%40ss@a:1,[::1]:2/?timeout=250ms").unwrap();
        assert_eq!(o.servers(), ["nats://a:1", "nats://[::1]:2"]);
        assert_eq!(o.bucket(), "tenure");
        assert!(signs_in_as(&o, "u", "p@ss"));
        assert_eq!(o.timeout, Duration::from_millis(250));
        let o = NatsOptions::from_url("nats://s3cr3t-token@h:1/b").unwrap();
        assert!(o.auth == Auth::Token("s3cr3t-token".into()));
        assert_eq!(o.describe(), "nats://***@h:1/b");
    }

    /// The documented rule: a raw ':' always separates user and password;
    /// a token holding ':' writes it %3A.
    #[test]
    fn a_raw_colon_is_user_and_password_an_escaped_one_is_a_token() {
        let o = NatsOptions::from_url("nats://tok:en@h:1/b").unwrap();
        assert!(signs_in_as(&o, "tok", "en"));
        assert_eq!(o.describe(), "nats://tok@h:1/b");
        let o = NatsOptions::from_url("nats://tok%3Aen@h:1/b").unwrap();
        assert!(o.auth == Auth::Token("tok:en".into()));
        assert_eq!(o.describe(), "nats://***@h:1/b");
        let o = NatsOptions::from_url("nats://u%3Ax:p%3Ay@h:1/b").unwrap();
        assert!(signs_in_as(&o, "u:x", "p:y"));
        let o =
            NatsOptions::from_url("nats+tls://h:1/b?ca=/ca.pem&cert=/c.pem&key=/k.pem").unwrap();
        assert!(o.tls && o.tls_files.key.is_some() && o.tls_files.ca.is_some());
        assert!(NatsOptions::from_url("nats+tls://h")
            .unwrap()
            .tls_files
            .ca
            .is_none());
    }

    #[test]
    fn errors_name_the_part_and_never_the_secret() {
        assert_url_refusals(
            NatsOptions::from_url,
            &[
                // No scheme, a password holding "://": never named.
                ("app:pw-secret://x@h/b", "scheme"),
                ("redis://h:1", "scheme"),
                ("nats://u:pw-secret@h:0/b", "port"),
                ("nats://u:pw-secret@h:1/a/b", "more than one part"),
                ("nats://u:pw-secret@h:1/a.b", "bucket"),
                ("nats://u:pw-secret@h:1/b?ca=/x", "nats+tls://"),
                ("nats+tls://u:pw-secret@h:1?ca=/c&cert=/x", "cert and key"),
                (
                    "nats://u:pw-secret@h:1?bogus=1",
                    r#"unknown option "bogus": the options are timeout, ca, cert, key"#,
                ),
                ("nats://u:pw-secret@h:1?timeout=0s", "zero"),
                ("nats://:pw-secret@h:1", "empty user"),
                ("nats://", "no host"),
                ("nats://h:1,:2", "server 2"),
            ],
        );
    }

    #[test]
    fn passwords_with_url_delimiters_parse_escaped_are_refused_raw_and_never_show() {
        let o = assert_hostile_password_handled(
            NatsOptions::from_url,
            "nats://u:{P}@h:1,g:2/b",
            |o| match &o.auth {
                Auth::UserPassword { user, password } if user == "u" => Some(password.as_str()),
                _ => None,
            },
            NatsOptions::describe,
        );
        assert_eq!((o.hosts.len(), o.bucket()), (2, "b"));
        // A token is a password too.
        assert_hostile_password_handled(
            NatsOptions::from_url,
            "nats://{P}@h:1/b",
            |t| match &t.auth {
                Auth::Token(token) => Some(token.as_str()),
                _ => None,
            },
            NatsOptions::describe,
        );
    }
}
