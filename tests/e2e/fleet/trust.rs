//! The whole trust model between real processes (docs/security.md): a controller in its default
//! mTLS mode with a fresh CA, a bootstrap token minted with `fleetwire token create`, a real
//! `fleetwire agent` that enrolls with it and heartbeats over mTLS, a machine placed through
//! the agent over mTLS, and the node certificate rotating while the heartbeats go on.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::agent_harness::agent_command;
use crate::support::controller_harness::*;
use crate::support::{fleetwire, free_port, Running};
use fleetwire_types::CreateVmRequest;
use serde_json::{json, Value};

/// The node's record as the admin reads it (the typed client): the status, and the record as
/// JSON (`Null` when refused).
async fn get_node(admin: &fleetwire_client::Client, node_id: &str) -> (u16, Value) {
    match admin.get_node(&node_id.parse().unwrap()).await {
        Ok(node) => (
            node.status().as_u16(),
            serde_json::to_value(node.into_inner()).unwrap(),
        ),
        Err(e) => (e.status().map_or(0, |s| s.as_u16()), Value::Null),
    }
}

/// Mints a token with the real CLI on the controller's data directory.
fn token_create(controller: &ControllerProcess, node_id: &str) -> String {
    let output = fleetwire()
        .args(["token", "create", "--node-id", node_id, "--ttl", "10m"])
        .arg("--data-dir")
        .arg(&controller.dir)
        .arg("--db")
        .arg(controller.dir.join("controller.sqlite3"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

fn secure_agent(controller: &ControllerProcess, dir: &std::path::Path, port: u16) -> Command {
    let token_file = dir.join("bootstrap-token");
    let env: Vec<(String, String)> = [
        ("VM_PLAIN_HTTP", "false".to_string()),
        ("VM_RUNTIME", "process".to_string()),
        (
            "VM_FLEET_CA_FILE",
            controller.ca_path().display().to_string(),
        ),
        ("VM_BOOTSTRAP_TOKEN_FILE", token_file.display().to_string()),
        ("RUST_LOG", "info".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut command = agent_command(&controller.url(""), &dir.join("state"), port, &env);
    let log = std::fs::File::create(dir.join("agent.log")).unwrap();
    command.stderr(Stdio::from(log));
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_enrolls_with_a_token_is_placed_on_over_mtls_and_rotates_its_certificate() {
    // Node certificates of 24 s: the agent renews them 16 s in.
    // The real agent reports this machine's free disk: cordon only when it is nearly full (as
    // `fleetwire up` does), not below a production host's 20 GB, or the placement has no node.
    let controller = ControllerProcess::start_secure(&[
        "--cert-validity",
        "24s",
        "--disk-cordon-below",
        "1",
        "--disk-uncordon-above",
        "2",
    ]);
    let admin = controller.admin_api();
    let dir = tempfile::tempdir().unwrap();
    let token = token_create(&controller, "node-1");
    {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join("bootstrap-token");
        std::fs::write(&path, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let port = free_port();
    let _agent = Running::spawn(&mut secure_agent(&controller, dir.path(), port));

    // Enrolled with the token, then ready by heartbeats over mTLS.
    let node = eventually("the node to be ready", Duration::from_secs(30), || async {
        let (status, node) = get_node(&admin, "node-1").await;
        (status == 200 && node["status"] == "ready").then_some(node)
    })
    .await;
    let first_serial = node["cert_serial"].as_str().unwrap().to_string();
    let state = dir.path().join("state");
    assert!(state.join("node.crt").exists() && state.join("ca.crt").exists());

    // A machine placed through the agent's local API, which takes only the controller's
    // certificate: the controller calls it over mTLS.
    let pid_file = dir.path().join("tenant.pid");
    let command = format!("echo $$ > {}; exec sleep 600", pid_file.display());
    let request: CreateVmRequest = typed(
        &json!({"vm_type": "process", "ram_mb": 64, "vcpu_count": 1, "command": ["/bin/sh", "-c", command]}),
    );
    let vm = admin.create_vm(&request).await.unwrap().into_inner();
    assert_eq!(vm.node_id.as_ref().map(|n| n.as_str()), Some("node-1"));
    eventually("the tenant to run", Duration::from_secs(20), || async {
        std::fs::read_to_string(&pid_file).ok().map(|_| ())
    })
    .await;

    // Nobody else gets in: no client certificate, or the operator's bare TLS client.
    let stranger = controller.tls_client();
    let refused = stranger
        .get(format!("https://127.0.0.1:{port}/v1/vms"))
        .send()
        .await;
    assert!(
        refused.is_err(),
        "the agent served a client without a certificate"
    );

    // The certificate rotates while the heartbeats go on: a new serial, and the node never
    // becomes unreachable (last_heartbeat keeps advancing).
    let started = Instant::now();
    let mut last_heartbeat = node["last_heartbeat"].as_str().unwrap().to_string();
    let mut beats = 0;
    let rotated = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (status, node) = get_node(&admin, "node-1").await;
        assert_eq!(status, 200);
        assert_eq!(node["status"], "ready", "{node}");
        let heard = node["last_heartbeat"].as_str().unwrap().to_string();
        if heard != last_heartbeat {
            beats += 1;
            last_heartbeat = heard;
        }
        let serial = node["cert_serial"].as_str().unwrap().to_string();
        if serial != first_serial {
            break serial;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "no rotation within 40 s"
        );
    };
    assert_ne!(rotated, first_serial);
    assert!(
        beats >= 5,
        "heartbeats kept coming during the wait: {beats}"
    );
    // Heartbeats go on after the rotation, over the new certificate.
    let before = last_heartbeat.clone();
    eventually(
        "a heartbeat over the new certificate",
        Duration::from_secs(10),
        || async {
            let (_, node) = get_node(&admin, "node-1").await;
            (node["last_heartbeat"].as_str() != Some(before.as_str())
                && node["cert_serial"] == rotated.as_str())
            .then_some(())
        },
    )
    .await;
    // The controller still reaches the agent after the rotation (its server certificate was
    // swapped in place): the machine is deleted through it.
    let deleted = admin.delete_vm(&vm.vm_id).await.unwrap();
    assert_eq!(deleted.status().as_u16(), 204);

    // No secret in either log.
    let secret = token.split('.').next_back().unwrap();
    let agent_log = std::fs::read_to_string(dir.path().join("agent.log")).unwrap();
    for log in [controller.log(), agent_log] {
        assert!(
            !log.contains(secret),
            "the bootstrap token in a log:\n{log}"
        );
        assert!(!log.contains(ADMIN_TOKEN), "an operator token in a log");
        assert!(!log.contains("PRIVATE KEY"), "a key in a log");
    }
}

/// The issuer of the first certificate of a PEM file, and the subject of another's.
fn issuer_and_subject(cert: &std::path::Path, ca: &std::path::Path) -> (String, String) {
    let read = |path: &std::path::Path| std::fs::read(path).unwrap();
    let cert = read(cert);
    let ca = read(ca);
    let (_, cert) = x509_parser::pem::parse_x509_pem(&cert).unwrap();
    let (_, ca) = x509_parser::pem::parse_x509_pem(&ca).unwrap();
    (
        cert.parse_x509().unwrap().issuer().to_string(),
        ca.parse_x509().unwrap().subject().to_string(),
    )
}

/// A fleet whose CA directory holds one CA for everything, as releases before the node CA had
/// it (`ca.pem` signing the nodes too), keeps working when its controller is upgraded (issue
/// 28; docs/security.md, "Upgrading a fleet of one CA"): the controller creates the node CA
/// beside `ca.pem` and keeps `ca.pem` as the fleet CA; the agent's certificate from `ca.pem` is
/// still taken; machines are placed through the agent before and after it renews into a
/// certificate of the node CA, with no step on the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_enrolled_under_one_ca_keeps_working_when_the_node_ca_is_created() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("controller");
    let ca_dir = data.join("ca");
    // The older layout: one CA, signing the nodes and the controller alike.
    crate::support::ca_init(&ca_dir);
    std::fs::copy(ca_dir.join("ca.pem"), ca_dir.join("node-ca.pem")).unwrap();
    std::fs::copy(ca_dir.join("ca.key"), ca_dir.join("node-ca.key")).unwrap();
    let fleet_ca = std::fs::read(ca_dir.join("ca.pem")).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    // Node certificates of 30 s: the agent renews them 20 s in.
    let args = [
        "--listen",
        listen.as_str(),
        "--cert-validity",
        "30s",
        "--disk-cordon-below",
        "1",
        "--disk-uncordon-above",
        "2",
    ];
    let controller = ControllerProcess::start_secure_in(&data, &args);
    let token = token_create(&controller, "node-1");
    let node_dir = temp.path().join("node");
    std::fs::create_dir_all(&node_dir).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let path = node_dir.join("bootstrap-token");
        std::fs::write(&path, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let port = free_port();
    let _agent = Running::spawn(&mut secure_agent(&controller, &node_dir, port));
    let admin = controller.admin_api();
    eventually("the node to be ready", Duration::from_secs(30), || async {
        let (status, node) = get_node(&admin, "node-1").await;
        (status == 200 && node["status"] == "ready").then_some(())
    })
    .await;
    let state = node_dir.join("state");
    let (issuer, fleet) = issuer_and_subject(&state.join("node.crt"), &ca_dir.join("ca.pem"));
    assert_eq!(issuer, fleet, "enrolled under the one CA");

    // The upgrade: the controller stops, the CA directory is as the older release left it
    // (no node CA), and the controller starts again on it.
    drop(admin);
    drop(controller);
    std::fs::remove_file(ca_dir.join("node-ca.pem")).unwrap();
    std::fs::remove_file(ca_dir.join("node-ca.key")).unwrap();
    let controller = ControllerProcess::start_secure_in(&data, &args);
    assert!(
        controller.log().contains("created the node CA"),
        "{}",
        controller.log()
    );
    assert_eq!(
        std::fs::read(ca_dir.join("ca.pem")).unwrap(),
        fleet_ca,
        "ca.pem is kept"
    );
    // The store pinned the new node CA, and takes node certificates of ca.pem until the end
    // of the last one it knew: node-1's (docs/security.md, "Upgrading a fleet of one CA").
    let (node_ca, until): (String, String) =
        rusqlite::Connection::open(data.join("controller.sqlite3"))
            .unwrap()
            .query_row(
                "SELECT node_sha256, node_legacy_until FROM fleet_ca",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
    assert!(!node_ca.is_empty());
    let held = std::fs::read(state.join("node.crt")).unwrap();
    let (_, held) = x509_parser::pem::parse_x509_pem(&held).unwrap();
    let ends = held.parse_x509().unwrap().validity().not_after.timestamp();
    let until = chrono::DateTime::parse_from_rfc3339(&until)
        .unwrap()
        .timestamp();
    assert!((until - ends).abs() <= 1, "{until} against {ends}");
    let admin = controller.admin_api();
    let place = |name: &str| {
        let pid_file = node_dir.join(format!("{name}.pid"));
        let command = format!("echo $$ > {}; exec sleep 600", pid_file.display());
        let request: CreateVmRequest = typed(&json!({
            "vm_id": name, "vm_type": "process", "ram_mb": 64, "vcpu_count": 1,
            "command": ["/bin/sh", "-c", command]
        }));
        (request, pid_file)
    };
    // Before its renewal: the agent's certificate from ca.pem is taken, both ways.
    eventually(
        "a heartbeat to the upgraded controller",
        Duration::from_secs(20),
        || async {
            let (status, node) = get_node(&admin, "node-1").await;
            (status == 200 && node["status"] == "ready").then_some(())
        },
    )
    .await;
    let (request, pid_file) = place("before-renewal");
    admin.create_vm(&request).await.unwrap();
    eventually(
        "the first tenant to run",
        Duration::from_secs(20),
        || async { std::fs::read_to_string(&pid_file).ok().map(|_| ()) },
    )
    .await;
    // After it: a certificate of the node CA, and the agent is still placed on.
    eventually(
        "the agent's certificate from the node CA",
        Duration::from_secs(40),
        || async {
            let (issuer, node_ca) =
                issuer_and_subject(&state.join("node.crt"), &ca_dir.join("node-ca.pem"));
            (issuer == node_ca).then_some(())
        },
    )
    .await;
    assert_eq!(
        std::fs::read(state.join("ca.crt")).unwrap(),
        fleet_ca,
        "the agent still pins ca.pem"
    );
    let (request, pid_file) = place("after-renewal");
    admin.create_vm(&request).await.unwrap();
    eventually(
        "the second tenant to run",
        Duration::from_secs(20),
        || async { std::fs::read_to_string(&pid_file).ok().map(|_| ()) },
    )
    .await;
    let (_, node) = get_node(&admin, "node-1").await;
    assert_eq!(node["status"], "ready", "{node}");
}
