//! Enrollment: the node's key (generated once, kept in the state directory with mode 0600,
//! never sent anywhere), a CSR for it, `POST /v1/nodes/register`, and the certificate that
//! comes back. While the controller is down the caller retries with [`Backoff`].

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use fleetwire_types::{
    BoundedVec, PemCsr, RegisterNodeRequest, RegisterNodeResponse, RuntimeName, RuntimeUrl,
};
use rcgen::{CertificateParams, DnType, KeyPair, SanType};
use reqwest::StatusCode;

use super::config::RuntimeTlsExport;
use super::heartbeat::{agent_version, boot_id_of, hostname_of, HostFacts};
use super::Agent;
use crate::reported::atomic_write;

pub const KEY_FILE: &str = "node.key";
pub const CERT_FILE: &str = "node.crt";
pub const CA_FILE: &str = "ca.crt";

/// The node's private key: read from the state directory, or generated and stored there
/// (mode 0600) on first start. A key file with looser permissions is tightened.
pub fn node_key(state_dir: &Path) -> anyhow::Result<KeyPair> {
    let path = state_dir.join(KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(pem) => {
            let meta = std::fs::metadata(&path)?;
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    "{}: permissions were {:o}, set to 600",
                    path.display(),
                    meta.permissions().mode() & 0o777
                );
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            }
            KeyPair::from_pem(&pem)
                .with_context(|| format!("{}: not a PEM private key", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = KeyPair::generate().context("generating the node key")?;
            atomic_write(&path, key.serialize_pem().as_bytes(), 0o600)
                .with_context(|| format!("writing {}", path.display()))?;
            tracing::info!("generated the node key {}", path.display());
            Ok(key)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// A CSR for `key` naming the node and its WireGuard address. The controller decides what the
/// certificate really says; this only carries the public key.
pub fn csr_pem(key: &KeyPair, node_id: &str, wg_ip: IpAddr) -> anyhow::Result<PemCsr> {
    let mut params = CertificateParams::new(vec![node_id.to_string()])?;
    params.subject_alt_names.push(SanType::IpAddress(wg_ip));
    // The common name is bounded to 64 characters (RFC 5280); the DNS SAN carries the id.
    if node_id.chars().count() <= 64 {
        params.distinguished_name.push(DnType::CommonName, node_id);
    }
    let pem = params.serialize_request(key)?.pem()?;
    pem.parse()
        .map_err(|e| anyhow::anyhow!("the CSR is not a PemCsr: {e}"))
}

/// How a registration ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Enrolled {
    /// The controller took the registration.
    Registered,
    /// The controller has no registration route (a PPN controller): heartbeats enroll.
    ByHeartbeat,
}

#[derive(Debug)]
pub enum RegisterError {
    /// No answer, or a 5xx: try again later.
    Unreachable(String),
    /// The controller answered no (422 unknown runtime, 400 ...): logged, retried later.
    Refused(String),
}

pub fn register_request(agent: &Agent, key: &KeyPair) -> anyhow::Result<RegisterNodeRequest> {
    let facts = HostFacts::read(&agent.config.state_dir);
    let published = agent.published();
    let runtime = published.as_ref().map(|p| &p.observation.runtime);
    // The address the controller probes for the engine version: reachable from it (on the
    // WireGuard address by default), not the agent's own view of the runtime.
    let smolvm_address = match agent.driver.name() {
        "smolvm" => Some(
            agent
                .config
                .runtime_advertise_address
                .parse::<RuntimeUrl>()
                .map_err(|e| anyhow::anyhow!("VM_RUNTIME_ADVERTISE_ADDRESS: {e}"))?,
        ),
        _ => None,
    };
    Ok(RegisterNodeRequest {
        node_id: agent.config.node_id.clone(),
        hostname: hostname_of(&facts),
        wg_ip: agent.config.wg_ip.clone(),
        addresses: BoundedVec::new(Vec::new()).expect("no extra addresses is within bounds"),
        spawn_port: agent.config.spawn_host_port(),
        runtime: agent
            .driver
            .name()
            .parse::<RuntimeName>()
            .expect("driver names are runtime names"),
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
    let request =
        register_request(agent, key).map_err(|e| RegisterError::Refused(format!("{e:#}")))?;
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
            )
            .map_err(|e| RegisterError::Refused(format!("{e:#}")))?;
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
) -> anyhow::Result<()> {
    if let Some(cert) = &answer.cert_pem {
        atomic_write(&state_dir.join(CERT_FILE), cert.as_bytes(), 0o644)
            .context("storing node.crt")?;
        tracing::info!("stored the node certificate");
    }
    if let Some(ca) = &answer.ca_pem {
        atomic_write(&state_dir.join(CA_FILE), ca.as_bytes(), 0o644).context("storing ca.crt")?;
    }
    if let Some(tls) = runtime_tls {
        export_runtime_tls(state_dir, tls)?;
    }
    Ok(())
}

/// The file smolvm's `SMOLVM_SERVE_TLS_CERT` names in [`RuntimeTlsExport::dir`].
pub const RUNTIME_CERT_FILE: &str = "cert.pem";
/// The file `SMOLVM_SERVE_TLS_KEY` names (mode 0640, group [`RuntimeTlsExport::gid`]).
pub const RUNTIME_KEY_FILE: &str = "key.pem";
/// The file `SMOLVM_SERVE_TLS_CLIENT_CA` names: the fleet CA.
pub const RUNTIME_CA_FILE: &str = "ca.pem";

/// Fleet mode: copies the node certificate, its key and the fleet CA from the state directory
/// to where smolvm reads them (docs/agent.md). The directory is 0750 and the key 0640, both
/// with the runtime's group when one is configured, so smolvm (running as its own user) can
/// read the key and nobody else can; each file is replaced atomically, never seen half
/// written. Nothing to do before the first certificate arrives.
pub fn export_runtime_tls(state_dir: &Path, tls: &RuntimeTlsExport) -> anyhow::Result<()> {
    let read = |name: &str| match std::fs::read(state_dir.join(name)) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", state_dir.join(name).display())),
    };
    let (Some(cert), Some(key), Some(ca)) = (read(CERT_FILE)?, read(KEY_FILE)?, read(CA_FILE)?)
    else {
        return Ok(());
    };
    let dir = &tls.dir;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    set_owner_and_mode(dir, tls.gid, 0o750)?;
    write_shared(&dir.join(RUNTIME_KEY_FILE), &key, tls.gid, 0o640)?;
    write_shared(&dir.join(RUNTIME_CERT_FILE), &cert, tls.gid, 0o644)?;
    write_shared(&dir.join(RUNTIME_CA_FILE), &ca, tls.gid, 0o644)?;
    tracing::info!(dir = %dir.display(), gid = ?tls.gid, "node certificate, key and CA kept for the runtime");
    if let Some(blocked) = untraversable_ancestor(dir, tls.gid) {
        tracing::warn!(
            dir = %dir.display(),
            blocked = %blocked.display(),
            "the runtime's group cannot reach VM_RUNTIME_TLS_DIR through this directory: smolvm will not read its certificate (place VM_RUNTIME_TLS_DIR elsewhere, docs/agent.md)"
        );
    }
    Ok(())
}

/// The first directory above `dir` that neither everyone nor group `gid` may traverse, if
/// any: a 0700 state directory (the packaged unit's) keeps smolvm away from the files.
fn untraversable_ancestor(dir: &Path, gid: Option<u32>) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dir = std::fs::canonicalize(dir).ok()?;
    dir.ancestors().skip(1).find_map(|ancestor| {
        let meta = std::fs::metadata(ancestor).ok()?;
        let others = meta.mode() & 0o001 != 0;
        let group = gid.is_some_and(|g| g == meta.gid()) && meta.mode() & 0o010 != 0;
        (!others && !group).then(|| ancestor.to_path_buf())
    })
}

fn set_owner_and_mode(path: &Path, gid: Option<u32>, mode: u32) -> anyhow::Result<()> {
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid))
            .with_context(|| format!("giving {} to group {gid}", path.display()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))
}

