//! Helpers for store crates that read their options from a URL, so every
//! store splits, decodes and redacts the same way.
//!
//! # The rules every store URL follows
//!
//! * **User info lives in the authority only**: between `://` and the
//!   first `/`, `?` or `#`, up to the authority's last `@`. A password may
//!   hold `@` and `+` as they are (`u:p@ss@host` has one reading), but `/`,
//!   `?` and `#` must be written `%2F`, `%3F`, `%23`, and an `@` after the
//!   host (in the path, the query or the fragment) must be written `%40`.
//! * **An ambiguous URL is refused, never guessed at.** A raw `@` after
//!   the first `/`, `?` or `#` could end the user info of a password
//!   holding `/ ? #` unescaped, or belong to a query value: guessing wrong
//!   connects to a host named by a piece of the password, or to a host
//!   named by a query value. [`split_userinfo`] refuses such a URL with a
//!   [`UserinfoError`] naming the fix (percent-encode), and no piece of it.
//! * **`%XX` escapes are decoded, `+` is a plus.** `+` means a space only in
//!   HTML forms; AWS secret keys and many passwords contain a literal `+`.
//! * **Nothing between `://` and the last `@` is ever shown**, except a user
//!   name before a `:`; [`redact`] is the only form of a store URL that may
//!   appear in a log line or an error (it masks that much even in a URL
//!   [`split_userinfo`] refuses). Parsers name the *part* that is wrong
//!   (the port, the option `timeout`), never echo raw text that could hold
//!   a secret.

use std::time::Duration;

use crate::store::secret::AccessKeys;

/// Decodes `%XX` escapes; `None` if an escape is malformed or the result is
/// not UTF-8. A `+` stays a `+`.
///
/// ```
/// assert_eq!(tenure::store::url::percent_decode("p%40ss").as_deref(), Some("p@ss"));
/// assert_eq!(tenure::store::url::percent_decode("a+b").as_deref(), Some("a+b"));
/// assert_eq!(tenure::store::url::percent_decode("%zz"), None);
/// ```
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A store URL whose user info cannot be told apart from its host, path
/// or query. The message names the fix and no piece of the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UserinfoError {
    /// A raw `@` after the first `/`, `?` or `#` past `scheme://`: a
    /// password holding `/ ? #` unescaped, or an `@` in the path, query or
    /// fragment.
    #[error(
        "an unescaped @ after the host (in the path, query or fragment) makes the URL ambiguous: \
         write an @ there as %40, and percent-encode a password's / ? # @ as %2F %3F %23 %40"
    )]
    AtAfterHost,
}

/// What is wrong with a store URL, as the parsers in this module find it.
/// The message names the part that is wrong and the fix, never a secret:
/// option values appear only where they cannot be one (a duration that is
/// not a duration), and an endpoint only [redacted](redact).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// No `://`: the URL has no scheme.
    #[error("no scheme: the URL must start with {expected}")]
    NoScheme {
        /// The schemes the store takes, as the message names them.
        expected: String,
    },
    /// A scheme the store does not take.
    #[error("scheme {:?} is not {expected}", scheme.as_deref().unwrap_or("(none)"))]
    WrongScheme {
        /// The scheme written, or `None` where the text before `://` is no
        /// scheme (it may then be a secret: `app:pw://x@h`).
        scheme: Option<String>,
        /// The schemes the store takes.
        expected: String,
    },
    /// The user info cannot be told apart from the rest of the URL.
    #[error(transparent)]
    Userinfo(#[from] UserinfoError),
    /// The user name's `%XX` escapes are malformed or not UTF-8.
    #[error("the user name has an invalid %-escape or is not UTF-8 (write % as %25)")]
    UserEscape,
    /// The password's `%XX` escapes are malformed or not UTF-8.
    #[error("the password has an invalid %-escape or is not UTF-8 (write % as %25)")]
    PasswordEscape,
    /// A user name where the store needs a password too.
    #[error("a user name without a password: write {example}")]
    NoPassword {
        /// The form to write, such as `etcd://user:password@host:port`.
        example: String,
    },
    /// A password without a user name where the store needs both.
    #[error("an empty user name: write {example}")]
    EmptyUser {
        /// The form to write.
        example: String,
    },
    /// One entry of a list of hosts is wrong.
    #[error("{noun} {place}: {problem}")]
    InList {
        /// What the entries are (`server`, `host`, `endpoint`).
        noun: String,
        /// The entry's place in the list, from 1.
        place: usize,
        /// What is wrong with it.
        problem: Box<UrlError>,
    },
    /// An empty host.
    #[error("no host: write host:port")]
    NoHost,
    /// `[` without its `]`.
    #[error("an IPv6 address without its closing ]")]
    UnclosedIpv6,
    /// Text after `[address]` that is not `:port`.
    #[error("unexpected text after the IPv6 address: write [::1]:port")]
    AfterIpv6,
    /// An IPv6 address without brackets.
    #[error("an IPv6 address must be in brackets: [::1]:port")]
    UnbracketedIpv6,
    /// A port that is not a number from 1 to 65535.
    #[error("the port is not a number from 1 to 65535")]
    BadPort,
    /// A query word without `=` (most likely the tail of a secret value
    /// holding an unescaped `&`): never repeated.
    #[error("{}", BARE_WORD)]
    BareWord,
    /// An option name's `%XX` escapes are malformed or not UTF-8.
    #[error("an option name has an invalid %-escape or is not UTF-8")]
    OptionNameEscape,
    /// An option value's `%XX` escapes are malformed or not UTF-8.
    #[error("option {name}: the value has an invalid %-escape or is not UTF-8 (write % as %25)")]
    OptionValueEscape {
        /// The option, as [`redact`] shows it.
        name: String,
    },
    /// An option the store does not take.
    #[error("unknown option {name:?}: the options are {}", known.join(", "))]
    UnknownOption {
        /// The option written, as [`redact`] shows it: a name that looks
        /// like user info (`s3cret@host`, from a password whose `&` was not
        /// escaped) is masked. A secret's tail that looks like a plain name
        /// cannot be told from one; write `&` in a value as `%26`.
        name: String,
        /// Every option the store takes.
        known: Vec<&'static str>,
    },
    /// A duration too large to hold.
    #[error("option {name}: {value:?} is out of range")]
    DurationOutOfRange {
        /// The option.
        name: String,
        /// Its value.
        value: String,
    },
    /// A value that is not a duration.
    #[error("option {name}: {value:?} is not a duration such as 500ms or 5s")]
    NotADuration {
        /// The option.
        name: String,
        /// Its value.
        value: String,
    },
    /// A timeout of zero.
    #[error("{name} is zero: give a positive duration such as 5s")]
    ZeroTimeout {
        /// The option.
        name: String,
    },
    /// A value that is not a boolean.
    #[error("option {name} must be true or false")]
    NotABool {
        /// The option.
        name: String,
    },
    /// Half a pair of static access keys, or a session token alone.
    #[error(
        "static credentials need both access_key_id and secret_access_key \
         (session_token is optional): give both, or neither to use {otherwise}"
    )]
    HalfAccessKeys {
        /// Where credentials come from without keys.
        otherwise: String,
    },
    /// An endpoint option that is not an `http://` or `https://` URL.
    #[error("endpoint {shown:?} is not an http:// or https:// URL (e.g. endpoint={example})")]
    NotHttpEndpoint {
        /// The endpoint, [redacted](redact).
        shown: String,
        /// The form to write, such as `http://127.0.0.1:8000`.
        example: String,
    },
}

