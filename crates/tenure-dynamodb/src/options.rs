//! Where the lease table is and how to reach it: parsed from a
//! `dynamodb://TABLE?…` URL or set with builder methods, rendered back
//! without secrets.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::DynamoDbStoreError;
use tenure::store::secret::AccessKeys;
use tenure::store::url::{check_http_endpoint, AccessKeyOptions, ShownQuery};

/// The default time a store operation keeps retrying while DynamoDB
/// throttles it. An [`Elector`](tenure::Elector) cancels an operation at its
/// own deadline (term / 4 by default) long before this; the budget bounds
/// callers that use the store directly.
pub const DEFAULT_THROTTLE_BUDGET: Duration = Duration::from_secs(5);

/// Where the lease table is and how to reach it.
///
/// Parsed from a URL with [`from_url`](DynamoDbOptions::from_url):
///
/// ```text
/// dynamodb://TABLE?region=eu-west-1&endpoint=http://127.0.0.1:8000&create=true
/// ```
///
/// | parameter | meaning | default |
/// |---|---|---|
/// | `region` | AWS region | the standard chain: `AWS_REGION`, the profile, instance metadata |
/// | `endpoint` | `http(s)://host:port` of a local or private DynamoDB (dynalite, DynamoDB Local, a VPC endpoint) | the region's public endpoint |
/// | `profile` | a profile in `~/.aws/config` | `AWS_PROFILE`, else `default` |
/// | `create` | `true`: create the table (on-demand billing) if it is missing | `false`: a missing table is an error |
/// | `access_key_id`, `secret_access_key`, `session_token` | static credentials, for local servers and tests | the standard chain: environment, profile, SSO, web identity, container and instance roles |
/// | `throttle_budget` | how long one operation retries while throttled, e.g. `2s` | [`DEFAULT_THROTTLE_BUDGET`] |
/// | `ca` (formerly `ca_file`, still accepted) | a PEM file of CA certificates to trust besides the platform's (a private `https` endpoint) | the platform's roots |
///
/// Values may be percent-encoded. Unknown parameters are an error, so a
/// typo does not silently fall back to a default.
///
/// ```
/// use tenure_dynamodb::DynamoDbOptions;
/// let o = DynamoDbOptions::from_url(
///     "dynamodb://leases?region=eu-west-1&access_key_id=AKIDEXAMPLE1234&secret_access_key=s3cr3t",
/// )?;
/// assert_eq!(o.table(), "leases");
/// assert!(!o.redacted_url().contains("s3cr3t"));
/// # Ok::<(), tenure_dynamodb::DynamoDbStoreError>(())
/// ```
///
/// The secret key and session token never appear in [`Debug`],
/// [`redacted_url`](DynamoDbOptions::redacted_url) or any error; of the
/// access key id only the last four characters are shown, as
/// `aws configure list` does.
#[derive(Clone)]
pub struct DynamoDbOptions {
    pub(crate) table: String,
    pub(crate) region: Option<String>,
    pub(crate) endpoint: Option<String>,
    pub(crate) profile: Option<String>,
    pub(crate) credentials: Option<AccessKeys>,
    pub(crate) create_if_missing: bool,
    pub(crate) throttle_budget: Duration,
    /// The CA file, and the option that named it (`ca` or `ca_file`).
    pub(crate) ca: Option<(&'static str, PathBuf)>,
}

impl fmt::Debug for DynamoDbOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbOptions")
            .field("url", &self.redacted_url())
            .finish()
    }
}

impl DynamoDbOptions {
    /// Options for `table`, with everything else from the standard AWS
    /// chain. Fails if the name breaks DynamoDB's naming rules.
    pub fn new(table: impl Into<String>) -> Result<Self, DynamoDbStoreError> {
        let table = table.into();
        check_table_name(&table).map_err(|why| bad(&format!("dynamodb://{table}"), &why))?;
        Ok(DynamoDbOptions {
            table,
            region: None,
            endpoint: None,
            profile: None,
            credentials: None,
            create_if_missing: false,
            throttle_budget: DEFAULT_THROTTLE_BUDGET,
            ca: None,
        })
    }

