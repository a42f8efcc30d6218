//! desired.json through the local API and by hand: spawn/delete map onto it, a refused document
//! sets reported.json's `message` (pointer and reason) while the last good one keeps running,
//! and a readable one clears it.

use std::time::Duration;

use crate::support::agent_harness::{spawn_body, AgentProcess};
use crate::support::free_port;
use fleetwire_types::{HostDesiredState, InstanceState, VmRecord, VmState};
use reqwest::Method;
use serde_json::json;

fn agent() -> AgentProcess {
    AgentProcess::start(&format!("http://127.0.0.1:{}", free_port()), &[])
}

fn desired_on_disk(agent: &AgentProcess) -> HostDesiredState {
    let bytes = std::fs::read(agent.state_dir.join("desired.json")).unwrap();
    fleetwire_types::read_strict::<HostDesiredState>(&bytes).expect("desired.json stays valid")
}

#[test]
fn spawn_list_and_delete_go_through_desired_json() {
    let agent = agent();
    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&spawn_body("vm-a", &["sleep", "600"])),
    );
    assert_eq!(status, 200, "{body}");
    let record: VmRecord = fleetwire_types::read_value_strict(&body).expect("a VmRecord");
    assert_eq!(record.vm_id.as_str(), "vm-a");
    assert_eq!(record.state, VmState::Running);
    assert_eq!(record.ram_alloc_mb, 64);

    let doc = desired_on_disk(&agent);
    assert_eq!(doc.instances.len(), 1);
    assert_eq!(doc.instances[0].vm_id.as_ref().unwrap().as_str(), "vm-a");
    assert_eq!(doc.instances[0].vm_type.as_ref().unwrap().as_str(), "test");
    assert!(doc.generation.unwrap() >= 1);

    let served: HostDesiredState = agent.get("/v1/desired");
    assert_eq!(served, doc);
    let health: fleetwire_types::Health = agent.get("/healthz");
    assert_eq!(health.status, fleetwire_types::HealthStatus::Ok);

    let listed: Vec<VmRecord> = agent.get("/v1/vms");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].vm_id.as_str(), "vm-a");

    // The same id again is a conflict; a body that is not a CreateVmRequest is refused.
    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&spawn_body("vm-a", &["true"])),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "conflict");
    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&json!({"vm_type": "x", "ram_mb": 0, "vcpu_count": 1})),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid_document");
    assert!(
        body["violations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["instance_path"] == "/ram_mb"),
        "{body}"
    );

    let (status, _) = agent.send(Method::DELETE, "/v1/vms/vm-a", None);
    assert_eq!(status, 204);
    assert!(desired_on_disk(&agent).instances.is_empty());
    agent.wait_reported("the instance to be gone", Duration::from_secs(10), |r| {
        r.instances.is_empty().then_some(())
    });
    let (status, body) = agent.send(Method::DELETE, "/v1/vms/vm-a", None);
    assert_eq!(status, 404);
    assert_eq!(body["code"], "not_found");
    let (status, body) = agent.send(Method::GET, "/v1/nope", None);
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
}

#[test]
fn a_refused_hand_edit_sets_message_and_a_good_one_clears_it() {
    let agent = agent();
    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&spawn_body("keeper", &["sleep", "600"])),
    );
    assert_eq!(status, 200, "{body}");
    let path = agent.state_dir.join("desired.json");
    let good = std::fs::read(&path).unwrap();

    // Not a desired-state document: a command must not be empty.
    let mut bad: serde_json::Value = serde_json::from_slice(&good).unwrap();
    bad["instances"][0]["command"] = json!([]);
    std::fs::write(&path, serde_json::to_vec(&bad).unwrap()).unwrap();
    let r = agent.wait_reported("the refusal", Duration::from_secs(5), |r| {
        r.message.clone().map(|m| (m, r.clone()))
    });
    let (message, report) = r;
    assert!(
        message.contains("/instances/0/command"),
        "{}",
        message.as_str()
    );
    assert!(message.contains("minItems"), "{}", message.as_str());
    assert!(message.chars().count() <= 512);
    // It keeps running what it ran.
    assert_eq!(report.instances[0].state, InstanceState::Running);
    assert_eq!(report.instances[0].app_id.as_str(), "keeper");

    // Not JSON at all.
    std::fs::write(&path, b"{\"hostId\": \"node-1\", ").unwrap();
    agent.wait_reported("the JSON refusal", Duration::from_secs(5), |r| {
        r.message
            .as_ref()
            .filter(|m| m.contains("not a JSON document"))
            .map(|_| ())
    });

    // For another host.
    let mut other: serde_json::Value = serde_json::from_slice(&good).unwrap();
    other["hostId"] = json!("node-2");
    std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
    agent.wait_reported("the host refusal", Duration::from_secs(5), |r| {
        r.message
            .as_ref()
            .filter(|m| m.contains("/hostId") && m.contains("node-2"))
            .map(|_| ())
    });

    // A readable one is taken up and clears the message: here, one that stops the instance.
    let mut stop: serde_json::Value = serde_json::from_slice(&good).unwrap();
    stop["instances"][0]["desiredState"] = json!("stopped");
    std::fs::write(&path, serde_json::to_vec(&stop).unwrap()).unwrap();
    agent.wait_reported("the good document", Duration::from_secs(10), |r| {
        (r.message.is_none() && r.instances[0].state == InstanceState::Stopped).then_some(())
    });
}

