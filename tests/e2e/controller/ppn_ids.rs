//! The ids PPN fleets use, through the real `fleetwire controller`: node ids that are DNS
//! names, VM and tenant ids with dots, spaces and 75+ characters (a PPN agent names a VM
//! `{vm_type lowercased}-{unix seconds}`), a heartbeat whose bad `vms` entry is set aside
//! without losing the node, and the controller's default spawn port for nodes that do not
//! declare one (`--default-spawn-port` / `VM_HOST_SPAWN_PORT`).

use std::process::Stdio;
use std::time::Duration;

use crate::support::controller_harness::*;
use crate::support::{fleetwire, free_port, Running};
use fleetwire_types::{CreateVmRequest, NodeRecord, VmRecord};
use serde_json::{json, Value};

fn node_record(value: &Value) -> NodeRecord {
    fleetwire_types::read_value_strict(value)
        .unwrap_or_else(|r| panic!("not a NodeRecord: {r}\n{value}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_node_ids_and_wide_vm_and_tenant_ids_flow_through_the_controller() {
    let controller = ControllerProcess::start(&[]);
    let agent = AgentStandIn::start().await;
    let client = client();

    let node_id = "gpu-01.dc1.example.org";
    heartbeat_ok(
        &client,
        &controller,
        &ppn_heartbeat(node_id, "127.0.0.1", agent.port),
    )
    .await;
    let api = api_on(&client, &controller);
    let node = api.get_node(&node_id.parse().unwrap()).await.unwrap();
    assert_eq!(node.node_id.as_str(), node_id);
    // Case is kept and significant: another case is another (unknown) node.
    let other_case = api
        .get_node(&"GPU-01.dc1.example.org".parse().unwrap())
        .await;
    assert_eq!(
        other_case.unwrap_err().status().map(|s| s.as_u16()),
        Some(404)
    );

    // The longest DNS name is a node id; one character more is refused with its pointer.
    let longest = format!("a{}", ".b".repeat(126));
    assert_eq!(longest.len(), 253);
    let named = |id: &str| {
        let mut body = ppn_body(id, "127.0.0.2");
        body["hostname"] = json!("h");
        body
    };
    heartbeat_ok(&client, &controller, &named(&longest)).await;
    let (status, error) = post_json(
        &client,
        &controller.url("/v1/nodes/heartbeat"),
        &named(&format!("{longest}c")),
    )
    .await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["violations"][0]["instance_path"], "/node_id");

    // A VM id as a PPN agent makes it from a long vm_type with dots and spaces (75+
    // characters), for a tenant with a dot, on the dotted node.
    let vm_type = format!("GPU.Large {}", "x".repeat(54));
    let vm_id = format!("{}-1764600000", vm_type.to_lowercase());
    assert!(vm_id.chars().count() >= 75);
    let request: CreateVmRequest = typed(
        &json!({"vm_type": vm_type, "ram_mb": 256, "vcpu_count": 1, "vm_id": vm_id,
                "tenant_id": "acme.corp", "preferred_node": node_id}),
    );
    let created: VmRecord = api.create_vm(&request).await.unwrap().into_inner();
    assert_eq!(created.vm_id.as_str(), vm_id);
    assert_eq!(
        created.node_id.as_deref().map(|n| n.as_str()),
        Some(node_id)
    );
    assert_eq!(agent.spawned()[0]["vm_id"], vm_id.as_str());

    let listed = api
        .list_vms(Some(&"acme.corp".parse().unwrap()))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{:?}", listed.value);
    // The client sends the id as one percent-encoded path segment.
    let one = api.get_vm(&created.vm_id).await.unwrap();
    assert_eq!(one.vm_id.as_str(), vm_id);

    // Deleted through the percent-encoded path; the agent receives the id as it is.
    let deleted = api.delete_vm(&created.vm_id).await.unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    assert_eq!(agent.deleted(), vec![vm_id.clone()]);

    // Control characters and ids past 128 characters are still refused, with pointers.
    for (bad, pointer) in [
        (
            json!({"vm_type": "t", "ram_mb": 1, "vcpu_count": 1, "vm_id": "a\nb"}),
            "/vm_id",
        ),
        (
            json!({"vm_type": "t", "ram_mb": 1, "vcpu_count": 1, "vm_id": "v".repeat(129)}),
            "/vm_id",
        ),
        (
            json!({"vm_type": "t", "ram_mb": 1, "vcpu_count": 1, "tenant_id": "t\u{7}"}),
            "/tenant_id",
        ),
    ] {
        let (status, error) = post_json(&client, &controller.url("/v1/vms"), &bad).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["violations"][0]["instance_path"], pointer, "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_vms_entry_is_set_aside_and_the_node_is_kept() {
    let controller = ControllerProcess::start(&[]);
    let client = client();
    let good = json!({"vm_id": "web.1-1764600000", "vm_type": "Web.1", "state": "Running",
                      "ram_alloc_mb": 512, "vcpu_count": 1, "started_at": null});
    let too_long = json!({"vm_id": "v".repeat(300), "vm_type": "t", "state": "Running",
                          "ram_alloc_mb": 512, "vcpu_count": 1});
    let mut body = ppn_body("ppn.node-1", "127.0.0.1");
    body["vms"] = json!([good, too_long]);
    // Raw: the typed client cannot send an entry its schema refuses.
    let heartbeat_url = controller.url("/v1/nodes/heartbeat");
    let (status, answer) = post_json(&client, &heartbeat_url, &body).await;
    assert_eq!(status, 200, "{answer}");

    let (_, node) = get_json(&client, &controller.url("/v1/nodes/ppn.node-1")).await;
    let record = node_record(&node);
    assert_eq!(record.status.to_string(), "ready");
    assert_eq!(record.vm_count, 1);
    let rejected_vms = record.rejected_vms.expect("entries set aside");
    assert_eq!(rejected_vms.len(), 1, "{node}");
    let rejected = &rejected_vms[0];
    assert_eq!(rejected.index, 1);
    assert_eq!(rejected.instance_path.as_str(), "/vms/1/vm_id");
    assert_eq!(rejected.vm_id.as_deref().map(|v| v.len()), Some(128));
    assert!(
        rejected.reason.contains("/vms/1/vm_id"),
        "{}",
        *rejected.reason
    );
    let (_, vms) = get_json(&client, &controller.url("/v1/vms")).await;
    assert_eq!(vms.as_array().unwrap().len(), 1);
    assert_eq!(vms[0]["vm_id"], "web.1-1764600000");
    let metrics = metrics_text(&client, &controller).await;
    assert!(
        metrics.contains("fleetwire_controller_heartbeat_vm_entries_rejected_total 1"),
        "{metrics}"
    );

    // The next clean heartbeat replaces the list: nothing set aside any more.
    body["vms"] = json!([]);
    heartbeat_ok(&client, &controller, &body).await;
    let (_, node) = get_json(&client, &controller.url("/v1/nodes/ppn.node-1")).await;
    assert!(node_record(&node).rejected_vms.is_none(), "{node}");

    // A problem outside vms still refuses the heartbeat whole.
    body["vms"] = json!([too_long]);
    body["ram_total_mb"] = json!(-1);
    let (status, error) = post_json(&client, &controller.url("/v1/nodes/heartbeat"), &body).await;
    assert_eq!(status, 400, "{error}");
}

/// Starts `fleetwire controller` with `env` added; returns it and its port.
async fn controller_with_env(dir: &std::path::Path, env: &[(&str, &str)]) -> (Running, u16) {
    let port = free_port();
    let mut command = fleetwire();
    command
        .arg("controller")
        .arg("--plain-http")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--db")
        .arg(dir.join("controller.sqlite3"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        command.env(k, v);
    }
    let process = Running::spawn(&mut command);
    let client = client();
    let url = format!("http://127.0.0.1:{port}/healthz");
    eventually(
        "the controller to answer",
        Duration::from_secs(20),
        || async {
            let answer = client.get(&url).send().await.ok()?;
            answer.status().is_success().then_some(())
        },
    )
    .await;
    (process, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_declare_no_spawn_port_are_called_on_the_default_spawn_port() {
    let client = client();

    // No setting: PPN's own default, 9220.
    let controller = ControllerProcess::start(&[]);
    heartbeat_ok(&client, &controller, &ppn_body("ppn-1", "127.0.0.1")).await;
    let (_, node) = get_json(&client, &controller.url("/v1/nodes/ppn-1")).await;
    assert_eq!(node["spawn_port"], 9220, "{node}");
    // A node that says which port wins over the default.
    heartbeat_ok(
        &client,
        &controller,
        &ppn_heartbeat("fw-1", "127.0.0.1", 9301),
    )
    .await;
    let (_, node) = get_json(&client, &controller.url("/v1/nodes/fw-1")).await;
    assert_eq!(node["spawn_port"], 9301);
    drop(controller);

    // The flag: spawns for a PPN node go to that port.
    let agent = AgentStandIn::start().await;
    let port = agent.port.to_string();
    let controller = ControllerProcess::start(&["--default-spawn-port", &port]);
    heartbeat_ok(&client, &controller, &ppn_body("ppn-2", "127.0.0.1")).await;
    let (status, created) = post_json(
        &client,
        &controller.url("/v1/vms"),
        &json!({"vm_type": "small", "ram_mb": 256, "vcpu_count": 1}),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(agent.spawned().len(), 1);
    drop(controller);

    // The environment variable, PPN's own name for the setting.
    let dir = tempfile::tempdir().unwrap();
    let (_process, port) = controller_with_env(dir.path(), &[("VM_HOST_SPAWN_PORT", "9555")]).await;
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let (status, _) = post_json(
        &client,
        &url("/v1/nodes/heartbeat"),
        &ppn_body("ppn-3", "127.0.0.1"),
    )
    .await;
    assert_eq!(status, 200);
    let (_, node) = get_json(&client, &url("/v1/nodes/ppn-3")).await;
    assert_eq!(node["spawn_port"], 9555, "{node}");

    // A port that is no port stops the controller at start-up, saying why.
    let output = fleetwire()
        .args(["controller", "--default-spawn-port", "0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--default-spawn-port"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
