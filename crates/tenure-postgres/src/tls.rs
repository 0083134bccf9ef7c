//! TLS for `sslmode=prefer|require`, with rustls: the public web roots, or
//! the CA certificates in `sslrootcert`.

use std::path::Path;
use std::sync::Arc;

use tenure::StoreError;
use tokio_postgres_rustls::MakeRustlsConnect;

pub(crate) fn connector(root_cert: Option<&Path>) -> Result<MakeRustlsConnect, StoreError> {
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let misconfigured = |why: String| StoreError::Misconfigured {
                message: format!("sslrootcert {}: {why}", path.display()),
                source: None,
            };
            let pem =
                std::fs::read(path).map_err(|e| misconfigured(format!("cannot read it ({e})")))?;
            let mut found = 0;
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                let cert =
                    cert.map_err(|e| misconfigured(format!("not a PEM certificate file ({e})")))?;
                roots
                    .add(cert)
                    .map_err(|e| misconfigured(format!("unusable certificate ({e})")))?;
                found += 1;
            }
            if found == 0 {
                return Err(misconfigured(
                    "no certificate in it: give a PEM file of CA certificates".into(),
                ));
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
