//! What a failed request means for a lease: a refused condition (a
//! conflict, never an error), a missing object, or a [`StoreError`] naming
//! the problem and the fix, without secrets.
//!
//! `object_store` keeps the HTTP status and the server's error body in an
//! error type it does not export, so the server's words (`NoSuchBucket`,
//! `SignatureDoesNotMatch`, …) are read from the error's text; the
//! transport failure (timeout, refused connection) from its
//! [`HttpError`](object_store::client::HttpError) source.

use std::time::Duration;

use object_store::client::{HttpError, HttpErrorKind};
use tenure::error::{error_chain, find_cause};
use tenure::StoreError;

/// What a request's failure means.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The condition of a conditional put was not met (412, or 409 for a
    /// create or a concurrent conditional write): nothing was written.
    Conflict,
    /// No object under that key (the bucket exists).
    Missing,
    /// Any other failure, worded for the operator.
    Store(StoreError),
}

/// Why the object store could not connect: a malformed URL, bucket name
/// or prefix ([`InvalidUrl`](tenure::error::ConnectError::InvalidUrl)), an
/// unusable CA file (`ca=`), or what connecting met, worded as the
/// operations word it (the bucket missing, credentials refused, the server
/// unreachable), naming the bucket (never a secret) and the fix.
///
/// [`BucketStore::connect`](crate::BucketStore::connect) and
/// [`BucketOptions::from_url`](crate::BucketOptions::from_url) return it;
/// the [`LeaseStore`](tenure::LeaseStore) operations return
/// [`StoreError`]s.
pub type BucketStoreError = tenure::error::ConnectError;

/// Where requests go, for messages: the store as it describes itself, and
/// the secrets that must never appear in one.
#[derive(Clone)]
pub(crate) struct Place {
    pub(crate) describe: String,
    /// Credentials given in the URL or options, scrubbed from every
    /// message even if a server or library echoes one.
    pub(crate) secrets: Vec<String>,
    /// The request timeout, reported with a timeout.
    pub(crate) timeout: Duration,
    /// The backend, for permission names.
    pub(crate) kind: BackendKind,
}

/// Which API the bucket speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// Amazon S3 and S3-compatible servers.
    S3,
    /// Google Cloud Storage.
    Gcs,
    /// Azure Blob Storage.
    Azure,
}

impl BackendKind {
    /// The permissions the lease operations need, for error messages.
    pub(crate) fn permissions(self) -> &'static str {
        match self {
            BackendKind::S3 => "s3:GetObject, s3:PutObject and s3:ListBucket on the bucket and prefix",
            BackendKind::Gcs => "storage.objects.get, storage.objects.create, storage.objects.update (or delete, for overwrites) and storage.objects.list",
            BackendKind::Azure => "read, write and list on the container's blobs (Storage Blob Data Contributor)",
        }
    }
}

impl Place {
    /// Removes every known secret (and anything that looks like a
    /// signature in a query string) from a text.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.secrets {
            if !s.is_empty() {
                out = out.replace(s.as_str(), "***");
            }
        }
        mask_query_secrets(&out)
    }

    fn misconfigured(&self, message: String) -> StoreError {
        StoreError::Misconfigured {
            message: self.scrub(&message),
            source: None,
        }
    }

    fn unavailable(&self, message: String) -> StoreError {
        StoreError::Unavailable {
            message: self.scrub(&message),
            source: None,
        }
    }
}

