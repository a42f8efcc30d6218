//! Runtime drivers: what runs a host's machines. One trait, chosen by the node's runtime name.

pub mod proc_stats;
pub mod process;
pub mod smolvm;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fleetwire_types::{
    AppId, BootId, ComputeUsage, DeploymentId, DesiredInstance, HostVersions, InstanceResources,
    InstanceState, ReportedRestart, RuntimeCapacity, Timestamp,
};

/// One instance as a driver sees it right now.
#[derive(Debug, Clone)]
pub struct InstanceStatus {
    pub app_id: AppId,
    pub deployment_id: DeploymentId,
    pub state: InstanceState,
    /// What the instance was given (for `allocatable` and the disk meters).
    pub resources: InstanceResources,
    /// Restarts since the instance was last booted from scratch.
    pub restart_count: u64,
    pub last_restart: Option<ReportedRestart>,
    pub last_exit_code: Option<i64>,
    pub started_at: Option<Timestamp>,
    pub compute: Option<ComputeUsage>,
    /// CPU time the driver has seen the instance use since this agent process started, in ms,
    /// all runs added up. Only grows while the agent runs; the meters turn it into deltas.
    pub cpu_ms: u64,
    pub message: Option<String>,
    pub volume: Option<VolumeStatus>,
    /// Disk the instance really takes when it has no volume of its own (smolvm's
    /// `diskUsedMb`), in bytes, for the `disk_used_mib_seconds` meter.
    pub disk_used_bytes: Option<u64>,
    pub pid: Option<u32>,
}

/// A volume the driver keeps for an instance.
#[derive(Debug, Clone)]
pub struct VolumeStatus {
    pub path: PathBuf,
    pub size_bytes: u64,
    /// Bytes in use and when they were measured, once measured.
    pub used: Option<(u64, Timestamp)>,
}

/// What the runtime itself says, for the heartbeat and `versions`.
#[derive(Debug, Clone)]
pub struct RuntimeStatus {
    /// Changes exactly when the runtime restarts.
    pub boot_id: Option<BootId>,
    /// The runtime's last `/capacity` answer (smolvm), when it gave one.
    pub capacity: Option<RuntimeCapacity>,
    /// `/capacity` answered 503: the node self-cordons until it answers again.
    pub stalled: bool,
    /// Why the runtime could not be read, when it could not.
    pub problem: Option<String>,
    /// Real CPU load of the machines, in fractional CPUs.
    pub cpu_usage: f64,
    /// Real resident memory of the machines, in MB.
    pub memory_usage_mb: u64,
    /// Real disk taken by the machines' storage, in GB.
    pub disk_usage_gb: u64,
    pub versions: HostVersions,
}

/// One look at everything the driver runs.
#[derive(Debug, Clone)]
pub struct Observation {
    pub instances: Vec<InstanceStatus>,
    pub runtime: RuntimeStatus,
}

/// What every driver is given.
#[derive(Debug, Clone)]
pub struct DriverSettings {
    pub state_dir: PathBuf,
    /// SIGTERM (or the runtime's stop) first; after this long, SIGKILL.
    pub stop_timeout: Duration,
    /// The runtime API's base URL (smolvm), for `/api/v1/*`. `https://`: fleet mode.
    pub runtime_address: String,
    /// Base URL of the runtime's `/health` and `/capacity` (smolvm's loopback door in fleet
    /// mode; the same as `runtime_address` in plain mode).
    pub runtime_local_address: String,
    /// Fleet mode: the client certificate, its key and the CA that signed the runtime's
    /// server certificate.
    pub runtime_client_tls: Option<ClientTlsFiles>,
}

/// PEM files of a TLS client identity and the CA it trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// A runtime that runs machines. `converge` starts and stops work and returns without waiting
/// for machines to finish booting or stopping; `observe` reports live state. Both are called
/// once per reconcile pass, so they must stay cheap.
#[async_trait]
pub trait Driver: Send + Sync {
    /// The runtime name the node registers with (`RegisterNodeRequest.runtime`).
    fn name(&self) -> &'static str;
    /// Moves the runtime towards `desired`: start what should run, stop what should not, and
    /// remove what is no longer wanted.
    async fn converge(&self, desired: &[DesiredInstance]);
    async fn observe(&self) -> Observation;
    /// Stops every machine (the agent is going away) and waits for them.
    async fn shutdown(&self);
}

type Constructor = fn(&DriverSettings) -> anyhow::Result<Arc<dyn Driver>>;

/// The drivers this agent has, by runtime name.
pub const REGISTRY: &[(&str, Constructor)] = &[
    ("process", |s| Ok(Arc::new(process::ProcessDriver::new(s)?))),
    ("smolvm", |s| Ok(Arc::new(smolvm::SmolvmDriver::new(s)?))),
];

/// The driver registered as `name`.
pub fn driver_for(name: &str, settings: &DriverSettings) -> anyhow::Result<Arc<dyn Driver>> {
    let (_, construct) = REGISTRY
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| anyhow::anyhow!("no runtime driver named {name:?}"))?;
    construct(settings)
}

/// The versions a driver without a guest image, zerofs or firecracker reports: the agent's own,
/// and "none" for the rest (`HostVersions` has no optional fields).
pub fn agent_only_versions() -> HostVersions {
    const NOT_USED: &str = "none";
    HostVersions {
        agent: env!("CARGO_PKG_VERSION").to_string(),
        guest_image: NOT_USED.to_string(),
        zerofs: NOT_USED.to_string(),
        firecracker: NOT_USED.to_string(),
    }
}
