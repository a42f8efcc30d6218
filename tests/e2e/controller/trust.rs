//! The controller's trust model, end to end against the real `fleetwire controller` over real
//! TLS (docs/security.md): nodes enroll with single-use bootstrap tokens and then act only as
//! themselves with the certificate they were issued; operators act with bearer tokens of a
//! scope; every refusal has its status and changes nothing stored.

use std::time::Duration;

use crate::support::controller_harness::*;
use fleetwire_types::{CreateBootstrapTokenRequest, NodeStatusFilter, RegisterNodeRequest};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use serde_json::{json, Value};
use x509_parser::extensions::GeneralName;

/// A CSR for `key` that asks for far more than a node may have: to be a CA, and extra names.
fn greedy_csr(key: &KeyPair, node_id: &str) -> String {
    let mut params =
        CertificateParams::new(vec![node_id.to_string(), "evil.example".to_string()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress("203.0.113.9".parse().unwrap()));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, "root");
    params.serialize_request(key).unwrap().pem().unwrap()
}

/// A node of the test: its key and the certificate the controller issued it.
struct Node {
    id: String,
    key: KeyPair,
    cert_pem: String,
}

impl Node {
    fn client(&self, controller: &ControllerProcess) -> reqwest::Client {
        tls_client(
            &controller.ca_pem(),
            Some((&self.cert_pem, &self.key.serialize_pem())),
        )
    }
}

fn register_body(node_id: &str, csr: &str) -> Value {
    let mut body = registration(node_id, 9, 100);
    body["csr_pem"] = csr.into();
    body
}

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let answer = request.send().await.expect("an answer");
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, value)
}

/// Mints a bootstrap token over the operator API (the typed client).
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
    assert_eq!(issued.status().as_u16(), 201);
    assert_eq!(issued.node_id.as_str(), node_id);
    assert!(issued.token.starts_with(issued.token_id.as_str()));
    issued.token.to_string()
}

/// Registers `node_id` with a bootstrap token (the typed client), asking for too much; returns
/// the node.
async fn enroll(controller: &ControllerProcess, node_id: &str, token: &str) -> Node {
    let key = KeyPair::generate().unwrap();
    let request: RegisterNodeRequest = typed(&register_body(node_id, &greedy_csr(&key, node_id)));
    let enrolling = controller.api(None).with_bootstrap_token(token).unwrap();
    let answer = enrolling
        .register_node(&request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answer.ca_pem.as_ref().unwrap().as_bytes(),
        controller.ca_pem().as_slice(),
        "the registration answer carries the fleet CA"
    );
    Node {
        id: node_id.to_string(),
        key,
        cert_pem: answer.cert_pem.expect("a certificate").to_string(),
    }
}

fn heartbeat(node_id: &str) -> Value {
    ppn_heartbeat(node_id, "127.0.0.1", 9)
}

/// The node list as a viewer sees it (the typed client): what must not change when a request
/// is refused.
async fn stored_nodes(controller: &ControllerProcess) -> Value {
    let viewer = controller.api(Some(VIEWER_TOKEN));
    let nodes = viewer
        .list_nodes(Some(&NodeStatusFilter::All))
        .await
        .unwrap();
    serde_json::to_value(nodes.into_inner()).unwrap()
}