/// Masks the values of query parameters that look secret (`sig=`,
/// `X-Amz-Signature=`, `token=` …) wherever a URL appears in a text.
fn mask_query_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let (before, after) = rest.split_at(eq);
        out.push_str(before);
        out.push('=');
        let after = &after[1..];
        // The parameter name: back to the last '?', '&' or space.
        let name = before
            .rsplit(|c: char| c == '?' || c == '&' || c.is_whitespace())
            .next()
            .unwrap_or("");
        let end = after
            .find(|c: char| c == '&' || c == '#' || c.is_whitespace() || c == '"' || c == '<')
            .unwrap_or(after.len());
        if tenure::store::url::is_secret_key(name) {
            out.push_str("***");
        } else {
            out.push_str(&after[..end]);
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The server's error code, read from an error text (S3 and GCS XML
/// `<Code>…</Code>`, Azure `<Code>` or its `x-ms-error-code`).
fn server_code(text: &str) -> Option<&str> {
    let start = text.find("<Code>")? + "<Code>".len();
    let end = text[start..].find("</Code>")? + start;
    Some(&text[start..end])
}

/// The HTTP status in an error text ("status code: 503 Service Unavailable").
fn status_in(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    text.get(at..at + 3)?.parse().ok()
}

/// The transport failure under an error, if it is one.
fn transport(e: &object_store::Error) -> Option<HttpErrorKind> {
    find_cause::<HttpError>(e).map(HttpError::kind)
}

/// At most `n` characters of a server's words.
fn excerpt(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

const MISSING_BUCKET: &[&str] = &[
    "NoSuchBucket",
    "ContainerNotFound",
    "The specified bucket does not exist",
];

const REFUSED_KEY: &[&str] = &[
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AuthenticationFailed",
    "InvalidAuthenticationInfo",
    "InvalidClientTokenId",
    "ExpiredToken",
    "InvalidToken",
    "invalid_grant",
];

/// Texts of a failure to obtain credentials (the instance metadata
/// server, a token endpoint), which has nothing to do with the bucket.
const CREDENTIAL_FETCH: &[&str] = &[
    "token request",
    "Error fetching token",
    "Error getting credentials",
    "169.254.169.254",
    "169.254.170.2",
];

/// Classifies a failed request. `what` names the operation and object for
/// the message ("read of tenure/nightly").
pub(crate) fn classify(e: object_store::Error, what: &str, place: &Place) -> Failure {
    use object_store::Error as E;
    let text = error_chain(&e);
    let code = server_code(&text).unwrap_or("");
    let store = &place.describe;
    match e {
        E::Precondition { .. } | E::NotModified { .. } | E::AlreadyExists { .. } => {
            Failure::Conflict
        }
        _ if MISSING_BUCKET.iter().any(|m| text.contains(m)) => {
            Failure::Store(missing_bucket(code, what, place))
        }
        E::NotFound { .. } => Failure::Missing,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => {
            Failure::Store(refused(&text, code, what, place))
        }
        E::NotSupported { .. } | E::NotImplemented { .. } => {
            Failure::Store(place.misconfigured(format!(
                "{store} cannot do a {what}: {}; tenure needs conditional puts \
                 (If-None-Match / If-Match), which S3, GCS and Azure Blob Storage support",
                excerpt(&text, 300)
            )))
        }
        E::InvalidPath { .. } | E::UnknownConfigurationKey { .. } => {
            Failure::Store(place.misconfigured(format!("{store}: {what}: {}", excerpt(&text, 300))))
        }
        other => Failure::Store(transient_or_not(&other, &text, code, what, place)),
    }
}

/// The bucket (container) is not there.
pub(crate) fn missing_bucket(code: &str, what: &str, place: &Place) -> StoreError {
    place.misconfigured(format!(
        "the bucket of {} does not exist ({what}: {}): create it, or correct the bucket \
         name, region or endpoint; tenure never creates buckets",
        place.describe,
        if code.is_empty() { "not found" } else { code }
    ))
}

/// Refused credentials or permissions, told apart by the server's code.
fn refused(text: &str, code: &str, what: &str, place: &Place) -> StoreError {
    let store = &place.describe;
    if code == "RequestTimeTooSkewed" || text.contains("RequestTimeTooSkewed") {
        return place.misconfigured(format!(
            "{store} refused the {what}: this host's clock is too far off to sign requests \
             (RequestTimeTooSkewed): synchronise it (NTP)"
        ));
    }
    if REFUSED_KEY.iter().any(|m| text.contains(m)) {
        return place.misconfigured(format!(
            "{store} refused the credentials ({what}: {}): check the access key id and the \
             secret (the URL's access_key_id and secret_access_key, or AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY), or the account key",
            if code.is_empty() {
                "unauthenticated"
            } else {
                code
            }
        ));
    }
    place.misconfigured(format!(
        "{store}: the credentials lack permission for the {what} ({}): grant {}",
        if code.is_empty() {
            "access denied"
        } else {
            code
        },
        place.kind.permissions()
    ))
}

/// A failure without a meaning of its own: the transport's, or the
/// server's status.
fn transient_or_not(
    e: &object_store::Error,
    text: &str,
    code: &str,
    what: &str,
    place: &Place,
) -> StoreError {
    let store = &place.describe;
    match transport(e) {
        Some(HttpErrorKind::Timeout) => return StoreError::Timeout(place.timeout),
        Some(HttpErrorKind::Connect) => {
            return place.unavailable(format!(
                "cannot connect to {store} for the {what}: {}",
                excerpt(text, 300)
            ))
        }
        Some(kind) => {
            return place.unavailable(format!(
                "the connection to {store} failed during the {what} ({kind:?}): it may or may \
                 not have been carried out: {}",
                excerpt(text, 300)
            ))
        }
        None => {}
    }
    if CREDENTIAL_FETCH.iter().any(|m| text.contains(m)) {
        return place.misconfigured(format!(
            "{store}: no credentials could be obtained for the {what} ({}): give them in the URL \
             or the environment (see the crate docs), or run where the instance, task or \
             workload identity provides them",
            excerpt(text, 200)
        ));
    }
    match status_in(text) {
        Some(401 | 403) => refused(text, code, what, place),
        // S3 answers a malformed or expired session token with 400; its
        // body may echo the token, so no excerpt of it is shown.
        Some(400) if REFUSED_KEY.contains(&code) => refused(text, code, what, place),
        Some(s) if s >= 500 || s == 429 || s == 408 => place.unavailable(format!(
            "{store} answered the {what} with {s} {code}: it may or may not have been carried out"
        )),
        Some(s) if text.contains("PermanentRedirect") || s == 301 => place.misconfigured(format!(
            "{store}: the bucket is in another region ({what}: {s} {code}): set region= in \
                 the URL (or AWS_REGION) to the bucket's region"
        )),
        Some(s) => place.misconfigured(format!(
            "{store} refused the {what} with {s} {code}: {}",
            excerpt(text, 300)
        )),
        None if text.contains("without LOCATION") => place.misconfigured(format!(
            "{store}: the {what} was redirected: the bucket is probably in another region; set \
             region= in the URL (or AWS_REGION)"
        )),
        None => place.unavailable(format!(
            "{store}: the {what} failed: {}",
            excerpt(text, 300)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> Place {
        Place {
            describe: "s3://b/tenure".into(),
            secrets: vec!["hunter2/+x".into()],
            timeout: Duration::from_secs(1),
            kind: BackendKind::S3,
        }
    }

    #[test]
    fn secrets_are_scrubbed() {
        let p = place();
        assert_eq!(p.scrub("key hunter2/+x here"), "key *** here");
        assert_eq!(
            p.scrub("GET https://a.blob.core.windows.net/c/x?sv=1&sig=abc%2Fdef&se=2 failed"),
            "GET https://a.blob.core.windows.net/c/x?sv=1&sig=***&se=2 failed"
        );
        assert_eq!(
            p.scrub("url?X-Amz-Signature=deadbeef&X-Amz-Credential=AKID/x"),
            "url?X-Amz-Signature=***&X-Amz-Credential=***"
        );
        assert_eq!(p.scrub("a = b, c=d"), "a = b, c=d");
    }

    #[test]
    fn server_words_are_found() {
        let t = "Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code></Error>";
        assert_eq!(server_code(t), Some("SignatureDoesNotMatch"));
        assert_eq!(status_in(t), Some(403));
        assert_eq!(status_in("nothing"), None);
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("abc", 3), "abc");
    }
}