    /// Parses `dynamodb://TABLE?param=value&…`; see the table above.
    pub fn from_url(url: &str) -> Result<Self, DynamoDbStoreError> {
        // Until parsed, nothing of the URL may be echoed: it can hold a
        // secret key. Errors show a redaction of the raw text instead.
        let shown = tenure::store::url::redact(url);
        let Some(rest) = url
            .split_once("://")
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("dynamodb"))
            .map(|(_, rest)| rest)
        else {
            return Err(bad(&shown, "it must start with dynamodb://"));
        };
        let (table, query) = rest.split_once('?').unwrap_or((rest, ""));
        let table = tenure::store::url::percent_decode(table).ok_or_else(|| {
            bad(
                &shown,
                "the table name has an invalid %-escape or is not UTF-8",
            )
        })?;
        let mut o = DynamoDbOptions::new(table).map_err(|_| {
            bad(
                &shown,
                "the table name must be 3 to 255 characters of a-z, A-Z, 0-9, _ - . (dynamodb://TABLE?…)",
            )
        })?;
        let mut keys = AccessKeyOptions::default();
        // Whether the pair before held a secret: this one's name may be
        // its tail, and is then not named (see shown_option_name).
        let mut after_secret = false;
        for pair in tenure::store::url::query_pairs(query) {
            let (k, v) = pair.map_err(|why| bad(&shown, &why.to_string()))?;
            let k = k.as_str();
            let name = tenure::store::url::shown_option_name(k, after_secret);
            after_secret = tenure::store::url::is_secret_key(k);
            let nonempty = |v: String| {
                if v.is_empty() {
                    Err(bad(&shown, &format!("parameter {name} is empty")))
                } else {
                    Ok(v)
                }
            };
            match k {
                "region" => o.region = Some(nonempty(v)?),
                "endpoint" => o.endpoint = Some(nonempty(v)?),
                "profile" => o.profile = Some(nonempty(v)?),
                "create" => {
                    o.create_if_missing = tenure::store::url::parse_bool(k, &v)
                        .map_err(|why| bad(&shown, &why.to_string()))?
                }
                "throttle_budget" => {
                    o.throttle_budget = tenure::store::url::parse_duration(k, &v)
                        .map_err(|why| bad(&shown, &why.to_string()))?
                }
                "ca" => o.ca = Some(("ca", PathBuf::from(nonempty(v)?))),
                "ca_file" => o.ca = Some(("ca_file", PathBuf::from(nonempty(v)?))),
                k if AccessKeyOptions::is_option(k) => keys.set(k, nonempty(v)?),
                _ => {
                    return Err(bad(
                        &shown,
                        &format!(
                            "unknown parameter {name}: use region, endpoint, profile, create, \
                             throttle_budget, ca, access_key_id, secret_access_key, session_token"
                        ),
                    ))
                }
            }
        }
        o.credentials = keys
            .finish("the standard AWS chain")
            .map_err(|why| bad(&shown, &why.to_string()))?;
        o.check().map_err(|why| bad(&o.redacted_url(), &why))?;
        Ok(o)
    }

    /// Sets the region.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Sends requests to this endpoint (`http://127.0.0.1:8000` for a local
    /// server) instead of the region's public one.
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

    /// Whether connecting creates the table when it is missing.
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// How long one operation keeps retrying while throttled (default
    /// [`DEFAULT_THROTTLE_BUDGET`]).
    pub fn throttle_budget(mut self, budget: Duration) -> Self {
        self.throttle_budget = budget;
        self
    }

    /// Trusts the CA certificates in this PEM file, besides the platform's
    /// roots, for an `https` endpoint with a private CA.
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(("ca", path.into()));
        self
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The options as a `dynamodb://` URL with the secret key and session
    /// token replaced by `***` and the access key id shortened, for logs.
    pub fn redacted_url(&self) -> String {
        let mut shown = ShownQuery::default();
        shown
            .value("region", self.region.as_ref())
            .endpoint(self.endpoint.as_deref())
            .value("profile", self.profile.as_ref())
            .flag("create", self.create_if_missing)
            .duration(
                "throttle_budget",
                self.throttle_budget,
                DEFAULT_THROTTLE_BUDGET,
            );
        if let Some((option, ca)) = &self.ca {
            shown.value(option, Some(ca.display()));
        }
        shown.access_keys(self.credentials.as_ref());
        shown.url(&format!("dynamodb://{}", self.table))
    }

    /// Checks what builder methods could not: the endpoint's form.
    pub(crate) fn check(&self) -> Result<(), String> {
        if let Some(e) = &self.endpoint {
            check_http_endpoint(e, "http://127.0.0.1:8000").map_err(|e| e.to_string())?;
        }
        if self.region.as_deref() == Some("") {
            return Err("the region is empty: give one such as eu-west-1".into());
        }
        Ok(())
    }
}

