//! Both directions with the REAL PPN programs (commit f39485af, built by
//! ../shared/peers/build.sh), unmodified:
//!
//! 1. PPN's host agent `service-vm-host` enrolls in the real `fleetwire controller` by its
//!    heartbeats (a node id with dots), and receives the controller's spawn calls on its
//!    port, the controller's default spawn port; the VM ids it makes from a `vm_type` with
//!    dots and spaces, or of 53+ characters, are accepted.
//! 2. The real `fleetwire agent` (a node id with dots) enrolls in PPN's controller
//!    `service-vm-fleet` and receives that controller's spawn: the VM runs, appears in the
//!    controller's listings, stays there through the agent's heartbeats, and is deleted.
//!
//! `service-vm-fleet` listens on the fixed 0.0.0.0:9203, so only one can run per machine:
//! everything is one test function, and it takes a lock file so that another test process
//! running it waits; when something else holds 9203 the test fails saying so.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::agent_harness::AgentProcess;
use crate::support::controller_harness::*;
use crate::support::real_peers::binary;
use crate::support::{free_port, wait_for, Running};
use fleetwire_types::{HostState, InstanceState, NodeRecord, VmRecord};
use serde_json::{json, Value};

/// PPN's controller port, fixed in `service-vm-fleet`.
const PPN_PORT: u16 = 9203;

/// Holds an exclusive lock on a file in the temporary directory while it lives.
struct PortLock(#[allow(dead_code)] std::fs::File);

impl PortLock {
    fn take() -> PortLock {
        let path = std::env::temp_dir().join("fleetwire-ppn-9203.lock");
        let file = std::fs::File::create(&path).expect("creating the lock file");
        // Released when the file is closed.
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
        PortLock(file)
    }
}

/// `GET url`, or `None` while nothing answers there yet.
fn try_get(url: &str) -> Option<(u16, String)> {
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let response = client.get(url).send().ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().unwrap_or_default()))
}

fn blocking(method: reqwest::Method, url: &str, body: Option<&Value>) -> (u16, String) {
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut request = client.request(method, url);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().unwrap_or_default())
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
#[ignore = "needs the real peers (../shared/peers): cargo test -p fleetwire --test e2e -- --ignored"]
fn fleetwire_and_the_real_ppn_programs_work_in_both_directions() {
    crate::support::install_crypto_provider();
    let host_bin = binary("service-vm-host");
    let fleet_bin = binary("service-vm-fleet");
    let scratch = tempfile::tempdir().unwrap();

    let started = std::time::Instant::now();
    ppn_agent_in_fleetwire_controller(&host_bin, scratch.path());
    eprintln!(
        "service-vm-host -> fleetwire controller: {:?}",
        started.elapsed()
    );

    let _lock = PortLock::take();
    if let Err(e) = TcpListener::bind(("0.0.0.0", PPN_PORT)) {
        panic!(
            "port {PPN_PORT} is taken ({e}): service-vm-fleet listens on the fixed \
             0.0.0.0:{PPN_PORT}; stop whatever holds it (a fleetwire controller on its default \
             port, another PPN controller) and run the test again"
        );
    }
    let started = std::time::Instant::now();
    fleetwire_agent_in_ppn_controller(&fleet_bin, scratch.path());
    eprintln!(
        "fleetwire agent -> service-vm-fleet: {:?}",
        started.elapsed()
    );
}