fn assert_refused(status: u16, answer: &Value, expected: u16, code: &str) {
    assert_eq!(status, expected, "{answer}");
    assert_eq!(answer["code"], code, "{answer}");
    assert!(answer["message"].as_str().is_some_and(|m| !m.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_enroll_with_single_use_tokens_and_act_only_as_themselves() {
    let controller = ControllerProcess::start_secure(&[]);
    let anonymous = controller.tls_client();

    // No credential at all: 401, nothing enrolled.
    let key = KeyPair::generate().unwrap();
    let (status, answer) = send(
        anonymous
            .post(controller.url("/v1/nodes/register"))
            .json(&register_body("n1", &plain_csr(&key, "n1"))),
    )
    .await;
    assert_refused(status, &answer, 401, "unauthorized");
    assert_eq!(stored_nodes(&controller).await, json!([]));
    // Who asks is judged before the body (an API fuzzer's finding, docs/reliability/api-fuzz.md):
    // no credential and no CSR is 401 too; with a token, a missing CSR is 400 at /csr_pem and
    // the token is not spent.
    let (status, answer) = send(
        anonymous
            .post(controller.url("/v1/nodes/register"))
            .json(&registration("n1", 9, 100)),
    )
    .await;
    assert_refused(status, &answer, 401, "unauthorized");
    let token = mint(&controller, "n1").await;
    let (status, answer) = send(
        anonymous
            .post(controller.url("/v1/nodes/register"))
            .bearer_auth(&token)
            .json(&registration("n1", 9, 100)),
    )
    .await;
    assert_refused(status, &answer, 400, "invalid_document");
    assert_eq!(
        answer["violations"][0]["schema_path"], "/$defs/RegisterNodeRequest/properties/csr_pem",
        "{answer}"
    );
    assert_eq!(stored_nodes(&controller).await, json!([]));

    // The token for n1, unspent, enrolls n1 once; the certificate has only what the
    // controller decides.
    let n1 = enroll(&controller, "n1", &token).await;
    let (_, pem) = x509_parser::pem::parse_x509_pem(n1.cert_pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    assert_ne!(
        cert.basic_constraints().unwrap().map(|b| b.value.ca),
        Some(true),
        "never a CA"
    );
    let names: Vec<String> = cert
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(|name| match name {
            GeneralName::DNSName(dns) => dns.to_string(),
            GeneralName::IPAddress(ip) => format!("{ip:?}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(names, ["n1".to_string(), "[127, 0, 0, 1]".to_string()]);
    let enrolled = stored_nodes(&controller).await;
    assert_eq!(enrolled.as_array().unwrap().len(), 1);

    // The same token again: used.
    let key = KeyPair::generate().unwrap();
    let (status, answer) = send(
        anonymous
            .post(controller.url("/v1/nodes/register"))
            .bearer_auth(&token)
            .json(&register_body("n1", &plain_csr(&key, "n1"))),
    )
    .await;
    assert_refused(status, &answer, 401, "unauthorized");
    assert!(
        answer["message"].as_str().unwrap().contains("used"),
        "{answer}"
    );
    assert!(
        !answer.to_string().contains(&token),
        "the token is never echoed"
    );

    // A token for n2 used for n3: 403; the token stays good for n2.
    let token_n2 = mint(&controller, "n2").await;
    let (status, answer) = send(
        anonymous
            .post(controller.url("/v1/nodes/register"))
            .bearer_auth(&token_n2)
            .json(&register_body("n3", &plain_csr(&key, "n3"))),
    )
    .await;
    assert_refused(status, &answer, 403, "forbidden");
    // A wrong token: 401.
    let wrong = format!("{}.0000000000000000", &token_n2[..6]);
    let (status, answer) = send(
        anonymous
            .post(controller.url("/v1/nodes/register"))
            .bearer_auth(&wrong)
            .json(&register_body("n2", &plain_csr(&key, "n2"))),
    )
    .await;
    assert_refused(status, &answer, 401, "unauthorized");
    // A CSR altered after signing: 400 at /csr_pem; the token is not spent.
    let tampered = tamper(&plain_csr(&key, "n2"));
    let (status, answer) = send(
        anonymous
            .post(controller.url("/v1/nodes/register"))
            .bearer_auth(&token_n2)
            .json(&register_body("n2", &tampered)),
    )
    .await;
    assert_refused(status, &answer, 400, "invalid_document");
    assert_eq!(stored_nodes(&controller).await, enrolled, "nothing changed");
    let n2 = enroll(&controller, "n2", &token_n2).await;

    // Heartbeats: as itself, 200; without a certificate, 401; as another node, 403.
    let (status, answer) = send(
        n1.client(&controller)
            .post(controller.url("/v1/nodes/heartbeat"))
            .json(&heartbeat("n1")),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let before = stored_nodes(&controller).await;
    let (status, answer) = send(
        anonymous
            .post(controller.url("/v1/nodes/heartbeat"))
            .json(&heartbeat("n1")),
    )
    .await;
    assert_refused(status, &answer, 401, "unauthorized");
    let mut moved = heartbeat("n2");
    moved["wg_ip"] = "198.51.100.66".into();
    let (status, answer) = send(
        n1.client(&controller)
            .post(controller.url("/v1/nodes/heartbeat"))
            .json(&moved),
    )
    .await;
    assert_refused(status, &answer, 403, "forbidden");
    // The same through the router's own entry (a heartbeat path with a query is routed).
    assert_eq!(stored_nodes(&controller).await, before, "nothing changed");

    // A certificate from another CA never completes the handshake.
    let stranger_ca = tempfile::tempdir().unwrap();
    let other = fleetwire::controller::trust::certs::NodeCa::open_or_create(
        stranger_ca.path(),
        Duration::from_secs(3600),
    )
    .unwrap();
    let key = KeyPair::generate().unwrap();
    let forged = other
        .sign(
            &plain_csr(&key, "n1"),
            "n1",
            "127.0.0.1".parse().unwrap(),
            &[],
        )
        .unwrap();
    let forger = tls_client(
        &controller.ca_pem(),
        Some((&forged.cert_pem, &key.serialize_pem())),
    );
    let refused = forger
        .post(controller.url("/v1/nodes/heartbeat"))
        .json(&heartbeat("n1"))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(stored_nodes(&controller).await, before, "nothing changed");

    // Renewal over the current certificate: a new key, a new serial; the old one is done.
    let renewed_key = KeyPair::generate().unwrap();
    let (status, answer) = send(
        n1.client(&controller)
            .post(controller.url("/v1/nodes/register"))
            .json(&register_body("n1", &plain_csr(&renewed_key, "n1"))),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let renewed = Node {
        id: "n1".into(),
        key: renewed_key,
        cert_pem: answer["cert_pem"].as_str().unwrap().to_string(),
    };
    assert_ne!(renewed.cert_pem, n1.cert_pem);
    // Until the new certificate is presented the old one is still taken (the renewal's answer
    // might have been lost); from then on it is done.
    let old_beat = || {
        n1.client(&controller)
            .post(controller.url("/v1/nodes/heartbeat"))
            .json(&heartbeat("n1"))
    };
    assert_eq!(send(old_beat()).await.0, 200);
    let (status, _) = send(
        renewed
            .client(&controller)
            .post(controller.url("/v1/nodes/heartbeat"))
            .json(&heartbeat(&renewed.id)),
    )
    .await;
    assert_eq!(status, 200);
    let (status, answer) = send(old_beat()).await;
    assert_refused(status, &answer, 401, "unauthorized");

    // Unenrolled: the certificate is no longer accepted, and only a new token enrolls it.
    let (status, _) = send(
        anonymous
            .delete(controller.url("/v1/nodes/n2"))
            .bearer_auth(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(status, 204);
    let (status, _) = send(
        n2.client(&controller)
            .post(controller.url("/v1/nodes/heartbeat"))
            .json(&heartbeat(&n2.id)),
    )
    .await;
    assert_eq!(status, 404, "a forgotten node registers again");
    let (status, answer) = send(
        n2.client(&controller)
            .post(controller.url("/v1/nodes/register"))
            .json(&register_body("n2", &plain_csr(&n2.key, "n2"))),
    )
    .await;
    assert_refused(status, &answer, 401, "unauthorized");
    let again = mint(&controller, "n2").await;
    enroll(&controller, "n2", &again).await;

    // No secret reached the log; the operator's changes are logged by the token's name.
    let log = controller.log();
    for secret in [
        token.as_str(),
        token_n2.as_str(),
        again.as_str(),
        ADMIN_TOKEN,
        VIEWER_TOKEN,
    ] {
        let secret_part = secret.split('.').next_back().unwrap();
        assert!(!log.contains(secret_part), "a secret in the log:\n{log}");
    }
    assert!(log.contains("ops-admin"), "{log}");
}

/// A PEM CSR with one bit of its signed content flipped.
fn tamper(pem: &str) -> String {
    let (_, parsed) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let mut der = parsed.contents.clone();
    // Inside the subject public key, well past the headers: still parses, no longer verifies.
    let at = der.len() / 2;
    der[at] ^= 0x01;
    use base64::Engine;
    let body = base64::engine::general_purpose::STANDARD.encode(&der);
    let lines: String = body
        .as_bytes()
        .chunks(64)
        .map(|line| format!("{}\n", std::str::from_utf8(line).unwrap()))
        .collect();
    format!("-----BEGIN CERTIFICATE REQUEST-----\n{lines}-----END CERTIFICATE REQUEST-----\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_need_a_token_of_the_right_scope_and_health_stays_open() {
    let controller = ControllerProcess::start_secure(&[]);
    let anonymous = controller.tls_client();
    let get = |path: &str, token: Option<&str>| {
        let request = anonymous.get(controller.url(path));
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    };
    let (status, answer) = send(get("/v1/nodes", None)).await;
    assert_refused(status, &answer, 401, "unauthorized");
    let (status, answer) = send(get("/v1/fleet", Some("not-a-token"))).await;
    assert_refused(status, &answer, 401, "unauthorized");
    assert_eq!(send(get("/v1/fleet", Some(VIEWER_TOKEN))).await.0, 200);
    assert_eq!(send(get("/v1/vms", Some(ADMIN_TOKEN))).await.0, 200);

    // A read-only token on a write: 403, and nothing changes.
    let (status, answer) = send(
        anonymous
            .post(controller.url("/v1/tokens"))
            .bearer_auth(VIEWER_TOKEN)
            .json(&json!({"node_id": "n9"})),
    )
    .await;
    assert_refused(status, &answer, 403, "forbidden");
    let (status, answer) = send(
        anonymous
            .post(controller.url("/v1/vms"))
            .json(&json!({"vm_type": "process", "ram_mb": 64, "vcpu_count": 1})),
    )
    .await;
    assert_refused(status, &answer, 401, "unauthorized");

    // Open: health, readiness (which says how the port is served) and the reference site.
    let (status, health) = send(get("/healthz", None)).await;
    assert_eq!((status, &health["transport"]), (200, &json!("mtls")));
    let (status, ready) = send(get("/readyz", None)).await;
    assert_eq!((status, &ready["transport"]), (200, &json!("mtls")));
    let docs = anonymous
        .get(controller.url("/docs/"))
        .send()
        .await
        .unwrap();
    assert_eq!(docs.status(), 200);
    // Metrics take a token by default, and say the mode.
    assert_eq!(send(get("/metrics", None)).await.0, 401);
    let metrics = get("/metrics", Some(VIEWER_TOKEN))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("fleetwire_controller_transport_info{transport=\"mtls\"} 1"),
        "{metrics}"
    );

    // Plain HTTP on the TLS port gets nowhere.
    let plain = client()
        .get(format!("http://127.0.0.1:{}/healthz", controller.port))
        .send()
        .await;
    assert!(plain.map(|r| r.status() != 200).unwrap_or(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_be_opened_and_plain_http_takes_ppn_agents_and_says_so() {
    let open = ControllerProcess::start_secure(&["--metrics-auth", "none"]);
    let metrics = open
        .tls_client()
        .get(open.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);

    // --plain-http: an unmodified PPN agent's heartbeat enrolls its node, and anyone reads it
    // back, exactly as seed 003's procedure has it.
    let plain = ControllerProcess::start(&[]);
    heartbeat_ok(&client(), &plain, &ppn_body("ppn-7", "10.0.0.7")).await;
    let (status, node) = get_json(&client(), &plain.url("/v1/nodes/ppn-7")).await;
    assert_eq!(
        (status, &node["wg_ip"]),
        (200, &json!("10.0.0.7")),
        "{node}"
    );
    let (status, ready) = get_json(&client(), &plain.url("/readyz")).await;
    assert_eq!((status, &ready["transport"]), (200, &json!("plain_http")));
    let text = metrics_text(&client(), &plain).await;
    assert!(
        text.contains("fleetwire_controller_transport_info{transport=\"plain_http\"} 1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_refused_and_the_node_needs_a_new_token() {
    // Certificates that last three seconds.
    let controller = ControllerProcess::start_secure(&["--cert-validity", "3s"]);
    let token = mint(&controller, "brief").await;
    let node = enroll(&controller, "brief", &token).await;
    let (status, _) = send(
        node.client(&controller)
            .post(controller.url("/v1/nodes/heartbeat"))
            .json(&heartbeat("brief")),
    )
    .await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let refused = node
        .client(&controller)
        .post(controller.url("/v1/nodes/heartbeat"))
        .json(&heartbeat("brief"))
        .send()
        .await;
    // TLS 1.3 checks the client's certificate after the client has finished its side of the
    // handshake: the refusal reaches the client as the alert (certificate_expired) or as the
    // connection closed under its request, depending on timing. Either way, no answer.
    refused.expect_err("an expired certificate is refused");
    // A new token enrolls it again.
    let again = mint(&controller, "brief").await;
    enroll(&controller, "brief", &again).await;
}