/// Splits what follows `scheme://` into the user info (before the
/// authority's last `@`, if there is one) and the rest (hosts, path,
/// query). The authority ends at the first `/`, `?` or `#`; a raw `@`
/// after that is refused (see [the rules](self)).
///
/// ```
/// use tenure::store::url::{split_userinfo, UserinfoError};
/// assert_eq!(split_userinfo("app:p@ss@db:5432/x"), Ok((Some("app:p@ss"), "db:5432/x")));
/// assert_eq!(split_userinfo("app:pa%2Fs%3Fs%23w@db/x?a=%40"), Ok((Some("app:pa%2Fs%3Fs%23w"), "db/x?a=%40")));
/// assert_eq!(split_userinfo("db:5432/x"), Ok((None, "db:5432/x")));
/// assert_eq!(split_userinfo("h:1/?x=a@b"), Err(UserinfoError::AtAfterHost));
/// assert_eq!(split_userinfo("app:pa/ss@db/x"), Err(UserinfoError::AtAfterHost));
/// ```
pub fn split_userinfo(rest: &str) -> Result<(Option<&str>, &str), UserinfoError> {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if rest[end..].contains('@') {
        return Err(UserinfoError::AtAfterHost);
    }
    Ok(match rest[..end].rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    })
}

/// A store URL split by [`split_store_url`] into its parts, none of them
/// decoded yet. Its `Debug` masks the user info and the query's secrets.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UrlParts<'a> {
    /// The scheme, as written in the list given to [`split_store_url`]
    /// (lower case): the URL may have written it in any case.
    pub scheme: &'a str,
    /// The user info (`user[:password]`), still %-encoded: decode it with
    /// [`decode_userinfo`].
    pub userinfo: Option<&'a str>,
    /// What the authority holds after the user info: one `host[:port]`, or
    /// several separated by `,`.
    pub hosts: &'a str,
    /// The path from its `/`; empty when there is none.
    pub path: &'a str,
    /// The query after `?`; empty when there is none.
    pub query: &'a str,
}

impl UrlParts<'_> {
    /// The query as [`redact`] shows it in the whole URL (the scheme is a
    /// scheme and the query holds no raw `@`, so only its secrets mask).
    fn shown_query(&self) -> String {
        let url = format!(
            "{}://{}{}?{}",
            self.scheme, self.hosts, self.path, self.query
        );
        redact(&url)
            .split_once('?')
            .map_or_else(String::new, |(_, q)| q.to_owned())
    }
}

impl std::fmt::Debug for UrlParts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlParts")
            .field("scheme", &self.scheme)
            .field("userinfo", &self.userinfo.map(|_| "***"))
            .field("hosts", &self.hosts)
            .field("path", &self.path)
            .field("query", &self.shown_query())
            .finish()
    }
}

