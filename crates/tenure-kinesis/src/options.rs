//! Which stream and how to reach it: parsed from a `kinesis://STREAM?…`
//! URL or set with builder methods, rendered back without secrets.

use std::fmt;

use tenure::store::secret::AccessKeys;
use tenure::store::url::{check_http_endpoint, AccessKeyOptions, ShownQuery, UrlError};

use crate::error::KinesisError;

/// The default number of shards asked for per `ListShards` page (Kinesis
/// allows 1 to 10,000; it returns at most 1,000 a page by default).
pub const DEFAULT_PAGE_SIZE: u32 = 1000;

/// The largest page `ListShards` accepts.
pub const MAX_PAGE_SIZE: u32 = 10_000;

/// The options a `kinesis://` URL takes.
const OPTIONS: &[&str] = &[
    "region",
    "endpoint",
    "profile",
    "page_size",
    "access_key_id",
    "secret_access_key",
    "session_token",
];

/// Which stream to list and how to reach it.
///
/// Parsed from a URL with [`from_url`](KinesisOptions::from_url):
///
/// ```text
/// kinesis://STREAM?region=us-east-1&endpoint=http://127.0.0.1:4567
/// ```
///
/// | parameter | meaning | default |
/// |---|---|---|
/// | `region` | AWS region | the standard chain: `AWS_REGION`, the profile, instance metadata |
/// | `endpoint` | `http(s)://host:port` of a local or private Kinesis (kinesalite, a VPC endpoint) | the region's public endpoint |
/// | `profile` | a profile in `~/.aws/config` | `AWS_PROFILE`, else `default` |
/// | `page_size` | shards asked for per `ListShards` page, 1 to 10000 | [`DEFAULT_PAGE_SIZE`] |
/// | `access_key_id`, `secret_access_key`, `session_token` | static credentials, for local servers and tests | the standard chain: environment, profile, SSO, web identity, container and instance roles |
///
/// Values may be percent-encoded. Unknown parameters are an error that
/// lists the known ones, so a typo does not silently fall back to a
/// default.
///
/// ```
/// use tenure_kinesis::KinesisOptions;
/// let o = KinesisOptions::from_url(
///     "kinesis://orders?region=us-east-1&access_key_id=AKIDEXAMPLE1234&secret_access_key=s3cr3t",
/// )?;
/// assert_eq!(o.stream(), "orders");
/// assert!(!o.redacted_url().contains("s3cr3t"));
/// # Ok::<(), tenure_kinesis::KinesisError>(())
/// ```
///
/// The secret key and session token never appear in [`Debug`],
/// [`redacted_url`](KinesisOptions::redacted_url) or any error; of the
/// access key id only the last four characters are shown.
#[derive(Clone)]
pub struct KinesisOptions {
    pub(crate) stream: String,
    pub(crate) region: Option<String>,
    pub(crate) endpoint: Option<String>,
    pub(crate) profile: Option<String>,
    pub(crate) credentials: Option<AccessKeys>,
    pub(crate) page_size: u32,
}

impl fmt::Debug for KinesisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KinesisOptions")
            .field("url", &self.redacted_url())
            .finish()
    }
}

impl KinesisOptions {
    /// Options for `stream`, with everything else from the standard AWS
    /// chain. Fails if the name breaks Kinesis's naming rule.
    pub fn new(stream: impl Into<String>) -> Result<Self, KinesisError> {
        let stream = stream.into();
        check_stream_name(&stream).map_err(|why| bad(&format!("kinesis://{stream}"), why))?;
        Ok(KinesisOptions {
            stream,
            region: None,
            endpoint: None,
            profile: None,
            credentials: None,
            page_size: DEFAULT_PAGE_SIZE,
        })
    }

