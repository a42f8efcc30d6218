//! The smolvm driver against a stand-in smolvm 1.9.2 (`crate::support::standin_smolvm`: the
//! runtime API's documents, nothing run): machines are created from an image with their sizes in
//! smolvm's camelCase fields, started by their own call, stopped and removed; a failed start is
//! reported on the spawn answer and in reported.json and retried with backoff; usage reaches
//! the meters, monotonic across VM restarts; the heartbeat forwards the runtime's boot id and
//! capacity (GPU hosts included); a 503 from `/capacity` self-cordons the node until it answers
//! again. The real smolvm is tested in `smolvm_real.rs`.

use std::time::{Duration, Instant};

use crate::support::agent_harness::AgentProcess;
use crate::support::standin_ppn_controller::StandinPpnController;
use crate::support::standin_smolvm::{StandinSmolvm, START_FAILURE};
use crate::support::wait_for;
use fleetwire_types::{CudaDevice, InstanceState, NodeHeartbeat};
use reqwest::Method;
use serde_json::json;

fn last_heartbeat(controller: &StandinPpnController, after: usize) -> Option<NodeHeartbeat> {
    let beats = controller.heartbeats();
    let raw = beats.get(after..)?.last()?;
    Some(fleetwire_types::read_value_strict(raw).expect("a valid NodeHeartbeat"))
}

fn image_body(vm_id: &str) -> serde_json::Value {
    json!({
        "vm_type": "test",
        "ram_mb": 640,
        "vcpu_count": 2,
        "disk_gb": 3,
        "vm_id": vm_id,
        "image": "alpine:3.20",
        "network": true,
        "command": ["/bin/app", "--serve"],
    })
}

fn smolvm_agent(runtime: &StandinSmolvm) -> (StandinPpnController, AgentProcess) {
    let port = crate::support::free_port();
    let controller = StandinPpnController::start(0, port);
    let runtime_url = runtime.url();
    let agent = AgentProcess::start(
        &controller.url(),
        &[
            ("VM_RUNTIME", "smolvm"),
            ("VM_RUNTIME_ADDRESS", runtime_url.as_str()),
        ],
    );
    (controller, agent)
}