/// Direction 1: `service-vm-host` → `fleetwire controller`.
fn ppn_agent_in_fleetwire_controller(host_bin: &std::path::Path, scratch: &std::path::Path) {
    let spawn_port = free_port();
    let spawn_port_text = spawn_port.to_string();
    // The PPN agent does not say its port: the controller calls it on its default spawn port.
    // A short staleness limit lets the test see a placed VM the agent never reports pruned.
    let controller = ControllerProcess::start(&[
        "--default-spawn-port",
        &spawn_port_text,
        "--stale-after",
        "3s",
    ]);
    let node_id = "ppn-host.dc1.example";
    let disk_dir = scratch.join("vm-fleet");
    std::fs::create_dir_all(&disk_dir).unwrap();
    let _agent = Running::spawn(
        Command::new(host_bin)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("VM_FLEET_ENDPOINT", controller.url(""))
            .env("VM_NODE_ID", node_id)
            .env("VM_WG_IP", "127.0.0.1")
            .env("VM_SPAWN_PORT", &spawn_port_text)
            .env("VM_HEARTBEAT_INTERVAL_S", "1")
            // Where it would keep disks, sockets and pid files: the test's own directory,
            // and a base image that does not exist, so a spawn fails before QEMU.
            .env("VM_DISK_DIR", &disk_dir)
            .env("VM_BASE_IMAGE", scratch.join("no-such-base-image.img"))
            .env("RUST_LOG", "service_vm_host=info")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );

    // Enrolled by its first heartbeat, under its dotted id, on the default spawn port.
    let node: NodeRecord = wait_for(
        "the PPN agent's node record",
        Duration::from_secs(20),
        || {
            let (status, text) = try_get(&controller.url(&format!("/v1/nodes/{node_id}")))?;
            (status == 200)
                .then(|| fleetwire_types::read_strict(text.as_bytes()).expect("a NodeRecord"))
        },
    );
    assert_eq!(node.node_id.as_str(), node_id);
    assert_eq!(node.status, HostState::Ready);
    assert_eq!(node.spawn_port.0.get(), spawn_port);
    assert!(node.ram_available_mb > 0);
    assert!(node.rejected_vms.is_none());

    // fleetwire's spawn reaches the agent: the record it answers names the VM the PPN way,
    // {vm_type lowercased}-{unix seconds}, which only the agent does. Without a base image or
    // QEMU it answers "Provisioning" at once and fails in the background (logged only): PPN's
    // agent never answers a spawn with an error.
    for vm_type in [
        "GPU.Large".to_string(),
        format!("Tenant VM {}", "w".repeat(50)),
    ] {
        let before = chrono::Utc::now().timestamp();
        let (status, text) = blocking(
            reqwest::Method::POST,
            &controller.url("/v1/vms"),
            Some(&json!({"vm_type": vm_type, "ram_mb": 64, "vcpu_count": 1,
                         "tenant_id": "acme.corp"})),
        );
        assert_eq!(status, 200, "POST /v1/vms: {text}");
        let vm: VmRecord = fleetwire_types::read_strict(text.as_bytes()).expect("a VmRecord");
        let (stem, seconds) = vm.vm_id.rsplit_once('-').expect("{vm_type}-{seconds}");
        assert_eq!(stem, vm_type.to_lowercase());
        assert!(seconds.parse::<i64>().unwrap() >= before);
        assert_eq!(vm.vm_type.as_str(), vm_type);
        assert_eq!(vm.state.to_string(), "Provisioning");
        assert_eq!(vm.node_id.as_deref().map(|n| n.as_str()), Some(node_id));
        assert_eq!(
            vm.tenant_id.as_deref().map(|t| t.as_str()),
            Some("acme.corp")
        );
        let (_, listed) = blocking(
            reqwest::Method::GET,
            &controller.url("/v1/vms?tenant_id=acme.corp"),
            None,
        );
        assert!(
            json_of(&listed)
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["vm_id"] == vm.vm_id.as_str()),
            "{listed}"
        );
        // Each PPN VM id has one-second resolution: the next type gets its own second.
        std::thread::sleep(Duration::from_millis(1100));
    }

    // The agent never started them (no QEMU), so its heartbeats never list them: once the
    // grace for a fresh placement is over they are dropped, and the node stays ready.
    wait_for(
        "the unstarted VMs to be dropped",
        Duration::from_secs(20),
        || {
            let (_, listed) = blocking(reqwest::Method::GET, &controller.url("/v1/vms"), None);
            json_of(&listed)
                .as_array()
                .unwrap()
                .is_empty()
                .then_some(())
        },
    );
    let (_, text) = blocking(
        reqwest::Method::GET,
        &controller.url(&format!("/v1/nodes/{node_id}")),
        None,
    );
    let node: NodeRecord = fleetwire_types::read_strict(text.as_bytes()).unwrap();
    assert_eq!(node.status, HostState::Ready);

    // A node whose agent is not on the controller's spawn port: 502 agent_failed, saying
    // which call failed (the PPN contract's 502 when the node's agent fails).
    let elsewhere = ControllerProcess::start(&["--default-spawn-port", &free_port().to_string()]);
    let mut heartbeat = ppn_body("ppn-host-2.dc1.example", "127.0.0.1");
    heartbeat["hostname"] = json!("h");
    let (status, text) = blocking(
        reqwest::Method::POST,
        &elsewhere.url("/v1/nodes/heartbeat"),
        Some(&heartbeat),
    );
    assert_eq!(status, 200, "{text}");
    let (status, text) = blocking(
        reqwest::Method::POST,
        &elsewhere.url("/v1/vms"),
        Some(&json!({"vm_type": "small", "ram_mb": 64, "vcpu_count": 1})),
    );
    assert_eq!(status, 502, "{text}");
    let error = json_of(&text);
    assert_eq!(error["code"], "agent_failed");
    assert!(
        error["message"].as_str().unwrap().contains("/v1/spawn"),
        "{error}"
    );
}