/// Whether `text` may be a URL scheme (RFC 3986: a letter, then letters,
/// digits, `+ - .`). Text before `://` that is not one may be a secret: in
/// `app:pw://x@h` (no scheme, a password holding `://`) it is user info.
///
/// ```
/// assert!(tenure::store::url::is_scheme("nats+tls"));
/// assert!(!tenure::store::url::is_scheme("app:pw"));
/// ```
pub fn is_scheme(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// Splits a store URL whose scheme is one of `schemes` (compared without
/// regard to case) into its parts, finding the user info by
/// [the rules](self). `expected` names the schemes in the error, such as
/// `"redis:// or rediss:// (TLS)"`.
///
/// The error names the scheme found only when it looks like one: in
/// `app:pw://x@h` (no scheme, a password holding `://`) it would be the
/// secret.
///
/// ```
/// use tenure::store::url::split_store_url;
/// let p = split_store_url("Redis://app:p%2Fw@h:1/2?prefix=x", &["redis", "rediss"], "redis://").unwrap();
/// assert_eq!((p.scheme, p.userinfo, p.hosts, p.path, p.query), ("redis", Some("app:p%2Fw"), "h:1", "/2", "prefix=x"));
/// let e = split_store_url("app:pw://x@h", &["redis"], "redis://").unwrap_err().to_string();
/// assert!(e.contains("(none)") && !e.contains("pw"), "{e}");
/// let e = split_store_url("h:1", &["redis"], "redis://").unwrap_err();
/// assert!(e.to_string().contains("no scheme"));
/// ```
pub fn split_store_url<'a>(
    url: &'a str,
    schemes: &[&'a str],
    expected: &str,
) -> Result<UrlParts<'a>, UrlError> {
    let Some((written, rest)) = url.split_once("://") else {
        return Err(UrlError::NoScheme {
            expected: expected.to_owned(),
        });
    };
    let Some(scheme) = schemes
        .iter()
        .find(|s| s.eq_ignore_ascii_case(written))
        .copied()
    else {
        return Err(UrlError::WrongScheme {
            scheme: is_scheme(written).then(|| written.to_owned()),
            expected: expected.to_owned(),
        });
    };
    let (userinfo, rest) = split_userinfo(rest)?;
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (hosts, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    Ok(UrlParts {
        scheme,
        userinfo,
        hosts,
        path,
        query,
    })
}

/// Decodes user info that must hold both a user name and a password when
/// there is any, as etcd's and ZooKeeper's do; `example` shows the form in
/// the errors, such as `"etcd://user:password@host:port"`.
///
/// ```
/// use tenure::store::url::user_and_password;
/// let (user, password) = user_and_password(Some("app:p%40ss"), "x").unwrap();
/// assert_eq!((user.as_deref(), password.as_ref().map(|p| p.expose())), (Some("app"), Some("p@ss")));
/// assert!(user_and_password(None, "x").unwrap().0.is_none());
/// assert!(user_and_password(Some("app"), "x").unwrap_err().to_string().contains("without a password"));
/// assert!(user_and_password(Some(":pw"), "x").unwrap_err().to_string().contains("empty user name"));
/// ```
pub fn user_and_password(
    userinfo: Option<&str>,
    example: &str,
) -> Result<(Option<String>, Option<crate::store::secret::Secret>), UrlError> {
    let Some(info) = userinfo else {
        return Ok((None, None));
    };
    let (user, password) = decode_userinfo(info)?;
    let example = example.to_owned();
    let Some(password) = password else {
        return Err(UrlError::NoPassword { example });
    };
    if user.is_empty() {
        return Err(UrlError::EmptyUser { example });
    }
    Ok((Some(user), Some(password.into())))
}

/// Splits a `,`-separated list of `host[:port]` into `host:port` strings
/// (an IPv6 host in brackets), `default_port` where none is given. An
/// error names the entry by its place (`noun` 2: the `server`, the `host`).
///
/// ```
/// use tenure::store::url::host_list;
/// assert_eq!(host_list("a,[::1]:7,b:9", 4, "host"), Ok(vec!["a:4".into(), "[::1]:7".into(), "b:9".into()]));
/// assert!(host_list("a,b:0", 4, "server").unwrap_err().to_string().starts_with("server 2: "));
/// ```
pub fn host_list(hosts: &str, default_port: u16, noun: &str) -> Result<Vec<String>, UrlError> {
    let mut list = Vec::new();
    for host in hosts.split(',') {
        let (h, port) =
            split_host_port(host, default_port).map_err(|problem| UrlError::InList {
                noun: noun.to_owned(),
                place: list.len() + 1,
                problem: Box::new(problem),
            })?;
        list.push(if h.contains(':') {
            format!("[{h}]:{port}")
        } else {
            format!("{h}:{port}")
        });
    }
    Ok(list)
}

/// Splits and decodes a URL's user info (`user[:password]`, as
/// [`split_userinfo`] finds it): the user (possibly empty) and the password, if a
/// `:` was there. Each store then applies its own rules (which parts it
/// requires). Errors never repeat the text.
///
/// ```
/// assert_eq!(tenure::store::url::decode_userinfo("app:p%40ss"), Ok(("app".into(), Some("p@ss".into()))));
/// assert_eq!(tenure::store::url::decode_userinfo(":secret"), Ok(("".into(), Some("secret".into()))));
/// assert_eq!(tenure::store::url::decode_userinfo("app"), Ok(("app".into(), None)));
/// assert_eq!(tenure::store::url::decode_userinfo("app:a%2Fb%3Fc%23d@e+f"), Ok(("app".into(), Some("a/b?c#d@e+f".into()))));
/// assert!(tenure::store::url::decode_userinfo("a%zz:b").is_err());
/// ```
pub fn decode_userinfo(info: &str) -> Result<(String, Option<String>), UrlError> {
    let (user, password) = match info.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (info, None),
    };
    let user = percent_decode(user).ok_or(UrlError::UserEscape)?;
    let password = password
        .map(|p| percent_decode(p).ok_or(UrlError::PasswordEscape))
        .transpose()?;
    Ok((user, password))
}

/// Splits `host[:port]` (an IPv6 address in brackets: `[::1]:6379`) into
/// the host and the port, `default_port` if none is given. Errors say what
/// is wrong without repeating the text.
///
/// ```
/// use tenure::store::url::split_host_port;
/// assert_eq!(split_host_port("db", 5432), Ok(("db".into(), 5432)));
/// assert_eq!(split_host_port("[::1]:7000", 5432), Ok(("::1".into(), 7000)));
/// assert_eq!(split_host_port("db:99999", 5432), Err(tenure::store::url::UrlError::BadPort));
/// ```
pub fn split_host_port(s: &str, default_port: u16) -> Result<(String, u16), UrlError> {
    if s.is_empty() {
        return Err(UrlError::NoHost);
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or(UrlError::UnclosedIpv6)?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(UrlError::AfterIpv6),
        };
        (h.to_owned(), port)
    } else {
        match s.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => return Err(UrlError::UnbracketedIpv6),
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (s.to_owned(), None),
        }
    };
    if host.is_empty() {
        return Err(UrlError::NoHost);
    }
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or(UrlError::BadPort)?,
    };
    Ok((host, port))
}

/// The `key=value` pairs of a query string (the part after `?`), split on
/// `&` and %-decoded. An error names the key only (values may be secrets),
/// and a word without `=` is an error that does not repeat it: it is most
/// likely the tail of a secret value holding an unescaped `&` (see
/// [`BARE_WORD`]).
///
/// ```
/// let pairs: Result<Vec<_>, _> = tenure::store::url::query_pairs("a=1&b=x%2By+z&c=").collect();
/// assert_eq!(pairs.unwrap(), [("a".into(), "1".into()), ("b".into(), "x+y+z".into()), ("c".into(), "".into())]);
/// assert!(tenure::store::url::query_pairs("key=s3&cr3t").any(|p| p.is_err_and(|e| !e.to_string().contains("cr3t"))));
/// ```
pub fn query_pairs(query: &str) -> impl Iterator<Item = Result<(String, String), UrlError>> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').ok_or(UrlError::BareWord)?;
        let key = percent_decode(k).ok_or(UrlError::OptionNameEscape)?;
        let value =
            percent_decode(v).ok_or_else(|| UrlError::OptionValueEscape { name: redact(&key) })?;
        Ok((key, value))
    })
}

