//! TLS towards another member of the fleet (docs/security.md): trust only the CA that issues
//! the server's kind (the controller CA for the controller, the node CA for nodes), and take
//! only a server whose certificate carries the mark its role needs: an enrolled node must not
//! pass for the controller (the agent's side), nor the controller's own certificate for a node,
//! nor one node for another (the controller's side).

use std::sync::Arc;

use fleetwire_client::MarkVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;

use crate::fleet_identity::{identify, PeerIdentity};
use crate::tls_server::{certificates_of, TlsSetupError};

/// Which member of the fleet the server must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRole<'a> {
    /// A certificate with the controller's mark (what an agent calls).
    Controller,
    /// A node certificate (what the controller calls: an agent, or a runtime in smolvm's fleet
    /// mode serving the node's certificate).
    Node,
    /// The certificate of the node with this id and no other (the controller calling one
    /// node's agent or runtime: another node's agent at the address must not answer for it).
    TheNode(&'a str),
}

/// A rustls client configuration that trusts only `ca_pem`, takes only a server of `role`, and
/// presents `identity` (certificate chain and key, PEM) when given. For reqwest's
/// `tls_backend_preconfigured`.
pub fn client_config(
    ca_pem: &str,
    role: ServerRole<'_>,
    identity: Option<(&str, &str)>,
) -> Result<rustls::ClientConfig, TlsSetupError> {
    crate::tls::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for ca in certificates_of(ca_pem, "the fleet CA")? {
        roots.add(ca).map_err(|error| TlsSetupError::Rustls {
            what: "the fleet CA",
            error,
        })?;
    }
    let chain = WebPkiServerVerifier::builder(Arc::new(roots))
        .build()
        .map_err(|error| TlsSetupError::ServerVerifier(error.to_string()))?;
    let verifier = match role {
        ServerRole::Controller => MarkVerifier::new(chain, |der| {
            matches!(identify(der), Some(PeerIdentity::Controller))
        }),
        ServerRole::Node => MarkVerifier::new(chain, |der| {
            matches!(identify(der), Some(PeerIdentity::Node { .. }))
        }),
        // The node called, by the id its certificate names, whatever address it is called at
        // (its record's, unique among nodes): a node certificate names no loopback address.
        ServerRole::TheNode(wanted) => {
            let name =
                rustls::pki_types::ServerName::try_from(wanted.to_string()).map_err(|error| {
                    TlsSetupError::ServerVerifier(format!(
                        "node id {wanted:?} as a DNS name: {error}"
                    ))
                })?;
            let wanted = wanted.to_string();
            MarkVerifier::new(
                chain,
                move |der| matches!(identify(der), Some(PeerIdentity::Node { node_id, .. }) if node_id == wanted),
            )
            .for_name(name)
        }
    };
    let builder = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((chain_pem, key_pem)) => {
            const WHAT: &str = "the client certificate";
            let chain = certificates_of(chain_pem, WHAT)?;
            let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
                .map_err(|error| TlsSetupError::Key { what: WHAT, error })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|error| TlsSetupError::Rustls { what: WHAT, error })?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::trust::certs::FleetCa;
    use crate::tls_server::{
        certified_key, server_config, ClientCerts, ReloadableCert, TlsListener,
    };

    /// Serves `GET /` over TLS with `chain_pem`/`key_pem`; returns the port.
    async fn serve(ca: &FleetCa, chain_pem: &str, key_pem: &str) -> u16 {
        let served = ReloadableCert::new(certified_key(chain_pem, key_pem, "test").unwrap());
        let config =
            server_config(served, &ca.node_trust_pem(), None, ClientCerts::Optional).unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = tcp.local_addr().unwrap().port();
        let listener = TlsListener::new(tcp, config).unwrap();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
        tokio::spawn(async move { axum::serve(listener, app.into_make_service()).await });
        port
    }

    /// Whether a client trusting `roots` and asking for `role` gets an answer at `port`.
    async fn reaches(roots: &str, port: u16, role: ServerRole<'_>) -> bool {
        let tls = client_config(roots, role, None).unwrap();
        let client = crate::tls::client_builder()
            .tls_backend_preconfigured(tls)
            .build()
            .unwrap();
        client
            .get(format!("https://127.0.0.1:{port}/"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    }

    #[tokio::test]
    async fn a_node_certificate_never_passes_for_the_controller_nor_the_reverse() {
        let dir = tempfile::tempdir().unwrap();
        let ca = FleetCa::open_or_create(dir.path(), std::time::Duration::from_secs(3600)).unwrap();
        // A node that registered the controller's address among its own.
        let key = rcgen::KeyPair::generate().unwrap();
        let csr = rcgen::CertificateParams::new(vec!["n1".to_string()])
            .unwrap()
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap();
        let node = ca
            .sign(&csr, "n1", "127.0.0.1".parse().unwrap(), &[])
            .unwrap();
        let node_port = serve(&ca, &node.cert_pem, &key.serialize_pem()).await;
        let nodes = ca.node_trust_pem();
        // Its certificate names no loopback address: at 127.0.0.1 it is a node only by its id.
        assert!(!reaches(&nodes, node_port, ServerRole::Node).await);
        assert!(!reaches(&nodes, node_port, ServerRole::Controller).await);
        // Asked for that node, it answers (its certificate names no loopback address: it is
        // checked by its id); asked for another node at its address, it does not.
        assert!(reaches(&nodes, node_port, ServerRole::TheNode("n1")).await);
        assert!(!reaches(&nodes, node_port, ServerRole::TheNode("n2")).await);
        assert!(!reaches(&nodes, node_port, ServerRole::TheNode("N1")).await);
        // The fleet CA, which operators and agents trust, validates no node certificate.
        assert!(!reaches(ca.ca_pem(), node_port, ServerRole::TheNode("n1")).await);

        let names = [crate::controller::trust::certs::ServerName::Ip(
            "127.0.0.1".parse().unwrap(),
        )];
        let controller = ca.issue_controller_server(&names).unwrap();
        let chain = format!("{}{}", controller.cert_pem, ca.ca_pem());
        let controller_port = serve(&ca, &chain, &controller.key_pem).await;
        assert!(reaches(ca.ca_pem(), controller_port, ServerRole::Controller).await);
        assert!(!reaches(&nodes, controller_port, ServerRole::Node).await);
        assert!(!reaches(&nodes, controller_port, ServerRole::TheNode("n1")).await);
    }
}
