//! How the smolvm driver reaches its runtime: one HTTP client and two base URLs, built from
//! the [`DriverSettings`]. `/api/v1/*` goes to the API base; `/health`, `/readyz`,
//! `/capacity` and `/metrics` to the node base. In smolvm's plain mode both are the same
//! listener. In fleet mode (docs/agent.md) the API base is smolvm's mTLS port: the agent
//! presents the node certificate the controller issued at registration and accepts only a
//! server presenting a certificate of this same node ([`mtls_client`]); the node base is smolvm's plain loopback door, so
//! capacity is read before the node has a certificate and while TLS is misconfigured.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use reqwest::{Client, Method, RequestBuilder};

use crate::drivers::driver::{ClientTlsFiles, DriverError, DriverSettings};
use crate::fleet_identity::{identify, PeerIdentity};
use crate::fleet_tls_client::ServerRole;

/// Longest time one call to the runtime may take. Creating a machine only writes its record
/// and sparse disks.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The driver's way to its runtime. Cheap to call per request: the mTLS client is built once
/// and again only when the certificate files change (a re-registration renews them).
pub struct SmolvmTransport {
    api_base: String,
    node_base: String,
    /// For the node base, and for the API base in plain mode.
    plain: Client,
    tls: Option<TlsClient>,
}

struct TlsClient {
    files: ClientTlsFiles,
    /// The files' modification times and the client built from them.
    built: Mutex<Option<(Stamp, Client)>>,
}

type Stamp = [Option<SystemTime>; 3];

fn stamp(files: &ClientTlsFiles) -> Stamp {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [
        modified(&files.cert),
        modified(&files.key),
        modified(&files.ca),
    ]
}

fn builder() -> reqwest::ClientBuilder {
    crate::tls::client_builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(3))
        // The runtime is on this host or on the WireGuard network, never behind a proxy.
        .no_proxy()
}

/// Why the fleet-mode (mTLS) client cannot be built from the node's files yet.
#[derive(Debug, thiserror::Error)]
pub enum FleetTlsError {
    #[error(
        "fleet mode: no {what} at {} yet (it comes with the registration at a controller that has a node CA)",
        path.display()
    )]
    Missing { what: &'static str, path: PathBuf },
    #[error("fleet mode: reading {}: {error}", path.display())]
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("fleet mode: the node certificate, its key or the CAs: {0}")]
    Setup(String),
    #[error("fleet mode: building the TLS client: {0}")]
    Client(reqwest::Error),
}

/// A client that presents `files.cert` and takes only a server presenting a certificate of
/// this same node: smolvm in fleet mode serves the node's own certificate, which names no
/// loopback address (issue 28), so the runtime is checked by the node id the certificate
/// carries, as the controller checks it (`ServerRole::TheNode`), not by the address it is
/// called at. Trusted issuers: the node CA, which the controller sends after the leaf in the
/// chain (docs/security.md), and the fleet CA `files.ca`, for a certificate a controller
/// issued before the node CA existed.
fn mtls_client(files: &ClientTlsFiles) -> Result<Client, FleetTlsError> {
    let read = |path: &Path, what: &'static str| {
        std::fs::read_to_string(path).map_err(|error| {
            let path = path.to_path_buf();
            if error.kind() == std::io::ErrorKind::NotFound {
                FleetTlsError::Missing { what, path }
            } else {
                FleetTlsError::Unreadable { path, error }
            }
        })
    };
    let chain = read(&files.cert, "node certificate")?;
    let key = read(&files.key, "node key")?;
    let fleet_ca = read(&files.ca, "fleet CA")?;
    let certificates = crate::tls_server::certificates_of(&chain, "the node certificate")
        .map_err(|error| FleetTlsError::Setup(error.to_string()))?;
    let Some(PeerIdentity::Node { node_id, .. }) =
        certificates.first().and_then(|leaf| identify(leaf))
    else {
        return Err(FleetTlsError::Setup(format!(
            "{} is not a node certificate of the fleet",
            files.cert.display()
        )));
    };
    let mut trusted = fleet_ca;
    trusted.push('\n');
    trusted.push_str(issuers_after_leaf(&chain));
    let tls = crate::fleet_tls_client::client_config(
        &trusted,
        ServerRole::TheNode(&node_id),
        Some((&chain, &key)),
    )
    .map_err(|error| FleetTlsError::Setup(error.to_string()))?;
    builder()
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(FleetTlsError::Client)
}

/// The certificates of a PEM chain after its first (the leaf's issuers); empty when the chain
/// is the leaf alone.
pub(crate) fn issuers_after_leaf(chain: &str) -> &str {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    match chain.match_indices(BEGIN).nth(1) {
        Some((at, _)) => &chain[at..],
        None => "",
    }
}

