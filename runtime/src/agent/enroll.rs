//! Enrollment: a CSR for the node's key (`identity`), `POST /v1/nodes/register`, and what the
//! controller answered. In secure mode the first registration carries the bootstrap token and
//! later ones (restarts, renewals) the node certificate as TLS client identity
//! (docs/security.md); the caller keeps what comes back and retries with `backoff::Backoff`.

use std::net::IpAddr;

use fleetwire_client::operations::REGISTER_NODE;
use fleetwire_types::{
    BoundedVec, PemCsr, RegisterNodeRequest, RegisterNodeResponse, RuntimeUrl, WireDocument,
};
use rcgen::{CertificateParams, DnType, KeyPair, SanType};
use reqwest::StatusCode;

use super::config::BootstrapSecret;
use super::host_facts::{agent_version, boot_id_of, hostname_of, HostFacts};
use super::shared::Agent;
use crate::runtimes::Runtime;

/// What went wrong on the node's side of a registration: building its CSR.
#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    #[error("{0}")]
    Csr(rcgen::Error),
    #[error("the CSR is not a PemCsr: {0}")]
    CsrNotPem(String),
    #[error("VM_RUNTIME_ADVERTISE_ADDRESS: {0}")]
    AdvertiseAddress(String),
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
#[derive(Debug)]
pub enum Enrolled {
    /// The controller took the registration: its answer, with the certificate it issued.
    Registered(Box<RegisterNodeResponse>),
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
    /// 401: the credential (bootstrap token or node certificate) is unknown, used, expired or
    /// no longer the node's.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: the credential is good but not for this node id.
    #[error("{0}")]
    Forbidden(String),
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
        Runtime::Process | Runtime::Qemu => None,
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

/// One registration attempt with a CSR for `key`, sent with `token` as bearer credential when
/// given (the first enrollment), else with whatever client certificate `client` presents.
pub async fn register(
    agent: &Agent,
    client: &fleetwire_client::Client,
    key: &KeyPair,
    token: Option<&BootstrapSecret>,
) -> Result<Enrolled, RegisterError> {
    let request = register_request(agent, key)?;
    let peer = format!("POST {}{}", agent.config.fleet_endpoint, REGISTER_NODE.path);
    let client = match token {
        // The client sends it in a header marked sensitive: never in its debug output.
        Some(token) => client
            .with_bootstrap_token(token.expose())
            .map_err(|e| RegisterError::Refused(format!("{peer}: {e}")))?,
        None => client.clone(),
    };
    match client.register_node(&request).await {
        Ok(answer) => {
            crate::unknown_fields::note_fields(
                RegisterNodeResponse::INFO.name,
                answer.unknown_fields(),
                &peer,
            );
            let answer = answer.into_inner();
            tracing::info!(status = ?answer.node.status, "registered");
            Ok(Enrolled::Registered(Box::new(answer)))
        }
        Err(e) => {
            let why = format!("{peer}: {e}");
            Err(match e.status() {
                // A PPN controller: no registration route.
                Some(StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED) => {
                    return Ok(Enrolled::ByHeartbeat)
                }
                None => RegisterError::Unreachable(why),
                Some(s) if s.is_server_error() => RegisterError::Unreachable(why),
                Some(StatusCode::UNAUTHORIZED) => RegisterError::Unauthorized(why),
                Some(StatusCode::FORBIDDEN) => RegisterError::Forbidden(why),
                Some(_) => RegisterError::Refused(why),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData;

    #[test]
    fn the_csr_carries_the_public_key() {
        let key = KeyPair::generate().unwrap();
        let csr = csr_pem(&key, "n1", "10.0.0.1".parse().unwrap()).unwrap();
        let parsed = rcgen::CertificateSigningRequestParams::from_pem(csr.as_str()).unwrap();
        assert_eq!(parsed.public_key.der_bytes(), key.der_bytes());
    }
}