    /// Parses `kinesis://STREAM?param=value&…`; see the table above.
    pub fn from_url(url: &str) -> Result<Self, KinesisError> {
        // Until parsed, nothing of the URL may be echoed: it can hold a
        // secret key. Errors show a redaction of the raw text instead.
        let shown = shown_url(url);
        let parts = tenure::store::url::split_store_url(url, &["kinesis"], "kinesis://")
            .map_err(|e| bad(&shown, e.to_string()))?;
        if parts.userinfo.is_some() {
            return Err(bad(
                &shown,
                "user info before the stream name: give credentials as access_key_id= and \
                 secret_access_key= options, or through the standard AWS chain",
            ));
        }
        if !parts.path.is_empty() {
            return Err(bad(
                &shown,
                "a path after the stream name: write kinesis://STREAM?options (a stream name \
                 holds no /)",
            ));
        }
        let stream = tenure::store::url::percent_decode(parts.hosts).ok_or_else(|| {
            bad(
                &shown,
                "the stream name has an invalid %-escape or is not UTF-8",
            )
        })?;
        let mut o = KinesisOptions::new(stream).map_err(|_| {
            bad(
                &shown,
                "the stream name must be 1 to 128 characters of a-z, A-Z, 0-9, _ - . \
                 (kinesis://STREAM?…)",
            )
        })?;
        let mut keys = AccessKeyOptions::default();
        // Whether the pair before held a secret: this one's name may be
        // its tail (a secret with an unescaped &), and is then not named.
        let mut after_secret = false;
        for pair in tenure::store::url::query_pairs(parts.query) {
            let (k, value) = pair.map_err(|e| bad(&shown, e.to_string()))?;
            let k = k.as_str();
            let name = tenure::store::url::shown_option_name(k, after_secret);
            after_secret = tenure::store::url::is_secret_key(k);
            if !OPTIONS.contains(&k) {
                return Err(bad(
                    &shown,
                    format!(
                        "unknown option {name}: the options are {}",
                        OPTIONS.join(", ")
                    ),
                ));
            }
            if value.is_empty() {
                return Err(bad(&shown, format!("option {name} is empty")));
            }
            match k {
                "region" => o.region = Some(value),
                "endpoint" => o.endpoint = Some(value),
                "profile" => o.profile = Some(value),
                "page_size" => {
                    o.page_size = parse_page_size(&value).map_err(|why| bad(&shown, why))?;
                }
                k if AccessKeyOptions::is_option(k) => keys.set(k, value),
                // A name of OPTIONS without an arm here is a bug: refused,
                // never ignored.
                other => {
                    return Err(bad(
                        &shown,
                        tenure::store::url::unknown_option(other, OPTIONS).to_string(),
                    ))
                }
            }
        }
        o.credentials = keys
            .finish("the standard AWS chain")
            .map_err(|e| bad(&shown, e.to_string()))?;
        if let Some(e) = &o.endpoint {
            check_http_endpoint(e, "http://127.0.0.1:4567")
                .map_err(|e: UrlError| bad(&o.redacted_url(), e.to_string()))?;
        }
        Ok(o)
    }

    /// Sets the region.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Sends requests to this endpoint (`http://127.0.0.1:4567` for a local
    /// kinesalite) instead of the region's public one.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// Uses this profile from `~/.aws/config` and `~/.aws/credentials`.
    pub fn profile(mut self, name: impl Into<String>) -> Self {
        self.profile = Some(name.into());
        self
    }

    /// Uses these static credentials instead of the standard chain (local
    /// servers accept any).
    pub fn static_credentials(
        self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        self.static_credentials_with_token(access_key_id, secret_access_key, None)
    }

    /// Static temporary credentials: a key pair with its session token.
    pub fn static_credentials_with_token(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        self.credentials = Some(AccessKeys::new(
            access_key_id,
            secret_access_key,
            session_token,
        ));
        self
    }