/// Writes `bytes` to `path` through a temporary file that gets its group and mode before it is
/// renamed into place, so the file is never readable by more than `mode` allows.
fn write_shared(path: &Path, bytes: &[u8], gid: Option<u32>, mode: u32) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().expect("a file in a directory");
    let name = path.file_name().expect("a file name").to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| -> anyhow::Result<()> {
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        set_owner_and_mode(&tmp, gid, mode)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {}", path.display()))
}

/// Capped exponential backoff with jitter: each delay is drawn from the upper half of a window
/// that doubles up to `cap`, so many nodes coming back at once do not retry in step.
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    window: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, cap: Duration) -> Backoff {
        Backoff {
            initial,
            cap,
            window: initial,
        }
    }

    pub fn reset(&mut self) {
        self.window = self.initial;
    }

    pub fn next_delay(&mut self) -> Duration {
        let window = self.window.as_millis() as u64;
        let delay = rand::random_range(window / 2..=window.max(1));
        self.window = (self.window * 2).min(self.cap);
        Duration::from_millis(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        let delays: Vec<u64> = (0..6).map(|_| b.next_delay().as_millis() as u64).collect();
        for (d, window) in delays.iter().zip([100, 200, 400, 800, 800, 800]) {
            assert!(
                (window / 2..=window).contains(d),
                "{d} not in the upper half of {window}"
            );
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    #[test]
    fn the_runtime_gets_the_certificate_key_and_ca_with_the_key_0640_for_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        let tls = RuntimeTlsExport {
            dir: dir.path().join("runtime-tls"),
            // The test's own group: chown to it needs no privilege.
            // SAFETY: getegid(2) has no preconditions and cannot fail.
            gid: Some(unsafe { libc::getegid() }),
        };
        // Before the first certificate there is nothing to hand over.
        node_key(&state).unwrap();
        export_runtime_tls(&state, &tls).unwrap();
        assert!(!tls.dir.exists());

        std::fs::write(state.join(CERT_FILE), "CERT").unwrap();
        std::fs::write(state.join(CA_FILE), "CA").unwrap();
        export_runtime_tls(&state, &tls).unwrap();
        let mode = |name: &str| {
            std::fs::metadata(tls.dir.join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(RUNTIME_KEY_FILE), 0o640);
        assert_eq!(mode(RUNTIME_CERT_FILE), 0o644);
        assert_eq!(mode(RUNTIME_CA_FILE), 0o644);
        assert_eq!(
            std::fs::metadata(&tls.dir).unwrap().permissions().mode() & 0o777,
            0o750
        );
        assert_eq!(
            std::fs::read(tls.dir.join(RUNTIME_KEY_FILE)).unwrap(),
            std::fs::read(state.join(KEY_FILE)).unwrap()
        );
        assert_eq!(
            std::fs::read_to_string(tls.dir.join(RUNTIME_CERT_FILE)).unwrap(),
            "CERT"
        );
        // A 0700 directory on the way (the packaged unit's state directory) is found.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(
            untraversable_ancestor(&tls.dir, Some(u32::MAX)).as_deref(),
            Some(std::fs::canonicalize(dir.path()).unwrap().as_path())
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(untraversable_ancestor(&tls.dir, Some(u32::MAX)), None);
        // A renewal replaces the files in place; no temporary file is left behind.
        std::fs::write(state.join(CERT_FILE), "CERT2").unwrap();
        export_runtime_tls(&state, &tls).unwrap();
        assert_eq!(
            std::fs::read_to_string(tls.dir.join(RUNTIME_CERT_FILE)).unwrap(),
            "CERT2"
        );
        let names: Vec<_> = std::fs::read_dir(&tls.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
    }

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
