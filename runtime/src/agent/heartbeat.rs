//! The host's real figures, and the controller link: register (see `enroll`), then one
//! `NodeHeartbeat` per interval. A heartbeat answered 404 means the controller forgot the node:
//! it registers again.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fleetwire_types::{AgentVersion, BootId, F32Min0, F64Min0, Hostname, NodeHeartbeat, Timestamp};
use reqwest::StatusCode;
use tokio::sync::watch;

use super::enroll::{self, Backoff, Enrolled};
use super::local_api::vm_records;
use super::Agent;

const MB: u64 = 1024 * 1024;
const GB: u64 = 1024 * MB;

/// What the host is, read fresh each time (a few small files and one statvfs).
#[derive(Debug, Clone)]
pub struct HostFacts {
    pub hostname: String,
    pub ram_total_mb: u64,
    pub ram_available_mb: u64,
    pub cpu_cores: u32,
    /// One-minute load average.
    pub load1: f64,
    pub disk_total_bytes: u64,
    pub disk_free_bytes: u64,
    pub kvm_available: bool,
    pub boot_id: String,
}

impl HostFacts {
    pub fn read(state_dir: &Path) -> HostFacts {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib = |key: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let load1 = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        // SAFETY: sysconf only reads a configuration value.
        let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u32;
        let (disk_total_bytes, disk_free_bytes) = statvfs(state_dir).unwrap_or((0, 0));
        HostFacts {
            hostname: hostname(),
            ram_total_mb: kib("MemTotal") / 1024,
            ram_available_mb: kib("MemAvailable") / 1024,
            cpu_cores: cores,
            load1,
            disk_total_bytes,
            disk_free_bytes,
            kvm_available: Path::new("/dev/kvm").exists(),
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }
    }

    /// Whole-host CPU load in percent: the one-minute load average over the cores.
    pub fn cpu_load_pct(&self) -> f32 {
        (self.load1 / self.cpu_cores.max(1) as f64 * 100.0) as f32
    }
}

/// Total and free (for unprivileged users) bytes of the filesystem holding `path`.
fn statvfs(path: &Path) -> Option<(u64, u64)> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statvfs is a valid out-parameter; `c` is a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some((st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize))
}

