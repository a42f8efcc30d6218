//! smolvm 1.9.2 in fleet mode, for real (docs/interop.md, "smolvm 1.9.2 — fleet mode and the
//! engine version"): the real controller signs the agent's CSR at registration; the agent
//! keeps the certificate, its key and the fleet CA where smolvm (run as uid 65534, as
//! docs/agent.md tells operators) reads them; the real `smolvm serve` then serves `/api/v1`
//! only over mTLS with that certificate, the agent reaches it so and reads `/capacity` from
//! the plain loopback door, a client without a certificate from the fleet CA is refused, and
//! the controller probes `/health` over mTLS and records `engine_version` 1.9.2.
//!
//! Plain mode: a runtime the controller cannot reach is explained on the node record.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use std::time::Duration;

use crate::support::agent_harness::AgentProcess;
use crate::support::controller_harness::ControllerProcess;
use crate::support::real_smolvm::{free_port_pair, RealSmolvm};
use crate::support::{free_port, wait_for};
use serde_json::Value;

/// The unprivileged user smolvm runs as (`nobody`/`nogroup`), as in docs/interop.md.
const RUNTIME_UID: u32 = 65534;

/// A blocking client that trusts only the CAs in `ca` and presents `identity` (PEM cert + key)
/// if given. smolvm serves the node's certificate, which names no loopback address (issue 28):
/// the agent checks it by the node id it carries; this test client checks only its issuer.
fn tls_client(ca: &Path, identity: Option<(&Path, &Path)>) -> reqwest::blocking::Client {
    crate::support::install_crypto_provider();
    let cas = reqwest::Certificate::from_pem_bundle(&std::fs::read(ca).unwrap()).unwrap();
    let mut builder = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .danger_accept_invalid_hostnames(true)
        .tls_certs_only(cas);
    if let Some((cert, key)) = identity {
        let mut pem = std::fs::read(cert).unwrap();
        pem.push(b'\n');
        pem.extend(std::fs::read(key).unwrap());
        builder = builder.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    builder.build().unwrap()
}

fn get_json(client: &reqwest::blocking::Client, url: &str) -> Value {
    let answer = client
        .get(url)
        .send()
        .unwrap_or_else(|e| panic!("GET {url}: {e:?}"));
    assert_eq!(answer.status(), 200, "GET {url}");
    answer.json().unwrap()
}

fn node_record(controller: &ControllerProcess, node_id: &str) -> Option<Value> {
    crate::support::install_crypto_provider();
    let answer = reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(controller.url(&format!("/v1/nodes/{node_id}")))
        .send()
        .ok()?;
    (answer.status() == 200).then(|| answer.json().unwrap())
}

/// The count smolvm's own `/metrics` shows for requests to `path` with `method` and `status`.
fn requests_seen(door: u16, method: &str, path: &str, status: &str) -> u64 {
    crate::support::install_crypto_provider();
    let text = reqwest::blocking::get(format!("http://127.0.0.1:{door}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("smolvm_api_requests_total{"))
        .filter(|l| {
            l.contains(&format!("method=\"{method}\""))
                && l.contains(&format!("path=\"{path}\""))
                && l.contains(&format!("status=\"{status}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|n| n as u64)
        .sum()
}

/// A temporary directory smolvm's user can traverse (tempdir makes them 0700).
fn shared_root() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = temp.path().to_path_buf();
    (temp, root)
}

/// A fleetwire agent driving smolvm in fleet mode: https:// on its WireGuard address
/// (127.0.0.1 here) at a port whose next port (the loopback door) is free, keeping the TLS
/// files for smolvm's group; returned once it has written them.
struct FleetAgent {
    agent: AgentProcess,
    port: u16,
    runtime_address: String,
    /// cert.pem, key.pem, ca.pem in the agent's `VM_RUNTIME_TLS_DIR`.
    files: [PathBuf; 3],
}

fn start_fleet_agent(controller: &ControllerProcess, root: &Path) -> FleetAgent {
    let port = free_port_pair();
    let runtime_address = format!("https://127.0.0.1:{port}");
    let tls_dir = root.join("smolvm-tls");
    let tls_dir_arg = tls_dir.display().to_string();
    let gid = RUNTIME_UID.to_string();
    let agent = AgentProcess::start(
        &controller.url(""),
        &[
            ("VM_RUNTIME", "smolvm"),
            ("VM_RUNTIME_ADDRESS", &runtime_address),
            ("VM_RUNTIME_TLS_DIR", &tls_dir_arg),
            ("VM_RUNTIME_TLS_GID", &gid),
        ],
    );
    let [cert, key, ca] = ["cert.pem", "key.pem", "ca.pem"].map(|name| tls_dir.join(name));
    wait_for(
        "the agent to keep the certificate, key and CA for smolvm",
        Duration::from_secs(30),
        || (cert.exists() && key.exists() && ca.exists()).then_some(()),
    );
    FleetAgent {
        agent,
        port,
        runtime_address,
        files: [cert, key, ca],
    }
}

#[test]
#[ignore = "needs the real peers (../shared/peers): cargo test -p fleetwire --test e2e -- --ignored"]
fn fleet_mode_serves_the_agent_and_the_controller_over_mtls_with_the_certificate_the_controller_issued(
) {
    let (_temp, root) = shared_root();
    let ca_dir = root.join("controller-ca");
    let ca_arg = ca_dir.display().to_string();
    let controller = ControllerProcess::start(&["--ca-dir", &ca_arg, "--probe-interval", "1s"]);

    // The agent drives smolvm in fleet mode: https:// on its WireGuard address (127.0.0.1
    // here), and keeps the TLS files for smolvm's group.
    let FleetAgent {
        agent,
        port,
        runtime_address,
        files: [cert, key, ca],
    } = start_fleet_agent(&controller, &root);
    let key_meta = std::fs::metadata(&key).unwrap();
    assert_eq!(key_meta.permissions().mode() & 0o777, 0o640);
    assert_eq!(
        key_meta.gid(),
        RUNTIME_UID,
        "the key is the runtime group's"
    );
    assert_eq!(
        std::fs::read_to_string(&ca).unwrap(),
        format!(
            "{}{}",
            std::fs::read_to_string(ca_dir.join("ca.pem")).unwrap(),
            std::fs::read_to_string(ca_dir.join("node-ca.pem")).unwrap()
        ),
        "smolvm trusts the fleet CA (the controller's certificate) and the node CA (the agent's)"
    );

    // Before smolvm runs, the controller explains why it has no engine version yet.
    let record = wait_for(
        "the registered node to say why its engine version is unknown",
        Duration::from_secs(20),
        || node_record(&controller, "node-1").filter(|r| r["engine_version_problem"].is_string()),
    );
    assert_eq!(record["smolvm_address"], runtime_address, "{record}");
    assert!(record.get("engine_version").is_none(), "{record}");
    let problem = record["engine_version_problem"].as_str().unwrap();
    assert!(
        problem.contains(&format!("{runtime_address}/health")),
        "{problem}"
    );

    // smolvm starts in fleet mode on exactly the files the agent wrote.
    let smolvm = RealSmolvm::start_fleet_mode(port, [&cert, &key, &ca]);

    // The controller probes /health over mTLS with its own client certificate.
    let record = wait_for(
        "the controller to record engine_version 1.9.2",
        Duration::from_secs(30),
        || node_record(&controller, "node-1").filter(|r| r["engine_version"] == "1.9.2"),
    );
    assert!(record.get("engine_version_problem").is_none(), "{record}");

    // The agent lists machines on the mTLS port: smolvm's own metrics count its 200s.
    wait_for(
        "the agent's GET /api/v1/machines over mTLS",
        Duration::from_secs(30),
        || (requests_seen(smolvm.door(), "GET", "/api/v1/machines", "200") > 0).then_some(()),
    );

    // Capacity comes from the loopback door: smolvm's boot id and figures reach the node record.
    let plain = reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .unwrap();
    let capacity = get_json(
        &plain,
        &format!("http://127.0.0.1:{}/capacity", smolvm.door()),
    );
    let record = wait_for(
        "the runtime's /capacity figures on the node record",
        Duration::from_secs(30),
        || {
            node_record(&controller, "node-1")
                .filter(|r| r["boot_id"] == capacity["boot_id"] && r["memory_usage_mb"].is_u64())
        },
    );
    assert_eq!(record["status"], "ready", "{record}");

    // The node certificate opens smolvm's API to the test too (as to the agent) ...
    let node = tls_client(
        &ca,
        Some((
            &agent.state_dir.join("node.crt"),
            &agent.state_dir.join("node.key"),
        )),
    );
    let listing = get_json(&node, &format!("{runtime_address}/api/v1/machines"));
    assert!(listing["machines"].is_array(), "{listing}");
    let health = get_json(&node, &format!("{runtime_address}/health"));
    assert_eq!(health["version"], "1.9.2");

    // ... while a client without a certificate is refused, and so is one whose certificate
    // another CA signed.
    let anonymous = tls_client(&ca, None);
    let refused = anonymous
        .get(format!("{runtime_address}/api/v1/machines"))
        .send();
    assert!(
        refused.is_err(),
        "a client without a certificate got {:?}",
        refused.map(|r| r.status())
    );
    let stranger_dir = root.join("stranger");
    std::fs::create_dir_all(&stranger_dir).unwrap();
    let stranger_key = rcgen::KeyPair::generate().unwrap();
    let mut stranger_ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    stranger_ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let stranger_ca_key = rcgen::KeyPair::generate().unwrap();
    let mut client_params = rcgen::CertificateParams::new(vec!["node-1".to_string()]).unwrap();
    client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let stranger_cert = client_params
        .signed_by(
            &stranger_key,
            &rcgen::Issuer::new(stranger_ca, stranger_ca_key),
        )
        .unwrap();
    std::fs::write(stranger_dir.join("c.pem"), stranger_cert.pem()).unwrap();
    std::fs::write(stranger_dir.join("k.pem"), stranger_key.serialize_pem()).unwrap();
    let stranger = tls_client(
        &ca,
        Some((&stranger_dir.join("c.pem"), &stranger_dir.join("k.pem"))),
    );
    assert!(stranger
        .get(format!("{runtime_address}/health"))
        .send()
        .is_err());

    // The loopback door serves no API.
    let door_api = plain
        .get(format!(
            "http://127.0.0.1:{}/api/v1/machines",
            smolvm.door()
        ))
        .send()
        .unwrap();
    assert_eq!(door_api.status(), 404);
}

#[test]
#[ignore = "needs the real peers (../shared/peers): cargo test -p fleetwire --test e2e -- --ignored"]
fn fleet_mode_a_placement_creates_its_machine_in_smolvm_over_mtls() {
    let (_temp, root) = shared_root();
    let ca_dir = root.join("controller-ca");
    let ca_arg = ca_dir.display().to_string();
    // The agent reports this machine's free disk: cordon only a nearly full one (as `up` does).
    let controller = ControllerProcess::start(&[
        "--ca-dir",
        &ca_arg,
        "--disk-cordon-below",
        "1",
        "--disk-uncordon-above",
        "2",
    ]);
    let FleetAgent {
        agent,
        port,
        runtime_address,
        files: [cert, key, ca],
    } = start_fleet_agent(&controller, &root);
    let _smolvm = RealSmolvm::start_fleet_mode(port, [&cert, &key, &ca]);
    wait_for("the node to be ready", Duration::from_secs(30), || {
        node_record(&controller, "node-1").filter(|r| r["status"] == "ready")
    });

    // A placement through the controller: the agent creates the machine on the mTLS port.
    // (Its start fails here, without libkrun: the machine stays, created.)
    crate::support::install_crypto_provider();
    let _ = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
        .post(controller.url("/v1/vms"))
        .json(&serde_json::json!({
            "vm_type": "standard", "ram_mb": 256, "vcpu_count": 1, "disk_gb": 1,
            "vm_id": "fleet-m1", "image": "alpine:3.20", "network": true
        }))
        .send()
        .unwrap();
    let node = tls_client(
        &ca,
        Some((
            &agent.state_dir.join("node.crt"),
            &agent.state_dir.join("node.key"),
        )),
    );
    let machine = wait_for(
        "the placed machine in smolvm's own listing, read over mTLS",
        Duration::from_secs(60),
        || {
            let listing = get_json(&node, &format!("{runtime_address}/api/v1/machines"));
            listing["machines"]
                .as_array()?
                .iter()
                .find(|m| m["name"] == "fleet-m1")
                .cloned()
        },
    );
    assert_eq!(machine["cpus"], 1, "{machine}");
    assert_eq!(machine["memoryMb"], 256, "{machine}");
}

#[test]
fn plain_mode_a_runtime_the_controller_cannot_reach_is_explained_on_the_node_record() {
    let controller = ControllerProcess::start(&["--probe-interval", "1s"]);
    // Nothing listens here: the advertised runtime address cannot be probed.
    let port = free_port();
    let runtime_address = format!("http://127.0.0.1:{port}");
    let _agent = AgentProcess::start(
        &controller.url(""),
        &[
            ("VM_RUNTIME", "smolvm"),
            ("VM_RUNTIME_ADDRESS", &runtime_address),
        ],
    );
    let record = wait_for(
        "the probe's failure on the node record",
        Duration::from_secs(20),
        || {
            node_record(&controller, "node-1").filter(|r| {
                r["engine_version_problem"]
                    .as_str()
                    .is_some_and(|p| p.contains("/health"))
            })
        },
    );
    assert_eq!(record["smolvm_address"], runtime_address, "{record}");
    assert!(record.get("engine_version").is_none(), "{record}");
    let problem = record["engine_version_problem"].as_str().unwrap();
    assert!(
        problem.contains(&format!("GET {runtime_address}/health failed")),
        "{problem}"
    );
    assert!(problem.to_lowercase().contains("refused"), "{problem}");
}

#[test]
#[ignore = "needs the real peers (../shared/peers): cargo test -p fleetwire --test e2e -- --ignored"]
fn plain_mode_the_controller_records_the_engine_version_of_the_real_runtime() {
    let controller = ControllerProcess::start(&["--probe-interval", "1s"]);
    let port = free_port();
    let _smolvm = RealSmolvm::start_on(port);
    let runtime_address = format!("http://127.0.0.1:{port}");
    let _agent = AgentProcess::start(
        &controller.url(""),
        &[
            ("VM_RUNTIME", "smolvm"),
            ("VM_RUNTIME_ADDRESS", &runtime_address),
        ],
    );
    let record = wait_for(
        "engine_version 1.9.2 probed over plain HTTP",
        Duration::from_secs(30),
        || node_record(&controller, "node-1").filter(|r| r["engine_version"] == "1.9.2"),
    );
    assert!(record.get("engine_version_problem").is_none(), "{record}");
}
