//! The rustls server config a web config describes, on the `ring` provider
//! that the OTLP client already brings (no second crypto library to build).

use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::crypto::{
    WebPkiSupportedAlgorithms, ring, verify_tls12_signature, verify_tls13_signature,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
    SupportedProtocolVersion, version,
};

/// TLS versions rustls speaks; TLS 1.0 and 1.1 are not among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
pub(super) enum TlsVersion {
    TLS12,
    TLS13,
}

/// What the server asks of clients, after exporter-toolkit's
/// `client_auth_type` (Go's `tls.ClientAuthType`).
pub(super) enum ClientCerts {
    /// Never asks for a certificate.
    None,
    /// Asks, accepts any certificate or none, and verifies nothing but
    /// that the client holds the key of the certificate it sent.
    Request,
    /// Like `Request`, but a certificate is required.
    RequireAny,
    /// A certificate is optional; one that is sent must chain to the roots.
    VerifyIfGiven(RootCertStore),
    /// A certificate is required and must chain to the roots.
    RequireAndVerify(RootCertStore),
}

/// The certificate chain in the PEM file at `path`, leaf first.
pub(super) fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no PEM certificate in {}", path.display()));
    }
    Ok(certs)
}

/// The private key (PKCS#8, PKCS#1 or SEC1 PEM) at `path`.
pub(super) fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| format!("cannot read a PEM private key from {}: {e}", path.display()))
}

/// The PEM file at `path`, read as every file a user names is (never
/// blocking on a FIFO, at most [`crate::userfile::MAX_TEXT_BYTES`]).
fn read(path: &Path) -> Result<Vec<u8>, String> {
    crate::userfile::read(path, crate::userfile::MAX_TEXT_BYTES)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The CA certificates at `path`, trusted to sign client certificates.
pub(super) fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("bad CA certificate in {}: {e}", path.display()))?;
    }
    Ok(roots)
}

/// The server config: only HTTP/1.1 is offered over ALPN, as that is all
/// cgperf serves.
pub(super) fn server_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_certs: ClientCerts,
    min: TlsVersion,
    max: TlsVersion,
) -> Result<ServerConfig, String> {
    let provider = Arc::new(ring::default_provider());
    let versions: Vec<&'static SupportedProtocolVersion> = [
        (TlsVersion::TLS12, &version::TLS12),
        (TlsVersion::TLS13, &version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (min..=max).contains(v))
    .map(|(_, v)| v)
    .collect();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| e.to_string())?;
    let verifier = |roots: RootCertStore, optional: bool| {
        let builder =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
        let builder = if optional {
            builder.allow_unauthenticated()
        } else {
            builder
        };
        builder.build().map_err(|e| format!("client_ca_file: {e}"))
    };
    let builder = match client_certs {
        ClientCerts::None => builder.with_no_client_auth(),
        ClientCerts::Request | ClientCerts::RequireAny => {
            builder.with_client_cert_verifier(Arc::new(AnyClientCert {
                mandatory: matches!(client_certs, ClientCerts::RequireAny),
                algorithms: provider.signature_verification_algorithms,
            }))
        }
        ClientCerts::VerifyIfGiven(roots) => {
            builder.with_client_cert_verifier(verifier(roots, true)?)
        }
        ClientCerts::RequireAndVerify(roots) => {
            builder.with_client_cert_verifier(verifier(roots, false)?)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key do not go together: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepts any client certificate without checking who issued it, as Go's
/// `RequestClientCert` and `RequireAnyClientCert` do. The handshake
/// signature is still checked, so the client holds the certificate's key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, tokio_rustls::rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