/// Direction 2: `fleetwire agent` → `service-vm-fleet`.
fn fleetwire_agent_in_ppn_controller(fleet_bin: &std::path::Path, scratch: &std::path::Path) {
    let node_id = "fw-node.dc1.example";
    let agent = AgentProcess::start(
        &format!("http://127.0.0.1:{PPN_PORT}"),
        &[("VM_NODE_ID", node_id), ("VM_DEFAULT_COMMAND", "sleep 600")],
    );
    // PPN calls every agent on one port, VM_HOST_SPAWN_PORT: here, this agent's port.
    let _fleet = Running::spawn(
        Command::new(fleet_bin)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("VM_HOST_SPAWN_PORT", agent.port.to_string())
            .env("RUST_LOG", "service_vm_fleet=info")
            .current_dir(scratch)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let ppn = |path: &str| format!("http://127.0.0.1:{PPN_PORT}{path}");

    // Enrolled by heartbeat under its dotted id; the agent sees the controller.
    let node = wait_for("the node in PPN's listing", Duration::from_secs(30), || {
        let (status, text) = try_get(&ppn(&format!("/v1/nodes/{node_id}")))?;
        (status == 200).then(|| json_of(&text))
    });
    assert_eq!(node["node_id"], node_id);
    assert_eq!(node["wg_ip"], "127.0.0.1");
    agent.wait_reported("the agent to be ready", Duration::from_secs(30), |r| {
        (r.state == HostState::Ready).then_some(())
    });

    // PPN's spawn, delegated to our agent: a vm_type with a dot and 53+ characters.
    let vm_type = format!("Svc.Web {}", "p".repeat(50));
    let (status, text) = blocking(
        reqwest::Method::POST,
        &ppn("/v1/vms"),
        Some(&json!({"vm_type": vm_type, "ram_mb": 64, "vcpu_count": 1,
                     "tenant_id": "acme.corp", "preferred_node": node_id})),
    );
    assert_eq!(status, 200, "POST /v1/vms on service-vm-fleet: {text}");
    let created = json_of(&text);
    assert_eq!(created["vm_type"], vm_type.as_str());
    assert_eq!(created["state"], "Running", "{created}");
    assert_eq!(created["tenant_id"], "acme.corp");
    let vm_id = created["vm_id"].as_str().unwrap().to_string();
    agent.wait_reported("the VM to run on the node", Duration::from_secs(20), |r| {
        r.instances
            .iter()
            .any(|i| i.state == InstanceState::Running)
            .then_some(())
    });

    // Listed by PPN, also after our heartbeats replaced the node's VM list a few times.
    std::thread::sleep(Duration::from_secs(3));
    let (_, listed) = blocking(
        reqwest::Method::GET,
        &ppn("/v1/vms?tenant_id=acme.corp"),
        None,
    );
    let listed = json_of(&listed);
    let vm = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vm_id"] == vm_id.as_str())
        .unwrap_or_else(|| panic!("{vm_id} not in {listed}"));
    assert_eq!(vm["state"], "Running");
    assert_eq!(vm["vm_type"], vm_type.as_str());
    let (_, node) = blocking(
        reqwest::Method::GET,
        &ppn(&format!("/v1/nodes/{node_id}")),
        None,
    );
    assert_eq!(json_of(&node)["vm_count"], 1);

    // PPN's delete reaches the agent, which stops the VM.
    let (status, text) = blocking(
        reqwest::Method::DELETE,
        &ppn(&format!("/v1/vms/{vm_id}")),
        None,
    );
    assert_eq!(status, 204, "{text}");
    agent.wait_reported("the VM to be gone", Duration::from_secs(20), |r| {
        r.instances.is_empty().then_some(())
    });
    wait_for("PPN's listing to empty", Duration::from_secs(10), || {
        let (_, listed) = blocking(reqwest::Method::GET, &ppn("/v1/vms"), None);
        json_of(&listed)
            .as_array()
            .unwrap()
            .is_empty()
            .then_some(())
    });
}