/// The options of a query string, as [`query_pairs`] reads them, in the
/// order written, once every name is found in `known`: the one reader of
/// a store's options, so that the error for a name outside the list names
/// it and lists them all ([`UrlError::UnknownOption`]). The first pair
/// that does not read is the error.
///
/// ```
/// use tenure::store::url::{query_options, UrlError};
/// const OPTIONS: &[&str] = &["prefix", "timeout"];
/// let pairs = query_options("timeout=2s&prefix=x", OPTIONS).unwrap();
/// assert_eq!(pairs, [("timeout".into(), "2s".into()), ("prefix".into(), "x".into())]);
/// let e = query_options("prefix=x&bogus=1", OPTIONS).unwrap_err();
/// assert_eq!(e.to_string(), r#"unknown option "bogus": the options are prefix, timeout"#);
/// assert!(matches!(query_options("prefix", OPTIONS), Err(UrlError::BareWord)));
/// ```
pub fn query_options(
    query: &str,
    known: &[&'static str],
) -> Result<Vec<(String, String)>, UrlError> {
    known_query_pairs(query, known).collect()
}

/// The error for option `name`, which is not among `known`: the name as
/// [`redact`] shows it, and the list.
pub fn unknown_option(name: &str, known: &[&'static str]) -> UrlError {
    UrlError::UnknownOption {
        name: redact(name),
        known: known.to_vec(),
    }
}

/// [`query_options`] pair by pair, for a reader that checks each pair as
/// it comes (the TLS files of [`TlsPaths::from_options`](crate::store::tls::TlsPaths::from_options)).
pub fn known_query_pairs<'q>(
    query: &'q str,
    known: &'q [&'static str],
) -> impl Iterator<Item = Result<(String, String), UrlError>> + 'q {
    query_pairs(query).map(move |pair| {
        let (name, value) = pair?;
        if known.contains(&name.as_str()) {
            Ok((name, value))
        } else {
            Err(unknown_option(&name, known))
        }
    })
}

/// The error for a word without `=` in a URL's query. It never repeats the
/// word: [`redact`] masks such words, since a secret value holding an
/// unescaped `&` leaves its tail there.
pub const BARE_WORD: &str = "an option without a value (no =): write name=value, and an & inside \
     a value as %26";

/// Parses the option `name`'s value as a duration: `500ms`, `5s`, `2m`,
/// `1h 30m` (humantime's forms) or a bare number of seconds. The error
/// names the option and the forms it takes.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tenure::store::url::parse_duration("timeout", "250ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(tenure::store::url::parse_duration("timeout", "3"), Ok(Duration::from_secs(3)));
/// assert!(tenure::store::url::parse_duration("timeout", "soon").unwrap_err().to_string().contains("timeout"));
/// ```
pub fn parse_duration(name: &str, value: &str) -> Result<Duration, UrlError> {
    let v = value.trim();
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return v
            .parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| UrlError::DurationOutOfRange {
                name: name.to_owned(),
                value: value.to_owned(),
            });
    }
    humantime::parse_duration(v).map_err(|_| UrlError::NotADuration {
        name: name.to_owned(),
        value: value.to_owned(),
    })
}

/// Parses the option `name`'s value as a store's timeout: a duration, as
/// [`parse_duration`] reads it, that is not zero.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tenure::store::url::parse_timeout("timeout", "2s"), Ok(Duration::from_secs(2)));
/// assert!(tenure::store::url::parse_timeout("timeout", "0s").unwrap_err().to_string().contains("positive"));
/// ```
pub fn parse_timeout(name: &str, value: &str) -> Result<Duration, UrlError> {
    let d = parse_duration(name, value)?;
    if d.is_zero() {
        return Err(UrlError::ZeroTimeout {
            name: name.to_owned(),
        });
    }
    Ok(d)
}

/// Parses the option `name`'s value as a boolean: `true`/`false`,
/// `1`/`0`, `yes`/`no`, `on`/`off`.
///
/// ```
/// assert_eq!(tenure::store::url::parse_bool("create", "yes"), Ok(true));
/// assert!(tenure::store::url::parse_bool("create", "maybe").unwrap_err().to_string().contains("true or false"));
/// ```
pub fn parse_bool(name: &str, value: &str) -> Result<bool, UrlError> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(UrlError::NotABool {
            name: name.to_owned(),
        }),
    }
}

/// Whether a query option's name suggests its value is a secret
/// (`password`, `sasl.password`, `secret_access_key`, `token`,
/// `sasl.jaas.config`, …), read with its `%XX` escapes decoded.
pub fn is_secret_key(key: &str) -> bool {
    // Judged as a parser reads the name: `sasl.p%61ssword` is
    // `sasl.password`.
    let k = percent_decode(key)
        .unwrap_or_else(|| key.to_owned())
        .to_ascii_lowercase();
    [
        "password",
        "passwd",
        "pass",
        "pwd",
        "secret",
        "token",
        "key",
        "sig",
        "credential",
        "auth",
        // Kafka's `sasl.jaas.config` carries the password inside it.
        "jaas",
    ]
    .iter()
    .any(|s| k.contains(s))
}

