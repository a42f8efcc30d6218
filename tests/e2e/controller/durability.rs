//! `kill -9` the controller and start it again on the same SQLite file: every node and VM is
//! still there, nodes heard from until the kill still "ready" (the start-up grace of
//! docs/controller.md; `controller_kill_under_load.rs` follows it to its end); registrations,
//! cordons, placements, the disk ledger and nodes enrolled by a heartbeat were committed
//! before they were answered.

use std::time::Duration;

use crate::support::controller_harness::*;
use fleetwire_types::{CreateVmRequest, NodeId, NodeStatusFilter, StateMessage};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentStandIn::start().await;
    let client = client();
    let mut controller = ControllerProcess::start_in(dir.path(), &[]);

    // A registered node, heartbeating, with two placed VMs and a cordon.
    register_ok(
        &client,
        &controller,
        &registration("reg-1", agent.port, 500),
    )
    .await;
    heartbeat_ok(
        &client,
        &controller,
        &ppn_heartbeat("reg-1", "127.0.0.1", agent.port),
    )
    .await;
    let api = api_on(&client, &controller);
    let mut placed = Vec::new();
    for tenant in ["t-a", "t-b"] {
        let request: CreateVmRequest = typed(
            &json!({"vm_type": "small", "ram_mb": 1024, "vcpu_count": 1, "tenant_id": tenant, "disk_gb": 40}),
        );
        let vm = api.create_vm(&request).await.unwrap();
        placed.push(vm.vm_id.as_str().to_string());
    }
    // Two PPN nodes known by heartbeat only (enrolled by their first).
    for id in ["ppn-1", "ppn-2"] {
        heartbeat_ok(&client, &controller, &ppn_heartbeat(id, "127.0.0.1", 9204)).await;
    }
    let reason: StateMessage = "maintenance".parse().unwrap();
    let ppn_2: NodeId = "ppn-2".parse().unwrap();
    api.cordon_node(&ppn_2, Some(&reason)).await.unwrap();
    // A later heartbeat that changes nothing but the contact time is stored too.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    heartbeat_ok(
        &client,
        &controller,
        &ppn_heartbeat("ppn-1", "127.0.0.1", 9204),
    )
    .await;
    let before = node_record(&client, &controller, "ppn-1").await;
    // Heartbeat-derived fields reach the store within one second.
    tokio::time::sleep(Duration::from_millis(1200)).await;

    controller.kill_9();
    let controller = ControllerProcess::start_in(dir.path(), &[]);

    let api = api_on(&client, &controller);
    let all = api.list_nodes(Some(&NodeStatusFilter::All)).await.unwrap();
    let listed: Vec<(&str, &str)> = all
        .iter()
        .map(|n| (n.node_id.as_str(), n.status.as_str()))
        .collect();
    assert_eq!(
        listed,
        vec![("ppn-1", "ready"), ("ppn-2", "ready"), ("reg-1", "ready")]
    );
    assert_eq!(
        node_ids(&client, &controller, None).await,
        ["ppn-1", "ppn-2", "reg-1"]
    );
    let after = node_record(&client, &controller, "ppn-1").await;
    assert_eq!(
        after["last_heartbeat"], before["last_heartbeat"],
        "the last contact survived"
    );
    let node = node_record(&client, &controller, "reg-1").await;
    assert_eq!(node["reserved_disk_gb"], 80, "the ledger survived: {node}");
    assert_eq!(node["total_disk_gb"], 500);
    assert_eq!(node["vm_count"], 2);
    let cordoned = node_record(&client, &controller, "ppn-2").await;
    assert_eq!(cordoned["cordon_reason"], "maintenance");
    assert!(cordoned["cordoned_at"].is_string());
    let vms = api.list_vms(None).await.unwrap();
    let mut vm_ids: Vec<String> = vms.iter().map(|v| v.vm_id.as_str().to_string()).collect();
    placed.sort();
    vm_ids.sort();
    assert_eq!(vm_ids, placed);
    let vm = api.get_vm(&placed[0].parse().unwrap()).await.unwrap();
    assert_eq!(vm.node_id.as_ref().map(|n| n.as_str()), Some("reg-1"));
    let tenant_b = api.list_vms(Some(&"t-b".parse().unwrap())).await.unwrap();
    assert_eq!(tenant_b.len(), 1);

    // The node heartbeats again; its placed VMs (young, not yet reported) are kept.
    heartbeat_ok(
        &client,
        &controller,
        &ppn_heartbeat("reg-1", "127.0.0.1", agent.port),
    )
    .await;
    let node = node_record(&client, &controller, "reg-1").await;
    assert_eq!(node["status"], "ready");
    // The VMs are deleted through the restarted controller, releasing the ledger.
    for vm_id in &placed {
        let deleted = api.delete_vm(&vm_id.parse().unwrap()).await.unwrap();
        assert_eq!(deleted.status().as_u16(), 204);
    }
    let node = node_record(&client, &controller, "reg-1").await;
    assert_eq!(node["reserved_disk_gb"], 0);
    assert_eq!(agent.deleted().len(), 2);
}

/// A heartbeat that enrolls a node is a registration: the node is in the store before the
/// answer, not a write-behind interval later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_enrolled_by_a_heartbeat_survives_a_kill_9_right_after_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let client = client();
    // The longest write-behind interval: a node written behind would be lost by the kill.
    let mut controller = ControllerProcess::start_in(dir.path(), &["--flush-interval", "600ms"]);
    for id in ["hb-1", "hb-2", "hb-3"] {
        heartbeat_ok(&client, &controller, &ppn_heartbeat(id, "127.0.0.1", 9204)).await;
    }
    controller.kill_9();
    let controller = ControllerProcess::start_in(dir.path(), &[]);
    let ids = node_ids(&client, &controller, Some(NodeStatusFilter::All)).await;
    assert_eq!(ids, ["hb-1", "hb-2", "hb-3"]);
}
