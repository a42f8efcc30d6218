//! Enrollment: the node's key (generated once, kept in the state directory with mode 0600,
//! never sent anywhere), a CSR for it, `POST /v1/nodes/register`, and the certificate that
//! comes back (handed on to the runtime in fleet mode, `runtime_tls`). While the controller is
//! down the caller retries with `backoff::Backoff`.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use fleetwire_types::{BoundedVec, PemCsr, RegisterNodeRequest, RegisterNodeResponse, RuntimeUrl};
use rcgen::{CertificateParams, DnType, KeyPair, SanType};
use reqwest::StatusCode;

use super::config::RuntimeTlsExport;
use super::host_facts::{agent_version, boot_id_of, hostname_of, HostFacts};
use super::runtime_tls::export_runtime_tls;
use super::shared::Agent;
use crate::drivers::driver::ClientTlsFiles;
use crate::file_error::FileError;
use crate::runtimes::Runtime;

/// What went wrong on the node's side of enrollment: its key, its CSR, or keeping what the
/// controller issued.
#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    /// A file of the state directory or of `VM_RUNTIME_TLS_DIR` could not be read or written.
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{}: not a PEM private key: {error}", path.display())]
    NotAKey { path: PathBuf, error: rcgen::Error },
    #[error("generating the node key: {0}")]
    KeyGeneration(rcgen::Error),
    #[error("{0}")]
    Csr(rcgen::Error),
    #[error("the CSR is not a PemCsr: {0}")]
    CsrNotPem(String),
    #[error("VM_RUNTIME_ADVERTISE_ADDRESS: {0}")]
    AdvertiseAddress(String),
}

pub const KEY_FILE: &str = "node.key";
pub const CERT_FILE: &str = "node.crt";
pub const CA_FILE: &str = "ca.crt";

/// The node's identity in the state directory: the certificate the controller issued, its key
/// and the CA that signed it. The smolvm driver presents them in fleet mode.
pub fn identity_files(state_dir: &Path) -> ClientTlsFiles {
    ClientTlsFiles {
        cert: state_dir.join(CERT_FILE),
        key: state_dir.join(KEY_FILE),
        ca: state_dir.join(CA_FILE),
    }
}

/// The node's private key: read from the state directory, or generated and stored there
/// (mode 0600) on first start. A key file with looser permissions is tightened.
pub fn node_key(state_dir: &Path) -> Result<KeyPair, EnrollError> {
    let path = state_dir.join(KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(pem) => {
            let meta = std::fs::metadata(&path).map_err(FileError::doing("reading", &path))?;
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    "{}: permissions were {:o}, set to 600",
                    path.display(),
                    meta.permissions().mode() & 0o777
                );
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(FileError::doing("setting the mode of", &path))?;
            }
            KeyPair::from_pem(&pem).map_err(|error| EnrollError::NotAKey { path, error })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = KeyPair::generate().map_err(EnrollError::KeyGeneration)?;
            crate::atomic_file::write(&path, key.serialize_pem().as_bytes(), 0o600)
                .map_err(FileError::doing("writing", &path))?;
            tracing::info!("generated the node key {}", path.display());
            Ok(key)
        }
        Err(e) => Err(FileError::doing("reading", &path)(e).into()),
    }
}

/// A CSR for `key` naming the node and its WireGuard address. The controller decides what the
/// certificate really says; this only carries the public key.
pub fn csr_pem(key: &KeyPair, node_id: &str, wg_ip: IpAddr) -> Result<PemCsr, EnrollError> {
    let mut params = CertificateParams::new(vec![node_id.to_string()]).map_err(EnrollError::Csr)?;
    params.subject_alt_names.push(SanType::IpAddress(wg_ip));
    // The common name is bounded to 64 characters (RFC 5280); the DNS SAN carries the id.
    if node_id.chars().count() <= 64 {
        params.distinguished_name.push(DnType::CommonName, node_id);
    }
    let pem = params
        .serialize_request(key)
        .and_then(|csr| csr.pem())
        .map_err(EnrollError::Csr)?;
    pem.parse()
        .map_err(|e| EnrollError::CsrNotPem(format!("{e}")))
}

/// How a registration ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Enrolled {
    /// The controller took the registration.
    Registered,
    /// The controller has no registration route (a PPN controller): heartbeats enroll.
    ByHeartbeat,
}

/// Why a registration attempt did not enroll the node.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// No answer, or a 5xx: try again later.
    #[error("{0}")]
    Unreachable(String),
    /// The controller answered no (422 unknown runtime, 400 ...): logged, retried later.
    #[error("{0}")]
    Refused(String),
    /// The request could not be built, or what came back could not be kept.
    #[error(transparent)]
    Local(#[from] EnrollError),
}