#[test]
fn a_refused_put_sets_message_and_a_good_put_clears_it() {
    let agent = agent();
    let bad = json!({"hostId": "node-1", "instances": [{"appId": "a", "deploymentId": "d",
        "desiredState": "sideways", "command": ["true"],
        "resources": {"vcpuCount": 1, "memoryMib": 16, "diskMib": 0}}]});
    let (status, body) = agent.send(Method::PUT, "/v1/desired", Some(&bad));
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["violations"][0]["instance_path"],
        "/instances/0/desiredState"
    );
    let message = agent.wait_reported("the refusal", Duration::from_secs(5), |r| r.message.clone());
    assert!(message.contains("PUT /v1/desired"), "{}", message.as_str());
    assert!(
        message.contains("/instances/0/desiredState"),
        "{}",
        message.as_str()
    );

    // Duplicate app ids are refused too, with the pointer of the second.
    let dup_instance = json!({"appId": "a", "deploymentId": "d", "desiredState": "stopped",
        "command": ["true"], "resources": {"vcpuCount": 1, "memoryMib": 16, "diskMib": 0}});
    let dup = json!({"hostId": "node-1", "instances": [dup_instance.clone(), dup_instance]});
    let (status, body) = agent.send(Method::PUT, "/v1/desired", Some(&dup));
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["violations"][0]["instance_path"], "/instances/1/appId");

    let good = json!({"hostId": "node-1", "generation": 7, "instances": []});
    let (status, body) = agent.send(Method::PUT, "/v1/desired", Some(&good));
    assert_eq!(status, 200, "{body}");
    agent.wait_reported("the message to clear", Duration::from_secs(5), |r| {
        r.message.is_none().then_some(())
    });
    assert_eq!(desired_on_disk(&agent).generation, Some(7));
}

#[test]
fn an_instance_needs_something_to_run_and_an_image_needs_network() {
    let agent = agent();
    let resources = json!({"vcpuCount": 1, "memoryMib": 16, "diskMib": 0});
    let nothing = json!({"hostId": "node-1", "instances": [{"appId": "a", "deploymentId": "d",
        "desiredState": "running", "resources": resources}]});
    let (status, body) = agent.send(Method::PUT, "/v1/desired", Some(&nothing));
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["violations"][0]["instance_path"], "/instances/0",
        "{body}"
    );
    assert_eq!(body["violations"][0]["keyword"], "commandOrImage", "{body}");

    let offline = json!({"hostId": "node-1", "instances": [{"appId": "a", "deploymentId": "d",
        "desiredState": "running", "image": "alpine:3.20", "resources": resources}]});
    let (status, body) = agent.send(Method::PUT, "/v1/desired", Some(&offline));
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["violations"][0]["instance_path"], "/instances/0/network",
        "{body}"
    );
    assert!(
        body["violations"][0]["message"]
            .as_str()
            .unwrap()
            .contains("network to true"),
        "{body}"
    );

    // An image on a host whose runtime runs commands is taken (the document is valid) and
    // fails there with the reason, instead of being dropped.
    let mut online = offline.clone();
    online["instances"][0]["network"] = json!(true);
    let (status, body) = agent.send(Method::PUT, "/v1/desired", Some(&online));
    assert_eq!(status, 200, "{body}");
    agent.wait_reported(
        "the image-only instance to fail",
        Duration::from_secs(10),
        |r| {
            r.instances
                .iter()
                .find(|i| {
                    i.state == InstanceState::Failed
                        && i.message.as_ref().is_some_and(|m| m.contains("not images"))
                })
                .map(|_| ())
        },
    );
}

/// An image reference shaped to make a backtracking matcher try every split of a long name
/// component (a hang the fuzzer found, tests/fuzz/crashes/desired_intake/): refused with its
/// pointer in the time any bad document takes, and the same component in a valid reference
/// is taken. With the pattern as it was, the refusal never came.
#[test]
fn an_image_reference_built_to_backtrack_is_refused_like_any_other() {
    let agent = agent();
    let resources = json!({"vcpuCount": 1, "memoryMib": 16, "diskMib": 0});
    let name = format!("ghcr.io/ac{}e/web", "m".repeat(60));
    let with_image = |image: String| {
        json!({"hostId": "node-1", "instances": [{"appId": "a", "deploymentId": "d",
            "desiredState": "stopped", "image": image, "network": true, "resources": resources}]})
    };
    let (status, body) = agent.send(
        Method::PUT,
        "/v1/desired",
        Some(&with_image(format!("{name}:1.4.:"))),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["violations"][0]["instance_path"], "/instances/0/image",
        "{body}"
    );
    let (status, body) = agent.send(
        Method::PUT,
        "/v1/desired",
        Some(&with_image(format!("{name}:1.4"))),
    );
    assert_eq!(status, 200, "{body}");
}