#[test]
fn the_smolvm_driver_drives_the_runtime_api_and_self_cordons_on_503() {
    let runtime = StandinSmolvm::start();
    let (controller, agent) = smolvm_agent(&runtime);

    let (status, body) = agent.send(Method::POST, "/v1/spawn", Some(&image_body("m1")));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "Running");
    assert_eq!(body["image"], "alpine:3.20");
    // Created with smolvm's own field names, then started by its own call.
    let sent = runtime.requests()["m1"].clone();
    assert_eq!(
        sent,
        json!({"name": "m1", "cpus": 2, "memoryMb": 640, "storageGb": 3, "overlayGb": 10,
               "image": "alpine:3.20", "network": true, "cmd": ["/bin/app", "--serve"]})
    );
    let calls = runtime.calls();
    let created = calls.iter().position(|c| c == "POST /api/v1/machines m1");
    let started = calls.iter().position(|c| c == "start m1");
    assert!(created.is_some() && started > created, "{calls:?}");
    let machine = runtime.machines()["m1"].clone();
    assert_eq!(machine.state, "running");
    assert_eq!((machine.cpus, machine.memory_mb), (2, 640));
    agent.wait_reported("m1 running", Duration::from_secs(10), |r| {
        r.instances
            .iter()
            .find(|i| i.app_id.as_str() == "m1" && i.state == InstanceState::Running)
            .map(|_| ())
    });

    // A command without an image: smolvm cannot run it, so this node refuses it.
    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&json!({"vm_type": "t", "ram_mb": 64, "vcpu_count": 1, "vm_id": "c1", "command": ["/bin/true"]})),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("smolvm"),
        "{body}"
    );
    // An image without network can never be pulled: refused at intake, with its pointer.
    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&json!({"vm_type": "t", "ram_mb": 64, "vcpu_count": 1, "vm_id": "n1", "image": "alpine:3.20"})),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["violations"][0]["instance_path"], "/network", "{body}");
    assert!(!runtime.machines().contains_key("c1"));
    assert!(!runtime.machines().contains_key("n1"));

    // The heartbeat forwards what the runtime says, CUDA devices (camelCase) included.
    runtime.set_cuda_devices(vec![CudaDevice {
        ordinal: 0,
        uuid: "GPU-5f0e1a2b".into(),
        name: "NVIDIA L4".into(),
        utilization_percent: 12.5,
        memory_used_mib: 1024,
        memory_free_mib: 21_504,
        memory_total_mib: 22_528,
    }]);
    let hb = wait_for(
        "a heartbeat with the runtime's figures and GPU",
        Duration::from_secs(10),
        || {
            last_heartbeat(&controller, 0).filter(|h| {
                h.vms.len() == 1
                    && h.runtime_capacity
                        .as_ref()
                        .is_some_and(|c| c.allocated_memory_mb > 0 && c.cuda_devices.is_some())
            })
        },
    );
    assert_eq!(
        hb.runtime_boot_id.as_ref().unwrap().as_str(),
        runtime.boot_id()
    );
    let capacity = hb.runtime_capacity.as_ref().unwrap();
    assert_eq!(capacity.allocated_memory_mb, 640);
    assert_eq!(
        capacity.cuda_devices.as_ref().unwrap()[0].memory_total_mib,
        22_528
    );
    assert!(!hb.runtime_stalled);
    let raw = controller.heartbeats().last().unwrap().clone();
    assert_eq!(
        raw["runtime_capacity"]["cuda_devices"][0]["memoryTotalMib"], 22_528,
        "forwarded as smolvm sent it: {raw}"
    );

    // Stalled: self-cordon.
    runtime.set_stalled(true);
    let seen = controller.heartbeats().len();
    let hb = wait_for("a stalled heartbeat", Duration::from_secs(10), || {
        last_heartbeat(&controller, seen).filter(|h| h.runtime_stalled)
    });
    assert!(hb.runtime_capacity.is_none());
    let (status, body) = agent.send(Method::POST, "/v1/spawn", Some(&image_body("m2")));
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "no_capacity");
    assert!(!runtime.machines().contains_key("m2"));

    // Answering again lifts it.
    runtime.set_stalled(false);
    let seen = controller.heartbeats().len();
    wait_for("an unstalled heartbeat", Duration::from_secs(10), || {
        last_heartbeat(&controller, seen)
            .filter(|h| !h.runtime_stalled && h.runtime_capacity.is_some())
    });
    let (status, body) = agent.send(Method::POST, "/v1/spawn", Some(&image_body("m2")));
    assert_eq!(status, 200, "{body}");

    // Deleting removes the machine from the runtime.
    assert_eq!(agent.send(Method::DELETE, "/v1/vms/m1", None).0, 204);
    wait_for(
        "m1 removed from the runtime",
        Duration::from_secs(10),
        || (!runtime.machines().contains_key("m1")).then_some(()),
    );
    assert!(
        runtime.calls().iter().any(|c| c == "DELETE m1"),
        "{:?}",
        runtime.calls()
    );
    assert!(runtime.machines().contains_key("m2"));
}

