//! What the client trusts and presents (docs/security.md): over HTTPS only the fleet CA, and
//! only a server whose certificate carries the controller's mark (an enrolled node's
//! certificate chains to the same CA and may name the same address: it must not pass for the
//! controller); optionally a client certificate for the node routes (mTLS). The rustls
//! configuration is built on an explicit ring provider, so no process-wide provider has to be
//! installed by the program that uses the client.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::error::BuildError;

/// The subject organization of the controller's certificates: the mark the controller's HTTPS
/// certificate carries and a node's never does (docs/security.md).
pub const CONTROLLER_ORGANIZATION: &str = "fleetwire controller";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Whether a certificate the fleet CA issued carries the controller's mark: the first
/// organization of its subject is [`CONTROLLER_ORGANIZATION`]. Only meaningful on a
/// certificate whose chain was verified against the fleet CA.
pub fn has_controller_mark(cert_der: &[u8]) -> bool {
    X509Certificate::from_der(cert_der).is_ok_and(|(_, cert)| {
        cert.subject()
            .iter_organization()
            .next()
            .and_then(|o| o.as_str().ok())
            == Some(CONTROLLER_ORGANIZATION)
    })
}

/// A client TLS configuration trusting only `ca_pem` (one or more PEM certificates), taking
/// only a server with the controller's mark, and presenting `identity` (certificate chain and
/// private key, PEM) when given.
pub fn fleet_tls_config(
    ca_pem: &str,
    identity: Option<(&str, &str)>,
) -> Result<rustls::ClientConfig, BuildError> {
    let provider = provider();
    let mut roots = rustls::RootCertStore::empty();
    for ca in certificates(ca_pem).map_err(BuildError::FleetCa)? {
        roots
            .add(ca)
            .map_err(|e| BuildError::FleetCa(e.to_string()))?;
    }
    let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| BuildError::FleetCa(e.to_string()))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| BuildError::FleetCa(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(MarkVerifier::new(chain, has_controller_mark)));
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((chain_pem, key_pem)) => {
            let chain = certificates(chain_pem).map_err(BuildError::ClientIdentity)?;
            // The key's parse error is not quoted: it could show part of the key.
            let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| {
                BuildError::ClientIdentity("the key is not a PEM private key".to_string())
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| BuildError::ClientIdentity(e.to_string()))?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The configuration of a plain-HTTP client: it trusts no server at all, so an `https://`
/// redirect or address fails instead of reaching the system's roots.
pub fn no_trust_config() -> Result<rustls::ClientConfig, BuildError> {
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| BuildError::FleetCa(e.to_string()))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth())
}

fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".to_string());
    }
    Ok(certs)
}

/// A server certificate check for one member of the fleet calling another: the fleet CA's
/// chain check, then the mark the server's role needs (for the client, the controller's; the
/// controller, calling agents, asks for a node's). A chain that merely verifies is not enough:
/// a node certificate may name the controller's address.
pub struct MarkVerifier {
    chain: Arc<WebPkiServerVerifier>,
    mark: Mark,
    /// The name the certificate must be valid for, when not the one the client dialled.
    name: Option<ServerName<'static>>,
}

/// Whether a verified end-entity certificate (DER) is the server asked for.
type Mark = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

impl MarkVerifier {
    /// `chain` verifies against the fleet CA; `mark` says whether the verified end-entity
    /// certificate (DER) is of the role asked for (it may also name the one server wanted,
    /// such as the node the controller is calling).
    pub fn new(
        chain: Arc<WebPkiServerVerifier>,
        mark: impl Fn(&[u8]) -> bool + Send + Sync + 'static,
    ) -> MarkVerifier {
        MarkVerifier {
            chain,
            mark: Box::new(mark),
            name: None,
        }
    }

    /// The same check, for a certificate valid for `name` rather than for the host the client
    /// dialled: the controller calls a node at the address its record holds, and the node's
    /// certificate names the node (its id), which no other node's does, but not a loopback
    /// address (docs/security.md).
    pub fn for_name(mut self, name: ServerName<'static>) -> MarkVerifier {
        self.name = Some(name);
        self
    }
}

impl std::fmt::Debug for MarkVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MarkVerifier")
            .field("chain", &self.chain)
            .finish_non_exhaustive()
    }
}

impl ServerCertVerifier for MarkVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.chain.verify_server_cert(
            end_entity,
            intermediates,
            self.name.as_ref().unwrap_or(server_name),
            ocsp_response,
            now,
        )?;
        if (self.mark)(end_entity.as_ref()) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(organization: &str) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["n1".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, organization);
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn only_the_controllers_organization_is_its_mark() {
        assert!(has_controller_mark(&certificate(CONTROLLER_ORGANIZATION)));
        assert!(!has_controller_mark(&certificate("fleetwire node")));
        assert!(!has_controller_mark(b"not a certificate"));
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let e = fleet_tls_config("nothing here", None).unwrap_err();
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
    }

    #[test]
    fn a_bad_key_is_refused_without_quoting_it() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["ca".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap()
            .pem();
        let e = fleet_tls_config(&cert, Some((&cert, "SECRETKEYMATERIAL"))).unwrap_err();
        assert!(!e.to_string().contains("SECRETKEYMATERIAL"), "{e}");
    }
}
