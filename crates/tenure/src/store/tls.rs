//! Reading the PEM files that store URLs name for TLS (`ca=`, `cert=`,
//! `key=`), checked here so that every store reports a wrong file the same
//! way, naming the option and the fix, before its TLS library sees it
//! (some report a bad file only as a failed handshake, one panics on it).

use std::path::{Path, PathBuf};

use rustls_pki_types::pem::{self, PemObject, SectionKind};

/// The TLS files a store URL names: `ca` (the CA that signed the servers'
/// certificates), and `cert` with `key` for a client certificate. Every
/// store with TLS options takes them under these names.
///
/// ```
/// use tenure::store::tls::TlsPaths;
/// let mut files = TlsPaths::default();
/// assert_eq!(files.take("ca", "/etc/ca.pem", true, "rediss://"), Ok(true));
/// assert_eq!(files.take("prefix", "x", true, "rediss://"), Ok(false));
/// assert!(files.take("key", "/k.pem", false, "rediss://").unwrap_err().contains("rediss://"));
/// assert!(files.take("cert", "/c.pem", true, "rediss://").is_ok());
/// assert!(files.check().unwrap_err().contains("cert and key go together"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsPaths {
    /// The CA certificates to trust.
    pub ca: Option<PathBuf>,
    /// The client certificate chain.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key.
    pub key: Option<PathBuf>,
}

impl TlsPaths {
    /// Takes URL option `name` if it names a TLS file: `Ok(true)` when
    /// taken, `Ok(false)` when it is another option, and an error naming
    /// `tls_scheme` (the scheme that uses TLS) when the URL does not.
    pub fn take(
        &mut self,
        name: &str,
        value: &str,
        tls: bool,
        tls_scheme: &str,
    ) -> Result<bool, String> {
        let slot = match name {
            "ca" => &mut self.ca,
            "cert" => &mut self.cert,
            "key" => &mut self.key,
            _ => return Ok(false),
        };
        if !tls {
            return Err(format!("option {name} needs TLS: use {tls_scheme}"));
        }
        *slot = Some(PathBuf::from(value));
        Ok(true)
    }

    /// Reads a URL query (after `?`): the TLS files it names, checked as
    /// [`take`](TlsPaths::take) and [`check`](TlsPaths::check) do, and its
    /// other options, decoded and in order, for the store to read.
    ///
    /// ```
    /// use tenure::store::tls::TlsPaths;
    /// let (files, others) = TlsPaths::from_query("prefix=x&ca=/c.pem", true, "etcds://").unwrap();
    /// assert_eq!(files.ca.as_deref(), Some(std::path::Path::new("/c.pem")));
    /// assert_eq!(others, [("prefix".to_owned(), "x".to_owned())]);
    /// assert!(TlsPaths::from_query("ca=/c.pem", false, "etcds://").unwrap_err().contains("etcds://"));
    /// ```
    pub fn from_query(
        query: &str,
        tls: bool,
        tls_scheme: &str,
    ) -> Result<(TlsPaths, Vec<(String, String)>), String> {
        Self::read(crate::store::url::query_pairs(query), tls, tls_scheme)
    }

    /// [`from_query`](TlsPaths::from_query) for a store that takes the
    /// options `known` (the TLS files among them): a name outside the list
    /// is an error that names it and lists them all, in the place the pair
    /// is written ([`query_options`](crate::store::url::query_options)).
    ///
    /// ```
    /// use tenure::store::tls::TlsPaths;
    /// const OPTIONS: &[&str] = &["timeout", "ca", "cert", "key"];
    /// let (files, others) = TlsPaths::from_options("timeout=1s", OPTIONS, true, "nats+tls://").unwrap();
    /// assert_eq!((files, others), (TlsPaths::default(), vec![("timeout".into(), "1s".into())]));
    /// let e = TlsPaths::from_options("bogus=1", OPTIONS, true, "nats+tls://").unwrap_err();
    /// assert_eq!(e, r#"unknown option "bogus": the options are timeout, ca, cert, key"#);
    /// ```
    pub fn from_options(
        query: &str,
        known: &[&'static str],
        tls: bool,
        tls_scheme: &str,
    ) -> Result<(TlsPaths, Vec<(String, String)>), String> {
        Self::read(
            crate::store::url::known_query_pairs(query, known),
            tls,
            tls_scheme,
        )
    }

    /// Takes the TLS files from `pairs`, in order, and returns the rest.
    fn read(
        pairs: impl Iterator<Item = Result<(String, String), crate::store::url::UrlError>>,
        tls: bool,
        tls_scheme: &str,
    ) -> Result<(TlsPaths, Vec<(String, String)>), String> {
        let mut files = TlsPaths::default();
        let mut others = Vec::new();
        for pair in pairs {
            let (name, value) = pair.map_err(|e| e.to_string())?;
            if !files.take(&name, &value, tls, tls_scheme)? {
                others.push((name, value));
            }
        }
        files.check()?;
        Ok((files, others))
    }

    /// Checks that `cert` and `key` come together.
    pub fn check(&self) -> Result<(), String> {
        if self.cert.is_some() == self.key.is_some() {
            Ok(())
        } else {
            Err("cert and key go together: give both files for mutual TLS, or neither".into())
        }
    }
}

/// What a PEM file must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// One or more certificates (a CA bundle, or a client certificate
    /// chain).
    Certificates,
    /// A private key (PKCS #8, PKCS #1 or SEC1).
    PrivateKey,
}

