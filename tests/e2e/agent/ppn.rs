//! Interoperability with the PPN fleet, against a stand-in PPN controller (PPN's shapes and
//! semantics, no registration route): the agent rides out a controller that is down, enrolls by
//! heartbeat, appears in the controller's `GET /v1/nodes`, and runs and stops the VMs that
//! controller places through the PPN agent routes.

use std::time::Duration;

use crate::support::agent_harness::AgentProcess;
use crate::support::standin_ppn_controller::{PpnNodeRecord, PpnVmRecord, StandinPpnController};
use crate::support::{free_port, wait_for};
use fleetwire_types::{HostState, InstanceState, NodeHeartbeat};

fn get<T: serde::de::DeserializeOwned>(url: &str) -> T {
    crate::support::install_crypto_provider();
    reqwest::blocking::get(url)
        .expect("GET")
        .json()
        .expect("JSON")
}

#[test]
fn the_agent_appears_in_a_ppn_controller_and_runs_its_vms() {
    // The controller is down when the agent starts.
    let controller_port = free_port();
    let controller_url = format!("http://127.0.0.1:{controller_port}");
    // A PPN client names no command: the node's default runs (without one, a spawn that names
    // none is refused).
    let agent = AgentProcess::start(&controller_url, &[("VM_DEFAULT_COMMAND", "sleep 600")]);
    let first = agent.wait_reported(
        "the agent to see the controller down",
        Duration::from_secs(10),
        |r| (r.state == HostState::Unreachable).then_some(r.reported_at),
    );
    // It keeps writing reported.json meanwhile.
    agent.wait_reported("another reported.json", Duration::from_secs(10), |r| {
        (r.reported_at > first).then_some(())
    });

    let controller = StandinPpnController::start(controller_port, agent.port);
    agent.wait_reported("the agent to be ready", Duration::from_secs(40), |r| {
        (r.state == HostState::Ready).then_some(())
    });
    let nodes: Vec<PpnNodeRecord> =
        wait_for("the node in GET /v1/nodes", Duration::from_secs(10), || {
            let nodes: Vec<PpnNodeRecord> = get(&format!("{}/v1/nodes", controller.url()));
            (!nodes.is_empty()).then_some(nodes)
        });
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].node_id, "node-1");
    assert_eq!(nodes[0].wg_ip, "127.0.0.1");
    assert!(nodes[0].ram_available_mb > 0);
    assert!(!nodes[0].reserved);
    // Every heartbeat the agent sent is a valid NodeHeartbeat, with the host's real figures.
    for raw in controller.heartbeats() {
        let hb: NodeHeartbeat =
            fleetwire_types::read_value_strict(&raw).expect("a valid NodeHeartbeat");
        assert!(hb.ram_total_mb >= hb.ram_used_mb && hb.ram_total_mb > 0);
        assert!(hb.cpu_cores > 0);
        assert_eq!(
            hb.boot_id.as_str(),
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .unwrap()
                .trim()
        );
        assert!(hb.runtime_boot_id.is_some(), "the process driver's boot id");
        assert!(hb.disk_total_gb.is_some());
    }

    // PPN's create request, as a PPN client sends it: no vm_id, no command.
    crate::support::install_crypto_provider();
    let created: PpnVmRecord = reqwest::blocking::Client::new()
        .post(format!("{}/v1/vms", controller.url()))
        .json(&serde_json::json!({"vm_type": "standard", "ram_mb": 64, "vcpu_count": 1, "tenant_id": "acme"}))
        .send()
        .expect("POST /v1/vms")
        .error_for_status()
        .expect("placed")
        .json()
        .expect("a PPN VmRecord");
    assert_eq!(created.state, "Running");
    assert_eq!(created.vm_type, "standard");
    assert_eq!(created.tenant_id.as_deref(), Some("acme"));
    let vm_id = created.vm_id.clone();
    let report = agent.wait_reported("the VM to run", Duration::from_secs(10), |r| {
        r.instances
            .iter()
            .find(|i| i.app_id.as_str() == vm_id && i.state == InstanceState::Running)
            .map(|_| r.clone())
    });
    assert_eq!(report.instances.len(), 1);
    // The next heartbeats carry it: the controller's VM list shows it from the node.
    wait_for(
        "the VM in the controller's list",
        Duration::from_secs(10),
        || {
            let vms: Vec<PpnVmRecord> = get(&format!("{}/v1/vms?tenant_id=acme", controller.url()));
            vms.iter()
                .any(|v| v.vm_id == vm_id && v.state == "Running")
                .then_some(())
        },
    );

    let status = reqwest::blocking::Client::new()
        .delete(format!("{}/v1/vms/{vm_id}", controller.url()))
        .send()
        .expect("DELETE")
        .status();
    assert_eq!(status.as_u16(), 204);
    agent.wait_reported("the VM to be gone", Duration::from_secs(10), |r| {
        r.instances.is_empty().then_some(())
    });
    wait_for(
        "the node's VM list to empty",
        Duration::from_secs(10),
        || {
            let nodes: Vec<PpnNodeRecord> = get(&format!("{}/v1/nodes", controller.url()));
            (nodes.first()?.vm_count == 0).then_some(())
        },
    );
}