/// How an error may name query option `name`: quoted and [`redact`]ed, or,
/// when the pair just before it held a secret (`after_secret`, see
/// [`is_secret_key`]), not at all. A secret with an unescaped `&`
/// (`secret=Qa1&Qb2=Qc3`) leaves its tail as the next pair's name, which
/// looks like any other; a reader stops at the first name it does not
/// know, so only that pair can be a secret's tail.
///
/// ```
/// use tenure::store::url::shown_option_name;
/// assert_eq!(shown_option_name("regoin", false), r#""regoin""#);
/// assert!(!shown_option_name("Qb2", true).contains("Qb2"));
/// ```
pub fn shown_option_name(name: &str, after_secret: bool) -> String {
    if after_secret {
        "(a name after a secret option, not shown: write & inside a value as %26)".to_owned()
    } else {
        format!("{:?}", redact(name))
    }
}

/// An access key id as it may be shown: `***` and its last four
/// characters (as `aws configure list` shows keys), or only `***` for a
/// key of four characters or fewer.
///
/// ```
/// assert_eq!(tenure::store::url::mask_key_id("AKIDEXAMPLE"), "***MPLE");
/// assert_eq!(tenure::store::url::mask_key_id("AKID"), "***");
/// ```
pub fn mask_key_id(id: &str) -> String {
    let count = id.chars().count();
    if count > 4 {
        let tail: String = id.chars().skip(count - 4).collect();
        format!("***{tail}")
    } else {
        "***".to_owned()
    }
}

/// The user info a described store URL shows before its hosts: `user@`,
/// or nothing without a user. The password never shows.
///
/// ```
/// assert_eq!(tenure::store::url::shown_user(Some("app")), "app@");
/// assert_eq!(tenure::store::url::shown_user(None), "");
/// ```
pub fn shown_user(user: Option<&str>) -> String {
    user.map(|u| format!("{u}@")).unwrap_or_default()
}

/// Drops `user:password@` from a URL (an endpoint option, say), in case
/// one was given, for showing it; the query's secrets are masked as
/// [`redact`] masks them.
///
/// Where the user info cannot be told apart (a raw `@` after the host: a
/// password's raw `/ ? #`, or an `@` in the query), or the text before
/// `://` is no scheme, this is [`redact`]'s result instead: never a piece
/// of a secret, at the price of masking more.
///
/// ```
/// use tenure::store::url::strip_userinfo;
/// assert_eq!(strip_userinfo("http://u:p@h:9000/x?y=1"), "http://h:9000/x?y=1");
/// assert_eq!(strip_userinfo("http://h:9000"), "http://h:9000");
/// assert_eq!(strip_userinfo("http://h:9000/?password=pw"), "http://h:9000/?password=***");
/// assert_eq!(strip_userinfo("http://u:pa/ss?#x@h:9000"), "http://u:***@h:9000");
/// assert_eq!(strip_userinfo("http://h:9000/?token=a@b"), "http://h:***");
/// ```
pub fn strip_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://").filter(|(s, _)| is_scheme(s)) else {
        return redact(url);
    };
    match split_userinfo(rest) {
        Ok((_, after)) => redact(&format!("{scheme}://{after}")),
        Err(_) => redact(url),
    }
}

/// The URL as it may be shown: the only form of a store URL that may be
/// logged or appear in an error. Masked with `***`:
///
/// * everything between `://` and the *last* `@` (the user info, however
///   many `/ ? # @` its password holds), except a user name before a `:`;
/// * the values of query options whose names suggest secrets
///   ([`is_secret_key`]), up to the next `&`, even where an unescaped `@`,
///   `?` or `#` inside the value makes the URL ambiguous;
/// * query words without `=` (the tail of a value with an unescaped `&`).
///
/// Masking more than needed in an ambiguous URL is the price of never
/// showing a piece of a secret.
///
/// ```
/// use tenure::store::url::redact;
/// assert_eq!(redact("redis://app:s3cret@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(redact("postgres://app:pa/ss?#x@db/x"), "postgres://app:***@db/x");
/// assert_eq!(redact("redis://t0ken@h"), "redis://***@h");
/// assert_eq!(redact("postgres://h/db?password=x&a=b"), "postgres://h/db?password=***&a=b");
/// ```
pub fn redact(url: &str) -> String {
    // Text before "://" that is no scheme (`app:pw://x@h`) is user info.
    let start = url
        .find("://")
        .filter(|&i| is_scheme(&url[..i]))
        .map_or(0, |i| i + 3);
    let mut masked = vec![false; url.len()];
    let mut mask = |from: usize, to: usize| {
        for m in &mut masked[from..to] {
            *m = true;
        }
    };
    // The user info, by the last '@'.
    let last_at = url[start..].rfind('@').map(|i| start + i);
    if let Some(at) = last_at {
        let info = &url[start..at];
        let from = match info.split_once(':') {
            // A user name holds no unescaped ':' '/' '?' '#' '@'; anything
            // else before the ':' is a mangled URL, not a user name.
            Some((user, _)) if !user.contains(['/', '?', '#', '@']) => start + user.len() + 1,
            _ => start,
        };
        mask(from, at);
    }
    // The query, read from the first '?' as a parser that does not know
    // about unescaped passwords would read it.
    if let Some(q) = url[start..].find('?').map(|i| start + i + 1) {
        let mut pos = q;
        for pair in url[q..].split('&') {
            let end = pos + pair.len();
            match pair.split_once('=') {
                Some((k, _)) if is_secret_key(k) => mask(pos + k.len() + 1, end),
                Some(_) => {}
                // A bare word spanning the last '@' is the user info's tail
                // and the host, already handled above.
                None if last_at.is_some_and(|at| pos <= at && at < end) => {}
                None => mask(pos, end),
            }
            pos = end + 1;
        }
    }
    // Text that is not a URL may be libpq's key=value form
    // (`host=h password=s3cret`): mask the values of its secret keys.
    if url[..url.find("://").unwrap_or(url.len())].contains('=') {
        for (from, to) in conninfo_secrets(url) {
            mask(from, to);
        }
    }
    let mut out = String::with_capacity(url.len());
    let mut in_mask = false;
    for (i, c) in url.char_indices() {
        if masked[i] {
            if !in_mask {
                out.push_str("***");
                in_mask = true;
            }
        } else {
            in_mask = false;
            out.push(c);
        }
    }
    out
}