    /// Shards asked for per `ListShards` page, clamped to 1 to
    /// [`MAX_PAGE_SIZE`] (default [`DEFAULT_PAGE_SIZE`]).
    pub fn page_size(mut self, shards: u32) -> Self {
        self.page_size = shards.clamp(1, MAX_PAGE_SIZE);
        self
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The options as a `kinesis://` URL with the secret key and session
    /// token replaced and the access key id shortened, for logs.
    pub fn redacted_url(&self) -> String {
        let mut shown = ShownQuery::default();
        shown
            .value("region", self.region.as_ref())
            .endpoint(self.endpoint.as_deref())
            .value("profile", self.profile.as_ref())
            .value(
                "page_size",
                (self.page_size != DEFAULT_PAGE_SIZE).then_some(self.page_size),
            )
            .access_keys(self.credentials.as_ref());
        shown.url(&format!("kinesis://{}", self.stream))
    }
}

/// `url` as errors show it: [`redact`](tenure::store::url::redact)ed, and with
/// the query cut after the first secret option, whose value may hold an
/// unescaped `&` that makes its tail look like more options.
fn shown_url(url: &str) -> String {
    let shown = tenure::store::url::redact(url);
    let Some((base, query)) = shown.split_once('?') else {
        return shown;
    };
    let mut pairs = Vec::new();
    let mut rest = query.split('&').peekable();
    while let Some(pair) = rest.next() {
        pairs.push(pair);
        let name = pair.split('=').next().unwrap_or("");
        if tenure::store::url::is_secret_key(name) && rest.peek().is_some() {
            pairs.push("…");
            break;
        }
    }
    format!("{base}?{}", pairs.join("&"))
}

fn bad(shown: &str, why: impl Into<String>) -> KinesisError {
    KinesisError::InvalidUrl {
        url: shown.to_owned(),
        reason: why.into(),
    }
}

fn parse_page_size(value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_PAGE_SIZE).contains(n))
        .ok_or_else(|| format!("page_size must be a number from 1 to {MAX_PAGE_SIZE}"))
}

