//! TLS for `sslmode=prefer|require`, with rustls: the public web roots, or
//! the CA certificates in `ca` (libpq's `sslrootcert`).

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use tenure::store::tls::{read_pem, Expected};
use tenure::StoreError;

use crate::error::PostgresStoreError;
use tokio_postgres_rustls::MakeRustlsConnect;

pub(crate) fn connector(
    ca: Option<(&'static str, &Path)>,
) -> Result<MakeRustlsConnect, PostgresStoreError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some((option, path)) => {
            let pem = read_pem(option, path, Expected::Certificates)?;
            // read_pem checked every section; rustls-pki-types decodes them,
            // as tenure::store::tls does (rustls-pemfile is unmaintained).
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| {
                    StoreError::misconfigured(
                        format!("the {option} file {} is not PEM", path.display()),
                        e,
                    )
                })?;
                roots.add(cert).map_err(|e| {
                    StoreError::misconfigured(
                        format!(
                            "the {option} file {} holds an unusable certificate",
                            path.display()
                        ),
                        e,
                    )
                })?;
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Misconfigured {
            message: format!("TLS setup failed: {e}"),
            source: None,
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}
