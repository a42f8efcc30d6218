//! What a driver observes: each instance's live state, the runtime's own status, and the two
//! together as one [`Observation`] per reconcile pass. The agent's meters, VM records and
//! reported.json are built from it.

use std::path::PathBuf;

use fleetwire_types::{
    AppId, BootId, ComputeUsage, DeploymentId, HostPortMapping, HostVersions, InstanceResources,
    InstanceState, Ipv4Address, ReportedRestart, RuntimeCapacity, Timestamp,
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
    /// Host ports forwarded into the guest (qemu), for the VM record's `host_ports`.
    pub host_ports: Vec<HostPortMapping>,
    /// The guest's address, while it runs (qemu).
    pub guest_ipv4: Option<Ipv4Address>,
    /// When the guest last answered on its first guest port (qemu).
    pub last_healthy_at: Option<Timestamp>,
    /// Bytes delivered to the guest and bytes the guest sent, as far as the driver can count
    /// them (qemu on a bridge: its tap device), since this agent process started, like
    /// `cpu_ms`; 0 where nothing counts them. The meters turn them into deltas.
    pub rx_bytes: u64,
    pub tx_bytes: u64,
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
    /// Whether a guest really booted with KVM here (the qemu driver's probe), once known;
    /// `None`: the heartbeat says whether /dev/kvm exists.
    pub kvm_available: Option<bool>,
}

impl RuntimeStatus {
    /// The status of a runtime the agent runs itself (process, qemu): never stalled, no
    /// `/capacity` of its own; the figures from its `instances` (`running_usage`) and `disk_bytes`.
    pub fn of_agent(
        boot_id: BootId,
        instances: &[InstanceStatus],
        disk_bytes: u64,
        versions: HostVersions,
        kvm_available: Option<bool>,
    ) -> RuntimeStatus {
        const MIB: u64 = 1024 * 1024;
        let (cpu_usage, memory_bytes) = running_usage(instances);
        RuntimeStatus {
            boot_id: Some(boot_id),
            capacity: None,
            stalled: false,
            problem: None,
            cpu_usage,
            memory_usage_mb: memory_bytes / MIB,
            disk_usage_gb: disk_bytes / (1024 * MIB),
            versions,
            kvm_available,
        }
    }
}

/// One look at everything the driver runs.
#[derive(Debug, Clone)]
pub struct Observation {
    pub instances: Vec<InstanceStatus>,
    pub runtime: RuntimeStatus,
}

/// The real CPU load (in CPUs) and resident memory (in bytes) of the running instances, added
/// up, for the heartbeat's `cpu_usage` and `memory_usage_mb`.
fn running_usage(instances: &[InstanceStatus]) -> (f64, u64) {
    instances
        .iter()
        .filter(|i| i.pid.is_some())
        .filter_map(|i| i.compute.as_ref())
        .fold((0.0, 0), |(cpu, memory), c| {
            (
                cpu + c.cpu_share.unwrap_or(0.0),
                memory + c.memory_used_bytes,
            )
        })
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
        vmm: None,
    }
}
