//! THE builder of reported.json: every copy written, served on `/v1/reported` and rendered on
//! `/metrics` comes from [`build`].

use std::collections::{BTreeMap, HashMap};

use fleetwire_types::{
    AppId, FilesystemUsage, HostCapacity, HostId, HostReportedState, HostState, HostVersions,
    InstanceState, ReportedInstance, ReportedVolume, StateMessage, Timestamp, UsageMeters,
    VolumeId, VolumeState,
};

use crate::drivers::observation::InstanceStatus;

const MIB: u64 = 1024 * 1024;

/// Everything the document is built from, gathered by one reconcile pass.
pub struct LiveState<'a> {
    pub host_id: &'a HostId,
    pub state: HostState,
    /// The machine's resources.
    pub capacity: HostCapacity,
    pub versions: &'a HostVersions,
    pub instances: &'a [InstanceStatus],
    pub meters: &'a BTreeMap<AppId, UsageMeters>,
    /// When each instance first matched its desired deployment and state.
    pub converged_at: &'a HashMap<AppId, Timestamp>,
    /// Why the last desired document was refused, while it is.
    pub message: Option<&'a str>,
}

/// Truncates to `StateMessage::MAX_LENGTH` characters, the schema's `StateMessage`.
pub fn state_message(text: &str) -> StateMessage {
    StateMessage::truncated(text)
}

/// Whether an instance in this state holds its resources.
fn holds_resources(state: InstanceState) -> bool {
    matches!(
        state,
        InstanceState::Starting
            | InstanceState::Running
            | InstanceState::Unhealthy
            | InstanceState::Stopping
    )
}

pub fn build(live: &LiveState<'_>) -> HostReportedState {
    let mut allocatable = live.capacity.clone();
    for i in live.instances.iter().filter(|i| holds_resources(i.state)) {
        allocatable.vcpu_count = allocatable
            .vcpu_count
            .saturating_sub(u32::try_from(i.resources.vcpu_count.get()).unwrap_or(u32::MAX));
        allocatable.memory_mib = allocatable
            .memory_mib
            .saturating_sub(i.resources.memory_mib.get());
        allocatable.cache_bytes = allocatable
            .cache_bytes
            .saturating_sub(i.resources.disk_mib.saturating_mul(MIB));
    }

    let instances = live
        .instances
        .iter()
        .map(|i| ReportedInstance {
            app_id: i.app_id.clone(),
            deployment_id: i.deployment_id.clone(),
            state: i.state,
            // reported.json's integers are as wide as nibrunner reads them (32-bit here, see
            // docs/interop.md): a count past that says the largest it can.
            restart_count: u32::try_from(i.restart_count).unwrap_or(u32::MAX),
            compute: i.compute.clone(),
            converged_at: live.converged_at.get(&i.app_id).copied(),
            guest_ipv4: i.guest_ipv4.clone(),
            // The forward of the first guest port, the one `lastHealthyAt` checks.
            host_port: i.host_ports.first().map(|m| m.host_port.clone()),
            last_exit_code: i
                .last_exit_code
                .map(|c| i32::try_from(c).unwrap_or(if c < 0 { i32::MIN } else { i32::MAX })),
            last_healthy_at: i.last_healthy_at,
            last_restart: i.last_restart.clone(),
            layer_digests: Vec::new(),
            message: i.message.as_deref().map(state_message),
            meters: live.meters.get(&i.app_id).cloned(),
            started_at: if i.pid.is_some() { i.started_at } else { None },
        })
        .collect();

    let volumes = live
        .instances
        .iter()
        .filter_map(|i| {
            let v = i.volume.as_ref()?;
            Some(ReportedVolume {
                volume_id: i.app_id.as_str().parse::<VolumeId>().ok()?,
                app_id: i.app_id.clone(),
                state: VolumeState::Ready,
                size_bytes: v.size_bytes,
                device_path: Some(v.path.display().to_string()),
                message: None,
                storage_prefix: None,
                usage: v.used.map(|(used, at)| FilesystemUsage {
                    total_bytes: v.size_bytes,
                    used_bytes: used,
                    measured_at: at,
                }),
            })
        })
        .collect();

    HostReportedState {
        host_id: live.host_id.clone(),
        reported_at: Timestamp::now(),
        state: live.state,
        capacity: live.capacity.clone(),
        allocatable,
        versions: live.versions.clone(),
        volumes,
        instances,
        checkpoints: Vec::new(),
        exports: Vec::new(),
        message: live.message.map(state_message),
    }
}
