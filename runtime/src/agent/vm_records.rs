//! The agent's view of its machines as VM records (PPN's shape): each desired instance with its
//! live state from the last observation. The heartbeat sends them; the local API lists and
//! answers them.

use fleetwire_types::{HostDesiredState, InstanceState, VmRecord, VmState, VmType};

use super::config::AgentConfig;
use crate::drivers::observation::InstanceStatus;

fn vm_state(state: InstanceState) -> VmState {
    match state {
        InstanceState::Running | InstanceState::Unhealthy => VmState::Running,
        InstanceState::Pending | InstanceState::Starting => VmState::Provisioning,
        InstanceState::Stopping | InstanceState::Stopped | InstanceState::Idle => VmState::Stopped,
        InstanceState::Failed => VmState::Error,
    }
}

/// The VM records (PPN's shape) of the desired instances, with their live state.
pub fn vm_records(
    config: &AgentConfig,
    desired: &HostDesiredState,
    instances: &[InstanceStatus],
) -> Vec<VmRecord> {
    desired
        .instances
        .iter()
        .map(|d| {
            let live = instances.iter().find(|i| i.app_id == d.app_id);
            let state = live.map_or(VmState::Provisioning, |i| vm_state(i.state));
            VmRecord {
                vm_id: d
                    .vm_id
                    .clone()
                    .unwrap_or_else(|| d.app_id.as_str().parse().expect("an AppId is a VmId")),
                vm_type: d.vm_type.clone().unwrap_or_else(|| {
                    config
                        .runtime
                        .as_str()
                        .parse::<VmType>()
                        .expect("a runtime name is a VmType")
                }),
                state,
                ram_alloc_mb: d.resources.memory_mib.get(),
                vcpu_count: d.resources.vcpu_count.get().min(u32::MAX as u64) as u32,
                started_at: live
                    .filter(|i| i.pid.is_some() || state == VmState::Running)
                    .and_then(|i| i.started_at),
                tenant_id: d.tenant_id.clone(),
                host_ports: live.map_or_else(Vec::new, |i| i.host_ports.clone()),
                node_id: Some(config.node_id.clone()),
                disk_gb: Some(d.resources.disk_mib / 1024),
                command: serde_json::to_value(&d.command)
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok()),
                image: d.image.clone(),
                message: live
                    .and_then(|i| i.message.as_deref())
                    .map(fleetwire_types::VmRecordMessage::truncated),
                restore_checkpoint: None,
                created_at: None,
                restart_count: live.map(|i| i.restart_count),
                last_restart_at: live.and_then(|i| i.last_restart.as_ref().map(|r| r.at)),
            }
        })
        .collect()
}
