//! A node acts only as itself (issue 28), attacked from the outside as an enrolled node would:
//! a real `fleetwire controller` in its default mTLS mode, a real `fleetwire agent` for the
//! honest node, and an impostor that enrolled with its own bootstrap token and certificate and
//! sends whatever heartbeats it likes.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::agent_harness::agent_command;
use crate::support::controller_harness::*;
use crate::support::{free_port, Running};
use fleetwire_types::{CreateBootstrapTokenRequest, CreateVmRequest, RegisterNodeRequest};
use rcgen::KeyPair;
use serde_json::{json, Value};

/// An enrolled node the test drives by hand: its key and certificate.
struct Impostor {
    key: KeyPair,
    cert_pem: String,
}

impl Impostor {
    fn client(&self, controller: &ControllerProcess) -> reqwest::Client {
        tls_client(
            &controller.ca_pem(),
            Some((&self.cert_pem, &self.key.serialize_pem())),
        )
    }
}

/// Mints a bootstrap token for `node_id` over the operator API.
async fn mint(controller: &ControllerProcess, node_id: &str) -> String {
    let request = CreateBootstrapTokenRequest {
        node_id: node_id.parse().unwrap(),
        ttl_s: Some(600),
    };
    let issued = controller
        .admin_api()
        .create_bootstrap_token(&request)
        .await
        .unwrap();
    issued.token.to_string()
}

/// Enrolls `body` (a registration without its CSR) with a fresh token and key.
async fn enroll(controller: &ControllerProcess, mut body: Value) -> Impostor {
    let node_id = body["node_id"].as_str().unwrap().to_string();
    let token = mint(controller, &node_id).await;
    let key = KeyPair::generate().unwrap();
    body["csr_pem"] = plain_csr(&key, &node_id).into();
    let request: RegisterNodeRequest = typed(&body);
    let answer = controller
        .api(None)
        .with_bootstrap_token(token.as_str())
        .unwrap()
        .register_node(&request)
        .await
        .unwrap_or_else(|e| panic!("{node_id} refused: {e}"))
        .into_inner();
    Impostor {
        key,
        cert_pem: answer.cert_pem.expect("a certificate").to_string(),
    }
}

