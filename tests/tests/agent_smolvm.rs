//! The smolvm driver against a stand-in smolvm runtime (the runtime API's shapes, nothing run):
//! machines are created, started, stopped and removed through `/api/v1/machines`; the
//! heartbeat forwards the runtime's boot id and capacity; a 503 from `/capacity` self-cordons
//! the node (heartbeat `runtime_stalled`, spawns refused) until it answers again.

use std::time::Duration;

use fleetwire_e2e::agent_harness::{spawn_body, AgentProcess};
use fleetwire_e2e::standin_ppn_controller::StandinPpnController;
use fleetwire_e2e::standin_smolvm::StandinSmolvm;
use fleetwire_e2e::wait_for;
use fleetwire_types::{InstanceState, NodeHeartbeat};
use reqwest::Method;

fn last_heartbeat(controller: &StandinPpnController, after: usize) -> Option<NodeHeartbeat> {
    let beats = controller.heartbeats();
    let raw = beats.get(after..)?.last()?;
    Some(fleetwire_types::read_value_strict(raw).expect("a valid NodeHeartbeat"))
}

#[test]
fn the_smolvm_driver_drives_the_runtime_api_and_self_cordons_on_503() {
    let runtime = StandinSmolvm::start();
    let port = fleetwire_e2e::free_port();
    let controller = StandinPpnController::start(0, port);
    let runtime_url = runtime.url();
    let agent = AgentProcess::start(
        &controller.url(),
        &[
            ("VM_RUNTIME", "smolvm"),
            ("VM_RUNTIME_ADDRESS", runtime_url.as_str()),
        ],
    );

    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&spawn_body("m1", &["/bin/app", "--serve"])),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "Running");
    let machine = runtime.machines()["m1"].clone();
    assert_eq!(machine["state"], "running");
    assert_eq!(machine["cpus"], 1);
    assert_eq!(machine["mem"], 64);
    assert_eq!(machine["cmd"], serde_json::json!(["/bin/app", "--serve"]));
    assert_eq!(machine["storage_gb"], 1);
    agent.wait_reported("m1 running", Duration::from_secs(10), |r| {
        r.instances
            .iter()
            .find(|i| i.app_id.as_str() == "m1" && i.state == InstanceState::Running)
            .map(|_| ())
    });

    // The heartbeat forwards what the runtime says.
    let hb = wait_for(
        "a heartbeat with the runtime's figures",
        Duration::from_secs(10),
        || {
            last_heartbeat(&controller, 0).filter(|h| {
                h.vms.len() == 1
                    && h.runtime_capacity
                        .as_ref()
                        .is_some_and(|c| c.allocated_memory_mb > 0)
            })
        },
    );
    assert_eq!(
        hb.runtime_boot_id.as_ref().unwrap().as_str(),
        runtime.boot_id
    );
    assert_eq!(
        hb.runtime_capacity.as_ref().unwrap().allocated_memory_mb,
        64
    );
    assert!(!hb.runtime_stalled);
    assert_eq!(hb.vms.len(), 1);

    // Stalled: self-cordon.
    runtime.set_stalled(true);
    let seen = controller.heartbeats().len();
    let hb = wait_for("a stalled heartbeat", Duration::from_secs(10), || {
        last_heartbeat(&controller, seen).filter(|h| h.runtime_stalled)
    });
    assert!(hb.runtime_capacity.is_none());
    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&spawn_body("m2", &["/bin/app"])),
    );
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
    let (status, body) = agent.send(
        Method::POST,
        "/v1/spawn",
        Some(&spawn_body("m2", &["/bin/app"])),
    );
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