/// The byte ranges of the values of secret keys ([`is_secret_key`]) in
/// libpq's `key = value` form: a value runs to the next whitespace, or to
/// its closing quote if it starts with `'`; a backslash escapes the next
/// character in either. Overlapping ranges are harmless.
fn conninfo_secrets(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut ranges = Vec::new();
    // Where the last masked value ends: an '=' before it is inside that
    // value (and scanning it again would make long input quadratic).
    let mut masked_to = 0;
    for (eq, _) in text.match_indices('=') {
        if eq < masked_to {
            continue;
        }
        let before = text[..eq].trim_end();
        let key_start = before
            .char_indices()
            .rev()
            .find(|&(_, c)| c.is_whitespace() || c == '=' || c == '\'')
            .map_or(0, |(i, c)| i + c.len_utf8());
        if !is_secret_key(&before[key_start..]) {
            continue;
        }
        let mut i = eq + 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let from = i;
        let quoted = bytes.get(i) == Some(&b'\'');
        if quoted {
            i += 1;
        }
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 1,
                b'\'' if quoted => {
                    i += 1;
                    break;
                }
                b if !quoted && b.is_ascii_whitespace() => break,
                _ => {}
            }
            i += 1;
        }
        masked_to = i.min(bytes.len());
        ranges.push((from, masked_to));
    }
    ranges
}

/// The query of a URL as it may be shown (in `redacted_url`, `Debug`,
/// errors): each option written only when it is set, endpoints redacted,
/// secrets as `***`, access key ids shortened.
///
/// ```
/// use std::time::Duration;
/// use tenure::store::secret::AccessKeys;
/// use tenure::store::url::ShownQuery;
/// let keys = AccessKeys::new("AKIDEXAMPLE", "s3cr3t", Some("t0ken".to_owned()));
/// let mut q = ShownQuery::default();
/// q.value("region", Some("eu-west-1"))
///     .endpoint(Some("http://u:pw@h:1"))
///     .flag("create", true)
///     .duration("timeout", Duration::from_secs(3), Duration::from_secs(3))
///     .access_keys(Some(&keys));
/// assert_eq!(
///     q.url("dynamodb://t"),
///     "dynamodb://t?region=eu-west-1&endpoint=http://u:***@h:1&create=true\
///      &access_key_id=***MPLE&secret_access_key=***&session_token=***"
/// );
/// assert_eq!(ShownQuery::default().url("dynamodb://t"), "dynamodb://t");
/// ```
#[derive(Debug, Default, Clone)]
pub struct ShownQuery(Vec<String>);

impl ShownQuery {
    /// `name=value` when there is a value.
    pub fn value(&mut self, name: &str, value: Option<impl std::fmt::Display>) -> &mut Self {
        if let Some(v) = value {
            self.0.push(format!("{name}={v}"));
        }
        self
    }

    /// `name=true` when `on`.
    pub fn flag(&mut self, name: &str, on: bool) -> &mut Self {
        self.value(name, on.then_some("true"))
    }

    /// `name=DURATION` when it is not `default`.
    pub fn duration(&mut self, name: &str, value: Duration, default: Duration) -> &mut Self {
        self.value(
            name,
            (value != default).then(|| humantime::format_duration(value)),
        )
    }

    /// `endpoint=URL`, [redacted](redact): an endpoint may carry a user
    /// info, with a password written in any form.
    pub fn endpoint(&mut self, url: Option<&str>) -> &mut Self {
        self.value("endpoint", url.map(redact))
    }

    /// `name=***` when the secret is there.
    pub fn secret(&mut self, name: &str, present: bool) -> &mut Self {
        self.value(name, present.then_some("***"))
    }

    /// Static access keys, when there are some: the id
    /// [shortened](mask_key_id), the secret key and session token (when
    /// there is one) as `***`.
    pub fn access_keys(&mut self, keys: Option<&AccessKeys>) -> &mut Self {
        if let Some(keys) = keys {
            self.value("access_key_id", Some(mask_key_id(keys.access_key_id())))
                .secret("secret_access_key", true)
                .secret("session_token", keys.session_token().is_some());
        }
        self
    }

    /// `base`, followed by `?` and the options when there are any.
    pub fn url(&self, base: &str) -> String {
        if self.0.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", self.0.join("&"))
        }
    }
}

/// The query options of static [`AccessKeys`] (`access_key_id`,
/// `secret_access_key`, `session_token`), collected while a URL's query is
/// read and checked once it is: the pair whole, or nothing of it.
///
/// ```
/// use tenure::store::url::AccessKeyOptions;
/// let mut keys = AccessKeyOptions::default();
/// for (name, value) in [("access_key_id", "AKID1234"), ("secret_access_key", "s3cr3t")] {
///     assert!(AccessKeyOptions::is_option(name));
///     keys.set(name, value.to_owned());
/// }
/// let keys = keys.finish("the environment").unwrap().unwrap();
/// assert_eq!(keys.access_key_id(), "AKID1234");
///
/// let mut half = AccessKeyOptions::default();
/// half.set("secret_access_key", "s3cr3t".to_owned());
/// let e = half.finish("the environment").unwrap_err().to_string();
/// assert!(e.contains("both access_key_id and secret_access_key") && !e.contains("s3cr3t"));
/// ```
#[derive(Default)]
pub struct AccessKeyOptions {
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    session_token: Option<String>,
}