pub fn register_request(agent: &Agent, key: &KeyPair) -> Result<RegisterNodeRequest, EnrollError> {
    let facts = HostFacts::read(&agent.config.state_dir);
    let published = agent.published();
    let runtime = published.as_ref().map(|p| &p.observation.runtime);
    // The address the controller probes for the engine version: reachable from it (on the
    // WireGuard address by default), not the agent's own view of the runtime.
    let runtime_name = agent.driver.runtime();
    let smolvm_address = match runtime_name {
        Runtime::Smolvm => Some(
            agent
                .config
                .runtime_advertise_address
                .parse::<RuntimeUrl>()
                .map_err(|e| EnrollError::AdvertiseAddress(e.to_string()))?,
        ),
        Runtime::Process => None,
    };
    Ok(RegisterNodeRequest {
        node_id: agent.config.node_id.clone(),
        hostname: hostname_of(&facts),
        wg_ip: agent.config.wg_ip.clone(),
        addresses: BoundedVec::new(Vec::new()).expect("no extra addresses is within bounds"),
        spawn_port: agent.config.spawn_host_port(),
        runtime: crate::runtimes::wire_name(runtime_name),
        smolvm_address,
        boot_id: runtime.and_then(|r| r.boot_id.clone()),
        host_boot_id: Some(boot_id_of(&facts.boot_id)),
        csr_pem: Some(csr_pem(
            key,
            agent.config.node_id.as_str(),
            IpAddr::V4(agent.config.wg_ip.0),
        )?),
        total_cpus: facts.cpu_cores,
        total_memory_mb: facts.ram_total_mb,
        total_disk_gb: facts.disk_total_bytes / (1024 * 1024 * 1024),
        kvm_available: facts.kvm_available,
        reserved: agent.config.reserved,
        agent_version: Some(agent_version()),
    })
}

/// How much of a refusing answer's body a `RegisterError::Refused` quotes for the log (not a
/// schema limit).
const REFUSAL_QUOTE_CHARS: usize = 500;

/// One registration attempt.
pub async fn register(
    agent: &Agent,
    http: &reqwest::Client,
    key: &KeyPair,
) -> Result<Enrolled, RegisterError> {
    let request = register_request(agent, key)?;
    let url = format!("{}/v1/nodes/register", agent.config.fleet_endpoint);
    let resp = http
        .post(&url)
        .json(&request)
        .send()
        .await
        .map_err(|e| RegisterError::Unreachable(format!("POST {url}: {e}")))?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| RegisterError::Unreachable(format!("POST {url}: {e}")))?;
    match status {
        s if s.is_success() => {
            let accepted = fleetwire_types::read::<RegisterNodeResponse>(&body).map_err(|r| {
                RegisterError::Refused(format!("POST {url}: not a RegisterNodeResponse: {r}"))
            })?;
            crate::unknown_fields::note(&accepted, &format!("POST {url}"));
            let answer = accepted.value;
            store_certificate(
                &agent.config.state_dir,
                agent.config.runtime_tls.as_ref(),
                &answer,
            )?;
            tracing::info!(status = ?answer.node.status, "registered");
            Ok(Enrolled::Registered)
        }
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => Ok(Enrolled::ByHeartbeat),
        s if s.is_server_error() => Err(RegisterError::Unreachable(format!("POST {url}: {s}"))),
        s => Err(RegisterError::Refused(format!(
            "POST {url}: {s}: {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(REFUSAL_QUOTE_CHARS)
                .collect::<String>()
        ))),
    }
}

fn store_certificate(
    state_dir: &Path,
    runtime_tls: Option<&RuntimeTlsExport>,
    answer: &RegisterNodeResponse,
) -> Result<(), EnrollError> {
    for (name, pem) in [(CERT_FILE, &answer.cert_pem), (CA_FILE, &answer.ca_pem)] {
        if let Some(pem) = pem {
            let path = state_dir.join(name);
            crate::atomic_file::write(&path, pem.as_bytes(), 0o644)
                .map_err(FileError::doing("storing", &path))?;
        }
    }
    if answer.cert_pem.is_some() {
        tracing::info!("stored the node certificate");
    }
    if let Some(tls) = runtime_tls {
        export_runtime_tls(&identity_files(state_dir), tls)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData;

    #[test]
    fn the_key_is_kept_with_mode_600_and_the_csr_carries_it() {
        let dir = tempfile::tempdir().unwrap();
        let key = node_key(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = node_key(dir.path()).unwrap();
        assert_eq!(key.der_bytes(), again.der_bytes(), "the same key is reused");
        let csr = csr_pem(&key, "n1", "10.0.0.1".parse().unwrap()).unwrap();
        let parsed = rcgen::CertificateSigningRequestParams::from_pem(csr.as_str()).unwrap();
        assert_eq!(parsed.public_key.der_bytes(), key.der_bytes());
    }
}
