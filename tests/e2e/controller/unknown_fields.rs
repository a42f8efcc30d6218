//! The unknown-field policy on a live controller (README "Unknown fields"): a peer document
//! with fields its schema does not define is taken, what the schema knows is kept, and each
//! unknown field is answered as a `Warning: 299` header and counted in
//! `fleetwire_controller_unknown_fields_total{document=...}`. Covers a heartbeat (served ahead of
//! the router), a tenant's `CreateVmRequest` (through the router's `Valid<T>`) and a node
//! agent's spawn answer (read by the controller's agent client).

use crate::support::controller_harness::*;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

fn warnings(response: &reqwest::Response) -> Vec<String> {
    response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

/// A node agent as a newer PPN agent might answer a spawn: one field fleetwire does not know.
async fn chatty_agent() -> u16 {
    async fn spawn(Json(request): Json<Value>) -> Json<Value> {
        Json(json!({
            "vm_id": request["vm_id"], "vm_type": request["vm_type"], "state": "Running",
            "ram_alloc_mb": request["ram_mb"], "vcpu_count": request["vcpu_count"],
            "started_at": "2026-11-30T09:31:00Z", "hypervisor": "firecracker"
        }))
    }
    let app = Router::new().route("/v1/spawn", post(spawn));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_are_set_aside_answered_as_warnings_and_counted() {
    let controller = ControllerProcess::start(&[]);
    let client = client();
    let agent_port = chatty_agent().await;

    // A heartbeat from a newer agent: a new top-level field and a new field in a VM record.
    let mut body = ppn_heartbeat("n1", "127.0.0.1", agent_port);
    body["gpu_model"] = json!("L4");
    body["vms"] = json!([{
        "vm_id": "web-1", "vm_type": "web", "state": "Running", "ram_alloc_mb": 512,
        "vcpu_count": 1, "balloon_mb": 128
    }]);
    for _ in 0..2 {
        let response = client
            .post(controller.url("/v1/nodes/heartbeat"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let mut got = warnings(&response);
        got.sort();
        assert_eq!(
            got,
            [
                "299 - \"unknown field /gpu_model\"",
                "299 - \"unknown field /vms/0/balloon_mb\"",
            ]
        );
    }
    // What the schema knows was taken.
    let (status, node) = get_json(&client, &controller.url("/v1/nodes/n1")).await;
    assert_eq!(status, 200, "{node}");
    assert_eq!(node["vm_count"], 1, "{node}");
    assert!(node.get("gpu_model").is_none());

    // A registration from a newer agent: registered, and warned about.
    let mut registration = registration("n2", agent_port, 10);
    registration["engine_version"] = json!("1.0.0");
    let response = client
        .post(controller.url("/v1/nodes/register"))
        .json(&registration)
        .send()
        .await
        .unwrap();
    let got = warnings(&response);
    let status = response.status().as_u16();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(got, ["299 - \"unknown field /engine_version\""]);
    assert_eq!(answer["node"]["node_id"], "n2", "{answer}");

    // A heartbeat the schema knows whole gets no warning.
    let response = client
        .post(controller.url("/v1/nodes/heartbeat"))
        .json(&ppn_heartbeat("n1", "127.0.0.1", agent_port))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(warnings(&response).is_empty());

    // A tenant's request with a field the schema does not define: placed, and warned about.
    let response = client
        .post(controller.url("/v1/vms"))
        .json(&json!({"vm_type": "web", "ram_mb": 256, "vcpu_count": 1, "gpu_profile": "mig-1g"}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let got = warnings(&response);
    let vm: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{vm}");
    assert_eq!(got, ["299 - \"unknown field /gpu_profile\""]);
    assert_eq!(vm["vm_type"], "web");

    // The strict refusal is still there for what the schema refuses outright.
    let (status, refused) = post_json(
        &client,
        &controller.url("/v1/vms"),
        &json!({"vm_type": "web", "ram_mb": 0, "vcpu_count": 1, "gpu_profile": "x"}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["violations"]
        .as_array()
        .unwrap()
        .iter()
        .all(|v| v["keyword"] != "additionalProperties"));

    let metrics = metrics_text(&client, &controller).await;
    for line in [
        "fleetwire_controller_unknown_fields_total{document=\"NodeHeartbeat\"} 4",
        // The rejected request's field was not set aside: the request was refused.
        "fleetwire_controller_unknown_fields_total{document=\"CreateVmRequest\"} 1",
        // The node agent's spawn answer carried `hypervisor`.
        "fleetwire_controller_unknown_fields_total{document=\"VmRecord\"} 1",
        "fleetwire_controller_unknown_fields_total{document=\"RegisterNodeRequest\"} 1",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
}

/// `node_id` enrolled on `controller` (mTLS): its HTTP client, presenting its certificate.
async fn enrolled(
    controller: &ControllerProcess,
    node_id: &str,
    spawn_port: u16,
) -> reqwest::Client {
    let (cert, key) = enroll(controller, node_id, spawn_port).await;
    tls_client(&controller.ca_pem(), Some((&cert, &key)))
}

/// The log lines unknown fields cost are charged to who sent them (issue 28): a node inventing
/// hundreds of field names uses up its own share, and another node's new field is still
/// logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_inventing_field_names_does_not_use_up_the_log_for_another() {
    let controller = ControllerProcess::start_secure(&[]);
    let chatty = enrolled(&controller, "chatty", 9).await;
    let quiet = enrolled(&controller, "quiet", 10).await;
    let mut invented = ppn_heartbeat("chatty", "127.0.0.1", 9);
    for i in 0..300 {
        invented[format!("inventedField{i}")] = json!(i);
    }
    let (status, answer) =
        post_json(&chatty, &controller.url("/v1/nodes/heartbeat"), &invented).await;
    assert_eq!(status, 200, "{answer}");
    let mut body = ppn_heartbeat("quiet", "127.0.0.1", 10);
    body["quietNodesNewField"] = json!(1);
    let (status, answer) = post_json(&quiet, &controller.url("/v1/nodes/heartbeat"), &body).await;
    assert_eq!(status, 200, "{answer}");
    eventually(
        "the quiet node's unknown field in the log",
        std::time::Duration::from_secs(10),
        || async {
            controller
                .log()
                .contains("quietNodesNewField")
                .then_some(())
        },
    )
    .await;
    let log = controller.log();
    let chatty_lines = log.matches("inventedField").count();
    assert!(
        (1..=64).contains(&chatty_lines),
        "the chatty node's fields took {chatty_lines} lines"
    );
    assert!(
        log.contains("node quiet"),
        "the line names the node it came from"
    );
}
