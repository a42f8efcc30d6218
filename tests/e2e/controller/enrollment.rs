//! Seed 003's enrollment procedure against the real controller: a PPN agent's heartbeat body,
//! every second, with no registration call; the node is listed within one interval; silent
//! past the staleness limit it leaves `GET /v1/nodes` but `GET /v1/nodes/{id}` still answers,
//! as "unreachable", and the next heartbeat brings it back. (`--stale-after 2s` instead of the
//! default 30 s keeps the test short; a unit test covers the 30 s default.)

use std::time::Duration;

use crate::support::controller_harness::*;
use fleetwire_types::{ApiErrorCode, FleetStatus, NodeId, NodeStatusFilter};

fn fleet_ids(fleet: &FleetStatus) -> Vec<String> {
    fleet
        .nodes
        .iter()
        .map(|n| n.node_id.as_str().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ppn_agent_enrolls_by_heartbeat_goes_unreachable_and_comes_back() {
    let controller =
        ControllerProcess::start(&["--stale-after", "2s", "--sweep-interval", "200ms"]);
    let client = client();
    let body = ppn_body("ppn-node-1", "127.0.0.1");

    // The agent: a heartbeat every second, as `VM_HEARTBEAT_INTERVAL_S=1` would.
    let agent = {
        let (client, url, body) = (
            client.clone(),
            controller.url("/v1/nodes/heartbeat"),
            body.clone(),
        );
        tokio::spawn(async move {
            loop {
                let response = client.post(&url).json(&body).send().await.unwrap();
                assert_eq!(response.status().as_u16(), 200);
                assert!(
                    response.text().await.unwrap().is_empty(),
                    "a PPN controller answers an empty body"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    // Within one interval the node is listed, with the PPN record's fields.
    let node = eventually("the node to be listed", Duration::from_secs(1), || async {
        let (status, node) = get_json(&client, &controller.url("/v1/nodes/ppn-node-1")).await;
        (status == 200).then_some(node)
    })
    .await;
    for field in [
        "node_id",
        "hostname",
        "wg_ip",
        "ram_available_mb",
        "vm_count",
        "kvm_available",
        "reserved",
        "last_heartbeat",
    ] {
        assert!(node.get(field).is_some(), "{field} missing from {node}");
    }
    assert_eq!(node["ram_available_mb"], 12288);
    assert_eq!(node["status"], "ready");
    assert_eq!(
        node["spawn_port"], 9220,
        "a PPN agent says no port: the controller's --default-spawn-port"
    );
    // PPN host agents run QEMU: a node enrolled by its heartbeat is a qemu node.
    assert_eq!(node["runtime"], "qemu");
    assert_eq!(node_ids(&client, &controller, None).await, ["ppn-node-1"]);
    let fleet = fleet_status(&client, &controller).await;
    assert_eq!(fleet_ids(&fleet), ["ppn-node-1"]);
    assert_eq!(fleet.counts.as_ref().map(|c| c.ready), Some(1));

    // Stop the agent. Past the staleness limit the node leaves the default listing...
    agent.abort();
    let silent_since = std::time::Instant::now();
    eventually(
        "the node to leave GET /v1/nodes",
        Duration::from_secs(6),
        || async {
            let listed = node_ids(&client, &controller, None).await;
            listed.is_empty().then_some(())
        },
    )
    .await;
    assert!(
        silent_since.elapsed() >= Duration::from_secs(1),
        "not before the limit"
    );
    // ...but it is not forgotten: it answers as unreachable, with its last heartbeat.
    let (status, node) = get_json(&client, &controller.url("/v1/nodes/ppn-node-1")).await;
    assert_eq!(status, 200);
    assert_eq!(node["status"], "unreachable");
    assert!(node["last_heartbeat"].as_str().unwrap().starts_with("20"));
    let unreachable = Some(NodeStatusFilter::Unreachable);
    assert_eq!(
        node_ids(&client, &controller, unreachable).await,
        ["ppn-node-1"]
    );
    let all = Some(NodeStatusFilter::All);
    assert_eq!(node_ids(&client, &controller, all).await, ["ppn-node-1"]);
    // The fleet view drops it as PPN's controller does (docs/controller.md "Heartbeats and node
    // status"), yet still counts it.
    let fleet = fleet_status(&client, &controller).await;
    assert_eq!(fleet.counts.as_ref().map(|c| c.unreachable), Some(1));
    assert!(fleet.nodes.is_empty());
    // Never enrolled is told apart from went silent.
    let (status, _) = get_json(&client, &controller.url("/v1/nodes/never-enrolled")).await;
    assert_eq!(status, 404);

    // Re-enrolling is the same procedure: the next heartbeat.
    heartbeat_ok(&client, &controller, &body).await;
    let node = node_record(&client, &controller, "ppn-node-1").await;
    assert_eq!(node["status"], "ready");
    let fleet = fleet_status(&client, &controller).await;
    assert_eq!(fleet_ids(&fleet), ["ppn-node-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_is_the_receive_time_not_the_nodes_clock() {
    let controller =
        ControllerProcess::start(&["--stale-after", "2s", "--sweep-interval", "200ms"]);
    let client = client();
    // A node whose clock is a year behind is still alive.
    let mut body = ppn_body("skewed", "127.0.0.1");
    body["timestamp_utc"] = "2025-01-01T00:00:00Z".into();
    // A node-sent engine_version is ignored (only the controller's probe sets it).
    body["engine_version"] = "9.9.9".into();
    let (status, _) = post_json(&client, &controller.url("/v1/nodes/heartbeat"), &body).await;
    assert_eq!(status, 200);
    let (_, node) = get_json(&client, &controller.url("/v1/nodes/skewed")).await;
    assert_eq!(node["status"], "ready");
    assert!(node.get("engine_version").is_none(), "{node}");
    assert!(node["last_heartbeat"].as_str().unwrap() > "2026-01-01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unenrolled_and_long_silent_nodes_are_forgotten() {
    let controller = ControllerProcess::start(&[
        "--stale-after",
        "1s",
        "--forget-after",
        "2s",
        "--sweep-interval",
        "200ms",
    ]);
    let client = client();
    for id in ["gone-1", "gone-2"] {
        heartbeat_ok(&client, &controller, &ppn_heartbeat(id, "127.0.0.1", 9204)).await;
    }
    let api = api_on(&client, &controller);
    let gone: NodeId = "gone-1".parse().unwrap();
    let deleted = api.delete_node(&gone).await.unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    let (status, _) = get_json(&client, &controller.url("/v1/nodes/gone-1")).await;
    assert_eq!(status, 404);
    let again = api.delete_node(&gone).await.unwrap_err();
    assert_eq!(again.status().map(|s| s.as_u16()), Some(404), "{again}");
    assert_eq!(
        again.api_error().map(|e| e.code),
        Some(ApiErrorCode::NotFound)
    );
    eventually(
        "the silent node to be forgotten",
        Duration::from_secs(8),
        || async {
            let (status, _) = get_json(&client, &controller.url("/v1/nodes/gone-2")).await;
            (status == 404).then_some(())
        },
    )
    .await;
}