impl SmolvmTransport {
    pub fn new(settings: &DriverSettings) -> Result<SmolvmTransport, DriverError> {
        Ok(SmolvmTransport {
            api_base: settings.runtime_address.trim_end_matches('/').to_string(),
            node_base: settings
                .runtime_local_address
                .trim_end_matches('/')
                .to_string(),
            plain: builder().build()?,
            tls: settings.runtime_client_tls.clone().map(|files| TlsClient {
                files,
                built: Mutex::new(None),
            }),
        })
    }

    fn is_api(path: &str) -> bool {
        path.starts_with("/api/")
    }

    /// The full URL of `path` (which starts with `/`): the API base for `/api/...`, the node
    /// base for everything else.
    pub fn url(&self, path: &str) -> String {
        let base = if Self::is_api(path) {
            &self.api_base
        } else {
            &self.node_base
        };
        format!("{base}{path}")
    }

    /// A request for `path` on the right base with the right client. Fails only in fleet mode
    /// when the node's certificate, key or CA cannot be read yet, saying which.
    pub fn request(&self, method: Method, path: &str) -> Result<RequestBuilder, FleetTlsError> {
        let url = self.url(path);
        let client = match &self.tls {
            Some(tls) if Self::is_api(path) => tls.client()?,
            _ => self.plain.clone(),
        };
        Ok(client.request(method, url))
    }
}

impl TlsClient {
    fn client(&self) -> Result<Client, FleetTlsError> {
        let now = stamp(&self.files);
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, client)) = built.as_ref() {
            if *at == now {
                return Ok(client.clone());
            }
        }
        let client = mtls_client(&self.files)?;
        *built = Some((now, client.clone()));
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(address: &str, local: &str, tls: Option<ClientTlsFiles>) -> DriverSettings {
        DriverSettings {
            state_dir: std::env::temp_dir(),
            stop_timeout: Duration::from_secs(1),
            runtime_address: address.into(),
            runtime_local_address: local.into(),
            runtime_client_tls: tls,
            qemu: Default::default(),
        }
    }

    #[test]
    fn api_paths_go_to_the_api_base_and_node_paths_to_the_door() {
        let t = SmolvmTransport::new(&settings(
            "https://10.8.0.12:8443/",
            "http://127.0.0.1:8444",
            None,
        ))
        .unwrap();
        assert_eq!(
            t.url("/api/v1/machines"),
            "https://10.8.0.12:8443/api/v1/machines"
        );
        assert_eq!(t.url("/capacity"), "http://127.0.0.1:8444/capacity");
        assert_eq!(t.url("/health"), "http://127.0.0.1:8444/health");
    }

    #[test]
    fn the_issuers_after_the_leaf_are_what_follows_its_block() {
        let leaf = "-----BEGIN CERTIFICATE-----\nLEAF\n-----END CERTIFICATE-----\n";
        let issuer = "-----BEGIN CERTIFICATE-----\nNODECA\n-----END CERTIFICATE-----\n";
        assert_eq!(issuers_after_leaf(leaf), "");
        let chain = format!("{leaf}{issuer}");
        assert_eq!(issuers_after_leaf(&chain), issuer);
    }

    #[test]
    fn fleet_mode_without_a_certificate_says_what_is_missing_but_the_door_works() {
        let dir = tempfile::tempdir().unwrap();
        let files = ClientTlsFiles {
            cert: dir.path().join("node.crt"),
            key: dir.path().join("node.key"),
            ca: dir.path().join("ca.crt"),
        };
        let t = SmolvmTransport::new(&settings(
            "https://127.0.0.1:8443",
            "http://127.0.0.1:8444",
            Some(files.clone()),
        ))
        .unwrap();
        let err = t
            .request(Method::GET, "/api/v1/machines")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no node certificate"), "{err}");
        assert!(err.contains("node.crt"), "{err}");
        assert!(t.request(Method::GET, "/capacity").is_ok());

        // Once the files are there (a registration stored them), the mTLS client is built.
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        // A node certificate as the node CA issues it: the node's mark, its id as the one name.
        let mut node_params = rcgen::CertificateParams::new(vec!["node-1".into()]).unwrap();
        node_params.distinguished_name.push(
            rcgen::DnType::OrganizationName,
            crate::fleet_identity::NODE_ORGANIZATION,
        );
        let cert = node_params
            .signed_by(&key, &rcgen::Issuer::new(ca_params, ca_key))
            .unwrap();
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        std::fs::write(&files.ca, ca.pem()).unwrap();
        let request = t
            .request(Method::GET, "/api/v1/machines")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(
            request.url().as_str(),
            "https://127.0.0.1:8443/api/v1/machines"
        );

        // A key that is not PEM is named.
        std::fs::write(&files.key, "not a key").unwrap();
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&files.key)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let err = t
            .request(Method::GET, "/api/v1/machines")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("node certificate, its key or the CAs"),
            "{err}"
        );
    }
}