impl AccessKeyOptions {
    const NAMES: [&'static str; 3] = ["access_key_id", "secret_access_key", "session_token"];

    /// Whether `name` is one of the three options.
    pub fn is_option(name: &str) -> bool {
        Self::NAMES.contains(&name)
    }

    /// Takes the option `name`'s value (a later one replaces an earlier);
    /// a name that is not one of the three is ignored.
    pub fn set(&mut self, name: &str, value: String) {
        let slot = match name {
            "access_key_id" => &mut self.access_key_id,
            "secret_access_key" => &mut self.secret_access_key,
            "session_token" => &mut self.session_token,
            _ => return,
        };
        *slot = Some(value);
    }

    /// The keys the query gave, or `None` if it gave none. Half a pair,
    /// or a session token without one, is an error naming the fix;
    /// `otherwise` says where credentials come from without keys ("the
    /// standard AWS chain"). The error shows no value.
    pub fn finish(self, otherwise: &str) -> Result<Option<AccessKeys>, UrlError> {
        match (self.access_key_id, self.secret_access_key) {
            (Some(id), Some(secret)) => Ok(Some(AccessKeys::new(id, secret, self.session_token))),
            (None, None) if self.session_token.is_none() => Ok(None),
            _ => Err(UrlError::HalfAccessKeys {
                otherwise: otherwise.to_owned(),
            }),
        }
    }
}

/// Checks that an endpoint option is an `http://` or `https://` URL with
/// something after the scheme; the error shows it [redacted](redact) and
/// `example`, such as `http://127.0.0.1:8000`.
///
/// ```
/// use tenure::store::url::check_http_endpoint;
/// assert!(check_http_endpoint("https://h:1", "http://h:1").is_ok());
/// let e = check_http_endpoint("ftp://u:pw@h", "http://h:1").unwrap_err().to_string();
/// assert!(e.contains("not an http:// or https:// URL") && !e.contains("pw"), "{e}");
/// ```
pub fn check_http_endpoint(endpoint: &str, example: &str) -> Result<(), UrlError> {
    let ok = ["http://", "https://"].iter().any(|s| {
        endpoint
            .strip_prefix(s)
            .is_some_and(|rest| !rest.is_empty())
    });
    if ok {
        Ok(())
    } else {
        Err(UrlError::NotHttpEndpoint {
            shown: redact(endpoint),
            example: example.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_covers_the_forms_urls_take() {
        for (url, shown) in [
            ("postgres://h/db", "postgres://h/db"),
            ("postgres://u@h/db", "postgres://***@h/db"),
            ("postgres://u:p@ss@h/db", "postgres://u:***@h/db"),
            ("etcd://u:p@a:1,b:2?x=1", "etcd://u:***@a:1,b:2?x=1"),
            ("not a url", "not a url"),
            ("u:pw@host", "u:***@host"),
            (
                "kafka://h:1/t?sasl.password=a#b&sasl.username=me",
                "kafka://h:1/t?sasl.password=***&sasl.username=me",
            ),
            (
                "dynamodb://t?secret_access_key=a/b+c&x=1&tail",
                "dynamodb://t?secret_access_key=***&x=1&***",
            ),
            (
                "postgres://app:hunter2@db:5432/x?sslmode=require&password=pw2",
                "postgres://app:***@db:5432/x?sslmode=require&password=***",
            ),
            ("nats://t0ken@h:4222/b", "nats://***@h:4222/b"),
            (
                "kafka://h:1?sasl.p%61ssword=hunter2&x=1",
                "kafka://h:1?sasl.p%61ssword=***&x=1",
            ),
            (
                "kafka://h:1?sasl.jaas.config=Plain%20password%3D%22s3cret%22",
                "kafka://h:1?sasl.jaas.config=***",
            ),
            (
                "postgres://app:pa/ss@127.0.0.1:55432/postgres",
                "postgres://app:***@127.0.0.1:55432/postgres",
            ),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    /// A libpq `key=value` string (not a URL) handed where a URL goes is
    /// shown with its secret values masked, quoted, spaced or escaped.
    #[test]
    fn conninfo_strings_never_show_their_secrets() {
        assert_eq!(
            redact("host=127.0.0.1 user=app password=Qa1/Qb2 dbname=x"),
            "host=127.0.0.1 user=app password=*** dbname=x"
        );
        for text in [
            "host=h password=Qa1/Qb2?Qc3#Qd4@Qe5+Qf6",
            "host=h password = Qa1",
            "host=h password='Qa1 Qb2\\' Qc3' dbname=x",
            "host=h password=Qa1\\ Qb2",
            "host=h sslpassword=Qa1 user=u",
            "password=Qa1",
            "sslrootcert=file://x password=Qa1",
            "host=h\u{3000}password=Qa1\u{a0}Qb2 user=ü",
            "password=\\éQa1 x",
        ] {
            let shown = redact(text);
            for p in ["Qa1", "Qb2", "Qc3", "Qd4", "Qe5", "Qf6"] {
                assert!(!shown.contains(p), "{text} shown as {shown}");
            }
        }
        // Long hostile input is read in one pass (each value once).
        let long = format!("host=h {}Qa1", "password=".repeat(200_000));
        assert_eq!(redact(&long), "host=h password=***");
    }

    #[test]
    fn no_piece_of_a_hostile_password_survives_redaction() {
        let pieces = ["Qa1", "Qb2", "Qc3", "Qd4", "Qe5", "Qf6"];
        let password = "Qa1/Qb2?Qc3#Qd4@Qe5+Qf6";
        for url in [
            format!("postgres://app:{password}@127.0.0.1:5432/db"),
            format!("redis://:{password}@127.0.0.1:6379"),
            format!("redis://{password}@127.0.0.1:6379"),
            format!("etcd://app:{password}@127.0.0.1:2379,127.0.0.2:2379"),
            format!("kafka://app:{password}@127.0.0.1:9092/t"),
            format!("dynamodb://t?secret_access_key={password}&access_key_id=AK"),
            format!("kafka://h:1/t?sasl.password={password}"),
            format!("postgres:app:{password}@h/db"),
        ] {
            let shown = redact(&url);
            for p in pieces {
                assert!(!shown.contains(p), "{url} shown as {shown}");
            }
        }
    }

    /// The user info is found in the authority only: an `@` in the query
    /// or the fragment no longer moves the host, and a URL that could be
    /// read two ways (a raw `/ ? #` in a password, or a raw `@` after the
    /// host) is refused with the fix, never a piece of it.
    #[test]
    fn user_info_is_found_in_the_authority_only() {
        assert_eq!(split_userinfo("h:1/?x=a%40b"), Ok((None, "h:1/?x=a%40b")));
        assert_eq!(split_userinfo("u:p@h:1/0"), Ok((Some("u:p"), "h:1/0")));
        assert_eq!(split_userinfo("u:p@ss@h"), Ok((Some("u:p@ss"), "h")));
        assert_eq!(split_userinfo("u:p+s@h#f"), Ok((Some("u:p+s"), "h#f")));
        for rest in [
            "h:1/?x=a@b",
            "h:1/db?x=a@b",
            "h:1#Zq9@b",
            "h:1/a@b",
            "u:p@h:1/?x=a@b",
            "u:Qa1/Qb2?Qc3#Qd4@Qe5+Qf6@h:1",
            "u:Qa1?Qb2@h",
            "u:Qa1#Qb2@h",
            ":Qa1/Qb2@h",
        ] {
            let e = split_userinfo(rest).unwrap_err();
            assert_eq!(e, UserinfoError::AtAfterHost, "{rest}");
            let text = e.to_string();
            assert!(text.contains("%40") && text.contains("%2F"), "{text}");
            for piece in ["Qa1", "Qb2", "Qe5", "Zq9"] {
                assert!(!text.contains(piece), "{rest}: {text}");
            }
        }
        // Percent-encoded, the same password is one reading.
        let (info, host) = split_userinfo("u:Qa1%2FQb2%3FQc3%23Qd4%40Qe5+Qf6@h:1/x").unwrap();
        assert_eq!(host, "h:1/x");
        assert_eq!(
            decode_userinfo(info.unwrap()),
            Ok(("u".into(), Some("Qa1/Qb2?Qc3#Qd4@Qe5+Qf6".into())))
        );
    }

    #[test]
    fn host_port_and_query_helpers() {
        assert_eq!(split_host_port("h:1", 9), Ok(("h".into(), 1)));
        assert_eq!(
            split_host_port("::1:9092", 9),
            Err(UrlError::UnbracketedIpv6)
        );
        assert_eq!(split_host_port("[::1", 9), Err(UrlError::UnclosedIpv6));
        assert_eq!(split_host_port(":5", 9), Err(UrlError::NoHost));
        assert_eq!(split_host_port("h:0", 9), Err(UrlError::BadPort));
        let e = query_pairs("sasl.password=%zzsecret")
            .next()
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(e.contains("sasl.password") && !e.contains("secret"), "{e}");
        // The tail of a secret holding a raw '&' is refused, never named.
        let e = query_pairs("secret_access_key=Qa1&Qb2&region=x")
            .find_map(Result::err)
            .unwrap()
            .to_string();
        assert!(e.contains("%26") && !e.contains("Qb2"), "{e}");
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%+1"), None, "a sign is not a hex digit");
    }

    #[test]
    fn query_options_refuse_a_name_outside_the_list_after_reading_the_pairs_before() {
        const KNOWN: &[&str] = &["timeout", "ca"];
        assert_eq!(
            query_options("ca=a&timeout=1s&ca=b", KNOWN),
            Ok(vec![
                ("ca".into(), "a".into()),
                ("timeout".into(), "1s".into()),
                ("ca".into(), "b".into())
            ])
        );
        assert_eq!(query_options("", KNOWN), Ok(vec![]));
        // Names are compared after decoding, exactly.
        assert_eq!(
            query_options("time%6Fut=1s", KNOWN),
            Ok(vec![("timeout".into(), "1s".into())])
        );
        let e = query_options("Timeout=1s", KNOWN).unwrap_err();
        assert_eq!(
            e,
            UrlError::UnknownOption {
                name: "Timeout".into(),
                known: KNOWN.to_vec()
            }
        );
        assert_eq!(
            e.to_string(),
            r#"unknown option "Timeout": the options are timeout, ca"#
        );
        // The first pair that does not read is the error.
        assert_eq!(
            query_options("password=%zz&bogus=1", KNOWN),
            Err(UrlError::OptionValueEscape {
                name: "password".into()
            })
        );
        // A name that looks like user info is masked: a password with an
        // unescaped '&' ("ca=/c&s3cret@h=1") leaves its tail in a name.
        let e = query_options("ca=/c&s3cret@h=1", KNOWN).unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert!(e.to_string().starts_with("unknown option \"***@h\""), "{e}");
    }

    #[test]
    fn messages_name_the_part_and_the_fix() {
        let in_list = host_list("a,b:x", 1, "server").unwrap_err();
        assert_eq!(
            in_list.to_string(),
            "server 2: the port is not a number from 1 to 65535"
        );
        assert_eq!(
            split_store_url("app:pw://x@h", &["redis"], "redis://")
                .unwrap_err()
                .to_string(),
            r#"scheme "(none)" is not redis://"#
        );
        assert_eq!(
            split_store_url("Rediz://h", &["redis"], "redis://")
                .unwrap_err()
                .to_string(),
            r#"scheme "Rediz" is not redis://"#
        );
        assert_eq!(UrlError::BareWord.to_string(), BARE_WORD);
    }
    #[test]
    fn text_before_colon_slash_slash_that_is_no_scheme_is_user_info() {
        for url in [
            "app:Qa1://Qb2@127.0.0.1:5432/db",
            "app:Qa1/Qb2://x@h",
            "redis:/app:Qa1://Qb2@h:6379",
        ] {
            let shown = redact(url);
            assert!(
                !shown.contains("Qa1") && !shown.contains("Qb2"),
                "{url}: {shown}"
            );
        }
    }

    #[test]
    #[allow(
        deprecated,
        reason = "the deprecated function must still never show a secret"
    )]
    fn stripping_shows_no_tail_of_a_query_secret() {
        let shown = strip_userinfo("http://h:9000/?X-Amz-Security-Token=Qa1@Qb2");
        assert!(!shown.contains("Qa1") && !shown.contains("Qb2"), "{shown}");
    }

    #[test]
    fn url_parts_debug_masks_secret_query_values() {
        let p = split_store_url(
            "kafka://u:Qa1@h:1/t?sasl.password=Qb2&x=1",
            &["kafka"],
            "kafka://",
        )
        .unwrap();
        let shown = format!("{p:?}");
        assert!(!shown.contains("Qa1") && !shown.contains("Qb2"), "{shown}");
        assert!(shown.contains("x=1"), "{shown}");
    }
}