/// A real agent in mTLS mode for `node_id` (process runtime), enrolling with a token from the
/// operator API; its log in `dir/agent.log`.
async fn real_agent(
    controller: &ControllerProcess,
    dir: &std::path::Path,
    node_id: &str,
) -> (Running, u16) {
    use std::os::unix::fs::PermissionsExt;
    let token_file = dir.join("bootstrap-token");
    std::fs::write(
        &token_file,
        format!("{}\n", mint(controller, node_id).await),
    )
    .unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let env: Vec<(String, String)> = [
        ("VM_NODE_ID", node_id.to_string()),
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
    let port = free_port();
    let mut command: Command = agent_command(&controller.url(""), &dir.join("state"), port, &env);
    command.stderr(Stdio::from(
        std::fs::File::create(dir.join("agent.log")).unwrap(),
    ));
    (Running::spawn(&mut command), port)
}

/// `GET /v1/vms/{id}` as the admin: (status, record).
async fn get_vm(controller: &ControllerProcess, vm_id: &str) -> (u16, Value) {
    let admin = tls_client(&controller.ca_pem(), None);
    let answer = admin
        .get(controller.url(&format!("/v1/vms/{vm_id}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

fn alive(pid: &str) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_listing_another_nodes_vm_is_set_aside_and_the_vm_stays_where_it_was_placed() {
    let controller = ControllerProcess::start_secure(&[
        "--disk-cordon-below",
        "1",
        "--disk-uncordon-above",
        "2",
    ]);
    let admin = controller.admin_api();
    let dir = tempfile::tempdir().unwrap();
    let (_agent, _) = real_agent(&controller, dir.path(), "node-a").await;
    eventually("node-a to be ready", Duration::from_secs(30), || async {
        let node = admin.get_node(&"node-a".parse().unwrap()).await.ok()?;
        (node.status == fleetwire_types::HostState::Ready).then_some(())
    })
    .await;

    // A VM placed on node-a, running as a real process there.
    let pid_file = dir.path().join("tenant.pid");
    let command = format!("echo $$ > {}; exec sleep 600", pid_file.display());
    let request: CreateVmRequest = typed(&json!({
        "vm_type": "process", "ram_mb": 64, "vcpu_count": 1, "preferred_node": "node-a",
        "command": ["/bin/sh", "-c", command]
    }));
    let vm = admin.create_vm(&request).await.unwrap().into_inner();
    let vm_id = vm.vm_id.to_string();
    let pid = eventually("the tenant to run", Duration::from_secs(20), || async {
        let pid = std::fs::read_to_string(&pid_file).ok()?;
        (!pid.trim().is_empty()).then(|| pid.trim().to_string())
    })
    .await;

    // node-b, enrolled with its own token and certificate, heartbeats that it runs node-a's VM
    // (and one of its own), twice.
    let impostor = enroll(&controller, registration("node-b", 9, 100)).await;
    let client = impostor.client(&controller);
    let mut body = ppn_heartbeat("node-b", "127.0.0.1", 9);
    body["vms"] = json!([
        {"vm_id": vm_id, "vm_type": "process", "state": "Running", "ram_alloc_mb": 64, "vcpu_count": 1},
        {"vm_id": "b-own-1", "vm_type": "process", "state": "Running", "ram_alloc_mb": 64, "vcpu_count": 1}
    ]);
    for _ in 0..2 {
        heartbeat_ok(&client, &controller, &body).await;
    }

    // The VM is still node-a's, listed once; node-b has only its own, and its record shows
    // what was set aside and why; the metric counts both attempts.
    let (status, record) = get_vm(&controller, &vm_id).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["node_id"], "node-a", "{record}");
    let listed = admin.list_vms(None).await.unwrap().into_inner();
    let owners: Vec<&str> = listed
        .iter()
        .filter(|v| v.vm_id.as_str() == vm_id)
        .filter_map(|v| v.node_id.as_ref().map(|n| n.as_str()))
        .collect();
    assert_eq!(owners, ["node-a"]);
    let node_b = serde_json::to_value(
        admin
            .get_node(&"node-b".parse().unwrap())
            .await
            .unwrap()
            .into_inner(),
    )
    .unwrap();
    assert_eq!(node_b["vm_count"], 1, "{node_b}");
    let rejected = &node_b["rejected_vms"];
    assert_eq!(rejected.as_array().map(Vec::len), Some(1), "{node_b}");
    assert_eq!(rejected[0]["index"], 0);
    assert_eq!(rejected[0]["vm_id"], vm_id.as_str());
    assert_eq!(rejected[0]["instance_path"], "/vms/0/vm_id");
    assert!(
        rejected[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("on node \"node-a\"")),
        "{rejected}"
    );
    let metrics = admin.get_metrics().await.unwrap().into_inner();
    assert!(
        metrics
            .lines()
            .any(|l| l == "fleetwire_controller_heartbeat_vm_entries_foreign_total 2"),
        "{metrics}"
    );
    assert!(controller
        .log()
        .contains("heartbeat lists VMs the controller records on other nodes"));

    // The operator's DELETE goes to node-a's agent: the real tenant stops, and the id is gone.
    assert!(alive(&pid));
    let deleted = admin.delete_vm(&vm.vm_id).await.unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    eventually("the tenant to stop", Duration::from_secs(20), || async {
        (!alive(&pid)).then_some(())
    })
    .await;
    assert_eq!(get_vm(&controller, &vm_id).await.0, 404);
}

/// `(status, ApiError)` of a raw heartbeat from `client`.
async fn heartbeat_answer(
    client: &reqwest::Client,
    controller: &ControllerProcess,
    body: &Value,
) -> (u16, Value) {
    post_json(client, &controller.url("/v1/nodes/heartbeat"), body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_can_neither_move_its_address_by_heartbeat_nor_pass_for_the_agent_it_points_at() {
    let controller = ControllerProcess::start_secure(&[
        "--disk-cordon-below",
        "1",
        "--disk-uncordon-above",
        "2",
    ]);
    let admin = controller.admin_api();
    let dir = tempfile::tempdir().unwrap();
    let (_agent, a_port) = real_agent(&controller, dir.path(), "node-a").await;
    eventually("node-a to be ready", Duration::from_secs(30), || async {
        let node = admin.get_node(&"node-a".parse().unwrap()).await.ok()?;
        (node.status == fleetwire_types::HostState::Ready).then_some(())
    })
    .await;

    // node-b registered at 127.0.0.1:9; its heartbeats cannot point the controller at
    // node-a's agent instead, neither by port nor by address.
    let impostor = enroll(&controller, registration("node-b", 9, 100)).await;
    let client = impostor.client(&controller);
    heartbeat_ok(
        &client,
        &controller,
        &ppn_heartbeat("node-b", "127.0.0.1", 9),
    )
    .await;
    for (body, pointer) in [
        (ppn_heartbeat("node-b", "127.0.0.1", a_port), "/spawn_port"),
        (ppn_heartbeat("node-b", "10.9.9.9", 9), "/wg_ip"),
    ] {
        let (status, answer) = heartbeat_answer(&client, &controller, &body).await;
        assert_eq!(status, 403, "{answer}");
        assert_eq!(answer["code"], "forbidden", "{answer}");
        assert_eq!(
            answer["violations"][0]["instance_path"], pointer,
            "{answer}"
        );
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|m| m.contains("registered at 127.0.0.1:9")),
            "{answer}"
        );
    }
    let node_b = admin.get_node(&"node-b".parse().unwrap()).await.unwrap();
    assert_eq!(node_b.wg_ip.0.to_string(), "127.0.0.1");
    assert_eq!(node_b.spawn_port.0.get(), 9);

    // node-c registers node-a's agent endpoint as its own (a registration names the port, and
    // node-a's agent shares its address): refused, since node addresses are unique among
    // nodes. Nothing is stored for node-c, and its token is not spent.
    let token = mint(&controller, "node-c").await;
    let key = KeyPair::generate().unwrap();
    let mut body = registration("node-c", a_port, 100);
    body["runtime"] = "process".into();
    body["csr_pem"] = plain_csr(&key, "node-c").into();
    let squatting = tls_client(&controller.ca_pem(), None)
        .post(controller.url("/v1/nodes/register"))
        .bearer_auth(&token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = squatting.status().as_u16();
    let answer: Value = squatting.json().await.unwrap();
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["code"], "conflict", "{answer}");
    assert_eq!(
        answer["violations"][0]["instance_path"], "/spawn_port",
        "{answer}"
    );
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("node-a") && m.contains(&format!("127.0.0.1:{a_port}"))),
        "the refusal names the node holding the endpoint: {answer}"
    );
    let missing = tls_client(&controller.ca_pem(), None)
        .get(controller.url("/v1/nodes/node-c"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(missing, 404, "a refused registration stores nothing");
    // The same token enrolls node-c at an endpoint of its own.
    body["spawn_port"] = 11.into();
    let (status, answer) = {
        let answer = tls_client(&controller.ca_pem(), None)
            .post(controller.url("/v1/nodes/register"))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap();
        (
            answer.status().as_u16(),
            answer.json::<Value>().await.unwrap(),
        )
    };
    assert_eq!(status, 200, "{answer}");
    // node-a's agent was never asked to run anything for node-c.
    let node_a = admin.get_node(&"node-a".parse().unwrap()).await.unwrap();
    assert_eq!(node_a.vm_count, 0);
}

fn assert_reserved(status: u16, answer: &Value) {
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["code"], "invalid_document", "{answer}");
    assert_eq!(
        answer["violations"][0]["instance_path"], "/node_id",
        "{answer}"
    );
    assert_eq!(
        answer["violations"][0]["keyword"], "x-fleetwire-reserved",
        "{answer}"
    );
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("is reserved")),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_names_and_local_host_names_are_refused_as_node_ids() {
    // mTLS mode: no bootstrap token is minted for them, over the API or with the CLI.
    let controller = ControllerProcess::start_secure(&[]);
    let admin = tls_client(&controller.ca_pem(), None);
    for node_id in ["register", "heartbeat", "localhost", "Node.LocalHost"] {
        let answer = admin
            .post(controller.url("/v1/tokens"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({"node_id": node_id}))
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        assert_reserved(status, &answer.json().await.unwrap());
    }
    let output = crate::support::fleetwire()
        .args(["token", "create", "--node-id", "localhost", "--data-dir"])
        .arg(&controller.dir)
        .arg("--db")
        .arg(controller.dir.join("controller.sqlite3"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("\"localhost\" is reserved"), "{stderr}");

    // Plain mode: neither a registration nor a PPN heartbeat enrolls them.
    let plain = ControllerProcess::start(&[]);
    let http = client();
    for node_id in ["register", "heartbeat", "localhost"] {
        let (status, answer) = post_json(
            &http,
            &plain.url("/v1/nodes/register"),
            &registration(node_id, 9, 100),
        )
        .await;
        assert_reserved(status, &answer);
        let (status, answer) = post_json(
            &http,
            &plain.url("/v1/nodes/heartbeat"),
            &ppn_body(node_id, "10.0.0.1"),
        )
        .await;
        assert_reserved(status, &answer);
    }
    let (status, nodes) = get_json(&http, &plain.url("/v1/nodes?status=all")).await;
    assert_eq!((status, nodes), (200, json!([])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_is_probed_only_at_the_nodes_registered_addresses() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // A runtime's /health that counts who asked.
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/health",
        axum::routing::get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { axum::Json(json!({"status": "ok", "version": "1.9.2"})) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let runtime = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let controller = ControllerProcess::start(&[]);
    let http = client();
    // p1 says it is 10.0.0.9 and names this host's loopback as its runtime: never probed.
    let mut body = registration("p1", 9, 100);
    body["wg_ip"] = "10.0.0.9".into();
    body["smolvm_address"] = runtime.clone().into();
    register_ok(&http, &controller, &body).await;
    let record = eventually(
        "p1's probe to be judged",
        Duration::from_secs(20),
        || async {
            let record = node_record(&http, &controller, "p1").await;
            record["engine_version_problem"]
                .as_str()
                .is_some_and(|p| p.contains("registered addresses"))
                .then_some(record)
        },
    )
    .await;
    assert!(record["engine_version"].is_null(), "{record}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    // p2 runs its runtime at its own address: probed, and its version recorded.
    let mut body = registration("p2", 9, 100);
    body["smolvm_address"] = runtime.into();
    register_ok(&http, &controller, &body).await;
    eventually("p2's engine version", Duration::from_secs(20), || async {
        let record = node_record(&http, &controller, "p2").await;
        (record["engine_version"] == "1.9.2").then_some(())
    })
    .await;
    assert!(hits.load(Ordering::SeqCst) > 0);
}

/// The operators' trust anchor validates no node certificate (issue 28). An enrolled node
/// that registered loopback and unspecified addresses serves its own certificate as an
/// impostor of the controller would, on 127.0.0.1: curl with the fleet CA operators are given
/// (`fleetwire up`'s banner `--cacert`, docs/security.md) refuses it, at that address and at the
/// node's own name. Only the node CA, which the controller alone trusts, validates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_certificate_never_passes_for_the_controller_with_the_operators_ca() {
    use crate::support::have_program;
    if !have_program("curl", "apt-get install -y curl")
        || !have_program("openssl", "apt-get install -y openssl")
    {
        return;
    }
    let controller = ControllerProcess::start_secure(&[]);
    let mut body = registration("posing", 9, 100);
    body["addresses"] = json!(["127.0.0.1", "0.0.0.0"]);
    let node = enroll(&controller, body).await;
    let dir = tempfile::tempdir().unwrap();
    let chain = dir.path().join("node.pem");
    let key = dir.path().join("node.key");
    std::fs::write(&chain, &node.cert_pem).unwrap();
    std::fs::write(&key, node.key.serialize_pem()).unwrap();
    let port = free_port();
    let _impostor = Running::spawn(
        Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(&chain)
            .arg("-cert_chain")
            .arg(&chain)
            .arg("-key")
            .arg(&key)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let curl = |ca: &std::path::Path, host: &str| {
        Command::new("curl")
            .args(["-sS", "-o", "/dev/null", "--max-time", "5", "--cacert"])
            .arg(ca)
            .arg("--resolve")
            .arg(format!("posing:{port}:127.0.0.1"))
            .arg(format!("https://{host}:{port}/"))
            .output()
            .unwrap()
    };
    let node_ca = controller.dir.join("ca/node-ca.pem");
    eventually("the impostor to serve", Duration::from_secs(10), || async {
        curl(&node_ca, "posing").status.success().then_some(())
    })
    .await;
    for host in ["127.0.0.1", "posing"] {
        let refused = curl(&controller.ca_path(), host);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success(),
            "curl --cacert ca.pem took the node's certificate at {host}"
        );
        assert!(
            stderr.contains("certificate"),
            "refused for its certificate at {host}: {stderr}"
        );
    }
    // Neither does the certificate name the loopback or unspecified address it asked for.
    let (_, pem) = x509_parser::pem::parse_x509_pem(node.cert_pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    let names = cert.subject_alternative_name().unwrap().unwrap();
    assert!(
        names
            .value
            .general_names
            .iter()
            .all(|name| !matches!(name, x509_parser::extensions::GeneralName::IPAddress(_))),
        "{:?}",
        names.value.general_names
    );
}

/// A node certificate the fleet CA's key signs (`ca.key`, which every controller host holds
/// and the operators' trust anchor is) is not taken for a node, even one naming an enrolled
/// node and the serial of its current certificate: only the node CA issues node identities in
/// a fleet that had it from its start (docs/security.md, "Upgrading a fleet of one CA"). The
/// controller refuses it in the handshake and logs why; the node's own certificate goes on
/// working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_certificate_signed_with_the_fleet_ca_key_is_not_taken_for_the_node() {
    let controller = ControllerProcess::start_secure(&[]);
    let node = enroll(&controller, registration("node-f", 9, 100)).await;
    let heartbeat = ppn_heartbeat("node-f", "127.0.0.1", 9);
    heartbeat_ok(&node.client(&controller), &controller, &heartbeat).await;

    // The same node, key and serial, signed by the fleet CA instead of the node CA.
    let (_, pem) = x509_parser::pem::parse_x509_pem(node.cert_pem.as_bytes()).unwrap();
    let issued = pem.parse_x509().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["node-f".to_string()]).unwrap();
    let mut name = rcgen::DistinguishedName::new();
    name.push(rcgen::DnType::OrganizationName, "fleetwire node");
    name.push(rcgen::DnType::CommonName, "node-f");
    params.distinguished_name = name;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(issued.raw_serial()));
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(1);
    params.not_after = now + time::Duration::hours(1);
    let ca_dir = controller.dir.join("ca");
    let fleet_key =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(ca_dir.join("ca.key")).unwrap()).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(
        &std::fs::read_to_string(ca_dir.join("ca.pem")).unwrap(),
        fleet_key,
    )
    .unwrap();
    let forged = params.signed_by(&node.key, &issuer).unwrap().pem();
    let forger = tls_client(
        &controller.ca_pem(),
        Some((&forged, &node.key.serialize_pem())),
    );
    let answer = forger
        .post(controller.url("/v1/nodes/heartbeat"))
        .json(&heartbeat)
        .send()
        .await;
    assert!(
        answer.is_err(),
        "a heartbeat with the forged certificate was answered: {:?}",
        answer.map(|a| a.status())
    );
    eventually("the refusal logged", Duration::from_secs(10), || async {
        controller
            .log()
            .contains("refused a node certificate of the fleet CA")
            .then_some(())
    })
    .await;
    heartbeat_ok(&node.client(&controller), &controller, &heartbeat).await;
}