fn bad(shown: &str, why: &str) -> DynamoDbStoreError {
    DynamoDbStoreError::InvalidUrl {
        store: "DynamoDB store",
        url: shown.to_owned(),
        reason: why.to_owned(),
    }
}

/// DynamoDB's rule for table names.
fn check_table_name(name: &str) -> Result<(), String> {
    let ok_len = (3..=255).contains(&name.len());
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok_len && ok_chars {
        Ok(())
    } else {
        Err(format!(
            "table name {name:?} breaks DynamoDB's rule: 3 to 255 characters of a-z, A-Z, 0-9, _ - ."
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure::store::secret::Secret;

    #[test]
    fn parses_every_parameter() {
        let o = DynamoDbOptions::from_url(
            "dynamodb://tenure_leases?region=eu-west-1&endpoint=http%3A%2F%2F127.0.0.1%3A8000\
             &profile=ops&create=true&throttle_budget=750ms",
        )
        .unwrap();
        assert_eq!(o.table(), "tenure_leases");
        assert_eq!(o.region.as_deref(), Some("eu-west-1"));
        assert_eq!(o.endpoint.as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!(o.profile.as_deref(), Some("ops"));
        assert!(o.create_if_missing);
        assert_eq!(o.throttle_budget, Duration::from_millis(750));
        assert!(o.credentials.is_none());
        assert_eq!(
            o.redacted_url(),
            "dynamodb://tenure_leases?region=eu-west-1&endpoint=http://127.0.0.1:8000&profile=ops&create=true&throttle_budget=750ms"
        );
        // Unencoded endpoints work too: the query is split on & only.
        let o =
            DynamoDbOptions::from_url("DynamoDB://t.x-1?endpoint=http://localhost:8000").unwrap();
        assert_eq!(o.endpoint.as_deref(), Some("http://localhost:8000"));
        assert_eq!(o.region, None);
        assert!(!o.create_if_missing);
        assert_eq!(o.throttle_budget, DEFAULT_THROTTLE_BUDGET);
        // `ca`, and its former name `ca_file`, shown as given.
        for option in ["ca", "ca_file"] {
            let o =
                DynamoDbOptions::from_url(&format!("dynamodb://tbl?{option}=/etc/ca.pem")).unwrap();
            assert_eq!(o.ca, Some((option, PathBuf::from("/etc/ca.pem"))));
            assert!(o
                .redacted_url()
                .ends_with(&format!("?{option}=/etc/ca.pem")));
        }
    }

    /// Panics unless `url` is refused with an error that names `names` and
    /// holds none of `hides`.
    #[track_caller]
    fn assert_refused(url: &str, names: &str, hides: &[&str]) {
        let e = DynamoDbOptions::from_url(url).unwrap_err().to_string();
        assert!(e.contains(names), "{e}");
        for secret in hides {
            assert!(!e.contains(secret), "{secret}: {e}");
        }
    }

    #[test]
    fn secrets_never_show() {
        let url = "dynamodb://leases?region=r&access_key_id=AKIDEXAMPLEWXYZ&secret_access_key=TOPSECRET&session_token=SESSIONSECRET";
        let o = DynamoDbOptions::from_url(url).unwrap();
        for shown in [o.redacted_url(), format!("{o:?}")] {
            assert!(!shown.contains("TOPSECRET"), "{shown}");
            assert!(!shown.contains("SESSIONSECRET"), "{shown}");
            assert!(!shown.contains("AKIDEXAMPLE"), "{shown}");
            assert!(shown.contains("***WXYZ"), "{shown}");
        }
        let keys = o.credentials.unwrap();
        assert_eq!(keys.secret_access_key().expose(), "TOPSECRET");
        assert_eq!(
            keys.session_token().map(Secret::expose),
            Some("SESSIONSECRET")
        );

        // A URL that does not parse is echoed redacted in the error.
        assert_refused(
            "dynamodb://leases?bogus=1&secret_access_key=TOPSECRET&access_key_id=AKIDX",
            "unknown parameter \"bogus\"",
            &["TOPSECRET", "AKIDX"],
        );
        assert_refused(
            "dynamodb://leases?secret_access_key=TOPSECRET",
            "need both access_key_id",
            &["TOPSECRET"],
        );
        assert_refused(
            "dynamodb://leases?endpoint=ftp://u:pw@h",
            "not an http:// or https:// URL",
            &["pw@"],
        );
    }

    #[test]
    fn text_before_colon_slash_slash_that_is_no_scheme_never_shows() {
        // The password is "pw-secret://pw-secret": neither piece may show.
        tenure_testkit::assert_url_refusals(
            DynamoDbOptions::from_url,
            &[
                (
                    "dynamodb://leases?endpoint=u:pw-secret://pw-secret@127.0.0.1:8000",
                    "not an http",
                ),
                ("app:pw-secret://pw-secret@leases", "dynamodb://"),
            ],
        );
    }

    #[test]
    fn endpoint_passwords_with_url_delimiters_never_show() {
        // The endpoint's password, percent-encoded in the store URL, decodes
        // to one with a raw '/ ? #': the user info must still be found.
        let o = DynamoDbOptions::from_url(
            "dynamodb://leases?endpoint=http://u:pw%2Fse%3Fcr%23et@h:8000",
        )
        .unwrap();
        assert_eq!(o.endpoint.as_deref(), Some("http://u:pw/se?cr#et@h:8000"));
        let shown = o.redacted_url();
        assert!(
            !shown.contains("pw/se") && !shown.contains("cr#et"),
            "{shown}"
        );
        assert!(shown.contains("endpoint=http://u:***@h:8000"), "{shown}");
        assert_refused(
            "dynamodb://leases?endpoint=ftp://u:pw%2Fsecret@h",
            "not an http:// or https:// URL",
            &["secret"],
        );
    }

    #[test]
    fn rejects_bad_urls_naming_the_fix() {
        for (url, why) in [
            ("postgres://x", "must start with dynamodb://"),
            ("dynamodb://", "table name must be 3 to 255"),
            ("dynamodb://ab", "table name must be 3 to 255"),
            ("dynamodb://has space", "table name must be 3 to 255"),
            ("dynamodb://t/x", "table name must be 3 to 255"),
            (
                "dynamodb://tbl?regoin=eu-west-1",
                "unknown parameter \"regoin\"",
            ),
            (
                "dynamodb://tbl?create=maybe",
                "create must be true or false",
            ),
            ("dynamodb://tbl?throttle_budget=soon", "throttle_budget"),
            ("dynamodb://tbl?region=", "parameter \"region\" is empty"),
            (
                "dynamodb://tbl?endpoint=localhost:8000",
                "not an http:// or https:// URL",
            ),
            ("dynamodb://tbl?region=%zz", "invalid %-escape"),
            ("dynamodb://tbl?region=%ff", "not UTF-8"),
            // A secret with an unescaped '&': its tail is not named.
            (
                "dynamodb://tbl?secret_access_key=Qa1&Qb2=Qc3&access_key_id=AKIDX",
                "a name after a secret option, not shown",
            ),
            (
                "dynamodb://tbl?session_token=Qa1&Qb2=&access_key_id=AKIDX",
                "a name after a secret option, not shown",
            ),
        ] {
            let e = DynamoDbOptions::from_url(url).unwrap_err();
            assert!(
                matches!(e, DynamoDbStoreError::InvalidUrl { .. }),
                "{url}: {e:?}"
            );
            let text = e.to_string();
            assert!(text.contains(why), "{url}: {text}");
        }
        assert!(DynamoDbOptions::new("x".repeat(255)).is_ok());
        assert!(DynamoDbOptions::new("x".repeat(256)).is_err());
    }

    #[test]
    fn secret_keys_keep_their_plus_and_slash() {
        // AWS secret keys are base64-like: '+' and '/' are common. A '+'
        // decoded as a space would make every request fail to sign.
        let o = DynamoDbOptions::from_url(
            "dynamodb://leases?access_key_id=AKIDEXAMPLE&secret_access_key=Qa1/Qb2+Qc3%2BQd4",
        )
        .unwrap();
        let keys = o.credentials.clone().unwrap();
        assert_eq!(keys.secret_access_key().expose(), "Qa1/Qb2+Qc3+Qd4");
        // A URL that does not parse shows no piece of such a secret, even
        // with '?', '#' and '@' unescaped in it.
        let e = DynamoDbOptions::from_url(
            "dynamodb://leases?secret_access_key=Qa1/Qb2?Qc3#Qd4@Qe5+Qf6&access_key_id=AKID&bogus=1",
        )
        .unwrap_err()
        .to_string();
        for p in ["Qa1", "Qb2", "Qc3", "Qd4", "Qe5", "Qf6"] {
            assert!(!e.contains(p), "{e}");
        }
    }
}