/// The host's name from /etc/hostname, as PPN agents read it (the kernel's when absent).
fn hostname() -> String {
    let from_file = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    if !from_file.is_empty() {
        return from_file;
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The name as the schema allows it (at most `Hostname::MAX_LENGTH` characters).
pub fn hostname_of(facts: &HostFacts) -> Hostname {
    Hostname::truncated(&facts.hostname)
}

/// A boot id as the schema allows it (at most `BootId::MAX_LENGTH` characters).
pub fn boot_id_of(raw: &str) -> BootId {
    BootId::truncated(raw)
}

pub fn agent_version() -> AgentVersion {
    env!("CARGO_PKG_VERSION")
        .parse()
        .expect("the crate version")
}

/// Builds this interval's heartbeat from the host and the last pass.
pub fn build_heartbeat(agent: &Agent) -> NodeHeartbeat {
    let facts = HostFacts::read(&agent.config.state_dir);
    let published = agent.published();
    let (vms, runtime) = match &published {
        Some(p) => (
            vm_records(&agent.config, &p.desired, &p.observation.instances),
            Some(&p.observation.runtime),
        ),
        None => (Vec::new(), None),
    };
    NodeHeartbeat {
        node_id: agent.config.node_id.clone(),
        wg_ip: agent.config.wg_ip.clone(),
        hostname: hostname_of(&facts),
        ram_total_mb: facts.ram_total_mb,
        ram_used_mb: facts.ram_total_mb.saturating_sub(facts.ram_available_mb),
        cpu_cores: facts.cpu_cores,
        cpu_load_pct: F32Min0::new(facts.cpu_load_pct().max(0.0))
            .expect("a clamped load is at least 0"),
        kvm_available: facts.kvm_available,
        reserved: agent.config.reserved,
        vms,
        boot_id: boot_id_of(&facts.boot_id),
        timestamp_utc: Timestamp::now(),
        spawn_port: Some(agent.config.spawn_host_port()),
        agent_version: Some(agent_version()),
        runtime_boot_id: runtime.and_then(|r| r.boot_id.clone()),
        runtime_capacity: runtime.and_then(|r| r.capacity.clone()),
        runtime_stalled: runtime.is_some_and(|r| r.stalled),
        cpu_usage: runtime.and_then(|r| F64Min0::new(r.cpu_usage.max(0.0))),
        memory_usage_mb: runtime.map(|r| r.memory_usage_mb),
        disk_usage_gb: runtime.map(|r| r.disk_usage_gb),
        disk_free_gb: Some(facts.disk_free_bytes / GB),
        disk_total_gb: Some(facts.disk_total_bytes / GB),
    }
}

/// What one heartbeat came to.
enum Beat {
    Taken,
    /// 404: the controller does not know the node (any more).
    Forgotten,
    Refused(String),
    Unreachable(String),
}

/// How much of a refusing answer's body a `Beat::Refused` quotes for the log (not a schema limit).
const REFUSAL_QUOTE_CHARS: usize = 300;

async fn send_heartbeat(agent: &Agent, http: &reqwest::Client) -> Beat {
    let heartbeat = build_heartbeat(agent);
    let body = serde_json::to_value(&heartbeat).expect("a generated value serializes");
    if let Some(v) = fleetwire_types::validate_value::<NodeHeartbeat>(&body).first() {
        return Beat::Refused(format!(
            "built an invalid heartbeat: {}",
            fleetwire_types::describe(v)
        ));
    }
    let url = format!("{}/v1/nodes/heartbeat", agent.config.fleet_endpoint);
    match http.post(&url).json(&body).send().await {
        Ok(resp) if resp.status().is_success() => Beat::Taken,
        Ok(resp) if resp.status() == StatusCode::NOT_FOUND => Beat::Forgotten,
        Ok(resp) if resp.status().is_server_error() => {
            Beat::Unreachable(format!("POST {url}: {}", resp.status()))
        }
        Ok(resp) => {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            Beat::Refused(format!(
                "POST {url}: {status}: {}",
                text.chars().take(REFUSAL_QUOTE_CHARS).collect::<String>()
            ))
        }
        Err(e) => Beat::Unreachable(format!("POST {url}: {e}")),
    }
}

/// The controller link: register, then heartbeat every interval until stopped.
pub async fn run(agent: Arc<Agent>, mut stop: watch::Receiver<bool>) {
    let http = match crate::tls::client_builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot build the HTTP client: {e}");
            return;
        }
    };
    let key = match enroll::node_key(&agent.config.state_dir) {
        Ok(k) => k,
        Err(e) => {
            tracing::error!("node key: {e:#}");
            return;
        }
    };
    // Registration carries the runtime's boot id, known after the first pass.
    for _ in 0..100 {
        if agent.published().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut registered = false;
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        let wait = if !registered {
            match enroll::register(&agent, &http, &key).await {
                Ok(Enrolled::Registered) => {
                    agent.update_link(|l| {
                        l.enrolled = true;
                        l.unreachable = false;
                    });
                    registered = true;
                    backoff.reset();
                    Duration::ZERO
                }
                // A PPN controller has no registration route: the first heartbeat enrolls.
                Ok(Enrolled::ByHeartbeat) => {
                    agent.update_link(|l| l.unreachable = false);
                    registered = true;
                    backoff.reset();
                    Duration::ZERO
                }
                Err(enroll::RegisterError::Unreachable(e)) => {
                    tracing::warn!("controller unreachable: {e}");
                    agent.update_link(|l| l.unreachable = true);
                    backoff.next_delay()
                }
                Err(enroll::RegisterError::Refused(e)) => {
                    tracing::error!("registration refused: {e}");
                    agent.update_link(|l| l.unreachable = false);
                    backoff.next_delay()
                }
            }
        } else {
            match send_heartbeat(&agent, &http).await {
                Beat::Taken => {
                    agent.update_link(|l| {
                        l.enrolled = true;
                        l.unreachable = false;
                    });
                    backoff.reset();
                    agent.config.heartbeat_interval
                }
                Beat::Forgotten => {
                    tracing::warn!("the controller does not know this node: registering again");
                    agent.update_link(|l| l.enrolled = false);
                    registered = false;
                    Duration::ZERO
                }
                Beat::Refused(e) => {
                    tracing::error!("heartbeat refused: {e}");
                    agent.config.heartbeat_interval
                }
                Beat::Unreachable(e) => {
                    tracing::warn!("heartbeat failed: {e}");
                    agent.update_link(|l| l.unreachable = true);
                    agent.config.heartbeat_interval
                }
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}