impl Expected {
    fn wanted(self) -> &'static str {
        match self {
            Expected::Certificates => "certificate",
            Expected::PrivateKey => "private key",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Expected::Certificates => "CERTIFICATE",
            Expected::PrivateKey => "PRIVATE KEY",
        }
    }

    fn accepts(self, kind: SectionKind) -> bool {
        match self {
            Expected::Certificates => kind == SectionKind::Certificate,
            Expected::PrivateKey => matches!(
                kind,
                SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey
            ),
        }
    }
}

/// Why a PEM file named by a TLS option cannot be used. The messages name
/// the option and the path (never the file's contents) and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PemError {
    /// The file cannot be read.
    #[error("cannot read the {option} file {}: {source}; give a readable PEM file", .path.display())]
    Unreadable {
        /// The option that names the file (`ca`, `cert`, `key`).
        option: &'static str,
        /// The path as given.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not PEM, or a section of it does not decode.
    #[error("the {option} file {} is not valid PEM ({reason}): give it in PEM form (-----BEGIN {label}-----)", .path.display())]
    Malformed {
        /// The option that names the file.
        option: &'static str,
        /// The path as given.
        path: PathBuf,
        /// What is wrong.
        reason: String,
        /// The PEM label expected.
        label: &'static str,
    },
    /// The file is PEM but holds nothing of the kind expected.
    #[error("the {option} file {} holds no {wanted}: give one in PEM form (-----BEGIN {label}-----)", .path.display())]
    Missing {
        /// The option that names the file.
        option: &'static str,
        /// The path as given.
        path: PathBuf,
        /// What was expected (`certificate`, `private key`).
        wanted: &'static str,
        /// The PEM label expected.
        label: &'static str,
    },
}

/// A file an operator must fix: never transient; the I/O error, if any,
/// is the cause.
impl crate::error::BackendError for PemError {
    fn is_transient(&self) -> bool {
        false
    }

    fn into_source(self) -> Option<crate::error::BoxError> {
        match self {
            PemError::Unreadable { source, .. } => Some(Box::new(source)),
            PemError::Malformed { .. } | PemError::Missing { .. } => None,
        }
    }
}

/// Reads the PEM file `path`, named by option `option`, and checks that it
/// holds what `expected` says: at least one such section, each of which
/// decodes (a certificate's DER is one whole ASN.1 sequence). Returns the
/// file's bytes, for a TLS library that parses PEM itself.
///
/// ```
/// use tenure::store::tls::{read_pem, Expected, PemError};
/// let path = std::env::temp_dir().join(format!("tenure-pem-doc-{}.pem", std::process::id()));
/// std::fs::write(&path, "not a certificate").unwrap();
/// let e = read_pem("ca", &path, Expected::Certificates).unwrap_err();
/// assert!(matches!(e, PemError::Missing { .. }));
/// assert!(e.to_string().starts_with("the ca file"));
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub fn read_pem(
    option: &'static str,
    path: &Path,
    expected: Expected,
) -> Result<Vec<u8>, PemError> {
    let bytes = std::fs::read(path).map_err(|source| PemError::Unreadable {
        option,
        path: path.to_owned(),
        source,
    })?;
    check(&bytes, expected).map_err(|problem| match problem {
        Problem::Malformed(reason) => PemError::Malformed {
            option,
            path: path.to_owned(),
            reason,
            label: expected.label(),
        },
        Problem::Missing => PemError::Missing {
            option,
            path: path.to_owned(),
            wanted: expected.wanted(),
            label: expected.label(),
        },
    })?;
    Ok(bytes)
}

enum Problem {
    Malformed(String),
    Missing,
}

fn check(bytes: &[u8], expected: Expected) -> Result<(), Problem> {
    let mut found = false;
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(bytes) {
        let (kind, der) = section.map_err(|e| Problem::Malformed(describe(&e)))?;
        if !expected.accepts(kind) {
            continue;
        }
        if expected == Expected::Certificates && !is_one_sequence(&der) {
            return Err(Problem::Malformed(
                "a CERTIFICATE section does not hold a DER certificate".into(),
            ));
        }
        found = true;
    }
    if found {
        Ok(())
    } else {
        Err(Problem::Missing)
    }
}

