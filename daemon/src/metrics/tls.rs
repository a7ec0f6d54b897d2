//! The authenticated listener's TLS: a rustls server configuration (the
//! `ring` provider) from the web configuration's `tls_server_config`.

use std::sync::Arc;

use rustls::crypto::ring::default_provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};

use super::web_config::{
    read_private, read_public, ClientAuth, TlsSettings, TlsVersion, WebConfigError,
};

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading a file failed.
    #[error(transparent)]
    File(#[from] WebConfigError),
    /// A PEM file holds nothing usable.
    #[error("{path}: {what}")]
    Pem {
        /// File.
        path: String,
        /// What is wrong.
        what: String,
    },
    /// rustls refused the combination.
    #[error("TLS setup refused")]
    Rustls(#[from] rustls::Error),
    /// The client CA could not be used to verify certificates.
    #[error("{path}: cannot verify client certificates with it: {why}")]
    Verifier {
        /// The client CA file.
        path: String,
        /// rustls's reason.
        why: String,
    },
}

fn versions(t: &TlsSettings) -> Vec<&'static SupportedProtocolVersion> {
    [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (t.min_version..=t.max_version).contains(v))
    .map(|(_, p)| p)
    .collect()
}

fn certificates(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_public(path)?;
    let pem_error = |what: String| TlsError::Pem {
        path: path.display().to_string(),
        what,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(format!("not PEM certificates ({e})")))?;
    if certs.is_empty() {
        return Err(pem_error("no CERTIFICATE block".into()));
    }
    Ok(certs)
}

/// The server configuration for `t`: the certificate chain and key, the
/// versions offered, HTTP/1.1 by ALPN, and the client-certificate verifier.
pub fn server_config(t: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(default_provider());
    let chain = certificates(&t.cert_file)?;
    let key_pem = read_private(&t.key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
        path: t.key_file.display().to_string(),
        // The error names the PEM section, never the key's bytes.
        what: format!("no usable private key ({e})"),
    })?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions(t))?;
    let builder = match (t.client_auth, &t.client_ca_file) {
        (ClientAuth::None, _) | (_, None) => builder.with_no_client_auth(),
        (mode, Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca)? {
                roots.add(cert)?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if mode == ClientAuth::VerifyIfGiven {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier.build().map_err(|e| TlsError::Verifier {
                path: ca.display().to_string(),
                why: e.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
