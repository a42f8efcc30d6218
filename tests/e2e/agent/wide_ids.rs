//! Fleet ids as wide as PPN fleets use them, through the real `fleetwire agent`: a node id that
//! is a DNS name and a VM id as a PPN agent makes it (dots, spaces, 75+ characters). The
//! fleet-facing documents keep the ids as they are; the documents nibrunner reads
//! (reported.json, desired.json) carry their mapping to nibrunner's identifiers
//! (runtime/src/ids.rs, docs/agent.md) beside the original `vmId`.

use std::time::Duration;

use crate::support::agent_harness::{spawn_body, AgentProcess};
use crate::support::standin_ppn_controller::StandinPpnController;
use crate::support::{free_port, wait_for};
use fleetwire_types::{HostDesiredState, InstanceState, NodeHeartbeat, VmRecord};
use reqwest::Method;

/// A narrow identifier: what nibrunner's `HostId`/`AppId` accept and a smolvm machine name.
fn is_narrow(id: &str) -> bool {
    id.len() <= 63
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !id.contains("--")
        && !id.ends_with('-')
}

#[test]
fn wide_node_and_vm_ids_are_kept_for_the_fleet_and_mapped_for_nibrunner() {
    let controller_port = free_port();
    let node_id = "gpu-01.dc1.example.org";
    let agent = AgentProcess::start(
        &format!("http://127.0.0.1:{controller_port}"),
        &[("VM_NODE_ID", node_id)],
    );
    let controller = StandinPpnController::start(controller_port, agent.port);

    // reported.json names the host by the mapped id.
    let host_id = agent.reported().host_id.to_string();
    assert!(is_narrow(&host_id), "{host_id}");
    assert!(host_id.starts_with("gpu-01-dc1-example-org-"), "{host_id}");

    // A VM id as a PPN agent makes it from a long vm_type with a dot and a space.
    let vm_id = format!("gpu.large {}-1764600000", "w".repeat(60));
    assert!(vm_id.len() >= 75);
    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&spawn_body(&vm_id, &["sleep", "600"])),
    );
    assert_eq!(status, 200, "{body}");
    let record: VmRecord = fleetwire_types::read_value_strict(&body).expect("a VmRecord");
    assert_eq!(record.vm_id.as_str(), vm_id);
    assert_eq!(record.node_id.as_deref().map(|n| n.as_str()), Some(node_id));

    // desired.json keeps the original as vmId; appId and deploymentId are its mapping.
    let bytes = std::fs::read(agent.state_dir.join("desired.json")).unwrap();
    let desired: HostDesiredState =
        fleetwire_types::read_strict(&bytes).expect("a valid desired.json");
    assert_eq!(desired.host_id.as_str(), host_id);
    let instance = &desired.instances[0];
    assert_eq!(instance.vm_id.as_ref().unwrap().as_str(), vm_id);
    let app_id = instance.app_id.to_string();
    assert!(
        is_narrow(&app_id) && app_id.starts_with("gpu-large-w"),
        "{app_id}"
    );
    assert_eq!(instance.deployment_id.as_str(), app_id);
    agent.wait_reported("the VM to run", Duration::from_secs(10), |r| {
        r.instances
            .iter()
            .any(|i| i.app_id.as_str() == app_id && i.state == InstanceState::Running)
            .then_some(())
    });

    // The heartbeats carry the node id and the VM id as they are.
    let heartbeat = wait_for("a heartbeat with the VM", Duration::from_secs(10), || {
        controller.heartbeats().into_iter().rev().find_map(|raw| {
            let hb: NodeHeartbeat =
                fleetwire_types::read_value_strict(&raw).expect("a NodeHeartbeat");
            (!hb.vms.is_empty()).then_some(hb)
        })
    });
    assert_eq!(heartbeat.node_id.as_str(), node_id);
    assert_eq!(heartbeat.vms[0].vm_id.as_str(), vm_id);

    // The same id again is a conflict (the mapped id is taken); the percent-encoded DELETE
    // removes it.
    let (status, _) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&spawn_body(&vm_id, &["true"])),
    );
    assert_eq!(status, 409);
    let (status, body) = agent.send(
        Method::DELETE,
        &format!("/v1/vms/{}", crate::support::url_segment(&vm_id)),
        None,
    );
    assert_eq!(status, 204, "{body}");
    agent.wait_reported("the VM to be gone", Duration::from_secs(10), |r| {
        r.instances.is_empty().then_some(())
    });
}