#[test]
fn a_failed_start_is_answered_reported_and_retried_with_backoff() {
    let runtime = StandinSmolvm::start();
    runtime.set_fail_starts(true);
    let (_controller, agent) = smolvm_agent(&runtime);

    let asked = Instant::now();
    let (status, body) = agent.send(Method::POST, "/v1/spawn", Some(&image_body("f1")));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "Error", "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains(START_FAILURE), "{body}");
    assert!(message.contains("500"), "{body}");
    // Created (it exists), not running.
    assert_eq!(runtime.machines()["f1"].state, "created");

    let reported = agent.wait_reported("f1 failed", Duration::from_secs(10), |r| {
        r.instances
            .iter()
            .find(|i| i.app_id.as_str() == "f1" && i.state == InstanceState::Failed)
            .cloned()
    });
    let text = serde_json::to_value(&reported.message).unwrap();
    assert!(
        text.to_string().contains("failed to start machine"),
        "{text}"
    );

    // Retried per the default policy (200 ms, doubling): a handful of starts, never a loop.
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(asked.elapsed()));
    let starts = runtime.calls().iter().filter(|c| *c == "start f1").count();
    assert!(
        (2..=5).contains(&starts),
        "{starts} starts in 2.5 s: {:?}",
        runtime.calls()
    );

    // Once the runtime can boot it, the next attempt succeeds.
    runtime.set_fail_starts(false);
    agent.wait_reported("f1 running", Duration::from_secs(15), |r| {
        r.instances
            .iter()
            .find(|i| {
                i.app_id.as_str() == "f1"
                    && i.state == InstanceState::Running
                    && i.message.is_none()
            })
            .map(|_| ())
    });
}

#[test]
fn usage_reaches_the_meters_and_stays_monotonic_across_vm_and_runtime_restarts() {
    let runtime = StandinSmolvm::start();
    let (controller, agent) = smolvm_agent(&runtime);
    let (status, body) = agent.send(Method::POST, "/v1/spawn", Some(&image_body("u1")));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "Running");
    // The first count the agent sees (0 at boot) is its origin.
    agent.wait_reported("u1 seen running", Duration::from_secs(10), |r| {
        r.instances
            .iter()
            .find(|i| i.app_id.as_str() == "u1" && i.compute.is_some())
            .map(|_| ())
    });

    runtime.set_usage("u1", 1500, 96, 300);
    let i = agent.wait_reported("u1 usage", Duration::from_secs(10), |r| {
        r.instances
            .iter()
            .find(|i| {
                i.app_id.as_str() == "u1" && i.meters.as_ref().is_some_and(|m| m.cpu_ms >= 1500)
            })
            .cloned()
    });
    let compute = i.compute.unwrap();
    assert_eq!(compute.memory_used_bytes, 96 << 20);
    assert_eq!(compute.memory_total_bytes, 640 << 20);
    assert_eq!(i.meters.as_ref().unwrap().cpu_ms, 1500);

    // A serve restart: new boot id, machines stopped; the driver boots u1 again and its CPU
    // count starts from 0 — the meter keeps what it had.
    let seen = controller.heartbeats().len();
    let old_boot = runtime.boot_id();
    runtime.restart();
    let hb = wait_for(
        "a heartbeat with the new boot id",
        Duration::from_secs(10),
        || {
            last_heartbeat(&controller, seen).filter(|h| {
                h.runtime_boot_id
                    .as_ref()
                    .is_some_and(|b| b.as_str() != old_boot)
            })
        },
    );
    assert_eq!(hb.runtime_boot_id.unwrap().as_str(), runtime.boot_id());
    wait_for("u1 started again", Duration::from_secs(10), || {
        (runtime.calls().iter().filter(|c| *c == "start u1").count() == 2
            && runtime.machines()["u1"].state == "running")
            .then_some(())
    });
    runtime.set_usage("u1", 200, 64, 310);
    let i = agent.wait_reported("u1 usage after its restart", Duration::from_secs(10), |r| {
        r.instances
            .iter()
            .find(|i| {
                i.app_id.as_str() == "u1" && i.meters.as_ref().is_some_and(|m| m.cpu_ms >= 1700)
            })
            .cloned()
    });
    let meters = i.meters.unwrap();
    assert_eq!(meters.cpu_ms, 1700);
    assert!(meters.disk_used_mib_seconds > 0, "{meters:?}");
    assert_eq!(i.restart_count, 1);
}