fn describe(e: &pem::Error) -> String {
    match e {
        pem::Error::Base64Decode(_) => "a section's body is not base64".into(),
        pem::Error::MissingSectionEnd { .. } => "a section has no END line".into(),
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed".into(),
        other => format!("{other:?}"),
    }
}

/// Whether `der` is exactly one DER SEQUENCE (what every X.509
/// certificate is), by its tag and length octets.
fn is_one_sequence(der: &[u8]) -> bool {
    let [0x30, first, rest @ ..] = der else {
        return false;
    };
    let (len, body) = if first & 0x80 == 0 {
        (usize::from(*first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return false;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    body.len() == len
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA certificate (made with `openssl req -x509`), as a
    /// CA bundle would hold it.
    const CERT: &str = "-----BEGIN CERTIFICATE-----\n\
        MIIBiDCCAS2gAwIBAgIULySNPcXzKx9UAYjPJ849tykVAMYwCgYIKoZIzj0EAwIw\n\
        GTEXMBUGA1UEAwwOdGVudXJlLXRlc3QtY2EwHhcNMjYxMTMwMjAxNDM3WhcNMzYx\n\
        MTI3MjAxNDM3WjAZMRcwFQYDVQQDDA50ZW51cmUtdGVzdC1jYTBZMBMGByqGSM49\n\
        AgEGCCqGSM49AwEHA0IABIRU6q0LxOj0y5PQ+bu6CjezRz51YJehNppeIpfaWu/k\n\
        BfEWW6vFhtYGb2UYCbKOf/SDFhqKWatvLA/II6SDQZujUzBRMB0GA1UdDgQWBBST\n\
        4pJAH+X9WdlA+y7R5D1UiI9/KDAfBgNVHSMEGDAWgBST4pJAH+X9WdlA+y7R5D1U\n\
        iI9/KDAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQDaG7TbOlgN\n\
        weHVUIOpQSn6cAlm1R1JD128x1EVWhOv2QIhAIIO6qMRhSTvnbtM7okHJ8VqUIXP\n\
        RFiPlpVLoziLd35v\n\
        -----END CERTIFICATE-----\n";

    fn file(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tenure-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        path
    }

    #[test]
    fn a_certificate_file_is_read_whole() {
        let path = file("ca.pem", CERT);
        let got = read_pem("ca", &path, Expected::Certificates).unwrap();
        assert_eq!(got, CERT.as_bytes());
    }

    #[test]
    fn wrong_files_are_errors_naming_the_option_and_the_fix() {
        let missing = std::env::temp_dir().join("tenure-tls-no-such-file.pem");
        let e = read_pem("ca", &missing, Expected::Certificates).unwrap_err();
        assert!(
            matches!(e, PemError::Unreadable { option: "ca", .. }),
            "{e}"
        );
        assert!(e.to_string().contains("cannot read the ca file"), "{e}");
        for (name, body, expected, check) in [
            (
                "empty.pem",
                "",
                Expected::Certificates,
                "holds no certificate",
            ),
            (
                "text.pem",
                "not a certificate at all",
                Expected::Certificates,
                "holds no certificate",
            ),
            (
                "broken.pem",
                "-----BEGIN CERTIFICATE-----\nnot base64 !!\n-----END CERTIFICATE-----\n",
                Expected::Certificates,
                "not valid PEM",
            ),
            (
                "garbage-der.pem",
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                Expected::Certificates,
                "does not hold a DER certificate",
            ),
            (
                "cert-as-key.pem",
                CERT,
                Expected::PrivateKey,
                "holds no private key",
            ),
        ] {
            let path = file(name, body);
            let e = read_pem("cert", &path, expected).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(check), "{name}: {text}");
            assert!(text.starts_with("the cert file"), "{name}: {text}");
            assert!(text.contains("-----BEGIN"), "the fix: {text}");
        }
    }

    #[test]
    fn keys_of_each_form_are_accepted() {
        for label in ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"] {
            let body = format!("-----BEGIN {label}-----\nMAMCAQA=\n-----END {label}-----\n");
            let path = file(&format!("{}.pem", label.replace(' ', "-")), &body);
            assert!(
                read_pem("key", &path, Expected::PrivateKey).is_ok(),
                "{label}"
            );
        }
    }

    #[test]
    fn der_structure_is_checked_by_its_length_octets() {
        assert!(is_one_sequence(&[0x30, 0x00]));
        assert!(is_one_sequence(&[0x30, 0x01, 0x05]));
        assert!(!is_one_sequence(&[0x30, 0x02, 0x05]), "short");
        assert!(!is_one_sequence(&[0x31, 0x00]), "not a sequence");
        let mut long = vec![0x30, 0x81, 200];
        long.extend([0u8; 200]);
        assert!(is_one_sequence(&long));
        assert!(
            !is_one_sequence(&[0x30, 0x80]),
            "indefinite length is not DER"
        );
        assert!(!is_one_sequence(&[]));
    }
}
