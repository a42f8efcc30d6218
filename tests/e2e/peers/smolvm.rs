//! End to end against the REAL smolvm 1.9.2 in plain mode (built by `../shared/peers/build.sh`):
//! the real controller, the real agent with the smolvm runtime, and `smolvm serve` run as
//! uid 65534 (`crate::support::real_smolvm`). These hosts cannot boot a machine (no libkrun), so
//! smolvm answers every start with 500: that failure is what a placement must report.
//!
//! Skipped by the README's `cargo test --workspace`; `.ci/run` runs them with `--ignored`.

use std::time::Duration;

use crate::support::agent_harness::AgentProcess;
use crate::support::controller_harness::ControllerProcess;
use crate::support::real_smolvm::RealSmolvm;
use crate::support::wait_for;
use fleetwire_types::InstanceState;
use serde_json::{json, Value};

const NODE: &str = "node-1";

fn get(url: &str) -> (u16, Value) {
    crate::support::install_crypto_provider();
    let response = reqwest::blocking::get(url).unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    let text = response.text().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn send(method: reqwest::Method, url: &str, body: Option<&Value>) -> (u16, Value) {
    crate::support::install_crypto_provider();
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut request = client.request(method.clone(), url);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request
        .send()
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status().as_u16();
    let text = response.text().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// POSTs to smolvm's start route answered with 500, from its own `/metrics`.
fn failed_starts(smolvm: &RealSmolvm) -> u64 {
    smolvm
        .metrics()
        .lines()
        .filter(|l| {
            l.starts_with("smolvm_api_requests_total")
                && l.contains("start")
                && l.contains("\"500\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn vm(vm_id: &str, cpus: u64, ram_mb: u64, disk_gb: u64) -> Value {
    json!({"vm_type": "alpine", "vm_id": vm_id, "ram_mb": ram_mb, "vcpu_count": cpus,
           "disk_gb": disk_gb, "image": "alpine:3.20", "network": true})
}

#[test]
#[ignore = "needs the real peers (../shared/peers): cargo test -p fleetwire --test e2e -- --ignored"]
fn placements_on_the_real_smolvm_create_report_failed_starts_delete_and_prune() {
    let mut smolvm = RealSmolvm::start();
    // The disk cordon is not under test: this shared host's disk may run low.
    let controller = ControllerProcess::start(&[
        "--probe-interval",
        "1s",
        "--disk-cordon-below",
        "0",
        "--disk-uncordon-above",
        "1",
    ]);
    let agent = AgentProcess::start(
        &controller.url(""),
        &[
            ("VM_RUNTIME", "smolvm"),
            ("VM_RUNTIME_ADDRESS", smolvm.url().as_str()),
            ("VM_NODE_ID", NODE),
        ],
    );
    let node = || get(&controller.url(&format!("/v1/nodes/{NODE}"))).1;

    // The node record: smolvm's boot id and figures from /capacity, its engine version from
    // /health (the controller probes the address the node reported, 127.0.0.1 here).
    let capacity = smolvm.get("/capacity");
    let boot_id = capacity["boot_id"].as_str().unwrap().to_string();
    let record = wait_for(
        "the node record with smolvm's boot id and engine version",
        Duration::from_secs(20),
        || {
            let n = node();
            (n["boot_id"] == boot_id.as_str()
                && n["engine_version"] == "1.9.2"
                && n["status"] == "ready")
                .then_some(n)
        },
    );
    assert_eq!(record["runtime"], "smolvm");
    assert_eq!(record["memory_usage_mb"], capacity["used_memory_mb"]);
    assert_eq!(record["cpu_usage"], capacity["used_cpus"]);
    assert_eq!(smolvm.get("/health")["version"], "1.9.2");

    // A placement: the machine appears in smolvm's own listing with the requested sizes; its
    // start fails here, and the placement's answer says so with smolvm's message.
    let (status, placed) = send(
        reqwest::Method::POST,
        &controller.url("/v1/vms"),
        Some(&vm("real-1", 2, 512, 3)),
    );
    assert_eq!(status, 200, "{placed}");
    assert_eq!(placed["node_id"], NODE);
    assert_eq!(placed["state"], "Error", "{placed}");
    let message = placed["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("failed to start machine") && message.contains("500"),
        "{placed}"
    );
    let machine = smolvm.machines()["real-1"].clone();
    assert_eq!(machine["cpus"], 2, "{machine}");
    assert_eq!(machine["memoryMb"], 512, "{machine}");
    assert_eq!(machine["storageGb"], 3, "{machine}");
    assert_eq!(machine["overlayGb"], 10, "{machine}");
    assert_eq!(machine["network"], true, "{machine}");
    assert_eq!(machine["state"], "created", "{machine}");

    // reported.json says the same, and the controller's record carries it from the heartbeat.
    let instance = agent.wait_reported(
        "real-1 failed in reported.json",
        Duration::from_secs(10),
        |r| {
            r.instances
                .iter()
                .find(|i| i.app_id.as_str() == "real-1" && i.state == InstanceState::Failed)
                .cloned()
        },
    );
    let text = serde_json::to_value(&instance.message).unwrap().to_string();
    assert!(text.contains("failed to start machine"), "{text}");
    wait_for(
        "the controller's record of the failure",
        Duration::from_secs(10),
        || {
            let (_, vm) = get(&controller.url("/v1/vms/real-1"));
            (vm["state"] == "Error"
                && vm["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("failed to start machine")))
            .then_some(())
        },
    );

    // Retried with backoff (200 ms doubling, 5 retries), never in a tight loop: smolvm's own
    // count of failed starts stays small, and stops at the policy's budget.
    std::thread::sleep(Duration::from_secs(3));
    let early = failed_starts(&smolvm);
    assert!((2..=6).contains(&early), "{early} failed starts in ~3 s");
    std::thread::sleep(Duration::from_secs(5));
    let late = failed_starts(&smolvm);
    assert_eq!(late, 6, "one start and five retries, then no more");
    let instance = agent
        .reported()
        .instances
        .into_iter()
        .find(|i| i.app_id.as_str() == "real-1")
        .unwrap();
    let text = serde_json::to_value(&instance.message).unwrap().to_string();
    assert!(text.contains("no more attempts"), "{text}");

    // A serve restart (new boot id) prunes what the node no longer reports: real-2 is taken
    // off the node behind the controller's back, so only the new boot id removes its record.
    let (status, placed) = send(
        reqwest::Method::POST,
        &controller.url("/v1/vms"),
        Some(&vm("real-2", 1, 256, 1)),
    );
    assert_eq!(status, 200, "{placed}");
    assert!(smolvm.machines().contains_key("real-2"));
    let (status, body) = send(reqwest::Method::DELETE, &agent.url("/v1/vms/real-2"), None);
    assert_eq!(status, 204, "{body}");
    wait_for("real-2 gone from smolvm", Duration::from_secs(10), || {
        (!smolvm.machines().contains_key("real-2")).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        get(&controller.url("/v1/vms/real-2")).0,
        200,
        "kept within its grace"
    );
    smolvm.restart();
    let new_boot_id = smolvm.get("/capacity")["boot_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_boot_id, boot_id);
    wait_for(
        "the node record's new boot id",
        Duration::from_secs(20),
        || (node()["boot_id"] == new_boot_id.as_str()).then_some(()),
    );
    assert_eq!(get(&controller.url("/v1/vms/real-2")).0, 404, "pruned");
    assert_eq!(
        get(&controller.url("/v1/vms/real-1")).0,
        200,
        "still reported: kept"
    );
    assert!(
        smolvm.machines().contains_key("real-1"),
        "kept in smolvm's database"
    );

    // Deletion through the controller removes the machine from smolvm.
    let (status, body) = send(
        reqwest::Method::DELETE,
        &controller.url("/v1/vms/real-1"),
        None,
    );
    assert!(status == 200 || status == 204, "{status} {body}");
    wait_for("real-1 gone from smolvm", Duration::from_secs(10), || {
        (!smolvm.machines().contains_key("real-1")).then_some(())
    });
    assert_eq!(get(&controller.url("/v1/vms/real-1")).0, 404);
}

#[test]
#[ignore = "needs the real peers (../shared/peers): cargo test -p fleetwire --test e2e -- --ignored"]
fn the_real_smolvm_refuses_what_fleetwire_now_refuses_first() {
    // The two create rules fleetwire checks at intake are smolvm's own: checked here against
    // the program, so the intake never drifts from it.
    let smolvm = RealSmolvm::start();
    let url = format!("{}/api/v1/machines", smolvm.url());
    let (status, body) = send(
        reqwest::Method::POST,
        &url,
        Some(&json!({"name": "probe1", "image": "alpine:3.20"})),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("no network"),
        "{body}"
    );
    assert_eq!(body["code"], "BAD_REQUEST");
    let (status, body) = send(
        reqwest::Method::POST,
        &url,
        Some(&json!({"name": "probe2", "cmd": ["/bin/true"]})),
    );
    assert_eq!(status, 400, "{body}");
    // What the driver sends is accepted, answered as a RuntimeMachine of our schema, and
    // listed in the object our schema describes. Answers our schemas describe whole carry no
    // field they do not define; a machine carries the ones fleetwire does not read (mounts,
    // gpu, ...), set aside by the reader.
    fn whole<T: fleetwire_types::WireDocument>(answer: &Value) {
        let accepted = fleetwire_types::read_value::<T>(answer).unwrap();
        assert!(accepted.unknown_fields.is_empty(), "{answer}");
    }
    let request = json!({"name": "probe3", "cpus": 1, "memoryMb": 256, "storageGb": 1,
                         "overlayGb": 10, "image": "alpine:3.20", "network": true});
    fleetwire_types::read_value_strict::<fleetwire_types::CreateMachineRequest>(&request).unwrap();
    let (status, body) = send(reqwest::Method::POST, &url, Some(&request));
    assert_eq!(status, 200, "{body}");
    let machine = fleetwire_types::read_value::<fleetwire_types::RuntimeMachine>(&body).unwrap();
    assert!(
        machine
            .unknown_fields
            .iter()
            .any(|p| p.as_str() == "/mounts"),
        "{body}"
    );
    let list = smolvm.get("/api/v1/machines");
    let listed = fleetwire_types::read_value::<fleetwire_types::RuntimeMachineList>(&list).unwrap();
    assert_eq!(listed.value.machines.len(), 1, "{list}");
    whole::<fleetwire_types::RuntimeCapacity>(&smolvm.get("/capacity"));
    whole::<fleetwire_types::RuntimeHealth>(&smolvm.get("/health"));
    let (status, body) = send(reqwest::Method::POST, &format!("{url}/probe3/start"), None);
    assert_eq!(status, 500, "{body}");
    whole::<fleetwire_types::RuntimeError>(&body);
    let (status, body) = send(reqwest::Method::DELETE, &format!("{url}/probe3"), None);
    assert_eq!(status, 200, "{body}");
    whole::<fleetwire_types::RuntimeDeleted>(&body);
    let (status, body) = send(reqwest::Method::DELETE, &format!("{url}/probe3"), None);
    assert_eq!(status, 404, "{body}");
    whole::<fleetwire_types::RuntimeError>(&body);
}