/// Kinesis's rule for stream names.
fn check_stream_name(name: &str) -> Result<(), String> {
    let ok_len = (1..=128).contains(&name.len());
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok_len && ok_chars {
        Ok(())
    } else {
        Err(format!(
            "stream name {name:?} breaks Kinesis's rule: 1 to 128 characters of a-z, A-Z, 0-9, _ - ."
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_option() {
        let o = KinesisOptions::from_url(
            "kinesis://orders-1?region=us-east-1&endpoint=http%3A%2F%2F127.0.0.1%3A4567\
             &profile=ops&page_size=25",
        )
        .unwrap();
        assert_eq!(o.stream(), "orders-1");
        assert_eq!(o.region.as_deref(), Some("us-east-1"));
        assert_eq!(o.endpoint.as_deref(), Some("http://127.0.0.1:4567"));
        assert_eq!(o.profile.as_deref(), Some("ops"));
        assert_eq!(o.page_size, 25);
        assert!(o.credentials.is_none());
        assert_eq!(
            o.redacted_url(),
            "kinesis://orders-1?region=us-east-1&endpoint=http://127.0.0.1:4567&profile=ops&page_size=25"
        );
        let o = KinesisOptions::from_url("Kinesis://s").unwrap();
        assert_eq!(o.page_size, DEFAULT_PAGE_SIZE);
        assert_eq!(o.redacted_url(), "kinesis://s");
    }

    #[test]
    fn secrets_never_show() {
        let url = "kinesis://orders?region=r&access_key_id=AKIDEXAMPLEWXYZ&secret_access_key=TOPSECRET&session_token=SESSIONSECRET";
        let o = KinesisOptions::from_url(url).unwrap();
        for shown in [o.redacted_url(), format!("{o:?}")] {
            assert!(!shown.contains("TOPSECRET"), "{shown}");
            assert!(!shown.contains("SESSIONSECRET"), "{shown}");
            assert!(!shown.contains("AKIDEXAMPLE"), "{shown}");
            assert!(shown.contains("WXYZ"), "{shown}");
        }
        assert_eq!(
            o.credentials.unwrap().secret_access_key().expose(),
            "TOPSECRET"
        );
        for (url, names) in [
            (
                "kinesis://s?bogus=1&secret_access_key=TOPSECRET&access_key_id=AKIDX",
                "unknown option \"bogus\"",
            ),
            (
                "kinesis://s?secret_access_key=TOPSECRET",
                "both access_key_id",
            ),
            (
                "kinesis://s?endpoint=ftp%3A%2F%2Fu%3ATOPSECRET%40h",
                "not an http:// or https:// URL",
            ),
            // An endpoint's password must be escaped in the query: the
            // shared rule for user info refuses a raw @ after the host.
            ("kinesis://s?endpoint=ftp://u:TOPSECRET@h", "unescaped @"),
        ] {
            let e = KinesisOptions::from_url(url).unwrap_err().to_string();
            assert!(e.contains(names), "{e}");
            assert!(!e.contains("TOPSECRET") && !e.contains("AKIDX"), "{e}");
        }
    }

    #[test]
    fn hostile_secrets_and_text_that_is_no_scheme_never_show() {
        let o = tenure_testkit::assert_hostile_password_handled(
            KinesisOptions::from_url,
            "kinesis://s?access_key_id=AKIDEXAMPLE&secret_access_key={P}&region=r",
            |o| {
                o.credentials
                    .as_ref()
                    .map(|k| k.secret_access_key().expose())
            },
            KinesisOptions::redacted_url,
        );
        assert_eq!(o.region.as_deref(), Some("r"));
        // The password is "pw-secret://pw-secret": neither piece may show.
        tenure_testkit::assert_url_refusals(
            KinesisOptions::from_url,
            &[
                (
                    "kinesis://s?endpoint=u:pw-secret://pw-secret%40127.0.0.1:4567",
                    "not an http",
                ),
                ("app:pw-secret://pw-secret@s", "kinesis://"),
            ],
        );
    }

    #[test]
    fn rejects_bad_urls_naming_the_fix() {
        for (url, why) in [
            ("dynamodb://x", "kinesis://"),
            ("kinesis://", "stream name must be 1 to 128"),
            ("kinesis://has%20space", "stream name must be 1 to 128"),
            ("kinesis://s/x", "a path after the stream name"),
            ("kinesis://u:pw@s", "user info"),
            ("kinesis://s?regoin=x", "the options are region, endpoint"),
            (
                "kinesis://s?page_size=0",
                "page_size must be a number from 1",
            ),
            ("kinesis://s?page_size=10001", "page_size must be a number"),
            ("kinesis://s?region=", "option \"region\" is empty"),
            // A secret with an unescaped '&': its tail is not named.
            (
                "kinesis://s?secret_access_key=Qa1&Qb2=Qc3&access_key_id=AKIDX",
                "a name after a secret option, not shown",
            ),
            ("kinesis://s?endpoint=localhost:4567", "not an http://"),
            ("kinesis://s%zz", "invalid %-escape"),
        ] {
            let e = KinesisOptions::from_url(url).unwrap_err();
            assert!(matches!(e, KinesisError::InvalidUrl { .. }), "{url}: {e:?}");
            let text = e.to_string();
            assert!(text.contains(why), "{url}: {text}");
            assert!(
                !text.contains("pw") && !text.contains("Qb2"),
                "{url}: {text}"
            );
        }
        assert!(KinesisOptions::new("x".repeat(128)).is_ok());
        assert!(KinesisOptions::new("x".repeat(129)).is_err());
        assert_eq!(KinesisOptions::new("s").unwrap().page_size(0).page_size, 1);
        assert_eq!(
            KinesisOptions::new("s")
                .unwrap()
                .page_size(99_999)
                .page_size,
            MAX_PAGE_SIZE
        );
    }
}
